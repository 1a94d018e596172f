"""Run under ``mpiexec -n N`` with ``SHMCOLL_NODE_SPLIT=k``: calls whose specifications a
HierComm once read otherwise than MPI must give mpi4py's outcome on MPI.COMM_WORLD: the
same receive buffers, or an error where mpi4py raises one (a ValueError, with the receive
buffer untouched). Prints ``specs compared=C failures=F`` on rank 0 and each failure."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import shmcoll
from shmcoll.hierarchy import HierComm

W = MPI.COMM_WORLD
P, ME = W.Get_size(), W.Get_rank()
LAST = P - 1


def allreduce_float32_into_float64(c: Any) -> list[np.ndarray]:
    x, y = np.arange(8, dtype=np.float32) + ME, np.full(4, -1.0)
    c.Allreduce(x, y)
    return [y]


def allgather_count(c: Any) -> list[np.ndarray]:
    s, r = np.arange(4.0) + 10 * ME, np.full(4 * P, -1.0)
    c.Allgather([s, 2, MPI.DOUBLE], [r, 2, MPI.DOUBLE])
    return [r]


def gather_count(c: Any) -> list[np.ndarray]:
    s, r = np.arange(4.0) + 10 * ME, np.full(4 * P, -1.0)
    c.Gather([s, 2, MPI.DOUBLE], [r, 2, MPI.DOUBLE], root=LAST)
    return [r]


def scatter_count(c: Any) -> list[np.ndarray]:
    s, r = np.arange(4.0 * P), np.full(4, -1.0)
    c.Scatter([s, 2, MPI.DOUBLE], [r, 2, MPI.DOUBLE], root=LAST)
    return [r]


def reduce_scatter_block_count(c: Any) -> list[np.ndarray]:
    x, y = np.arange(4.0 * P) + ME, np.full(4, -1.0)
    c.Reduce_scatter_block([x, 2, MPI.DOUBLE], [y, 2, MPI.DOUBLE])
    return [y]


def reduce_in_place_at_root(c: Any) -> list[np.ndarray]:
    # only the root passes IN_PLACE (as MPI has it): every rank must take the same road
    y = np.arange(5.0) + ME
    if ME == LAST:
        c.Reduce(MPI.IN_PLACE, y, root=LAST)
    else:
        c.Reduce(y, None, root=LAST)
    return [y]


def gather_in_place_at_root(c: Any) -> list[np.ndarray]:
    s, r = np.arange(2.0) + 10 * ME, np.full(2 * P, -1.0)
    if ME == LAST:
        r[2 * ME : 2 * ME + 2] = s
        c.Gather(MPI.IN_PLACE, r, root=LAST)
    else:
        c.Gather(s, None, root=LAST)
    return [r]


def scatter_in_place_at_root(c: Any) -> list[np.ndarray]:
    s, r = np.arange(2.0 * P), np.full(2, -1.0)
    if ME == LAST:
        c.Scatter(s, MPI.IN_PLACE, root=LAST)
        return [s]
    c.Scatter(None, r, root=LAST)
    return [r]


def outcome(fn: Callable[[Any], list[np.ndarray]], c: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(c)
    except ValueError as e:  # mpi4py's mismatches; shmcoll's ArgumentError is one too
        return "ValueError", f"{type(e).__name__}: {e}"


def main() -> int:
    warnings.simplefilter("ignore", RuntimeWarning)
    c = shmcoll.Comm(W)
    assert isinstance(c, HierComm), c
    failures = []
    cases = [
        f for f in list(globals().values()) if callable(f) and getattr(f, "__module__", "") == "__main__"
    ]
    cases = [f for f in cases if f.__name__ not in ("outcome", "main")]
    for fn in cases:
        want, got = outcome(fn, W), outcome(fn, c)
        if want[0] != got[0] or (
            want[0] == "ok" and not all(np.array_equal(a, b) for a, b in zip(want[1], got[1], strict=True))
        ):
            failures.append(f"rank {ME}: {fn.__name__}: mpi4py {want[1]} shmcoll {got[1]}")
        W.Barrier()
    everyone = W.gather(failures, root=0)
    if ME == 0:
        assert everyone is not None
        flat = [f for fs in everyone for f in fs]
        print(f"specs compared={len(cases)} failures={len(flat)}")
        for f in flat:
            print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
