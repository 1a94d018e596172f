"""The GPU wrapper of zfp (shmcoll/gpu/zfp.py) run end to end without a GPU: the very
kernels of cuda/zfp.cu compiled with g++ against tests/cuda_emu/shim.h (each CUDA thread an
OS thread), driven through a NumPy-backed stand-in for CuPy. The wrapper's launch geometry,
argument packing, extents and output handling give the Rust codec's bytes and values (which
are zfpy's), 1-D and N-D, odd sizes, into slices at any offset, and through the Zfp codec
class's device path. tests/test_gpu_zfp.py checks the same on a device when one is lent."""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess
import sys
import types
from typing import Any

import numpy as np
import pytest

from shmcoll import _core
from shmcoll.codecs import Zfp
from shmcoll.errors import CodecError

ROOT = pathlib.Path(__file__).resolve().parent.parent

if shutil.which("g++") is None:
    pytest.skip("needs g++ to build the CPU emulation of the kernels", allow_module_level=True)


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    lib = tmp_path_factory.mktemp("emu_zfp") / "libemu_zfp.so"
    cmd = [
        "g++", "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-shared", "-fPIC",
        "-I", str(ROOT / "tests" / "cuda_emu"), "-I", str(ROOT / "cuda"),
        str(ROOT / "tests" / "cuda_emu" / "zfp_driver.cpp"), "-o", str(lib),
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(lib))


class DeviceArray(np.ndarray):
    """A stand-in for cupy.ndarray (its type's module is named cupy)."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def set(self, host: np.ndarray) -> None:
        self[...] = host


DeviceArray.__module__ = "cupy._core.core"


def _dev(a: Any) -> DeviceArray:
    return np.asarray(a).view(DeviceArray)


def _fake_cupy() -> types.ModuleType:
    m = types.ModuleType("cupy")
    m.ndarray = DeviceArray  # type: ignore[attr-defined]
    m.asarray = lambda a: _dev(np.asarray(a))  # type: ignore[attr-defined]
    m.ascontiguousarray = lambda a: _dev(np.ascontiguousarray(a))  # type: ignore[attr-defined]
    m.asnumpy = lambda a: np.array(a).view(np.ndarray)  # type: ignore[attr-defined]
    m.empty = lambda n, dt: _dev(np.empty(n, dt))  # type: ignore[attr-defined]
    m.concatenate = lambda xs: _dev(np.concatenate([np.asarray(x) for x in xs]))  # type: ignore[attr-defined]
    m.uint8 = np.uint8  # type: ignore[attr-defined]
    m.uint64 = np.uint64  # type: ignore[attr-defined]
    return m


_SCALARS = {np.uint64: ctypes.c_uint64, np.uint32: ctypes.c_uint32}


class _Module:
    """What load_module returns: get_function(name)(grid, block, args) runs the CPU build,
    after checking the launch covers the kernel's threads with whole warps."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.launches: list[tuple[str, int, int]] = []

    def get_function(self, name: str) -> Any:
        def launch(grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
            held: list[Any] = []
            for a in args:
                if isinstance(a, np.ndarray):
                    held.append(ctypes.c_void_p(a.ctypes.data))
                elif type(a) in _SCALARS:
                    held.append(_SCALARS[type(a)](int(a)))
                else:
                    raise TypeError(f"kernel argument of type {type(a).__name__}")
            ptrs = (ctypes.c_void_p * len(held))(*[ctypes.addressof(h) for h in held])
            self.launches.append((name, grid[0], block[0]))
            rc = self.lib.emu_zfp_run(name.encode(), ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), ptrs)
            assert rc == 0, f"no kernel {name} in the emulation"

        return launch


@pytest.fixture
def gpu_zfp(emu: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    from shmcoll.gpu import zfp

    module = _Module(emu)
    monkeypatch.setattr(zfp, "load_module", lambda _name: module)
    zfp.emulated = module  # type: ignore[attr-defined]
    return zfp


def _arrays(shape: tuple[int, ...], dt: type, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    rough = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
    smooth = np.cumsum(rng.standard_normal(n)) + 40.0
    special = smooth.copy()
    marks = [np.nan, np.inf, -np.inf, 0.0, -0.0, np.finfo(dt).max, np.finfo(dt).smallest_subnormal]
    special[::5] = np.resize(marks, special[::5].size)
    return [a.astype(dt).reshape(shape) for a in (rough, smooth, special)]


SHAPES = [(1,), (7,), (1001,), (5, 7), (1, 9), (9, 1), (3, 5, 6), (2, 3, 5, 7), (40, 33)]


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_wrapper_matches_rust(gpu_zfp: Any, dt: type, shape: tuple[int, ...]) -> None:
    lowest = (3 if dt is np.float32 else 4) if len(shape) == 1 else 1
    for rate in [lowest, 8, 13, 32] + ([64] if dt is np.float64 else []):
        for a in _arrays(shape, dt, rate):
            want = _core.zfp_encode(a, rate, shape=shape)
            got = gpu_zfp.encode(_dev(a), rate)
            assert isinstance(got, DeviceArray) and got.dtype == np.uint8
            assert bytes(got) == want, f"encode {shape} rate {rate}"
            back = gpu_zfp.decode(
                _dev(np.frombuffer(want, np.uint8)), dt, shape if len(shape) > 1 else shape[0], rate
            )
            assert back.shape == shape
            ref = _core.zfp_decode(want, np.dtype(dt).name, shape, rate)
            assert back.tobytes() == ref.tobytes(), f"decode {shape} rate {rate}"
    names = {name for name, _, _ in gpu_zfp.emulated.launches}
    assert names == (
        {
            f"zfp_encode_{'f32' if dt is np.float32 else 'f64'}",
            f"zfp_decode_{'f32' if dt is np.float32 else 'f64'}",
        }
        if len(shape) == 1
        else {
            f"zfp_encode_nd_{'f32' if dt is np.float32 else 'f64'}",
            f"zfp_decode_nd_{'f32' if dt is np.float32 else 'f64'}",
        }
    )


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_decode_into_a_slice_at_any_offset(gpu_zfp: Any, offset: int) -> None:
    a = np.cumsum(np.random.default_rng(9).standard_normal((6, 11)), axis=1).astype(np.float32)
    stream = _core.zfp_encode(a, 9, shape=a.shape)
    # A stream at a word-aligned offset into a larger buffer, an output in the middle of one.
    buf = _dev(np.zeros(len(stream) + 16, np.uint8))
    buf[8 : 8 + len(stream)] = np.frombuffer(stream, np.uint8)
    big = _dev(np.full(a.size + 5, -1.0, np.float32))
    out = big[offset : offset + a.size]
    assert gpu_zfp.decode(buf[8:], np.float32, a.shape, 9, out) is out
    assert out.tobytes() == _core.zfp_decode(stream, "float32", a.shape, 9).tobytes()
    assert (np.asarray(big[:offset]) == -1).all() and (np.asarray(big[offset + a.size :]) == -1).all()
    # Encoding into a caller's buffer: exactly the stream, a view of it.
    dst = _dev(np.zeros(len(stream) + 24, np.uint8))
    got = gpu_zfp.encode(_dev(a), 9, dst)
    assert bytes(got) == stream and got.ctypes.data == dst.ctypes.data


def test_wrapper_refuses_bad_arguments(gpu_zfp: Any) -> None:
    x = _dev(np.ones((4, 5), np.float32))
    bad = [
        lambda: gpu_zfp.encode(np.ones(8, np.float32), 8),  # a host array
        lambda: gpu_zfp.encode(_dev(np.ones((4, 6), np.float32))[:, ::2], 8),  # not contiguous
        lambda: gpu_zfp.encode(_dev(np.ones((1, 1, 1, 1, 2), np.float32)), 8),  # 5 axes
        lambda: gpu_zfp.encode(x, 0),
        lambda: gpu_zfp.encode(x.astype(np.float16), 8),
        lambda: gpu_zfp.encode(x, 8, _dev(np.zeros(8, np.uint8))),  # too small
        lambda: gpu_zfp.decode(_dev(np.zeros(8, np.uint8)), np.float32, (4, 5), 8),  # too short
        lambda: gpu_zfp.decode(
            _dev(np.zeros(64, np.uint8)), np.float32, (4, 5), 8, _dev(np.zeros(19, np.float32))
        ),
        lambda: gpu_zfp.decode(_dev(np.zeros(64, np.uint8)), np.float32, (4, -5), 8),
    ]
    for i, call in enumerate(bad):
        with pytest.raises(CodecError):
            call()
            pytest.fail(f"bad call {i} was accepted")


def test_codec_class_takes_the_device_path(gpu_zfp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from shmcoll import gpu

    monkeypatch.setattr(gpu, "available", lambda: True)
    z = Zfp(12)
    for shape in [(37,), (5, 7), (3, 5, 6), (2, 3, 5, 7), (2, 2, 1, 3, 5)]:
        a = np.cumsum(np.random.default_rng(1).standard_normal(shape), axis=-1).astype(np.float64)
        host = z.encode_raw(a)
        dev = z.encode_raw(_dev(a))
        assert isinstance(dev, DeviceArray) and bytes(dev) == host
        frame = z.encode(_dev(a))
        assert bytes(frame) == z.encode(a)
        back = z.decode(frame)
        assert isinstance(back, DeviceArray) and back.shape == shape
        assert back.tobytes() == z.decode(z.encode(a)).tobytes()
        raw = z.decode_raw(_dev(np.frombuffer(host, np.uint8)), np.float64, shape)
        assert raw.shape == shape and raw.tobytes() == back.tobytes()
    assert any(name.startswith("zfp_encode_nd") for name, _, _ in gpu_zfp.emulated.launches)
