"""Summaries of repeated timings: medians and percentiles, never single samples."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Summary:
    median_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    n: int

    @staticmethod
    def of(seconds: np.ndarray) -> Summary:
        us = np.asarray(seconds, dtype=np.float64) * 1e6
        if us.size == 0:
            return Summary(float("nan"), float("nan"), float("nan"), float("nan"), 0)
        p50, p90, p99 = np.percentile(us, [50, 90, 99])
        return Summary(float(np.median(us)), float(p50), float(p90), float(p99), int(us.size))
