"""Message-size ranges in OSU's vocabulary (``-m 8:16M``)."""

from __future__ import annotations


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        v = float(t) * mult
    except ValueError as e:
        raise ValueError(f"not a size: {text!r} (examples: 8, 4K, 16M)") from e
    if v < 0 or v != int(v):
        raise ValueError(f"not a byte count: {text!r}")
    return int(v)


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
