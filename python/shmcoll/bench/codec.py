"""``shmcoll bench codec``: encode and decode throughput of every codec on one thread and
on every CPU (as every codec runs by default on large inputs), with zfpy (zfp's own Python
binding, serial) measured in the same process as the peer of the zfp rows. zfp is also
measured on 2-D and 3-D fields (its blocks of 4^d values), against zfpy on the same arrays.

Throughput is input bytes (the uncompressed array) per second, the median of `reps`
timed calls. Two input arrays of `size` bytes alternate and a strided slice of the next
one is rewritten before each timed call (untimed), so that no call finds its input in
cache from the previous one. Outputs are preallocated, as in a collective.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _core
from ..codecs import Bq, Cast, Codec, Mpc, Zfp

#: Threads of the Rust codecs (default: every CPU).
ENV_THREADS = "SHMCOLL_CODEC_THREADS"

#: Throughput bars the rows are checked against: bq int8 on one thread (GB/s, encode and
#: decode), bq int8 encode on every CPU of a machine with two or more (GB/s), zfp against
#: zfpy's single-thread rate (ratio).
BQ_INT8_BAR_GBS = 4.0
BQ_INT8_ALL_CPUS_BAR_GBS = 8.0
ZFP_VS_ZFPY_BAR = 2.0


@dataclass
class Row:
    name: str
    dtype: str
    ratio: float
    encode_gbs: float
    decode_gbs: float
    max_error: float
    zfpy_encode_gbs: float | None = None
    zfpy_decode_gbs: float | None = None


def _inputs(nbytes: int, dtype: np.dtype, seed: int, dims: int = 1) -> list[np.ndarray]:
    """Two smooth-ish fields (a sum of sines plus noise): realistic for zfp and mpc. With
    `dims` > 1, fields of that many axes (about equal extents), smooth along each."""
    n = max(nbytes // dtype.itemsize, 1)
    rng = np.random.default_rng(seed)
    if dims > 1:
        side = max(round(n ** (1 / dims)), 1)
        shape = (max(n // side ** (dims - 1), 1),) + (side,) * (dims - 1)
        axes = np.meshgrid(*[np.linspace(0, 8 * np.pi, s) for s in shape], indexing="ij", sparse=True)
        return [
            (
                sum(np.sin(a * (1 + k + i)) for i, a in enumerate(axes)) + 1e-3 * rng.standard_normal(shape)
            ).astype(dtype)
            for k in range(2)
        ]
    t = np.linspace(0, 64 * np.pi, n)
    out = []
    for k in range(2):
        x = np.sin(t * (1 + k)) + 0.3 * np.sin(7.3 * t) + 1e-3 * rng.standard_normal(n)
        out.append(x.astype(dtype))
    return out


def _time(call: Callable[[np.ndarray], Any], inputs: list[np.ndarray], reps: int) -> float:
    ts = []
    for i in range(reps):
        x = inputs[i % 2]
        x.reshape(-1)[:: 4096 // x.itemsize] += x.dtype.type(0)  # touch: pages written lately
        t0 = time.perf_counter()
        call(x)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _measure(name: str, codec: Codec, dtype: np.dtype, nbytes: int, reps: int, dims: int = 1) -> Row:
    inputs = _inputs(nbytes, dtype, 1, dims)
    n = inputs[0].size
    # What the codec's sizes and decoder take: the count of a 1-D array, else the shape.
    layout: Any = n if dims == 1 else inputs[0].shape
    size = codec.compressed_size(layout, dtype) if codec.fixed_size else None
    if size is None:
        assert isinstance(codec, Mpc)
        size = codec.max_compressed_size(n, dtype)
    streams = [np.empty(size, np.uint8) for _ in range(2)]
    used = [codec.encode_raw(x, out=s) for x, s in zip(inputs, streams, strict=True)]
    outs = [np.empty(inputs[0].shape, dtype) for _ in range(2)]
    enc = _time(lambda x: codec.encode_raw(x, out=streams[0]), inputs, reps)
    # Decode the two streams alternately (the "inputs" of the decode timing).
    order = [0]

    def dec(_: np.ndarray) -> None:
        k = order[0] = 1 - order[0]
        codec.decode_raw(streams[k][: used[k]], dtype, layout, out=outs[k])

    dect = _time(dec, inputs, reps)
    codec.encode_raw(inputs[0], out=streams[0])
    y = codec.decode_raw(streams[0][: used[0]], dtype, layout)
    err = float(np.max(np.abs(y.astype(np.float64) - inputs[0]))) if n else 0.0
    gb = n * dtype.itemsize / 1e9
    return Row(name, dtype.name, inputs[0].nbytes / used[0], gb / enc, gb / dect, err)


def _zfpy(row: Row, rate: int, dtype: np.dtype, nbytes: int, reps: int, dims: int = 1) -> None:
    try:
        import zfpy  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return
    inputs = _inputs(nbytes, dtype, 1, dims)
    packed = [zfpy.compress_numpy(x, rate=rate) for x in inputs]
    enc = _time(lambda x: zfpy.compress_numpy(x, rate=rate), inputs, reps)
    order = [0]

    def dec(_: np.ndarray) -> None:
        order[0] = 1 - order[0]
        zfpy.decompress_numpy(packed[order[0]])

    dect = _time(dec, inputs, reps)
    row.zfpy_encode_gbs = inputs[0].nbytes / 1e9 / enc
    row.zfpy_decode_gbs = inputs[0].nbytes / 1e9 / dect


def plan(which: set[str]) -> list[tuple[str, Codec, np.dtype, int]]:
    """(row name, codec, dtype, axes of the input)."""
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    rows: list[tuple[str, Codec, np.dtype, int]] = []
    if "zfp" in which and hasattr(_core, "zfp_encode"):
        rows += [(f"zfp rate {r}", Zfp(rate=r), dt, 1) for r in (8, 16) for dt in (f32, f64)]
        rows += [(f"zfp rate 16 {d}-D", Zfp(rate=16), f32, d) for d in (2, 3)]
    if "bq" in which:
        rows += [
            ("bq int8 /256", Bq(bits=8, block=256), f32, 1),
            ("bq int4 /64", Bq(bits=4, block=64), f32, 1),
        ]
    if "cast" in which:
        rows += [("cast bf16", Cast("bfloat16"), f32, 1), ("cast fp16", Cast("float16"), f32, 1)]
    if "mpc" in which:
        rows += [("mpc", Mpc(), f32, 1), ("mpc", Mpc(), f64, 1)]
    return rows


def run(nbytes: int, reps: int, which: set[str]) -> list[Row]:
    rows = []
    cpus = len(os.sched_getaffinity(0))
    for name, codec, dtype, dims in plan(which):
        # Every codec splits large inputs over every CPU (SHMCOLL_CODEC_THREADS caps it):
        # one row on one thread, one on all of them; zfp's both against zfpy's serial coder.
        with _threads(1):
            one = _measure(f"{name}, 1 thread", codec, dtype, nbytes, reps, dims)
        if isinstance(codec, Zfp):
            _zfpy(one, int(codec.rate), dtype, nbytes, reps, dims)
        rows.append(one)
        if cpus > 1:
            with _threads(None):
                many = _measure(f"{name}, {cpus} threads", codec, dtype, nbytes, reps, dims)
            many.zfpy_encode_gbs, many.zfpy_decode_gbs = one.zfpy_encode_gbs, one.zfpy_decode_gbs
            rows.append(many)
    return rows


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """Run with SHMCOLL_CODEC_THREADS=n (None: unset, every CPU)."""
    old = os.environ.pop(ENV_THREADS, None)
    if n is not None:
        os.environ[ENV_THREADS] = str(n)
    try:
        yield
    finally:
        os.environ.pop(ENV_THREADS, None)
        if old is not None:
            os.environ[ENV_THREADS] = old


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def report(rows: list[Row], nbytes: int) -> list[str]:
    """Print the table; returns the bars that failed (as messages)."""
    from rich.console import Console
    from rich.table import Table

    from .sizes import fmt_size

    t = Table(
        title=f"codecs on one thread and on every CPU: GB/s of input, median ({fmt_size(nbytes)} inputs)"
    )
    cols = ["codec", "dtype", "ratio", "encode", "decode", "zfpy enc", "zfpy dec", "enc/zfpy", "dec/zfpy"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("codec", "dtype") else "right", no_wrap=True)
    t.add_column("max |x-x̂|", justify="right", no_wrap=True)
    failed = []
    for r in rows:
        er = r.encode_gbs / r.zfpy_encode_gbs if r.zfpy_encode_gbs else None
        dr = r.decode_gbs / r.zfpy_decode_gbs if r.zfpy_decode_gbs else None
        t.add_row(
            r.name,
            r.dtype.replace("float", "f"),
            f"{r.ratio:.2f}",
            f"{r.encode_gbs:.2f}",
            f"{r.decode_gbs:.2f}",
            _fmt(r.zfpy_encode_gbs),
            _fmt(r.zfpy_decode_gbs),
            _fmt(er),
            _fmt(dr),
            f"{r.max_error:.2e}",
        )
        multi = len(os.sched_getaffinity(0)) > 1
        bq8 = r.name.startswith("bq int8")
        if bq8 and "1 thread" in r.name and min(r.encode_gbs, r.decode_gbs) < BQ_INT8_BAR_GBS:
            failed.append(f"{r.name}: encode/decode below {BQ_INT8_BAR_GBS} GB/s")
        if bq8 and multi and "1 thread" not in r.name and r.encode_gbs < BQ_INT8_ALL_CPUS_BAR_GBS:
            failed.append(f"{r.name}: encode below {BQ_INT8_ALL_CPUS_BAR_GBS} GB/s")
        # The bar is against zfpy's serial rate, for 1-D arrays (N-D rows are reported).
        judged = (not multi or "1 thread" not in r.name) and "-D" not in r.name
        if judged and er is not None and dr is not None and min(er, dr) < ZFP_VS_ZFPY_BAR:
            failed.append(f"{r.name} {r.dtype}: below {ZFP_VS_ZFPY_BAR}x zfpy")
    console = Console(width=max(Console().width, 120))
    console.print(t)
    console.print(
        f"bars: bq int8 encode and decode >= {BQ_INT8_BAR_GBS} GB/s on one thread, encode >= "
        f"{BQ_INT8_ALL_CPUS_BAR_GBS} GB/s on every CPU (two or more); "
        f"zfp encode and decode >= {ZFP_VS_ZFPY_BAR}x zfpy's single-thread rate"
        + ("" if hasattr(_core, "zfp_encode") else " (zfp is not in this build: no zfp rows)")
    )
    for f in failed:
        console.print(f"[red]below the bar[/red]: {f}")
    return failed
