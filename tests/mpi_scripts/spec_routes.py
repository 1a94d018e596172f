"""mpi4py's single-buffer specifications (``[buf, MPI.DOUBLE]``, ``[buf, count, dt]``,
``[buf, (count, displ), dt]``, NumPy dtypes and type codes) run natively for every
collective with one buffer per side, and for Reduce_scatter with recvcounts: the Python
resolver (``shmcoll.resolve``), whose calls this script counts, is never asked, and
every result (the whole receive
buffer, so the bytes a count leaves out too) equals MPI's for the same specifications.
Prints one line: ``rank R routes python=<calls> failures=<n>``."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import shmcoll

calls: list[str] = []

world = MPI.COMM_WORLD
comm = shmcoll.Comm(world)
p, me = comm.size, comm.rank
for name in ("whole", "per_rank", "vector", "counts", "reduction"):
    impl = getattr(shmcoll.resolve, name)
    setattr(shmcoll.resolve, name, lambda *a, _n=name, _f=impl, **k: (calls.append(_n), _f(*a, **k))[1])
failures = 0
D = MPI.DOUBLE


def data(n: int, seed: int) -> np.ndarray:
    return np.arange(n, dtype=np.float64) * (seed + 1) + 100 * me


def check(label: str, run, n_send: int, n_recv: int) -> None:  # type: ignore[no-untyped-def]
    """run(c, send, recv) on shmcoll and on MPI with fresh buffers; compare the receive
    buffers whole (and the send buffers, which Bcast and in-place calls write)."""
    global failures
    out = []
    for c in (comm, world):
        send, recv = data(n_send, 1), np.full(n_recv, -7.0)
        run(c, send, recv)
        out.append((send, recv))
    (s1, r1), (s2, r2) = out
    if not (np.array_equal(r1, r2) and np.array_equal(s1, s2)):
        failures += 1
        print(f"MISMATCH {label}: {r1} {s1} != {r2} {s2}", flush=True)


n = 6  # elements per block


def rooted(root: int) -> None:
    mine = me == root
    check(f"Bcast [b,D] root={root}", lambda c, s, r: c.Bcast([s, D], root=root), n, 1)
    check(f"Bcast [b,4,D] root={root}", lambda c, s, r: c.Bcast([s, 4, D], root=root), n, 1)
    check(f"Bcast [b,(3,2),D] root={root}", lambda c, s, r: c.Bcast([s, (3, 2), D], root=root), n, 1)
    reduce = lambda c, s, r: c.Reduce([s, n - 1, D], [r, n - 1, D] if mine else None, op=MPI.SUM, root=root)  # noqa: E731
    check(f"Reduce root={root}", reduce, n, n)
    gather = lambda c, s, r: c.Gather([s, 2, D], [r, 2, D] if mine else None, root=root)  # noqa: E731
    check(f"Gather root={root}", gather, n, 2 * p + 1)
    scatter = lambda c, s, r: c.Scatter([s, 1, "d"] if mine else None, [r, 1, "d"], root=root)  # noqa: E731
    check(f"Scatter root={root}", scatter, 2 * p, 3)


for root in range(p):
    rooted(root)
check("Allreduce [b,D]", lambda c, s, r: c.Allreduce([s, D], [r, D], op=MPI.SUM), n, n)
check("Allreduce [b,n,D]", lambda c, s, r: c.Allreduce([s, 4, D], [r, 4, D], op=MPI.MAX), n, n)
# mpi4py takes no NumPy dtypes in a specification: MPI gets the MPI datatype.
check(
    "Allreduce dtype",
    lambda c, s, r: (
        c.Allreduce([s, np.float64], [r, np.dtype("f8")]) if c is comm else c.Allreduce([s, D], [r, D])
    ),
    n,
    n,
)
check("Allreduce in place", lambda c, s, r: c.Allreduce(MPI.IN_PLACE, [s, 5, D], op=MPI.SUM), n, n)
check("Allgather [b,D]", lambda c, s, r: c.Allgather([s, D], [r, D]), n, n * p)
check("Allgather [b,3,D]", lambda c, s, r: c.Allgather([s, 3, D], [r, 3, D]), n, 3 * p + 2)
check("Reduce_scatter_block", lambda c, s, r: c.Reduce_scatter_block([s, 2, D], [r, 2, D]), 2 * p, 3)
rs = lambda c, s, r: c.Reduce_scatter([s, D], [r, 2, D], [2] * p, op=MPI.SUM)  # noqa: E731
check("Reduce_scatter", rs, 2 * p, 3)
check("Alltoall [b,D]", lambda c, s, r: c.Alltoall([s, D], [r, D]), 2 * p, 2 * p)
check("Alltoall [b,1,D]", lambda c, s, r: c.Alltoall([s, 1, D], [r, 1, D]), 2 * p, 2 * p)
check("Alltoall in place", lambda c, s, r: c.Alltoall(MPI.IN_PLACE, [s, D]), 2 * p, 1)
python = len(calls)
comm.Free()
print(f"rank {me} routes python={python} failures={failures} {sorted(set(calls))}", flush=True)
