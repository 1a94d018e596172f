"""`shmcoll.Comm`: a node communicator with mpi4py's method names and buffer specs.

Migrating is one line: ``comm = shmcoll.Comm(MPI.COMM_WORLD)`` and the existing
``comm.Alltoall(sendbuf, recvbuf)`` calls run on shared memory. Arrays from
``comm.empty()`` / ``comm.zeros()`` live in the shared heap, where peers read and write them
directly (one copy instead of two).

The hot methods (``Alltoall``, ``Barrier``) are implemented by the native base class, so a
call goes from Python straight into Rust; this module adds the bootstrap and the rest.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import numpy as np

from . import _core
from .buffers import is_in_place, parse_vector
from .collectives import Collectives
from .envvars import parse_whole
from .errors import ArgumentError, BadBufferError, ShmcollError, UnsupportedError, as_shmcoll_error
from .objects import ObjectCollectives
from .ops import mpi_ops_by_id
from .passthrough import MPI4PY_NAMES, forward_missing, forward_type, lookup
from .persistent import Persistent
from .tuning.lookup import INTERNAL

#: Environment variables the standalone launcher (`shmcoll run`, `shmcoll.spawn`) sets.
ENV_SEGMENT = "SHMCOLL_SEGMENT"
ENV_RANK = "SHMCOLL_RANK"
ENV_SIZE = "SHMCOLL_SIZE"

#: Ranks a launcher may number (the segment checks the rank against its own size).
MAX_LAUNCH_RANKS = 1 << 20


def _launch_rank() -> int:
    """This process's rank as the standalone launcher set it (ArgumentError if garbled)."""
    return parse_whole(ENV_RANK, os.environ.get(ENV_RANK, ""), 0, MAX_LAUNCH_RANKS - 1)


#: Variables that MPI launchers set in every rank's environment.
_MPI_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID")

#: Bytes reserved for a segment name when it is sent through a communicator.
_NAME_BYTES = 256


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
_world: weakref.ref[Comm] | None = None

#: Every communicator of this process that is not freed (see `_abort_on_uncaught`).
_live: weakref.WeakSet[Comm] = weakref.WeakSet()


def _abort_on_uncaught(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    """An exception that ends the process (Ctrl-C between two calls, say) first aborts its
    communicators, so that peers waiting for it in a call raise PeerFailedError at once
    rather than at their deadline (this process may still be alive for a while, finalizing
    MPI). Then the previous hook reports the exception as usual."""
    for c in list(_live):
        with contextlib.suppress(Exception):
            c._abort(f"its process ended with {exc_type.__name__}")
    _previous_excepthook(exc_type, exc, tb)


_previous_excepthook = sys.excepthook
sys.excepthook = _abort_on_uncaught


def _mpi_segment(mpi_comm: Any) -> Any:
    """Create (rank 0) or open the segment for the ranks of `mpi_comm`; collective."""
    from mpi4py import MPI

    if mpi_comm.Is_inter():
        raise UnsupportedError("inter-communicators are not supported; use an intra-communicator")
    node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=mpi_comm.Get_rank())
    try:
        spans_nodes = node.Get_size() != mpi_comm.Get_size()
    finally:
        node.Free()
    if mpi_comm.allreduce(spans_nodes, op=MPI.LOR):
        raise UnsupportedError(
            "this communicator spans several nodes; shmcoll.Comm serves ranks of one node "
            "(split with MPI.COMM_TYPE_SHARED, or wait for the hierarchical path)"
        )
    rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
    handle = None
    name_or_error: Any = None
    if rank == 0:
        try:
            handle = _core.SegmentHandle(size)
            name_or_error = handle.name
        except ShmcollError as e:
            name_or_error = e
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
    failed = [e for e in mpi_comm.allgather(None if err is None else f"rank {rank}: {err}") if e]
    if failed:
        if err is not None:
            raise err
        raise ShmcollError("could not create the node communicator: " + "; ".join(failed))
    return seg


def _dup_segment(parent: Comm) -> Any:
    """A new segment for all ranks of `parent` (collective over `parent`)."""
    seg, _, _ = _split_segment(parent, 0, parent.rank)
    return seg


def _split_segment(parent: Comm, color: int, key: int) -> tuple[Any, int, int]:
    """(segment, rank, size) of this rank's group: the ranks of `parent` with the same
    `color`, ordered by (key, parent rank). The first of each group creates the segment
    and sends its name to the group through `parent`; collective over `parent`."""
    p, rank = parent.size, parent.rank
    mine = np.array([color, key], np.int64)
    everyone = np.empty(2 * p, np.int64)
    parent.Alltoall(np.tile(mine, p), everyone, **INTERNAL)
    pairs = everyone.reshape(p, 2)
    group = sorted((int(pairs[j, 1]), j) for j in range(p) if pairs[j, 0] == color)
    members = [j for _, j in group]
    leader = members[0]
    send = np.zeros((p, _NAME_BYTES), np.uint8)
    handle = None
    if rank == leader:
        try:
            handle = _core.SegmentHandle(len(members))
            msg = b"N" + handle.name.encode()
        except ShmcollError as e:
            msg = b"E" + str(e).encode()[: _NAME_BYTES - 2]
        for j in members:
            send[j, : len(msg)] = np.frombuffer(msg, np.uint8)
    recv = np.zeros_like(send)
    parent.Alltoall(send, recv, **INTERNAL)
    msg = bytes(recv[leader]).rstrip(b"\0")
    err: BaseException | None = None
    if msg[:1] == b"E":
        err = ShmcollError(f"rank {leader} could not create a segment: {msg[1:].decode(errors='replace')}")
    seg = handle
    try:
        if seg is None and err is None:
            seg = _core.SegmentHandle.open(msg[1:].decode())
    except ShmcollError as e:
        err = e
    ok = np.full(p, 0 if err is None else 1, np.uint8)
    flags = np.empty_like(ok)
    parent.Alltoall(ok, flags, **INTERNAL)
    if flags.any():
        if err is not None:
            raise err
        bad = [int(r) for r in np.flatnonzero(flags)]
        raise ShmcollError(f"ranks {bad} could not map their new segment")
    return seg, members.index(rank), len(members)


class _Prepared(NamedTuple):
    """A segment and a rank in it (what `Comm.Split` hands to the constructor)."""

    segment: Any
    rank: int
    mpi: Any


def owning(comm: Any) -> Any:
    """`comm` (a Comm or HierComm just made over an MPI communicator of its own) made the
    owner of that MPI communicator, which its Free then frees."""
    comm._owned_mpi = comm.mpi_comm
    return comm


def free_owned(comm: Any) -> None:
    """Free the MPI communicator `comm` owns, once, unless MPI is finalized already."""
    owned, comm._owned_mpi = comm._owned_mpi, None
    if owned is not None:
        from mpi4py import MPI

        if not MPI.Is_finalized():
            owned.Free()


class Comm(Collectives, Persistent, _core.CommBase, ObjectCollectives):
    """A communicator over the processes of one node.

    ``Comm(mpi_comm)`` wraps an mpi4py intra-communicator whose ranks share a node (rank
    numbers are kept). ``Comm()`` uses ``MPI.COMM_WORLD`` under an MPI launcher, the
    communicator of ``shmcoll run`` / ``shmcoll.spawn`` under the standalone launcher (a
    duplicate of it from the second call on), and otherwise a communicator of this
    process alone.

    Methods with mpi4py's names: ``Alltoall``, ``Alltoallv``, ``Barrier``, ``Get_rank``,
    ``Get_size``, ``Dup``, ``Free``; ``rank`` and ``size`` properties; usable as a
    context manager.
    """

    _mpi: Any

    def __new__(cls, comm: Any = None) -> Any:
        # A communicator whose ranks span nodes (or fake nodes, SHMCOLL_NODE_SPLIT) is
        # served by HierComm: shared memory inside nodes, MPI between them.
        mpi = comm
        if mpi is None and ENV_SEGMENT not in os.environ and under_mpi_launcher():
            from mpi4py import MPI

            mpi = MPI.COMM_WORLD
        if mpi is not None and not isinstance(mpi, Comm) and hasattr(mpi, "Split_type"):
            from .hierarchy import HierComm, spans_nodes

            if spans_nodes(mpi):
                return HierComm(mpi)
        return super().__new__(cls, comm)

    def __init__(self, comm: Any = None) -> None:
        self._mpi = None
        self._owned_mpi: Any = None  # an MPI communicator this one made (Dup, Split)
        self._join_for(comm)
        _live.add(self)
        mpi_ops_by_id()  # lets the native fast path recognise mpi4py's operators
        from .tuning import bind

        try:
            self._tuning = bind(self)
        except BaseException:
            self.Free()
            raise

    def _join_for(self, comm: Any) -> None:
        global _world
        if isinstance(comm, _Prepared):
            self._join(comm.segment, comm.rank)
            self._mpi = comm.mpi
            if comm.mpi is not None:
                forward_type(type(self), type(comm.mpi))
            return
        if comm is None:
            if ENV_SEGMENT in os.environ:
                with _world_lock:
                    world = _world() if _world is not None else None
                    if world is None or world.freed:
                        self._join(os.environ[ENV_SEGMENT], _launch_rank())
                        _world = weakref.ref(self)
                        return
                self._join(_dup_segment(world), world.rank)
                return
            if under_mpi_launcher():
                from mpi4py import MPI

                comm = MPI.COMM_WORLD
            else:
                self._join(_core.SegmentHandle(1), 0)
                return
        if isinstance(comm, Comm):
            self._join(_dup_segment(comm), comm.rank)
            self._mpi = comm._mpi
        elif hasattr(comm, "Split_type") and hasattr(comm, "Get_rank"):
            self._mpi = comm
            forward_type(type(self), type(comm))
            self._join(_mpi_segment(comm), comm.Get_rank())
        else:
            raise ArgumentError(f"expected an mpi4py communicator or None, got {type(comm).__name__}")

    # -- identity ---------------------------------------------------------------------
    @property
    def mpi_comm(self) -> Any:
        """The mpi4py communicator this one wraps, or None (standalone)."""
        return self._mpi

    def __repr__(self) -> str:
        state = "freed" if self.freed else f"rank {self.rank} of {self.size}"
        return f"<shmcoll.Comm {state}>"

    def Dup(self) -> Comm:
        """A new communicator over the same ranks, with its own segment and, when this one
        wraps MPI, its own MPI communicator (MPI_Comm_dup, so that point-to-point traffic
        on the two never matches), which Free frees (collective)."""
        if self._mpi is None:
            return Comm(self)
        return owning(Comm(self._mpi.Dup()))

    def Clone(self) -> Comm:
        """As Dup (mpi4py's Clone keeps the communicator's type: so does this one)."""
        return self.Dup()

    def Split(self, color: int = 0, key: int = 0) -> Comm | None:
        """Communicators of the ranks with the same `color`, ranked by (`key`, rank), as
        mpi4py's Split (collective). A negative color (MPI.UNDEFINED) gives None."""
        if self._mpi is not None:
            from mpi4py import MPI

            sub = self._mpi.Split(MPI.UNDEFINED if color < 0 else color, key)
            return None if sub == MPI.COMM_NULL else owning(Comm(sub))
        seg, rank, _ = _split_segment(self, int(color), int(key))
        if color < 0:
            seg.unlink()
            return None
        return Comm(_Prepared(seg, rank, None))

    # -- collectives ------------------------------------------------------------------
    def _py_Alltoallv(
        self,
        sendbuf: Any,
        recvbuf: Any,
        *,
        algorithm: str | None = None,
        order: str | None = None,
        store: str | None = None,
    ) -> None:
        """Alltoall with per-rank counts and displacements (mpi4py's vector specs:
        ``[buf, counts, displs, datatype]``, ``[buf, (counts, displs), datatype]``,
        ``[buf, counts, datatype]``); `sendbuf` may be IN_PLACE."""
        try:
            r = parse_vector(recvbuf, self.size)
            s = None if is_in_place(sendbuf) else parse_vector(sendbuf, self.size)
        except Exception as e:
            self._reject_with("Alltoallv", e)
        if s is None:
            self._alltoallv(None, r.buf, r.counts, r.displs, r.counts, r.displs, algorithm, order, store)
        else:
            self._alltoallv(s.buf, r.buf, s.counts, s.displs, r.counts, r.displs, algorithm, order, store)

    def _reject_with(self, op: str, e: BaseException) -> NoReturn:
        """Tell the peers this rank's call `op` is invalid, so that they raise instead of
        waiting, and raise `e` as a shmcoll error (`errors.as_shmcoll_error`)."""
        err = as_shmcoll_error(e)
        kind = "buffer" if isinstance(err, BadBufferError) else "argument"
        if isinstance(err, UnsupportedError):
            kind = "unsupported"
        with contextlib.suppress(ShmcollError):
            self._reject(op, f"{type(e).__name__}: {e}", kind)
        if err is e:
            raise e
        raise err from e

    # -- shared heap ------------------------------------------------------------------
    def empty(self, shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
        """An uninitialised array in the shared heap (peers access it directly)."""
        dt = np.dtype(dtype)
        shape_t = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape_t):
            raise ArgumentError(f"negative dimension in shape {shape_t}")
        if order not in ("C", "F"):
            raise ArgumentError(f"order must be 'C' or 'F', not {order!r}")
        count = int(np.prod(shape_t, dtype=np.int64))
        block = self._heap_alloc(count * dt.itemsize)
        flat = np.frombuffer(block, dtype=dt, count=count)  # type: ignore[call-overload]
        return flat.reshape(shape_t, order=order)

    def zeros(self, shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
        """A zero-filled array in the shared heap."""
        a = self.empty(shape, dtype, order)
        a[...] = 0
        return a

    def empty_like(self, a: np.ndarray) -> np.ndarray:
        """An uninitialised heap array with the shape and dtype of `a`."""
        return self.empty(a.shape, a.dtype)

    def in_heap(self, buf: Any) -> bool:
        """Whether `buf` lives in the shared heap (and so qualifies for single-copy paths)."""
        return bool(self._in_heap(buf))

    def heap_usage(self) -> tuple[int, int]:
        """(bytes in use, capacity) of this rank's share of the heap."""
        used, cap = self._heap_usage()
        return int(used), int(cap)

    # -- introspection ----------------------------------------------------------------
    def last_choice(self) -> Choice | None:
        """What served the last successful collective of this communicator."""
        c = self._last_choice()
        return None if c is None else Choice(*c)

    def stats(self) -> dict[str, int]:
        """Calls so far, per algorithm, rejected calls, and the yields spent letting
        CPU-mates that arrived first leave a call first (``leave_yields``)."""
        return dict(self._stats())

    def config(self) -> dict[str, Any]:
        """Segment sizes and waiting settings as resolved for this communicator."""
        return dict(self._config())

    def selection(self) -> tuple[str, list[Any]]:
        """The bound table: (source: a file path or "model", ranges), each range
        ``(min_bytes, max_bytes or None, [(algorithm, order, store, nt_threshold, chunk_bytes), ...])``;
        the first candidate that can serve a call wins."""
        source, rows = self._table()
        return str(source), list(rows)

    if TYPE_CHECKING:  # mpi4py's other methods (forwarded by descriptors, see passthrough)

        def __getattr__(self, name: str) -> Any: ...

    def _passthrough(self, name: str) -> Any:
        """mpi4py's methods that shmcoll does not implement, from the wrapped MPI
        communicator: collectives run on MPI (announced once, counted), the rest is MPI's
        own (see shmcoll.passthrough)."""
        return lookup("shmcoll.Comm", self._mpi, name)

    # -- lifetime ---------------------------------------------------------------------
    def Free(self) -> None:
        """Leave the communicator (the segment goes once nobody maps it; heap arrays stay
        valid while referenced). An MPI communicator that Dup or Split made for this one
        is freed too, which MPI makes collective."""
        super().Free()
        free_owned(self)

    def free(self) -> None:
        """Alias of Free (mpi4py 4's lowercase name; the wrapped MPI communicator is the
        caller's to free)."""
        self.Free()

    def __enter__(self) -> Comm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.Free()


forward_missing(Comm, MPI4PY_NAMES)
