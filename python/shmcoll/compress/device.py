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


def _dlpack_kind(a: Any) -> int | None:
    """The DLPack device type of an array that is neither NumPy's nor CuPy's (None for those,
    and for objects without DLPack)."""
    if isinstance(a, np.ndarray) or is_device_array(a) or not hasattr(a, "__dlpack__"):
        return None
    return int(a.__dlpack_device__()[0]) if hasattr(a, "__dlpack_device__") else 1


def as_array(a: Any) -> Any:
    """`a` as the array a compressed collective works on: NumPy and CuPy arrays as they
    are; another DLPack producer as a view of its memory (NumPy's where the CPU can address
    it, CuPy's on a CUDA device); anything else unchanged, for the caller's checks."""
    kind = _dlpack_kind(a)
    if kind is None:
        return a
    if kind in CPU_DEVICES:
        return host_buffer(a)
    if kind == CUDA_DEVICE:
        import cupy  # type: ignore[import-not-found]

        return cupy.from_dlpack(a)
    raise ArgumentError(f"compressed collectives take host or CUDA memory, not DLPack device type {kind}")


def foreign_cuda(fn: F) -> F:
    """Make compressed collective `fn` synchronise CuPy's current stream before it returns
    when one of its arguments is another library's tensor on a CUDA device (its memory was
    written, or read, on CuPy's stream)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            if any(_dlpack_kind(a) == CUDA_DEVICE for a in args):
                from ..gpu.staging import current_stream

                current_stream().synchronize()

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
