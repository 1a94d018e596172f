"""mpi4py's object collectives on shmcoll.Comm(MPI.COMM_WORLD) against the same calls on
MPI.COMM_WORLD, in one launch: bcast, gather, scatter, allgather, alltoall, reduce,
allreduce, scan and exscan of short and long pickles, with mpi4py's operators (MAXLOC
included), shmcoll's and a callable. Results must be equal (reductions of integers and of
sequences, which are exact in any order). No fallback may be counted or announced. Prints
``rank R objects compared=<n> failures=<n> fallbacks=<n>``."""

from __future__ import annotations

import warnings

import numpy as np
from mpi4py import MPI
from object_equality import same  # this script's directory is on sys.path

import shmcoll
from shmcoll.ops import fallback_calls

world = MPI.COMM_WORLD
comm = shmcoll.Comm(world)
p, me = comm.size, comm.rank
compared = failures = 0


def both(label: str, call: str, *args: object, **kw: object) -> None:
    global compared, failures
    want = getattr(world, call)(*args, **kw)
    got = getattr(comm, call)(*args, **kw)
    compared += 1
    if not same(got, want):
        failures += 1
        print(f"FAIL {label}: shmcoll {got!r:.100} MPI {want!r:.100}", flush=True)


def value(rank: int, n: int) -> object:
    return {"rank": rank, "data": list(range(n)), "text": "t" * n}


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for n in (0, 3, 200, 5000):  # short and long pickles
        for root in sorted({0, p - 1}):
            both(f"bcast n={n} root={root}", "bcast", value(root, n) if me == root else None, root=root)
            both(f"gather n={n} root={root}", "gather", value(me, n + me), root=root)
            items = [value(j, n + j) for j in range(p)] if me == root else None
            both(f"scatter n={n} root={root}", "scatter", items, root=root)
            both(f"reduce n={n} root={root}", "reduce", [me] * (n + me), op=MPI.SUM, root=root)
            arrays = {"big": np.arange(n * 20.0), "small": np.arange(n % 7)} if me == root else None
            both(f"bcast arrays n={n} root={root}", "bcast", arrays, root=root)
        both(f"allgather n={n}", "allgather", value(me, n * (me + 1)))
        both(f"alltoall n={n}", "alltoall", [value(me * 10 + j, n + j) for j in range(p)])
        both(f"allreduce list n={n}", "allreduce", [me] * (n + me))
        both(f"allreduce array n={n}", "allreduce", np.arange(n, dtype=np.int64) * (me + 1), op=MPI.SUM)
        both(f"scan n={n}", "scan", [me] * n)
        both(f"exscan n={n}", "exscan", [me] * n)
    for op in (MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN, MPI.LAND, MPI.LOR, MPI.BAND, MPI.BOR, MPI.BXOR):
        both(f"allreduce {op}", "allreduce", me + 3, op=op)
        both(f"reduce {op}", "reduce", me * 5 + 1, op=op, root=p - 1)
    both("allreduce MAXLOC", "allreduce", ((me * 7) % 3, me), op=MPI.MAXLOC)
    both("allreduce MINLOC", "allreduce", ((me * 7) % 3, me), op=MPI.MINLOC)
    both("allreduce callable", "allreduce", str(me), op=lambda a, b: a + b)
    got_shm = comm.allreduce(me + 1, op=shmcoll.PROD)
    want = world.allreduce(me + 1, op=MPI.PROD)
    compared += 1
    failures += got_shm != want
fallbacks = len(fallback_calls) + sum("run on MPI" in str(w.message) for w in caught)
print(f"rank {me} objects compared={compared} failures={failures} fallbacks={fallbacks}", flush=True)
comm.Free()
