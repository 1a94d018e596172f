"""bq on CuPy arrays: the kernels of ``cuda/bq.cu`` (the same bytes as the Rust
reference, rust/shmcoll-codec/src/bq.rs). CuPy is imported when a function runs."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _core
from .kernels import load_module
from .launch import THREADS, blocks, device_flat, device_out


def encode(x: Any, bits: int, block: int, out: Any | None = None) -> Any:
    """The bq stream of the float32 CuPy array `x`, as a CuPy uint8 array (or into `out`)."""
    import cupy  # type: ignore[import-not-found]

    x = device_flat(x, np.float32, "bq input")
    n = x.size
    size = _core.bq_compressed_size(n, bits, block)  # also checks bits and block
    out = cupy.empty(size, np.uint8) if out is None else device_out(out, np.uint8, size, "bq stream")
    if n:
        f = load_module("bq").get_function("bq_encode")
        threads = (n + 7) // 8
        f((blocks(threads),), (THREADS,), (x, np.uint64(n), np.int32(bits), np.int32(block), out))
    return out


def decode(buf: Any, out: Any, bits: int, block: int) -> None:
    """Decode the bq stream in the CuPy uint8 array `buf` into the float32 CuPy array `out`."""
    from ..errors import CodecError

    o = device_out(out, np.float32, out.size, align=4)
    n = o.size
    size = _core.bq_compressed_size(n, bits, block)
    b = device_flat(buf, np.uint8, "bq stream")
    if b.size != size:
        raise CodecError(
            f"a bq stream of {n} elements (bits {bits}, block {block}) has {size} bytes, not {b.size}"
        )
    if n:
        f = load_module("bq").get_function("bq_decode")
        threads = (n + 7) // 8
        f((blocks(threads),), (THREADS,), (b, np.uint64(n), np.int32(bits), np.int32(block), o))
