"""The loop of the scripts that time calls as mpi4py programs write them
(bench/spec_calls.py, bench/vector_calls.py): each case on MPI and on shmcoll, with the
same arguments, in one launch. Per iteration: rewrite the send buffer, an untimed
barrier, the timed call; a figure is the median over iterations of the slowest rank's
time, after a tenth of the iterations as warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .sizes import parse_range

#: name -> (the timed call, its send buffer, rewritten before every iteration).
Cases = dict[str, tuple[Callable[[], None], np.ndarray]]


def compare_calls(cases: Callable[[Any, int], Cases], ops: Sequence[str], sizes: str, iters: int) -> None:
    """Print, per size (bytes, 8-byte elements) and case in `ops`, MPI's time, shmcoll's
    and their ratio; `cases(comm, elements)` builds the calls on either communicator."""
    from mpi4py import MPI

    import shmcoll

    world = MPI.COMM_WORLD
    comm = shmcoll.Comm(world)
    w = max(len(o) for o in ops)
    if comm.rank == 0:
        print(f"{'op':{w}s} {'bytes':>7s} {'MPI us':>9s} {'shmcoll us':>11s} {'ratio':>7s}")
    warm = iters // 10
    for n in parse_range(sizes):
        elems = max(1, n // 8)
        per = {}
        for label, c in (("mpi", world), ("shmcoll", comm)):
            for name, (call, send) in cases(c, elems).items():
                ts = []
                for k in range(iters + warm):
                    send[:] = k
                    comm.Barrier()
                    t0 = time.perf_counter()
                    call()
                    ts.append(time.perf_counter() - t0)
                slowest = np.max(np.array(world.allgather(ts[warm:])), axis=0)
                per[(name, label)] = float(np.median(slowest)) * 1e6
        if comm.rank == 0:
            for name in ops:
                m, s = per[(name, "mpi")], per[(name, "shmcoll")]
                print(f"{name:{w}s} {elems * 8:7d} {m:9.2f} {s:11.2f} {m / s:6.2f}x", flush=True)
    comm.Free()
