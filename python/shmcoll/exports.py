"""Buffers that offer DLPack (``__dlpack__``) or the CUDA array interface
(``__cuda_array_interface__``) instead of Python's buffer protocol, read as mpi4py reads
them: the buffer protocol first, then DLPack, then the CUDA array interface.

* DLPack memory the CPU can address (DLPack's CPU, CUDA-host, ROCm-host and CUDA-managed
  devices, mpi4py's list) is served by the engine through a NumPy view of it: torch CPU
  tensors, JAX CPU arrays, NumPy arrays (`_dlpack_view`).
* Memory on a device (DLPack's other devices, anything with only the CUDA array
  interface) is MPI's to move (a CUDA-aware MPI reads device pointers): `ServedByMPI`; so
  are tensors of element types NumPy has no dtype for (long double...), which mpi4py maps
  to MPI datatypes itself.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .errors import BadBufferError, ServedByMPI

#: DLPack device types (``DLDeviceType``) whose memory the CPU can address: kDLCPU,
#: kDLCUDAHost, kDLROCMHost, kDLCUDAManaged (the list mpi4py checks).
CPU_DEVICES = frozenset({1, 3, 11, 13})


def _has_buffer(obj: Any) -> bool:
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


def host_buffer(obj: Any) -> Any:
    """`obj` itself when it has the buffer protocol, else a 1-D NumPy view of its DLPack
    memory (in memory order) when the CPU can address it. Raises ServedByMPI for device
    memory and BadBufferError for an object with none of the three protocols."""
    if isinstance(obj, np.ndarray) or _has_buffer(obj):
        return obj
    if hasattr(obj, "__dlpack__"):
        kind, index = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (1, 0)
        if int(kind) not in CPU_DEVICES:
            raise ServedByMPI(f"buffers in device memory (DLPack device type {int(kind)})")
        return _dlpack_view(obj, (int(kind), int(index)))
    if hasattr(obj, "__cuda_array_interface__"):
        raise ServedByMPI("buffers with the CUDA array interface (device memory)")
    raise BadBufferError(
        f"{type(obj).__name__} supports neither the buffer protocol, nor DLPack, nor the CUDA array interface"
    )


def _dlpack_view(obj: Any, device: tuple[int, int]) -> np.ndarray:
    """The CPU-addressable DLPack memory of `obj` as a 1-D NumPy array of its element type.

    Where mpi4py is loaded, the memory is mpi4py's export (``MPI.buffer.frombuffer``), which
    holds the producer's capsule for as long as the view lives and is writable unless the
    tensor carries DLPack's read-only flag, as mpi4py treats it; else NumPy's
    (``numpy.from_dlpack``), which exports tensors of the unversioned protocol (no such
    flag) read-only."""
    dtype = _dlpack_dtype(obj, device)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        view = np.from_dlpack(obj)
        if not (view.flags.c_contiguous or view.flags.f_contiguous):
            raise BadBufferError(f"the DLPack buffer of {type(obj).__name__} is not contiguous")
        return view.reshape(-1, order="A")  # a view, in memory order
    try:
        raw = mpi.buffer.frombuffer(obj, readonly=False)
    except BufferError:  # read-only, or not contiguous (then this raises again)
        try:
            raw = mpi.buffer.frombuffer(obj, readonly=True)
        except BufferError as e:
            raise BadBufferError(f"cannot read the DLPack buffer of {type(obj).__name__}: {e}") from e
    return np.frombuffer(raw, dtype=dtype)


class _Held:
    """A DLPack export that hands NumPy a capsule its caller holds."""

    __slots__ = ("capsule", "device")

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def _dlpack_dtype(obj: Any, device: tuple[int, int]) -> np.dtype:
    """The element type of `obj`'s DLPack tensor, as NumPy reads it. NumPy reads an export
    this function holds until NumPy has let go of it: a producer may free the tensor with
    its capsule (DLPack lets it tie the two together) rather than when its deleter runs."""
    try:
        capsule = obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # an exporter of the unversioned protocol only
        capsule = obj.__dlpack__()
    try:
        probe = np.from_dlpack(_Held(capsule, device))
    except RuntimeError as e:  # an element type NumPy has no dtype for (long double...)
        raise ServedByMPI("DLPack buffers of element types NumPy does not read") from e
    except (BufferError, TypeError, ValueError) as e:
        raise BadBufferError(f"cannot read the DLPack buffer of {type(obj).__name__}: {e}") from e
    dtype = probe.dtype
    del probe  # NumPy runs the tensor's deleter now, while `capsule` still holds it
    return dtype
