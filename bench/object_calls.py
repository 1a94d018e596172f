"""mpi4py's object collectives (the lowercase methods: pickled Python objects) on
shmcoll.Comm against the same calls on the mpi4py communicator, in one launch: bcast,
allgather, gather, scatter, alltoall, reduce and allreduce of a NumPy array of the given
size (its pickle is ~130 bytes longer), and allreduce of a float (a training loop's loss).

    mpiexec -n 2 python bench/object_calls.py [--sizes 8:64K] [--iters 2000]

Per iteration: rewrite the array, an untimed barrier, the timed call (pickling and
unpickling included, as the caller pays them); a figure is the median over iterations of
the slowest rank's time; ratio = MPI / shmcoll.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from shmcoll.bench.calls import Cases, compare_calls

OPS = ("bcast", "allgather", "gather", "scatter", "alltoall", "reduce", "allreduce", "allreduce(float)")


def cases(c, p: int, elems: int) -> Cases:  # type: ignore[no-untyped-def]
    """name -> (call on communicator `c`, the array it sends, rewritten every iteration)."""
    a = np.zeros(elems)
    return {
        "bcast": (lambda: c.bcast(a, root=0), a),
        "allgather": (lambda: c.allgather(a), a),
        "gather": (lambda: c.gather(a, root=0), a),
        "scatter": (lambda: c.scatter([a] * p, root=0), a),
        "alltoall": (lambda: c.alltoall([a] * p), a),
        "reduce": (lambda: c.reduce(a, op=MPI.SUM, root=0), a),
        "allreduce": (lambda: c.allreduce(a, op=MPI.SUM), a),
        "allreduce(float)": (lambda: c.allreduce(float(a[0]), op=MPI.SUM), a),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8:64K", help="bytes of the array, MIN:MAX (powers of 2)")
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args()
    compare_calls(lambda c, elems: cases(c, c.size, elems), OPS, args.sizes, args.iters)


if __name__ == "__main__":
    main()
