"""zfp fixed-rate compression of CuPy arrays with the CUDA kernels of ``cuda/zfp.cu``:
the same bytes as the Rust codec (``shmcoll._core.zfp_encode``) and zfpy. CuPy is imported
inside the functions, never at import time.
"""

from __future__ import annotations

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


def group_blocks(rate: int) -> int:
    """Blocks per encoder thread: the smallest group whose 4*rate-bit blocks fill whole
    64-bit words, 16 / gcd(rate, 16)."""
    g = 16
    while g > 1 and rate % 2 == 0:
        g //= 2
        rate //= 2
    return g


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
    """Compress the C-contiguous float32/float64 CuPy array `x` at `rate` bits per value;
    returns a uint8 CuPy array of exactly ``zfp_compressed_size`` bytes (a view of `out` when
    given: a C-contiguous, 8-byte aligned CuPy array of at least that many bytes)."""
    import cupy as cp

    if not isinstance(x, cp.ndarray) or not x.flags.c_contiguous:
        raise CodecError("zfp encodes a C-contiguous CuPy array")
    kind = _kind(x.dtype)
    n = int(x.size)
    nbytes = _core.zfp_compressed_size(n, x.dtype.name, rate)
    if nbytes == 0:
        return cp.empty(0, cp.uint8)
    if out is None:
        out = cp.empty(nbytes, cp.uint8)
    words = _words(out, nbytes, "output buffer")
    nb = (n + 3) // 4
    threads = (nb + group_blocks(rate) - 1) // group_blocks(rate)
    fn = load_module("zfp").get_function(f"zfp_encode_{kind}")
    fn(_grid(threads), (THREADS,), (x, np.uint64(n), np.uint32(rate), words))
    return out.reshape(-1).view(cp.uint8)[:nbytes]


def decode(stream: Any, dtype: Any, n: int, rate: int, out: Any = None) -> Any:
    """Decompress `n` values of `dtype` from the zfp stream `stream` (a C-contiguous,
    8-byte aligned CuPy array, any dtype) written at `rate`; returns a new 1-D CuPy array,
    or fills `out` (C-contiguous, exactly `n` values of `dtype`) and returns it."""
    import cupy as cp

    kind = _kind(dtype)
    nbytes = _core.zfp_compressed_size(n, np.dtype(dtype).name, rate)
    if out is None:
        out = cp.empty(n, np.dtype(dtype))
    elif (
        not isinstance(out, cp.ndarray)
        or not out.flags.c_contiguous
        or out.dtype != np.dtype(dtype)
        or out.size != n
    ):
        raise CodecError(f"the output must be a C-contiguous CuPy array of {n} {np.dtype(dtype).name}")
    if n:
        if not isinstance(stream, cp.ndarray) or stream.nbytes < nbytes:
            have = getattr(stream, "nbytes", 0)
            raise CodecError(f"corrupt stream: {n} values at rate {rate} need {nbytes} bytes, got {have}")
        words = _words(stream, nbytes, "stream")
        fn = load_module("zfp").get_function(f"zfp_decode_{kind}")
        fn(_grid((n + 3) // 4), (THREADS,), (words, np.uint64(n), np.uint32(rate), out))
    return out
