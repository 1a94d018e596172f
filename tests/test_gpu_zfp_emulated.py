"""The GPU wrapper of zfp (shmcoll/gpu/zfp.py) run end to end without a GPU: the very
kernels of cuda/zfp.cu compiled with g++ against tests/cuda_emu/shim.h (each CUDA thread an
OS thread), driven through the CuPy stand-in of tests/cuda_emu (the ``emulated`` fixture of
conftest.py). The wrapper's launch geometry, argument packing, extents and output handling
give the Rust codec's bytes and values (which are zfpy's), 1-D and N-D, odd sizes, into
slices at any offset, and through the Zfp codec class's device path.
tests/test_gpu_zfp.py checks the same on a device when one is lent."""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np
import pytest

from shmcoll import _core
from shmcoll.codecs import Zfp
from shmcoll.errors import CodecError


def _dev(a: Any) -> Any:
    """`a` as a device array of the installed stand-in (a view: no copy)."""
    import cupy  # the stand-in  # type: ignore[import-not-found]

    return np.asarray(a).view(cupy.ndarray)


@pytest.fixture
def gpu_zfp(emulated: Any) -> types.SimpleNamespace:
    """shmcoll.gpu.zfp's encode and decode over the emulation, its device array type, and
    `launches()`: the kernel launches since the fixture began."""
    from shmcoll.gpu import zfp

    first = len(emulated.launches)
    return types.SimpleNamespace(
        encode=zfp.encode,
        decode=zfp.decode,
        ndarray=emulated.ndarray,
        launches=lambda: emulated.launches[first:],
    )


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
            assert isinstance(got, gpu_zfp.ndarray) and got.dtype == np.uint8
            assert bytes(got) == want, f"encode {shape} rate {rate}"
            back = gpu_zfp.decode(
                _dev(np.frombuffer(want, np.uint8)), dt, shape if len(shape) > 1 else shape[0], rate
            )
            assert back.shape == shape
            ref = _core.zfp_decode(want, np.dtype(dt).name, shape, rate)
            assert back.tobytes() == ref.tobytes(), f"decode {shape} rate {rate}"
    launches = gpu_zfp.launches()
    # Whole warps, and just enough blocks for one decoder thread per zfp block.
    assert all(launch.block % 32 == 0 for launch in launches), launches
    blocks = math.prod((v + 3) // 4 for v in shape)
    for launch in (la for la in launches if "decode" in la.name):
        assert (launch.grid - 1) * launch.block < blocks <= launch.grid * launch.block, launch
    names = {launch.name for launch in launches}
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


def test_codec_class_takes_the_device_path(gpu_zfp: Any) -> None:
    from shmcoll import gpu

    assert gpu.available(), gpu.unavailable()
    z = Zfp(12)
    for shape in [(37,), (5, 7), (3, 5, 6), (2, 3, 5, 7), (2, 2, 1, 3, 5)]:
        a = np.cumsum(np.random.default_rng(1).standard_normal(shape), axis=-1).astype(np.float64)
        host = z.encode_raw(a)
        dev = z.encode_raw(_dev(a))
        assert isinstance(dev, gpu_zfp.ndarray) and bytes(dev) == host
        frame = z.encode(_dev(a))
        assert bytes(frame) == z.encode(a)
        back = z.decode(frame)
        assert isinstance(back, gpu_zfp.ndarray) and back.shape == shape
        assert back.tobytes() == z.decode(z.encode(a)).tobytes()
        raw = z.decode_raw(_dev(np.frombuffer(host, np.uint8)), np.float64, shape)
        assert raw.shape == shape and raw.tobytes() == back.tobytes()
    assert any(launch.name.startswith("zfp_encode_nd") for launch in gpu_zfp.launches())
