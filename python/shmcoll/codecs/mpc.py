"""``Mpc``: lossless MPC-style compression of 4- and 8-byte words (stream spec: the module
documentation of rust/shmcoll-codec/src/mpc.rs)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from .. import _core
from ..errors import CodecError
from .base import Codec

#: The word count n of an mpc stream's header (offset 16, after magic, version, word size,
#: dim and chunk size; rust/shmcoll-codec/src/mpc.rs).
_MPC_HEAD = struct.Struct("<16xQ")


def word_bytes(dtype: np.dtype) -> int:
    """The word size mpc codes `dtype` in: 8 when the itemsize allows, else 4."""
    return 8 if dtype.itemsize % 8 == 0 else 4


class Mpc(Codec):
    """Lossless, variable size (bounded: a chunk that does not shrink is stored raw).

    Any numeric dtype whose itemsize is a multiple of 4 (float32/64, int32/64, complex...), coded
    as 8-byte words when the itemsize allows, else 4-byte ones. `dim` is the delta
    distance in words (e.g. 3 for interleaved xyz float32, 2 for complex128 as 8-byte
    words).
    """

    codec_id: ClassVar[str] = "shmcoll.mpc"
    fixed_size: ClassVar[bool] = False
    _number: ClassVar[int] = 4
    _has_gpu: ClassVar[bool] = True

    def __init__(self, dim: int = 1) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 255:
            raise CodecError(f"Mpc dim must be an integer in 1..255, not {dim!r}")
        self.dim = dim

    def _check_dtype(self, dtype: np.dtype) -> np.dtype:
        if dtype.kind not in "iufcmM" or dtype.itemsize % 4 != 0:
            raise CodecError(f"Mpc codes items of a multiple of 4 bytes, not {dtype}")
        return dtype

    def _params(self) -> int:
        return self.dim

    def compressed_size(self, n: int, dtype: Any = np.float32) -> None:
        self._count_arg(n, self._dtype(dtype))  # checked as every codec's, though it varies

    def _check_stream(self, nbytes: int, head: Callable[[], bytes], dt: np.dtype, n: int) -> None:
        # The stream's header states its word size and count: they must be `n` x `dt`, and
        # a count beyond what the stream's length can hold (a chunk of C words takes at
        # least C/8 bytes, its bitmap) is corrupt; the Rust decoder checks the rest.
        h = head()
        if len(h) < _MPC_HEAD.size or h[:4] != b"MPC\x01":
            raise CodecError("corrupt mpc stream: no MPC header")
        word, words = h[4], _MPC_HEAD.unpack_from(h)[0]
        if words > 8 * nbytes:
            raise CodecError(f"corrupt mpc stream: {words} words cannot fit in {nbytes} bytes")
        if word != word_bytes(dt) or words * word != n * dt.itemsize:
            raise CodecError(f"the mpc stream holds {words} {word}-byte words, not {n} x {dt}")

    def max_compressed_size(self, n: int, dtype: Any = np.float32) -> int:
        """The largest stream of `n` elements of `dtype`."""
        dt = self._dtype(dtype)
        w = word_bytes(dt)
        return _core.mpc_max_compressed_size(self._count_arg(n, dt) * dt.itemsize // w, w)

    def _host_encode(self, x: np.ndarray, out: Any | None = None) -> Any:
        return _core.mpc_encode(x.view(np.uint8), word_bytes(x.dtype), self.dim, out)

    def _host_decode(self, buf: np.ndarray, out: np.ndarray) -> None:
        word, _, n = _core.mpc_header(buf)
        if word != word_bytes(out.dtype) or n * word != out.nbytes:
            raise CodecError(f"the mpc stream holds {n} {word}-byte words, not {out.size} x {out.dtype}")
        _core.mpc_decode(buf, out.view(np.uint8))

    def _gpu_encode(self, x: Any) -> Any:
        from ..gpu import mpc

        return mpc.encode(x, word_bytes(x.dtype), self.dim)

    def _gpu_decode(self, buf: Any, out: Any) -> None:
        from ..gpu import mpc

        mpc.decode(buf, out, word_bytes(out.dtype))
