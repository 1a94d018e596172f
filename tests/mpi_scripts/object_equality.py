"""Equality of objects that may hold NumPy arrays (whose == is element-wise), shared by
tests/test_objects.py and tests/mpi_scripts/objects_vs_mpi.py."""

from __future__ import annotations

import numpy as np


def same(a: object, b: object) -> bool:
    """`a` and `b` are equal, arrays compared whole, containers item by item."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
