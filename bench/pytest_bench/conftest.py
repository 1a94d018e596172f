"""The pytest-benchmark suite of shmcoll's single-process kernels (copy, reductions, codecs),
each against its NumPy or zfpy peer timed in the same test, so that the ratio in
``extra_info`` compares two rates measured under the same load. Not part of the test run
(pyproject's testpaths is ``tests``): run it as ``pytest bench/pytest_bench`` (docs/benchmarks.md
has the baseline and ``--benchmark-compare`` workflow). ``--bench-bytes`` sets the input
size; CI runs it with ``--benchmark-disable --bench-bytes 64K``, which only checks that
every benchmark runs and gives the right answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from shmcoll._core import parse_bytes

#: Peer timings per benchmark: as many rounds as pytest-benchmark's, within this budget.
PEER_ROUNDS = 15


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bench-bytes",
        default="16M",
        help="input bytes of every benchmark (default 16M; CI's short mode uses 64K)",
    )


@pytest.fixture(scope="session")
def nbytes(request: pytest.FixtureRequest) -> int:
    return parse_bytes(str(request.config.getoption("--bench-bytes")))


def field(nbytes: int, dtype: Any, seed: int = 1) -> np.ndarray:
    """A smooth field plus noise (what zfp and mpc meet in simulations), `nbytes` large."""
    dt = np.dtype(dtype)
    n = max(nbytes // dt.itemsize, 1)
    t = np.linspace(0, 64 * np.pi, n)
    x = np.sin(t) + 0.3 * np.sin(7.3 * t) + 1e-3 * np.random.default_rng(seed).standard_normal(n)
    return x.astype(dt)


def peer_median(call: Callable[[], Any], rounds: int = PEER_ROUNDS) -> float:
    """Median seconds of `call` (one warm-up call first), as pytest-benchmark times ours."""
    call()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def against(benchmark: Any, peer_name: str, peer: Callable[[], Any], nbytes: int) -> None:
    """Time `peer` right after the benchmark and record both rates and their ratio."""
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["peer"] = peer_name
    if benchmark.disabled or benchmark.stats is None:
        peer()  # short mode: only check that the peer runs
        return
    ours = float(benchmark.stats.stats.median)
    theirs = peer_median(peer)
    benchmark.extra_info["gbs"] = nbytes / ours / 1e9
    benchmark.extra_info["peer_gbs"] = nbytes / theirs / 1e9
    benchmark.extra_info["speedup_vs_peer"] = theirs / ours
