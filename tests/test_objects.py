"""mpi4py's object collectives (the lowercase methods) on shmcoll.Comm, at 1 to 4 ranks
without MPI: closed-form results for objects whose pickles fit the first exchange's slot
and for longer ones (a second, vector exchange), mixed across ranks and calls; reductions
in rank order, the same on every rank; a rank that cannot take part makes every rank raise,
and the communicator stays usable. Against mpi4py itself: tests/mpi_scripts/objects_vs_mpi.py
(test_collectives_mpi.py)."""

from __future__ import annotations

import inspect
import pickle
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shmcoll
from conftest import check_all, run_ranks
from mpi_scripts.object_equality import same
from shmcoll.errors import PeerRejectedError
from shmcoll.objects import ROOM

pytestmark = pytest.mark.timeout(60)

RANKS = [1, 2, 3, 4]


def obj(rank: int, rnd: int, to: int = 0) -> object:
    """A closed-form object whose pickle is short or long by (rank, round, destination):
    lengths straddle the slot's room so that calls mix short and long pickles."""
    kind = (rank + rnd + to) % 4
    if kind == 0:
        return (rank, rnd, to)
    if kind == 1:
        return {"r": rank, "s": "x" * (ROOM - 60 + 7 * rnd)}  # near the edge of the slot
    if kind == 2:
        return np.arange(40 + 10 * rank + rnd, dtype=np.float64) * (to + 1)
    return ["y" * (rank * 150 + rnd), None, 1.5]


def every_call(rounds: int) -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails: list[str] = []

    def check(label: str, got: object, want: object) -> None:
        if not same(got, want):
            fails.append(f"{label}: got {got!r:.120}, want {want!r:.120}")

    x = np.zeros(3)
    for rnd in range(rounds):
        root = rnd % p
        check(
            f"bcast {rnd}", comm.bcast(obj(root, rnd) if me == root else "ignored", root=root), obj(root, rnd)
        )
        check(f"allgather {rnd}", comm.allgather(obj(me, rnd)), [obj(j, rnd) for j in range(p)])
        want_g = [obj(j, rnd) for j in range(p)] if me == root else None
        check(f"gather {rnd}", comm.gather(obj(me, rnd), root=root), want_g)
        items = [obj(root, rnd, to=j) for j in range(p)] if me == root else None
        check(f"scatter {rnd}", comm.scatter(items, root=root), obj(root, rnd, to=me))
        got = comm.alltoall([obj(me, rnd, to=j) for j in range(p)])
        check(f"alltoall {rnd}", got, [obj(j, rnd, to=me) for j in range(p)])
        # Reductions: integers (exact), lists (concatenation shows the order).
        check(f"allreduce {rnd}", comm.allreduce(me + rnd), sum(j + rnd for j in range(p)))
        check(
            f"allreduce lists {rnd}",
            comm.allreduce([me] * (me * 40 + rnd)),
            [j for j in range(p) for _ in range(j * 40 + rnd)],
        )
        want_r = sum(range(p)) * 10 if me == root else None
        check(f"reduce {rnd}", comm.reduce(me * 10, op=shmcoll.SUM, root=root), want_r)
        check(f"scan {rnd}", comm.scan([me]), list(range(me + 1)))
        check(f"exscan {rnd}", comm.exscan([me]), list(range(me)) if me else None)
        check(f"max {rnd}", comm.allreduce((me * 7) % 5, op=shmcoll.MAX), max((j * 7) % 5 for j in range(p)))
        check(f"callable {rnd}", comm.allreduce(str(me), op=lambda a, b: a + b), "".join(map(str, range(p))))
        # The buffer collectives between them stay in step.
        comm.Allreduce(np.full(3, float(me)), x)
        check(f"Allreduce between {rnd}", x.tolist(), [float(sum(range(p)))] * 3)
    return fails


@pytest.mark.parametrize("nranks", RANKS)
def test_object_collectives_give_every_rank_its_closed_form_objects(nranks: int) -> None:
    check_all(run_ranks(nranks, every_call, 6))


def large_arrays(n: int) -> list[str]:
    """Arrays far beyond the slot: allreduce combines them on rank 0 and broadcasts."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails = []

    def arr(j: int) -> np.ndarray:
        return np.arange(n, dtype=np.float64) * (j + 1) + 0.1 * j

    a = arr(me)
    want = arr(0)
    for j in range(1, p):  # rank order, as the reduction promises
        want = want + arr(j)
    got = comm.allreduce(a)
    if not np.array_equal(got, want):
        fails.append("allreduce of large arrays")
    if p > 1 and got is a:
        fails.append("allreduce returned the caller's own array")
    r = comm.reduce(a, op=np.maximum, root=p - 1)
    if (me == p - 1) != (r is not None) or (r is not None and not np.array_equal(r, arr(p - 1))):
        fails.append("reduce of large arrays with a callable")
    b = comm.bcast(a if me == 0 else None, root=0)
    if not np.array_equal(b, arr(0)) or (me == 0 and np.shares_memory(b, a)):
        fails.append("bcast of a large array (a copy on the root too)")
    # Buffers out of band and in band in one object: large C and Fortran arrays, a small
    # one, a non-contiguous view, a bytearray.
    mixed = {
        "c": arr(p),
        "f": np.asfortranarray(arr(1).reshape(250, -1)),
        "small": arr(2)[:10],
        "strided": arr(3)[::3],
        "raw": bytearray(b"q" * 70_000),
    }
    got = comm.bcast(mixed if me == p - 1 else None, root=p - 1)
    ok = got.keys() == mixed.keys() and all(
        np.array_equal(got[k], mixed[k]) for k in ("c", "f", "small", "strided")
    )
    if not ok or got["raw"] != mixed["raw"] or not got["f"].flags.f_contiguous:
        fails.append("bcast of a dict of arrays in and out of band")
    if me == p - 1 and any(np.shares_memory(got[k], mixed[k]) for k in ("c", "f", "small", "strided")):
        fails.append("the root's copy shares memory with its object")
    g = comm.allgather(a)
    if not all(np.array_equal(g[j], arr(j)) for j in range(p)):
        fails.append("allgather of large arrays")
    s = comm.scatter([arr(j) for j in range(p)] if me == 0 else None, root=0)
    if not np.array_equal(s, arr(me)):
        fails.append("scatter of large arrays")
    t = comm.alltoall([arr(me + j) for j in range(p)])
    if not all(np.array_equal(t[j], arr(j + me)) for j in range(p)):
        fails.append("alltoall of large arrays")
    return fails


@pytest.mark.parametrize("nranks", RANKS)
def test_large_objects_take_the_second_exchange(nranks: int) -> None:
    check_all(run_ranks(nranks, large_arrays, 50_000))


def rank_order(_: int) -> list[float]:
    comm = shmcoll.Comm()
    # Rounding depends on the order: ((1e16 + 1) - 1e16) + 1 is 1.0, other orders 0.0 or 2.0.
    vals = [1e16, 1.0, -1e16, 1.0]
    mine = vals[comm.rank]
    big = np.full(100, mine)  # long pickles: the rank-0 path
    return [comm.allreduce(mine), float(comm.allreduce(big)[0]), comm.scan(mine)]


def test_reductions_combine_in_rank_order_on_every_rank() -> None:
    res = run_ranks(4, rank_order, 0)
    left = ((1e16 + 1.0) - 1e16) + 1.0
    assert all(r[0] == left and r[1] == left for r in res), res
    assert [r[2] for r in res] == [1e16, 1e16 + 1.0, (1e16 + 1.0) - 1e16, left]


def failures(case: str) -> str:
    """Run one bad call; return what this rank raised, then check the next call works."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    try:
        if case == "unpicklable allgather":
            comm.allgather(threading.Lock() if me == 1 else me)
        elif case == "unpicklable bcast":
            comm.bcast(threading.Lock() if me == 0 else None, root=0)
        elif case == "scatter length":
            comm.scatter(list(range(p + 1)) if me == 0 else None, root=0)
        elif case == "alltoall length":
            comm.alltoall(list(range(p - 1 if me == 1 else p)))
        elif case == "alltoall not a sequence":
            comm.alltoall(5 if me == 1 else list(range(p)))
        elif case == "bad root":
            comm.gather(me, root=p)
        elif case == "different calls":
            _ = comm.allgather(me) if me == 0 else comm.allreduce(me)
        elif case == "different roots":
            comm.gather(me, root=me % 2)
        elif case == "bad op":
            comm.allreduce(me, op="nosuch")
        elif case == "bad op, large objects":  # combined on rank 0, which the others wait for
            comm.allreduce(np.zeros(100), op="nosuch")
        result = "no error"
    except PeerRejectedError as e:
        result = f"PeerRejectedError rank={e.rank}"
    except Exception as e:
        result = type(e).__name__
    after = comm.allgather(me * 2)
    assert after == [2 * j for j in range(p)], after
    return result


@pytest.mark.parametrize(
    ("case", "want"),
    [
        ("unpicklable allgather", {1: "ArgumentTypeError", "others": "PeerRejectedError rank=1"}),
        ("unpicklable bcast", {0: "ArgumentTypeError", "others": "PeerRejectedError rank=0"}),
        ("scatter length", {0: "ArgumentError", "others": "PeerRejectedError rank=0"}),
        ("alltoall length", {1: "ArgumentError", "others": "PeerRejectedError rank=1"}),
        ("alltoall not a sequence", {1: "ArgumentError", "others": "PeerRejectedError rank=1"}),
        ("different calls", {"all": "MismatchError"}),
        ("different roots", {"all": "MismatchError"}),
        ("bad op", {"all": "ArgumentError"}),
        ("bad op, large objects", {0: "ArgumentError", "others": "PeerRejectedError rank=0"}),
    ],
)
def test_a_rank_that_cannot_take_part_makes_every_rank_raise(case: str, want: dict[object, str]) -> None:
    res = run_ranks(3, failures, case, timeout=30)
    for r, got in enumerate(res):
        expect = want.get("all") or want.get(r) or want["others"]
        assert got == expect, (case, res)


def test_a_root_that_is_not_a_rank_raises_on_every_rank() -> None:
    res = run_ranks(3, failures, "bad root", timeout=30)
    assert all(r in ("ArgumentError", "PeerRejectedError rank=0", "PeerRejectedError rank=1") for r in res), (
        res
    )
    assert "ArgumentError" in res


def test_the_object_collectives_are_shmcolls_own_methods() -> None:
    """Not forwarded to MPI (no fallback, no warning) and there without mpi4py."""
    for name in (
        "bcast",
        "gather",
        "scatter",
        "allgather",
        "alltoall",
        "reduce",
        "allreduce",
        "scan",
        "exscan",
    ):
        assert inspect.isfunction(inspect.getattr_static(shmcoll.Comm, name)), name


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
        lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(max_size=8), kids, max_size=6),
        max_leaves=40,
    )
)
def test_any_picklable_object_comes_back_equal_on_one_rank(o: object) -> None:
    """Short and long pickles alike (the sizes cross the slot's room) through every call."""
    with shmcoll.Comm() as comm:
        assert comm.bcast(o) == o
        assert comm.allgather(o) == [o]
        assert comm.gather(o) == [o]
        assert comm.scatter([o]) == o
        assert comm.alltoall([o]) == [o]
        assert comm.allreduce(o, op=lambda a, b: a) == o


def test_pickles_on_both_sides_of_the_slot_room() -> None:
    """The strategy above crosses the room; this pins the edge itself."""
    with shmcoll.Comm() as comm:
        for n in range(ROOM - 30, ROOM + 30):
            o = b"z" * n
            assert comm.allgather(o) == [o] and comm.bcast(o) == o and comm.alltoall([o]) == [o]
    assert len(pickle.dumps(b"z" * (ROOM - 30), pickle.HIGHEST_PROTOCOL)) <= ROOM
    assert len(pickle.dumps(b"z" * (ROOM + 30), pickle.HIGHEST_PROTOCOL)) > ROOM


def on_split_halves(_: int) -> list[str]:
    """Even and odd halves, each ranked in reverse (key = -rank): the object collectives
    follow the sub-communicator's ranks."""
    comm = shmcoll.Comm()
    me = comm.rank
    sub = comm.Split(color=me % 2, key=-me)
    assert sub is not None
    world = sorted((r for r in range(comm.size) if r % 2 == me % 2), reverse=True)
    fails = []
    if sub.allgather(me) != world:
        fails.append(f"allgather {sub.allgather(me)} != {world}")
    if sub.bcast(me, root=0) != world[0]:
        fails.append("bcast from sub-rank 0")
    if sub.alltoall([(me, j) for j in range(sub.size)]) != [(w, sub.rank) for w in world]:
        fails.append("alltoall")
    big = np.full(20_000, float(me))
    got = sub.gather(big, root=sub.size - 1)
    want = [np.full(20_000, float(w)) for w in world]
    if sub.rank == sub.size - 1 and not all(map(np.array_equal, got, want)):
        fails.append("gather of large arrays")
    if sub.allreduce([me]) != world:
        fails.append("allreduce order")
    sub.Free()
    return fails


def test_object_collectives_follow_a_split_communicators_ranks() -> None:
    check_all(run_ranks(4, on_split_halves, 0))
