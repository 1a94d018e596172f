"""shmcoll.codecs: golden streams (shared with the Rust tests), error bounds and exact round
trips (hypothesis), the numcodecs contract and entry points, bad arguments, and the CuPy
host fallback (with a stand-in CuPy module, so no GPU is needed)."""

from __future__ import annotations

import importlib.util
import pathlib
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import shmcoll
from cuda_emu.emulation import installed
from shmcoll import _core
from shmcoll.codecs import (
    CODECS,
    Bq,
    Cast,
    CodecError,
    GpuFallbackWarning,
    Mpc,
    Zfp,
    fallback_calls,
    get_codec,
)

GOLDEN = pathlib.Path(__file__).parent / "golden"
_spec = importlib.util.spec_from_file_location("codec_golden", GOLDEN / "make_codec_golden.py")
assert _spec is not None and _spec.loader is not None
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)  # the independent NumPy renderings of the specs


def cases(codec: str) -> list[tuple[str, list[str], bytes, bytes]]:
    out = []
    for line in (GOLDEN / codec / "manifest.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, *fields = line.split()
        d = GOLDEN / codec
        out.append((name, fields, (d / f"{name}.input").read_bytes(), (d / f"{name}.stream").read_bytes()))
    assert len(out) >= 5
    return out


# --- golden streams -------------------------------------------------------------------------


@pytest.mark.parametrize("case", cases("bq"), ids=lambda c: c[0])
def test_bq_golden(case: tuple[str, list[str], bytes, bytes]) -> None:
    _, (bits, block, n), inp, stream = case
    c = Bq(bits=int(bits), block=int(block))
    x = np.frombuffer(inp, "<f4")
    assert c.encode_raw(x) == stream
    assert c.compressed_size(int(n)) == len(stream)
    y = c.decode_raw(stream, np.float32, int(n))
    nb = -(-int(n) // int(block))
    scale = np.repeat(np.frombuffer(stream[: 4 * nb], "<f4"), int(block))[: int(n)]
    codes = np.frombuffer(stream[4 * nb :], np.int8)
    if int(bits) == 4:
        lo, hi = (codes << 4) >> 4, codes >> 4
        codes = np.stack([lo, hi], 1).reshape(-1)[: int(n)]
    np.testing.assert_array_equal(y, codes.astype(np.float32) * scale)


@pytest.mark.parametrize("case", cases("cast"), ids=lambda c: c[0])
def test_cast_golden(case: tuple[str, list[str], bytes, bytes]) -> None:
    _, (fmt, src, n), inp, stream = case
    x = np.frombuffer(inp, "<f4" if src == "float32" else "<f8")
    c = Cast(fmt)
    assert c.encode_raw(x) == stream
    y = c.decode_raw(stream, src, int(n))
    h = np.frombuffer(stream, "<u2")
    want = (
        h.view(np.float16).astype(src) if fmt == "float16" else (h.astype(np.uint32) << 16).view(np.float32)
    )
    np.testing.assert_array_equal(y, want.astype(src))


@pytest.mark.parametrize("case", cases("mpc"), ids=lambda c: c[0])
def test_mpc_golden(case: tuple[str, list[str], bytes, bytes]) -> None:
    _, (word, dim, n), inp, stream = case
    dt = np.dtype(f"<u{word}")
    x = np.frombuffer(inp, dt)
    c = Mpc(dim=int(dim))
    assert c.encode_raw(x) == stream
    assert c.decode_raw(stream, dt, int(n)).tobytes() == inp
    assert len(stream) <= c.max_compressed_size(int(n), dt)


# --- properties -----------------------------------------------------------------------------

finite32 = hnp.arrays(
    np.float32, st.integers(0, 600), elements=st.floats(-(2.0**100), 2.0**100, width=32, allow_subnormal=True)
)


@settings(max_examples=60, deadline=None)
@given(x=finite32, bits=st.sampled_from([8, 4]), block=st.sampled_from([32, 64, 128, 256]))
def test_bq_size_and_error_bound(x: np.ndarray, bits: int, block: int) -> None:
    c = Bq(bits=bits, block=block)
    s = c.encode_raw(x)
    nb = -(-x.size // block)
    assert len(s) == 4 * nb + (x.size if bits == 8 else -(-x.size // 2)) == c.compressed_size(x.size)
    assert s == ref.bq_numpy(x, bits, block)
    y = c.decode_raw(s, np.float32, x.size)
    scale = np.repeat(np.frombuffer(s[: 4 * nb], "<f4").astype(np.float64), block)[: x.size]
    err = np.abs(x.astype(np.float64) - y)
    assert np.all(err <= scale / 2 * (1 + 1e-6) + np.abs(x) * 1e-6 + 1e-44)


@settings(max_examples=60, deadline=None)
@given(
    x=hnp.arrays(
        st.sampled_from([np.float32, np.float64]),
        st.integers(0, 300),
        elements=st.floats(allow_nan=False, allow_subnormal=True, width=32),
    ),
    fmt=st.sampled_from(["bfloat16", "float16"]),
)
def test_cast_is_nearest_even_within_half_an_ulp(x: np.ndarray, fmt: str) -> None:
    c = Cast(fmt)
    s = c.encode_raw(x)
    assert len(s) == 2 * x.size == c.compressed_size(x.size, x.dtype)
    with np.errstate(over="ignore"):
        assert s == ref.cast_numpy(x, fmt)
    y = c.decode_raw(s, x.dtype, x.size).astype(np.float64)
    info = np.finfo(np.float16) if fmt == "float16" else None
    eps, tiny, big = (2.0**-11, 2.0**-25, float(info.max)) if info else (2.0**-8, 2.0**-134, 3.3895e38)
    v = x.astype(np.float64)
    ok = np.abs(v) < big  # beyond max finite the result is inf, checked in the golden tests
    y[~ok] = 0
    half_ulp = np.maximum(np.abs(v) * eps, tiny)
    assert np.all(np.abs(v - y)[ok] <= half_ulp[ok])


@settings(max_examples=80, deadline=None)
@given(
    data=st.binary(min_size=0, max_size=9000),
    word=st.sampled_from([4, 8]),
    dim=st.integers(1, 255),
    n=st.sampled_from([None, 0, 1, 31, 33, 1025]),
)
def test_mpc_round_trips_any_bits(data: bytes, word: int, dim: int, n: int | None) -> None:
    dt = np.dtype(np.uint32 if word == 4 else np.uint64)
    raw = data if n is None else (data * (n * word // max(len(data), 1) + 1))[: n * word]
    raw = raw[: len(raw) // word * word]
    x = np.frombuffer(raw, dt)
    c = Mpc(dim=dim)
    s = c.encode_raw(x)
    assert len(s) <= c.max_compressed_size(x.size, dt)
    assert s == ref.mpc_numpy(raw, word, dim)
    assert c.decode_raw(s, dt, x.size).tobytes() == raw


def test_mpc_keeps_nan_payloads_and_any_dtype() -> None:
    x = (np.arange(300, dtype=np.uint32) | np.uint32(0x7F800001)).view(np.float32)  # NaN payloads
    for arr in (x, np.linspace(0, 1, 999), np.arange(77, dtype=np.int64), np.ones(5, np.complex128)):
        y = Mpc().decode(Mpc().encode(arr))
        assert y.dtype == arr.dtype and y.tobytes() == arr.tobytes()


# --- the numcodecs contract -----------------------------------------------------------------

ALL = [Bq(), Bq(bits=4, block=64), Bq(bits=4, block=32), Cast(), Cast("float16"), Mpc(), Mpc(dim=3)]


@pytest.mark.parametrize("codec", ALL, ids=repr)
def test_frame_round_trip_and_config(codec: object) -> None:
    numcodecs = pytest.importorskip("numcodecs")
    x = np.random.default_rng(5).standard_normal((7, 5, 3)).astype(np.float32)
    c = get_codec(codec)
    f = c.encode(x)
    y = c.decode(f)
    assert y.shape == x.shape and y.dtype == x.dtype
    if isinstance(c, Mpc):
        np.testing.assert_array_equal(y, x)
    else:
        np.testing.assert_allclose(y, x, rtol=0.2, atol=0.2)
    out = np.empty_like(x)
    assert c.decode(f, out=out) is out
    np.testing.assert_array_equal(out, y)
    np.testing.assert_array_equal(c.decode(bytearray(f)), y)
    cfg = c.get_config()
    assert cfg["id"].startswith("shmcoll.")
    assert type(c).from_config({k: v for k, v in cfg.items() if k != "id"}) == c
    assert numcodecs.get_codec(cfg) == c, "entry point not found: pip install -e . registers it"
    assert isinstance(c, numcodecs.abc.Codec)
    assert get_codec(cfg) == c and get_codec(cfg["id"]).codec_id == cfg["id"]


CONTRACT = [*ALL, *([Zfp(rate=8), Zfp(rate=16)] if hasattr(_core, "zfp_encode") else [])]


@pytest.mark.parametrize("codec", CONTRACT, ids=repr)
def test_numcodecs_own_checks(codec: object) -> None:
    """numcodecs' own contract checks (numcodecs.tests.common): the configuration
    round-trips through JSON and numcodecs' registry, object arrays raise TypeError, and a
    lossless codec gives the array back item for item, into `out` too; the repr
    re-creates the codec."""
    pytest.importorskip("numcodecs")
    from numcodecs.tests import common

    import shmcoll.codecs

    common.check_config(codec)
    common.check_err_encode_object_buffer(codec)
    assert eval(repr(codec), vars(shmcoll.codecs)) == codec
    if isinstance(codec, Mpc):
        x = np.random.default_rng(2).standard_normal((9, 11)).astype(np.float32)
        common.check_encode_decode_array(x, codec)
        common.check_err_decode_object_buffer(codec)


def test_entry_points_name_every_codec() -> None:
    from importlib.metadata import entry_points

    names = {e.name: e.value for e in entry_points(group="numcodecs.codecs")}
    for cid, cls in CODECS.items():
        assert names.get(cid) == f"shmcoll.codecs:{cls.__name__}"


def test_fixed_sizes_and_attributes() -> None:
    assert Bq().fixed_size and Cast().fixed_size and Zfp().fixed_size and not Mpc().fixed_size
    assert Mpc().compressed_size(10, np.float32) is None
    assert Bq(bits=4).block == 64 and Bq().block == 256
    assert Cast().compressed_size(10, np.float64) == 20
    assert get_codec({"id": "zlib", "level": 1}).codec_id == "zlib"


# --- bad input ------------------------------------------------------------------------------


def test_bad_arguments() -> None:
    for make in (
        lambda: Bq(bits=3),
        lambda: Bq(block=100),
        lambda: Bq(bits=True),
        lambda: Cast("float8"),
        lambda: Mpc(dim=0),
        lambda: Mpc(dim=1.5),  # type: ignore[arg-type]
        lambda: Zfp(rate=-1),
        lambda: Zfp(rate=8.5),  # type: ignore[arg-type]
        lambda: Zfp(rate=65),
        lambda: Zfp(rate=2**70),
        lambda: get_codec({"id": "shmcoll.bq", "bogus": 1}),
        lambda: get_codec({"id": "no-such-codec"}),
        lambda: get_codec(42),
    ):
        with pytest.raises(CodecError):
            make()
    assert issubclass(CodecError, ValueError) and issubclass(CodecError, shmcoll.errors.ShmcollError)


@pytest.mark.parametrize("codec", CONTRACT, ids=repr)
def test_sizes_are_counts_of_arrays_that_could_exist(codec: Any) -> None:
    # Counts are whole numbers (NumPy's too), non-negative, and no more than an array could
    # hold: a size is never wrapped around or negative, and NumPy's own errors (from
    # np.empty of an absurd shape with a zero extent) do not escape as ValueError.
    assert codec.compressed_size(np.int64(100), np.float32) == codec.compressed_size(100, np.float32)
    if not isinstance(codec, Zfp):  # zfp's size depends on the shape; the others' on the count
        assert codec.compressed_size((10, 10), np.float32) == codec.compressed_size(100, np.float32)
    for n in (-5, 2**64 - 1, 2**62, (0, 2**63), (0, 2**62, 2**62), (2**40, 2**40)):
        with pytest.raises(CodecError):
            codec.compressed_size(n, np.float32)
        with pytest.raises(CodecError):
            codec.decode_raw(b"", np.float32, n)
        if isinstance(codec, Mpc):
            with pytest.raises(CodecError):
                codec.max_compressed_size(n, np.float32)
    with pytest.raises(CodecError):
        _core.bq_compressed_size(2**64 - 1, 8, 256)
    with pytest.raises(CodecError):
        _core.mpc_max_compressed_size(2**63, 4)


@pytest.mark.parametrize("codec", CONTRACT, ids=repr)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_0d_array_decodes_0d(codec: Any, dtype: type) -> None:
    if isinstance(codec, Bq) and dtype is np.float64:
        return
    x = np.array(2.5, dtype)
    y = codec.decode(codec.encode(x))
    assert y.shape == () and y.dtype == x.dtype
    assert float(y) == pytest.approx(2.5, rel=0.1)


def test_bad_data() -> None:
    x = np.ones(100, np.float32)
    with pytest.raises(CodecError, match="float32"):
        Bq().encode(x.astype(np.float64))
    with pytest.raises(CodecError, match="float32 or float64"):
        Cast().encode(np.ones(3, np.int32))
    with pytest.raises(CodecError, match="multiple of 4"):
        Mpc().encode(np.ones(3, np.int16))
    s = Bq().encode_raw(x)
    with pytest.raises(CodecError, match="bytes"):
        Bq().decode_raw(s[:-1], np.float32, 100)
    with pytest.raises(CodecError, match="output"):
        Bq().decode_raw(s, np.float32, 100, out=np.empty(99, np.float32))
    with pytest.raises(CodecError, match="not written by"):
        Cast().decode(Bq().encode(x))
    with pytest.raises(CodecError, match="not written by"):
        Bq(bits=4).decode(Bq().encode(x))
    with pytest.raises(CodecError, match="magic"):
        Bq().decode(b"XXXX" + Bq().encode(x)[4:])
    with pytest.raises(CodecError, match="shorter"):
        Bq().decode(b"SHC")
    m = Mpc().encode_raw(np.arange(3000, dtype=np.float32))
    with pytest.raises(CodecError, match="corrupt"):
        Mpc().decode_raw(m[:-3], np.float32, 3000)
    with pytest.raises(CodecError, match="words"):
        Mpc().decode_raw(m, np.float32, 2999)
    with pytest.raises(CodecError, match="aligned"):
        _core.bq_encode(np.zeros(9, np.uint8)[1:], 8, 256)
    buf = np.zeros(8, np.uint8)
    with pytest.raises(CodecError, match="overlaps"):
        _core.cast_encode(buf.view(np.float32), "float16", out=buf)


@pytest.mark.parametrize("codec", [Bq(), Bq(bits=4, block=32), Cast(), Cast("float16"), Mpc()], ids=repr)
@pytest.mark.parametrize("where", ["start", "inside", "last bytes"])
def test_decode_into_the_stream_it_reads_is_refused(codec: Any, where: str) -> None:
    # The decoder reads the stream while it writes the output: the same bytes as both would
    # be undefined behaviour in the Rust core (a shared and a mutable slice of one memory).
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    stream = np.frombuffer(codec.encode_raw(x), np.uint8)
    mem = np.zeros(stream.size + 4096 + x.nbytes, np.uint8)
    mem[: stream.size] = stream
    shift = {"start": 0, "inside": 8, "last bytes": (stream.size - 1) // 4 * 4}[where]
    out = mem[shift : shift + x.nbytes].view(np.float32)
    with pytest.raises(CodecError, match="overlaps"):
        codec.decode_raw(mem[: stream.size], np.float32, x.size, out=out)
    apart = mem[4096 + stream.size :][: x.nbytes].view(np.float32)  # disjoint: decodes
    codec.decode_raw(mem[: stream.size], np.float32, x.size, out=apart)
    np.testing.assert_array_equal(apart, codec.decode_raw(stream, np.float32, x.size))


# --- zfp (bindings written elsewhere; skipped until they are merged) -----------------------

needs_zfp = pytest.mark.skipif(not hasattr(_core, "zfp_encode"), reason="this build has no _core.zfp_*")


@needs_zfp
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rate", [8, 16])
def test_zfp_matches_zfpy(dtype: type, rate: int) -> None:
    """The calls whose bytes are zfpy's, exactly as docs/compression.md states them:
    ``encode_raw(x)`` is ``zfpy.compress_numpy(x, rate=R, write_header=False)`` for a
    C-contiguous array of 1 to 4 axes (zfp's blocks of 4^d values for d axes); ``decode_raw``
    of zfpy's streams, given the shape, gives zfpy's values bit for bit. Not zfpy's: zfpy's
    streams with a header, and ``encode`` (shmcoll's frame around the stream)."""
    zfpy = pytest.importorskip("zfpy")
    x = np.random.default_rng(3).standard_normal(1000).astype(dtype)
    c = Zfp(rate=rate)
    s = c.encode_raw(x)
    assert bytes(s) == zfpy.compress_numpy(x, rate=rate, write_header=False)
    assert len(s) == c.compressed_size(x.size, dtype)
    y = c.decode_raw(s, dtype, x.size)
    np.testing.assert_array_equal(y, zfpy.decompress_numpy(zfpy.compress_numpy(x, rate=rate)))
    x2 = x.reshape(10, 100)
    s2 = c.encode_raw(x2)
    assert bytes(s2) == zfpy.compress_numpy(x2, rate=rate, write_header=False)
    assert len(s2) == c.compressed_size(x2.shape, dtype)
    y2 = zfpy.decompress_numpy(zfpy.compress_numpy(x2, rate=rate))
    np.testing.assert_array_equal(c.decode_raw(s2, dtype, x2.shape), y2)
    np.testing.assert_array_equal(c.decode(c.encode(x2)), y2)
    assert bytes(s) != zfpy.compress_numpy(x, rate=rate)  # zfpy's header
    assert bytes(c.encode(x)) != bytes(s) and bytes(c.encode(x)).endswith(bytes(s))  # the frame


def _zfpy_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-ins for _core.zfp_* made of zfpy (the reference), to test the Zfp class's
    plumbing before the Rust kernel is in the build."""
    zfpy = pytest.importorskip("zfpy")

    def size(n: int | tuple[int, ...], dtype: str, rate: int) -> int:
        return len(zfpy.compress_numpy(np.zeros(n, dtype), rate=rate, write_header=False))

    def encode(arr: np.ndarray, rate: int, out: np.ndarray | None = None, shape: object = None) -> object:
        s = zfpy.compress_numpy(arr.reshape(shape or -1), rate=rate, write_header=False)
        if out is None:
            return s
        np.frombuffer(out, np.uint8)[: len(s)] = np.frombuffer(s, np.uint8)
        return len(s)

    def decode(buf: object, dtype: str, n: object, rate: int, out: np.ndarray | None = None) -> np.ndarray:
        shape = list(n) if isinstance(n, tuple | list) else [n]
        y = zfpy._decompress(bytes(buf), zfpy.dtype_to_ztype(np.dtype(dtype)), shape, rate=rate)
        if out is None:
            return y
        out[...] = y
        return out

    for name, f in (("zfp_compressed_size", size), ("zfp_encode", encode), ("zfp_decode", decode)):
        monkeypatch.setattr(_core, name, f, raising=False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zfp_class_plumbing(monkeypatch: pytest.MonkeyPatch, dtype: type) -> None:
    if hasattr(_core, "zfp_encode"):
        pytest.skip("the real bindings are tested above")
    _zfpy_bindings(monkeypatch)
    zfpy = pytest.importorskip("zfpy")
    x = np.random.default_rng(4).standard_normal((20, 50)).astype(dtype)
    c = Zfp(rate=16)
    raw = c.encode_raw(x)
    assert raw == zfpy.compress_numpy(x, rate=16, write_header=False)
    assert c.compressed_size(x.shape, dtype) == len(raw)
    y = c.decode(c.encode(x))
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y, c.decode_raw(raw, dtype, x.shape))
    assert np.max(np.abs(y - x)) < 0.05
    assert get_codec(c.get_config()) == c and c.get_config() == {"id": "shmcoll.zfp", "rate": 16}
    with pytest.raises(CodecError, match="not written by"):
        Zfp(rate=8).decode(c.encode(x))


def test_zfp_without_bindings_says_so() -> None:
    if hasattr(_core, "zfp_encode"):
        pytest.skip("this build has the zfp bindings")
    with pytest.raises(CodecError, match="no zfp codec"):
        Zfp(8).encode_raw(np.ones(4, np.float32))


# --- CuPy without a GPU: the host fallback --------------------------------------------------


def test_cupy_arrays_fall_back_to_the_host_once_announced() -> None:
    from shmcoll import gpu

    # The CuPy stand-in without a kernel library: a device whose kernels do not compile
    # (installed() resets the cached GPU verdict on entry and exit).
    with installed(None) as cupy:
        assert not gpu.available() and "do not compile" in (gpu.unavailable() or "")
        before = fallback_calls.get("shmcoll.bq", 0)
        x = np.linspace(-1, 1, 1000, dtype=np.float32).view(cupy.ndarray)
        c = Bq(bits=4, block=128)
        with pytest.warns(GpuFallbackWarning, match=r"shmcoll\.bq"):
            raw = c.encode_raw(x)
        assert type(raw) is cupy.ndarray and raw.tobytes() == c.encode_raw(np.asarray(x).view(np.ndarray))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # announced once only
            y = c.decode_raw(raw, np.float32, 1000)
            f = c.decode(c.encode(x.reshape(10, 100)))
        assert type(y) is cupy.ndarray and f.shape == (10, 100)
        np.testing.assert_array_equal(np.asarray(f).reshape(-1), np.asarray(y))
        assert fallback_calls["shmcoll.bq"] == before + 4


def test_bench_codec_command_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from shmcoll.cli import main

    if not hasattr(_core, "zfp_encode"):
        _zfpy_bindings(monkeypatch)  # so that the zfp rows and their zfpy peers run too
    res = CliRunner().invoke(main, ["bench", "codec", "-m", "64K", "-i", "1"])
    assert res.exit_code == 0, res.output
    for name in ("zfp rate 8", "zfp rate 16", "bq int8", "bq int4", "cast bf16", "cast fp16", "mpc"):
        assert name in res.output
    bad = CliRunner().invoke(main, ["bench", "codec", "--codecs", "lz4"])
    assert bad.exit_code != 0 and "unknown codecs" in bad.output
