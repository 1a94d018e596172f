"""mpi4py's methods that shmcoll does not implement work on a shmcoll.Comm (and a
HierComm with SHMCOLL_NODE_SPLIT) as on the wrapped mpi4py communicator: point-to-point,
Scan/Exscan, nonblocking collectives, names, and a HierComm's lowercase object collectives
(a shmcoll.Comm has its own: not counted). Collectives among them are counted fallbacks
with one warning each; the rest is not counted. Prints
``rank R passthrough failures=<n> counted=<names> warned=<n>``."""

from __future__ import annotations

import warnings

import numpy as np
from mpi4py import MPI

import shmcoll
from shmcoll.ops import fallback_calls

world = MPI.COMM_WORLD
comm = shmcoll.Comm(world)
p, me = comm.size, comm.rank
failures = 0


def expect(label: str, ok: bool) -> None:
    global failures
    if not ok:
        failures += 1
        print(f"FAIL {label}", flush=True)


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    # Point-to-point: a ring of Python objects and of buffers.
    right, left = (me + 1) % p, (me - 1) % p
    got = comm.sendrecv({"from": me}, dest=right, source=left)
    expect("sendrecv", got == {"from": left})
    out = np.full(3, me, np.int64)
    back = np.empty(3, np.int64)
    req = comm.Irecv(back, source=left, tag=7)
    comm.Send(out, dest=right, tag=7)
    req.Wait()
    expect("Send/Irecv", bool((back == left).all()))
    # Object collectives (twice each: on a HierComm one warning per method, every call
    # counted; shmcoll.Comm's own, neither).
    for _ in range(2):
        expect("bcast", comm.bcast({"root": 0} if me == 0 else None, root=0) == {"root": 0})
        expect("allreduce", comm.allreduce(me + 1) == p * (p + 1) // 2)
    expect("gather", comm.gather(me, root=0) == (list(range(p)) if me == 0 else None))
    # Buffer collectives shmcoll lacks, IN_PLACE included, against MPI's own.
    x = np.arange(4, dtype=np.float64) + me
    got, want = np.empty(4), np.empty(4)
    comm.Scan(x, got, op=MPI.SUM)
    world.Scan(x, want, op=MPI.SUM)
    expect("Scan", np.array_equal(got, want))
    y = x.copy()
    comm.Exscan(shmcoll.IN_PLACE, y, op=MPI.SUM)
    z = x.copy()
    world.Exscan(MPI.IN_PLACE, z, op=MPI.SUM)
    expect("Exscan in place", me == 0 or np.array_equal(y, z))
    r = np.empty(4)
    comm.Iallreduce(x, r, op=MPI.MAX).Wait()
    expect("Iallreduce", np.array_equal(r, np.arange(4.0) + p - 1))
    # Not collectives: MPI's own, not counted.
    expect("Get_name", comm.Get_name() == world.Get_name())
    expect("Is_intra", comm.Is_intra() is True)
    clone = comm.Clone()  # a shmcoll communicator again, not the MPI one
    expect("Clone", isinstance(clone, type(comm)) and clone.size == p)
    clone.Free()
    # A Dup has its own MPI communicator: point-to-point traffic on the two never matches,
    # and Free frees it.
    d = comm.Dup()
    got_d, got_c = np.zeros(1, np.int64), np.zeros(1, np.int64)
    reqs = [d.Irecv(got_d, source=left, tag=9), comm.Irecv(got_c, source=left, tag=9)]
    comm.Send(np.ones(1, np.int64), dest=right, tag=9)
    d.Send(np.full(1, 2, np.int64), dest=right, tag=9)
    MPI.Request.Waitall(reqs)
    expect("Dup isolates point-to-point", (got_d[0], got_c[0]) == (2, 1))
    d.Free()
    expect("Dup's MPI communicator freed", d.mpi_comm == MPI.COMM_NULL)
    try:
        comm.No_such_method  # noqa: B018
        expect("unknown attribute raises", False)
    except AttributeError:
        pass
    # A Cartesian communicator's own methods (as FFT codes carve them) come from it too.
    cart = world.Create_cart([p], periods=[True])
    cc = shmcoll.Comm(cart)
    expect("Cartcomm Get_coords", cc.Get_coords(cc.rank) == cart.Get_coords(cart.Get_rank()))
    expect("Cartcomm Shift", cc.Shift(0, 1) == cart.Shift(0, 1))
    expect("Cartcomm dims", cc.dims == cart.dims)
    cc.Free()
    cart.Free()
    # The shmcoll collectives are unaffected by the MPI traffic in between.
    s = np.full(2, me, np.int32)
    t = np.empty(2, np.int32)
    comm.Allreduce(s, t)
    expect("Allreduce after", bool((t == sum(range(p))).all()))
warned = sum("run on MPI" in str(w.message) for w in caught)
counted = sorted(k.split(" ")[0] for k in fallback_calls)
counts = [fallback_calls.get(f"{n} (mpi4py's)") for n in ("bcast", "allreduce", "Get_name")]
hier = not isinstance(comm, shmcoll.Comm)
expect("counts", counts == ([2, 2, None] if hier else [None, None, None]))
comm.free()
expect("free", comm.freed)
print(f"rank {me} passthrough failures={failures} counted={','.join(counted)} warned={warned}", flush=True)
