"""``Bq``: block-wise absmax quantization of float32 to int8/int4 (stream spec: the module
documentation of rust/shmcoll-codec/src/bq.rs)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .. import _core
from ..errors import CodecError
from .base import Codec

_F32 = np.dtype(np.float32)


class Bq(Codec):
    """Fixed-size lossy: one float32 scale per `block` elements and `bits`-bit codes.

    Per element ``|x - x̂| <= scale/2`` (scale = block absmax / 127 or / 7); a block with a
    NaN or an infinity decodes to NaN. float32 only.
    """

    codec_id: ClassVar[str] = "shmcoll.bq"
    fixed_size: ClassVar[bool] = True
    _number: ClassVar[int] = 2
    _has_gpu: ClassVar[bool] = True

    def __init__(self, bits: int = 8, block: int | None = None) -> None:
        if block is None:
            block = 256 if bits == 8 else 64
        if bits not in (8, 4) or isinstance(bits, bool):
            raise CodecError(f"Bq bits must be 8 or 4, not {bits!r}")
        if block not in (32, 64, 128, 256) or isinstance(block, bool):
            raise CodecError(f"Bq block must be one of 32, 64, 128, 256, not {block!r}")
        self.bits = int(bits)
        self.block = int(block)

    def _check_dtype(self, dtype: np.dtype) -> np.dtype:
        if dtype != _F32:
            raise CodecError(f"Bq quantizes float32, not {dtype}")
        return dtype

    def _params(self) -> int:
        return self.bits | self.block << 8

    def compressed_size(self, n: int, dtype: Any = np.float32) -> int:
        return _core.bq_compressed_size(self._count_arg(n, self._dtype(dtype)), self.bits, self.block)

    def _host_encode(self, x: np.ndarray, out: Any | None = None) -> Any:
        return _core.bq_encode(x, self.bits, self.block, out)

    def _host_decode(self, buf: np.ndarray, out: np.ndarray) -> None:
        _core.bq_decode(buf, out, self.bits, self.block)

    def _gpu_encode(self, x: Any) -> Any:
        from ..gpu import bq

        return bq.encode(x, self.bits, self.block)

    def _gpu_decode(self, buf: Any, out: Any) -> None:
        from ..gpu import bq

        bq.decode(buf, out, self.bits, self.block)
