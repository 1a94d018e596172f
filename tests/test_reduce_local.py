"""``_core.reduce_local``: the collectives' reduction kernels on two local arrays (dst = dst
op src), against NumPy's ufuncs, and its refusals (unknown op, mixed dtypes, an op the
dtype lacks, sizes that differ, overlapping buffers)."""

from __future__ import annotations

import numpy as np
import pytest

import shmcoll
from shmcoll import _core

UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum, "bxor": np.bitwise_xor}


@pytest.mark.parametrize("op", sorted(UFUNCS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
@pytest.mark.parametrize("n", [0, 1, 7, 1000, 70001])
def test_matches_numpy(op: str, dtype: str, n: int) -> None:
    if op == "bxor" and dtype.startswith("float"):
        pytest.skip("bxor is for integers")
    rng = np.random.default_rng(n)
    a = (rng.standard_normal(n) * 50).astype(dtype)
    b = (rng.standard_normal(n) * 50).astype(dtype)
    want = UFUNCS[op](a, b)
    _core.reduce_local(a, b, op)
    np.testing.assert_array_equal(a, want)


def test_in_place_on_itself() -> None:
    a = np.arange(100, dtype=np.float64)
    _core.reduce_local(a, a, "sum")
    np.testing.assert_array_equal(a, 2 * np.arange(100, dtype=np.float64))


def test_refusals() -> None:
    a = np.ones(8, np.float32)
    with pytest.raises(shmcoll.ShmcollError, match="unknown reduction op"):
        _core.reduce_local(a, a.copy(), "mean")
    with pytest.raises(shmcoll.ShmcollError, match="not an array of float32"):
        _core.reduce_local(a, np.ones(8, np.float64), "sum")
    with pytest.raises(shmcoll.ShmcollError, match="band is not defined for float32"):
        _core.reduce_local(a, a.copy(), "band")
    with pytest.raises(shmcoll.ShmcollError, match="32 bytes but source has 8"):
        _core.reduce_local(a, np.ones(2, np.float32), "sum")
    with pytest.raises(shmcoll.ShmcollError, match="overlap"):
        _core.reduce_local(a[:4], a[2:6], "sum")
