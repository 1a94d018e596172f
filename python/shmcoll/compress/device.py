"""Moving compressed bytes between a GPU and the host collective.

Compression runs where the data lives: CuPy arrays are encoded and decoded on the GPU
(the CUDA twins of the codecs), and only the compressed bytes cross to the host, through
pinned buffers (so the copies run at full PCIe/NVLink-C2C speed and can be synchronised
on the caller's stream); the stream is synchronised before the bytes enter a collective,
since peers read them as soon as this rank arrives. The buffers are reused from call to
call (shmcoll.gpu.staging).

Everything here works on NumPy arrays too (then it is a no-op), and nothing imports CuPy
unless a CuPy array (or a tensor on a CUDA device) is passed in.

Other arrays arrive by DLPack, as mpi4py takes them (torch tensors, JAX arrays): memory the
CPU can address as a NumPy view (`exports.host_buffer`, the uncompressed path's reader),
memory on a CUDA device as a CuPy view (CuPy's import orders it after the producer's
stream). The collective writes the tensor's own memory, and a call that wrote a CUDA
tensor synchronises CuPy's stream before it returns (`foreign_cuda`): the producer's next
work may run on any stream of its own.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..errors import ArgumentError
from ..exports import CPU_DEVICES, host_buffer

#: DLPack's kDLCUDA: memory of a CUDA device, which CuPy imports.
CUDA_DEVICE = 2

F = TypeVar("F", bound=Callable[..., Any])


def is_device_array(a: Any) -> bool:
    """Whether `a` is a CuPy array (checked without importing CuPy)."""
    return type(a).__module__.split(".")[0] == "cupy"


def _dlpack_device(a: Any) -> tuple[int, int] | None:
    """The DLPack device (type, index) of an array that is neither NumPy's nor CuPy's (None
    for those, and for objects without DLPack)."""
    if isinstance(a, np.ndarray) or is_device_array(a) or not hasattr(a, "__dlpack__"):
        return None
    if not hasattr(a, "__dlpack_device__"):
        return (1, 0)
    kind, index = a.__dlpack_device__()
    return int(kind), int(index)


def as_array(a: Any) -> Any:
    """`a` as the array a compressed collective works on: NumPy and CuPy arrays as they
    are; another DLPack producer as a view of its memory (NumPy's where the CPU can address
    it, CuPy's on the current CUDA device, which `foreign_cuda` made the tensor's); anything
    else unchanged, for the caller's checks."""
    device = _dlpack_device(a)
    if device is None:
        return a
    kind, index = device
    if kind in CPU_DEVICES:
        return host_buffer(a)
    if kind == CUDA_DEVICE:
        import cupy  # type: ignore[import-not-found]

        current = cupy.cuda.runtime.getDevice()
        if index != current:
            raise ArgumentError(
                f"the buffers of one call must be on one CUDA device, not {current} and {index}"
            )
        return cupy.from_dlpack(a)
    raise ArgumentError(f"compressed collectives take host or CUDA memory, not DLPack device type {kind}")


def foreign_cuda(fn: F) -> F:
    """Run compressed collective `fn` on the CUDA device of its first argument that is
    another library's tensor on one (CuPy's current device, where the kernels, scratch and
    stream of the call are), and synchronise that device's current stream before returning
    (the tensor's memory was read and written on it; its library's next work may be on any
    stream), after an error too, which then propagates as it was."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        given = [*args, *kwargs.values()]
        index = next((d[1] for d in map(_dlpack_device, given) if d and d[0] == CUDA_DEVICE), None)
        if index is None:
            return fn(*args, **kwargs)
        with contextlib.ExitStack() as on_device:
            try:
                import cupy

                on_device.enter_context(cupy.cuda.Device(index))
            except Exception:  # no CuPy, or no such device: the call rejects the tensor
                return fn(*args, **kwargs)  # (as_array), inside its agreement: on every rank
            from ..gpu.staging import current_stream

            try:
                result = fn(*args, **kwargs)
            except BaseException:
                # Kernels the call queued may still use the tensors' memory, which their
                # library may reuse once the error reaches it; the call's error is the one
                # to raise.
                with contextlib.suppress(Exception):
                    current_stream().synchronize()
                raise
            current_stream().synchronize()
        return result

    return call  # type: ignore[return-value]


def array_module(a: Any) -> Any:
    """numpy or cupy, whichever `a` belongs to."""
    if is_device_array(a):
        import cupy

        return cupy
    return np


def to_host(encoded: Any, tag: str) -> np.ndarray:
    """Compressed bytes as a host uint8 array: device bytes are copied into a page-locked
    buffer on the current stream, which is then synchronised (peers read the bytes as soon
    as this rank enters the collective)."""
    if not is_device_array(encoded):
        return np.frombuffer(encoded, np.uint8) if not isinstance(encoded, np.ndarray) else encoded
    import cupy

    from ..gpu.staging import current_stream, pinned

    stream = current_stream()
    host = pinned.get(tag, int(encoded.nbytes))
    encoded.view(cupy.uint8).ravel().get(stream=stream, out=host)
    stream.synchronize()
    return host


def stage_like(host: np.ndarray, like: Any, tag: str) -> Any:
    """Received bytes `host` where `like` lives: unchanged for a NumPy `like`; for a CuPy one,
    a device copy in a reused scratch buffer, copied from a page-locked buffer
    asynchronously on the current stream (the kernels that decode it follow on that
    stream)."""
    if not is_device_array(like):
        return host
    import cupy

    from ..gpu.staging import current_stream, pinned, scratch

    stream = current_stream()
    n = int(host.size)
    dev = scratch.get(tag, n)
    pin = pinned.get(f"{tag}-h2d", n)
    pin[...] = host
    dev.set(pin, stream=stream)
    done = cupy.cuda.Event()
    done.record(stream)
    pinned.copied_out(f"{tag}-h2d", done)
    return dev


def concatenate(pieces: list[Any], tag: str) -> Any:
    """Device pieces end to end in one reused device buffer (one transfer to the host)."""
    from ..gpu.staging import scratch

    flat = scratch.get(tag, sum(int(x.size) for x in pieces))
    o = 0
    for x in pieces:
        flat[o : o + x.size] = x
        o += int(x.size)
    return flat
