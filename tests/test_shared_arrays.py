"""Ordinary NumPy arrays in the shared arena (``shmcoll.shared_arrays``): where they are
allocated, that peers reach them directly (``algorithm="direct"`` refuses private
buffers), that results are right with every rank, some ranks or no rank using the arena,
and the allocator's bookkeeping (zeroing, resize, reuse, fork)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import check_all, run_ranks

pytestmark = pytest.mark.timeout(120)

N = 1 << 16  # float64 elements: 512 KiB, above the default threshold


def allocation_rules() -> list[str]:
    fails = []

    def want(cond: bool, what: str) -> None:
        if not cond:
            fails.append(what)

    before = shmcoll.shared_arrays_info()
    want(not before["exists"] and before["min_bytes"] is None, f"fresh process: {before}")
    with shmcoll.shared_arrays():
        big, small = np.ones(N), np.ones(100)
        want(shmcoll.in_shared_arena(big), "np.ones of 512 KiB not in the arena")
        want(not shmcoll.in_shared_arena(small), "a small array in the arena")
        want(shmcoll.in_shared_arena(big * 2), "a large temporary not in the arena")
        # A freed block is reused dirty: zeros must still be zeros.
        dirty = np.full(N, 7.0)
        addr = dirty.__array_interface__["data"][0]
        del dirty
        z = np.zeros(N)
        want(z.__array_interface__["data"][0] == addr, "the freed block was not reused")
        want(not z.any(), "np.zeros over a reused block is not zero")
        # realloc: growing keeps the data and zero-fills the rest.
        r = np.arange(N, dtype=np.float64)
        r.resize(4 * N, refcheck=False)
        want(shmcoll.in_shared_arena(r), "a resized array left the arena")
        want(np.array_equal(r[:N], np.arange(N)) and not r[N:].any(), "resize lost data")
        with shmcoll.shared_arrays(min_bytes=1 << 20):  # nested, higher threshold
            want(not shmcoll.in_shared_arena(np.ones(N)), "nested threshold ignored")
        want(shmcoll.in_shared_arena(np.ones(N)), "the outer threshold was not restored")
        used = shmcoll.shared_arrays_info()["in_use"]
        del r
        want(shmcoll.shared_arrays_info()["in_use"] == used - 4 * N * 8, "resize leaked")
    want(not shmcoll.in_shared_arena(np.ones(N)), "the handler outlived the block")
    want(float(big.sum()) == N, "an arena array broke after the block")  # outlives it
    del big, z
    info = shmcoll.shared_arrays_info()
    want(info["in_use"] == 0, f"blocks left after every array was freed: {info}")
    try:
        with shmcoll.shared_arrays(min_bytes=0):
            pass
        fails.append("min_bytes=0 accepted")
    except shmcoll.ArgumentError:
        pass
    return fails


def test_large_arrays_come_from_the_arena_and_go_back_to_it() -> None:
    check_all(run_ranks(1, allocation_rules))


def collectives_on(placement: str) -> list[str]:
    """`placement`: every rank in the arena ("all"), only rank 0 ("rank0"), or arrays
    from an arena that the communicator predates ("late")."""
    me_env = int(os.environ.get("SHMCOLL_RANK", "0"))
    uses = placement == "all" or (placement == "rank0" and me_env == 0)
    fails: list[str] = []
    ctx: Any = shmcoll.shared_arrays() if uses else None
    if placement == "late":
        comm = shmcoll.Comm()
        ctx = shmcoll.shared_arrays()
        ctx.__enter__()
    else:
        if ctx is not None:
            ctx.__enter__()
        comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    reachable = placement != "late" and uses
    x = np.full(N, me + 1.0)
    if comm.in_heap(x) != reachable:
        fails.append(f"in_heap {comm.in_heap(x)}, expected {reachable}")
    tri = p * (p + 1) / 2
    all_reach = placement == "all"
    algorithms = [None] + (["direct"] if all_reach else [])
    for alg in algorithms:
        y = np.empty(N)
        comm.Allreduce(x, y, algorithm=alg)
        if not (y == tri).all():
            fails.append(f"Allreduce {alg}: {y[:3]}")
        g = np.empty(N * p)
        comm.Allgather(x, g, algorithm=alg)
        if not np.array_equal(g, np.repeat(np.arange(1.0, p + 1), N)):
            fails.append(f"Allgather {alg}")
        b = np.arange(N, dtype=np.float64) if me == p - 1 else np.empty(N)
        comm.Bcast(b, root=p - 1, algorithm=alg)
        if not np.array_equal(b, np.arange(N, dtype=np.float64)):
            fails.append(f"Bcast {alg}")
        s = np.add.outer(np.arange(p) * 100.0 + me, np.zeros(N // p)).ravel()
        r = np.empty(N // p * p)
        comm.Alltoall(s, r, algorithm="push" if alg else None)  # its direct copy
        got = r.reshape(p, -1)[:, 0]
        if not np.array_equal(got, me * 100.0 + np.arange(p)):
            fails.append(f"Alltoall {alg}: {got}")
        ip = np.full(N, me + 1.0)
        comm.Allreduce(shmcoll.IN_PLACE, ip, algorithm=alg)
        if not (ip == tri).all():
            fails.append(f"Allreduce in place {alg}")
    if not all_reach:
        try:
            comm.Allreduce(x, np.empty(N), algorithm="direct")
            fails.append("direct served a private buffer")
        except shmcoll.AlgorithmError:
            pass
    comm.Free()
    if ctx is not None:
        ctx.__exit__(None, None, None)
    return fails


@pytest.mark.parametrize("nranks", [2, 3, 4])
@pytest.mark.parametrize("placement", ["all", "rank0", "late"])
def test_collectives_on_shared_arrays(nranks: int, placement: str) -> None:
    check_all(run_ranks(nranks, collectives_on, placement))


def forked_child_frees_nothing_it_did_not_allocate() -> list[str]:
    with shmcoll.shared_arrays():
        parent_array = np.ones(N)
        pid = os.fork()
        if pid == 0:
            # The child has the array object but not the arena's pages: freeing it must
            # neither crash nor reach the C allocator, and the child gets its own arena.
            del parent_array
            with shmcoll.shared_arrays():
                mine = np.ones(N)
                ok = shmcoll.in_shared_arena(mine) and float(mine.sum()) == N
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        fails = [] if status == 0 else [f"child exited with status {status}"]
        if float(parent_array.sum()) != N:
            fails.append("the parent's array changed")
        return fails


def test_a_forked_child_neither_frees_nor_sees_the_parents_arena() -> None:
    check_all(run_ranks(1, forked_child_frees_nothing_it_did_not_allocate))
