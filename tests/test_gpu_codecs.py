"""The CUDA kernels of bq, cast and mpc produce the Rust reference's bytes, encode and
decode. Skipped without CuPy or a device. Their speed is measured by ``shmcoll selftest
--gpu`` (a benchmark), never asserted here."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from shmcoll import gpu
from shmcoll.codecs import Bq, Cast, Mpc

pytestmark = pytest.mark.gpu

if not gpu.available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # type: ignore[import-not-found]  # noqa: E402

from shmcoll.gpu import bq as gbq  # noqa: E402
from shmcoll.gpu import cast as gcast  # noqa: E402
from shmcoll.gpu import mpc as gmpc  # noqa: E402

GOLDEN = pathlib.Path(__file__).parent / "golden"
SIZES = [1, 7, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 4097, 100_003]


def _inputs(n: int, seed: int) -> list[np.ndarray]:
    """Random bit patterns, a smooth walk, the walk with NaN/inf/subnormals, tiny values, zeros."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    smooth = np.cumsum(rng.standard_normal(n)).astype(np.float32)
    special = smooth.copy()
    specials = np.float32([np.nan, np.inf, -np.inf, 0.0, 1e-44])
    special[::7] = specials[np.arange(special[::7].size) % specials.size]
    tiny = (rng.standard_normal(n) * 1e-40).astype(np.float32)
    return [bits, smooth, special, tiny, np.zeros(n, np.float32)]


def _same(a: np.ndarray, b: object) -> None:
    assert np.asarray(a).tobytes() == cupy.asnumpy(b).tobytes()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("bits,block", [(8, 256), (8, 32), (4, 64), (4, 128), (4, 32)])
def test_bq_gpu_bytes_match_rust(n: int, bits: int, block: int) -> None:
    c = Bq(bits=bits, block=block)
    for x in _inputs(n, n + bits + block):
        host = c.encode_raw(x)
        dev = gbq.encode(cupy.asarray(x), bits, block)
        _same(np.frombuffer(host, np.uint8), dev)
        y = cupy.empty(n, np.float32)
        gbq.decode(dev, y, bits, block)
        _same(c.decode_raw(host, np.float32, n), y)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cast_gpu_bytes_match_rust(n: int, fmt: str, dtype: type) -> None:
    c = Cast(fmt)
    wide = [np.random.default_rng(n).standard_normal(n) * 10.0 ** np.arange(-40, 40, 80 / n)[:n]]
    for x in _inputs(n, n) if dtype is np.float32 else wide:
        host = c.encode_raw(x)
        dev = gcast.encode(cupy.asarray(x), fmt)
        _same(np.frombuffer(host, np.uint8), dev)
        y = cupy.empty(n, dtype)
        gcast.decode(dev, y, fmt)
        _same(c.decode_raw(host, dtype, n), y)


def test_cast_gpu_every_16_bit_pattern() -> None:
    h = np.arange(65536, dtype=np.uint16).view(np.uint8)
    for fmt in ("bfloat16", "float16"):
        for dtype in (np.float32, np.float64):
            y = cupy.empty(65536, dtype)
            gcast.decode(cupy.asarray(h), y, fmt)
            _same(Cast(fmt).decode_raw(h, dtype, 65536), y)


@pytest.mark.parametrize("n", [0, *SIZES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("dim", [1, 3, 40])
def test_mpc_gpu_bytes_match_rust(n: int, dtype: type, dim: int) -> None:
    c = Mpc(dim=dim)
    for x32 in _inputs(n, n + dim):
        x = x32.view(np.int32) if dtype is np.int32 else x32
        if dtype is np.float64:
            x = np.ascontiguousarray(x32[: n // 2 * 2]).view(np.float64)
        host = c.encode_raw(x)
        dev = gmpc.encode(cupy.asarray(x), x.itemsize, dim)
        _same(np.frombuffer(host, np.uint8), dev)
        y = cupy.empty(x.size, x.dtype)
        gmpc.decode(dev, y, x.itemsize)
        _same(x, y)


def test_golden_streams_on_the_gpu() -> None:
    for line in (GOLDEN / "mpc" / "manifest.txt").read_text().splitlines()[1:]:
        name, word, dim, _ = line.split()
        inp = (GOLDEN / "mpc" / f"{name}.input").read_bytes()
        stream = (GOLDEN / "mpc" / f"{name}.stream").read_bytes()
        x = np.frombuffer(inp, f"<u{word}")
        _same(np.frombuffer(stream, np.uint8), gmpc.encode(cupy.asarray(x), int(word), int(dim)))
    for line in (GOLDEN / "bq" / "manifest.txt").read_text().splitlines()[1:]:
        name, bits, block, _ = line.split()
        x = np.frombuffer((GOLDEN / "bq" / f"{name}.input").read_bytes(), "<f4")
        stream = (GOLDEN / "bq" / f"{name}.stream").read_bytes()
        _same(np.frombuffer(stream, np.uint8), gbq.encode(cupy.asarray(x), int(bits), int(block)))


def test_codec_classes_use_the_gpu() -> None:
    x = cupy.asarray(np.linspace(-3, 3, 10_000, dtype=np.float32).reshape(100, 100))
    for c in (Bq(), Cast(), Mpc()):
        f = c.encode(x)
        assert isinstance(f, cupy.ndarray)
        y = c.decode(f)
        assert isinstance(y, cupy.ndarray) and y.shape == x.shape
        _same(np.frombuffer(c.encode(cupy.asnumpy(x)), np.uint8), f)
