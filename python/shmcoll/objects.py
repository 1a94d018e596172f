"""mpi4py's object collectives, the lowercase methods (``bcast``, ``gather``, ``scatter``,
``allgather``, ``alltoall``, ``reduce``, ``allreduce``, ``scan``, ``exscan``), on shmcoll's
shared memory instead of MPI.

Objects travel pickled, as in mpi4py: with ``MPI.pickle`` when mpi4py is loaded (so that its
settings apply), else with :mod:`pickle` at the highest protocol. The exchange is native
(rust/shmcoll-py/src/objects.rs): each rank's pickle travels in a fixed slot of 256 bytes
behind a header, so an object whose pickle fits (a number, a short list or dict) costs one
collective where mpi4py makes two (the counts, then the bytes); longer pickles follow in a
vector collective. ``bcast`` sends the large buffers inside the object (NumPy arrays,
bytearrays) out of band, with pickle protocol 5.

The reductions (``reduce``, ``allreduce``, ``scan``, ``exscan``) gather the objects and combine
them in rank order, left to right (``op(op(x0, x1), x2)``...), on every rank alike, so every
rank gets the same result. mpi4py combines along a binomial tree instead: the same value for
associative operators, possibly rounded differently for floats. mpi4py's operators are
applied as mpi4py applies them to objects (``MPI.MAX(x, y)``; ``MAXLOC`` too), shmcoll's with
the same semantics, and any callable ``op(x, y)`` is accepted, as in mpi4py.

A rank that cannot pickle its object, or whose arguments are wrong (a root that is not a
rank; ``scatter``'s or ``alltoall``'s sequence not of ``size`` items), rejects the exchange:
it raises its own exception and every other rank a PeerRejectedError that names it and
quotes the error (mpi4py leaves the other ranks waiting). Ranks that make different object
collectives at the same point, or name different roots, all raise MismatchError. A root
that is not a rank raises an ArgumentError that is also mpi4py's ``MPI.Exception`` of class
``MPI.ERR_ROOT`` where mpi4py is loaded, as mpi4py's own raise.
"""

from __future__ import annotations

import operator
import pickle
import struct
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from . import _core
from .errors import ArgumentError, as_mpi_exception
from .ops import BAND, BOR, BXOR, LAND, LOR, MAX, MIN, PROD, SUM, op_name

#: Bytes of pickle that travel in the first exchange (a slot of 256 bytes less its header,
#: rust/shmcoll-py/src/objects.rs); longer ones follow in a second.
ROOM: int = _core.OBJECT_ROOM

# mpi4py's semantics for objects (MPI.MAX(x, y) is `y if y > x else x`, so a NaN on the
# right is dropped, as in mpi4py; the logical operators give booleans).
_PY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    SUM: operator.add,
    PROD: operator.mul,
    MIN: lambda x, y: y if y < x else x,
    MAX: lambda x, y: y if y > x else x,
    BAND: operator.and_,
    BOR: operator.or_,
    BXOR: operator.xor,
    LAND: lambda x, y: bool(x) and bool(y),
    LOR: lambda x, y: bool(x) or bool(y),
}


def _plain_dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)


_pickle_pair: tuple[Callable[[Any], bytes], Callable[[Any], Any], Any] = (_plain_dumps, pickle.loads, None)


def _pickler() -> tuple[Callable[[Any], bytes], Callable[[Any], Any], Any]:
    """(dumps, loads, the mpi4py.MPI module they come from or None), looked up once for as
    long as that stays the same (MPI.pickle's bound methods follow its settings)."""
    global _pickle_pair
    mpi = sys.modules.get("mpi4py.MPI")
    if _pickle_pair[2] is not mpi:
        _pickle_pair = (
            (mpi.pickle.dumps, mpi.pickle.loads, mpi)
            if mpi is not None
            else (_plain_dumps, pickle.loads, None)
        )
    return _pickle_pair


#: A buffer inside a broadcast object travels out of band from this size on (below it,
#: one more collective costs more than copying the bytes through the pickle).
OOB_MIN = 64 << 10
_SIZES = struct.Struct("<q")


def _large(x: Any) -> bool:
    return (
        isinstance(x, (np.ndarray, bytearray))
        and (x.nbytes if isinstance(x, np.ndarray) else len(x)) >= OOB_MIN
    )


def _dumps_oob(obj: Any, bufs: list[memoryview]) -> bytes | None:
    """`obj` pickled (protocol 5) with its buffers of OOB_MIN bytes or more appended to
    `bufs` instead; None when it has none, or cannot be pickled so (then the configured
    pickler, mpi4py's settings included, serves it in band). Only an array or bytearray
    that large, or a dict, list or tuple holding one, is tried: pickling anything else
    twice would cost more than it saves."""
    if not (
        _large(obj)
        or (isinstance(obj, dict) and any(_large(v) for v in obj.values()))
        or (isinstance(obj, (list, tuple)) and any(_large(v) for v in obj))
    ):
        return None

    def out_of_band(pb: pickle.PickleBuffer) -> bool:
        try:
            raw = pb.raw()
        except BufferError:  # not contiguous: in band
            return True
        if raw.nbytes < OOB_MIN:
            return True
        bufs.append(raw)
        return False

    try:
        data = pickle.dumps(obj, 5, buffer_callback=out_of_band)
    except Exception:
        bufs.clear()
        return None
    return data if bufs else None


def _loaded(got: list[Any], loads: Callable[[Any], Any], own: Any) -> list[Any]:
    """The unpickled objects, with this rank's own object where the exchange left None
    (the reductions combine the root's own object as it is, as mpi4py's do)."""
    return [own if b is None else loads(b) for b in got]


def _combiner(op: Any) -> Callable[[Any, Any], Any]:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and isinstance(op, mpi.Op):
        return op  # mpi4py applies its operators to objects
    name = op_name(op) if isinstance(op, str) else None
    if name is not None:
        if mpi is not None:
            return getattr(mpi, name.upper())
        return _PY_OPS[name]
    if callable(op):
        return op
    raise ArgumentError(f"op must be an operator or a callable op(x, y), not {op!r}")


def _fold(items: Sequence[Any], op: Any) -> Any:
    f = _combiner(op)
    res = items[0]
    for x in items[1:]:
        res = f(res, x)
    return res


class ObjectCollectives:
    """The lowercase collectives of mpi4py's communicator (see the module documentation)."""

    if TYPE_CHECKING:  # provided by the native base, _core.CommBase

        @property
        def size(self) -> int: ...

        @property
        def rank(self) -> int: ...

        def _reject_with(self, op: str, e: BaseException) -> NoReturn: ...

        # The native exchanges (CommBase, rust/shmcoll-py/src/objects.rs).
        _objects_gather: Callable[..., tuple[list[Any], bool]]
        _objects_bcast: Callable[..., tuple[bytes | None, int]]
        Bcast: Callable[..., None]
        _objects_scatter: Callable[[list[bytes] | None, int], bytes]
        _objects_alltoall: Callable[[list[bytes]], list[Any]]

    def _root(self, root: Any, op: str) -> int:
        """`root` as a rank; else every rank's call `op` is rejected (peers raise too)."""
        try:
            if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
                raise ArgumentError(f"root must be an int, not {type(root).__name__}")
            if not 0 <= root < self.size:
                # mpi4py raises MPI.Exception with error class ERR_ROOT there.
                bad = ArgumentError(f"root {root} is not a rank of this {self.size}-rank communicator")
                raise as_mpi_exception(bad, "ERR_ROOT")
        except ArgumentError as e:
            self._reject_with(op, e)
        return int(root)

    def _dumps(self, dumps: Callable[[Any], bytes], obj: Any, op: str) -> bytes:
        """`obj` pickled; else the peers' call `op` is rejected and the error raised here."""
        try:
            return dumps(obj)
        except Exception as e:
            self._reject_with(op, e)

    def _dump_items(self, dumps: Callable[[Any], bytes], seq: Any, what: str, op: str) -> list[bytes]:
        """The pickles of `seq`'s `size` items (scatter's and alltoall's argument)."""
        p = self.size
        try:
            items = list(seq)
        except TypeError:
            err = ArgumentError(f"{what}: expected a sequence of {p} objects, not {type(seq).__name__}")
            self._reject_with(op, err)
        try:
            if len(items) != p:
                raise ArgumentError(f"{what}: expected {p} items, got {len(items)}")
            return [dumps(x) for x in items]
        except Exception as e:
            self._reject_with(op, e)

    def _gathered(self, sendobj: Any, kind: str, root: int | None = None) -> list[Any]:
        dumps, loads, _ = _pickler()
        data = self._dumps(dumps, sendobj, "Allgather")
        return [loads(b) for b in self._objects_gather(data, kind, root)[0]]

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """The root's `obj` on every rank (a copy on the root too, as in mpi4py).

        Buffers of at least OOB_MIN bytes inside the object (NumPy arrays, bytearrays)
        travel out of band (pickle protocol 5 of the standard library, whatever pickler
        MPI.pickle is set to): straight from the root's memory into bytearrays that the
        receivers' arrays then use, instead of being copied into the pickle and out of it
        again. The root's copy is a copy of those buffers."""
        root = self._root(root, "Bcast")
        if self.rank == root:
            return self._bcast_send(obj, root, copy=True)
        return self._bcast_recv(root)

    def _bcast_send(self, obj: Any, root: int, copy: bool) -> Any:
        """The root's half of bcast; returns a copy of `obj` if `copy`."""
        dumps, loads, _ = _pickler()
        bufs: list[memoryview] = []
        data = _dumps_oob(obj, bufs)
        if data is None:  # no large buffer (or not picklable so): the configured pickler
            data = self._dumps(dumps, obj, "Bcast")
            self._objects_bcast(data, root)
            return loads(data) if copy else obj
        sizes = [b.nbytes for b in bufs]
        meta = _SIZES.pack(len(sizes)) + struct.pack(f"<{len(sizes)}q", *sizes)
        self._objects_bcast(meta + data, root, 1)
        for b in bufs:
            self.Bcast(np.frombuffer(b, np.uint8), root)
        return pickle.loads(data, buffers=[bytearray(b) for b in bufs]) if copy else obj

    def _bcast_recv(self, root: int) -> Any:
        """The other ranks' half of bcast."""
        got, oob = self._objects_bcast(None, root)
        assert got is not None
        if not oob:
            return _pickler()[1](got)
        view = memoryview(got)
        (n,) = _SIZES.unpack_from(view)
        into = [bytearray(k) for k in struct.unpack_from(f"<{n}q", view, _SIZES.size)]
        for dest in into:
            self.Bcast(np.frombuffer(dest, np.uint8), root)
        return pickle.loads(view[_SIZES.size + 8 * n :], buffers=into)

    def allgather(self, sendobj: Any) -> list[Any]:
        """Every rank's `sendobj`, in rank order."""
        return self._gathered(sendobj, "allgather")

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Every rank's `sendobj` in rank order at the root; None elsewhere."""
        root = self._root(root, "Allgather")
        out = self._gathered(sendobj, "gather", root)
        return out if self.rank == root else None

    def scatter(self, sendobj: Sequence[Any] | None, root: int = 0) -> Any:
        """Item `rank` of the root's sequence of `size` objects."""
        root = self._root(root, "Scatter")
        dumps, loads, _ = _pickler()
        items = self._dump_items(dumps, sendobj, "scatter", "Scatter") if self.rank == root else None
        return loads(self._objects_scatter(items, root))

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Item j of every rank's sequence of `size` objects goes to rank j, which gets
        them in rank order (mpi4py's alltoall of objects)."""
        dumps, loads, _ = _pickler()
        items = self._dump_items(dumps, sendobj, "alltoall", "Alltoall")
        return [loads(b) for b in self._objects_alltoall(items)]

    def reduce(self, sendobj: Any, op: Any = SUM, root: int = 0) -> Any | None:
        """The ranks' objects combined in rank order at the root; None elsewhere. The root
        combines its own object as it is (as mpi4py does): it is not pickled."""
        root = self._root(root, "Allgather")
        dumps, loads, _ = _pickler()
        data = b"" if self.rank == root else self._dumps(dumps, sendobj, "Allgather")
        got, _ = self._objects_gather(data, "reduce", root, None, True)
        if self.rank != root:
            return None
        got[root] = None
        return _fold(_loaded(got, loads, sendobj), op)

    def allreduce(self, sendobj: Any, op: Any = SUM) -> Any:
        """The ranks' objects combined in rank order, on every rank. Small objects reach
        every rank, which combines them itself; when some pickle is long, rank 0 gets them
        all, combines them and broadcasts the result (moving each large object once)."""
        dumps, loads, _ = _pickler()
        # Rank 0 keeps an array it knows will not fit a slot (mpi4py's reductions combine
        # the root's object as it is too); pickling it would cost as much as moving it.
        keep = self.rank == 0 and isinstance(sendobj, np.ndarray) and sendobj.nbytes > ROOM
        data = b"" if keep else self._dumps(dumps, sendobj, "Allgather")
        got, long = self._objects_gather(data, "allreduce", None, 0, True)
        if not long:
            return _fold([loads(b) for b in got], op)
        if self.rank == 0:
            try:
                res = _fold(_loaded(got, loads, sendobj), op)
            except Exception as e:  # the others are waiting for the result
                self._reject_with("Bcast", e)
            return self._bcast_send(res, 0, copy=False)  # res is rank 0's own
        return self._bcast_recv(0)

    def scan(self, sendobj: Any, op: Any = SUM) -> Any:
        """The objects of ranks 0..rank combined in rank order."""
        return _fold(self._gathered(sendobj, "scan")[: self.rank + 1], op)

    def exscan(self, sendobj: Any, op: Any = SUM) -> Any:
        """The objects of ranks 0..rank-1 combined in rank order; None on rank 0."""
        items = self._gathered(sendobj, "exscan")[: self.rank]
        return _fold(items, op) if items else None
