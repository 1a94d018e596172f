"""Numeric settings in the environment: every value outside a setting's documented range,
and every value that is not a number at all (1e300, -1, nan, inf, huge integers, unicode
digits, text that is not UTF-8), is an ArgumentError that names the variable and the
allowed range (a CodecError for the codecs' own setting), never a panic, an OverflowError
or a bare ValueError. Creating a segment reads the engine's settings, so no process needs
to start."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shmcoll
from conftest import environ
from shmcoll import _core
from shmcoll.codecs import Bq, Cast, Mpc, Zfp
from shmcoll.envvars import parse_whole

#: (variable, the allowed range as the error states it, bad values of its own).
ENGINE_SETTINGS = [
    ("SHMCOLL_TIMEOUT", "seconds: 0 < value <= 31536000", ["0", "31536001", "1e-400"]),
    ("SHMCOLL_SPIN_US", "microseconds: 0 <= value <= 1000000", ["1000001", "-0.5"]),
    ("SHMCOLL_YIELD_US", "microseconds: 0 <= value <= 3600000000", ["3.7e9"]),
    ("SHMCOLL_LEAVE_YIELDS", "yields: 0 <= value <= 10000", ["10001", "2.5", "+3"]),
    ("SHMCOLL_INLINE_BYTES", "bytes per rank: 0 <= value <= 1073741824", ["2G"]),
    ("SHMCOLL_STAGING_BYTES", "bytes per rank: 0 <= value <= 68719476736", ["65G"]),
    ("SHMCOLL_HEAP_BYTES", "bytes per rank: 0 <= value <= 1099511627776", ["2T", "lots"]),
    ("SHMCOLL_CHUNK_BYTES", "bytes: 64 <= value <= 1073741824", ["63", "2G"]),
    ("SHMCOLL_NT_THRESHOLD", "bytes: 0 <= value <= 1099511627776", ["2T"]),
    ("SHMCOLL_POOL_SEGMENTS", "segments: 0 <= value <= 8", ["9", "2.5"]),
]

#: Bad for every numeric setting.
HOSTILE = [
    "1e300",
    "-1",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "9" * 400,
    "18446744073709551616",
    "16E",
    "1.5.5",
    "0x10",
    "٣",
    "５",
    "1,5",
    "[1]",
    "1 2",
    "10 s",
    "☃",
]

#: Characters none of the settings' syntaxes use: a value holding one is garbage.
_FOREIGN = st.characters(
    # lone surrogates cannot be put in the environment; white space may be trimmed
    blacklist_categories=("Cs", "Zs", "Zl", "Zp"),
    blacklist_characters="\x00\x85" + "0123456789.eE+-_ \t\n\r\x0b\x0ckKmMgGtTbBiI",
)
GARBAGE = st.builds(
    lambda a, c, b: a + c + b,
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20),
    _FOREIGN,
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20),
)


def _segment_error(var: str, value: str) -> shmcoll.ArgumentError:
    """Create (and remove) a one-rank segment with `var`=`value`; the ArgumentError."""
    with environ({var: value}):
        try:
            h = _core.SegmentHandle(1)
        except shmcoll.ArgumentError as e:
            return e
    h.unlink()
    pytest.fail(f"{var}={value!r} was accepted")


@pytest.mark.parametrize(("var", "allowed", "own"), ENGINE_SETTINGS, ids=[s[0] for s in ENGINE_SETTINGS])
def test_out_of_range_and_garbage_are_argument_errors(var: str, allowed: str, own: list[str]) -> None:
    for value in [*HOSTILE, *own]:
        e = _segment_error(var, value)
        assert f"{var}=" in str(e) and allowed in str(e), str(e)
        assert len(str(e)) < 400, "a huge value is shown shortened"


def test_a_bad_isa_is_an_argument_error() -> None:
    # The kernels ignore a SHMCOLL_ISA they cannot parse (it only lowers the ISA); a
    # communicator refuses it rather than running silently at the default.
    for value in ["bad", "avx1024", "٣"]:
        e = _segment_error("SHMCOLL_ISA", value)
        assert "SHMCOLL_ISA=" in str(e) and "scalar, sse2, avx2, avx512" in str(e), str(e)
    with environ({"SHMCOLL_ISA": "sse2"}):
        _core.SegmentHandle(1).unlink()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    var=st.sampled_from([s[0] for s in ENGINE_SETTINGS]),
    value=st.one_of(
        GARBAGE,
        st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: math.isnan(x) or x > 1e13 or x < 0),
        st.integers(min_value=1 << 41).map(str),
        st.integers(max_value=-1).map(str),
    ),
)
def test_hostile_values_never_escape_as_anything_but_argument_error(var: str, value: str) -> None:
    value = str(value)
    e = _segment_error(var, value)
    assert var in str(e)


@settings(max_examples=100, deadline=None)
@given(x=st.floats(min_value=1e-6, max_value=31536000.0))
def test_every_timeout_in_range_is_taken(x: float) -> None:
    with environ({"SHMCOLL_TIMEOUT": repr(x)}):
        h = _core.SegmentHandle(1)
    h.unlink()


def test_text_that_is_not_utf8_is_an_argument_error() -> None:
    os.environb[b"SHMCOLL_HEAP_BYTES"] = b"\xff64K"
    try:
        with pytest.raises(shmcoll.ArgumentError, match=r"SHMCOLL_HEAP_BYTES.*not UTF-8"):
            _core.SegmentHandle(1)
    finally:
        del os.environb[b"SHMCOLL_HEAP_BYTES"]


@pytest.fixture
def big_array() -> Iterator[np.ndarray]:
    # Large enough that the zfp codec reads SHMCOLL_CODEC_THREADS (small arrays never do).
    yield np.linspace(0.0, 1.0, 1 << 20)


@pytest.mark.parametrize("value", ["0", "-1", "1e300", "nan", "1025", "9" * 400, "٣", "four"])
def test_bad_codec_threads_are_a_codec_error(big_array: np.ndarray, value: str) -> None:
    with (
        environ({"SHMCOLL_CODEC_THREADS": value}),
        pytest.raises(shmcoll.CodecError, match="SHMCOLL_CODEC_THREADS"),
    ):
        Zfp(rate=16).encode(big_array)


def test_good_codec_threads_are_taken(big_array: np.ndarray) -> None:
    with environ({"SHMCOLL_CODEC_THREADS": "2"}):
        two = bytes(Zfp(rate=16).encode(big_array))
    assert two == bytes(Zfp(rate=16).encode(big_array))  # the stream does not depend on threads


@pytest.mark.parametrize(
    "codec", [Bq(bits=8, block=256), Bq(bits=4, block=64), Cast("bfloat16"), Cast("float16"), Mpc()], ids=str
)
def test_every_codec_gives_the_same_bytes_on_any_thread_count(codec: object, big_array: np.ndarray) -> None:
    """Every codec splits a large input over SHMCOLL_CODEC_THREADS threads; the stream and
    the decoded array are those of one thread, and a bad count is refused by all."""
    x = (big_array * 1e3).astype(np.float32)  # 4 MiB: large enough to be split
    streams, backs = [], []
    for threads in ("1", "2", "3", "7"):
        with environ({"SHMCOLL_CODEC_THREADS": threads}):
            s = bytes(codec.encode(x))  # type: ignore[attr-defined]
            streams.append(s)
            backs.append(np.asarray(codec.decode(s)).view(np.uint8))  # type: ignore[attr-defined]
    assert all(s == streams[0] for s in streams)
    assert all(np.array_equal(b, backs[0]) for b in backs)
    with (
        environ({"SHMCOLL_CODEC_THREADS": "0"}),
        pytest.raises(shmcoll.CodecError, match="SHMCOLL_CODEC_THREADS"),
    ):
        codec.encode(x)  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(GARBAGE, st.integers().map(str), st.sampled_from(HOSTILE)))
def test_python_whole_numbers_are_in_range_or_an_argument_error(value: str) -> None:
    try:
        n = parse_whole("SHMCOLL_X", value, 1, 1024)
    except shmcoll.ArgumentError as e:
        assert "SHMCOLL_X=" in str(e) and "1 to 1024" in str(e)
    else:
        assert 1 <= n <= 1024 and value.strip().isascii()


@pytest.mark.parametrize("value", ["0", "-3", "1e3", "٣", "9" * 5000])
def test_node_split_and_fft_threads_are_checked(value: str) -> None:
    from shmcoll.fft.backends import _threads
    from shmcoll.nodes import node_split

    with (
        environ({"SHMCOLL_NODE_SPLIT": value}),
        pytest.raises(shmcoll.ArgumentError, match="SHMCOLL_NODE_SPLIT"),
    ):
        node_split()
    with (
        environ({"SHMCOLL_FFT_THREADS": value}),
        pytest.raises(shmcoll.ArgumentError, match="SHMCOLL_FFT_THREADS"),
    ):
        _threads()


@pytest.mark.parametrize("value", ["1e300", "-1", "nan", "100T", "1K", "lots"])
def test_bad_arena_size_is_an_argument_error(value: str) -> None:
    # Checked before the arena is looked at (the test process has one already).
    with environ({"SHMCOLL_ARENA_BYTES": value}), pytest.raises(shmcoll.ArgumentError, match="ARENA_BYTES"):
        _core._install_shared_arrays()
