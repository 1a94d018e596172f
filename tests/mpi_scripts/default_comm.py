"""Run under ``mpiexec -n N``: ``shmcoll.Comm()`` without an argument wraps COMM_WORLD,
and an error on one rank reaches the others as PeerRejectedError."""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import shmcoll

world = MPI.COMM_WORLD
comm = shmcoll.Comm()
failures = []
if comm.mpi_comm is not world or (comm.rank, comm.size) != (world.Get_rank(), world.Get_size()):
    failures.append(f"Comm() is {comm!r} over {comm.mpi_comm!r}")
p, me = comm.size, comm.rank
s = np.array([100 * me + j for j in range(p)], np.int64)
r = np.zeros(p, np.int64)
comm.Alltoall(s, r)
if r.tolist() != [100 * i + me for i in range(p)]:
    failures.append(f"Alltoall: {r.tolist()}")
if p > 1:
    bad = p - 1
    recv = np.zeros(p, np.int64)
    if me == bad:
        recv.flags.writeable = False
    try:
        comm.Alltoall(s, recv)
        failures.append("no error for a read-only receive buffer")
    except shmcoll.BadBufferError:
        if me != bad:
            failures.append("BadBufferError on a rank with a good buffer")
    except shmcoll.PeerRejectedError as e:
        if me == bad or e.rank != bad:
            failures.append(f"PeerRejectedError on rank {me} naming rank {e.rank}")
    if recv.any():
        failures.append("receive buffer written")
dup = comm.Dup()
r[...] = 0
dup.Alltoall(s, r)
if r.tolist() != [100 * i + me for i in range(p)]:
    failures.append(f"Dup Alltoall: {r.tolist()}")
dup.Free()
comm.Free()
everyone = world.allgather(failures)
if me == 0:
    for rank, fs in enumerate(everyone):
        for f in fs:
            print(f"rank {rank}: {f}")
    print(f"default_comm size={p} failures={sum(map(len, everyone))}")
sys.exit(1 if any(everyone) else 0)
