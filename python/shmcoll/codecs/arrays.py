"""Telling NumPy from CuPy arrays without importing CuPy, and shaping buffers for the
codecs (flat, contiguous, native byte order)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CodecError


def is_cupy(x: Any) -> bool:
    """Whether `x` is a CuPy array (by its type's module, so CuPy is never imported here)."""
    return type(x).__module__.split(".", 1)[0] == "cupy"


def host_input(buf: Any) -> np.ndarray:
    """`buf` (an array or any buffer) as an ndarray, native byte order, C order, in its
    shape (a 0-d array stays 0-d: np.ascontiguousarray would make it 1-d)."""
    arr = buf if isinstance(buf, np.ndarray) else np.asarray(memoryview(buf))
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def byte_view(buf: Any) -> np.ndarray:
    """The bytes of a contiguous buffer as a flat uint8 array (no copy)."""
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise CodecError("a compressed stream must be a contiguous buffer")
        return buf.reshape(-1).view(np.uint8)
    return np.frombuffer(buf, np.uint8)


def flat_out(out: Any, dtype: np.dtype, n: int) -> np.ndarray:
    """`out` as a flat, writable array of `n` elements of `dtype` (no copy), or an error."""
    arr = out if isinstance(out, np.ndarray) else np.asarray(memoryview(out))
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise CodecError("the output must be a writable, C-contiguous buffer")
    if arr.nbytes != n * dtype.itemsize:
        raise CodecError(
            f"the output holds {arr.nbytes} bytes but {n} elements of {dtype} need {n * dtype.itemsize}"
        )
    return arr.reshape(-1).view(dtype)
