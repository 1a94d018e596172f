"""shmcoll's codecs for compressed collectives, in numcodecs' shape.

    from shmcoll.codecs import Bq, Cast, Mpc, Zfp, get_codec
    c = Bq(bits=4, block=64)
    frame = c.encode(grad)               # self-describing bytes (CuPy in: CuPy out)
    back = c.decode(frame)
    raw = c.encode_raw(grad)             # the bare stream, c.compressed_size(n, dtype) bytes
    c.decode_raw(raw, "float32", grad.size, out=buf)
    get_codec({"id": "shmcoll.cast", "dtype": "float16"})

Each stream is specified byte for byte in the documentation of its Rust module
(rust/shmcoll-codec/src/{zfp,bq,cast,mpc}.rs); the CUDA kernels in cuda/ produce
the same bytes. With numcodecs installed these are numcodecs codecs, registered through the
``numcodecs.codecs`` entry points, so ``numcodecs.get_codec({"id": "shmcoll.bq"})`` works.
"""

from __future__ import annotations

from ..errors import CodecError
from .base import Codec, GpuFallbackWarning, fallback_calls
from .bq import Bq
from .cast import Cast
from .mpc import Mpc
from .registry import CODECS, get_codec
from .zfp import Zfp

__all__ = [
    "CODECS",
    "Bq",
    "Cast",
    "Codec",
    "CodecError",
    "GpuFallbackWarning",
    "Mpc",
    "Zfp",
    "fallback_calls",
    "get_codec",
]
