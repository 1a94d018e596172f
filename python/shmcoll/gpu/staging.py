"""Buffers that carry compressed bytes between a GPU and the host collectives, reused from
call to call: device scratch from the caller's CuPy memory pool, and page-locked host
buffers under a bound that follows the recent calls.

Model. Every transfer and kernel of a compressed collective runs on the caller's current
stream (CuPy's; the DDP hook makes torch's current stream CuPy's, see torch_hooks.py), so a
device buffer reused by the next call on the same stream is ordered after every use of it
by the previous one; a buffer is therefore reused per (tag, stream), never across streams.
Device memory comes from ``cupy.empty``: the allocator the caller set (CuPy's pool by
default), so it is counted and freed where the caller's other arrays are.

Page-locked memory is slow to allocate and taken out of the host's pageable memory, so the
pool keeps one buffer per tag, at most twice the largest request of the tag's last
:data:`WINDOW` calls (a buffer larger than that is given back and a fitting one allocated:
the pool shrinks after a burst of large calls), frees the buffers of tags idle for
:data:`WINDOW` calls, and never keeps more than ``SHMCOLL_PINNED_MAX_BYTES`` in all (a
request above it is served by a buffer freed after use). A host-to-device copy out of a
pinned buffer runs asynchronously; the buffer's event is waited on before the buffer is
written again or freed.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..envvars import env_whole

#: The calls over which a tag's largest request is remembered, and after which an unused
#: tag's buffer is freed.
WINDOW = 64
#: The environment variable bounding the page-locked bytes kept between calls.
ENV_PINNED_MAX = "SHMCOLL_PINNED_MAX_BYTES"
#: Its default: 1 GiB.
DEFAULT_PINNED_MAX = 1 << 30


def current_stream() -> Any:
    """CuPy's current stream: the caller's, on which every kernel and copy is issued."""
    import cupy  # type: ignore[import-not-found]

    return cupy.cuda.get_current_stream()


@dataclass
class _Pinned:
    ptr: Any  # cupy.cuda.PinnedMemoryPointer
    size: int
    last_call: int
    recent: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=WINDOW))
    event: Any = None  # the event after the last asynchronous copy out of it


class PinnedPool:
    """Page-locked host buffers by tag, bounded as the module documentation says."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self._max = max_bytes
        self._bufs: dict[str, _Pinned] = {}
        self._calls = 0
        #: Allocations made (for tests and the selftest: a steady state makes none).
        self.allocations = 0

    def max_bytes(self) -> int:
        """The bound on kept bytes: the constructor's, else the environment's, else 1 GiB."""
        if self._max is not None:
            return self._max
        env = env_whole(ENV_PINNED_MAX, 0, 1 << 48)
        return DEFAULT_PINNED_MAX if env is None else env

    def kept_bytes(self) -> int:
        """Page-locked bytes held between calls."""
        return sum(b.size for b in self._bufs.values())

    def get(self, tag: str, nbytes: int) -> np.ndarray:
        """A page-locked uint8 host array of exactly `nbytes`, free to write (any earlier
        asynchronous copy out of it has completed)."""
        import cupy

        self._calls += 1
        for idle in [t for t, b in self._bufs.items() if t != tag and self._calls - b.last_call > WINDOW]:
            self._release(idle)
        b = self._bufs.get(tag)
        size = nbytes
        recent: collections.deque[int] = collections.deque(maxlen=WINDOW)
        if b is not None:
            b.recent.append(nbytes)
            b.last_call = self._calls
            if b.size >= nbytes and b.size <= 2 * max(b.recent):
                if b.event is not None:
                    b.event.synchronize()
                    b.event = None
                return np.frombuffer(b.ptr, np.uint8, nbytes)
            if b.size < nbytes:
                # Growing: an eighth more, so that sizes that drift upwards (a variable-size
                # codec's) do not allocate on every call; within the bound of twice the recent.
                size = nbytes + nbytes // 8
            recent = b.recent
            self._release(tag)
        mem = cupy.cuda.PinnedMemoryPointer(cupy.cuda.PinnedMemory(max(size, 1)), 0)
        self.allocations += 1
        if self.kept_bytes() + size <= self.max_bytes():
            kept = _Pinned(mem, size, self._calls, recent)
            if not recent:
                kept.recent.append(nbytes)
            self._bufs[tag] = kept
        return np.frombuffer(mem, np.uint8, nbytes)

    def copied_out(self, tag: str, event: Any) -> None:
        """Note that an asynchronous copy out of `tag`'s buffer completes at `event`: a kept
        buffer waits for it before its next use; one the bound did not let the pool keep is
        freed when its last view goes, so the copy is waited for now."""
        b = self._bufs.get(tag)
        if b is not None:
            b.event = event
        else:
            event.synchronize()

    def _release(self, tag: str) -> None:
        b = self._bufs.pop(tag)
        if b.event is not None:
            b.event.synchronize()


class DeviceScratch:
    """Device uint8 buffers by (tag, stream), grown as needed and reused by later calls on
    the same stream (see the module documentation); allocated with ``cupy.empty``."""

    def __init__(self) -> None:
        self._bufs: dict[tuple[str, int], Any] = {}
        #: Requests served by a kept buffer, and allocations.
        self.reused = 0
        self.allocations = 0

    def get(self, tag: str, nbytes: int) -> Any:
        """A device uint8 array of exactly `nbytes` for the current stream."""
        import cupy

        key = (tag, int(current_stream().ptr))
        b = self._bufs.get(key)
        if b is None or b.size < nbytes:
            # An eighth more when growing, as the pinned pool does.
            b = cupy.empty(max(nbytes + (nbytes // 8 if b is not None else 0), 1), cupy.uint8)
            self._bufs[key] = b
            self.allocations += 1
        else:
            self.reused += 1
        return b[:nbytes]

    def clear(self) -> None:
        """Give every buffer back to the caller's allocator."""
        self._bufs.clear()


#: The process's pools (the collectives of every communicator share them).
pinned = PinnedPool()
scratch = DeviceScratch()
