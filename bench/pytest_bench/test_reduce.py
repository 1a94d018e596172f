"""The collectives' reduction kernels (``_core.reduce_local``: dst = dst op src) against
NumPy's ufuncs writing in place (``np.add(dst, src, out=dst)``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conftest import against
from shmcoll import _core

UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_reduce(benchmark: Any, nbytes: int, op: str, dtype: str) -> None:
    rng = np.random.default_rng(0)
    n = max(nbytes // np.dtype(dtype).itemsize, 1)
    src = (rng.standard_normal(n) * 100).astype(dtype)
    start = (rng.standard_normal(n) * 100).astype(dtype)
    dst = start.copy()
    benchmark.group = f"reduce {op}"
    # dst accumulates over the rounds (as a reduction does); the answer is checked below
    # on a fresh pair, so that the timed data never overflow into infinities.
    benchmark(_core.reduce_local, dst, src, op)
    check = start.copy()
    _core.reduce_local(check, src, op)
    np.testing.assert_array_equal(check, UFUNCS[op](start, src))
    ufunc = UFUNCS[op]
    peer_dst = start.copy()
    against(benchmark, f"np.{ufunc.__name__}(out=dst)", lambda: ufunc(peer_dst, src, out=peer_dst), nbytes)
