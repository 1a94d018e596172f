"""Ordinary NumPy arrays that peers can reach directly: NumPy's allocator (NEP 49) backed by
a shared arena, on by default.

A collective on a private NumPy array reaches the peers' memory through kernel copies
(CMA), which cost a system call and page pinning per transfer and, for large arrays, a
read of every destination line. Arrays in the shared heap (``comm.empty``) avoid that,
but code would have to allocate them there. So from ``import shmcoll`` on, every array
NumPy allocates with ``min_bytes <= nbytes <= max_bytes`` of data (``np.empty``,
``np.zeros``, results of arithmetic, ``np.concatenate``..., in every thread) comes from
this process's arena: a memfd that the peers of every communicator map when they first
meet a buffer in it, so collectives on those arrays take the same single-copy paths as
heap arrays, whether the arrays were allocated before or after the communicator. Other
arrays are NumPy's as usual, and so is everything allocated before ``import shmcoll``
(served through the private-buffer paths).

Bounds (process-wide): ``SHMCOLL_SHARED_ARRAYS_MIN`` (default 8 KiB) and
``SHMCOLL_SHARED_ARRAYS_MAX``. The default upper bound is 4 MiB, included
(``DEFAULT_MAX_BYTES``): above it NumPy puts arrays on transparent huge pages, which a memfd
gets only where the kernel allows them for shared memory, and on 4 KiB pages element-wise
work over large arrays runs 1.1x to 1.5x slower. Where the kernel does allow them
(``/sys/kernel/mm/transparent_hugepage/shmem_enabled`` set to ``advise``, ``within_size``
or ``always``: ``shared_arrays_info()["huge_pages"]``), the arena gives its large arrays huge
pages too and the bound is 64 MiB (``DEFAULT_MAX_BYTES_HUGE``; not more, since fork copies
the arena's arrays, see below). ``default_bounds()`` says which holds here.
Opting out: ``SHMCOLL_SHARED_ARRAYS=0`` before the import, or
``disable_shared_arrays()``, or ``with private_arrays():`` for a block;
``shared_arrays(min_bytes, max_bytes)`` sets other bounds for a block.

Behaviour, as with NumPy's own allocator:

- fork(): a child made by ``os.fork`` or ``multiprocessing`` ('fork') gets a private copy
  of the arena's live arrays, made while the parent waits in fork (time proportional to
  the arrays' touched bytes), so the child sees the values at the fork and neither sees
  the other's later writes. exec'ing children are unaffected.
- Memory: freed blocks are reused; freed blocks of 32 MiB or more go back to the kernel
  (as glibc unmaps its largest chunks); ``shared_arrays_info()`` has the counters.
- Limits: under ``ulimit -v`` the arena takes at most a quarter of the address space (and
  no more than ``ulimit -f``); where no useful arena fits, arrays stay NumPy's. Either way
  one :class:`~shmcoll.errors.SharedArraysWarning` says so. A request the arena cannot
  serve is NumPy's (counted as ``refused``).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import _core
from .errors import ArgumentError, SharedArraysWarning, ShmcollError

DEFAULT_MIN_BYTES = 8 << 10
DEFAULT_MAX_BYTES = 4 << 20
DEFAULT_MAX_BYTES_HUGE = 64 << 20
_NOTHING = (1, 0)  # bounds that serve no request

_state: dict[str, Any] = {"installed": False, "failed": None}


def default_bounds() -> tuple[int, int]:
    """The default (min_bytes, max_bytes) in this process: max_bytes is
    ``DEFAULT_MAX_BYTES_HUGE`` where the arena's large arrays get huge pages, else
    ``DEFAULT_MAX_BYTES``."""
    _install()
    lo, hi = _core._shared_arrays_default_bounds()
    return int(lo), int(hi)


def _bounds(min_bytes: int | None, max_bytes: int | None) -> tuple[int, int]:
    dlo, dhi = default_bounds()
    lo = dlo if min_bytes is None else int(min_bytes)
    hi = dhi if max_bytes is None else int(max_bytes)
    if lo < 1:
        raise ArgumentError(f"min_bytes must be at least 1, not {min_bytes!r}")
    if hi < lo:
        raise ArgumentError(f"max_bytes ({max_bytes!r}) must not be below min_bytes ({lo})")
    return lo, hi


def _install() -> bool:
    """Create the arena and install the handler (once); False, with one warning, when the
    process's limits leave no room for an arena."""
    if _state["installed"]:
        return True
    if _state["failed"] is not None:
        return False
    try:
        reduced = _core._install_shared_arrays()
    except ArgumentError:
        raise
    except ShmcollError as e:
        _state["failed"] = str(e)
        warnings.warn(
            f"shmcoll: NumPy arrays stay private to this process (no shared-array arena: {e})",
            SharedArraysWarning,
            stacklevel=3,
        )
        return False
    if reduced:
        warnings.warn(f"shmcoll: the shared-array arena is {reduced}", SharedArraysWarning, stacklevel=3)
    _state["installed"] = True
    return True


def _enable_by_default() -> None:
    """At import: on unless SHMCOLL_SHARED_ARRAYS says off. A bad setting warns instead of
    failing the import (the explicit calls raise)."""
    raw = os.environ.get("SHMCOLL_SHARED_ARRAYS", "").strip().lower()
    if raw in ("0", "off", "false", "no"):
        return
    try:
        if raw not in ("", "1", "on", "true", "yes"):
            raise ArgumentError(f"environment: SHMCOLL_SHARED_ARRAYS={raw!r}: expected 0/off or 1/on")
        if _install():
            # After the arena exists: the default upper bound depends on its huge pages.
            lo, hi = _core._shared_arrays_env_bounds()
            _core._shared_arrays_bounds(lo, hi)
    except ArgumentError as e:
        warnings.warn(f"shmcoll: shared arrays off: {e}", SharedArraysWarning, stacklevel=2)


@contextlib.contextmanager
def shared_arrays(min_bytes: int | None = None, max_bytes: int | None = None) -> Iterator[None]:
    """Within the block, NumPy arrays of ``min_bytes <= nbytes <= max_bytes`` come from the
    shared arena (process-wide; the previous bounds return after it)."""
    lo, hi = _bounds(min_bytes, max_bytes)
    old = _core._shared_arrays_bounds(lo, hi) if _install() else None
    try:
        yield
    finally:
        if old is not None:
            _core._shared_arrays_bounds(*old)


@contextlib.contextmanager
def private_arrays() -> Iterator[None]:
    """Within the block, NumPy allocates every array itself (process-wide)."""
    old = _core._shared_arrays_bounds(*_NOTHING)
    try:
        yield
    finally:
        _core._shared_arrays_bounds(*old)


def enable_shared_arrays(min_bytes: int | None = None, max_bytes: int | None = None) -> None:
    """Serve NumPy arrays of ``min_bytes <= nbytes <= max_bytes`` from the shared arena from
    now on (the default after import, with the environment's bounds)."""
    lo, hi = _bounds(min_bytes, max_bytes)
    if _install():
        _core._shared_arrays_bounds(lo, hi)


def disable_shared_arrays() -> None:
    """NumPy allocates every new array itself from now on; arrays already in the arena
    keep working."""
    _core._shared_arrays_bounds(*_NOTHING)


def in_shared_arena(a: Any) -> bool:
    """Whether the data of array `a` lies in this process's shared arena."""
    arr = np.asarray(a)
    return arr.nbytes > 0 and bool(_core._in_shared_arena(arr.__array_interface__["data"][0]))


def shared_arrays_info() -> dict[str, Any]:
    """The arena's counters: exists, installed, capacity, in_use (bytes of live arrays),
    cached (bytes of freed blocks kept for reuse), resident (bytes of the memfd in memory),
    served and refused (allocations), huge_pages (whether its large arrays get huge pages)
    and huge_pages_setting (the kernel setting that decided it), min_bytes and max_bytes
    (the bounds in force, None when it serves nothing)."""
    return dict(_core.shared_arrays_info())


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_BYTES_HUGE",
    "DEFAULT_MIN_BYTES",
    "default_bounds",
    "disable_shared_arrays",
    "enable_shared_arrays",
    "in_shared_arena",
    "private_arrays",
    "shared_arrays",
    "shared_arrays_info",
]
