"""``Zfp``: zfp's fixed-rate mode, the stream exactly zfpy's header-less bytes
(``zfpy.compress_numpy(x, rate=R, write_header=False)``) for arrays of 1 to 4 axes: a
2-, 3- or 4-D array is coded in zfp's blocks of 4^d values (more accurate on fields
smooth along every axis than coding it flattened). More than 4 axes are coded as 4, the
leading ones merged (zfp has no 5-D blocks); a 0-d array as one value. The kernel is
``shmcoll_codec::zfp``, bound as ``_core.zfp_*``; a build without it raises CodecError."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, cast

import numpy as np

from .. import _core
from ..errors import CodecError
from .base import Codec

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

#: The most axes zfp codes an array in (shmcoll_codec::zfp::MAX_DIMS).
MAX_DIMS = 4


def coded_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The shape zfp codes an array of `shape` in: itself for 1 to 4 axes, the leading axes
    merged beyond 4, one value for a 0-d array."""
    shape = tuple(int(v) for v in shape)
    if not shape:
        return (1,)
    if len(shape) <= MAX_DIMS:
        return shape
    return (math.prod(shape[: -MAX_DIMS + 1]), *shape[-MAX_DIMS + 1 :])


class _ZfpBindings(Protocol):
    """The functions of rust/shmcoll-py/src/codec_zfp.rs."""

    def zfp_compressed_size(self, n: int | Sequence[int], dtype: str, rate: int) -> int: ...
    def zfp_encode(self, arr: Any, rate: int, out: Any = None, shape: Sequence[int] | None = None) -> Any: ...
    def zfp_decode(self, buf: Any, dtype: str, n: int | Sequence[int], rate: int, out: Any = None) -> Any: ...


def bindings() -> _ZfpBindings:
    """The zfp functions of the native module, or CodecError when this build lacks them."""
    if not hasattr(_core, "zfp_encode"):
        raise CodecError("this build of shmcoll has no zfp codec (_core.zfp_encode is missing)")
    return cast(_ZfpBindings, _core)


class Zfp(Codec):
    """Fixed-size lossy: `rate` (whole) bits per value, zfp's fixed-rate mode; float32/float64."""

    codec_id: ClassVar[str] = "shmcoll.zfp"
    fixed_size: ClassVar[bool] = True
    _number: ClassVar[int] = 1
    _has_gpu: ClassVar[bool] = True
    _shaped: ClassVar[bool] = True

    def __init__(self, rate: int = 16) -> None:
        # Whole bits per value, as shmcoll_codec::zfp takes them (its bindings check the
        # upper bound per dtype).
        if isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= 64:
            raise CodecError(f"Zfp rate must be a whole number of bits per value in 1..64, not {rate!r}")
        self.rate = rate

    def _check_dtype(self, dtype: np.dtype) -> np.dtype:
        if dtype not in _DTYPES:
            raise CodecError(f"Zfp compresses float32 or float64, not {dtype}")
        return dtype

    def _params(self) -> int:
        return self.rate

    def compressed_size(self, n: int | Sequence[int], dtype: Any = np.float32) -> int:
        """Bytes of the stream of `n` values (a 1-D array) or of an array of shape `n`."""
        dt = self._dtype(dtype)
        shape = self._shape_arg(n, dt)
        return bindings().zfp_compressed_size(list(coded_shape(shape)), dt.name, self.rate)

    def _host_encode(self, x: np.ndarray, out: Any | None = None) -> Any:
        return bindings().zfp_encode(x, self.rate, out, coded_shape(x.shape))

    def _host_decode(self, buf: np.ndarray, out: np.ndarray) -> None:
        bindings().zfp_decode(buf, out.dtype.name, coded_shape(out.shape), self.rate, out=out)

    def _gpu_encode(self, x: Any) -> Any:
        from ..gpu import zfp

        return zfp.encode(x.reshape(coded_shape(x.shape)), self.rate)

    def _gpu_decode(self, buf: Any, out: Any) -> None:
        from ..gpu import zfp

        zfp.decode(buf, out.dtype, coded_shape(out.shape), self.rate, out=out.reshape(coded_shape(out.shape)))
