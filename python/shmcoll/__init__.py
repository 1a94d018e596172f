"""shmcoll: fast collective communication between the processes of one node.

    from mpi4py import MPI
    import shmcoll
    comm = shmcoll.Comm(MPI.COMM_WORLD)   # the whole migration
    comm.Alltoall(sendbuf, recvbuf)        # same names and buffer specs as mpi4py

Without MPI: ``shmcoll run -n 4 script.py`` or ``shmcoll.spawn(4, fn)``.
"""

from __future__ import annotations

from typing import Any

from . import _core
from ._core import Prequest
from .buffers import IN_PLACE
from .comm import Choice, Comm
from .errors import (
    AlgorithmError,
    ArgumentError,
    ArgumentTypeError,
    BadBufferError,
    CallsDivergedError,
    CodecError,
    CommBrokenError,
    ForeignTableWarning,
    HeapExhaustedError,
    InternalError,
    MismatchError,
    PeerFailedError,
    PeerRejectedError,
    SegmentError,
    ServedByMPI,
    SharedArraysWarning,
    ShmcollError,
    ShmcollTimeoutError,
    SpawnError,
    TuningTableError,
    UnsupportedError,
)
from .hierarchy import HierComm
from .launch import spawn
from .ops import BAND, BOR, BXOR, LAND, LOR, MAX, MIN, PROD, SUM, Op
from .shared_arrays import (
    _enable_by_default,
    disable_shared_arrays,
    enable_shared_arrays,
    in_shared_arena,
    private_arrays,
    shared_arrays,
    shared_arrays_info,
)

__version__: str = _core.__version__


def copy(dst: Any, src: Any, store: str = "auto") -> None:
    """Copy `src` into `dst` (contiguous buffers of the same size in bytes).

    `store`: "temporal" (ordinary stores, data stays in cache), "nt" (streaming stores
    that bypass the cache: faster for copies larger than the cache, and they leave the
    cache to the rest of the program), "hybrid"/"auto" (streaming above
    ``SHMCOLL_NT_THRESHOLD``). The GIL is released for large copies.
    """
    _core.copy(dst, src, store)


def machine() -> dict[str, Any]:
    """The hardware as shmcoll sees it (caches, SIMD level, NT threshold)."""
    return dict(_core.machine())


def __getattr__(name: str) -> Any:
    # shmcoll.codecs on first use, so that `import shmcoll` does not import numcodecs.
    if name == "codecs":
        import importlib

        return importlib.import_module(".codecs", __name__)
    raise AttributeError(f"module 'shmcoll' has no attribute {name!r}")


__all__ = [
    "BAND",
    "BOR",
    "BXOR",
    "IN_PLACE",
    "LAND",
    "LOR",
    "MAX",
    "MIN",
    "PROD",
    "SUM",
    "AlgorithmError",
    "ArgumentError",
    "ArgumentTypeError",
    "BadBufferError",
    "CallsDivergedError",
    "Choice",
    "CodecError",
    "Comm",
    "CommBrokenError",
    "ForeignTableWarning",
    "HeapExhaustedError",
    "HierComm",
    "InternalError",
    "MismatchError",
    "Op",
    "PeerFailedError",
    "PeerRejectedError",
    "Prequest",
    "SegmentError",
    "ServedByMPI",
    "SharedArraysWarning",
    "ShmcollError",
    "ShmcollTimeoutError",
    "SpawnError",
    "TuningTableError",
    "UnsupportedError",
    "__version__",
    "copy",
    "disable_shared_arrays",
    "enable_shared_arrays",
    "in_shared_arena",
    "machine",
    "private_arrays",
    "shared_arrays",
    "shared_arrays_info",
    "spawn",
]

# NumPy arrays come from the shared-array arena from here on (shared_arrays.py).
_enable_by_default()
