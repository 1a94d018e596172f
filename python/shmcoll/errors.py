"""The exception hierarchy of shmcoll.

Every error shmcoll raises derives from :class:`ShmcollError` and, where one fits, from the
matching built-in exception, so that ``except ValueError`` keeps working for code written
against mpi4py. The native module maps its one error enum onto these classes.
"""

from __future__ import annotations

import sys
from typing import Any


class ShmcollError(Exception):
    """Base class of every shmcoll error."""


class ArgumentError(ShmcollError, ValueError):
    """A bad argument this rank could see by itself (counts, names, settings)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type: a float count or displacement, a string root, an
    algorithm name that is not a string."""


class BadBufferError(ShmcollError, BufferError):
    """A buffer that cannot serve: read-only, non-contiguous, too small or overlapping."""


class MismatchError(ShmcollError, ValueError):
    """Ranks disagree about a call (block sizes, operation, forced choices)."""


class PeerRejectedError(ShmcollError, ValueError):
    """Another rank rejected its part of the call; nothing was transferred.

    ``rank`` is the rank that rejected it.
    """

    rank: int = -1


class UnsupportedError(ShmcollError, NotImplementedError):
    """Something shmcoll does not do (yet)."""


class ServedByMPI(UnsupportedError):
    """What this rank's call asks for is not shmcoll's to serve (a derived datatype with
    gaps, an operator shmcoll does not implement, a buffer in device memory, MPI.BOTTOM):
    the call runs on the wrapped MPI communicator instead, where there is one
    (`shmcoll.Comm._on_mpi`). Raised only where there is none."""


class AlgorithmError(ShmcollError, ValueError):
    """A forced algorithm cannot serve this call (e.g. ``pull`` without heap buffers)."""


class CommBrokenError(ShmcollError, RuntimeError):
    """An earlier fatal failure (timeout, dead peer) left the communicator unusable."""


class InternalError(CommBrokenError):
    """A bug of shmcoll (a panic in its Rust core), caught where it would have crossed into
    Python: the call failed on every rank and the communicator is unusable. Please report
    it with the message."""


class CallsDivergedError(MismatchError, CommBrokenError):
    """Ranks disagreed about a one-sided call (a small Bcast, which the root completes
    without waiting) that some of them had already completed. It is raised where the
    disagreement is seen: at that call on a rank that waited for the root, or at its next
    call on the others. Their sequences of calls no longer match, so the communicator is
    unusable afterwards."""


class ShmcollTimeoutError(ShmcollError, TimeoutError):
    """A peer did not arrive within ``SHMCOLL_TIMEOUT`` seconds."""


class PeerFailedError(ShmcollError, RuntimeError):
    """A peer process died, aborted the communicator, or failed while it moved the call's
    data (a kernel copy into this rank's buffers refused): the receive buffers may be
    incomplete, and the communicator is unusable.

    ``rank`` is the failed rank where it is known, else -1.
    """

    rank: int = -1


class HeapExhaustedError(ShmcollError, MemoryError):
    """The shared heap has no free range large enough (see ``SHMCOLL_HEAP_BYTES``)."""


class SegmentError(ShmcollError, OSError):
    """Creating, opening or mapping the shared-memory segment failed."""


class TuningTableError(ShmcollError, ValueError):
    """A tuning table that cannot be used: unreadable, not valid against the schema, or
    naming unknown algorithms or overlapping ranges. The message names the file and the
    offending entry."""


class ForeignTableWarning(UserWarning):
    """A tuning table measured on other hardware (its fingerprint differs) is in use."""


class SharedArraysWarning(UserWarning):
    """NumPy arrays are not (all) served from the shared-array arena as configured: the
    process's limits made the arena smaller or left no room for it, or a setting was bad."""


class CodecError(ShmcollError, ValueError):
    """A codec parameter outside its domain, an output buffer too small, or a corrupt stream."""


class CodecTypeError(CodecError, TypeError):
    """Data no codec can take: an array of Python objects (numcodecs' contract: TypeError)."""


class SpawnError(ShmcollError, RuntimeError):
    """One or more ranks of :func:`shmcoll.spawn` failed; the message holds their tracebacks."""


_as_mpi: dict[tuple[type, Any], type] = {}


def as_mpi_exception(err: ShmcollError, error_class: str) -> ShmcollError:
    """`err` as an instance of its class and of mpi4py's ``MPI.Exception`` too, of MPI's
    error class `error_class` ("ERR_ROOT", ...), where mpi4py is loaded: code written
    against mpi4py catches it as it caught mpi4py's (``Get_error_class()`` included);
    ``str()`` is shmcoll's message. `err` itself without mpi4py."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return err
    base = type(err)
    cls = _as_mpi.get((base, mpi))
    if cls is None:
        cls = type(
            base.__name__,
            (base, mpi.Exception),
            {
                "__str__": lambda self: self.message,
                "__repr__": lambda self: f"{base.__name__}({self.message!r})",
                "__module__": base.__module__,
                "__doc__": base.__doc__,
            },
        )
        _as_mpi[(base, mpi)] = cls
    out = cls()
    out.args = (getattr(mpi, error_class),)  # MPI.Exception's error code is args[0]
    out.message = str(err)
    return out


def as_shmcoll_error(e: BaseException) -> BaseException:
    """`e` as the error a rank raises for a call it rejected: itself when it is a shmcoll
    error or not about the arguments at all (KeyboardInterrupt, MemoryError...), else the
    shmcoll class of the same built-in family (TypeError: ArgumentTypeError, BufferError:
    BadBufferError, NotImplementedError: UnsupportedError, any other: ArgumentError) with
    `e` as its cause. Its peers raise PeerRejectedError naming the rank, so that
    ``except ShmcollError`` sees every rank fail."""
    if isinstance(e, ShmcollError) or not isinstance(e, Exception) or isinstance(e, MemoryError):
        return e
    cls: type[ShmcollError]
    if isinstance(e, TypeError):
        cls = ArgumentTypeError
    elif isinstance(e, BufferError):
        cls = BadBufferError
    elif isinstance(e, NotImplementedError):
        cls = UnsupportedError
    else:
        cls = ArgumentError
    err = cls(str(e) or type(e).__name__)
    err.__cause__ = e
    return err


__all__ = [
    "AlgorithmError",
    "ArgumentError",
    "ArgumentTypeError",
    "BadBufferError",
    "CallsDivergedError",
    "CodecError",
    "CodecTypeError",
    "CommBrokenError",
    "ForeignTableWarning",
    "HeapExhaustedError",
    "InternalError",
    "MismatchError",
    "PeerFailedError",
    "PeerRejectedError",
    "SegmentError",
    "ServedByMPI",
    "SharedArraysWarning",
    "ShmcollError",
    "ShmcollTimeoutError",
    "SpawnError",
    "TuningTableError",
    "UnsupportedError",
    "as_mpi_exception",
    "as_shmcoll_error",
]
