"""Message-size ranges in OSU's vocabulary (``-m 8:16M``)."""

from __future__ import annotations

from .. import _core
from ..errors import ArgumentError


def parse_size(text: str) -> int:
    """A byte count, read as everywhere in shmcoll (``_core.parse_bytes``: 8, 4K, 16M, 1.5M);
    ValueError otherwise."""
    try:
        return int(_core.parse_bytes(text))
    except ArgumentError as e:
        raise ValueError(str(e)) from e


#: From this many bytes moved per call (a rank's block times the ranks), the benchmarks
#: run a tenth of the iterations and warm-up rounds (OSU's rule: large messages take long
#: and vary little).
LARGE_BYTES = 64 << 10


def iterations(moved: int, iters: int, warmup: int) -> tuple[int, int]:
    """(iterations, warm-up) for a call moving `moved` bytes."""
    if moved > LARGE_BYTES:
        return max(10, iters // 10), max(2, warmup // 10)
    return iters, warmup


def parse_range(text: str) -> list[int]:
    """``"8:16M"`` -> powers of two from 8 to 16 MiB; ``"4K"`` -> [4096]; ``"0:64"`` includes 0."""
    if ":" in text:
        lo_s, hi_s = text.split(":", 1)
        lo = parse_size(lo_s) if lo_s else 1
        hi = parse_size(hi_s) if hi_s else 1 << 24
        if hi < lo:
            raise ValueError(f"empty size range {text!r}")
        out = [0] if lo == 0 else []
        v = max(lo, 1)
        while v <= hi:
            out.append(v)
            v *= 2
        return out
    return [parse_size(text)]


def fmt_size(n: int) -> str:
    for suffix, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{suffix}"
    return str(n)
