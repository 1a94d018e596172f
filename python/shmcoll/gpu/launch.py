"""Small helpers the GPU codec wrappers share: argument checks and 1-D launch sizes."""

from __future__ import annotations

from typing import Any

from ..errors import CodecError

#: Threads per block of the element-wise kernels.
THREADS = 256
#: A cap on blocks for grid-stride kernels (plenty to fill any current GPU).
MAX_BLOCKS = 65535 * 8


def blocks(items: int, threads: int = THREADS, cap: int | None = None) -> int:
    """Blocks covering `items` work items at `threads` per block (at least 1)."""
    b = max((items + threads - 1) // threads, 1)
    return min(b, cap) if cap else b


def device_flat(x: Any, dtype: Any, what: str) -> Any:
    """`x` as a flat, C-contiguous, 16-byte-aligned CuPy array of `dtype` (a copy only when
    it is not already)."""
    import cupy  # type: ignore[import-not-found]

    if not isinstance(x, cupy.ndarray):
        raise CodecError(f"the {what} must be a CuPy array, not {type(x).__name__}")
    if x.dtype != dtype:
        raise CodecError(f"the {what} must be {cupy.dtype(dtype)}, not {x.dtype}")
    x = cupy.ascontiguousarray(x).reshape(-1)
    if x.data.ptr % 16:
        x = x.copy()
    return x


def device_out(out: Any, dtype: Any, n: int, what: str = "output", align: int = 16) -> Any:
    """`out` checked to be a writable, flat-able CuPy array of `n` x `dtype` starting on an
    `align`-byte boundary: 16 for an encoder's stream (the kernels store whole 2- to 8-byte
    words at offsets that are multiples of their size); a decoder's output needs only its
    own elements' alignment (a decoder stores wider only where the place allows), so that
    the collectives can decode into a slice at any element offset."""
    import cupy

    if not isinstance(out, cupy.ndarray) or out.dtype != dtype or out.size != n or not out.flags.c_contiguous:
        raise CodecError(f"the {what} must be a C-contiguous CuPy array of {n} x {cupy.dtype(dtype)}")
    if out.data.ptr % align:
        raise CodecError(f"the {what} must start on a {align}-byte boundary (the kernels store whole words)")
    return out.reshape(-1)
