"""shmcoll's copy kernels (temporal, streaming-store, hybrid) against ``np.copyto``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import against


@pytest.mark.parametrize("store", ["temporal", "nt", "hybrid"])
def test_copy(benchmark: Any, nbytes: int, store: str) -> None:
    src = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    dst = np.zeros_like(src)
    benchmark.group = "copy"
    benchmark(shmcoll.copy, dst, src, store)
    np.testing.assert_array_equal(dst, src)
    peer_dst = np.zeros_like(src)
    against(benchmark, "np.copyto", lambda: np.copyto(peer_dst, src), nbytes)
