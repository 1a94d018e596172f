"""The collectives with one buffer per side called with mpi4py's buffer specifications
(``[buf, MPI.DOUBLE]``, or ``[buf, count, MPI.DOUBLE]`` with ``--count``), against MPI
given the same specifications in the same launch: Bcast, Allreduce, Reduce, Allgather,
Gather, Scatter, Reduce_scatter_block and Alltoall.

    mpiexec -n 2 python bench/spec_calls.py [--sizes 8:64K] [--iters 2000] [--count]

Per iteration: rewrite the send buffer, an untimed barrier, the timed call. A figure is
the median over iterations of the slowest rank's time; ratio = MPI / shmcoll.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import shmcoll
from shmcoll.bench.sizes import parse_range

OPS = ("Bcast", "Allreduce", "Reduce", "Allgather", "Gather", "Scatter", "Reduce_scatter_block", "Alltoall")


def cases(c, p: int, elems: int, count: bool) -> dict[str, tuple[Callable[[], None], np.ndarray]]:  # type: ignore[no-untyped-def]
    """name -> (call on communicator `c`, its send buffer). `elems` is the vector (Bcast,
    Allreduce, Reduce) or a rank's block (the others)."""
    d = MPI.DOUBLE

    def spec(buf: np.ndarray, n: int) -> list:  # type: ignore[type-arg]
        return [buf, n, d] if count else [buf, d]

    vec, out = np.zeros(elems), np.zeros(elems)
    block, blocks, blocks_out = np.zeros(elems), np.zeros(elems * p), np.zeros(elems * p)
    return {
        "Bcast": (lambda: c.Bcast(spec(vec, elems), root=0), vec),
        "Allreduce": (lambda: c.Allreduce(spec(vec, elems), spec(out, elems), op=MPI.SUM), vec),
        "Reduce": (lambda: c.Reduce(spec(vec, elems), spec(out, elems), op=MPI.SUM, root=0), vec),
        "Allgather": (lambda: c.Allgather(spec(block, elems), spec(blocks, elems)), block),
        "Gather": (lambda: c.Gather(spec(block, elems), spec(blocks, elems), root=0), block),
        "Scatter": (lambda: c.Scatter(spec(blocks, elems), spec(block, elems), root=0), blocks),
        "Reduce_scatter_block": (
            lambda: c.Reduce_scatter_block(spec(blocks, elems), spec(block, elems)),
            blocks,
        ),
        "Alltoall": (lambda: c.Alltoall(spec(blocks, elems), spec(blocks_out, elems)), blocks),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8:64K", help="bytes (vector or block), MIN:MAX (powers of 2)")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--count", action="store_true", help="[buf, count, datatype] instead of [buf, datatype]")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    comm = shmcoll.Comm(world)
    p, me = comm.size, comm.rank
    if me == 0:
        print(f"{'op':21s} {'bytes':>7s} {'MPI us':>9s} {'shmcoll us':>11s} {'ratio':>7s}")
    for n in parse_range(args.sizes):
        elems = max(1, n // 8)
        per = {}
        for label, c in (("mpi", world), ("shmcoll", comm)):
            for name, (call, send) in cases(c, p, elems, args.count).items():
                ts = []
                for k in range(args.iters + args.iters // 10):
                    send[:] = k
                    comm.Barrier()
                    t0 = time.perf_counter()
                    call()
                    ts.append(time.perf_counter() - t0)
                ts = ts[args.iters // 10 :]
                slowest = np.max(np.array(world.allgather(ts)), axis=0)
                per[(name, label)] = float(np.median(slowest)) * 1e6
        if me == 0:
            for name in OPS:
                m, s = per[(name, "mpi")], per[(name, "shmcoll")]
                print(f"{name:21s} {elems * 8:7d} {m:9.2f} {s:11.2f} {m / s:6.2f}x", flush=True)
    comm.Free()


if __name__ == "__main__":
    main()
