"""`shmcoll.Comm`: a node communicator with mpi4py's method names and buffer specs.

Migrating is one line: ``comm = shmcoll.Comm(MPI.COMM_WORLD)`` and the existing
``comm.Alltoall(sendbuf, recvbuf)`` calls run on shared memory. Arrays from
``comm.empty()`` / ``comm.zeros()`` live in the shared heap, where peers read and write them
directly (one copy instead of two).

The collectives with mpi4py's names and ``Barrier`` are implemented by the native base
class, so a call goes from Python straight into Rust; this module adds the bootstrap and
the rest.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import _core, bootstrap, bound_tables
from .collectives import Collectives
from .envvars import parse_whole
from .errors import ArgumentError, HeapExhaustedError, UnsupportedError
from .nodes import spans_nodes
from .objects import ObjectCollectives
from .ops import mpi_ops_by_id
from .passthrough import MPI4PY_NAMES, forward_missing, forward_type, lookup
from .persistent import Persistent

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


def _after_fork_in_child() -> None:
    """A child of fork (os.fork, multiprocessing's 'fork', shmcoll.spawn with it) inherits
    its parent's communicators, mapped shared: a call on one would act as the parent's
    rank, and leaving it would write the parent's state. So each is abandoned (every call
    raises), and the launcher's communicator, with the variables that name the parent's
    place in it, is not this process's: shmcoll.Comm() here makes a communicator of its own
    (shmcoll.spawn's children are given theirs after the fork)."""
    global _world
    _world = None
    for var in (ENV_SEGMENT, ENV_RANK, ENV_SIZE):
        os.environ.pop(var, None)
    for c in list(_live):
        with contextlib.suppress(Exception):
            c._abandon_after_fork()
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


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


class _Prepared(NamedTuple):
    """What Dup and Split hand to the constructor: the settled segment and MPI's side."""

    settled: bootstrap.Settled
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


#: What serves a communicator whose ranks span nodes: shmcoll.hierarchy's HierComm, which
#: builds on Comm and so registers itself here (serve_spanning_nodes_with) at import
#: instead of being imported by this module. It is called with the MPI communicator and
#: the SHMCOLL_NODE_SPLIT every rank agreed on (None: MPI's nodes).
_spanning_nodes: Callable[[Any, int | None], Any] | None = None


def serve_spanning_nodes_with(factory: Callable[[Any, int | None], Any]) -> None:
    global _spanning_nodes
    _spanning_nodes = factory


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
    _survey: bootstrap.Settled | None

    def __new__(cls, comm: Any = None) -> Any:
        # A communicator whose ranks span nodes (or fake nodes, SHMCOLL_NODE_SPLIT) is
        # served by HierComm: shared memory inside nodes, MPI between them. Over MPI, the
        # creation exchange (`bootstrap.survey`) tells whether the ranks share a node;
        # only when it says no does MPI's own split decide. The exchange runs first on
        # every rank whatever its environment, and brings the SHMCOLL_NODE_SPLIT every
        # rank agreed on (or raises on every rank), so that all take the same path.
        mpi = comm
        if mpi is None and ENV_SEGMENT not in os.environ and under_mpi_launcher():
            from mpi4py import MPI

            mpi = MPI.COMM_WORLD
        survey = None
        if mpi is not None and not isinstance(mpi, Comm) and hasattr(mpi, "Split_type"):
            if mpi.Is_inter():
                raise UnsupportedError("inter-communicators are not supported; use an intra-communicator")
            survey = bootstrap.survey(mpi)
            k = survey.node_split
            if k is not None:
                several = spans_nodes(mpi, k)
            else:
                several = not survey.one_node and spans_nodes(mpi, None)
            if several:
                if _spanning_nodes is None:
                    raise UnsupportedError("communicators that span nodes need shmcoll.hierarchy")
                # The survey's pooled segment, if any, is not this communicator's: dropped.
                return _spanning_nodes(mpi, k)
        obj = super().__new__(cls, comm)
        obj._survey = survey
        return obj

    def __init__(self, comm: Any = None) -> None:
        self._mpi = None
        self._owned_mpi: Any = None  # an MPI communicator this one made (Dup, Split)
        agreed = self._join_for(comm)
        _live.add(self)
        mpi_ops_by_id()  # lets the native fast path recognise mpi4py's operators
        try:
            self._tuning = bound_tables.bind_tables(self, agreed)
        except BaseException:
            self.Free()
            raise

    def _join_for(self, comm: Any) -> bound_tables.Agreed | bound_tables.Unsettled:
        """Join the segment for `comm`; what the creation exchange settled about the
        tuning tables (UNSETTLED where no exchange ran)."""
        global _world
        if isinstance(comm, _Prepared):
            self._join_settled(comm.settled)
            self._mpi = comm.mpi
            if comm.mpi is not None:
                forward_type(type(self), type(comm.mpi))
            return comm.settled.tables
        if comm is None:
            if ENV_SEGMENT in os.environ:
                with _world_lock:
                    world = _world() if _world is not None else None
                    if world is None or world.freed:
                        self._join(os.environ[ENV_SEGMENT], _launch_rank())
                        _world = weakref.ref(self)
                        return bound_tables.UNSETTLED
                return self._join_settled(bootstrap.split_segment(world, None, world.rank))
            if under_mpi_launcher():
                from mpi4py import MPI

                comm = MPI.COMM_WORLD
            else:
                return self._join_settled(bootstrap.lone())
        if isinstance(comm, Comm):
            self._mpi = comm._mpi
            return self._join_settled(bootstrap.split_segment(comm, None, comm.rank))
        if hasattr(comm, "Split_type") and hasattr(comm, "Get_rank"):
            self._mpi = comm
            forward_type(type(self), type(comm))
            survey, self._survey = getattr(self, "_survey", None), None
            return self._join_settled(bootstrap.mpi_segment(comm, survey))
        raise ArgumentError(f"expected an mpi4py communicator or None, got {type(comm).__name__}")

    def _join_settled(self, s: bootstrap.Settled) -> bound_tables.Agreed:
        self._join(s.segment, s.rank)
        return s.tables

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
        on the two never matches), which Free frees (collective). The creation exchange
        runs on this communicator (`bootstrap.split_segment`): a new MPI communicator's
        first collective costs MPI more than the whole exchange costs here."""
        if self._mpi is None:
            return Comm(self)
        mpi = self._mpi.Dup()
        return self._over(mpi, lambda: bootstrap.split_segment(self, None, self.rank))

    def Clone(self) -> Comm:
        """As Dup (mpi4py's Clone keeps the communicator's type: so does this one)."""
        return self.Dup()

    def Split(self, color: int = 0, key: int = 0) -> Comm | None:
        """Communicators of the ranks with the same `color`, ranked by (`key`, rank), as
        mpi4py's Split (collective). A negative color (MPI.UNDEFINED) gives None."""
        if self._mpi is not None:
            from mpi4py import MPI

            # MPI orders a color's ranks by (key, rank) as split_segment does, so the two
            # communicators number their ranks alike.
            sub = self._mpi.Split(MPI.UNDEFINED if color < 0 else color, key)
            made = self._over(sub, lambda: bootstrap.split_segment(self, int(color), int(key)))
            return None if sub == MPI.COMM_NULL else made
        settled = bootstrap.split_segment(self, int(color), int(key))
        if settled.segment is None:
            return None
        return Comm(_Prepared(settled, None))

    def _over(self, mpi: Any, settle: Any) -> Any:
        """The communicator over the new MPI communicator `mpi` (which it owns) on the
        segment `settle()` settles through this one; None for no group. `mpi` is freed if
        the creation fails."""
        from mpi4py import MPI

        try:
            settled = settle()
            if settled.segment is None:
                return None
            return owning(Comm(_Prepared(settled, mpi)))
        except BaseException:
            if mpi != MPI.COMM_NULL:
                mpi.Free()
            raise

    # -- shared heap ------------------------------------------------------------------
    def empty(self, shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
        """An uninitialised array in the shared heap (peers access it directly)."""
        dt = np.dtype(dtype)
        shape_t = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape_t):
            raise ArgumentError(f"negative dimension in shape {shape_t}")
        if order not in ("C", "F"):
            raise ArgumentError(f"order must be 'C' or 'F', not {order!r}")
        # Exact integers: NumPy's int64 product wraps (a huge shape would ask for 0 bytes).
        count = math.prod(shape_t)
        nbytes = count * dt.itemsize
        if nbytes > sys.maxsize:  # no array can be that large, nor any heap
            raise HeapExhaustedError(
                f"shared heap exhausted: asked for {nbytes} bytes, more than any array can hold"
            )
        block = self._heap_alloc(nbytes)
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

    def selection(self, op: str = "Alltoall") -> tuple[str, list[Any]]:
        """The table bound for collective `op` (its family's: Alltoallv uses Alltoall's):
        (source: a file path or "model", ranges), each range ``(min_bytes, max_bytes or
        None, [(algorithm, order, store, nt_threshold, chunk_bytes), ...])``, the parameters
        None for every operation but Alltoall; the first candidate that can serve a call
        wins."""
        source, rows = self._table(op)
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
