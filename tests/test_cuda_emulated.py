"""The CUDA kernels of bq, cast and mpc, run on the CPU, give the Rust reference's bytes.

No GPU here, so the very sources in cuda/ are compiled with g++ against
tests/cuda_emu/shim.h (each CUDA thread an OS thread, warp intrinsics through a barrier)
and driven by the real GPU wrappers (shmcoll/gpu/{bq,cast,mpc}.py) through the CuPy
stand-in of tests/cuda_emu (the ``emulated`` fixture of conftest.py). That checks the
kernels' arithmetic, layout and the wrappers' host side; tests/test_gpu_codecs.py checks
the same on a device when one is lent. The emulation itself is checked here too: it runs
every kernel cuda/ defines, and refuses a launch whose arguments the kernel does not take."""

from __future__ import annotations

import ctypes
import pathlib
import types
from typing import Any

import numpy as np
import pytest

from cuda_emu.emulation import cuda_kernels
from shmcoll import _core
from shmcoll.codecs import Bq, Cast, Mpc


def _dev(a: Any) -> Any:
    """`a` as a device array of the installed stand-in (a view: no copy)."""
    import cupy  # the stand-in  # type: ignore[import-not-found]

    return np.asarray(a).view(cupy.ndarray)


@pytest.fixture
def gpu_mods(sanitized_kernels: Any) -> types.SimpleNamespace:
    """The GPU wrappers over the UBSan build: a misaligned vector access or a bad shift in
    a kernel fails the test, as it would fault or differ on a device."""
    from shmcoll.gpu import bq, cast, mpc

    return types.SimpleNamespace(bq=bq, cast=cast, mpc=mpc, cupy=sanitized_kernels)


def test_the_emulation_runs_every_kernel_of_cuda(emu_lib: pathlib.Path) -> None:
    lib = ctypes.CDLL(str(emu_lib))
    lib.emu_kernels.restype = ctypes.c_char_p
    defined = cuda_kernels()
    assert {"bq_encode", "mpc_gather", "zfp_decode_nd_f64"} <= defined, defined
    assert set(lib.emu_kernels().decode().split()) == defined


def test_a_launch_with_arguments_the_kernel_does_not_take_is_refused(gpu_mods: Any) -> None:
    cp = gpu_mods.cupy
    fn = cp.RawModule().get_function("bq_encode")
    x, out = _dev(np.ones(64, np.float32)), _dev(np.zeros(64, np.uint8))
    with pytest.raises(TypeError, match=r"bq_encode takes \(p8 u8 i4 i4 p8\), was given \(p8 u4 i4 i4 p8\)"):
        fn((1,), (32,), (x, np.uint32(64), np.int32(8), np.int32(32), out))
    with pytest.raises(TypeError, match="was given"):
        fn((1,), (32,), (x, np.uint64(64), np.int32(8), np.int32(32)))
    with pytest.raises(RuntimeError, match="named symbol not found: bq_encode_f16"):
        cp.RawModule().get_function("bq_encode_f16")


def _inputs(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    smooth = np.cumsum(rng.standard_normal(n)).astype(np.float32)
    special = smooth.copy()
    marks = np.float32([np.nan, np.inf, -np.inf, 0.0, 1e-44, -3e-39])
    special[::37] = marks[np.arange(special[::37].size) % marks.size]
    tiny = (rng.standard_normal(n) * 1e-40).astype(np.float32)
    return [bits, smooth, special, tiny, np.zeros(n, np.float32)]


def _bytes(a: Any) -> bytes:
    return np.asarray(a).tobytes()


@pytest.mark.parametrize("n", [1, 33, 257, 2051])
@pytest.mark.parametrize("bits,block", [(8, 256), (8, 32), (4, 64), (4, 128), (4, 32)])
def test_bq_kernels_match_rust(gpu_mods: Any, n: int, bits: int, block: int) -> None:
    c = Bq(bits=bits, block=block)
    for x in _inputs(n, n * bits + block):
        host = c.encode_raw(x)
        dev = gpu_mods.bq.encode(_dev(x), bits, block)
        assert _bytes(dev) == host
        y = _dev(np.empty(n, np.float32))
        gpu_mods.bq.decode(dev, y, bits, block)
        assert _bytes(y) == c.decode_raw(host, np.float32, n).tobytes()


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_cast_kernels_match_rust(gpu_mods: Any, fmt: str) -> None:
    c = Cast(fmt)
    rng = np.random.default_rng(2)
    wide = rng.standard_normal(1500) * 10.0 ** rng.integers(-320, 300, 1500)
    wide[::50] = [
        np.nan,
        np.inf,
        -np.inf,
        0.0,
        65520.0,
        2.0**-25,
        1 + 2.0**-8 + 2.0**-40,
        -0.0,
        1e-310,
        3e38,
    ][: wide[::50].size % 10 or 10][0]
    for x in [*_inputs(1000, 5), wide, rng.integers(0, 2**63, 700, dtype=np.uint64).view(np.float64)]:
        host = c.encode_raw(x)
        dev = gpu_mods.cast.encode(_dev(x), fmt)
        assert _bytes(dev) == host, x.dtype
    every = np.arange(65536, dtype=np.uint16).view(np.uint8)
    for dt in (np.float32, np.float64):
        y = _dev(np.empty(65536, dt))
        gpu_mods.cast.decode(_dev(every), y, fmt)
        assert _bytes(y) == c.decode_raw(every, dt, 65536).tobytes()


def _packable(n: int, word: int, dim: int, seed: int) -> np.ndarray:
    """`n` words that mpc packs (every chunk below its raw size): `dim` interleaved slow
    ramps with small steps, so most zigzagged deltas are zero or short."""
    dt = np.uint32 if word == 4 else np.uint64
    rng = np.random.default_rng(seed)
    steps = rng.integers(0, 3, n) * (rng.random(n) < 0.3)
    lanes = np.arange(n) % dim
    out = np.zeros(n, np.uint64)
    for lane in range(dim):
        at = lanes == lane
        out[at] = 1000 * lane + np.cumsum(steps[at])
    return out.astype(dt)


@pytest.mark.parametrize("n", [0, 1, 31, 100, 1030, 1061])
@pytest.mark.parametrize("word", [4, 8])
@pytest.mark.parametrize("dim", [1, 3, 31, 32, 33, 70])
def test_mpc_kernels_match_rust(gpu_mods: Any, n: int, word: int, dim: int) -> None:
    """The device coder gives the Rust bytes and decodes its stream back, on raw-stored
    inputs (random bits, a smooth field, specials) and on packable ones, whose chunks take the packed path
    and its scan (dim below 32: shuffles along the chains; 32 and above: from the words
    already done), with partial last groups of 32 (n = 100, 1061)."""
    c = Mpc(dim=dim)
    dt = np.uint32 if word == 4 else np.uint64
    raw = [
        np.ascontiguousarray(v.view(np.uint32)[: n * word // 4]).view(dt) for v in _inputs(2 * n, n + dim)[:3]
    ]
    for x in [*raw, _packable(n, word, dim, n + dim)]:  # few inputs: the emulation is slow
        host = c.encode_raw(x)
        dev = gpu_mods.mpc.encode(_dev(x), word, dim)
        assert _bytes(dev) == host
        y = _dev(np.empty(n, dt))
        gpu_mods.mpc.decode(dev, y, word)
        assert _bytes(y) == x.tobytes()
    if n >= 100:
        assert len(c.encode_raw(x)) < 0.9 * x.nbytes, "the packable input must take the packed path"


def test_mpc_device_decoder_rejects_corrupt_streams(gpu_mods: Any) -> None:
    from shmcoll.errors import CodecError

    x = np.cumsum(np.ones(3000, np.uint32)).astype(np.uint32)
    s = bytearray(_core.mpc_encode(x, 4, 1))
    y = _dev(np.empty(3000, np.uint32))
    with pytest.raises(CodecError, match="table"):
        gpu_mods.mpc.decode(_dev(np.frombuffer(bytes(s[:-4]), np.uint8)), y, 4)
    bad = bytearray(s)
    bad[40] ^= 0x01  # a bitmap bit of chunk 0: its count no longer matches its length
    with pytest.raises(CodecError, match="bitmap"):
        gpu_mods.mpc.decode(_dev(np.frombuffer(bytes(bad), np.uint8)), y, 4)


def test_codec_classes_take_the_device_path(gpu_mods: Any) -> None:
    from shmcoll import gpu
    from shmcoll.codecs import fallback_calls

    assert gpu.available(), gpu.unavailable()
    before = dict(fallback_calls)
    x = np.cumsum(np.random.default_rng(9).standard_normal((30, 70)), axis=1).astype(np.float32)
    for c in (Bq(bits=4, block=64), Cast("float16"), Mpc(dim=2)):
        f = c.encode(_dev(x))
        assert isinstance(f, gpu_mods.cupy.ndarray) and _bytes(f) == c.encode(x)
        y = c.decode(f)
        assert isinstance(y, gpu_mods.cupy.ndarray) and y.shape == x.shape
        assert _bytes(y) == c.decode(c.encode(x)).tobytes()
        out = _dev(np.empty_like(x))
        assert c.decode_raw(c.encode_raw(_dev(x)), np.float32, x.size, out=out) is out
    assert fallback_calls == before, "a device call fell back to the host"


@pytest.mark.parametrize("offset", [1, 3, 4, 5])
def test_decoders_write_into_a_slice_at_any_element_offset(gpu_mods: Any, offset: int) -> None:
    """The collectives decode each rank's piece into a slice of the receive buffer, which
    starts on a 16-byte boundary only when the pieces before it happen to add up to one:
    the decoders take any element offset and give the host path's bytes (bq stores 16
    bytes at a time only where the slice allows: offset 4 of float32 does)."""
    n = 20  # float32 elements a piece: 80 bytes, whole groups of 8 and a partial one
    x = np.cumsum(np.random.default_rng(offset).standard_normal(n)).astype(np.float32)
    cases = [
        (Bq(bits=8, block=32), lambda f, y: gpu_mods.bq.decode(f, y, 8, 32), np.float32),
        (Cast("bfloat16"), lambda f, y: gpu_mods.cast.decode(f, y, "bfloat16"), np.float32),
        (Cast("float16"), lambda f, y: gpu_mods.cast.decode(f, y, "float16"), np.float64),
        (Mpc(dim=1), lambda f, y: gpu_mods.mpc.decode(f, y, y.dtype.itemsize), np.float32),
    ]
    for codec, decode, dt in cases:
        xi = x.astype(dt)
        stream = codec.encode_raw(xi)
        whole = _dev(np.zeros(n + 8, dt))
        piece = whole[offset : offset + n]
        aligned = offset * np.dtype(dt).itemsize % 16 == 0
        assert (piece.data.ptr % 16 == 0) == aligned, "the whole buffer starts on a 16-byte boundary"
        decode(_dev(np.frombuffer(stream, np.uint8)), piece.view(np.uint32 if isinstance(codec, Mpc) else dt))
        assert _bytes(piece) == codec.decode_raw(stream, dt, n).tobytes(), codec
        assert not np.asarray(whole)[:offset].any() and not np.asarray(whole)[offset + n :].any(), codec


def test_a_device_whose_kernels_do_not_compile_falls_back_to_the_host(
    emulated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver with devices but no NVRTC: the GPU path is not available (the kernels are
    compiled once to find out), and the codecs serve CuPy arrays on the host, same bytes,
    with one warning that says why."""
    from shmcoll.codecs import GpuFallbackWarning
    from shmcoll.gpu import kernels

    class NoCompiler:
        def compile(self) -> None:
            raise RuntimeError("libnvrtc.so.12: cannot open shared object file")

    monkeypatch.setattr(kernels, "load_module", lambda _name: NoCompiler())
    from shmcoll.codecs import base

    monkeypatch.setattr(base, "_warned", set())  # warned once per process: a fresh slate
    kernels.unavailable.cache_clear()
    try:
        why = kernels.unavailable()
        assert why is not None and "do not compile" in why and "nvrtc" in why.lower()
        assert not kernels.available()
        x = np.cumsum(np.ones(300, np.float32))
        c = Bq(bits=8, block=32)
        with pytest.warns(GpuFallbackWarning, match="do not compile"):
            dev = c.encode_raw(_dev(x))
        assert _bytes(dev) == c.encode_raw(x)
    finally:
        kernels.unavailable.cache_clear()
