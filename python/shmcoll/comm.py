"""`shmcoll.Comm`: a node communicator with mpi4py's method names and buffer specs.

Migrating is one line: ``comm = shmcoll.Comm(MPI.COMM_WORLD)`` and the existing
``comm.Alltoall(sendbuf, recvbuf)`` calls run on shared memory. Arrays from
``comm.empty()`` / ``comm.zeros()`` live in the shared heap, where peers read and write them
directly (one copy instead of two).
"""

from __future__ import annotations

import os
import threading
from typing import Any, NamedTuple

import numpy as np

from . import _core
from .buffers import Simple, is_in_place, parse_simple, parse_vector
from .errors import ArgumentError, ShmcollError, UnsupportedError

_ndarray = np.ndarray

#: Environment variables the standalone launcher (`shmcoll run`, `shmcoll.spawn`) sets.
ENV_SEGMENT = "SHMCOLL_SEGMENT"
ENV_RANK = "SHMCOLL_RANK"
ENV_SIZE = "SHMCOLL_SIZE"

#: Variables that MPI launchers set in every rank's environment.
_MPI_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID")


class Choice(NamedTuple):
    """What served a collective: algorithm, copy order, store policy, and whether forced."""

    algorithm: str
    order: str
    store: str
    forced: bool


def under_mpi_launcher() -> bool:
    """Whether this process was started by mpiexec/mpirun/srun."""
    return any(v in os.environ for v in _MPI_LAUNCHER_VARS)


_world_lock = threading.Lock()
_world: _core.Engine | None = None


def _standalone_engine() -> _core.Engine:
    """The engine of the communicator the standalone launcher prepared (joined once)."""
    global _world
    with _world_lock:
        if _world is None or _world.freed:
            name = os.environ[ENV_SEGMENT]
            rank = int(os.environ[ENV_RANK])
            _world = _core.Engine(name, rank)
        return _world


def _mpi_engine(mpi_comm: Any) -> _core.Engine:
    """Create a segment for the ranks of `mpi_comm` (collective over it)."""
    from mpi4py import MPI

    if mpi_comm.Is_inter():
        raise UnsupportedError("inter-communicators are not supported; use an intra-communicator")
    node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=mpi_comm.Get_rank())
    try:
        spans_nodes = node.Get_size() != mpi_comm.Get_size()
    finally:
        node.Free()
    # Every rank reaches the same verdict (Split_type is collective); raise everywhere.
    spans_nodes = mpi_comm.allreduce(spans_nodes, op=MPI.LOR)
    if spans_nodes:
        raise UnsupportedError(
            "this communicator spans several nodes; shmcoll.Comm serves ranks of one node "
            "(split with MPI.COMM_TYPE_SHARED, or wait for the hierarchical path)"
        )
    rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
    handle = None
    name_or_error: Any
    if rank == 0:
        try:
            handle = _core.SegmentHandle(size)
            name_or_error = handle.name
        except ShmcollError as e:
            name_or_error = e
    else:
        name_or_error = None
    name_or_error = mpi_comm.bcast(name_or_error, root=0)
    if isinstance(name_or_error, BaseException):
        raise name_or_error
    # Map everywhere first and agree, so that a rank that cannot map the segment makes
    # every rank fail at once instead of leaving the others waiting in the handshake.
    err: BaseException | None = None
    seg = handle
    try:
        if seg is None:
            seg = _core.SegmentHandle.open(name_or_error)
    except ShmcollError as e:
        err = e
    errors = mpi_comm.allgather(None if err is None else f"rank {rank}: {err}")
    failed = [e for e in errors if e]
    if failed:
        if err is not None:
            raise err
        raise ShmcollError("could not create the node communicator: " + "; ".join(failed))
    engine = _core.Engine(seg, rank)
    return engine


class Comm:
    """A communicator over the processes of one node.

    ``Comm(mpi_comm)`` wraps an mpi4py intra-communicator whose ranks share a node (rank
    numbers are kept). ``Comm()`` uses ``MPI.COMM_WORLD`` under an MPI launcher, the
    communicator of ``shmcoll run`` / ``shmcoll.spawn`` under the standalone launcher, and
    otherwise a communicator of this process alone.
    """

    def __init__(self, comm: Any = None) -> None:
        self._mpi = None
        if comm is None:
            if ENV_SEGMENT in os.environ:
                engine = _standalone_engine()
            elif under_mpi_launcher():
                from mpi4py import MPI

                self._mpi = MPI.COMM_WORLD
                engine = _mpi_engine(MPI.COMM_WORLD)
            else:
                engine = _core.Engine(_core.SegmentHandle(1), 0)
        elif isinstance(comm, Comm):
            raise ArgumentError("already a shmcoll.Comm")
        elif hasattr(comm, "Split_type") and hasattr(comm, "Get_rank"):
            self._mpi = comm
            engine = _mpi_engine(comm)
        else:
            raise ArgumentError(f"expected an mpi4py communicator or None, got {type(comm).__name__}")
        self._engine = engine
        self._rank: int = engine.rank
        self._size: int = engine.size

    # -- identity ---------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return self._size

    @property
    def mpi_comm(self) -> Any:
        """The mpi4py communicator this one wraps, or None (standalone)."""
        return self._mpi

    def __repr__(self) -> str:
        state = "freed" if self._engine.freed else f"rank {self._rank} of {self._size}"
        return f"<shmcoll.Comm {state}>"

    # -- collectives ------------------------------------------------------------------
    def Alltoall(
        self,
        sendbuf: Any,
        recvbuf: Any,
        *,
        algorithm: str | None = None,
        order: str | None = None,
        store: str | None = None,
    ) -> None:
        """Send block j of `sendbuf` to rank j, receive block i of `recvbuf` from rank i.

        `sendbuf` may be ``shmcoll.IN_PLACE`` (or ``MPI.IN_PLACE``). The keywords force the
        algorithm ("inline", "staging", "pull", "push", "cma"), the copy order ("linear",
        "shifted", "reverse-shifted", "xor", "morton") and the store policy ("temporal",
        "nt", "hybrid"); None lets the tuning decide.
        """
        engine = self._engine
        if type(recvbuf) is _ndarray:
            # Fast path: plain arrays, counts from their lengths.
            if type(sendbuf) is _ndarray:
                engine.alltoall(sendbuf, recvbuf, None, None, algorithm, order, store)
                return
            if is_in_place(sendbuf):
                engine.alltoall(None, recvbuf, None, None, algorithm, order, store)
                return
        try:
            r = parse_simple(recvbuf, self._size)
            s: Simple | None = None if is_in_place(sendbuf) else parse_simple(sendbuf, self._size)
        except Exception as e:
            self._reject("Alltoall", e)
            raise
        engine.alltoall(
            None if s is None else s.buf,
            r.buf,
            None if s is None else s.bytes_per_rank,
            r.bytes_per_rank,
            algorithm,
            order,
            store,
        )

    def Alltoallv(
        self,
        sendbuf: Any,
        recvbuf: Any,
        *,
        algorithm: str | None = None,
        order: str | None = None,
        store: str | None = None,
    ) -> None:
        """Alltoall with per-rank counts and displacements (mpi4py's vector specs)."""
        try:
            r = parse_vector(recvbuf, self._size)
            s = None if is_in_place(sendbuf) else parse_vector(sendbuf, self._size)
        except Exception as e:
            self._reject("Alltoallv", e)
            raise
        if s is None:
            self._engine.alltoallv(
                None, r.buf, r.counts, r.displs, r.counts, r.displs, algorithm, order, store
            )
        else:
            self._engine.alltoallv(
                s.buf, r.buf, s.counts, s.displs, r.counts, r.displs, algorithm, order, store
            )

    def Barrier(self) -> None:
        """Block until every rank has called Barrier."""
        self._engine.barrier()

    barrier = Barrier

    def _reject(self, op: str, e: BaseException) -> None:
        """Tell the peers this rank's call is invalid, so that they raise instead of waiting."""
        kind = "buffer" if isinstance(e, BufferError | TypeError) else "argument"
        if isinstance(e, NotImplementedError):
            kind = "unsupported"
        try:
            self._engine.reject(op, f"{type(e).__name__}: {e}", kind)
        except ShmcollError:
            pass

    # -- shared heap ------------------------------------------------------------------
    def empty(self, shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
        """An uninitialised array in the shared heap (peers access it directly)."""
        dt = np.dtype(dtype)
        shape_t = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape_t):
            raise ArgumentError(f"negative dimension in shape {shape_t}")
        count = int(np.prod(shape_t, dtype=np.int64))
        block = self._engine.heap_alloc(count * dt.itemsize)
        flat = np.frombuffer(block, dtype=dt, count=count)
        return flat.reshape(shape_t, order=order)  # type: ignore[call-overload, no-any-return]

    def zeros(self, shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
        """A zero-filled array in the shared heap."""
        a = self.empty(shape, dtype, order)
        a[...] = 0
        return a

    def empty_like(self, a: np.ndarray) -> np.ndarray:
        return self.empty(a.shape, a.dtype)

    def in_heap(self, buf: Any) -> bool:
        """Whether `buf` lives in the shared heap (and so qualifies for single-copy paths)."""
        return bool(self._engine.in_heap(buf))

    def heap_usage(self) -> tuple[int, int]:
        """(bytes in use, capacity) of this rank's share of the heap."""
        return self._engine.heap_usage()  # type: ignore[no-any-return]

    # -- introspection ----------------------------------------------------------------
    def last_choice(self) -> Choice | None:
        """What served the last successful collective of this communicator."""
        c = self._engine.last_choice()
        return None if c is None else Choice(*c)

    def stats(self) -> dict[str, int]:
        """Calls so far, per algorithm, and rejected calls."""
        return dict(self._engine.stats())

    def config(self) -> dict[str, Any]:
        """Segment sizes and waiting settings as resolved for this communicator."""
        return dict(self._engine.config())

    def rules(self) -> list[tuple[int | None, str, str, str]]:
        """The selection rules: (max bytes per rank or None for inf, algorithm, order, store)."""
        return list(self._engine.rules())

    @property
    def cma_ok(self) -> bool:
        """Whether process_vm_readv works between all ranks (the `cma` algorithm)."""
        return bool(self._engine.cma_ok)

    # -- lifetime ---------------------------------------------------------------------
    def Free(self) -> None:
        """Leave the communicator. Heap arrays stay valid while referenced."""
        self._engine.free()

    def __enter__(self) -> Comm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.Free()
