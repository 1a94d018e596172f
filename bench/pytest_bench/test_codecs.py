"""Every codec's encode and decode: zfp against zfpy (zfp's own binding, serial), the casts
against NumPy's float16 cast (NumPy has no bfloat16: the same 2-byte narrowing), bq against
the same quantization written in NumPy, mpc against a plain copy of its input (the floor
of a lossless coder). Rates count input (uncompressed) bytes; the codecs use every CPU on
large inputs (``SHMCOLL_CODEC_THREADS`` caps them), their peers one."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conftest import against, field
from shmcoll.codecs import Bq, Cast, Mpc, Zfp

zfpy = pytest.importorskip("zfpy")


def bq_numpy(x: np.ndarray, block: int, qmax: int) -> tuple[np.ndarray, np.ndarray]:
    """bq in NumPy (codes one per byte): per-block absmax scale, divided, rounded half to
    even, clipped."""
    pad = (-x.size) % block
    b = np.pad(x, (0, pad)).reshape(-1, block)
    scale = (np.abs(b).max(axis=1) / np.float32(qmax)).astype(np.float32)
    safe = np.where(scale == 0, np.float32(1), scale)
    q = np.clip(np.rint(b / safe[:, None]), -qmax, qmax).astype(np.int8)
    return scale, q.reshape(-1)[: x.size]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rate", [8, 16])
def test_zfp(benchmark: Any, nbytes: int, rate: int, dtype: str) -> None:
    x = field(nbytes, dtype)
    codec = Zfp(rate=rate)
    out = np.empty(codec.compressed_size(x.size, x.dtype), np.uint8)
    benchmark.group = f"zfp rate {rate} encode"
    used = benchmark(codec.encode_raw, x, out=out)
    ref = zfpy.compress_numpy(x, rate=rate, write_header=False)
    assert bytes(out[:used]) == ref[: len(bytes(out[:used]))]
    against(benchmark, "zfpy.compress_numpy", lambda: zfpy.compress_numpy(x, rate=rate), x.nbytes)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rate", [8, 16])
def test_zfp_decode(benchmark: Any, nbytes: int, rate: int, dtype: str) -> None:
    x = field(nbytes, dtype)
    codec = Zfp(rate=rate)
    stream = np.frombuffer(bytes(codec.encode_raw(x)), np.uint8)
    y = np.empty_like(x)
    benchmark.group = f"zfp rate {rate} decode"
    benchmark(codec.decode_raw, stream, x.dtype, x.size, out=y)
    packed = zfpy.compress_numpy(x, rate=rate)
    np.testing.assert_array_equal(y, zfpy.decompress_numpy(packed))
    against(benchmark, "zfpy.decompress_numpy", lambda: zfpy.decompress_numpy(packed), x.nbytes)


@pytest.mark.parametrize(("bits", "block"), [(8, 256), (4, 64)])
def test_bq(benchmark: Any, nbytes: int, bits: int, block: int) -> None:
    x = field(nbytes, np.float32)
    codec = Bq(bits=bits, block=block)
    out = np.empty(codec.compressed_size(x.size, x.dtype), np.uint8)
    benchmark.group = "bq encode"
    benchmark(codec.encode_raw, x, out=out)
    qmax = 127 if bits == 8 else 7
    scale, q = bq_numpy(x, block, qmax)
    if bits == 8:
        nb = scale.size
        np.testing.assert_array_equal(out[: 4 * nb].view(np.float32), scale)
        np.testing.assert_array_equal(out[4 * nb :].view(np.int8), q)
    against(benchmark, "bq in NumPy", lambda: bq_numpy(x, block, qmax), x.nbytes)


@pytest.mark.parametrize(("bits", "block"), [(8, 256), (4, 64)])
def test_bq_decode(benchmark: Any, nbytes: int, bits: int, block: int) -> None:
    x = field(nbytes, np.float32)
    codec = Bq(bits=bits, block=block)
    stream = np.frombuffer(bytes(codec.encode_raw(x)), np.uint8)
    y = np.empty_like(x)
    benchmark.group = "bq decode"
    benchmark(codec.decode_raw, stream, x.dtype, x.size, out=y)
    scale, q = bq_numpy(x, block, 127 if bits == 8 else 7)
    pad = (-x.size) % block

    def numpy_decode() -> np.ndarray:
        v = np.pad(q, (0, pad)).reshape(-1, block).astype(np.float32) * scale[:, None]
        return v.reshape(-1)[: x.size]

    np.testing.assert_array_equal(y, numpy_decode())
    against(benchmark, "bq decode in NumPy", numpy_decode, x.nbytes)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_cast(benchmark: Any, nbytes: int, fmt: str) -> None:
    x = field(nbytes, np.float32)
    codec = Cast(fmt)
    out = np.empty(2 * x.size, np.uint8)
    benchmark.group = "cast encode"
    benchmark(codec.encode_raw, x, out=out)
    if fmt == "float16":
        np.testing.assert_array_equal(out.view(np.float16), x.astype(np.float16))
    against(benchmark, "x.astype(np.float16)", lambda: x.astype(np.float16), x.nbytes)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_cast_decode(benchmark: Any, nbytes: int, fmt: str) -> None:
    x = field(nbytes, np.float32)
    codec = Cast(fmt)
    stream = np.frombuffer(bytes(codec.encode_raw(x)), np.uint8)
    y = np.empty_like(x)
    benchmark.group = "cast decode"
    benchmark(codec.decode_raw, stream, x.dtype, x.size, out=y)
    half = x.astype(np.float16)
    if fmt == "float16":
        np.testing.assert_array_equal(y, half.astype(np.float32))
    against(benchmark, "h.astype(np.float32)", lambda: half.astype(np.float32), x.nbytes)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mpc(benchmark: Any, nbytes: int, dtype: str) -> None:
    x = field(nbytes, dtype)
    codec = Mpc()
    out = np.empty(codec.max_compressed_size(x.size, x.dtype), np.uint8)
    benchmark.group = "mpc encode"
    used = benchmark(codec.encode_raw, x, out=out)
    y = codec.decode_raw(out[:used], x.dtype, x.size)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
    copy = np.empty_like(x)
    against(benchmark, "np.copyto (lossless floor)", lambda: np.copyto(copy, x), x.nbytes)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mpc_decode(benchmark: Any, nbytes: int, dtype: str) -> None:
    x = field(nbytes, dtype)
    codec = Mpc()
    stream = np.frombuffer(bytes(codec.encode_raw(x)), np.uint8)
    y = np.empty_like(x)
    benchmark.group = "mpc decode"
    benchmark(codec.decode_raw, stream, x.dtype, x.size, out=y)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
    copy = np.empty_like(x)
    against(benchmark, "np.copyto (lossless floor)", lambda: np.copyto(copy, x), x.nbytes)
