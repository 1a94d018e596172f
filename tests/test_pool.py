"""Communicators on pooled segments, in real processes: a freed communicator's segment
serves the next communicator of the same ranks (Dup, Split, Comm(comm)), whatever order
the ranks free in, never while one rank still holds it, never for other ranks or another
rank order, and never when one rank does not pool it; collectives on a reused segment give
the right values (after a one-sided call ended the freed communicator, too); heap arrays of
the freed communicator stay valid and apart from the new one's; an invalid setting on one
rank raises on every rank at creation; a segment from before this process made its
shared-array arena is not reused (the arena would stay out of the peers' reach).
`Comm.config()["segment"]` names the segment.
The MPI side (Comm(MPI comm), Dup and Split of it) is tests/mpi_scripts/pooled_creation.py.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import MPI_SCRIPTS, environ, run_mpiexec, run_ranks

pytestmark = pytest.mark.timeout(90)


def _name(c: shmcoll.Comm) -> str:
    return str(c.config()["segment"])


def _check(c: shmcoll.Comm, salt: int) -> list[str]:
    """An Allreduce, an Alltoall and a Bcast on `c` with values that depend on `salt`."""
    p, me = c.size, c.rank
    bad = []
    total = np.empty(5, np.int64)
    c.Allreduce(np.arange(5, dtype=np.int64) * (me + 1) + salt, total)
    want = np.arange(5) * sum(range(1, p + 1)) + salt * p
    if not np.array_equal(total, want):
        bad.append(f"Allreduce salt {salt}: {total.tolist()} != {want.tolist()}")
    got = np.empty(3 * p, np.int64)
    c.Alltoall((np.arange(3 * p, dtype=np.int64) + 100 * me + salt), got)
    want = np.concatenate([np.arange(3 * me, 3 * me + 3) + 100 * j + salt for j in range(p)])
    if not np.array_equal(got, want):
        bad.append(f"Alltoall salt {salt}: {got.tolist()}")
    b = np.full(4, salt + 7 if me == p - 1 else -1, np.int64)
    c.Bcast(b, root=p - 1)
    if not (b == salt + 7).all():
        bad.append(f"Bcast salt {salt}: {b.tolist()}")
    return bad


def _dups(count: int) -> tuple[list[str], list[str]]:
    world = shmcoll.Comm()
    names, bad = [], []
    for i in range(count):
        c = world.Dup()
        names.append(_name(c))
        bad += _check(c, i)
        c.Free()
    world.Free()
    return names, bad


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_a_freed_communicators_segment_serves_the_next_one(nranks: int) -> None:
    res = run_ranks(nranks, _dups, 6)
    for names, bad in res:
        assert not bad, bad
        assert len(set(names)) == 1, names
    assert len({tuple(r[0]) for r in res}) == 1, "every rank took the same segment"


def test_with_the_pool_off_every_communicator_gets_a_new_segment() -> None:
    res = run_ranks(2, _dups, 4, env={"SHMCOLL_POOL_SEGMENTS": "0"})
    for names, bad in res:
        assert not bad, bad
        assert len(set(names)) == 4, names


def _interleaved() -> tuple[set[str], set[str], list[str]]:
    world = shmcoll.Comm()
    me = world.rank
    a, b = world.Dup(), world.Dup()
    before = {_name(a), _name(b)}
    bad = _check(a, 1) + _check(b, 2)
    for c in (a, b) if me % 2 == 0 else (b, a):
        c.Free()
    c1, c2 = world.Dup(), world.Dup()
    after = {_name(c1), _name(c2)}
    for i in range(4):
        bad += _check(c1 if i % 2 else c2, 10 + i)
    c2.Free()
    c1.Free()
    world.Free()
    return before, after, bad


def test_ranks_that_free_in_different_orders_still_reuse_both_segments() -> None:
    for before, after, bad in run_ranks(3, _interleaved):
        assert not bad, bad
        assert len(before) == 2 and after == before, (before, after)


def _held_by_one_rank() -> tuple[bool, bool, list[str]]:
    world = shmcoll.Comm()
    me = world.rank
    a = world.Dup()
    first = _name(a)
    if me != 0:
        a.Free()
    b = world.Dup()  # rank 0 still holds a: b cannot be on a's segment
    b_on_a = _name(b) == first
    bad = _check(b, 3)
    if me == 0:
        bad += [] if _name(a) == first else ["a changed"]
        a.Free()
    c = world.Dup()  # now every rank has freed a
    c_on_a = _name(c) == first
    bad += _check(c, 4)
    c.Free()
    b.Free()
    world.Free()
    return b_on_a, c_on_a, bad


def test_a_segment_one_rank_still_holds_is_not_reused() -> None:
    for b_on_a, c_on_a, bad in run_ranks(3, _held_by_one_rank):
        assert not bad, bad
        assert not b_on_a and c_on_a


def _one_rank_without_pool() -> tuple[bool, list[str]]:
    world = shmcoll.Comm()
    if world.rank == 1:
        os.environ["SHMCOLL_POOL_SEGMENTS"] = "0"
    a = world.Dup()
    first = _name(a)
    bad = _check(a, 5)
    a.Free()
    os.environ.pop("SHMCOLL_POOL_SEGMENTS", None)
    b = world.Dup()
    reused = _name(b) == first
    bad += _check(b, 6)
    b.Free()
    world.Free()
    return reused, bad


def test_a_segment_one_rank_did_not_pool_is_not_reused() -> None:
    for reused, bad in run_ranks(3, _one_rank_without_pool):
        assert not bad, bad
        assert not reused


def _after_a_fatal_error() -> tuple[bool, bool, list[str]]:
    world = shmcoll.Comm()
    a = world.Dup()
    first = _name(a)
    if world.rank == 0:
        a._abort("a test breaks it")
    try:
        a.Barrier()
        broke = False
    except shmcoll.ShmcollError:
        broke = True
    a.Free()
    b = world.Dup()
    reused = _name(b) == first
    bad = _check(b, 7)
    b.Free()
    world.Free()
    return broke, reused, bad


def test_a_broken_communicators_segment_is_not_reused() -> None:
    for broke, reused, bad in run_ranks(2, _after_a_fatal_error):
        assert not bad, bad
        assert broke and not reused


def _splits() -> tuple[list[int], list[bool], list[str]]:
    world = shmcoll.Comm()
    me = world.rank
    bad: list[str] = []
    reused = []
    members = []
    prev = None
    # The same groups twice, then the same groups in reversed rank order: another order
    # of the same processes is another communicator's layout.
    for i, key in enumerate((me, me, -me)):
        sub = world.Split(me % 2, key)
        assert sub is not None
        send = np.full(sub.size, me, np.int64)
        got = np.empty(sub.size, np.int64)
        sub.Alltoall(send, got)
        members.append(got.tolist())
        bad += _check(sub, 20 + i)
        reused.append(prev is not None and _name(sub) == prev)
        prev = _name(sub)
        sub.Free()
    none = world.Split(-1 if me == 0 else 0, me)
    if me == 0 and none is not None:
        bad.append("a negative color gave a communicator")
    if none is not None:
        bad += _check(none, 30)
        none.Free()
    world.Free()
    return members[-1], reused, bad


def test_split_groups_reuse_their_segments_only_in_the_same_rank_order() -> None:
    res = run_ranks(4, _splits)
    for r, (members, reused, bad) in enumerate(res):
        assert not bad, bad
        assert members == sorted((j for j in range(4) if j % 2 == r % 2), reverse=True)
        assert reused == [False, True, False], reused


def _heap_across_reuse() -> list[str]:
    world = shmcoll.Comm()
    me = world.rank
    a = world.Dup()
    x = a.zeros(4096, np.int64)
    x[:] = np.arange(4096) + 1000 * me
    first = _name(a)
    a.Free()
    b = world.Dup()
    bad = [] if _name(b) == first else ["the segment was not reused"]
    y = b.zeros(4096, np.int64)
    lo_x, lo_y = x.ctypes.data, y.ctypes.data
    if lo_x < lo_y + y.nbytes and lo_y < lo_x + x.nbytes:
        bad.append("a heap block of the freed communicator was handed out again")
    src = b.empty(4096 * b.size, np.int64)
    src[:] = me
    dst = b.empty(4096 * b.size, np.int64)
    b.Alltoall(src, dst)
    y[:] = -1
    if not np.array_equal(dst, np.repeat(np.arange(b.size), 4096)):
        bad.append("Alltoall on heap arrays of the reused segment")
    if not np.array_equal(x, np.arange(4096) + 1000 * me):
        bad.append("the freed communicator's heap array changed")
    b.Free()
    world.Free()
    return bad


def test_heap_arrays_of_a_freed_communicator_stay_valid_and_apart() -> None:
    for bad in run_ranks(2, _heap_across_reuse):
        assert not bad, bad


def _one_sided_then_free(rounds: int) -> tuple[set[str], list[str]]:
    world = shmcoll.Comm()
    me = world.rank
    names, bad = set(), []
    for i in range(rounds):
        c = world.Dup()
        names.add(_name(c))
        bad += _check(c, 40 + i)
        # A small Bcast is one-sided: its root leaves before the others have read it, and
        # Free follows at once.
        b = np.full(8, i if me == 0 else -1, np.int64)
        c.Bcast(b, root=0)
        if not (b == i).all():
            bad.append(f"Bcast {i}: {b.tolist()}")
        c.Free()
    world.Free()
    return names, bad


def test_a_one_sided_last_call_leaves_a_reusable_segment() -> None:
    for names, bad in run_ranks(3, _one_sided_then_free, 5):
        assert not bad, bad
        assert len(names) == 1


def _arena_since() -> tuple[list[bool], list[bool]]:
    """A communicator freed before this process had a shared-array arena, then two made
    under one: arrays in the arena must be in their reach."""
    world = shmcoll.Comm()
    a = world.Dup()
    names = [_name(a)]
    a.Free()
    reach = []
    with shmcoll.shared_arrays():
        x = np.full(1 << 16, 1.0)
        for _ in range(2):
            b = world.Dup()
            names.append(_name(b))
            reach.append(b.in_heap(x))
            y = np.empty(1 << 16)
            b.Allreduce(x, y, algorithm="direct")  # refuses buffers out of reach
            b.Free()
    world.Free()
    return reach, [n == names[0] for n in names[1:]] + [names[1] == names[2]]


def test_a_segment_from_before_the_shared_array_arena_serves_it_too() -> None:
    # Ranks that start with shared arrays off: the arena appears after the first
    # communicator was freed; its segment serves again and the arena is announced on it.
    with environ({"SHMCOLL_SHARED_ARRAYS": "0"}):
        for reach, same in shmcoll.spawn(2, _arena_since, start_method="spawn", timeout=60):
            assert reach == [True, True]
            assert same == [True, True, True], same


def _rebound() -> tuple[bool, list[str]]:
    """Rank 0 binds itself to one CPU between two duplicates: the peers' waits read the
    CPU each rank announced, so the segment that announced it unbound does not serve."""
    world = shmcoll.Comm()
    a = world.Dup()
    first = _name(a)
    a.Free()
    if world.rank == 0:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    b = world.Dup()
    reused = _name(b) == first
    bad = _check(b, 60)
    b.Free()
    world.Free()
    return reused, bad


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a process free to run on 2 CPUs")
def test_a_segment_from_before_a_rank_was_bound_is_not_reused() -> None:
    for reused, bad in run_ranks(2, _rebound, env={"SHMCOLL_BIND": "none"}):
        assert not bad, bad
        assert not reused


def _bad_setting_on(rank: int) -> dict[str, Any]:
    world = shmcoll.Comm()
    out: dict[str, Any] = {}
    if world.rank == rank:
        os.environ["SHMCOLL_TIMEOUT"] = "soon"
    try:
        world.Dup()
        out["error"] = None
    except shmcoll.ShmcollError as e:
        out["error"] = type(e).__name__
        out["msg"] = str(e)
    os.environ.pop("SHMCOLL_TIMEOUT", None)
    c = world.Dup()  # everyone recovers together
    out["bad"] = _check(c, 50)
    c.Free()
    world.Free()
    return out


@pytest.mark.parametrize("rank", [0, 2])
def test_an_invalid_setting_on_one_rank_fails_the_creation_on_every_rank(rank: int) -> None:
    res = run_ranks(3, _bad_setting_on, rank, env={"SHMCOLL_TIMEOUT": None})
    for r, out in enumerate(res):
        assert out["error"] == "ArgumentError", out
        assert not out["bad"], out
        if r == rank:
            assert "SHMCOLL_TIMEOUT" in out["msg"], out
        else:
            assert f"rank {rank} could not create" in out["msg"], out


def _lone(count: int) -> list[str]:
    names = []
    for _ in range(count):
        c = shmcoll.Comm()
        names.append(_name(c))
        c.Free()
    return names


def test_a_lone_communicator_reuses_its_segment_too() -> None:
    # Outside a launch, Comm() is this process alone; run in a forked child so that the
    # pytest process keeps no pooled segment.
    with environ({"SHMCOLL_SEGMENT": None, "SHMCOLL_RANK": None, "SHMCOLL_SIZE": None}):
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        with ctx.Pool(1) as pool:
            names = pool.apply(_lone, (4,))
    assert len(set(names)) == 1, names


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3])
def test_mpi_communicators_reuse_segments(nranks: int) -> None:
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "pooled_creation.py", timeout=80)
    assert f"pooled_creation size={nranks} failures=0" in proc.stdout, proc.stdout
