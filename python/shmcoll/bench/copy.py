"""``shmcoll bench copy``: shmcoll's copy kernels (temporal, nt, hybrid) against
numpy.copyto, with the fraction of the machine's copy ceiling.

The ceiling is the best single-core rate of a copy far larger than the caches (64 MiB),
streaming or not, which is what memory allows one core; every method at every size is
reported against it. The source is rewritten before each timed copy (untimed), so that
each copy reads data just produced, as a collective does.

The write ceiling is what the node's memory takes when every CPU streams at once: each
thread copies a source hot in its cache (4 MiB, in the L3) into successive slices of its
own destination (64 MiB; down to 16 MiB on a node with many CPUs) with streaming stores,
as a Bcast or an Allgather pushes a hot chunk to every destination. A collective that
writes B bytes in all (summed over ranks, e.g. p * p * block for an out-of-place
Allgather) cannot take less than B / that rate: it is the floor the large sizes of the
4-rank tables are judged against. It differs from `bench.alltoall.nt_ceiling` on purpose:
that one has every rank of a launch copy 64 MiB from memory, so reads share its traffic,
as an Alltoall's do; this one needs no launch and reads from cache.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

import shmcoll

METHODS = ("numpy.copyto", "temporal", "nt", "hybrid")


def _time(method: str, dst: np.ndarray, src: np.ndarray, reps: int) -> float:
    ts = []
    for i in range(reps):
        src[:: 4096 if src.size > 4096 else 1] = i & 0xFF
        t0 = time.perf_counter()
        if method == "numpy.copyto":
            np.copyto(dst, src)
        else:
            shmcoll.copy(dst, src, method)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def run(sizes: list[int], reps: int = 11) -> tuple[list[dict[str, Any]], float]:
    rows = []
    for n in sizes:
        src = np.ones(n, np.uint8)
        dst = np.zeros(n, np.uint8)
        r = reps if n >= 1 << 20 else reps * 20
        for m in METHODS:
            t = _time(m, dst, src, r)
            rows.append({"bytes": n, "method": m, "median_us": t * 1e6, "gbs": n / t / 1e9})
        assert np.array_equal(dst, src)
    big = 64 << 20
    src = np.ones(big, np.uint8)
    dst = np.zeros(big, np.uint8)
    ceiling = max(big / _time(m, dst, src, 5) / 1e9 for m in ("temporal", "nt", "numpy.copyto"))
    return rows, ceiling


def write_ceiling(threads: int, nbytes: int = 64 << 20, reps: int = 5) -> float:
    """GB/s written by `threads` threads at once, each streaming a hot 4 MiB source into
    successive slices of its own `nbytes` destination (see the module docstring). The
    time is the wall time of all threads together, from one start to the last finish."""
    piece = 4 << 20  # few enough GIL handoffs between the copies to be noise
    nbytes = max(piece, nbytes // piece * piece)
    # np.full, not np.zeros: the destination's pages are faulted in before the clock runs.
    bufs = [(np.ones(piece, np.uint8), np.full(nbytes, 7, np.uint8)) for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)

    def stream(src: np.ndarray, dst: np.ndarray) -> None:
        shmcoll.copy(dst[:piece], src, "nt")  # warm the source and the code path
        start.wait()
        for _ in range(reps):
            for off in range(0, nbytes, piece):
                shmcoll.copy(dst[off : off + piece], src, "nt")  # releases the GIL
        done.wait()

    workers = [threading.Thread(target=stream, args=b) for b in bufs]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    done.wait()
    wall = time.perf_counter() - t0
    for w in workers:
        w.join()
    for src, dst in bufs:
        assert np.array_equal(dst[-piece:], src)
    return threads * reps * nbytes / wall / 1e9


def node_write_ceilings() -> tuple[int, float, float]:
    """(usable CPUs, write ceiling of one CPU, of all of them at once), each the best of
    three tries (a shared machine only ever slows a try down)."""
    cpus = len(os.sched_getaffinity(0))
    # 64 MiB a thread, less on a large node so that the whole stays near 2 GiB; 16 MiB
    # still outgrows any one core's share of the last-level cache.
    per_thread = min(64 << 20, max(16 << 20, (2 << 30) // cpus))
    one = max(write_ceiling(1, per_thread) for _ in range(3))
    every = max(write_ceiling(cpus, per_thread) for _ in range(3))
    return cpus, one, every


def report(rows: list[dict[str, Any]], ceiling: float, csv_path: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from .sizes import fmt_size

    t = Table(title=f"copy bandwidth, GB/s (% of the {ceiling:.1f} GB/s single-core ceiling)")
    t.add_column("bytes", justify="right")
    for m in METHODS:
        t.add_column(m, justify="right")
    t.add_column("best/numpy", justify="right")
    for n in sorted({r["bytes"] for r in rows}):
        by = {r["method"]: r for r in rows if r["bytes"] == n}
        cells = [f"{by[m]['gbs']:.1f} ({100 * by[m]['gbs'] / ceiling:.0f}%)" for m in METHODS]
        best = max(by[m]["gbs"] for m in METHODS[1:])
        t.add_row(fmt_size(n), *cells, f"{best / by['numpy.copyto']['gbs']:.2f}x")
    Console(highlight=False).print(t)
    if csv_path:
        import csv

        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["bytes", "method", "median_us", "gbs"])
            w.writeheader()
            w.writerows(rows)
