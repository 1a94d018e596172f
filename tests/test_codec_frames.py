"""Hostile codec frames: whatever the bytes of a frame say (a huge, zero or overflowing
shape, a dtype string with commas, brackets, 'object' or a 100 MB void, a stream cut short
or made of noise), ``Codec.decode`` raises CodecError (a ValueError) or returns an array of
exactly the shape and dtype the frame states; never MemoryError, SyntaxError or another
error, and never an allocation beyond what the stream's length can justify (traced with
tracemalloc, which NumPy reports its buffers to, and once under an address-space limit)."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmcoll.codecs import Bq, Cast, CodecError, Mpc, Zfp, frame

CODECS = [
    Zfp(rate=16),
    Zfp(rate=3),
    Bq(bits=8),
    Bq(bits=4),
    Cast("bfloat16"),
    Cast("float16"),
    Mpc(),
    Mpc(dim=3),
]

HOSTILE_DTYPES = [
    b"<f4,<f4",
    b"<f8,",
    b"[('a', '<f4')]",
    b"{'names': ['a'], 'formats': ['<f4']}",
    b"object",
    b"O",
    b"|O",
    b"V100000000",
    b"|V100000000",
    b"<U1000000000",
    b"S2147483648",
    b"(2,)<f4",
    b"(1000000000,)<f8",
    b"<f4\x00",
    b"f4",
    b"float32",
    b"<f2",
    b"<i2",
    b"|b1",
    b"<M8",
    b"__import__('os')",
    b"\xff\xfe",
    b"",
]
VALID_DTYPES = [b"<f4", b"<f8", b"<i4", b"<u8", b"<c16", b"<M8[ns]"]

_HEAD = struct.Struct("<4sBBBBQ")

#: Every decode may use this much memory besides what the stream justifies: at most 64
#: bytes decoded per stream byte (zfp at 1 bit per float64 value; mpc's bitmaps).
SLACK_BYTES = 8 << 20


def raw_frame(codec: object, shape: list[int], dtype: bytes, stream: bytes, ndim: int | None = None) -> bytes:
    """A frame with the codec's own number and parameters (so that it reaches the shape,
    dtype and stream checks), any shape, any dtype bytes and any stream."""
    nd = len(shape) if ndim is None else ndim
    head = (
        _HEAD.pack(b"SHCC", 1, codec._number, nd, len(dtype), codec._params())  # type: ignore[attr-defined]
        + struct.pack(f"<{len(shape)}Q", *shape)
        + dtype
    )
    return head + bytes(-len(head) % 16) + stream


def decode_checked(codec: object, data: bytes) -> None:
    """Decode; a CodecError or a result that matches the frame, within the memory bound."""
    tracemalloc.start()
    try:
        try:
            res = codec.decode(data)  # type: ignore[attr-defined]
        except CodecError:
            return
        finally:
            peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= SLACK_BYTES + 64 * len(data), f"decode took {peak} bytes for a {len(data)}-byte frame"
    f = frame.unpack(data)
    assert res.shape == f.shape and res.dtype == f.dtype


def small_stream(codec: object, dtype: bytes, n: int) -> bytes:
    """A real stream of `n` elements (or noise where the codec does not take the dtype)."""
    dt = frame.DTYPES.get(dtype.decode("ascii", "replace"))  # never np.dtype(...) on noise
    try:
        if dt is None:
            raise CodecError("not in the table")
        return bytes(codec.encode_raw(np.arange(n).astype(dt)))  # type: ignore[attr-defined]
    except CodecError:
        return bytes(range(256)) * (n // 64 + 1)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(CODECS),
    shape=st.one_of(
        st.lists(st.integers(0, 2**64 - 1), max_size=8),
        st.lists(st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]), max_size=32),
        st.lists(st.integers(0, 40), max_size=3),
    ),
    dtype=st.one_of(st.sampled_from(HOSTILE_DTYPES + VALID_DTYPES), st.binary(max_size=40)),
    stream=st.one_of(st.binary(max_size=600), st.just(b"")),
    cut=st.integers(0, 4096),
    real=st.booleans(),
)
def test_a_hostile_frame_is_a_codec_error_or_its_array(
    codec: object, shape: list[int], dtype: bytes, stream: bytes, cut: int, real: bool
) -> None:
    if real and math.prod(shape) <= 4096:
        stream = small_stream(codec, dtype, math.prod(shape))[:cut]
    decode_checked(codec, raw_frame(codec, shape, dtype, stream))


@pytest.mark.parametrize("codec", CODECS, ids=repr)
@pytest.mark.parametrize("dtype", HOSTILE_DTYPES, ids=repr)
def test_a_dtype_outside_the_table_is_a_codec_error(codec: object, dtype: bytes) -> None:
    with pytest.raises(CodecError, match="dtype"):
        codec.decode(raw_frame(codec, [4], dtype, bytes(64)))  # type: ignore[attr-defined]


@pytest.mark.parametrize("codec", CODECS, ids=repr)
@pytest.mark.parametrize(
    "shape",
    [[2**64 - 1], [2**62], [2**40, 2**40], [2**32] * 32, [0, 2**64 - 1], [2**37], [1 << 20]],
    ids=str,
)
def test_a_huge_shape_is_refused_before_allocating(codec: object, shape: list[int]) -> None:
    data = raw_frame(codec, shape, b"<f4" if not isinstance(codec, Mpc) else b"<f8", bytes(256))
    tracemalloc.start()
    try:
        with pytest.raises(CodecError):
            codec.decode(data)  # type: ignore[attr-defined]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < SLACK_BYTES


@pytest.mark.parametrize("codec", CODECS, ids=repr)
def test_every_truncation_of_a_real_frame_is_a_codec_error(codec: object) -> None:
    x = np.linspace(-1, 1, 300, dtype=np.float32 if not isinstance(codec, Mpc) else np.float64)
    data = bytes(codec.encode(x))  # type: ignore[attr-defined]
    assert np.asarray(codec.decode(data)).shape == x.shape  # type: ignore[attr-defined]
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            codec.decode(data[:cut])  # type: ignore[attr-defined]


@pytest.mark.parametrize("codec", CODECS, ids=repr)
@pytest.mark.parametrize("n", [2**64, 2**62, 2**45, -1, 1.5, "4"], ids=repr)
def test_decode_raw_refuses_a_count_the_stream_cannot_hold(codec: object, n: object) -> None:
    with pytest.raises(CodecError):
        codec.decode_raw(bytes(64), np.float64 if isinstance(codec, Mpc) else np.float32, n)  # type: ignore[attr-defined]


def test_frames_round_trip_every_dtype_in_the_table() -> None:
    for name, dt in frame.DTYPES.items():
        f = frame.unpack(frame.pack(4, 1, dt, (2, 3)))
        assert (f.dtype, f.shape, f.count) == (dt, (2, 3), 6), name


@pytest.mark.timeout(60)
def test_under_an_address_space_limit_a_huge_shape_is_still_a_codec_error() -> None:
    # Before the frame checks, NumPy asked for 2**40 bytes here: MemoryError under the limit.
    code = textwrap.dedent(
        """
        import resource, struct
        import numpy as np
        from shmcoll.codecs import CodecError, Zfp, Mpc
        limit = 4 << 30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for codec, dt in ((Zfp(), b"<f4"), (Mpc(), b"<f8")):
            head = struct.pack("<4sBBBBQ", b"SHCC", 1, codec._number, 1, len(dt), codec._params())
            head += struct.pack("<Q", 2**37) + dt
            data = head + bytes(-len(head) % 16) + bytes(4096)
            try:
                codec.decode(data)
            except CodecError:
                print("codec-error")
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["codec-error", "codec-error"], p.stdout + p.stderr
