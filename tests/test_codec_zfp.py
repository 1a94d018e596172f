"""The zfp bindings (shmcoll._core.zfp_*) against zfpy 1.0.1, the reference of the stream:
byte-identical streams, bit-identical decodes of zfpy's streams, sizes, and a clear
CodecError for every bad argument."""

from __future__ import annotations

import array
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shmcoll import _core
from shmcoll.errors import CodecError

zfpy = pytest.importorskip("zfpy")

GOLDEN = Path(__file__).parent / "golden" / "zfp"
RATES = {np.float32: range(3, 33), np.float64: range(4, 65)}
#: Below these block maxima zfp's encoder is undefined and shmcoll clamps (see zfp.rs).
UNDEFINED_BELOW = {np.float32: 2.0**-98, np.float64: 2.0**-962}


def zfpy_encode(a: np.ndarray, rate: int) -> bytes:
    return bytes(zfpy.compress_numpy(a, rate=rate, write_header=False))


def zfpy_decode(stream: bytes, dtype: type, n: int, rate: int) -> np.ndarray:
    return zfpy._decompress(stream, zfpy.dtype_to_ztype(np.dtype(dtype)), [n], rate=rate)


def encoder_defined(a: np.ndarray) -> bool:
    """Whether zfp's encoder is defined on `a`: no block maximum in (0, 2^-98) (float32)."""
    pad = (-len(a)) % 4
    blocks = np.abs(np.concatenate([a, np.full(pad, a[-1])]).astype(np.float64)).reshape(-1, 4)
    m = blocks.max(axis=1)
    return not bool(np.any((m > 0) & (m < UNDEFINED_BELOW[a.dtype.type])))


def check_against_zfpy(a: np.ndarray, rate: int) -> None:
    dt, n = a.dtype.type, len(a)
    ours = _core.zfp_encode(a, rate)
    assert len(ours) == _core.zfp_compressed_size(n, a.dtype.name, rate)
    ref = zfpy_encode(a, rate)
    if encoder_defined(a):
        assert ours == ref, f"stream differs from zfpy ({a.dtype}, n={n}, rate={rate})"
    # Decoding is defined for any stream: zfpy's (even where its encoder is not) and ours.
    for stream in (ref, ours):
        got = _core.zfp_decode(stream, a.dtype.name, n, rate)
        assert got.dtype == a.dtype and got.shape == (n,)
        assert got.tobytes() == zfpy_decode(stream, dt, n, rate).tobytes()


def floats(dt: type) -> st.SearchStrategy[float]:
    width = 32 if dt is np.float32 else 64
    fi = np.finfo(dt)
    return st.one_of(
        st.floats(width=width, allow_nan=False, allow_infinity=False),
        st.sampled_from([0.0, -0.0, float(fi.max), -float(fi.max), float(fi.smallest_subnormal)]),
        st.floats(-1e3, 1e3, width=width),
    )


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_arrays_match_zfpy(dt: type, data: st.DataObject) -> None:
    a = data.draw(hnp.arrays(dt, st.integers(1, 130), elements=floats(dt)))
    rate = data.draw(st.sampled_from(list(RATES[dt])))
    check_against_zfpy(a, rate)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_every_rate_matches_zfpy(dt: type) -> None:
    rng = np.random.default_rng(7)
    for rate in RATES[dt]:
        for n in (1, 2, 3, 6, 37):
            a = (rng.standard_normal(n) * 10.0 ** rng.uniform(-8, 8, n)).astype(dt)
            check_against_zfpy(a, rate)
        smooth = (np.cumsum(rng.standard_normal(203)) + 100).astype(dt)
        check_against_zfpy(smooth, rate)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_special_values(dt: type) -> None:
    fi = np.finfo(dt)
    tiny = fi.smallest_subnormal
    cases = [
        np.zeros(9, dt),
        np.array([0.0, -0.0, 0.0, -0.0, 0.0], dt),
        np.array([fi.max, -fi.max, fi.max, 1.0, -fi.max, 0.0, fi.max], dt),
        np.array([tiny * 3, -tiny, 1e-30, tiny, 2.0, -tiny * 7], dt),
        np.array([fi.tiny, -fi.tiny, fi.tiny / 2, 0.0], dt),
        np.array([-1.0, 1.0] * 11, dt),
    ]
    for a in cases:
        for rate in (min(RATES[dt]), 8, 16, max(RATES[dt])):
            check_against_zfpy(a, rate)


def test_undefined_range_is_clamped_and_zfpy_decodes_it() -> None:
    # Subnormal-only blocks: zfp's encoder is undefined (an infinite scale factor); ours
    # codes them as if the maximum were 2^-98, which zfpy's decoder reads like ours.
    a = np.array([1e-44, -3e-42, 2e-40, 0.0, 1e-45], np.float32)
    assert not encoder_defined(a)
    stream = _core.zfp_encode(a, 32)
    back = _core.zfp_decode(stream, "float32", 5, 32)
    assert back.tobytes() == zfpy_decode(stream, np.float32, 5, 32).tobytes()
    assert np.all(np.abs(back - a) <= 2.0**-120)


def test_non_finite_values_are_sanitized() -> None:
    a = np.array([np.nan, np.inf, -np.inf, 1.5, 2.0], np.float32)
    clean = np.array([0.0, np.finfo(np.float32).max, -np.finfo(np.float32).max, 1.5, 2.0], np.float32)
    assert _core.zfp_encode(a, 16) == zfpy_encode(clean, 16)


def test_golden_vectors() -> None:
    index = (GOLDEN / "index.txt").read_text().split("\n")
    checked = 0
    for line in filter(None, index):
        name, tag, shape_s, ref, *rates = line.split()
        shape = tuple(int(v) for v in shape_s.split("x"))
        dt, n = (np.float32 if tag == "f32" else np.float64), int(np.prod(shape))
        data = (GOLDEN / f"{name}.bin").read_bytes()
        width = np.dtype(dt).itemsize
        a = np.frombuffer(data[: n * width], dt)
        at = n * width
        for item in rates:
            rate, length = map(int, item.split(":"))
            stream, want = data[at : at + length], data[at + length : at + length + n * width]
            at += length + n * width
            if ref != "none":
                assert _core.zfp_encode(a, rate, shape=shape) == stream, f"{name} rate {rate}"
            back = _core.zfp_decode(stream, np.dtype(dt).name, shape, rate)
            assert back.shape == shape and back.tobytes() == want
            checked += 1
    assert checked >= 500


def test_large_arrays_release_the_gil_and_match() -> None:
    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64):
        a = np.cumsum(rng.standard_normal(100_003)).astype(dt)
        for rate in (8, 16):
            check_against_zfpy(a, rate)


def test_out_buffers() -> None:
    a = np.linspace(-3, 3, 101, dtype=np.float64)
    ref = zfpy_encode(a, 12)
    size = _core.zfp_compressed_size(101, "float64", 12)
    for out in (bytearray(size), np.empty(size + 5, np.uint8), memoryview(bytearray(size + 8))):
        assert _core.zfp_encode(a, 12, out) == size
        assert bytes(memoryview(out)[:size]) == ref
    dec = np.full(101, np.nan)
    assert _core.zfp_decode(ref, "float64", 101, 12, dec) is dec
    assert dec.tobytes() == zfpy_decode(ref, np.float64, 101, 12).tobytes()
    # A 2-D C-contiguous output of the right size works too.
    dec2 = np.empty((4, 25), np.float32)
    ref32 = zfpy_encode(a[:100].astype(np.float32), 12)
    assert _core.zfp_decode(ref32, "float32", 100, 12, dec2) is dec2


def test_other_buffer_exporters_and_alignment() -> None:
    vals = [1.0, -2.5, 3.25, 1e-3, 7.0]
    ref = zfpy_encode(np.array(vals, np.float32), 10)
    assert _core.zfp_encode(array.array("f", vals), 10) == ref
    assert _core.zfp_encode(memoryview(np.array(vals, np.float32)), 10) == ref
    # Unaligned input and output (an odd offset into a byte buffer).
    raw = bytearray(4 * len(vals) + 1)
    unaligned = np.frombuffer(raw, np.float32, count=len(vals), offset=1)
    unaligned[:] = vals
    assert _core.zfp_encode(unaligned, 10) == ref
    _core.zfp_decode(ref, "float32", len(vals), 10, unaligned)
    assert unaligned.tobytes() == zfpy_decode(ref, np.float32, len(vals), 10).tobytes()
    # dtype spellings
    for spelling in ("float32", "f4", "<f4", "single"):
        assert _core.zfp_compressed_size(5, spelling, 10) == len(ref)
    assert _core.zfp_compressed_size(0, "float64", 64) == 0
    assert _core.zfp_encode(np.zeros(0, np.float64), 64) == b""
    assert _core.zfp_decode(b"", "float64", 0, 64).shape == (0,)


def test_bad_arguments() -> None:
    a = np.ones(8, np.float32)
    assert issubclass(CodecError, ValueError)
    bad = [
        lambda: _core.zfp_encode(a, 2),
        lambda: _core.zfp_encode(a, 33),
        lambda: _core.zfp_encode(a.astype(np.float64), 65),
        lambda: _core.zfp_encode(a.astype(np.float64), 3),
        lambda: _core.zfp_encode(a.astype(np.float16), 8),
        lambda: _core.zfp_encode(a.astype(np.int32), 8),
        lambda: _core.zfp_encode(a.astype(">f4"), 8),
        lambda: _core.zfp_encode(np.ones((4, 4), np.float32)[:, 1], 8),
        lambda: _core.zfp_encode(object(), 8),
        lambda: _core.zfp_encode(a, 8, bytearray(4)),
        lambda: _core.zfp_encode(a, 8, b"\0" * 64),
        lambda: _core.zfp_compressed_size(4, "int32", 8),
        lambda: _core.zfp_compressed_size(4, "no such dtype", 8),
        lambda: _core.zfp_compressed_size(-1, "float32", 8),
        lambda: _core.zfp_compressed_size(4, "float32", -8),
        lambda: _core.zfp_decode(b"\0" * 8, "float32", 9, 8),
        lambda: _core.zfp_decode(b"\0" * 16, "float16", 4, 8),
        lambda: _core.zfp_decode(b"\0" * 16, "float32", 4, 8, np.empty(4, np.float64)),
        lambda: _core.zfp_decode(b"\0" * 16, "float32", 4, 8, np.empty(5, np.float32)),
        lambda: _core.zfp_decode(b"\0" * 16, "float32", 4, 8, np.empty(8, np.float32)[::2]),
        lambda: _core.zfp_decode(object(), "float32", 4, 8),
    ]
    for i, call in enumerate(bad):
        with pytest.raises(CodecError):
            call()
            pytest.fail(f"bad call {i} was accepted")
    with pytest.raises(CodecError, match="corrupt"):
        _core.zfp_decode(b"\0" * 8, "float64", 4, 16 + 1)
    with pytest.raises(CodecError, match="corrupt"):
        _core.zfp_decode(b"\0" * 8, "float64", 1 << 40, 16)  # no terabyte allocation
    with pytest.raises(CodecError, match="overlaps"):
        buf = np.zeros(64, np.float32)
        _core.zfp_encode(buf, 8, buf.view(np.uint8))
