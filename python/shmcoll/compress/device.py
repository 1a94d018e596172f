"""Moving compressed bytes between a GPU and the host collective.

Compression runs where the data lives: CuPy arrays are encoded and decoded on the GPU
(the CUDA twins of the codecs), and only the compressed bytes cross to the host, through
pinned buffers (so the copies run at full PCIe/NVLink-C2C speed and can be synchronised
on the array's stream). The stream is synchronised before the bytes enter a collective,
since peers read them as soon as this rank arrives.

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


class PinnedPool:
    """Page-locked host buffers, reused per size class (allocating pinned memory is slow)."""

    def __init__(self) -> None:
        self._bufs: dict[str, Any] = {}

    def get(self, tag: str, nbytes: int) -> np.ndarray:
        """A pinned uint8 host array of at least `nbytes` (a view of exactly `nbytes`)."""
        import cupy

        mem = self._bufs.get(tag)
        if mem is None or mem.size() < nbytes:
            mem = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
            self._bufs[tag] = mem
        return np.frombuffer(mem, np.uint8, nbytes)


_pool = PinnedPool()


def to_host(encoded: Any, tag: str) -> np.ndarray:
    """Compressed bytes as a host uint8 array: device bytes are copied into a pinned
    buffer and the current stream is synchronised (so peers see complete data)."""
    if not is_device_array(encoded):
        return np.frombuffer(encoded, np.uint8) if not isinstance(encoded, np.ndarray) else encoded
    import cupy

    host = _pool.get(tag, int(encoded.nbytes))
    encoded.view(cupy.uint8).ravel().get(out=host)
    cupy.cuda.get_current_stream().synchronize()
    return host


def to_device_like(host: np.ndarray, like: Any) -> Any:
    """`host` bytes on the device of `like` when `like` is a CuPy array, else unchanged."""
    if not is_device_array(like):
        return host
    import cupy

    return cupy.asarray(host)
