"""Run under ``mpiexec -n N``: communicators over MPI ones reuse the segments of freed ones.

shmcoll.Comm(COMM_WORLD) created and freed repeatedly takes one segment again; Dup and Split
of a Comm do too (their MPI communicators are MPI's own, freed with them); communicators
freed in different orders on different ranks are reused; a segment one rank still holds is
not; an invalid setting on one rank fails the creation on every rank; collectives on every
reused segment equal MPI's. Prints ``pooled_creation size=N failures=K``.
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

import shmcoll
from shmcoll import _core

w = MPI.COMM_WORLD
p, me = w.Get_size(), w.Get_rank()
failures: list[str] = []


def name(c: shmcoll.Comm) -> str:
    return str(c.config()["segment"])


def same_as_mpi(c: shmcoll.Comm, mpi: MPI.Intracomm, salt: int) -> None:
    x = (np.arange(7, dtype=np.float64) + salt) * (c.rank + 1)
    mine, theirs = np.empty_like(x), np.empty_like(x)
    c.Allreduce(x, mine)
    mpi.Allreduce(x, theirs)
    if not np.array_equal(mine, theirs):
        failures.append(f"Allreduce {salt}: {mine.tolist()} != {theirs.tolist()}")
    s = np.arange(2 * c.size, dtype=np.int32) + 10 * c.rank + salt
    mine_i, theirs_i = np.empty_like(s), np.empty_like(s)
    c.Alltoall(s, mine_i)
    mpi.Alltoall(s, theirs_i)
    if not np.array_equal(mine_i, theirs_i):
        failures.append(f"Alltoall {salt}: {mine_i.tolist()} != {theirs_i.tolist()}")


# Comm(COMM_WORLD), again and again: one segment.
names = set()
for i in range(6):
    c = shmcoll.Comm(w)
    names.add(name(c))
    same_as_mpi(c, w, i)
    c.Free()
if len(names) != 1:
    failures.append(f"Comm(COMM_WORLD) took {len(names)} segments")

# Dup of a Comm: its own MPI communicator, freed with it, and a reused segment.
base = shmcoll.Comm(w)
dups = set()
for i in range(4):
    d = base.Dup()
    dups.add(name(d))
    if d.mpi_comm is base.mpi_comm or d.mpi_comm.Compare(w) != MPI.CONGRUENT:
        failures.append("Dup's MPI communicator is not a duplicate of COMM_WORLD")
    same_as_mpi(d, d.mpi_comm, 10 + i)
    d.Free()
if len(dups) != 1 or dups & {name(base)}:
    failures.append(f"Dup took segments {sorted(dups)} (base {name(base)})")

# Two duplicates freed in opposite orders on even and odd ranks serve the next two.
a, b = base.Dup(), base.Dup()
pair = {name(a), name(b)}
for c in (a, b) if me % 2 == 0 else (b, a):
    c.Free()
c1, c2 = base.Dup(), base.Dup()
if {name(c1), name(c2)} != pair:
    failures.append("interleaved frees: the segments were not both reused")
same_as_mpi(c2, c2.mpi_comm, 20)
same_as_mpi(c1, c1.mpi_comm, 21)
c1.Free()
c2.Free()

# A segment rank 0 still holds is not reused.
held = base.Dup()
held_name = name(held)
if me != 0:
    held.Free()
other = base.Dup()
if name(other) == held_name:
    failures.append("a segment rank 0 still holds was reused")
same_as_mpi(other, other.mpi_comm, 30)
other.Free()
if me == 0:
    held.Free()

# Split: the same halves twice share a segment per half; the MPI side matches.
halves = []
for _ in range(2):
    h = base.Split(me % 2, me)
    if h is None or (h.rank, h.size) != (h.mpi_comm.Get_rank(), h.mpi_comm.Get_size()):
        failures.append(f"Split gave {h!r}")
        break
    halves.append(name(h))
    same_as_mpi(h, h.mpi_comm, 40)
    h.Free()
if len(set(halves)) != 1:
    failures.append(f"the same halves took segments {halves}")
rest = base.Split(-1 if me == 0 else 0, me)
if (rest is None) != (me == 0):
    failures.append(f"Split with color {-1 if me == 0 else 0} gave {rest!r}")
if rest is not None:
    same_as_mpi(rest, rest.mpi_comm, 45)
    rest.Free()

# An invalid setting on one rank fails Comm(COMM_WORLD) on every rank, then all recover.
bad_rank = p - 1
if me == bad_rank:
    os.environ["SHMCOLL_POOL_SEGMENTS"] = "many"
try:
    shmcoll.Comm(w).Free()
    failures.append("no error for an invalid setting on one rank")
except shmcoll.ArgumentError as e:
    expected = "SHMCOLL_POOL_SEGMENTS" if me == bad_rank else f"rank {bad_rank} could not create"
    if expected not in str(e):
        failures.append(f"unexpected error: {e}")
os.environ.pop("SHMCOLL_POOL_SEGMENTS", None)
c = shmcoll.Comm(w)
same_as_mpi(c, w, 50)
c.Free()

base.Free()
if _core.pooled_segments() > 4:
    failures.append(f"{_core.pooled_segments()} segments pooled, more than the default 4")

count = w.allreduce(len(failures))
for f in failures:
    print(f"rank {me}: {f}", flush=True)
if me == 0:
    print(f"pooled_creation size={p} failures={count}", flush=True)
