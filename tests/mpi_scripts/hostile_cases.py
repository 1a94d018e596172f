"""Run under ``mpiexec -n N``: every hostile and careless case of tests/test_hostile.py on
communicators over MPI.COMM_WORLD (MPI's launcher, MPI's bootstrap, MPI to fall back to),
each case on a fresh communicator. Rank 0 gathers the outcomes through MPI, judges them as
the standalone test does, prints one line per wrong case and ``hostile cases: K wrong``,
and every rank exits with 1 if any case was wrong."""

from __future__ import annotations

import sys
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import shmcoll
from test_hostile import CASES, NEEDS_TWO, _verdict

world = MPI.COMM_WORLD
p, me = world.Get_size(), world.Get_rank()
wrong: list[str] = []
for name, case in CASES.items():
    if p == 1 and name in NEEDS_TWO:
        continue
    for bad in sorted({-1, p - 1}):
        comm = shmcoll.Comm(world)
        try:
            out = case(comm, bad)
        except BaseException as e:  # a case must not raise: report it as wrong
            out = {"exc": type(e).__name__, "mro": [], "msg": str(e), "untouched": False, "after": "raised"}
        finally:
            comm.Free()
        outs = world.gather(out, root=0)
        if me == 0:
            assert outs is not None
            wrong += [f"{name} bad={bad}: {w}" for w in _verdict(name, outs)]
if me == 0:
    for line in wrong:
        print(line, flush=True)
    print(f"hostile cases: {len(wrong)} wrong", flush=True)
sys.exit(1 if world.bcast(len(wrong), root=0) else 0)
