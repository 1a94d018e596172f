"""Ordinary NumPy arrays in the shared arena (``shmcoll.shared_arrays``): where they are
allocated, that peers reach them directly (``algorithm="direct"`` refuses private
buffers), that results are right with every rank, some ranks or no rank using the arena,
and the allocator's bookkeeping (bounds, threads, zeroing, resize, reuse, fork)."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import check_all, environ, run_ranks

pytestmark = pytest.mark.timeout(120)

N = 1 << 16  # float64 elements: 512 KiB, above the default threshold


def allocation_rules() -> list[str]:
    fails = []

    def want(cond: bool, what: str) -> None:
        if not cond:
            fails.append(what)

    info = shmcoll.shared_arrays_info()
    # 4 MiB, or 64 MiB where the kernel gives the arena's large arrays huge pages
    # (tests/test_shared_arrays_huge.py).
    hi = (64 << 20) if info["huge_pages"] else (4 << 20)
    want(
        info["installed"] and (info["min_bytes"], info["max_bytes"]) == (8 << 10, hi),
        f"not on by default after import: {info}",
    )
    big, small, huge = np.ones(N), np.ones(100), np.ones(hi // 8 + (1 << 18))
    want(shmcoll.in_shared_arena(big), "np.ones of 512 KiB not in the arena")
    want(not shmcoll.in_shared_arena(small), "a small array in the arena")
    want(not shmcoll.in_shared_arena(huge), "an array above max_bytes in the arena")
    want(shmcoll.in_shared_arena(np.ones(hi // 8)), "an array of exactly max_bytes not in the arena")
    want(not shmcoll.in_shared_arena(np.ones(hi // 8 + 1)), "max_bytes + 8 in the arena")
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
        with shmcoll.private_arrays():
            want(not shmcoll.in_shared_arena(np.ones(N * 4)), "private_arrays() ignored")
        want(shmcoll.in_shared_arena(np.ones(N * 4)), "the nested bounds were not restored")
    want(shmcoll.in_shared_arena(np.ones(N)), "the default bounds were not restored")
    used = shmcoll.shared_arrays_info()["in_use"]
    del r
    want(shmcoll.shared_arrays_info()["in_use"] == used - 4 * N * 8, "resize leaked")
    shmcoll.disable_shared_arrays()
    want(not shmcoll.in_shared_arena(np.ones(N)), "disable_shared_arrays() ignored")
    want(float(big.sum()) == N, "an arena array broke after opting out")  # outlives it
    shmcoll.enable_shared_arrays()
    want(shmcoll.in_shared_arena(np.ones(N)), "enable_shared_arrays() ignored")
    del big, z
    info = shmcoll.shared_arrays_info()
    want(info["in_use"] == 0, f"blocks left after every array was freed: {info}")
    for bad in ({"min_bytes": 0}, {"min_bytes": 10, "max_bytes": 5}):
        try:
            with shmcoll.shared_arrays(**bad):
                pass
            fails.append(f"{bad} accepted")
        except shmcoll.ArgumentError:
            pass
    # Every thread, not only the one that imported shmcoll.
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(shmcoll.in_shared_arena(np.ones(N))))
    t.start()
    t.join()
    want(got == [True], f"another thread's array: {got}")
    return fails


def threads_allocating_concurrently() -> list[str]:
    """Threads allocate, fill, check and free arena arrays at the same time (NumPy releases
    the GIL in fills and reductions, so the allocator sees concurrent callers)."""
    errors: list[str] = []

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        for k in range(300):
            n = int(rng.integers(2048, 1 << 17))
            a = np.full(n, float(t * 1000 + k))
            if not (shmcoll.in_shared_arena(a) and a.sum() == n * float(t * 1000 + k)):
                errors.append(f"thread {t} iteration {k}")
            del a

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    info = shmcoll.shared_arrays_info()
    if info["in_use"] != 0:
        errors.append(f"blocks left: {info}")
    return errors


def test_threads_allocate_concurrently() -> None:
    check_all(run_ranks(1, threads_allocating_concurrently))


def test_large_arrays_come_from_the_arena_and_go_back_to_it() -> None:
    check_all(run_ranks(1, allocation_rules))


def collectives_on(placement: str) -> list[str]:
    """`placement`: arrays allocated after the communicator on every rank ("all"), before
    it ("before"), only rank 0's in the arena ("rank0"), or from an arena created after
    the communicator ("late": started with SHMCOLL_SHARED_ARRAYS=0, enabled later)."""
    me_env = int(os.environ.get("SHMCOLL_RANK", "0"))
    uses = placement != "rank0" or me_env == 0
    fails: list[str] = []
    if not uses:
        shmcoll.disable_shared_arrays()
    early = np.full(N, me_env + 1.0)
    comm = shmcoll.Comm()
    if placement == "late":
        if shmcoll.shared_arrays_info()["installed"]:
            fails.append("SHMCOLL_SHARED_ARRAYS=0 did not keep the arena off")
        shmcoll.enable_shared_arrays()
    p, me = comm.size, comm.rank
    reachable = uses
    x = early if placement == "before" else np.full(N, me + 1.0)
    if comm.in_heap(x) != reachable:
        fails.append(f"in_heap {comm.in_heap(x)}, expected {reachable}")
    tri = p * (p + 1) / 2
    all_reach = placement != "rank0"
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
    shmcoll.enable_shared_arrays()
    return fails


@pytest.mark.parametrize("nranks", [2, 3, 4])
@pytest.mark.parametrize("placement", ["all", "before", "rank0"])
def test_collectives_on_shared_arrays(nranks: int, placement: str) -> None:
    check_all(run_ranks(nranks, collectives_on, placement))


@pytest.mark.parametrize("nranks", [2, 3])
def test_an_arena_younger_than_the_communicator_is_reached(nranks: int) -> None:
    # Fresh processes (spawn), so that the environment decides at import.
    with environ({"SHMCOLL_SHARED_ARRAYS": "0"}):
        check_all(shmcoll.spawn(nranks, collectives_on, "late", start_method="spawn", timeout=90))


def _mp_child(a: np.ndarray, q: Any) -> None:
    q.put((float(a.sum()), shmcoll.in_shared_arena(a)))
    a[:] = -1.0  # private to the child


def fork_keeps_its_meaning() -> list[str]:
    """A forked child sees its parent's arena arrays as they were at the fork; neither sees
    the other's later writes; the child's own arrays come from its own arena; freeing the
    inherited arrays is harmless. The same through multiprocessing's fork start method."""
    fails: list[str] = []
    a = np.full(N, 1.0)
    if not shmcoll.in_shared_arena(a):
        return ["the array is not in the arena"]
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        os.read(go_r, 1)  # the parent has overwritten `a` by now
        code = 0
        if not (a == 1.0).all():
            code |= 1  # saw the parent's write (or lost the value)
        a[:] = 3.0
        os.write(done_w, b"x")
        mine = np.ones(N)
        if not (shmcoll.in_shared_arena(mine) and float(mine.sum()) == N):
            code |= 2
        del a, mine
        if shmcoll.shared_arrays_info()["in_use"] != 0:
            code |= 4
        os._exit(code)
    a[:] = 2.0
    os.write(go_w, b"x")
    os.read(done_r, 1)  # the child has written 3.0 into its `a`
    if not (a == 2.0).all():
        fails.append("the child's write reached the parent")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        fails.append(f"child exit status {os.waitstatus_to_exitcode(status)} (1 saw, 2 own, 4 leak)")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_mp_child, args=(a, q))
    p.start()
    seen = q.get(timeout=30)
    p.join(30)
    if seen != (2.0 * N, True) or p.exitcode != 0:
        fails.append(f"multiprocessing child saw {seen}, exit {p.exitcode}")
    if not (a == 2.0).all():
        fails.append("the multiprocessing child's write reached the parent")
    return fails


def test_fork_keeps_its_meaning() -> None:
    # In the test process itself: multiprocessing refuses children of daemonic ranks.
    check_all([fork_keeps_its_meaning()])


def test_children_that_exec_are_unaffected() -> None:
    """subprocess (vfork/posix_spawn, or fork then exec) and an explicit fork + exec run as
    usual with arena arrays alive, and leave them as they were."""
    import subprocess
    import sys

    a = np.full((1 << 19) - 1024, 5.0)  # just under 4 MiB: in the arena
    assert shmcoll.in_shared_arena(a)
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0
    pid = os.fork()
    if pid == 0:
        os.execv("/bin/true", ["true"])
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert (a == 5.0).all()
