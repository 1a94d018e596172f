"""Ordinary NumPy arrays that peers can reach directly: NumPy's allocator (NEP 49) backed by
a shared arena.

A collective on a private NumPy array reaches the peers' memory through kernel copies
(CMA), which cost a system call and page pinning per transfer and, for large arrays, a
read of every destination line. Arrays in the shared heap (``comm.empty``) avoid that,
but code has to allocate them there. Inside ``shared_arrays()``, every array NumPy
allocates with at least ``min_bytes`` of data (``np.empty``, ``np.zeros``, results of
arithmetic, ``np.concatenate``...) comes from this process's arena instead, a memfd that
the peers of every communicator created afterwards map; collectives on those arrays take
the same single-copy paths as heap arrays. Smaller arrays are NumPy's as usual.

    with shmcoll.shared_arrays():
        comm = shmcoll.Comm(MPI.COMM_WORLD)   # created inside: it maps the peers' arenas
        x = np.random.default_rng().random(1 << 22)
        comm.Allreduce(x, y := np.empty_like(x))

Rules:

- Create the communicator after the arena exists (inside the block, or after
  ``enable_shared_arrays()``): a communicator maps the arenas its ranks had when it was
  created. Arrays in an arena a communicator does not know are served as private
  arrays, correctly but through CMA.
- The handler applies to the current thread's context (NumPy keeps it in a
  ``contextvars.ContextVar``), so arrays allocated by other threads are NumPy's own. The
  threshold is process-wide: the block entered last sets it, until it ends.
- Arrays keep working after the block ends and after the communicator is freed: the arena
  lives as long as the process. Freed blocks are reused; freed blocks of 32 MiB or more
  are given back to the kernel.
- fork(): the arena is not inherited (MADV_DONTFORK, as for the PMPI library's arena). A
  forked child that touches its parent's arena arrays crashes; one that only execs, or
  uses its own arrays, is unaffected. Prefer the ``spawn`` or ``forkserver`` start
  methods of ``multiprocessing`` with shared arrays.
- ``SHMCOLL_ARENA_BYTES`` sets the arena's size (default 64 GiB of address space; only
  touched pages are memory). A request the arena cannot serve is NumPy's (counted as
  ``refused`` in ``shared_arrays_info()``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import _core

DEFAULT_MIN_BYTES = 16 << 10


def _check_min(min_bytes: int) -> int:
    n = int(min_bytes)
    if n < 1:
        from .errors import ArgumentError

        raise ArgumentError(f"min_bytes must be at least 1, not {min_bytes!r}")
    return n


@contextlib.contextmanager
def shared_arrays(min_bytes: int = DEFAULT_MIN_BYTES) -> Iterator[None]:
    """Within the block, NumPy arrays of at least `min_bytes` are allocated in the shared
    arena (see the module documentation); the previous allocator is restored after it."""
    old, old_min = _core._set_shared_arrays(_check_min(min_bytes))
    try:
        yield
    finally:
        _core._restore_handler(old, old_min)


def enable_shared_arrays(min_bytes: int = DEFAULT_MIN_BYTES) -> None:
    """``shared_arrays()`` for the rest of the current context (a script's main thread)."""
    _core._set_shared_arrays(_check_min(min_bytes))


def in_shared_arena(a: Any) -> bool:
    """Whether the data of array `a` lies in this process's shared arena."""
    arr = np.asarray(a)
    return arr.nbytes > 0 and bool(_core._in_shared_arena(arr.__array_interface__["data"][0]))


def shared_arrays_info() -> dict[str, Any]:
    """The arena's counters: exists, capacity, in_use (bytes of live arrays), cached (bytes
    of freed blocks kept for reuse), served and refused (allocations), min_bytes (the
    active threshold, None if never enabled)."""
    return dict(_core.shared_arrays_info())


__all__ = [
    "DEFAULT_MIN_BYTES",
    "enable_shared_arrays",
    "in_shared_arena",
    "shared_arrays",
    "shared_arrays_info",
]
