"""The zfp CUDA kernels on a GPU (shmcoll.gpu.zfp): the bytes of the Rust codec (which are
zfpy's) for every rate, 1-D and in 2-D to 4-D blocks, and bit-identical decodes, also into
slices at any offset. Skips without CuPy or a device. Their speed is measured by ``shmcoll
selftest --gpu`` (a benchmark), never asserted here."""

from __future__ import annotations

import numpy as np
import pytest

from shmcoll import _core, gpu

cp = pytest.importorskip("cupy")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.available(), reason="no CUDA device"),
]

from shmcoll.gpu import zfp  # noqa: E402  (after the skips: nothing to test without a GPU)


def arrays(dt: type, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    fi = np.finfo(dt)
    mixed = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
    special = rng.choice([0.0, -0.0, fi.max, -fi.max, fi.smallest_subnormal, fi.tiny, np.nan, np.inf], n)
    tiny = rng.integers(-1000, 1000, n) * fi.smallest_subnormal
    smooth = np.cumsum(rng.standard_normal(n)) + 50.0
    return [a.astype(dt) for a in (mixed, special, tiny, smooth)]


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_gpu_bytes_match_rust(dt: type) -> None:
    rng = np.random.default_rng(1)
    rates = range(3, 33) if dt is np.float32 else range(4, 65)
    for rate in rates:
        for n in (1, 5, 1023, 100_003):
            for a in arrays(dt, n, rng):
                want = _core.zfp_encode(a, rate)
                got = zfp.encode(cp.asarray(a), rate)
                assert cp.asnumpy(got).tobytes() == want, f"encode {dt.__name__} rate {rate} n {n}"
                back = zfp.decode(cp.asarray(np.frombuffer(want, np.uint8)), dt, n, rate)
                ref = _core.zfp_decode(want, np.dtype(dt).name, n, rate)
                assert cp.asnumpy(back).tobytes() == ref.tobytes(), f"decode rate {rate} n {n}"


def test_gpu_decodes_any_stream_like_rust() -> None:
    rng = np.random.default_rng(2)
    for dt, rate in ((np.float32, 13), (np.float64, 37), (np.float64, 4)):
        n = 4001
        junk = rng.integers(0, 256, _core.zfp_compressed_size(n, np.dtype(dt).name, rate), dtype=np.uint8)
        got = zfp.decode(cp.asarray(junk), dt, n, rate)
        want = _core.zfp_decode(junk.tobytes(), np.dtype(dt).name, n, rate)
        assert cp.asnumpy(got).tobytes() == want.tobytes()


def test_gpu_out_buffers_and_errors() -> None:
    x = cp.asarray(np.linspace(-1, 1, 1000, dtype=np.float32))
    size = _core.zfp_compressed_size(1000, "float32", 16)
    out = cp.zeros(size + 64, cp.uint8)
    s = zfp.encode(x, 16, out)
    assert s.nbytes == size and s.data.ptr == out.data.ptr
    y = cp.empty(1000, cp.float32)
    assert zfp.decode(s, np.float32, 1000, 16, y) is y
    from shmcoll.errors import CodecError

    with pytest.raises(CodecError):
        zfp.encode(x, 2)
    with pytest.raises(CodecError):
        zfp.encode(x.astype(cp.float16), 8)
    with pytest.raises(CodecError):
        zfp.encode(x, 16, cp.zeros(8, cp.uint8))
    with pytest.raises(CodecError):
        zfp.decode(s[:8], np.float32, 1000, 16)


#: 2-D to 4-D shapes with whole and partial blocks along every axis, and one of 1M values.
ND_SHAPES = [
    (4, 4),
    (5, 7),
    (1, 9),
    (9, 1),
    (40, 33),
    (3, 5, 6),
    (8, 8, 8),
    (2, 3, 5, 7),
    (4, 4, 4, 4),
    (96, 103, 101),
]


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", ND_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_nd_bytes_match_rust(dt: type, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    n = int(np.prod(shape))
    rates = (1, 2, 7, 16, 32) + ((33, 64) if dt is np.float64 else ())
    for rate in rates:
        for flat in arrays(dt, n, rng):
            a = flat.reshape(shape)
            want = _core.zfp_encode(a, rate, shape=shape)
            got = zfp.encode(cp.asarray(a), rate)
            assert cp.asnumpy(got).tobytes() == want, f"encode {dt.__name__} {shape} rate {rate}"
            back = zfp.decode(cp.asarray(np.frombuffer(want, np.uint8)), dt, shape, rate)
            assert back.shape == shape
            ref = _core.zfp_decode(want, np.dtype(dt).name, shape, rate)
            assert cp.asnumpy(back).tobytes() == ref.tobytes(), f"decode {dt.__name__} {shape} rate {rate}"


@pytest.mark.parametrize("offset", [1, 3])
def test_gpu_nd_decode_into_a_slice(offset: int) -> None:
    a = np.cumsum(np.random.default_rng(9).standard_normal((6, 11, 5)), axis=2).astype(np.float32)
    stream = _core.zfp_encode(a, 9, shape=a.shape)
    big = cp.asarray(np.full(a.size + 5, -1.0, np.float32))
    out = big[offset : offset + a.size]
    assert zfp.decode(cp.asarray(np.frombuffer(stream, np.uint8)), np.float32, a.shape, 9, out) is out
    assert cp.asnumpy(out).tobytes() == _core.zfp_decode(stream, "float32", a.shape, 9).tobytes()
    host = cp.asnumpy(big)
    assert (host[:offset] == -1).all() and (host[offset + a.size :] == -1).all()
