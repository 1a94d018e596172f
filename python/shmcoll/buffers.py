"""mpi4py's buffer specifications, resolved to what the engine needs: a buffer object and
byte counts.

Accepted forms (as in mpi4py), for a buffer ``buf`` (an object with the buffer protocol:
NumPy array, bytearray, memoryview...; or with DLPack: torch CPU tensors..., see
`exports`):

* ``buf``: counts inferred from its length (elements of its own item size);
* ``[buf, datatype]`` / ``[buf, count]`` / ``[buf, count, datatype]``;
* ``[buf, (count, displ), datatype]`` and ``[buf, count, displ, datatype]``: ``displ``
  elements into the buffer;
* for the vector collectives: ``[buf, counts, datatype]`` (displacements are the prefix
  sums), ``[buf, (counts, displs), datatype]`` and ``[buf, counts, displs, datatype]``,
  where a single integer count is every rank's count and a single integer displacement
  ``d`` means ``d * i`` for rank i (strided); a tuple in the counts' place is always
  ``(counts, displs)``; without counts, the buffer's elements are split as evenly as they
  go (the first ``n % size`` ranks one more), as mpi4py splits them.

``None`` where MPI takes ``IN_PLACE`` is ``IN_PLACE``; ``None`` as the buffer of a
specification is an empty buffer; ``MPI.BOTTOM`` (absolute addresses) is MPI's to serve.

A datatype is an ``mpi4py.MPI.Datatype`` (predefined or derived without gaps), a NumPy
dtype or anything ``numpy.dtype()`` accepts ("d", "float32", ...). A derived datatype with
gaps, memory on a device and MPI.BOTTOM raise `ServedByMPI`: the call runs on MPI.

Counts and displacements are integers of any integer type (Python ints, NumPy integers,
anything with ``__index__``); a float is rejected rather than truncated, and a byte count
must fit what a buffer can hold (`MAX_BYTES`), so that nothing downstream can overflow.
"""

from __future__ import annotations

import itertools
import operator
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from .errors import ArgumentError, ArgumentTypeError, BadBufferError, ServedByMPI
from .exports import host_buffer
from .ops import mpi_ops_by_id

#: The most bytes a count or displacement may name: no buffer holds more than isize::MAX
#: bytes (the engine's sizes are Rust's usize; an allocation never exceeds isize::MAX).
MAX_BYTES = 2**63 - 1


class _InPlace:
    """The ``IN_PLACE`` marker: pass it as the send buffer to exchange within recvbuf."""

    _instance: _InPlace | None = None

    def __new__(cls) -> _InPlace:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "shmcoll.IN_PLACE"

    def __reduce__(self) -> str:
        return "IN_PLACE"


IN_PLACE = _InPlace()


def is_in_place(obj: Any) -> bool:
    """``shmcoll.IN_PLACE``, ``mpi4py.MPI.IN_PLACE`` (without importing mpi4py) or None
    (mpi4py's reading, where MPI takes IN_PLACE)."""
    if obj is IN_PLACE or obj is None:
        return True
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and obj is getattr(mpi, "IN_PLACE", object())


def _is_mpi_datatype(obj: Any) -> bool:
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and isinstance(obj, mpi.Datatype)


def datatype_size(dt: Any) -> int:
    """Bytes of one element of ``dt``; derived types with gaps are not supported."""
    if _is_mpi_datatype(dt):
        mpi = sys.modules["mpi4py.MPI"]
        if dt == mpi.DATATYPE_NULL:
            raise ArgumentError("MPI.DATATYPE_NULL is not a datatype one can send")
        size = dt.Get_size()
        lb, extent = dt.Get_extent()
        if lb != 0 or extent != size:
            raise ServedByMPI("derived datatypes with gaps (shmcoll moves contiguous bytes)")
        return int(size)
    try:
        return int(np.dtype(dt).itemsize)
    except TypeError as e:
        raise ArgumentError(f"{dt!r} is neither an MPI datatype nor a NumPy dtype") from e


def datatype_info(dt: Any) -> tuple[int, np.dtype | None]:
    """(bytes per element, NumPy dtype or None) of a datatype, as the Python parser reads
    it: the native parsers ask once per datatype object and cache the answer."""
    return datatype_size(dt), _numpy_dtype(dt)


def _itemsize(buf: Any) -> int:
    if isinstance(buf, np.ndarray):
        return int(buf.itemsize)
    try:
        with memoryview(buf) as m:
            return int(m.itemsize)
    except TypeError as e:
        raise BadBufferError(f"{type(buf).__name__} does not support the buffer protocol") from e


def _nbytes(buf: Any) -> int:
    if isinstance(buf, np.ndarray):
        return int(buf.nbytes)
    try:
        with memoryview(buf) as m:
            return int(m.nbytes)
    except TypeError as e:
        raise BadBufferError(f"{type(buf).__name__} does not support the buffer protocol") from e


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    """A scalar that can only mean a count (an int, or a float that `_index` rejects)."""
    return isinstance(x, int | float | np.number) and not isinstance(x, bool)


def _index(x: Any, what: str) -> int:
    """`x` as an int: Python ints, NumPy integers of any width, anything with __index__.
    Floats (2.9 would be truncated to 2 and move the wrong data), strings and the rest
    raise ArgumentTypeError."""
    try:
        return operator.index(x)
    except TypeError:
        raise ArgumentTypeError(f"{what} must be an integer, not {type(x).__name__} {x!r}") from None


def in_bytes(n: int, isz: int, what: str) -> int:
    """`n` elements of `isz` bytes, in bytes: non-negative and at most MAX_BYTES."""
    if n < 0:
        raise ArgumentError(f"{what} must not be negative, got {n}")
    nbytes = n * isz
    if nbytes > MAX_BYTES:
        raise ArgumentError(f"{what} {n} ({nbytes} bytes) is more than any buffer can hold")
    return nbytes


def _indices(xs: Any, what: str) -> list[int]:
    """Every item of the sequence `xs` as an int (see `_index`)."""
    if isinstance(xs, np.ndarray) and xs.dtype.kind in "iu":
        return [int(x) for x in xs.tolist()]
    return [_index(x, what) for x in xs]


def _is_seq(x: Any) -> bool:
    # Plain lists, tuples and arrays first: the ABC check below costs a microsecond.
    if type(x) in (list, tuple) or isinstance(x, np.ndarray):
        return True
    return isinstance(x, Sequence) and not isinstance(x, str | bytes | bytearray | memoryview)


def _offset(buf: Any, nbytes_off: int) -> Any:
    """The buffer starting `nbytes_off` bytes in."""
    if nbytes_off == 0:
        return buf
    try:
        return memoryview(buf).cast("B")[nbytes_off:]
    except TypeError as e:
        raise BadBufferError(f"cannot offset a non-contiguous buffer: {e}") from e


@dataclass
class Simple:
    """A buffer for Alltoall: `buf`, and its bytes per rank."""

    buf: Any
    bytes_per_rank: int


@dataclass
class Vector:
    """A buffer for Alltoallv: `buf`, and per-rank counts and displacements in bytes."""

    buf: Any
    counts: list[int]
    displs: list[int]


def _is_bottom(obj: Any) -> bool:
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and obj is getattr(mpi, "BOTTOM", object())


def _split(spec: Any) -> tuple[Any, list[Any]]:
    """The buffer of a specification (see `exports.host_buffer`; None there is an empty
    buffer, MPI.BOTTOM is MPI's) and the items after it."""
    if isinstance(spec, list | tuple):
        if len(spec) == 0 or len(spec) > 4:
            raise ArgumentError(f"a buffer specification has 1 to 4 items, got {len(spec)}")
        buf, rest = spec[0], list(spec[1:])
        if buf is None:
            return bytearray(), rest
    else:
        buf, rest = spec, []
    if _is_bottom(buf):
        raise ServedByMPI("buffers at MPI.BOTTOM (absolute addresses)")
    return host_buffer(buf), rest


def _items(rest: list[Any]) -> tuple[Any, int | None, int]:
    """(datatype, count, displacement) of the items after the buffer in a specification:
    ``count, displ, datatype`` in that order, or a count, a ``(count, displ)`` pair and a
    datatype in any order."""
    if len(rest) == 3 and _is_number(rest[0]) and _is_number(rest[1]):
        return rest[2], _index(rest[0], "count"), _index(rest[1], "displacement")
    dtype: Any = None
    count: int | None = None
    displ = 0
    for item in rest:
        if _is_number(item) and count is None:
            count = _index(item, "count")
        elif isinstance(item, tuple | list) and len(item) == 2 and count is None:
            count, displ = _index(item[0], "count"), _index(item[1], "displacement")
        elif item is None:
            continue  # no datatype: the buffer's own, as mpi4py reads it
        elif dtype is None:
            dtype = item
        else:
            raise ArgumentError(f"cannot interpret {item!r} in a buffer specification")
    return dtype, count, displ


def parse_simple(spec: Any, size: int) -> Simple:
    """Resolve a send or receive specification of Alltoall."""
    buf, rest = _split(spec)
    dtype, count, displ = _items(rest)
    isz = datatype_size(dtype) if dtype is not None else _itemsize(buf)
    if count is not None:
        in_bytes(count, isz, "count")
    displ_bytes = in_bytes(displ, isz, "displacement")
    if count is None:
        nbytes = _nbytes(buf) - displ_bytes
        elems, rem = divmod(nbytes, isz)
        if rem or elems % size:
            raise ArgumentError(
                f"cannot split a buffer of {nbytes} bytes into {size} blocks of whole "
                f"{isz}-byte elements; pass [buf, count, datatype]"
            )
        count = elems // size
    return Simple(_offset(buf, displ_bytes), count * isz)


def parse_vector(spec: Any, size: int) -> Vector:
    """Resolve a send or receive specification of Alltoallv."""
    # Counts as lists, tuples or NumPy integer arrays with a predefined mpi4py or a NumPy
    # datatype resolve natively (ten microseconds less per specification with NumPy
    # counts); the native parser declines everything else (MPI.BOTTOM too, once
    # registered).
    mpi_ops_by_id()
    hit = _core.vector_spec(spec, size)
    if hit is not None:
        return Vector(*hit)
    return parse_vector_py(spec, size)


def _is_datatype(x: Any) -> bool:
    """Whether `x` can only be a datatype in a specification (an mpi4py datatype, a type
    code or name, a NumPy dtype or scalar type)."""
    return _is_mpi_datatype(x) or isinstance(x, str | np.dtype | type)


def _vector_items(spec: Any) -> tuple[Any, Any, Any, Any]:
    """(buffer, counts, displacements, datatype) of a vector specification, as mpi4py
    reads its 1 to 4 items; each but the buffer may be None. Besides mpi4py's forms,
    ``[buf, counts, displs]`` (two sequences, no datatype)."""
    buf, rest = _split(spec)
    counts = displs = dtype = None
    if len(rest) == 1:
        (counts,) = rest
        if _is_datatype(counts):
            counts, dtype = None, counts
    elif len(rest) == 2:
        if _is_seq(rest[0]) and not isinstance(rest[0], tuple) and _is_seq(rest[1]):
            counts, displs = rest  # [buf, counts, displs]
        else:
            counts, dtype = rest
    elif len(rest) == 3:
        counts, displs, dtype = rest
    if isinstance(counts, tuple) and len(rest) < 3:
        if len(counts) != 2:
            raise ArgumentError(f"a tuple in the counts' place is (counts, displs), got {len(counts)} items")
        counts, displs = counts
    return buf, counts, displs, dtype


def _per_rank(x: Any, size: int, what: str) -> list[int]:
    """`size` integers from a sequence of them."""
    if not _is_seq(x):
        raise ArgumentTypeError(
            f"{what} must be an integer or a sequence of integers, not {type(x).__name__}"
        )
    out = _indices(x, f"an entry of {what}")
    if len(out) != size:
        raise ArgumentError(f"{what} has {len(out)} entries but the communicator has {size} ranks")
    return out


def parse_vector_py(spec: Any, size: int) -> Vector:
    """`parse_vector` in Python: every form, and the errors."""
    buf, counts, displs, dtype = _vector_items(spec)
    isz = datatype_size(dtype) if dtype is not None else _itemsize(buf)
    if counts is None:
        elems, rem = divmod(_nbytes(buf), isz)
        if rem:
            raise ArgumentError(
                f"cannot infer the counts: {_nbytes(buf)} bytes are not whole {isz}-byte elements"
            )
        q, r = divmod(elems, max(size, 1))
        counts = [q + (i < r) for i in range(size)]
    elif _is_number(counts):
        counts = [_index(counts, "count")] * size
    else:
        counts = _per_rank(counts, size, "counts")
    if displs is None:
        displs = list(itertools.accumulate(counts, initial=0))[:size]
    elif _is_number(displs):
        stride = _index(displs, "displacement")
        displs = [stride * i for i in range(size)]
    else:
        displs = _per_rank(displs, size, "displacements")
    return Vector(
        buf,
        [in_bytes(c, isz, "a count") for c in counts],
        [in_bytes(d, isz, "a displacement") for d in displs],
    )


@dataclass
class Whole:
    """A buffer as one contiguous run: the exact bytes (`buf`), their count, and the
    element type when it is known (for reductions)."""

    buf: Any
    nbytes: int
    dtype: np.dtype | None


#: The element type of MPI.BYTE and MPI.PACKED: uninterpreted bytes, which MPI combines
#: only bitwise (BAND, BOR, BXOR; MPI 4.1, 6.9.2), not as the uint8 numbers mpi4py's
#: dtlib maps them to.
BYTES = np.dtype("V1")


def _numpy_dtype(dt: Any) -> np.dtype | None:
    if _is_mpi_datatype(dt):
        mpi = sys.modules["mpi4py.MPI"]
        if dt in (mpi.BYTE, mpi.PACKED):
            return BYTES
        try:
            from mpi4py.util.dtlib import to_numpy_dtype

            return np.dtype(to_numpy_dtype(dt))
        except Exception:
            return None
    return np.dtype(dt)


def _buffer_dtype(buf: Any) -> np.dtype | None:
    if isinstance(buf, np.ndarray):
        return buf.dtype
    try:
        with memoryview(buf) as m:
            return np.dtype(m.format)
    except (TypeError, ValueError):
        return None


def _exact(buf: Any, off: int, nbytes: int) -> Any:
    """`nbytes` bytes of `buf` from byte `off` (the object itself when that is all of it)."""
    if off == 0 and nbytes == _nbytes(buf):
        return buf
    try:
        return memoryview(buf).cast("B")[off : off + nbytes]
    except TypeError as e:
        raise BadBufferError(f"cannot take part of a non-contiguous buffer: {e}") from e


def parse_whole(spec: Any, blocks: int = 1) -> Whole:
    """Resolve ``buf``, ``[buf, datatype]``, ``[buf, count(, datatype)]`` or
    ``[buf, (count, displ), datatype]``. With `blocks` > 1 a count is per block (as mpi4py
    reads Gather's and Scatter's specifications), so the run is `blocks` times longer."""
    if isinstance(spec, np.ndarray):
        if not spec.flags.c_contiguous:
            raise BadBufferError("the buffer is not C-contiguous")
        return Whole(spec, int(spec.nbytes), spec.dtype)
    buf, rest = _split(spec)
    dtype, count, displ = _items(rest)
    isz = datatype_size(dtype) if dtype is not None else _itemsize(buf)
    off = in_bytes(displ, isz, "displacement")
    total = _nbytes(buf)
    nbytes = total - off if count is None else in_bytes(count * blocks, isz, "count")
    if count is None and isz and nbytes % isz:
        raise ArgumentError(
            f"cannot infer count, buffer length {nbytes} is not a multiple of datatype extent {isz}"
        )
    if count is None and isz and blocks > 1 and (nbytes // isz) % blocks:
        raise ArgumentError(
            f"cannot infer count, number of entries {nbytes // isz} is not a multiple of "
            f"required number of blocks {blocks}"
        )
    if off + nbytes > total:
        raise BadBufferError(
            f"the specification asks for {nbytes} bytes from byte {off} of a {total}-byte buffer"
        )
    np_dt = _numpy_dtype(dtype) if dtype is not None else _buffer_dtype(buf)
    return Whole(_exact(buf, off, nbytes), nbytes, np_dt)


def parse_counts(counts: Any, size: int, isz: int, what: str) -> list[int]:
    """`size` element counts (a sequence of integers of any integer type) whose bytes, each
    and all together, fit in a buffer (`MAX_BYTES`)."""
    if not _is_seq(counts):
        raise ArgumentTypeError(f"{what} must be a sequence of {size} integers, not {type(counts).__name__}")
    out = _indices(counts, f"an entry of {what}")
    if len(out) != size:
        raise ArgumentError(f"{what} needs {size} entries (one per rank), got {len(out)}")
    total = sum(in_bytes(c, isz, f"an entry of {what}") for c in out)
    if total > MAX_BYTES:
        raise ArgumentError(f"{what} add up to {total} bytes, more than any buffer can hold")
    return out
