"""zfp fixed-rate compression of CuPy arrays with the CUDA kernels of ``cuda/zfp.cu``:
the same bytes as the Rust codec (``shmcoll._core.zfp_encode``) and zfpy, for 1-D arrays
(blocks of 4 values) and 2-D to 4-D ones (blocks of 4^d values, the array's extents passed
to the kernels in zfp's order, x = the last C axis). CuPy is imported inside the
functions, never at import time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _core
from ..errors import CodecError
from .kernels import load_module

#: Threads per CUDA block of every launch (the kernels accept any).
THREADS = 256


def _kind(dtype: Any) -> str:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise CodecError(f"zfp codes float32 and float64, not {dt}")
    return "f32" if dt == np.float32 else "f64"


#: The most axes the kernels code an array in.
MAX_DIMS = 4


def group_blocks(rate: int, dims: int = 1) -> int:
    """Blocks per encoder thread: the smallest group whose 4^dims * rate-bit blocks fill
    whole 64-bit words (16 / gcd(rate, 16) in 1-D, 4 / gcd(rate, 4) in 2-D, 1 beyond)."""
    bits = 4**dims * rate
    g = 1
    while (g * bits) % 64:
        g *= 2
    return g


def _shape(n: int | Sequence[int]) -> tuple[int, ...]:
    """A value count (a 1-D array) or a shape of 1 to MAX_DIMS axes, checked."""
    shape = (int(n),) if isinstance(n, (int, np.integer)) else tuple(int(v) for v in n)
    if not 1 <= len(shape) <= MAX_DIMS or any(v < 0 for v in shape):
        raise CodecError(f"zfp codes arrays of 1 to {MAX_DIMS} axes of counts >= 0, not shape {shape}")
    return shape


def _extents(shape: tuple[int, ...]) -> list[np.uint64]:
    """nx, ny, nz, nw: the C shape reversed, 1 for the axes it lacks."""
    ext = list(reversed(shape)) + [1] * (MAX_DIMS - len(shape))
    return [np.uint64(v) for v in ext]


def _blocks(shape: tuple[int, ...]) -> int:
    return math.prod((v + 3) // 4 for v in shape)


def _grid(threads: int) -> tuple[int]:
    return (max(1, (threads + THREADS - 1) // THREADS),)


def _words(buf: Any, nbytes: int, what: str) -> Any:
    """`buf` (a contiguous CuPy array) as uint64 words covering its first `nbytes` bytes."""
    import cupy as cp  # type: ignore[import-not-found]

    if not isinstance(buf, cp.ndarray) or not buf.flags.c_contiguous:
        raise CodecError(f"the {what} must be a C-contiguous CuPy array")
    if buf.nbytes < nbytes:
        raise CodecError(f"the {what} holds {buf.nbytes} bytes but {nbytes} are needed")
    if buf.data.ptr % 8:
        raise CodecError(f"the {what} must be 8-byte aligned")
    return buf.reshape(-1).view(cp.uint8)[:nbytes].view(cp.uint64)


def encode(x: Any, rate: int, out: Any = None) -> Any:
    """Compress the C-contiguous float32/float64 CuPy array `x` (1 to 4 axes: 2 to 4 are
    coded in zfp's N-D blocks) at `rate` bits per value; returns a uint8 CuPy array of
    exactly ``zfp_compressed_size`` bytes (a view of `out` when given: a C-contiguous,
    8-byte aligned CuPy array of at least that many bytes)."""
    import cupy as cp

    if not isinstance(x, cp.ndarray) or not x.flags.c_contiguous:
        raise CodecError("zfp encodes a C-contiguous CuPy array")
    kind = _kind(x.dtype)
    shape = _shape(x.shape if x.ndim else (1,))
    nbytes = _core.zfp_compressed_size(shape, x.dtype.name, rate)
    if nbytes == 0:
        return cp.empty(0, cp.uint8)
    if out is None:
        out = cp.empty(nbytes, cp.uint8)
    words = _words(out, nbytes, "output buffer")
    dims = len(shape)
    g = group_blocks(rate, dims)
    threads = (_blocks(shape) + g - 1) // g
    if dims == 1:
        fn = load_module("zfp").get_function(f"zfp_encode_{kind}")
        fn(_grid(threads), (THREADS,), (x, np.uint64(shape[0]), np.uint32(rate), words))
    else:
        fn = load_module("zfp").get_function(f"zfp_encode_nd_{kind}")
        fn(_grid(threads), (THREADS,), (x, *_extents(shape), np.uint32(dims), np.uint32(rate), words))
    return out.reshape(-1).view(cp.uint8)[:nbytes]


def decode(stream: Any, dtype: Any, n: int | Sequence[int], rate: int, out: Any = None) -> Any:
    """Decompress `n` values (an int: a 1-D array) or an array of shape `n` (2 to 4 axes:
    zfp's N-D blocks) of `dtype` from the zfp stream `stream` (a C-contiguous, 8-byte
    aligned CuPy array, any dtype) written at `rate`; returns a new CuPy array of that
    shape, or fills `out` (C-contiguous, exactly as many values of `dtype`) and returns it."""
    import cupy as cp

    kind = _kind(dtype)
    shape = _shape(n)
    count = math.prod(shape)
    nbytes = _core.zfp_compressed_size(shape, np.dtype(dtype).name, rate)
    if out is None:
        out = cp.empty(shape, np.dtype(dtype))
    elif (
        not isinstance(out, cp.ndarray)
        or not out.flags.c_contiguous
        or out.dtype != np.dtype(dtype)
        or out.size != count
    ):
        raise CodecError(f"the output must be a C-contiguous CuPy array of {count} {np.dtype(dtype).name}")
    if count:
        if not isinstance(stream, cp.ndarray) or stream.nbytes < nbytes:
            have = getattr(stream, "nbytes", 0)
            raise CodecError(f"corrupt stream: shape {shape} at rate {rate} needs {nbytes} bytes, got {have}")
        words = _words(stream, nbytes, "stream")
        blocks = _blocks(shape)
        if len(shape) == 1:
            fn = load_module("zfp").get_function(f"zfp_decode_{kind}")
            fn(_grid(blocks), (THREADS,), (words, np.uint64(count), np.uint32(rate), out))
        else:
            fn = load_module("zfp").get_function(f"zfp_decode_nd_{kind}")
            args = (words, *_extents(shape), np.uint32(len(shape)), np.uint32(rate), out)
            fn(_grid(blocks), (THREADS,), args)
    return out
