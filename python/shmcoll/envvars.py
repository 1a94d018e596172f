"""Whole numbers read from the environment by the Python layer, each held to a range.

An environment value is input nobody checked (a typo, a value meant for another tool,
something hostile). ``int()`` alone accepts ``"٣"`` and ``" +3_0 "``, and raises a bare
ValueError on ``"1e3"`` or on a number with thousands of digits; settings read here accept
ASCII digits only, within a documented range, and anything else is an
:class:`~shmcoll.errors.ArgumentError` naming the variable, the value and the range. The
engine's own settings (sizes, timeouts) are parsed alike in Rust (shmcoll-coll's
env_value.rs); an empty value means unset in both.
"""

from __future__ import annotations

import os

from .errors import ArgumentError

#: At most this many characters of a bad value go into the error message.
_SHOWN = 64


def _shown(raw: str) -> str:
    return repr(raw[:_SHOWN] + ("…" if len(raw) > _SHOWN else ""))


def parse_whole(name: str, raw: str, lo: int, hi: int) -> int:
    """`raw` as a whole number within ``lo <= value <= hi``, else ArgumentError."""
    t = raw.strip()
    # Bounded before conversion: digits beyond hi's length are out of range anyway.
    if not t or not t.isascii() or not t.isdigit():
        raise ArgumentError(f"environment: {name}={_shown(raw)} is not a whole number; allowed: {lo} to {hi}")
    if len(t.lstrip("0")) > len(str(hi)) or not lo <= int(t) <= hi:
        raise ArgumentError(f"environment: {name}={_shown(raw)} is out of range; allowed: {lo} to {hi}")
    return int(t)


def env_whole(name: str, lo: int, hi: int) -> int | None:
    """The variable `name` as a whole number within ``lo <= value <= hi``; None if unset
    or empty."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return None
    return parse_whole(name, raw, lo, hi)
