"""mpc on CuPy arrays: the kernels of ``cuda/mpc.cu`` (the same bytes as the Rust
reference, rust/shmcoll-codec/src/mpc.rs). The encoder codes and places the chunks on the
device, which also writes the chunk table (4 bytes per 1024 words) into the stream, and
waits for the device once, for the stream's size. The decoder reads the header and the
table on the host and checks them before decoding. CuPy is imported when a function runs."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from .. import _core
from ..errors import CodecError
from .kernels import load_module
from .launch import device_flat, device_out

CHUNK = 1024
HEADER = 24
_WORDS = {4: np.uint32, 8: np.uint64}


def _head(n: int, word: int, dim: int) -> bytes:
    """The stream's fixed 24-byte header."""
    return b"MPC\x01" + bytes([word, dim, 0, 0]) + struct.pack("<IIQ", CHUNK, 0, n)


def _table_end(k: int) -> int:
    """Where the payload starts: after the header and the k chunk lengths, 8-aligned."""
    return (HEADER + 4 * k + 7) // 8 * 8


def _header(head: bytes) -> tuple[int, int, int, int]:
    """(word, dim, chunk, n) of a stream header, checked as the Rust decoder checks it."""
    if len(head) < HEADER or head[:3] != b"MPC":
        raise CodecError("corrupt stream: not an mpc stream (no MPC header)")
    if head[3] != 1:
        raise CodecError(f"corrupt stream: mpc stream version {head[3]} (this reads 1)")
    word, dim = head[4], head[5]
    chunk, zero, n = struct.unpack_from("<IIQ", head, 8)
    if word not in _WORDS or dim == 0 or head[6:8] != b"\0\0" or zero:
        raise CodecError("corrupt stream: bad mpc header fields")
    if chunk == 0 or chunk % 64 or chunk > 65536:
        raise CodecError(f"corrupt stream: bad mpc chunk size {chunk}")
    return word, dim, chunk, n


def encode(x: Any, word: int, dim: int) -> Any:
    """The mpc stream of the CuPy array `x` (its bytes as `word`-byte words): CuPy uint8."""
    import cupy  # type: ignore[import-not-found]

    if word not in _WORDS or not 1 <= dim <= 255:
        raise CodecError(f"mpc word must be 4 or 8 and dim in 1..255, not {word}, {dim}")
    w = device_flat(x, x.dtype, "mpc input").view(np.uint8)
    if w.size % word:
        raise CodecError(f"mpc input of {w.size} bytes is not a whole number of {word}-byte words")
    words = w.view(_WORDS[word])
    n = words.size
    k = (n + CHUNK - 1) // CHUNK
    head = cupy.asarray(np.frombuffer(_head(n, word, dim), np.uint8))
    if k == 0:
        return head
    mod = load_module("mpc")
    scratch = cupy.empty(n * word, np.uint8)
    lengths = cupy.empty(k, np.uint32)
    mod.get_function(f"mpc_encode{8 * word}")(
        (k,), (32,), (words, np.uint64(n), np.int32(dim), scratch, lengths)
    )
    # The chunks' places by a scan on the device; the host waits once, for the total size
    # (the output's length), and the chunk table is copied into the stream on the device.
    ends = lengths.cumsum(dtype=np.uint64)
    start = _table_end(k)
    out = cupy.empty(start + int(ends[-1]), np.uint8)
    out[:HEADER] = head
    out[HEADER : HEADER + 4 * k] = lengths.view(np.uint8)  # little-endian on the device
    out[HEADER + 4 * k : start] = 0
    mod.get_function("mpc_gather")(
        (k,), (128,), (scratch, lengths, ends - lengths, np.int32(word), out[start:])
    )
    return out


def decode(buf: Any, out: Any, word: int) -> None:
    """Decode the mpc stream in the CuPy uint8 array `buf` into the CuPy array `out`."""
    import cupy

    b = device_flat(buf, np.uint8, "mpc stream")
    o = device_out(out, out.dtype, out.size, align=word).view(np.uint8)
    head = cupy.asnumpy(b[:HEADER]).tobytes()
    sw, dim, chunk, n = _header(head)
    if sw != word or n * word != o.size:
        raise CodecError(f"the mpc stream holds {n} {sw}-byte words, not {o.size} bytes of {word}-byte words")
    k = (n + chunk - 1) // chunk
    start = _table_end(k)
    if b.size < start:
        raise CodecError("corrupt stream: mpc stream truncated in its chunk table")
    table = cupy.asnumpy(b[HEADER:start]).tobytes()
    lengths = np.frombuffer(table[: 4 * k], "<u4").astype(np.uint64)
    sizes = np.minimum(chunk, n - np.arange(k, dtype=np.uint64) * chunk) * word
    bm = ((np.minimum(chunk, n - np.arange(k, dtype=np.uint64) * chunk) + 7) // 8 + word - 1) // word * word
    if (
        any(table[4 * k :])
        or np.any(lengths % word)
        or np.any(lengths > sizes)
        or np.any((lengths < sizes) & (lengths < bm))
        or start + int(lengths.sum()) != b.size
    ):
        raise CodecError("corrupt stream: bad mpc chunk table")
    if chunk != CHUNK:  # a stream from another encoder: the host decoder reads any chunk size
        host = np.empty(o.size, np.uint8)
        _core.mpc_decode(cupy.asnumpy(b), host)
        o.set(host)
        return
    if k == 0:
        return
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint64)
    error = cupy.zeros(1, np.int32)
    load_module("mpc").get_function(f"mpc_decode{8 * word}")(
        (k,),
        (32,),
        (
            b[start:],
            cupy.asarray(lengths.astype(np.uint32)),
            cupy.asarray(offsets),
            np.uint64(n),
            np.int32(dim),
            o.view(_WORDS[word]),
            error,
        ),
    )
    if int(error.get()[0]):
        raise CodecError("corrupt stream: an mpc chunk has an inconsistent bitmap")
