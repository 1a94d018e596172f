"""Throughput of shmcoll's zfp (the Rust codec through shmcoll._core, single thread) against
zfpy 1.0.1 on the same 64 MiB inputs, rates 8 and 16, float32 and float64; checks the bytes
are identical first. GB/s of uncompressed data, medians of interleaved runs, timed in CPU
seconds of this process (robust on a shared machine) and in wall seconds.

    python bench/zfp_vs_zfpy.py [--mib 64] [--runs 5] [--data walk|noise]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import zfpy

from shmcoll import _core


def timed(f: Callable[[], object]) -> tuple[float, float]:
    c, w = time.process_time(), time.perf_counter()
    f()
    return time.process_time() - c, time.perf_counter() - w


def bench_case(a: np.ndarray, rate: int, runs: int) -> None:
    dt, n = a.dtype.type, a.size
    zt = zfpy.dtype_to_ztype(a.dtype)
    ref = zfpy.compress_numpy(a, rate=rate, write_header=False)
    assert _core.zfp_encode(a, rate) == ref, "streams differ"
    back = zfpy._decompress(ref, zt, [n], rate=rate)
    assert _core.zfp_decode(ref, a.dtype.name, n, rate).tobytes() == back.tobytes(), "decodes differ"
    out = np.empty_like(a)
    sbuf = bytearray(len(ref))
    jobs: dict[str, Callable[[], object]] = {
        "ze": lambda: zfpy.compress_numpy(a, rate=rate, write_header=False),
        "se": lambda: _core.zfp_encode(a, rate, sbuf),
        "zd": lambda: zfpy._decompress(ref, zt, [n], rate=rate),
        "sd": lambda: _core.zfp_decode(ref, a.dtype.name, n, rate, out),
    }
    t: dict[str, list[tuple[float, float]]] = {k: [] for k in jobs}
    for _ in range(runs):
        for k, job in jobs.items():
            t[k].append(timed(job))
    gb = a.nbytes / 1e9
    cpu = {k: gb / statistics.median(x[0] for x in v) for k, v in t.items()}
    wall = {k: gb / statistics.median(x[1] for x in v) for k, v in t.items()}
    cells = {k: f"{cpu[k]:7.3f} ({wall[k]:6.3f})" for k in jobs}
    print(
        f"{np.dtype(dt).name + ' rate ' + str(rate):<16}{cells['ze']:>18}{cells['se']:>18}"
        f"{cpu['se'] / cpu['ze']:6.1f}{cells['zd']:>18}{cells['sd']:>18}{cpu['sd'] / cpu['zd']:6.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--data", choices=["walk", "noise"], default="walk")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n64 = (args.mib << 20) // 8
    base = rng.standard_normal(2 * n64)
    print(f"{args.mib} MiB, {args.data}, median of {args.runs}, GB/s by CPU time (by wall time)")
    print(f"{'case':<16}{'zfpy enc':>18}{'ours enc':>18}{'x':>6}{'zfpy dec':>18}{'ours dec':>18}{'x':>6}")
    for dt in (np.float32, np.float64):
        n = (args.mib << 20) // np.dtype(dt).itemsize
        a = (np.cumsum(base[:n]) if args.data == "walk" else base[:n]).astype(dt)
        for rate in (8, 16):
            bench_case(a, rate, args.runs)


if __name__ == "__main__":
    main()
