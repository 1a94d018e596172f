"""Moving compressed bytes between a GPU and the host collective.

Compression runs where the data lives: CuPy arrays are encoded and decoded on the GPU
(the CUDA twins of the codecs), and only the compressed bytes cross to the host, through
pinned buffers (so the copies run at full PCIe/NVLink-C2C speed and can be synchronised
on the caller's stream); the stream is synchronised before the bytes enter a collective,
since peers read them as soon as this rank arrives. The buffers are reused from call to
call (shmcoll.gpu.staging).

Everything here works on NumPy arrays too (then it is a no-op), and nothing imports CuPy
unless a CuPy array is passed in.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_device_array(a: Any) -> bool:
    """Whether `a` is a CuPy array (checked without importing CuPy)."""
    return type(a).__module__.split(".")[0] == "cupy"


def array_module(a: Any) -> Any:
    """numpy or cupy, whichever `a` belongs to."""
    if is_device_array(a):
        import cupy  # type: ignore[import-not-found]

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
