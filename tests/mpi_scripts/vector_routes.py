"""Vector collectives with mpi4py's specifications (counts as lists or NumPy arrays,
predefined mpi4py or NumPy datatypes; the other side a buffer or a specification) run
natively: Alltoallv, Allgatherv, Gatherv and Scatterv never ask the Python resolver
(`shmcoll.resolve`), whose calls this script counts, and give MPI's results.
Prints one line: ``routes python=<calls> failures=<n>``."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import shmcoll

world = MPI.COMM_WORLD
comm = shmcoll.Comm(world)
p, me = comm.size, comm.rank
calls: list[str] = []
for name in ("whole", "per_rank", "vector", "counts", "reduction"):
    impl = getattr(shmcoll.resolve, name)
    setattr(shmcoll.resolve, name, lambda *a, _n=name, _f=impl, **k: (calls.append(_n), _f(*a, **k))[1])
failures = 0


def same(label: str, got: np.ndarray, want: np.ndarray) -> None:
    global failures
    if not np.array_equal(got, want):
        failures += 1
        print(f"MISMATCH {label}: {got} != {want}", flush=True)


counts = [j + 1 for j in range(p)]  # ragged: rank j sends j + 1 elements
displs = [sum(counts[:j]) + j for j in range(p)]  # with a gap before each block
total = displs[-1] + counts[-1]
mine = np.arange(counts[me], dtype=np.float64) + 100 * me
for root in range(p):
    # Allgatherv
    got, want = np.zeros(total), np.zeros(total)
    comm.Allgatherv(mine, [got, (counts, displs), MPI.DOUBLE])
    world.Allgatherv(mine, [want, (counts, displs), MPI.DOUBLE])
    same("Allgatherv", got, want)
    # The plain side as a specification: [buf, datatype], [buf, count, datatype].
    got[:] = 0
    comm.Allgatherv([mine, MPI.DOUBLE], [got, (counts, displs), MPI.DOUBLE])
    same("Allgatherv [buf, dt]", got, want)
    # Gatherv, both the (counts, displs) and the counts-only forms
    got, want = np.zeros(total), np.zeros(total)
    comm.Gatherv(mine, [got, counts, displs, MPI.DOUBLE] if me == root else None, root=root)
    world.Gatherv(mine, [want, counts, displs, MPI.DOUBLE] if me == root else None, root=root)
    same(f"Gatherv root={root}", got, want)
    # Scatterv
    src = np.arange(total, dtype=np.float64) * 3
    got, want = np.zeros(counts[me]), np.zeros(counts[me])
    comm.Scatterv([src, (counts, displs), MPI.DOUBLE] if me == root else None, got, root=root)
    world.Scatterv([src, (counts, displs), MPI.DOUBLE] if me == root else None, want, root=root)
    same(f"Scatterv root={root}", got, want)
    wide = np.full(counts[me] + 2, -1.0)
    spec = [src, (counts, displs), MPI.DOUBLE] if me == root else None
    comm.Scatterv(spec, [wide, counts[me], MPI.DOUBLE], root=root)
    same(f"Scatterv [buf, count, dt] root={root}", wide, np.concatenate([want, [-1.0, -1.0]]))
# Alltoallv: rank i sends i + j + 1 elements to rank j.
sc = [me + j + 1 for j in range(p)]
rc = [j + me + 1 for j in range(p)]
sd = [sum(sc[:j]) for j in range(p)]
rd = [sum(rc[:j]) for j in range(p)]
send = np.arange(sum(sc), dtype=np.int32) + 1000 * me
got, want = np.zeros(sum(rc), np.int32), np.zeros(sum(rc), np.int32)
comm.Alltoallv([send, (sc, sd), MPI.INT], [got, (rc, rd), MPI.INT])
world.Alltoallv([send, (sc, sd), MPI.INT], [want, (rc, rd), MPI.INT])
same("Alltoallv", got, want)
comm.Alltoallv([send, sc, MPI.INT], [got, rc, MPI.INT])
same("Alltoallv counts only", got, want)
# NumPy count arrays and NumPy datatypes (type codes, dtypes, scalar types) are native too.
sca, sda, rca, rda = (np.array(v) for v in (sc, sd, rc, rd))
got[:] = 0
comm.Alltoallv([send, (sca, sda), "i"], [got, (rca, rda), np.dtype(np.int32)])
same("Alltoallv numpy counts and dtypes", got, want)
got[:] = 0
comm.Alltoallv([send, sca.astype(np.int32), np.int32], [got, rca, None])
same("Alltoallv numpy counts only", got, want)
# A derived datatype is the resolver's (one call per side): counted, and still right.
derived = MPI.INT.Create_contiguous(1).Commit()
got[:] = 0
comm.Alltoallv([send, (sc, sd), derived], [got, (rc, rd), derived])
same("Alltoallv derived datatype", got, want)
derived.Free()
python = len(calls)
comm.Free()
print(f"rank {me} routes python={python} failures={failures}", flush=True)
