"""Run under ``mpiexec -n N``: ``per_rank_env.py VAR v0 v1 ...`` sets VAR to v<rank> on each
rank (``-``: unset) before ``shmcoll.Comm(MPI.COMM_WORLD)``, then reports, between ``@@``
marks (the launcher may join the ranks' lines): ``rank R: OK <class> <source>`` after an
Alltoall, or ``rank R: ERR <class>: <message>`` (``[rank=k]`` appended for a
PeerRejectedError). Settings read at creation must make every rank raise when they are
bad on one rank or differ, never leave a rank waiting."""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

import shmcoll

world = MPI.COMM_WORLD
me = world.Get_rank()
name, values = sys.argv[1], sys.argv[2:]


def report(line: str) -> None:
    sys.stdout.write(f"\n@@rank {me}: {line}@@\n")
    sys.stdout.flush()


if values[me] == "-":
    os.environ.pop(name, None)
else:
    os.environ[name] = values[me]
try:
    comm = shmcoll.Comm(world)
    s = np.arange(comm.size, dtype=np.int64) + 100 * comm.rank
    r = np.empty_like(s)
    comm.Alltoall(s, r)
    source = comm.selection()[0] if isinstance(comm, shmcoll.Comm) else "-"
    report(f"OK {type(comm).__name__} {source}")
    comm.Free()
except shmcoll.ShmcollError as e:
    extra = f" [rank={e.rank}]" if isinstance(e, shmcoll.PeerRejectedError) else ""
    report(f"ERR {type(e).__name__}: {e}{extra}")
