"""The shape of one benchmarked call: how many elements each rank sends and receives, of
which dtype, for `shmcoll bench <op>`'s sizes (the vector; a rank's block for allgather,
gather and scatter). Shared by the benchmark (bench.collective) and its floors
(bench.machine_state), which must agree on what a call writes."""

from __future__ import annotations

from typing import Any

import numpy as np


def call_shape(op: str, size: int, p: int, floats: bool = False) -> tuple[int, int, np.dtype[Any]]:
    """(send elements, receive elements, dtype) of one call with `size` bytes (float32
    for every operation when `floats`: codecs compress floats)."""
    dt: np.dtype[Any]
    if floats and op in ("bcast", "allgather", "gather", "scatter"):
        n = max(size // 4, 1)
        f32 = np.dtype(np.float32)
        return {"bcast": (n, n, f32), "scatter": (n * p, n, f32)}.get(op, (n, n * p, f32))
    if op in ("allreduce", "reduce", "reduce_scatter"):
        dt = np.dtype(np.float32)
        n = max(size // 4, 1)
        if op == "reduce_scatter":
            n = max(n // p, 1)
            return n * p, n, dt
        return n, n, dt
    dt = np.dtype(np.uint8)
    if op == "barrier":
        return 0, 0, dt
    if op == "bcast":
        return size, size, dt
    if op in ("allgather", "gather"):
        return size, size * p, dt
    return size * p, size, dt  # scatter
