"""The measuring loop shared by the collective benchmarks.

Per iteration: rewrite the send buffer (untimed, so caches cannot flatter the result),
an untimed barrier, the timed call, and an untimed barrier after it, as OSU's loops have:
without it, a rank that returned early rewrites its buffer for the next iteration while
its peers are still timed, and with ranks sharing a core that rewrite ran inside their
time (a 16 MiB Reduce_scatter at 4 ranks on 2 cores measured 5.4 against 3.9 ms, MPICH's
12.2 against 11.2). The latency of an iteration is the slowest rank's time; a variant's
figure is the median over iterations. Variants run in interleaved rounds so that slow
drifts of a shared machine hit all of them alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ShmcollError
from .stats import Summary

MAX_INTERLEAVED = 6

# The first measurement of a process warms up this many times longer. The launch's first
# tens of milliseconds run slower with ranks sharing CPUs (processes finishing their
# start-up, the scheduler settling), and without it the first size carries them (the
# figures: docs/benchmarks.md, "The first size of a launch"). MPI's calls get the same
# warm-up.
LAUNCH_WARMUP_FACTOR = 10
_launch_warmed = False


@dataclass
class Variant:
    """One way of running the operation: a label and the callables that prepare, run and
    check it."""

    label: str
    peer: bool  # True for the reference implementation (MPI)
    setup: Callable[[int], Any]  # bytes per rank -> state
    refill: Callable[[Any, int, bool], None]  # (state, iteration, validated?) -> rewrite send data
    bind: Callable[[Any], Callable[[], None]]  # state -> the timed call
    check: Callable[[Any, int], bool]  # (state, iteration) -> result correct?
    teardown: Callable[[Any], None] = lambda s: None
    times: list[float] = field(default_factory=list)
    valid: bool | None = None
    error: str | None = None


def measure(
    barrier: Callable[[], None],
    variants: list[Variant],
    size: int,
    iters: int,
    warmup: int,
    rounds: int,
    validate: bool,
    interleave: bool | None = None,
) -> None:
    """Fill each variant's `times` (this rank's seconds per iteration).

    Up to `MAX_INTERLEAVED` variants run in interleaved rounds; beyond that (e.g. every
    forced variant) they run one after the other, so that only one holds buffers at a time.
    The first call in a process warms up `LAUNCH_WARMUP_FACTOR` times longer. Every rank
    makes the same calls, so every rank agrees on the count.
    """
    global _launch_warmed
    if not _launch_warmed:
        _launch_warmed = True
        warmup *= LAUNCH_WARMUP_FACTOR
    if interleave is None:
        interleave = len(variants) <= MAX_INTERLEAVED
    if not interleave and len(variants) > 1:
        for v in variants:
            measure(barrier, [v], size, iters, warmup, 1, validate)
        return
    states: dict[str, Any] = {}
    for v in variants:
        v.times = []
        v.valid = None
        try:
            states[v.label] = v.setup(size)
        except Exception as e:  # a variant that cannot run this size is reported, not fatal
            v.error = f"{type(e).__name__}: {e}"
    live = [v for v in variants if v.label in states]
    per_round = max(1, -(-iters // rounds))
    it = 0
    for r in range(rounds):
        for v in list(live):
            s = states[v.label]
            call = v.bind(s)
            refill = v.refill
            clock = time.perf_counter
            times = v.times
            n_warm = warmup if r == 0 else 0
            last = n_warm + per_round - 1
            try:
                for k in range(last + 1):
                    it += 1
                    refill(s, it, k == last)
                    barrier()
                    t0 = clock()
                    call()
                    t1 = clock()
                    barrier()
                    if k >= n_warm:
                        times.append(t1 - t0)
            except ShmcollError as e:
                # A forced choice that cannot serve this size is rejected on every rank
                # alike, so every rank drops the variant here.
                v.error = f"{type(e).__name__}: {e}"
                live.remove(v)
                continue
            if validate:
                ok = v.check(s, it)
                v.valid = ok if v.valid is None else (v.valid and ok)
    for v in live:
        v.teardown(states[v.label])


def summarize(all_times: np.ndarray) -> Summary:
    """`all_times[rank, iteration]` -> summary of the per-iteration maximum over ranks."""
    return Summary.of(all_times.max(axis=0))
