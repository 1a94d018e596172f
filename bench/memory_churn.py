"""Allocator churn: allocate and free NumPy arrays of random sizes, touching each, and report
the process's peak resident memory, to compare the shared-array arena with NumPy's own
allocator (run it twice, once with SHMCOLL_SHARED_ARRAYS=0).

    python bench/memory_churn.py [--total-gib 10] [--live 24] [--seed 1]

Sizes are log-uniform from 4 KiB to 64 MiB (both sides of each of the arena's default
bounds); at most `--live` arrays are alive at once, a random one freed before each new one.
Prints one JSON line: peak_rss (bytes, getrusage), live_peak (the most bytes of arrays alive
at once), allocated (bytes), arrays, in_arena (arrays the arena served), seconds.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

import shmcoll


def churn(total: int, live: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    lo, hi = np.log2(4 << 10), np.log2(64 << 20)
    arrays: list[np.ndarray] = []
    allocated = count = in_arena = live_bytes = live_peak = 0
    t0 = time.perf_counter()
    while allocated < total:
        if len(arrays) >= live:
            live_bytes -= arrays.pop(int(rng.integers(len(arrays)))).nbytes
        n = int(2 ** rng.uniform(lo, hi)) // 8 * 8
        a = np.empty(n // 8)
        a.fill(float(count))  # touch every page, as real data would
        in_arena += shmcoll.in_shared_arena(a)
        arrays.append(a)
        live_bytes += a.nbytes
        live_peak = max(live_peak, live_bytes)
        allocated += n
        count += 1
    return {
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "live_peak": live_peak,
        "allocated": allocated,
        "arrays": count,
        "in_arena": in_arena,
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-gib", type=float, default=10.0)
    p.add_argument("--live", type=int, default=24)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print(json.dumps(churn(int(a.total_gib * (1 << 30)), a.live, a.seed)))


if __name__ == "__main__":
    main()
