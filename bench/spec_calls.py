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

import numpy as np
from mpi4py import MPI

from shmcoll.bench.calls import Cases, compare_calls

OPS = ("Bcast", "Allreduce", "Reduce", "Allgather", "Gather", "Scatter", "Reduce_scatter_block", "Alltoall")


def cases(c, p: int, elems: int, count: bool) -> Cases:  # type: ignore[no-untyped-def]
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
    compare_calls(lambda c, elems: cases(c, c.size, elems, args.count), OPS, args.sizes, args.iters)


if __name__ == "__main__":
    main()
