"""Arguments that mpi4py refuses (or takes) on every rank alike, given to shmcoll.Comm and to
mpi4py's communicator in the same launch: shmcoll must refuse what mpi4py refuses (a
ShmcollError on every rank, before any data moves) and give mpi4py's results for what it
takes. The cases are those a reviewer found shmcoll getting wrong: send and receive
buffers of different element types in a reduction (the bytes of one were summed as the
other's), a datatype that does not divide the buffer (1.5 elements moved), ``None`` as a
specification's datatype, arithmetic on MPI.BYTE and MPI.PACKED, and shmcoll's operators
in the calls mpi4py serves (Scan, Exscan, the nonblocking collectives).
Prints one line: ``rank R parity cases=<n> failures=<n>``, and each failure before it."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import shmcoll

warnings.simplefilter("ignore")  # the announced fallbacks of Scan and the like
world = MPI.COMM_WORLD
comm = shmcoll.Comm(world)
p, me = world.size, world.rank
D, F = MPI.DOUBLE, MPI.FLOAT
cases = failures = 0


def outcome(c: Any, run: Callable[[Any, Any], Any]) -> tuple[str, bytes]:
    """("ok", the result's bytes) or ("raised", b""); the op is mpi4py's or shmcoll's to
    match the communicator, unless the case passes its own."""
    ops = shmcoll if c is comm else MPI
    try:
        got = run(c, ops)
        return "ok", np.ascontiguousarray(got).tobytes()
    except Exception as e:
        if c is comm and not isinstance(e, shmcoll.ShmcollError):
            return f"raised {type(e).__name__} (not a ShmcollError): {e}", b""
        return "raised", b""


def case(label: str, run: Callable[[Any, Any], Any]) -> None:
    global cases, failures
    cases += 1
    mine, theirs = outcome(comm, run), outcome(world, run)
    if mine != theirs:
        failures += 1
        print(f"rank {me} FAIL {label}: shmcoll {mine[0]}, mpi4py {theirs[0]}", flush=True)
    world.Barrier()


def arange(n: int, dt: Any = np.float64) -> np.ndarray:
    return (np.arange(n) + 10 * me).astype(dt)


# Reductions whose send and receive element types differ.
case("Allreduce float32 -> float64", lambda c, o: c.Allreduce(arange(4, np.float32), r := np.zeros(4)) or r)
case(
    "Allreduce [s, FLOAT] -> [r, DOUBLE]",
    lambda c, o: c.Allreduce([arange(4, np.float32), F], [r := np.zeros(2), D]) or r,
)
case(
    "Allreduce int64 -> uint64 MIN",
    lambda c, o: c.Allreduce(-np.ones(3, np.int64), r := np.zeros(3, np.uint64), op=o.MIN) or r,
)
case(
    "Reduce_scatter_block float32 -> float64",
    lambda c, o: c.Reduce_scatter_block(arange(4 * p, np.float32), r := np.zeros(4)) or r,
)
case(
    "Allreduce float64 -> float64 (the same: fine)",
    lambda c, o: c.Allreduce(arange(5), r := np.zeros(5)) or r,
)

# A datatype that does not divide the buffer: mpi4py cannot infer the count.
case("Bcast [12 bytes, DOUBLE]", lambda c, o: c.Bcast([b := arange(3, np.int32), D], root=0) or b)
case(
    "Allgather [12 bytes, DOUBLE]",
    lambda c, o: c.Allgather([arange(3, np.int32), D], [r := np.zeros(3 * p, np.int32), D]) or r,
)
case(
    "Reduce_scatter [12-byte receive buffer, DOUBLE], no recvcounts",
    lambda c, o: (
        c.Reduce_scatter([arange(3 * p, np.int32), D], [r := np.zeros(3, np.int32), D], op=o.SUM) or r
    ),
)
if p > 1:  # a receive buffer of p + 1 doubles does not split into p blocks
    case(
        "Allgather into p + 1 doubles",
        lambda c, o: c.Allgather([arange(2, np.int32), MPI.BYTE], [r := np.zeros(p + 1), D]) or r,
    )

# None as the datatype: the buffer's own.
case("Bcast [buf, None]", lambda c, o: c.Bcast([b := arange(4), None], root=0) or b)
case("Bcast [buf, 2, None]", lambda c, o: c.Bcast([b := arange(4), 2, None], root=0) or b)
case(
    "Allreduce [s, None], [r, None]",
    lambda c, o: c.Allreduce([arange(4), None], [r := np.zeros(4), None]) or r,
)
case(
    "Alltoall [s, None], [r, None]",
    lambda c, o: c.Alltoall([arange(2 * p), None], [r := np.zeros(2 * p), None]) or r,
)

# MPI.BYTE and MPI.PACKED: bitwise operators only.
for dt, name in ((MPI.BYTE, "BYTE"), (MPI.PACKED, "PACKED")):
    for op in ("SUM", "MAX", "PROD"):
        case(
            f"Allreduce {name} {op}",
            lambda c, o, dt=dt, op=op: (
                c.Allreduce([arange(3, np.uint8), dt], [r := np.zeros(3, np.uint8), dt], op=getattr(o, op))
                or r
            ),
        )
case(
    "Allreduce BYTE BXOR (defined)",
    lambda c, o: (
        c.Allreduce([arange(3, np.uint8), MPI.BYTE], [r := np.zeros(3, np.uint8), MPI.BYTE], op=o.BXOR) or r
    ),
)

# shmcoll's operators in the calls mpi4py serves.
case("Scan shmcoll.SUM", lambda c, o: c.Scan(arange(3), r := np.zeros(3), op=o.SUM) or r)
case(
    "Exscan shmcoll.MAX",
    lambda c, o: c.Exscan(arange(3), r := np.zeros(3), op=o.MAX) or (r if me else np.zeros(3)),
)
case("Iallreduce shmcoll.SUM", lambda c, o: c.Iallreduce(arange(3), r := np.zeros(3), op=o.SUM).Wait() or r)
case(
    "Ireduce shmcoll.PROD",
    lambda c, o: c.Ireduce(arange(3) + 1, r := np.zeros(3), op=o.PROD, root=0).Wait() or r,
)

print(f"rank {me} parity cases={cases} failures={failures}", flush=True)
