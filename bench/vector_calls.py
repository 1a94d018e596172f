"""The vector collectives with mpi4py's list specifications, against MPI in the same
launch: Alltoallv, Allgatherv, Gatherv, Scatterv (``[buf, (counts, displs), MPI.DOUBLE]``)
and Reduce_scatter (``recvcounts``), with ragged counts given as lists or, with
``--counts numpy``, as NumPy arrays.

    mpiexec -n 2 python bench/vector_calls.py [--sizes 8:64K] [--iters 2000] [--counts numpy]

Per iteration: rewrite the send buffer, an untimed barrier, the timed call. A figure is
the median over iterations of the slowest rank's time; ratio = MPI / shmcoll.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from shmcoll.bench.calls import Cases, compare_calls

OPS = ("Alltoallv", "Allgatherv", "Gatherv", "Scatterv", "Reduce_scatter")


def cases(c, p: int, me: int, elems: int, arrays: bool) -> Cases:  # type: ignore[no-untyped-def]
    """name -> (call on communicator `c`, its send buffer); `arrays`: counts and
    displacements as NumPy arrays instead of lists."""
    as_counts = np.array if arrays else list
    counts = [elems + j for j in range(p)]  # ragged
    displs = [sum(counts[:j]) for j in range(p)]
    total = sum(counts)
    mine = np.zeros(counts[me])
    whole = np.zeros(total)
    got = np.zeros(total)
    part = np.zeros(counts[me])
    # Alltoallv: rank i sends counts[j] elements to rank j, so it receives counts[i] from each.
    a2a_s = np.zeros(total)
    rc = [counts[me]] * p
    rd = [counts[me] * j for j in range(p)]
    a2a_r = np.zeros(counts[me] * p)
    counts, displs, rc, rd = (as_counts(v) for v in (counts, displs, rc, rd))
    d = MPI.DOUBLE
    root_spec = [whole, (counts, displs), d] if me == 0 else None
    gather_spec = [got, (counts, displs), d] if me == 0 else None
    return {
        "Alltoallv": (lambda: c.Alltoallv([a2a_s, (counts, displs), d], [a2a_r, (rc, rd), d]), a2a_s),
        "Allgatherv": (lambda: c.Allgatherv(mine, [got, (counts, displs), d]), mine),
        "Gatherv": (lambda: c.Gatherv(mine, gather_spec, root=0), mine),
        "Scatterv": (lambda: c.Scatterv(root_spec, part, root=0), whole),
        "Reduce_scatter": (lambda: c.Reduce_scatter(whole, part, counts, op=MPI.SUM), whole),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8:64K", help="bytes per rank, MIN:MAX (powers of 2)")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--counts", choices=("list", "numpy"), default="list", help="how counts are given")
    args = ap.parse_args()
    arrays = args.counts == "numpy"
    compare_calls(lambda c, elems: cases(c, c.size, c.rank, elems, arrays), OPS, args.sizes, args.iters)


if __name__ == "__main__":
    main()
