"""Run under ``mpiexec -n N``: a reduction handed to MPI (a user-defined operator) on some
ranks only raises a shmcoll error on every rank instead of leaving MPI's call and
shmcoll's waiting for each other; on every rank, MPI serves it. Prints one line per rank:
``rank R: <outcome of the mixed call> / <outcome of the agreed call>``."""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import shmcoll


def _summed(invec: object, inoutvec: object, datatype: object) -> None:
    a = np.frombuffer(invec, np.float64)  # type: ignore[call-overload]
    b = np.frombuffer(inoutvec, np.float64)  # type: ignore[call-overload]
    b += a


user_sum = MPI.Op.Create(_summed, commute=True)
comm = shmcoll.Comm(MPI.COMM_WORLD)
p, me = comm.size, comm.rank
s = np.full(4, me + 1.0)

mixed = "ok"
r = np.full(4, -1.0)
try:
    comm.Allreduce(s, r, op=user_sum if me == 0 else MPI.SUM)
except shmcoll.ShmcollError as e:
    mixed = type(e).__name__
    if not (r == -1.0).all():
        mixed += " (receive buffer written)"

agreed = "ok"
r = np.zeros(4)
try:
    comm.Allreduce(s, r, op=user_sum)
    if not (r == p * (p + 1) / 2).all():
        agreed = f"wrong result {r.tolist()}"
except shmcoll.ShmcollError as e:
    agreed = type(e).__name__

print(f"rank {me}: {mixed} / {agreed}", flush=True)
user_sum.Free()
sys.exit(0)
