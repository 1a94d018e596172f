"""The CUDA twin of the zfp codec (cuda/zfp.cu), checked without a GPU: the kernels of the
CPU emulation of cuda/ (tests/cuda_emu, built with UBSan where the compiler has it),
launched directly at odd block sizes (1, 3, 7 threads) as well as whole warps, must write
the bytes of the Rust codec, leave no word of the stream unwritten, and decode any stream
to the same bits; a kernel's undefined behaviour fails the test. Skips without g++.
tests/test_gpu_zfp_emulated.py drives the same kernels through the wrapper of shmcoll.gpu."""

from __future__ import annotations

import math
import pathlib
import shutil
import subprocess
from typing import Any

import numpy as np
import pytest

from cuda_emu.emulation import HERE as HERE_EMU
from cuda_emu.emulation import UBSAN
from shmcoll import _core
from shmcoll.gpu.zfp import group_blocks

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not available")


class Kernels:
    """zfp's kernels of the emulation, launched at a chosen block size as on a device."""

    def __init__(self, cupy: Any) -> None:
        self.module = cupy.RawModule()

    def run(
        self, mode: str, dt: type, rate: int, n: int | tuple[int, ...], data: bytes, bdim: int = 7
    ) -> bytes:
        """Encode (`mode` "enc") or decode ("dec") `n` values (1-D kernels) or an array of
        shape `n` (N-D kernels) from `data`; the output's bytes. The output starts as
        garbage: every word the kernels should write must be written."""
        shape = (n,) if isinstance(n, int) else tuple(n)
        dims = len(shape)
        kind = "f32" if dt is np.float32 else "f64"
        blocks = math.prod((v + 3) // 4 for v in shape)
        nd = "nd_" if dims > 1 else ""
        # zfp's order: x is the last C axis; absent axes are 1.
        extents = [np.uint64(v) for v in [*reversed(shape), 1, 1, 1][:4]]
        geometry = (np.uint64(n),) if dims == 1 else (*extents, np.uint32(dims))
        if mode == "enc":
            words = (blocks * 4**dims * rate + 63) // 64
            out = np.full(words * 8, 0xA5, np.uint8)
            threads = (blocks + group_blocks(rate, dims) - 1) // group_blocks(rate, dims)
            args = (np.frombuffer(data, dt).copy(), *geometry, np.uint32(rate), out.view(np.uint64))
        else:
            out = np.full(math.prod(shape) * np.dtype(dt).itemsize, 0xFF, np.uint8)
            threads = blocks
            args = (np.frombuffer(data, np.uint64).copy(), *geometry, np.uint32(rate), out.view(dt))
        fn = self.module.get_function(f"zfp_{'encode' if mode == 'enc' else 'decode'}_{nd}{kind}")
        fn(((threads + bdim - 1) // bdim,), (bdim,), args)
        return out.tobytes()


@pytest.fixture
def kernels(sanitized_kernels: Any) -> Kernels:
    return Kernels(sanitized_kernels)


def arrays(dt: type, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    fi = np.finfo(dt)
    mixed = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
    mixed[rng.random(n) < 0.2] = 0.0
    special = rng.choice(
        [0.0, -0.0, fi.max, -fi.max, fi.smallest_subnormal, fi.tiny, np.nan, np.inf, -np.inf, 1.0], n
    )
    tiny = rng.integers(-1000, 1000, n) * fi.smallest_subnormal
    smooth = np.cumsum(rng.standard_normal(n)) + 50.0
    return [a.astype(dt) for a in (mixed, special, tiny, smooth)]


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_cuda_source_matches_rust(kernels: Kernels, dt: type) -> None:
    rng = np.random.default_rng(11)
    rates = list(range(3, 33)) if dt is np.float32 else [4, 5, 7, 8, 12, 16, 23, 32, 48, 61, 64]
    checked = 0
    for rate in rates:
        n = int(rng.choice([1, 2, 3, 4, 5, 63, 130, 1001]))
        for a in arrays(dt, n, rng):
            stream = _core.zfp_encode(a, rate)
            assert kernels.run("enc", dt, rate, n, a.tobytes()) == stream, f"encode rate {rate} n {n}"
            want = _core.zfp_decode(stream, np.dtype(dt).name, n, rate).tobytes()
            assert kernels.run("dec", dt, rate, n, stream) == want, f"decode rate {rate} n {n}"
            checked += 1
        # Any stream decodes the same, written by an encoder or not.
        junk = rng.integers(0, 256, len(stream), dtype=np.uint8).tobytes()
        want = _core.zfp_decode(junk, np.dtype(dt).name, n, rate).tobytes()
        assert kernels.run("dec", dt, rate, n, junk) == want, f"decode of junk, rate {rate}"
    assert checked >= 40


def planes_corpus(dt: type, n: int, rng: np.random.Generator) -> np.ndarray:
    """Blocks whose coefficients become significant at every plane and in every order: one
    value per block dominating by 2^0 .. 2^40, the others noise, signs mixed, some blocks
    constant (a single significant coefficient for many planes)."""
    blocks = n // 4
    v = rng.standard_normal((blocks, 4))
    big = rng.integers(0, 4, blocks)
    v[np.arange(blocks), big] *= 2.0 ** rng.integers(0, 41, blocks)
    v[rng.random(blocks) < 0.1] = rng.standard_normal((1, 1))
    return v.reshape(-1).astype(dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_every_plane_code_and_budget_cut(kernels: Kernels, dt: type) -> None:
    """The 1-D kernels code each plane whole, runs of quiet planes in one write, and the
    planes after all four coefficients are significant eight at a time: every rate cuts the
    budget at another place inside a plane's code or such a run, on blocks reaching every
    significance order."""
    rng = np.random.default_rng(13)
    rates = range(3, 33) if dt is np.float32 else range(4, 65, 3)
    for rate in rates:
        a = planes_corpus(dt, 1024, rng)
        stream = _core.zfp_encode(a, rate)
        assert kernels.run("enc", dt, rate, a.size, a.tobytes(), 64) == stream, f"encode rate {rate}"
        want = _core.zfp_decode(stream, np.dtype(dt).name, a.size, rate).tobytes()
        assert kernels.run("dec", dt, rate, a.size, stream, 64) == want, f"decode rate {rate}"


def test_plane_coders_write_zfps_bits_at_every_budget(tmp_path: pathlib.Path) -> None:
    """The plane coders of cuda/zfp.cu against zfp's bit-at-a-time loops
    (tests/cuda_emu/zfp_planes.cpp). 1-D: every budget from 1 bit to a float's largest, so
    the budget ends at every place inside a plane's code, a quiet run and an
    all-significant run, on every combination of four coefficients from a set of bit
    patterns and on random ones. N-D (16, 64, 256 coefficients): random sets at every
    budget up to 600 bits and beyond in steps. Each stream is decoded with several lowest
    planes; under UBSan where the compiler has it."""
    src = HERE_EMU / "zfp_planes.cpp"
    exe = tmp_path / "zfp_planes"
    base = ["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-Wall", "-Wno-unknown-pragmas"]
    paths = ["-I", str(HERE_EMU), "-I", str(HERE_EMU.parent.parent / "cuda"), str(src), "-o", str(exe)]
    for flags in (UBSAN, []):
        built = subprocess.run([*base, *flags, *paths], capture_output=True, text=True, check=False)
        if built.returncode == 0:
            break
    assert built.returncode == 0 and "warning" not in built.stderr, built.stderr
    ran = subprocess.run([str(exe)], capture_output=True, text=True, check=False, timeout=120)
    assert "runtime error" not in ran.stderr, ran.stderr
    assert ran.returncode == 0, ran.stdout
    lines = ran.stdout.splitlines()
    assert len(lines) == 8 and all(line.endswith(" 0 differences") for line in lines), ran.stdout


def test_launch_geometry_does_not_matter(kernels: Kernels) -> None:
    a = np.cumsum(np.random.default_rng(5).standard_normal(777)).astype(np.float32)
    for rate in (3, 8, 16, 27):
        want = _core.zfp_encode(a, rate)
        for bdim in (1, 32, 256):
            assert kernels.run("enc", np.float32, rate, a.size, a.tobytes(), bdim) == want


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_cuda_nd_kernels_match_rust(kernels: Kernels, dt: type) -> None:
    """The N-D kernels (blocks of 4^d values) write the Rust codec's bytes, which are
    zfpy's, for odd shapes with partial blocks, and decode any stream to the same bits."""
    rng = np.random.default_rng(12)
    shapes = [(5, 7), (1, 9), (9, 1), (8, 4), (3, 5, 6), (4, 4, 4), (2, 3, 5, 7), (1, 5, 1, 6)]
    rates = [1, 2, 3, 5, 8, 13, 16, 31, 32] + ([41, 64] if dt is np.float64 else [])
    checked = 0
    for shape in shapes:
        n = int(np.prod(shape))
        for rate in rates:
            for flat in arrays(dt, n, rng):
                a = flat.reshape(shape)
                stream = _core.zfp_encode(a, rate, shape=shape)
                assert kernels.run("enc", dt, rate, shape, a.tobytes()) == stream, (
                    f"encode {shape} rate {rate}"
                )
                want = _core.zfp_decode(stream, np.dtype(dt).name, shape, rate).tobytes()
                assert kernels.run("dec", dt, rate, shape, stream) == want, f"decode {shape} rate {rate}"
                checked += 1
            junk = rng.integers(0, 256, len(stream), dtype=np.uint8).tobytes()
            want = _core.zfp_decode(junk, np.dtype(dt).name, shape, rate).tobytes()
            assert kernels.run("dec", dt, rate, shape, junk) == want, f"decode of junk {shape} rate {rate}"
    assert checked >= 250


def test_nd_launch_geometry_does_not_matter(kernels: Kernels) -> None:
    a = np.cumsum(np.random.default_rng(6).standard_normal((13, 22)), axis=1).astype(np.float32)
    for rate in (1, 3, 6, 16):
        want = _core.zfp_encode(a, rate, shape=a.shape)
        for bdim in (1, 3, 256):
            assert kernels.run("enc", np.float32, rate, a.shape, a.tobytes(), bdim) == want


def test_kernel_cost_proxy_builds_and_measures(tmp_path: pathlib.Path) -> None:
    """bench/zfp_kernel_cost.sh's program (bench/cuda_proxy) builds against this tree's
    cuda/zfp.cu, plain and with the coverage instrumentation, and its SIMT mode gives an
    efficiency in (0, 1] for the 1-D and a 3-D encoder and decoder (the instruction counts
    need valgrind, which CI does not install: the script itself is not run here)."""
    proxy = HERE_EMU.parent.parent / "bench" / "cuda_proxy"
    zfp = HERE_EMU.parent.parent / "cuda" / "zfp.cu"
    flags = ["-std=c++20", "-O1", "-ffp-contract=off", "-I", str(HERE_EMU), f'-DZFP_SRC="{zfp}"']

    def run(*cmd: str) -> str:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cov, cost, simt = tmp_path / "cov.o", tmp_path / "cost", tmp_path / "simt"
    run("g++", *flags, str(proxy / "zfp_cost.cpp"), "-o", str(cost))
    run("g++", "-std=c++20", "-O1", "-c", str(proxy / "cov.cpp"), "-o", str(cov))
    cover = "-fsanitize-coverage=trace-pc"
    run("g++", *flags, cover, str(proxy / "zfp_cost.cpp"), str(cov), "-o", str(simt))
    run(str(cost), "1", "16", "0", "b", "2")
    for dims in ("1", "3"):
        for mode in ("se", "sd"):
            assert 0 < float(run(str(simt), dims, "16", "0", mode, "2")) <= 1
