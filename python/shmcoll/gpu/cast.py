"""cast on CuPy arrays: the kernels of ``cuda/cast.cu`` (the same bytes as the Rust
reference, rust/shmcoll-codec/src/cast.rs). CuPy is imported when a function runs."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CodecError
from .kernels import load_module
from .launch import MAX_BLOCKS, THREADS, blocks, device_flat, device_out

_FORMATS = {"bfloat16": 0, "float16": 1}
_WIDE = {np.dtype(np.float32): ("f32", np.uint32), np.dtype(np.float64): ("f64", np.uint64)}


def _kind(dtype: Any) -> tuple[str, Any]:
    try:
        return _WIDE[np.dtype(dtype)]
    except KeyError:
        raise CodecError(f"cast narrows float32 or float64, not {dtype}") from None


def _fmt(fmt: str) -> int:
    if fmt not in _FORMATS:
        raise CodecError(f'cast dtype must be "bfloat16" or "float16", not {fmt!r}')
    return _FORMATS[fmt]


def encode(x: Any, fmt: str, out: Any | None = None) -> Any:
    """The 16-bit stream of the float32/float64 CuPy array `x` (a CuPy uint8 array)."""
    import cupy  # type: ignore[import-not-found]

    code = _fmt(fmt)
    suffix, bits = _kind(x.dtype)
    x = device_flat(x, x.dtype, "cast input").view(bits)
    n = x.size
    out = cupy.empty(2 * n, np.uint8) if out is None else device_out(out, np.uint8, 2 * n, "cast stream")
    if n:
        f = load_module("cast").get_function(f"cast_encode_{suffix}")
        f((blocks(n, cap=MAX_BLOCKS),), (THREADS,), (x, np.uint64(n), np.int32(code), out.view(np.uint16)))
    return out


def decode(buf: Any, out: Any, fmt: str) -> None:
    """Widen the stream in the CuPy uint8 array `buf` into the float32/float64 CuPy `out`."""
    code = _fmt(fmt)
    suffix, bits = _kind(out.dtype)
    o = device_out(out, out.dtype, out.size, align=out.dtype.itemsize)
    n = o.size
    b = device_flat(buf, np.uint8, "cast stream")
    if b.size != 2 * n:
        raise CodecError(f"a {fmt} stream of {n} elements has {2 * n} bytes, not {b.size}")
    if n:
        f = load_module("cast").get_function(f"cast_decode_{suffix}")
        f(
            (blocks(n, cap=MAX_BLOCKS),),
            (THREADS,),
            (b.view(np.uint16), np.uint64(n), np.int32(code), o.view(bits)),
        )
