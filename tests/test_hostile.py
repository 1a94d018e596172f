"""Hostile and careless calls at 1-4 ranks: extreme counts and displacements, arguments of
the wrong type or out of range on one rank or on all, one-sided Bcasts with a bad root.

What every case must show (the contract of docs/security.md, "What is checked"): no process
crashes; the call either succeeds on every rank or raises a `shmcoll.ShmcollError`
subclass on every rank (a one-sided Bcast: by the next call at the latest); no receive
buffer is written where an error was raised; the failing rank raises an error that is
also the matching built-in (an `ArgumentError` is a ValueError, a wrong type a TypeError).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shmcoll
from conftest import MPI_SCRIPTS, run_mpiexec, run_ranks, subprocess_env

N = 4  # elements per block in the scenarios
BIG = (2**31 - 1, 2**31 + 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64)


def _attempt(comm: shmcoll.Comm, call: Callable[[], Any], recvs: list[np.ndarray]) -> dict[str, Any]:
    """Run `call` on this rank: its exception (class names of its MRO) and whether any of
    `recvs` changed; then a follow-up Barrier and what it raised (a one-sided Bcast's
    rejection may surface there)."""
    before = [r.copy() for r in recvs]
    out: dict[str, Any] = {"exc": None, "mro": [], "msg": ""}
    try:
        call()
    except Exception as e:
        out["exc"] = type(e).__name__
        out["mro"] = [c.__name__ for c in type(e).__mro__]
        out["msg"] = str(e)[:300]
    out["untouched"] = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(recvs, before, strict=True))
    out["next"] = None
    try:
        comm.Barrier()
    except Exception as e:
        out["next"] = type(e).__name__
        out["next_mro"] = [c.__name__ for c in type(e).__mro__]
    # A bad argument never breaks the communicator: a third call works on every rank.
    out["after"] = None
    try:
        comm.Barrier()
    except Exception as e:
        out["after"] = type(e).__name__
    return out


def persistent_init(comm: shmcoll.Comm, bad: int, which: str) -> dict[str, Any]:
    """A persistent request created with a bad root or count on the bad rank(s): creation
    is collective, so every rank raises there."""
    p = comm.size
    r = _sentinel(p * N)
    mine = _is_bad(comm, bad)

    def create() -> None:
        if which == "bcast_root":
            req = comm.Bcast_init(r, root=-1 if mine else 0)
        elif which == "allreduce_op":
            req = comm.Allreduce_init(np.ones(N), r[:N], op="bogus" if mine else None)
        else:
            req = comm.Alltoall_init([np.ones(p * N), N, "d"], [r, 2**62 if mine else N, "d"])
        req.Free()

    return _attempt(comm, create, [r])


def reduce_scatter_mixed_in_place(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    """IN_PLACE on the bad rank(s) only (MPI's in-place form is IN_PLACE on every rank)."""
    p = comm.size
    r = _sentinel(p * N)
    s = np.ones(p * N)
    if comm.rank == max(bad, 0):
        return _attempt(comm, lambda: comm.Reduce_scatter_block(shmcoll.IN_PLACE, r), [r])
    return _attempt(comm, lambda: comm.Reduce_scatter_block(s, r[:N]), [r])


def _sentinel(n: int, dtype: Any = np.float64) -> np.ndarray:
    return np.full(n, -1, dtype)


# -- cases: (comm, bad) -> outcome; `bad` is the rank that misbehaves (-1: every rank) ----
def _is_bad(comm: shmcoll.Comm, bad: int) -> bool:
    return bad < 0 or comm.rank == bad


def reduce_scatter_wrapping_counts(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    """Counts whose byte sum wraps to 0 (2**60 doubles on 2 ranks, 2**59 on 4)."""
    p = comm.size
    r = _sentinel(p * N)
    counts = [2**64 // 8 // p] * p if _is_bad(comm, bad) else [N] * p
    return _attempt(comm, lambda: comm.Reduce_scatter(shmcoll.IN_PLACE, r, recvcounts=counts), [r])


def reduce_scatter_big_count(comm: shmcoll.Comm, bad: int, big: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(N)
    counts = [N] * p
    if _is_bad(comm, bad):
        counts[-1] = big
    return _attempt(comm, lambda: comm.Reduce_scatter(s, r, recvcounts=counts), [r])


def reduce_scatter_negative_count(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(N)
    counts = [N] * p
    if _is_bad(comm, bad):
        counts[0] = -N
    return _attempt(comm, lambda: comm.Reduce_scatter(s, r, recvcounts=counts), [r])


def alltoallv_big_count(comm: shmcoll.Comm, bad: int, big: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    counts = [N] * p
    if _is_bad(comm, bad):
        counts[p - 1] = big
    return _attempt(comm, lambda: comm.Alltoallv([s, counts, "d"], [r, [N] * p, "d"]), [r])


def alltoallv_big_displ(comm: shmcoll.Comm, bad: int, big: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    displs = [N * j for j in range(p)]
    if _is_bad(comm, bad):
        displs[p - 1] = big
    return _attempt(comm, lambda: comm.Alltoallv([s, [N] * p, "d"], [r, ([N] * p, displs), "d"]), [r])


def alltoallv_negative_displ(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    displs = [N * j for j in range(p)]
    if _is_bad(comm, bad):
        displs[0] = -N
    return _attempt(comm, lambda: comm.Alltoallv([s, ([N] * p, displs), "d"], [r, [N] * p, "d"]), [r])


def alltoallv_float_counts(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    counts: list[Any] = [N] * p
    if _is_bad(comm, bad):
        counts = [N + 0.9] * p
    return _attempt(comm, lambda: comm.Alltoallv([s, counts, "d"], [r, [N] * p, "d"]), [r])


def alltoallv_numpy_float_counts(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    counts: Any = np.full(p, N, np.int64)
    if _is_bad(comm, bad):
        counts = np.full(p, N + 0.5)
    return _attempt(comm, lambda: comm.Alltoallv([s, counts, "d"], [r, [N] * p, "d"]), [r])


def alltoallv_numpy_int_counts(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    """Integers of any integer type are counts: int8, uint64, np.int32 scalars, bools are not."""
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    kinds = [np.int8, np.uint16, np.int32, np.uint64]
    counts = [kinds[j % len(kinds)](N) for j in range(p)]
    return _attempt(comm, lambda: comm.Alltoallv([s, counts, "d"], [r, np.full(p, N, np.uint32), "d"]), [r])


def alltoallv_float_displs(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    displs: list[Any] = [N * j for j in range(p)]
    if _is_bad(comm, bad):
        displs = [N * j + 0.5 for j in range(p)]
    return _attempt(comm, lambda: comm.Alltoallv([s, [N] * p, "d"], [r, ([N] * p, displs), "d"]), [r])


def alltoall_spec_big_count(comm: shmcoll.Comm, bad: int, big: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    cnt = big if _is_bad(comm, bad) else N
    return _attempt(comm, lambda: comm.Alltoall([s, N, "d"], [r, cnt, "d"]), [r])


def alltoall_float_count(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    cnt: Any = N + 0.5 if _is_bad(comm, bad) else N
    return _attempt(comm, lambda: comm.Alltoall([s, N, "d"], [r, cnt, "d"]), [r])


def allgatherv_overlapping_displs(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.full(N, comm.rank, np.float64)
    r = _sentinel(p * N)
    displs = [0] * p if _is_bad(comm, bad) else [N * j for j in range(p)]
    return _attempt(comm, lambda: comm.Allgatherv(s, [r, ([N] * p, displs), "d"]), [r])


def allgatherv_big_count(comm: shmcoll.Comm, bad: int, big: int) -> dict[str, Any]:
    p = comm.size
    s = np.full(N, comm.rank, np.float64)
    r = _sentinel(p * N)
    counts = [N] * p
    if _is_bad(comm, bad):
        counts[p - 1] = big
    return _attempt(comm, lambda: comm.Allgatherv(s, [r, counts, "d"]), [r])


def gatherv_overlapping_displs(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    """The root's receive blocks overlap (the root is the bad rank: only it has counts)."""
    p, root = comm.size, max(bad, 0)
    s = np.full(N, comm.rank, np.float64)
    r = _sentinel(p * N)
    displs = [0] * p
    return _attempt(comm, lambda: comm.Gatherv(s, [r, ([N] * p, displs), "d"], root=root), [r])


def scatterv_big_displ(comm: shmcoll.Comm, bad: int, big: int) -> dict[str, Any]:
    p, root = comm.size, max(bad, 0)
    s = np.ones(p * N)
    r = _sentinel(N)
    displs = [N * j for j in range(p)]
    displs[-1] = big
    return _attempt(comm, lambda: comm.Scatterv([s, ([N] * p, displs), "d"], r, root=root), [r])


def bcast_root(comm: shmcoll.Comm, bad: int, root: Any, n: int = N) -> dict[str, Any]:
    """A Bcast whose root is `root` on the bad rank(s) and 0 elsewhere."""
    buf = np.arange(n, dtype=np.float64) if comm.rank == 0 else _sentinel(n)
    rt = root if _is_bad(comm, bad) else 0
    recvs = [] if comm.rank == 0 else [buf]
    return _attempt(comm, lambda: comm.Bcast(buf, root=rt), recvs)


def allreduce_op(comm: shmcoll.Comm, bad: int, op: Any) -> dict[str, Any]:
    s = np.ones(N)
    r = _sentinel(N)
    o = op if _is_bad(comm, bad) else None
    return _attempt(comm, lambda: comm.Allreduce(s, r, op=o), [r])


def allreduce_algorithm(comm: shmcoll.Comm, bad: int, algorithm: Any) -> dict[str, Any]:
    s = np.ones(N)
    r = _sentinel(N)
    a = algorithm if _is_bad(comm, bad) else None
    return _attempt(comm, lambda: comm.Allreduce(s, r, algorithm=a), [r])


def alltoall_algorithm(comm: shmcoll.Comm, bad: int, algorithm: Any) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    a = algorithm if _is_bad(comm, bad) else None
    return _attempt(comm, lambda: comm.Alltoall(s, r, algorithm=a), [r])


def reduce_root(comm: shmcoll.Comm, bad: int, root: Any) -> dict[str, Any]:
    s = np.ones(N)
    r = _sentinel(N)
    rt = root if _is_bad(comm, bad) else 0
    return _attempt(comm, lambda: comm.Reduce(s, r, root=rt), [r])


def gather_root(comm: shmcoll.Comm, bad: int, root: Any) -> dict[str, Any]:
    p = comm.size
    s = np.ones(N)
    r = _sentinel(p * N)
    rt = root if _is_bad(comm, bad) else 0
    return _attempt(comm, lambda: comm.Gather(s, r, root=rt), [r])


def scatter_root(comm: shmcoll.Comm, bad: int, root: Any) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(N)
    rt = root if _is_bad(comm, bad) else 0
    return _attempt(comm, lambda: comm.Scatter(s, r, root=rt), [r])


def allgather_not_a_buffer(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(N)
    r = _sentinel(p * N)
    target: Any = "not a buffer" if _is_bad(comm, bad) else r
    return _attempt(comm, lambda: comm.Allgather(s, target), [r])


def allreduce_dtype_mismatch(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    """One rank reduces float32 where the others reduce float64 (at least 2 ranks)."""
    dt = np.float32 if comm.rank == max(bad, 0) else np.float64
    s = np.ones(N, dt)
    r = _sentinel(N, dt)
    return _attempt(comm, lambda: comm.Allreduce(s, r), [r])


def bcast_spec_big_count(comm: shmcoll.Comm, bad: int, big: int) -> dict[str, Any]:
    buf = np.zeros(N) if comm.rank == 0 else _sentinel(N)
    cnt = big if _is_bad(comm, bad) else N
    recvs = [] if comm.rank == 0 else [buf]
    return _attempt(comm, lambda: comm.Bcast([buf, cnt, "d"], root=0), recvs)


def alltoallv_hostile_dtype(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel(p * N)
    dt = "f8,i4" if _is_bad(comm, bad) else "d"
    return _attempt(comm, lambda: comm.Alltoallv([s, [N] * p, "d"], [r, [N] * p, dt]), [r])


CASES: dict[str, Callable[[shmcoll.Comm, int], dict[str, Any]]] = {
    "reduce_scatter_wrapping_counts": reduce_scatter_wrapping_counts,
    "reduce_scatter_negative_count": reduce_scatter_negative_count,
    "alltoallv_negative_displ": alltoallv_negative_displ,
    "alltoallv_float_counts": alltoallv_float_counts,
    "alltoallv_numpy_float_counts": alltoallv_numpy_float_counts,
    "alltoallv_float_displs": alltoallv_float_displs,
    "alltoall_float_count": alltoall_float_count,
    "allgatherv_overlapping_displs": allgatherv_overlapping_displs,
    "gatherv_overlapping_displs": gatherv_overlapping_displs,
    "allgather_not_a_buffer": allgather_not_a_buffer,
    "allreduce_dtype_mismatch": allreduce_dtype_mismatch,
    "reduce_scatter_mixed_in_place": reduce_scatter_mixed_in_place,
    "bcast_init_root": lambda c, b: persistent_init(c, b, "bcast_root"),
    "allreduce_init_op": lambda c, b: persistent_init(c, b, "allreduce_op"),
    "alltoall_init_count": lambda c, b: persistent_init(c, b, "alltoall_count"),
    "alltoallv_hostile_dtype": alltoallv_hostile_dtype,
    "bcast_root_negative": lambda c, b: bcast_root(c, b, -1),
    "bcast_root_size": lambda c, b: bcast_root(c, b, c.size),
    "bcast_root_size_big": lambda c, b: bcast_root(c, b, c.size, n=1 << 16),
    "bcast_root_float": lambda c, b: bcast_root(c, b, 0.5),
    "bcast_root_str": lambda c, b: bcast_root(c, b, "0"),
    "bcast_root_huge": lambda c, b: bcast_root(c, b, 2**64),
    "allreduce_op_bogus": lambda c, b: allreduce_op(c, b, "bogus"),
    "allreduce_op_int": lambda c, b: allreduce_op(c, b, 5),
    "allreduce_op_unsupported": lambda c, b: allreduce_op(c, b, shmcoll.BAND),
    "allreduce_algorithm_int": lambda c, b: allreduce_algorithm(c, b, 5),
    "allreduce_algorithm_bogus": lambda c, b: allreduce_algorithm(c, b, "bogus"),
    "alltoall_algorithm_int": lambda c, b: alltoall_algorithm(c, b, 5),
    "reduce_root_negative": lambda c, b: reduce_root(c, b, -1),
    "gather_root_size": lambda c, b: gather_root(c, b, c.size),
    "scatter_root_negative": lambda c, b: scatter_root(c, b, -2),
    **{f"reduce_scatter_count_{v}": (lambda c, b, v=v: reduce_scatter_big_count(c, b, v)) for v in BIG},
    **{f"alltoallv_count_{v}": (lambda c, b, v=v: alltoallv_big_count(c, b, v)) for v in BIG},
    **{f"alltoallv_displ_{v}": (lambda c, b, v=v: alltoallv_big_displ(c, b, v)) for v in BIG[2:]},
    **{f"alltoall_spec_count_{v}": (lambda c, b, v=v: alltoall_spec_big_count(c, b, v)) for v in BIG[3:]},
    **{f"allgatherv_count_{v}": (lambda c, b, v=v: allgatherv_big_count(c, b, v)) for v in BIG[3:]},
    **{f"scatterv_displ_{v}": (lambda c, b, v=v: scatterv_big_displ(c, b, v)) for v in BIG[3:5]},
    **{f"bcast_spec_count_{v}": (lambda c, b, v=v: bcast_spec_big_count(c, b, v)) for v in BIG[3:5]},
}

#: Cases where a rank does not take part in the call (an argument that makes the call a
#: no-op on every rank is fine): the ones that must succeed.
MUST_SUCCEED = {"alltoallv_numpy_int_counts"}
#: Cases that are a disagreement between ranks, hence need two.
NEEDS_TWO = {
    "allreduce_dtype_mismatch",
    "allgatherv_overlapping_displs",
    "gatherv_overlapping_displs",
    "reduce_scatter_mixed_in_place",
}
CASES["alltoallv_numpy_int_counts"] = alltoallv_numpy_int_counts


def _one_case(name: str, bad: int) -> dict[str, Any]:
    comm = shmcoll.Comm()
    try:
        return CASES[name](comm, bad)
    finally:
        comm.Free()


def _verdict(name: str, outs: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the outcomes of one case (empty: it behaved)."""
    wrong = []
    raised = [o["exc"] is not None for o in outs]
    if name in MUST_SUCCEED:
        if any(raised):
            wrong.append(f"raised where it must succeed: {[o['exc'] for o in outs]} {outs[0]['msg']}")
    elif not all(raised):
        # One-sided Bcast: the others must raise at their next call at the latest.
        late = [o for o in outs if o["exc"] is None]
        if not all("ShmcollError" in o.get("next_mro", []) for o in late):
            wrong.append(f"not every rank raised: {[(o['exc'], o['next']) for o in outs]}")
    for r, o in enumerate(outs):
        if o["after"] is not None:
            wrong.append(f"rank {r}: the communicator does not work afterwards ({o['after']})")
        if o["exc"] is not None and "ShmcollError" not in o["mro"]:
            wrong.append(f"rank {r} raised {o['exc']}, not a ShmcollError: {o['msg']}")
        if o["exc"] is not None and not o["untouched"]:
            wrong.append(f"rank {r} raised {o['exc']} but its receive buffer changed")
    return wrong


@pytest.mark.parametrize("p", [1, 2, 4])
def test_hostile_cases(p: int) -> None:
    wrong = {}
    for name in CASES:
        if p == 1 and name in NEEDS_TWO:
            continue
        for bad in sorted({-1, p - 1}):
            try:
                outs = run_ranks(p, _one_case, name, bad, timeout=60, env={"SHMCOLL_TIMEOUT": "10"})
            except shmcoll.SpawnError as e:
                wrong[(name, bad)] = [f"a rank failed: {str(e)[:600]}"]
                continue
            w = _verdict(name, outs)
            if w:
                wrong[(name, bad)] = w
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_a_fallback_to_mpi_on_some_ranks_raises_on_every_rank(n: int) -> None:
    """A user-defined operator on rank 0 only: rank 0 would hand the call to MPI while the
    others run it on shmcoll, each waiting for the other; the ranks agree first, so every
    rank raises at once and nothing is written. With the operator on every rank, MPI
    serves it."""
    proc = run_mpiexec(n, MPI_SCRIPTS / "fallback_agreement.py", timeout=60, env={"SHMCOLL_TIMEOUT": "120"})
    # The ranks' lines may interleave in mpiexec's output.
    found = re.findall(r"rank (\d+): (\w+) / (ok|\w+)", proc.stdout)
    assert sorted(int(r) for r, _, _ in found) == list(range(n)), proc.stdout + proc.stderr
    for rank, mixed, agreed in found:
        assert mixed in ("MismatchError", "PeerRejectedError"), (rank, mixed)
        assert agreed == "ok", (rank, agreed)


# -- property: extreme counts and displacements in every collective's arguments -----------
EXTREMES: tuple[Any, ...] = (
    0,
    1,
    3,
    2**31 - 1,
    2**31,
    2**31 + 1,
    2**62,
    2**63 - 1,
    2**63,
    2**64 // 2,
    2**64 // 3,
    2**64 - 1,
    2**64,
    -1,
    -(2**31),
    -(2**63),
    2.0,
    2.5,
    float("nan"),
    np.int8(3),
    np.uint64(2**64 - 1),
    np.int64(-1),
    np.float32(1.0),
    True,
)

#: (collective, what the extreme value replaces)
TARGETS = (
    ("Alltoallv", "count"),
    ("Alltoallv", "displ"),
    ("Allgatherv", "count"),
    ("Allgatherv", "displ"),
    ("Gatherv", "count"),
    ("Scatterv", "displ"),
    ("Reduce_scatter", "count"),
    ("Alltoall", "spec"),
    ("Bcast", "spec"),
    ("Allreduce", "spec"),
    ("Gather", "spec"),
)


def _extreme_call(
    comm: shmcoll.Comm, target: tuple[str, str], value: Any, bad: int, entry: int
) -> dict[str, Any]:
    """`target`'s call with entry `entry` of its counts or displacements (or the count of
    its specification) replaced by `value` on rank `bad` (-1: every rank); the root, for the
    rooted ones, is `max(bad, 0)`."""
    p, me = comm.size, comm.rank
    name, what = target
    mine = bad < 0 or me == bad
    root = max(bad, 0)
    counts: list[Any] = [N] * p
    displs: list[Any] = [N * j for j in range(p)]
    if mine and what == "count":
        counts[entry % p] = value
    if mine and what == "displ":
        displs[entry % p] = value
    cnt = value if mine and what == "spec" else N
    s = np.full(p * N, me + 1.0)
    r = _sentinel(p * N)
    calls: dict[str, Callable[[], Any]] = {
        "Alltoallv": lambda: comm.Alltoallv([s, (counts, displs), "d"], [r, [N] * p, "d"]),
        "Allgatherv": lambda: comm.Allgatherv(s[:N], [r, (counts, displs), "d"]),
        "Gatherv": lambda: comm.Gatherv(s[:N], [r, (counts, displs), "d"], root=root),
        "Scatterv": lambda: comm.Scatterv([s, (counts, displs), "d"], r[:N], root=root),
        "Reduce_scatter": lambda: comm.Reduce_scatter(s, r[:N], recvcounts=counts),
        "Alltoall": lambda: comm.Alltoall([s, N, "d"], [r, cnt, "d"]),
        "Bcast": lambda: comm.Bcast([r if me != root else s, cnt, "d"], root=root),
        "Allreduce": lambda: comm.Allreduce([s, cnt, "d"], [r, N, "d"]),
        "Gather": lambda: comm.Gather([s, cnt, "d"], r, root=root),
    }
    return _attempt(comm, calls[name], [r])


def _one_extreme(target: tuple[str, str], value: Any, bad: int, entry: int) -> dict[str, Any]:
    comm = shmcoll.Comm()
    try:
        return _extreme_call(comm, target, value, bad, entry)
    finally:
        comm.Free()


@pytest.mark.parametrize("p", [2, 3])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    target=st.sampled_from(TARGETS),
    value=st.sampled_from(EXTREMES),
    bad=st.integers(-1, 2),
    entry=st.integers(0, 2),
)
def test_extreme_counts_either_serve_or_fail_on_every_rank(
    p: int, target: tuple[str, str], value: Any, bad: int, entry: int
) -> None:
    """No crash; every rank succeeds, or every rank raises a ShmcollError (a one-sided
    Bcast's by its next call) with its receive buffer as it was."""
    bad = min(bad, p - 1)
    outs = run_ranks(p, _one_extreme, target, value, bad, entry, timeout=60, env={"SHMCOLL_TIMEOUT": "10"})
    raised = [o["exc"] is not None for o in outs]
    late = [o for o in outs if o["exc"] is None]
    if any(raised):
        assert all("ShmcollError" in o.get("next_mro", []) for o in late), outs
    for r, o in enumerate(outs):
        if o["exc"] is not None:
            assert "ShmcollError" in o["mro"], (r, o)
            assert o["untouched"], (r, o)


_LINGERING_RANK = """
import atexit, sys, time
import numpy as np
import shmcoll

comm = shmcoll.Comm()
comm.Barrier()
if comm.rank == 1:
    # As a rank that finalizes MPI for a while after an uncaught Ctrl-C: alive, gone.
    atexit.register(time.sleep, 30)
    raise KeyboardInterrupt
t = time.monotonic()
try:
    comm.Allreduce(np.ones(4), np.zeros(4))
    print("rank 0: no error", flush=True)
except shmcoll.ShmcollError as e:
    print(f"rank 0: {type(e).__name__} after {time.monotonic() - t:.2f} s", flush=True)
sys.exit(0)
"""


def test_an_uncaught_exception_aborts_the_ranks_communicators(tmp_path: Path) -> None:
    """A rank whose process ends with an uncaught exception (Ctrl-C between two calls)
    while it lingers (finalizing MPI, say) aborts its communicators first: a peer waiting
    for it in a call raises PeerFailedError at once, not at its deadline."""
    script = tmp_path / "lingering.py"
    script.write_text(_LINGERING_RANK)
    env = subprocess_env({"SHMCOLL_TIMEOUT": "60"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmcoll.cli", "run", "-n", "2", str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out = ""
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        while "rank 0:" not in out and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out += line
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    m = re.search(r"rank 0: (\w+) after ([\d.]+) s", out)
    assert m, out
    assert m.group(1) == "PeerFailedError", out
    assert float(m.group(2)) < 5, out


def _rejected_bcast_then_its_root(bad: int) -> list[Any]:
    """Rank `bad` rejects a small (one-sided) Bcast from rank 0, then is the root of the next
    small Bcast: (first call's outcome, second call's outcome, a third call's) per rank."""
    comm = shmcoll.Comm()
    out: list[Any] = []
    try:
        buf = np.full(N, 7.0) if comm.rank == 0 else _sentinel(N)
        for root in (comm.size if comm.rank == bad else 0, bad):
            try:
                comm.Bcast(buf, root=root)
                out.append("ok")
            except shmcoll.ShmcollError as e:
                out.append(type(e).__name__)
        try:
            comm.Barrier()
            out.append("ok")
        except shmcoll.ShmcollError as e:
            out.append(type(e).__name__)
        return out
    finally:
        comm.Free()


@pytest.mark.parametrize("p", [2, 4])
def test_a_rank_that_rejected_a_one_sided_bcast_reads_the_notice_as_the_next_root(p: int) -> None:
    """The ranks that completed the one-sided Bcast publish a notice at their next call;
    the rejecting rank, root of that next Bcast, must not leave it early (it would return
    success from a Bcast that reached nobody): every rank fails the second call, and the
    third works."""
    outs = run_ranks(p, _rejected_bcast_then_its_root, p - 1, timeout=60, env={"SHMCOLL_TIMEOUT": "10"})
    assert outs[p - 1][0] == "ArgumentError", outs
    assert all(o[1] != "ok" for o in outs), outs
    assert all(o[2] == "ok" for o in outs), outs


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_hostile_cases_under_mpich(n: int) -> None:
    """The same cases on communicators over MPI.COMM_WORLD under mpiexec (MPICH's wheel):
    MPI's bootstrap, and MPI there to fall back to."""
    proc = run_mpiexec(n, MPI_SCRIPTS / "hostile_cases.py", timeout=300, env={"SHMCOLL_TIMEOUT": "10"})
    assert "hostile cases: 0 wrong" in proc.stdout, proc.stdout + proc.stderr
