"""Run under ``mpiexec -n N``: what shmcoll does not serve itself runs on MPI with MPI's
results, announced once per kind (a RuntimeWarning) and counted per call, where the
ranks agree on it; where they do not, every rank raises instead of waiting:

* derived datatypes with gaps (Alltoall, Alltoallv, Bcast; rank 0 alone: every rank raises;
  the call enters the native engine once, which agrees on the fallback itself),
* buffers with only the CUDA array interface (device memory to shmcoll),
* MPI.BOTTOM with absolute addresses,
* persistent forms of those and of an operator shmcoll does not implement: MPI's request;
* and CPU DLPack buffers are shmcoll's (nothing counted), a root that is not a rank makes
  mpi4py's ``MPI.Exception`` of class ``ERR_ROOT``.

Prints ``FAIL ...`` lines and ``rank R served-by-mpi failures=<n>``.
"""

from __future__ import annotations

import sys
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
        print(f"FAIL rank {me} {label}", flush=True)


def counted(kind: str) -> int:
    return sum(n for k, n in fallback_calls.items() if k.startswith(kind))


class CudaArrayInterfaceOnly:
    """Host memory behind the CUDA array interface alone (a non-CUDA-aware MPI reads the
    pointer as host memory, so MPI's results can be checked here)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.__cuda_array_interface__ = {
            "version": 3,
            "data": (a.__array_interface__["data"][0], False),
            "typestr": a.dtype.str,
            "shape": a.shape,
        }


class DLPackOnly:
    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, **kw: object) -> object:
        kw.pop("stream", None)
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def _summed(invec: object, inoutvec: object, datatype: object) -> None:
    b = np.frombuffer(inoutvec, np.float64)  # type: ignore[call-overload]
    b += np.frombuffer(invec, np.float64)  # type: ignore[call-overload]


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    # every other double of a 2k-double block: a vector type with gaps
    gappy = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()  # 2 doubles, extent 3 doubles
    resized = gappy.Create_resized(0, 4 * 8).Commit()  # one element: 4 doubles, 2 used
    s = np.arange(4 * p, dtype=np.float64) + 100 * me
    r, want = np.full(4 * p, -1.0), np.full(4 * p, -1.0)
    before = counted("derived datatypes with gaps")
    entered = []  # the communicator's native methods called from Python code

    def hook(frame: object, event: str, arg: object) -> None:
        if event == "c_call" and getattr(arg, "__self__", None) is comm:
            entered.append(getattr(arg, "__name__", "?"))

    sys.setprofile(hook)
    comm.Alltoall([s, resized], [r, resized])
    sys.setprofile(None)
    # One crossing: the native method agrees on the fallback itself, then MPI runs.
    expect(f"a fallback enters the engine once ({entered})", entered == ["Alltoall"])
    world.Alltoall([s, resized], [want, resized])
    expect("Alltoall with gaps: MPI's result", np.array_equal(r, want))
    comm.Alltoallv([s, ([1] * p, list(range(p))), resized], [r, ([1] * p, list(range(p))), resized])
    expect("Alltoallv with gaps: MPI's result", np.array_equal(r, want))
    b = np.arange(4.0) if me == 0 else np.full(4, -1.0)
    comm.Bcast([b, 1, resized], root=0)
    expect("Bcast with gaps", b[0] == 0.0 and b[2] == 2.0 and (me == 0 or (b[1] == -1.0 and b[3] == -1.0)))
    expect("gaps counted", counted("derived datatypes with gaps") == before + 3)

    # Rank 0 alone with a gap type: every rank raises, none waits; the next call works.
    outcome = "served"
    try:
        comm.Alltoall([s, resized if me == 0 else MPI.DOUBLE], [r, resized if me == 0 else MPI.DOUBLE])
    except shmcoll.ShmcollError as e:
        outcome = type(e).__name__
    expect(
        f"mixed fallback raises everywhere ({outcome})",
        p == 1 or outcome in ("MismatchError", "PeerRejectedError"),
    )
    comm.Barrier()

    # The CUDA array interface: MPI's to move.
    before = counted("buffers with the CUDA array interface")
    s1, r1 = np.arange(2 * p, dtype=np.int32) + 10 * me, np.zeros(2 * p, np.int32)
    comm.Alltoall(CudaArrayInterfaceOnly(s1), CudaArrayInterfaceOnly(r1))
    expect("CAI Alltoall", r1.tolist() == [10 * i + k for i in range(p) for k in (2 * me, 2 * me + 1)])
    a1 = np.zeros(3, np.int64)
    comm.Allreduce(
        CudaArrayInterfaceOnly(np.full(3, me + 1, np.int64)), CudaArrayInterfaceOnly(a1), op=MPI.SUM
    )
    expect("CAI Allreduce", (a1 == p * (p + 1) // 2).all())
    expect("CAI counted", counted("buffers with the CUDA array interface") == before + 2)

    # MPI.BOTTOM with absolute addresses.
    x = np.full(2, float(me))
    xs = np.zeros(2 * p)
    addr = MPI.Get_address(x)
    abs_type = MPI.DOUBLE.Create_hindexed([2], [addr]).Commit()
    comm.Allgather([MPI.BOTTOM, 1, abs_type], [xs, MPI.DOUBLE])
    expect("BOTTOM Allgather", xs.tolist() == [float(i) for i in range(p) for _ in (0, 1)])
    abs_type.Free()
    expect("BOTTOM counted", counted("buffers at MPI.BOTTOM") == 1)

    # Persistent forms: MPI's requests.
    user_sum = MPI.Op.Create(_summed, commute=True)
    y = np.zeros(3)
    req = comm.Allreduce_init(np.full(3, me + 1.0), y, op=user_sum)
    expect("Allreduce_init with a user operator is MPI's request", isinstance(req, MPI.Prequest))
    for _ in range(2):
        y[...] = 0
        req.Start()
        req.Wait()
        expect("Allreduce_init result", (y == p * (p + 1) / 2).all())
    req.Free()
    user_sum.Free()
    req = comm.Alltoall_init([s, resized], [r, resized])
    expect("Alltoall_init with gaps is MPI's request", isinstance(req, MPI.Prequest))
    r[...] = -1
    req.Start()
    req.Wait()
    req.Free()
    expect("Alltoall_init with gaps: MPI's result", np.array_equal(r, want))

    # CPU DLPack: shmcoll's own.
    counts = dict(fallback_calls)
    calls = comm.stats()["calls"]
    d = np.zeros(4 * p)
    comm.Allgather(DLPackOnly(np.full(4, float(me))), DLPackOnly(d))
    expect("DLPack Allgather", d.tolist() == [float(i) for i in range(p) for _ in range(4)])
    expect("DLPack served by shmcoll", fallback_calls == counts and comm.stats()["calls"] == calls + 1)

    # A root that is not a rank: mpi4py's exception, on every rank.
    try:
        comm.reduce(me, op=MPI.SUM, root=p)
        expect("bad root raises", False)
    except MPI.Exception as e:
        expect("ERR_ROOT", e.Get_error_class() == MPI.ERR_ROOT and isinstance(e, shmcoll.ArgumentError))

    resized.Free()
    gappy.Free()

# One warning per kind, however many calls.
kinds = [str(w.message) for w in caught if "shmcoll:" in str(w.message)]
expect(f"one warning per kind: {kinds}", len(kinds) == len(set(kinds)))
for kind in ("derived datatypes with gaps", "CUDA array interface", "MPI.BOTTOM", "operator"):
    expect(f"announced: {kind}", any(kind in k for k in kinds))
print(f"rank {me} served-by-mpi failures={failures}", flush=True)
comm.Free()
