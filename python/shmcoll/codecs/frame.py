"""The self-describing frame of ``Codec.encode``: a small header in front of the raw stream,
so that ``decode`` needs nothing but the bytes and a codec of the same configuration.

Layout (little-endian)::

    0   4   b"SHCC"
    4   1   version (1)
    5   1   codec number: 1 zfp, 2 bq, 3 cast, 4 mpc
    6   1   ndim (0..32)
    7   1   L: length of the dtype string
    8   8   the codec's parameters as one u64 (see each codec's ``_params``)
    16  8*ndim  shape, u64 each
    ..  L   the dtype as NumPy's ``dtype.str`` ("<f4"), ASCII
    ..      zero bytes up to a multiple of 16, so that the stream is as aligned as the
            frame (the CUDA kernels load words)
    ..      the raw stream (``encode_raw``), to the end
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import CodecError

MAGIC = b"SHCC"
VERSION = 1
_HEAD = struct.Struct("<4sBBBBQ")
MAX_NDIM = 32
ALIGN = 16


@dataclass(frozen=True)
class Frame:
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
    if version != VERSION:
        raise CodecError(f"shmcoll codec frame version {version}; this shmcoll reads {VERSION}")
    if ndim > MAX_NDIM:
        raise CodecError(f"corrupt shmcoll codec frame: ndim {ndim}")
    end = _HEAD.size + 8 * ndim + dlen
    if len(head) < end + (-end % ALIGN):
        raise CodecError("corrupt shmcoll codec frame: truncated header")
    shape = struct.unpack_from(f"<{ndim}Q", head, _HEAD.size)
    try:
        dtype = np.dtype(bytes(head[_HEAD.size + 8 * ndim : end]).decode("ascii"))
    except (TypeError, ValueError, UnicodeDecodeError) as e:
        raise CodecError(f"corrupt shmcoll codec frame: bad dtype ({e})") from None
    return Frame(codec, params, dtype, tuple(int(s) for s in shape), end + (-end % ALIGN))


def header_bound(ndim_max: int = MAX_NDIM) -> int:
    """An upper bound of a header's size (for reading the header off a device buffer)."""
    return _HEAD.size + 8 * ndim_max + 255 + ALIGN
