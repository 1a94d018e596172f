"""zfp on 2-D, 3-D and 4-D arrays against zfpy 1.0.1: ``Zfp(rate).encode_raw(a)`` is
``zfpy.compress_numpy(a, rate=rate, write_header=False)`` byte for byte (zfp's blocks of
4^d values, partial blocks included), ``decode_raw(stream, dtype, shape)`` is zfpy's
decompression, and frames carry the shape (version 1 frames, coded flat, still decode)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shmcoll import _core
from shmcoll.codecs import Zfp, frame
from shmcoll.codecs.zfp import coded_shape
from shmcoll.errors import CodecError

zfpy = pytest.importorskip("zfpy")

RATES = {np.float32: range(1, 33), np.float64: range(1, 65)}
#: Below these block maxima zfp's encoder is undefined and shmcoll clamps (see zfp.rs).
UNDEFINED_BELOW = {np.float32: 2.0**-98, np.float64: 2.0**-962}
ODD_SHAPES = [(5, 7), (1, 9), (9, 1), (3, 5, 6), (2, 3, 5, 7), (4, 4), (1, 1, 1, 1)]


def zfpy_encode(a: np.ndarray, rate: int) -> bytes:
    return bytes(zfpy.compress_numpy(a, rate=rate, write_header=False))


def zfpy_decode(stream: bytes, dtype: type, shape: tuple[int, ...], rate: int) -> np.ndarray:
    return zfpy._decompress(stream, zfpy.dtype_to_ztype(np.dtype(dtype)), list(shape), rate=rate)


def encoder_defined(a: np.ndarray) -> bool:
    """Whether zfp's encoder is defined on `a`: no block maximum in (0, 2^-98) (float32).
    Padding copies values of the block, so the maximum over the part inside is the block's."""
    m = np.abs(a.astype(np.float64))
    m = np.pad(m, [(0, -s % 4) for s in a.shape])
    for axis in range(a.ndim):
        m = m.reshape((*m.shape[:axis], m.shape[axis] // 4, 4, *m.shape[axis + 1 :])).max(axis=axis + 1)
    return not bool(np.any((m > 0) & (m < UNDEFINED_BELOW[a.dtype.type])))


def check_against_zfpy(a: np.ndarray, rate: int) -> None:
    z = Zfp(rate)
    ours = z.encode_raw(a)
    assert len(ours) == z.compressed_size(a.shape, a.dtype)
    ref = zfpy_encode(a, rate)
    if encoder_defined(a):
        assert ours == ref, f"stream differs from zfpy ({a.dtype}, shape {a.shape}, rate {rate})"
    for stream in (ref, ours):
        got = z.decode_raw(stream, a.dtype, a.shape)
        assert got.dtype == a.dtype and got.shape == a.shape
        assert got.tobytes() == zfpy_decode(stream, a.dtype.type, a.shape, rate).tobytes()


def floats(dt: type) -> st.SearchStrategy[float]:
    width = 32 if dt is np.float32 else 64
    fi = np.finfo(dt)
    return st.one_of(
        st.floats(width=width, allow_nan=False, allow_infinity=False),
        st.sampled_from([0.0, -0.0, float(fi.max), -float(fi.max), float(fi.smallest_subnormal)]),
        st.floats(-1e3, 1e3, width=width),
    )


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_nd_arrays_match_zfpy(dt: type, data: st.DataObject) -> None:
    shape = data.draw(st.lists(st.integers(1, 9), min_size=2, max_size=4).map(tuple))
    a = data.draw(hnp.arrays(dt, shape, elements=floats(dt)))
    rate = data.draw(st.sampled_from(list(RATES[dt])))
    check_against_zfpy(a, rate)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_every_rate_on_odd_shapes_matches_zfpy(dt: type) -> None:
    rng = np.random.default_rng(11)
    for shape in ODD_SHAPES:
        rough = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-8, 8, shape)).astype(dt)
        grids = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
        smooth = (sum(np.cos(g * 0.4 + i) for i, g in enumerate(grids)) * 50 + 3).astype(dt)
        for rate in RATES[dt]:
            check_against_zfpy(rough, rate)
            check_against_zfpy(smooth, rate)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_special_values_nd(dt: type) -> None:
    fi = np.finfo(dt)
    tiny = fi.smallest_subnormal
    flat = np.array([fi.max, -fi.max, 0.0, -0.0, tiny * 3, 1e-30, fi.tiny, 2.0, -tiny, 1.0] * 21, dt)
    for shape in [(5, 7), (3, 5, 6), (2, 3, 5, 7), (1, 9)]:
        n = int(np.prod(shape))
        for a in (flat[:n].reshape(shape), np.zeros(shape, dt), np.full(shape, -0.0, dt)):
            for rate in (1, 8, 16, max(RATES[dt])):
                check_against_zfpy(a, rate)


def test_non_finite_values_are_sanitized_nd() -> None:
    a = np.array([[np.nan, np.inf, -np.inf], [1.5, 2.0, -7.0]], np.float32)
    clean = np.nan_to_num(a, nan=0.0, posinf=np.finfo(np.float32).max, neginf=-np.finfo(np.float32).max)
    assert Zfp(16).encode_raw(a) == zfpy_encode(clean, 16)


def test_nd_blocks_are_more_accurate_on_a_smooth_field() -> None:
    # zfpy's 2-D coding of a 64x64 field against the 1-D coding of the same values
    # flattened: the blocks of 4x4 see the field's smoothness along both axes.
    y, x = np.mgrid[0:64, 0:64] / 64.0
    field = (np.sin(6 * x) * np.cos(4 * y) + 0.1 * x * y).astype(np.float32)
    z = Zfp(16)
    err_2d = np.abs(z.decode_raw(z.encode_raw(field), np.float32, field.shape) - field).max()
    err_1d = np.abs(z.decode_raw(z.encode_raw(field.ravel()), np.float32, field.size) - field.ravel()).max()
    assert err_2d < err_1d / 2, (err_2d, err_1d)


def test_threaded_nd_arrays_match_zfpy() -> None:
    # Large enough to be split over threads in slabs of block rows.
    rng = np.random.default_rng(5)
    a = np.cumsum(rng.standard_normal((301, 2049)), axis=1).astype(np.float32)
    for rate in (3, 16):
        check_against_zfpy(a, rate)
    b = np.cumsum(rng.standard_normal((37, 61, 257)), axis=2)
    check_against_zfpy(b, 13)


def test_frames_record_the_shape_and_old_frames_decode() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 7, 3)).astype(np.float32)
    z = Zfp(12)
    f = z.encode(a)
    assert frame.unpack(f).version == frame.VERSION == 2
    assert f[frame.unpack(f).offset :] == zfpy_encode(a, 12)
    back = z.decode(f)
    assert back.shape == a.shape
    assert back.tobytes() == zfpy_decode(zfpy_encode(a, 12), np.float32, a.shape, 12).tobytes()
    # A version 1 frame (the array coded flattened) decodes as it was written.
    head = bytearray(frame.pack(z._number, z._params(), np.dtype(np.float32), a.shape))
    struct.pack_into("<B", head, 4, 1)
    flat = zfpy_encode(a.ravel(), 12)
    old = z.decode(bytes(head) + flat)
    assert old.shape == a.shape
    assert old.tobytes() == zfpy_decode(flat, np.float32, (a.size,), 12).reshape(a.shape).tobytes()
    # decode into an out buffer of the right size
    out = np.empty(a.size, np.float32)
    assert z.decode(f, out=out) is out and out.tobytes() == back.tobytes()


def test_more_than_four_axes_merge_the_leading_ones() -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 3, 2, 5, 3)).astype(np.float64)
    assert coded_shape(a.shape) == (6, 2, 5, 3)
    assert coded_shape(()) == (1,)
    z = Zfp(20)
    assert z.encode_raw(a) == zfpy_encode(a.reshape(6, 2, 5, 3), 20)
    assert z.decode(z.encode(a)).shape == a.shape


def test_bindings_take_shapes() -> None:
    a = np.arange(35, dtype=np.float32).reshape(5, 7)
    assert _core.zfp_encode(a, 4, shape=(5, 7)) == zfpy_encode(a, 4)
    # Without a shape the buffer is a 1-D array, as before.
    assert _core.zfp_encode(a, 4) == zfpy_encode(a.ravel(), 4)
    assert _core.zfp_compressed_size((5, 7), "float32", 1) == 8
    assert _core.zfp_compressed_size([3, 5, 6], "float64", 64) == 4 * 64 * 8
    out = np.empty((5, 7), np.float32)
    assert _core.zfp_decode(zfpy_encode(a, 4), "float32", (5, 7), 4, out) is out
    bad = [
        lambda: _core.zfp_encode(a, 4, shape=(5, 6)),  # not the buffer's values
        lambda: _core.zfp_encode(a, 4, shape=(1, 1, 1, 5, 7)),  # 5 axes
        lambda: _core.zfp_encode(a, 4, shape=()),
        lambda: _core.zfp_encode(a, 0, shape=(5, 7)),
        lambda: _core.zfp_encode(a, 33, shape=(5, 7)),
        lambda: _core.zfp_encode(a.ravel(), 2),  # 1-D needs room for the exponent
        lambda: _core.zfp_compressed_size((5, -7), "float32", 8),
        lambda: _core.zfp_compressed_size("5x7", "float32", 8),
        lambda: _core.zfp_compressed_size((2**40, 2**40, 2**40), "float64", 64),
        lambda: _core.zfp_decode(b"\0" * 8, "float32", (5, 7), 8),  # too short
        lambda: _core.zfp_decode(b"\0" * 64, "float32", (5, 7), 8, np.empty(36, np.float32)),
        lambda: Zfp(8).decode_raw(b"\0" * 64, np.float32, (5, "x")),
        lambda: Zfp(8).decode_raw(b"\0" * 64, np.float32, (5, -1)),
        lambda: Zfp(8).decode_raw(b"\0" * 8, np.float32, (2**30, 2**30, 2**30)),
    ]
    for i, call in enumerate(bad):
        with pytest.raises(CodecError):
            call()
            pytest.fail(f"bad call {i} was accepted")
