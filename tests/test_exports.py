"""Buffers that offer DLPack or the CUDA array interface instead of the buffer protocol
(shmcoll/exports.py): CPU DLPack memory is read in place (shared with the producer,
writable unless flagged read-only), device memory and the CUDA array interface go to MPI
(`ServedByMPI`), and a communicator without MPI serves CPU DLPack buffers itself and makes
every rank raise for device ones. The exporters here are NumPy arrays behind objects that
offer only ``__dlpack__`` / ``__dlpack_device__`` (or only ``__cuda_array_interface__``),
as torch CPU tensors and CuPy arrays do."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import run_ranks
from shmcoll.exports import host_buffer


class DLPackOnly:
    """NumPy's array behind DLPack alone (the versioned protocol: NumPy's export carries
    the read-only flag only for read-only arrays)."""

    def __init__(self, a: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self.a, self.device = a, device

    def __dlpack__(self, **kw: Any) -> Any:
        kw.pop("stream", None)  # NumPy's exporter takes None only (host memory)
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


class LegacyDLPack(DLPackOnly):
    """The unversioned protocol (``__dlpack__(stream=None)`` only), which has no read-only
    flag: NumPy's reader makes such tensors read-only, mpi4py treats them as writable."""

    def __dlpack__(self, stream: Any = None) -> Any:  # type: ignore[override]
        assert stream is None
        return self.a.__dlpack__()


class CudaArrayInterfaceOnly:
    def __init__(self, a: np.ndarray) -> None:
        self.__cuda_array_interface__ = {
            "version": 3,
            "data": (a.__array_interface__["data"][0], False),
            "typestr": a.dtype.str,
            "shape": a.shape,
        }


def test_buffer_protocol_objects_are_themselves() -> None:
    a = np.arange(4.0)
    assert host_buffer(a) is a
    b = bytearray(3)
    assert host_buffer(b) is b


@pytest.mark.parametrize("shape_order", [((6,), "C"), ((2, 3), "C"), ((2, 3), "F"), ((), "C")])
def test_cpu_dlpack_is_read_in_place(shape_order: tuple[tuple[int, ...], str]) -> None:
    shape, order = shape_order
    a = np.zeros(shape, np.int32, order=order)
    v = host_buffer(DLPackOnly(a))
    assert isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype == np.int32 and v.size == a.size
    assert v.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    v[...] = 7  # writable, and the producer's own memory
    assert (a == 7).all()


def test_read_only_flag_is_kept() -> None:
    a = np.zeros(4)
    a.flags.writeable = False
    assert not host_buffer(DLPackOnly(a)).flags.writeable


def test_legacy_dlpack_is_writable_as_in_mpi4py() -> None:
    pytest.importorskip("mpi4py.MPI")  # mpi4py's own export gives the writable view
    a = np.zeros(5, np.float32)
    v = host_buffer(LegacyDLPack(a))
    assert v.dtype == np.float32 and v.flags.writeable
    v[...] = 2.5
    assert (a == 2.5).all()


def test_non_contiguous_dlpack_is_refused() -> None:
    a = np.zeros(8)[::2]
    with pytest.raises(shmcoll.BadBufferError):
        host_buffer(DLPackOnly(a))


@pytest.mark.parametrize("device", [(2, 0), (10, 1), (14, 0)])  # CUDA, ROCm, Metal
def test_device_dlpack_is_mpis(device: tuple[int, int]) -> None:
    with pytest.raises(shmcoll.ServedByMPI, match="device memory"):
        host_buffer(DLPackOnly(np.zeros(2), device))


@pytest.mark.parametrize("device", [(3, 0), (13, 0)])  # CUDA host (pinned), CUDA managed
def test_cpu_addressable_device_types_are_read_in_place(device: tuple[int, int]) -> None:
    a = np.zeros(3)
    v = host_buffer(DLPackOnly(a, device))
    assert v.__array_interface__["data"][0] == a.__array_interface__["data"][0]


def test_cuda_array_interface_is_mpis() -> None:
    with pytest.raises(shmcoll.ServedByMPI, match="CUDA array interface"):
        host_buffer(CudaArrayInterfaceOnly(np.zeros(2)))


def test_anything_else_is_refused() -> None:
    with pytest.raises(shmcoll.BadBufferError, match="neither the buffer protocol"):
        host_buffer(object())


# -- on a communicator without MPI (forked ranks) -----------------------------------------
def _dlpack_collectives() -> list[str]:
    """Alltoall, Allreduce, Bcast and Allgatherv with DLPack-only buffers on both sides."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    bad: list[str] = []
    s, r = np.arange(2 * p, dtype=np.float64) + 10 * me, np.zeros(2 * p)
    comm.Alltoall(DLPackOnly(s), DLPackOnly(r))
    want = np.concatenate([np.arange(2 * me, 2 * me + 2) + 10 * i for i in range(p)])
    if not np.array_equal(r, want):
        bad.append(f"Alltoall {r} != {want}")
    x, y = np.full(3, me + 1, np.int64), np.zeros(3, np.int64)
    comm.Allreduce(DLPackOnly(x), [DLPackOnly(y), "q"], op=shmcoll.SUM)
    if not (y == p * (p + 1) // 2).all():
        bad.append(f"Allreduce {y}")
    b = np.arange(4.0) if me == 0 else np.zeros(4)
    comm.Bcast(DLPackOnly(b), root=0)
    if not np.array_equal(b, np.arange(4.0)):
        bad.append(f"Bcast {b}")
    g = np.zeros(p * (p + 1) // 2, np.int32)
    comm.Allgatherv(DLPackOnly(np.full(me + 1, me, np.int32)), [DLPackOnly(g), list(range(1, p + 1))])
    if g.tolist() != [i for i in range(p) for _ in range(i + 1)]:
        bad.append(f"Allgatherv {g}")
    return bad


@pytest.mark.parametrize("n", [1, 2, 3])
def test_dlpack_buffers_are_served_by_shmcoll(n: int) -> None:
    for rank, bad in enumerate(run_ranks(n, _dlpack_collectives)):
        assert not bad, (rank, bad)


def _device_buffer_without_mpi() -> str:
    comm = shmcoll.Comm()
    try:
        comm.Allgather(DLPackOnly(np.zeros(1), (2, 0)), np.zeros(comm.size))
    except shmcoll.ShmcollError as e:
        return type(e).__name__
    return "served"


def test_device_buffers_without_mpi_raise_on_every_rank() -> None:
    """No MPI to hand the call to: every rank raises UnsupportedError, none waits."""
    assert run_ranks(3, _device_buffer_without_mpi) == ["UnsupportedError"] * 3
