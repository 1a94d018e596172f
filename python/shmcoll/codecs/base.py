"""The base of shmcoll's codecs: the numcodecs contract (``codec_id``, ``encode``,
``decode``, ``get_config``, ``from_config``) on top of each codec's bare stream
(``encode_raw``/``decode_raw``), for NumPy arrays (the Rust codecs) and CuPy arrays (the
CUDA kernels when :func:`shmcoll.gpu.available`, else a host copy through Rust, announced
once and counted in :data:`fallback_calls`).

Subclasses numcodecs' ``Codec`` when numcodecs imports, else a local class with the same
methods, so that shmcoll's codecs work without numcodecs installed.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..errors import CodecError, CodecTypeError
from . import frame
from .arrays import byte_view, flat_out, host_input, is_cupy

#: Bytes of a stream's start that ``Codec._check_stream`` may look at (mpc's header).
STREAM_HEAD_BYTES = 24


class LocalCodec:
    """numcodecs.abc.Codec's non-abstract methods, for when numcodecs is not installed."""

    codec_id: ClassVar[str | None] = None

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"id": self.codec_id}
        config.update({k: v for k, v in self.__dict__.items() if not k.startswith("_")})
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        try:
            return bool(self.get_config() == other.get_config())  # type: ignore[attr-defined]
        except AttributeError:
            return False

    __hash__ = None  # type: ignore[assignment]  # equal by configuration, like numcodecs'

    def __repr__(self) -> str:
        params = ", ".join(
            f"{k}={getattr(self, k)!r}" for k in sorted(self.__dict__) if not k.startswith("_")
        )
        return f"{type(self).__name__}({params})"


def _numcodecs_base() -> type:
    try:
        from numcodecs.abc import Codec  # type: ignore[import-untyped]
    except ImportError:
        return LocalCodec
    return Codec


_Base: Any = _numcodecs_base()

#: CuPy calls served by a host copy through the Rust codec, by codec id.
fallback_calls: dict[str, int] = {}
_warned: set[str] = set()


class GpuFallbackWarning(RuntimeWarning):
    """A CuPy array was coded on the host (no usable GPU, or no kernel for this codec)."""


def note_fallback(codec_id: str, why: str) -> None:
    """Count a host fallback of a CuPy call and warn once per codec."""
    fallback_calls[codec_id] = fallback_calls.get(codec_id, 0) + 1
    if codec_id not in _warned:
        _warned.add(codec_id)
        warnings.warn(
            f"shmcoll: {codec_id} on a CuPy array runs on the host through the Rust codec ({why}); "
            "counted in shmcoll.codecs.fallback_calls",
            GpuFallbackWarning,
            stacklevel=4,
        )


class Codec(_Base):
    """One shmcoll codec. Subclasses set the class attributes and the ``_host_*`` methods
    (and ``_gpu_*`` where a CUDA kernel exists)."""

    codec_id: ClassVar[str]
    #: Whether the stream size is a function of (n, dtype) alone.
    fixed_size: ClassVar[bool]
    #: The codec's number in the frame.
    _number: ClassVar[int]
    #: Whether ``_gpu_encode``/``_gpu_decode`` exist.
    _has_gpu: ClassVar[bool] = False
    #: Whether the stream depends on the array's shape, not only on its values in C order
    #: (zfp's N-D blocks): the ``_host_*``/``_gpu_*`` methods then get the array, and the
    #: output, in their shape; else flat.
    _shaped: ClassVar[bool] = False

    # --- per codec -----------------------------------------------------------------------

    def _check_dtype(self, dtype: np.dtype) -> np.dtype:
        raise NotImplementedError

    def _params(self) -> int:
        raise NotImplementedError

    def compressed_size(self, n: int, dtype: Any) -> int | None:
        """Bytes of the raw stream of `n` elements of `dtype` (None if it varies)."""
        raise NotImplementedError

    def _check_stream(self, nbytes: int, head: Callable[[], bytes], dt: np.dtype, n: Any) -> None:
        """Refuse a stream of `nbytes` bytes (starting with ``head()``, its first
        STREAM_HEAD_BYTES) that cannot hold `n` elements of `dt` (for a shaped codec, `n` is
        the shape), before the output is allocated. Here: a fixed-size codec's stream must be
        at least its exact size."""
        need = self.compressed_size(n, dt)
        if need is not None and nbytes < need:
            what = (
                f"an array of shape {n} of {dt} takes"
                if isinstance(n, tuple)
                else f"{n} elements of {dt} take"
            )
            raise CodecError(f"corrupt {self.codec_id} stream: {what} {need} bytes, the stream has {nbytes}")

    def _host_encode(self, x: np.ndarray, out: Any | None = None) -> Any:
        """The stream of `x` as bytes, or written into `out` (returning its byte count)."""
        raise NotImplementedError

    def _host_decode(self, buf: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError

    def _gpu_encode(self, x: Any) -> Any:
        raise NotImplementedError

    def _gpu_decode(self, buf: Any, out: Any) -> None:
        raise NotImplementedError

    # --- the bare stream -----------------------------------------------------------------

    def _dtype(self, dtype: Any) -> np.dtype:
        try:
            dt = np.dtype(dtype)
        except TypeError as e:
            raise CodecError(f"{self.codec_id}: not a dtype: {dtype!r}") from e
        if dt.hasobject:
            raise CodecTypeError(f"{self.codec_id}: cannot encode Python objects ({dt})")
        return self._check_dtype(dt.newbyteorder("=") if not dt.isnative else dt)

    def _use_gpu(self) -> bool:
        from .. import gpu

        if self._has_gpu and gpu.available():
            return True
        why = (gpu.unavailable() or "the GPU path is off") if self._has_gpu else "no CUDA kernel yet"
        note_fallback(self.codec_id, why)
        return False

    def encode_raw(self, arr: Any, out: Any | None = None) -> Any:
        """The bare stream of `arr` (flattened in C order; a shaped codec codes the array in
        its shape): bytes for a host array, a CuPy uint8 array for a CuPy one; with `out` (a
        writable host buffer, large enough: see ``compressed_size``, or
        ``Mpc.max_compressed_size``) the stream goes there and the byte count is returned."""
        if is_cupy(arr):
            import cupy  # type: ignore[import-not-found]

            if out is not None:
                raise CodecError("encode_raw(out=...) takes host buffers; a CuPy input returns its stream")
            x = cupy.ascontiguousarray(arr)
            x = x if self._shaped else x.reshape(-1)
            self._dtype(x.dtype)
            if self._use_gpu():
                return self._gpu_encode(x)
            raw = self._host_encode(host_input(cupy.asnumpy(x)))
            return cupy.asarray(np.frombuffer(raw, np.uint8))
        h = host_input(arr)
        self._dtype(h.dtype)
        return self._host_encode(h if self._shaped else h.reshape(-1), out)

    def _shape_arg(self, n: Any, dt: np.dtype) -> tuple[int, ...]:
        """`n` of ``decode_raw`` and ``compressed_size``: an element count (a 1-D array) or a
        shape, of an array of `dt` that could exist (frame.check_size)."""
        try:
            shape = (
                (operator.index(n),) if not isinstance(n, (tuple, list)) else tuple(map(operator.index, n))
            )
        except TypeError:
            raise CodecError(
                f"{self.codec_id}: the element count must be an integer or a shape, not {n!r}"
            ) from None
        if any(v < 0 for v in shape):
            raise CodecError(f"{self.codec_id}: negative element count in {n}")
        frame.check_size(shape, dt, self.codec_id)
        return shape

    def _count_arg(self, n: Any, dt: np.dtype) -> int:
        """`n` of a flat codec's ``compressed_size``: the elements of that count or shape."""
        return math.prod(self._shape_arg(n, dt))

    def decode_raw(self, buf: Any, dtype: Any, n: Any, out: Any | None = None) -> Any:
        """Decode a bare stream of `n` elements of `dtype`, or of an array of shape `n` (a
        tuple: a shaped codec decodes the stream of that shape; the result has that shape);
        into `out` (any writable buffer of exactly that size) when given. CuPy in (`buf` or
        `out`), CuPy out."""
        dt = self._dtype(dtype)
        shape = self._shape_arg(n, dt)
        count = math.prod(shape)
        size_of: Any = shape if self._shaped else count
        # Before anything is allocated: a stream too short for `n` elements is refused here,
        # so that a corrupt count costs no memory (the codec checks the stream in full later).
        if is_cupy(buf):
            import cupy

            b = cupy.asarray(buf).reshape(-1).view(cupy.uint8)
            self._check_stream(
                int(b.size), lambda: cupy.asnumpy(b[:STREAM_HEAD_BYTES]).tobytes(), dt, size_of
            )
        else:
            v = byte_view(buf)
            self._check_stream(int(v.size), v[:STREAM_HEAD_BYTES].tobytes, dt, size_of)
        if is_cupy(buf) or is_cupy(out):
            return self._decode_device(buf, dt, shape, count, out)
        o = np.empty(shape, dt) if out is None else flat_out(out, dt, count).reshape(shape)
        self._host_decode(byte_view(buf), o if self._shaped else o.reshape(-1))
        return o if out is None else out

    def _decode_device(
        self, buf: Any, dt: np.dtype, shape: tuple[int, ...], count: int, out: Any | None
    ) -> Any:
        import cupy

        if out is None:
            o = cupy.empty(shape, dt)
        else:
            if out.nbytes != count * dt.itemsize or not out.flags.c_contiguous:
                raise CodecError(f"the output must be a C-contiguous CuPy array of {count} x {dt}")
            o = out.reshape(-1).view(dt).reshape(shape)
        b = cupy.asarray(buf).reshape(-1).view(cupy.uint8)
        target = o if self._shaped else o.reshape(-1)
        if self._use_gpu():
            self._gpu_decode(b, target)
        else:
            host = np.empty(target.shape, dt)
            self._host_decode(cupy.asnumpy(b), host)
            target.set(host)
        return o if out is None else out

    # --- the numcodecs contract ----------------------------------------------------------

    def encode(self, buf: Any) -> Any:
        """A frame (header + raw stream): bytes for host data, a CuPy uint8 array for CuPy."""
        if is_cupy(buf):
            import cupy

            dt = self._dtype(buf.dtype)
            head = frame.pack(self._number, self._params(), dt, tuple(buf.shape))
            raw = self.encode_raw(buf)
            return cupy.concatenate([cupy.asarray(np.frombuffer(head, np.uint8)), raw])
        arr = host_input(buf)
        dt = self._dtype(arr.dtype)
        head = frame.pack(self._number, self._params(), dt, arr.shape)
        return head + self._host_encode(arr if self._shaped else arr.reshape(-1))

    def _frame_layout(self, f: frame.Frame) -> Any:
        """What ``decode_raw`` takes for the stream of frame `f`: its shape where the stream
        was coded in it (a shaped codec, frame version 2 and later), else its element count
        (version 1 frames were always coded flat)."""
        return f.shape if self._shaped and f.version >= 2 else f.count

    def _frame(self, head: Any) -> frame.Frame:
        f = frame.unpack(head)
        if f.codec != self._number or f.params != self._params():
            raise CodecError(
                f"this frame was not written by {self!r} (codec {f.codec}, parameters {f.params:#x}; "
                f"expected {self._number}, {self._params():#x})"
            )
        return f

    def decode(self, buf: Any, out: Any | None = None) -> Any:
        """Decode a frame of :meth:`encode`; into `out` (exactly the decoded size) if given,
        else a new array of the original dtype and shape."""
        if is_cupy(buf):
            import cupy

            b = cupy.asarray(buf).reshape(-1).view(cupy.uint8)
            f = self._frame(cupy.asnumpy(b[: frame.header_bound()]).tobytes())
            res = self.decode_raw(b[f.offset :], f.dtype, self._frame_layout(f), out)
            return res.reshape(f.shape) if out is None else res
        view = byte_view(buf)
        f = self._frame(view[: frame.header_bound()].tobytes())
        res = self.decode_raw(view[f.offset :], f.dtype, self._frame_layout(f), out)
        return res.reshape(f.shape) if out is None else out
