"""The codecs' CUDA kernels against the Rust reference: bytes on a fixed corpus, and
encode/decode throughput on the device.

Every codec configuration of ``shmcoll bench codec`` (shmcoll.bench.codec.plan) runs through
the codec classes, as the collectives call them: a CuPy array in takes the GPU path, which
must give the host path's bytes for the encoder, and for the decoder of the reference
stream. A call that falls back to the host (shmcoll.codecs.fallback_calls) fails its row:
it would have compared the reference with itself. Throughput is input bytes over the
median of back-to-back calls timed between CUDA events on the current stream, after
warm-up calls (the first call of a kernel also loads its module).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..bench.codec import plan
from ..codecs import Codec, fallback_calls

#: The codec families a selftest can be limited to (``--codecs``).
FAMILIES = ("bq", "cast", "mpc", "zfp")
#: The corpus's seed: the same values on every machine and run.
SEED = 20261207


def corpus(n: int, dtype: Any) -> dict[str, np.ndarray]:
    """The fixed inputs of the byte checks, `n` values of `dtype` each: random values over
    many magnitudes, random bit patterns (every class of float, NaN payloads included), a
    smooth field, gradient-like values (mostly tiny, some zero, rare spikes) and the special
    values (NaN, +-inf, -0, subnormals, the extremes) among smooth ones."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(SEED)
    fi = np.finfo(dt)
    random = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
    bits_t = np.uint32 if dt.itemsize == 4 else np.uint64
    bits = rng.integers(0, np.iinfo(bits_t).max, n, dtype=bits_t, endpoint=True).view(dt)
    smooth = np.sin(np.linspace(0, 40, n)) * 100 + np.cumsum(rng.standard_normal(n)) * 0.01
    gradient = rng.laplace(0, 1e-4, n)
    gradient[rng.random(n) < 0.1] = 0.0
    spikes = rng.random(n) < 0.001
    gradient[spikes] = rng.standard_normal(int(spikes.sum())) * 10
    marks = np.array(
        [
            np.nan,
            np.inf,
            -np.inf,
            -0.0,
            0.0,
            fi.smallest_subnormal,
            -fi.smallest_subnormal,
            fi.tiny / 3,
            fi.max,
        ],
        dt,
    )
    special = smooth.astype(dt)
    special[::5] = marks[np.arange(special[::5].size) % marks.size]
    return {
        "random": random.astype(dt),
        "bits": bits,
        "smooth": smooth.astype(dt),
        "gradient": gradient.astype(dt),
        "special": special,
    }


@dataclass
class Row:
    """One codec configuration's outcome."""

    name: str
    dtype: str
    status: str  # "ok", "skipped: ...", or what failed
    encode_gbs: float | None = None
    decode_gbs: float | None = None

    @property
    def failed(self) -> bool:
        return self.status != "ok" and not self.status.startswith("skipped")


def _first_difference(a: bytes, b: bytes) -> str:
    if len(a) != len(b):
        return f"{len(a)} bytes, the reference {len(b)}"
    k = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    return f"byte {k} of {len(a)} differs"


def shape_for(n: int, dims: int) -> tuple[int, ...]:
    """A `dims`-axis shape of at most `n` values whose inner extents (37; 23 x 19) are not
    multiples of zfp's block edge, so partial blocks are coded too."""
    inner = {1: (), 2: (37,), 3: (23, 19)}[dims]
    return (max(n // max(int(np.prod(inner)), 1), 1), *inner)


def compare(codec: Codec, dtype: np.dtype, n: int, dims: int = 1) -> str:
    """ "ok", or the first mismatch of `codec`'s GPU path against its host path on the corpus
    (shaped with `dims` axes: zfp codes N-D arrays in N-D blocks)."""
    import cupy  # type: ignore[import-not-found]

    shape = shape_for(n, dims)
    count = int(np.prod(shape))
    for label, flat in corpus(n, dtype).items():
        x = np.ascontiguousarray(flat[:count].reshape(shape))
        ref = codec.encode_raw(x)
        got = cupy.asnumpy(codec.encode_raw(cupy.asarray(x))).tobytes()
        if got != ref:
            return f"MISMATCH encoding {label}: {_first_difference(got, ref)}"
        want = codec.decode_raw(ref, dtype, shape).tobytes()
        on_device = cupy.asarray(np.frombuffer(ref, np.uint8))
        back = cupy.asnumpy(codec.decode_raw(on_device, dtype, shape)).tobytes()
        if back != want:
            return f"MISMATCH decoding {label}: {_first_difference(back, want)}"
    return "ok"


def _median_gbs(call: Callable[[], Any], nbytes: int, reps: int, warmup: int) -> float:
    """Input bytes per second (GB/s) of `call`, from the median of `reps` back-to-back calls
    timed between CUDA events recorded after each. The calls are queued one after another,
    so while the device runs one the host prepares the next, and an interval is the device
    time of one call. A call that waits for the device inside also counts the host's part
    up to the wait: mpc's encoder reads the stream's size, its decoder the header, the
    chunk table and the error flag."""
    import cupy

    for _ in range(warmup):
        call()
    cupy.cuda.get_current_stream().synchronize()
    events = [cupy.cuda.Event() for _ in range(reps + 1)]
    events[0].record()
    for done in events[1:]:
        call()
        done.record()
    events[-1].synchronize()
    times = [cupy.cuda.get_elapsed_time(a, b) / 1e3 for a, b in itertools.pairwise(events)]
    return nbytes / max(statistics.median(times), 1e-9) / 1e9


def throughput(
    codec: Codec, dtype: np.dtype, nbytes: int, reps: int, warmup: int, dims: int = 1
) -> tuple[float, float]:
    """(encode, decode) GB/s of input bytes on `nbytes` of gradient-like values."""
    import cupy

    shape = shape_for(max(nbytes // dtype.itemsize, 1), dims)
    n = int(np.prod(shape))
    rng = np.random.default_rng(SEED)
    x = cupy.asarray((rng.standard_normal(shape) * 1e-3).astype(dtype))
    stream = codec.encode_raw(x)
    out = cupy.empty(shape, dtype)
    enc = _median_gbs(lambda: codec.encode_raw(x), n * dtype.itemsize, reps, warmup)
    dec = _median_gbs(
        lambda: codec.decode_raw(stream, dtype, shape, out=out), n * dtype.itemsize, reps, warmup
    )
    return enc, dec


def run(families: set[str], n: int, nbytes: int, reps: int, warmup: int) -> list[Row]:
    """Every configuration of the selected codec families: bytes on `n`-value corpora, then
    throughput on `nbytes` (the latter only when the bytes match)."""
    rows = []
    for name, codec, dtype, dims in plan(set(FAMILIES)):
        family = name.split()[0]
        if family not in families:
            rows.append(Row(name, dtype.name, "skipped: not selected (--codecs)"))
            continue
        before = dict(fallback_calls)
        try:
            status = compare(codec, dtype, n, dims)
            enc = dec = None
            if status == "ok":
                enc, dec = throughput(codec, dtype, nbytes, reps, warmup, dims)
        except Exception as e:  # a kernel that fails to load or launch fails its row
            status, enc, dec = f"error: {type(e).__name__}: {e}", None, None
        if fallback_calls != before:
            status = "FELL BACK to the host codec (the GPU path did not run)"
        rows.append(Row(name, dtype.name, status, enc, dec))
    return rows


def table(rows: list[Row], nbytes: int) -> list[str]:
    """The rows as text lines."""
    head = f"{'codec':<14} {'dtype':<8} {'encode GB/s':>12} {'decode GB/s':>12}  bytes against Rust"

    def gbs(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    lines = [f"codecs on the GPU (throughput on {nbytes} input bytes)", head]
    lines += [
        f"{r.name:<14} {r.dtype:<8} {gbs(r.encode_gbs):>12} {gbs(r.decode_gbs):>12}  {r.status}" for r in rows
    ]
    return lines
