"""The CUDA twin of the zfp codec (cuda/zfp.cu), checked without a GPU: the
same source compiled as C++ by g++ (CUDA builtins shimmed, the launch grid emulated thread
by thread, undefined behaviour trapped by UBSan where available) must write the bytes of the
Rust codec and decode any stream to the same bits. Skips without g++."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from shmcoll import _core
from shmcoll.gpu import kernel_source

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not available")

HARNESS = r"""
#define ZFP_HOST 1
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
struct ZfpDim { unsigned x; };
static ZfpDim blockIdx, blockDim, threadIdx;
#define __global__
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
#include "zfp.cu"

static std::vector<unsigned char> slurp(const char* path) {
    FILE* f = std::fopen(path, "rb");
    std::vector<unsigned char> b;
    int c;
    while ((c = std::fgetc(f)) != EOF) b.push_back((unsigned char)c);
    std::fclose(f);
    return b;
}

// Run `threads` threads of a 1-D launch with blocks of `bdim` threads.
template <class K>
static void launch(unsigned long long threads, unsigned bdim, K kernel) {
    blockDim.x = bdim;
    unsigned long long grid = (threads + bdim - 1) / bdim;
    for (unsigned long long g = 0; g < grid; g++)
        for (unsigned t = 0; t < bdim; t++) {
            blockIdx.x = (unsigned)g;
            threadIdx.x = t;
            kernel();
        }
}

// usage: harness enc|dec f32|f64 rate shape blockdim in out
// (shape: n for a 1-D array, or AxB[xC[xD]] in C order for the N-D kernels)
int main(int argc, char** argv) {
    if (argc != 8) return 2;
    const bool enc = argv[1][0] == 'e', f64 = argv[2][1] == '6';
    const unsigned rate = (unsigned)std::atoi(argv[3]);
    unsigned long long c_shape[4];
    unsigned dims = 0;
    for (char* p = argv[4]; dims < 4; p++) {
        c_shape[dims++] = std::strtoull(p, &p, 10);
        if (*p != 'x') break;
    }
    const unsigned bdim = (unsigned)std::atoi(argv[5]);
    std::vector<unsigned char> in = slurp(argv[6]);
    std::vector<unsigned char> out;
    if (dims > 1) {
        // zfp's order: x is the last C axis; absent axes are 1.
        unsigned long long ext[4] = {1, 1, 1, 1}, n = 1;
        for (unsigned a = 0; a < dims; a++) {
            ext[a] = c_shape[dims - 1 - a];
            n *= ext[a];
        }
        const ZfpExt e = zfp_ext(ext[0], ext[1], ext[2], ext[3], dims);
        const zu64 nx = ext[0], ny = ext[1], nz = ext[2], nw = ext[3];
        const unsigned long long nb = block_count(e);
        const unsigned long long words = (nb * (1ull << (2 * dims)) * rate + 63) / 64;
        if (enc) {
            out.assign(words * 8, 0xa5);
            zu64* s = (zu64*)out.data();
            const unsigned long long g = group_blocks(dims, rate);
            const unsigned long long threads = (nb + g - 1) / g;
            const void* src = in.data();
            const unsigned r = rate;
            const double* s64 = (const double*)src;
            const float* s32 = (const float*)src;
            if (f64) launch(threads, bdim, [&] { zfp_encode_nd_f64(s64, nx, ny, nz, nw, dims, r, s); });
            else launch(threads, bdim, [&] { zfp_encode_nd_f32(s32, nx, ny, nz, nw, dims, r, s); });
        } else {
            out.assign(n * (f64 ? 8 : 4), 0xff);
            const zu64* s = (const zu64*)in.data();
            void* dst = out.data();
            const unsigned r = rate;
            if (f64) launch(nb, bdim, [&] { zfp_decode_nd_f64(s, nx, ny, nz, nw, dims, r, (double*)dst); });
            else launch(nb, bdim, [&] { zfp_decode_nd_f32(s, nx, ny, nz, nw, dims, r, (float*)dst); });
        }
        FILE* f = std::fopen(argv[7], "wb");
        std::fwrite(out.data(), 1, out.size(), f);
        std::fclose(f);
        return 0;
    }
    const unsigned long long n = c_shape[0];
    const unsigned long long nb = (n + 3) / 4;
    const unsigned long long words = (nb * 4 * rate + 63) / 64;
    if (enc) {
        // Garbage first: every word of the stream must be written by some thread.
        out.assign(words * 8, 0xa5);
        zu64* s = (zu64*)out.data();
        const unsigned long long threads = (nb + group_blocks(1, rate) - 1) / group_blocks(1, rate);
        if (f64) launch(threads, bdim, [&] { zfp_encode_f64((const double*)in.data(), n, rate, s); });
        else launch(threads, bdim, [&] { zfp_encode_f32((const float*)in.data(), n, rate, s); });
    } else {
        out.assign(n * (f64 ? 8 : 4), 0xff);
        const zu64* s = (const zu64*)in.data();
        if (f64) launch(nb, bdim, [&] { zfp_decode_f64(s, n, rate, (double*)out.data()); });
        else launch(nb, bdim, [&] { zfp_decode_f32(s, n, rate, (float*)out.data()); });
    }
    FILE* f = std::fopen(argv[7], "wb");
    std::fwrite(out.data(), 1, out.size(), f);
    std::fclose(f);
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("zfp_cuda_host")
    (d / "zfp.cu").write_text(kernel_source("zfp"))
    (d / "harness.cpp").write_text(HARNESS)
    base = [GXX or "g++", "-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wno-unknown-pragmas"]
    exe = d / "harness"
    for extra in (["-fsanitize=undefined", "-fno-sanitize-recover=all"], []):
        r = subprocess.run(
            [*base, *extra, "-o", str(exe), str(d / "harness.cpp")],
            check=False,
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            assert "warning" not in r.stderr, r.stderr
            return exe
    pytest.fail(f"zfp.cu does not compile as C++:\n{r.stderr}")


def run(
    exe: Path, mode: str, dt: type, rate: int, n: int | tuple[int, ...], data: bytes, bdim: int = 7
) -> bytes:
    """Run the kernels on `n` values (1-D) or an array of shape `n` (the N-D kernels)."""
    d = exe.parent
    (d / "in.bin").write_bytes(data)
    tag = "f32" if dt is np.float32 else "f64"
    shape = str(n) if isinstance(n, int) else "x".join(map(str, n))
    subprocess.run(
        [str(exe), mode, tag, str(rate), shape, str(bdim), str(d / "in.bin"), str(d / "out.bin")],
        check=True,
        timeout=60,
    )
    return (d / "out.bin").read_bytes()


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
def test_cuda_source_matches_rust(harness: Path, dt: type) -> None:
    rng = np.random.default_rng(11)
    rates = list(range(3, 33)) if dt is np.float32 else [4, 5, 7, 8, 12, 16, 23, 32, 48, 61, 64]
    checked = 0
    for rate in rates:
        n = int(rng.choice([1, 2, 3, 4, 5, 63, 130, 1001]))
        for a in arrays(dt, n, rng):
            stream = _core.zfp_encode(a, rate)
            assert run(harness, "enc", dt, rate, n, a.tobytes()) == stream, f"encode rate {rate} n {n}"
            want = _core.zfp_decode(stream, np.dtype(dt).name, n, rate).tobytes()
            assert run(harness, "dec", dt, rate, n, stream) == want, f"decode rate {rate} n {n}"
            checked += 1
        # Any stream decodes the same, written by an encoder or not.
        junk = rng.integers(0, 256, len(stream), dtype=np.uint8).tobytes()
        want = _core.zfp_decode(junk, np.dtype(dt).name, n, rate).tobytes()
        assert run(harness, "dec", dt, rate, n, junk) == want, f"decode of junk, rate {rate}"
    assert checked >= 40


def test_launch_geometry_does_not_matter(harness: Path) -> None:
    a = np.cumsum(np.random.default_rng(5).standard_normal(777)).astype(np.float32)
    for rate in (3, 8, 16, 27):
        want = _core.zfp_encode(a, rate)
        for bdim in (1, 32, 256):
            assert run(harness, "enc", np.float32, rate, a.size, a.tobytes(), bdim) == want


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_cuda_nd_kernels_match_rust(harness: Path, dt: type) -> None:
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
                assert run(harness, "enc", dt, rate, shape, a.tobytes()) == stream, (
                    f"encode {shape} rate {rate}"
                )
                want = _core.zfp_decode(stream, np.dtype(dt).name, shape, rate).tobytes()
                assert run(harness, "dec", dt, rate, shape, stream) == want, f"decode {shape} rate {rate}"
                checked += 1
            junk = rng.integers(0, 256, len(stream), dtype=np.uint8).tobytes()
            want = _core.zfp_decode(junk, np.dtype(dt).name, shape, rate).tobytes()
            assert run(harness, "dec", dt, rate, shape, junk) == want, f"decode of junk {shape} rate {rate}"
    assert checked >= 250


def test_nd_launch_geometry_does_not_matter(harness: Path) -> None:
    a = np.cumsum(np.random.default_rng(6).standard_normal((13, 22)), axis=1).astype(np.float32)
    for rate in (1, 3, 6, 16):
        want = _core.zfp_encode(a, rate, shape=a.shape)
        for bdim in (1, 3, 256):
            assert run(harness, "enc", np.float32, rate, a.shape, a.tobytes(), bdim) == want
