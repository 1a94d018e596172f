"""What the shared-array arena costs NumPy code that does not communicate: element-wise
work on arena pages (4 KiB pages of a memfd) against NumPy's own (transparent huge pages
from 4 MiB), allocation, and fork with live arena arrays.

    python bench/shared_arrays_cost.py

Prints a markdown table: median µs per `np.add(a, b, out=c)` and per `a + b` (allocating),
on private arrays and on arena arrays (``shared_arrays(max_bytes=...)`` puts arrays of every
size there), the ratio, and fork's time with that much live data in the arena.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

import shmcoll


def median_us(f: Callable[[], object], reps: int) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e6


def fork_us(reps: int = 5) -> float:
    def one() -> None:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    return median_us(one, reps)


def row(mib: float) -> str:
    n = int(mib * (1 << 20)) // 8
    reps = 300 if mib <= 1 else 60
    with shmcoll.private_arrays():
        a, b, c = np.ones(n), np.ones(n), np.empty(n)
        p_out = median_us(lambda: np.add(a, b, out=c), reps)
        p_new = median_us(lambda: a + b, reps)
    with shmcoll.shared_arrays(max_bytes=1 << 40):
        sa, sb, sc = np.ones(n), np.ones(n), np.empty(n)
        s_out = median_us(lambda: np.add(sa, sb, out=sc), reps)
        s_new = median_us(lambda: sa + sb, reps)
        f = fork_us()
    return (
        f"| {mib:g} MiB | {p_out:.1f} | {s_out:.1f} | {s_out / p_out:.2f}x | {p_new:.1f} | "
        f"{s_new:.1f} | {s_new / p_new:.2f}x | {f:.0f} µs |"
    )


def main() -> None:
    print("| array | add out= private | arena | ratio | a + b private | arena | ratio | fork, 3 in arena |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mib in (0.25, 1, 4, 8, 24):
        print(row(mib))


if __name__ == "__main__":
    main()
