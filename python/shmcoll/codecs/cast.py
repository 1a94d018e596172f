"""``Cast``: float32/float64 to bfloat16 or float16 with round to nearest even (stream spec:
the module documentation of rust/shmcoll-codec/src/cast.rs)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .. import _core
from ..errors import CodecError
from .base import Codec

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_FORMATS = ("bfloat16", "float16")


class Cast(Codec):
    """Fixed-size lossy: 2 bytes per element, within half an ulp of the 16-bit format (IEEE
    overflow to infinity, subnormals kept, NaN stays a quiet NaN). float64 is rounded once,
    directly, not through float32."""

    codec_id: ClassVar[str] = "shmcoll.cast"
    fixed_size: ClassVar[bool] = True
    _number: ClassVar[int] = 3
    _has_gpu: ClassVar[bool] = True

    def __init__(self, dtype: str = "bfloat16") -> None:
        if dtype not in _FORMATS:
            raise CodecError(f'Cast dtype must be "bfloat16" or "float16", not {dtype!r}')
        self.dtype = dtype

    def _check_dtype(self, dtype: np.dtype) -> np.dtype:
        if dtype not in _DTYPES:
            raise CodecError(f"Cast narrows float32 or float64, not {dtype}")
        return dtype

    def _params(self) -> int:
        return _FORMATS.index(self.dtype)

    def compressed_size(self, n: int, dtype: Any = np.float32) -> int:
        return 2 * self._count_arg(n, self._dtype(dtype))

    def _host_encode(self, x: np.ndarray, out: Any | None = None) -> Any:
        return _core.cast_encode(x, self.dtype, out)

    def _host_decode(self, buf: np.ndarray, out: np.ndarray) -> None:
        _core.cast_decode(buf, out, self.dtype)

    def _gpu_encode(self, x: Any) -> Any:
        from ..gpu import cast

        return cast.encode(x, self.dtype)

    def _gpu_decode(self, buf: Any, out: Any) -> None:
        from ..gpu import cast

        cast.decode(buf, out, self.dtype)
