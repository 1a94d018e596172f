"""The self-describing frame of ``Codec.encode``: a small header in front of the raw stream,
so that ``decode`` needs nothing but the bytes and a codec of the same configuration.

Layout (little-endian)::

    0   4   b"SHCC"
    4   1   version (2; version 1 frames are read too)
    5   1   codec number: 1 zfp, 2 bq, 3 cast, 4 mpc
    6   1   ndim (0..32)
    7   1   L: length of the dtype string
    8   8   the codec's parameters as one u64 (see each codec's ``_params``)
    16  8*ndim  shape, u64 each
    ..  L   the dtype as NumPy's ``dtype.str`` ("<f4"), ASCII
    ..      zero bytes up to a multiple of 16, so that the stream is as aligned as the
            frame (the CUDA kernels load words)
    ..      the raw stream (``encode_raw``), to the end

Versions: the layout is the same; a version 2 frame of a shaped codec (zfp) holds the
stream of the array coded in its shape (zfp's blocks of 4^d values for 2 to 4 axes), a
version 1 frame the stream of the array flattened in C order, as every codec wrote it
before. The other codecs code flat in both.

A frame may come from anywhere (a file, a peer, an attacker), so :func:`unpack` trusts
none of it: the dtype string is looked up in a fixed table of the dtypes the codecs
take (never handed to ``np.dtype``, which parses commas, brackets and sizes of its own),
and the element count is bounded before any code multiplies it. Whether the stream after
the header is long enough for that count is the codec's to check (``Codec.decode``),
before it allocates the output.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import CodecError

MAGIC = b"SHCC"
VERSION = 2
#: The versions :func:`unpack` reads.
VERSIONS = (1, 2)
_HEAD = struct.Struct("<4sBBBBQ")
MAX_NDIM = 32
ALIGN = 16

#: The dtypes a frame may name, by their ``dtype.str`` in either byte order: what the
#: codecs take (zfp, bq and cast: float32/float64; mpc: 4-, 8- and 16-byte numbers,
#: datetimes and timedeltas). Nothing else is ever parsed.
_TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as")
_ALLOWED_NAMES = (
    ["f4", "f8", "f16", "i4", "i8", "u4", "u8", "c8", "c16", "c32"]
    + [f"M8[{u}]" for u in _TIME_UNITS]
    + [f"m8[{u}]" for u in _TIME_UNITS]
)


def _allowed() -> dict[str, np.dtype]:
    table = {}
    for name in _ALLOWED_NAMES:
        for order in "<>":
            try:  # f16/c32 (long double) exist on some platforms only
                dt = np.dtype(order + name)
            except TypeError:
                continue
            table[dt.str] = dt
    return table


DTYPES: dict[str, np.dtype] = _allowed()

#: The most bytes a frame may decode to (256 TiB): far beyond any real array, small enough
#: that sizes computed from it fit every integer type on the way.
MAX_DECODED_BYTES = 1 << 48


@dataclass(frozen=True)
class Frame:
    version: int
    codec: int
    params: int
    dtype: np.dtype
    shape: tuple[int, ...]
    #: Where the raw stream starts.
    offset: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def pack(codec: int, params: int, dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The header of a frame (the raw stream follows it)."""
    name = dtype.str.encode("ascii")
    head = (
        _HEAD.pack(MAGIC, VERSION, codec, len(shape), len(name), params)
        + struct.pack(f"<{len(shape)}Q", *shape)
        + name
    )
    return head + bytes(-len(head) % ALIGN)


def unpack(head: bytes | memoryview) -> Frame:
    """Parse the header at the start of `head` (which may hold more bytes after it)."""
    if len(head) < _HEAD.size:
        raise CodecError(f"not a shmcoll codec frame: {len(head)} bytes is shorter than its header")
    magic, version, codec, ndim, dlen, params = _HEAD.unpack_from(head)
    if magic != MAGIC:
        raise CodecError(f"not a shmcoll codec frame (magic {bytes(magic)!r}, expected {MAGIC!r})")
    if version not in VERSIONS:
        raise CodecError(f"shmcoll codec frame version {version}; this shmcoll reads {VERSIONS}")
    if ndim > MAX_NDIM:
        raise CodecError(f"corrupt shmcoll codec frame: ndim {ndim}")
    end = _HEAD.size + 8 * ndim + dlen
    if len(head) < end + (-end % ALIGN):
        raise CodecError("corrupt shmcoll codec frame: truncated header")
    shape = tuple(int(x) for x in struct.unpack_from(f"<{ndim}Q", head, _HEAD.size))
    name = bytes(head[_HEAD.size + 8 * ndim : end])
    dtype = DTYPES.get(name.decode("ascii", "replace"))
    if dtype is None:
        raise CodecError(f"corrupt shmcoll codec frame: dtype {name[:32]!r} is not one the codecs take")
    check_size(shape, dtype, "corrupt shmcoll codec frame")
    return Frame(version, codec, params, dtype, shape, end + (-end % ALIGN))


def check_size(shape: tuple[int, ...], dtype: np.dtype, what: str) -> None:
    """CodecError (`what`: ...) unless an array of `shape` and `dtype` is at most
    MAX_DECODED_BYTES. Bounded one factor at a time (32 factors of up to 2**64 would make a
    huge integer), zero extents counted as one: NumPy refuses an empty shape whose other
    extents multiply beyond its index type."""
    span = 1
    for extent in shape:
        span *= max(extent, 1)
        if span * dtype.itemsize > MAX_DECODED_BYTES:
            raise CodecError(
                f"{what}: shape {shape[:8]}{'...' if len(shape) > 8 else ''} of "
                f"{dtype} is more than {MAX_DECODED_BYTES} bytes"
            )


def header_bound(ndim_max: int = MAX_NDIM) -> int:
    """An upper bound of a header's size (for reading the header off a device buffer)."""
    return _HEAD.size + 8 * ndim_max + 255 + ALIGN
