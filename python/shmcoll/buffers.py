"""mpi4py's buffer specifications, resolved to what the engine needs: a buffer object and
byte counts.

Accepted forms (as in mpi4py), for a buffer-protocol object ``buf`` (NumPy array,
bytearray, memoryview, ...):

* ``buf``: counts inferred from its length (elements of its own item size);
* ``[buf, datatype]`` / ``[buf, count]`` / ``[buf, count, datatype]``;
* ``[buf, (count, displ), datatype]``: ``displ`` elements into the buffer;
* for the vector collectives: ``[buf, counts, datatype]`` (displacements are the prefix
  sums), ``[buf, (counts, displs), datatype]`` and ``[buf, counts, displs, datatype]``.

A datatype is an ``mpi4py.MPI.Datatype`` (predefined or contiguous), a NumPy dtype or
anything ``numpy.dtype()`` accepts ("d", "float32", ...).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from .errors import ArgumentError, BadBufferError, UnsupportedError


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
    """``shmcoll.IN_PLACE`` or ``mpi4py.MPI.IN_PLACE`` (without importing mpi4py)."""
    if obj is IN_PLACE:
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
            raise UnsupportedError(
                f"datatype {dt.Get_name() or dt!r} has gaps (size {size}, extent {extent}); "
                "shmcoll moves contiguous bytes only"
            )
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
    """A buffer for Alltoall: `buf`, and bytes per rank (None: length / size)."""

    buf: Any
    bytes_per_rank: int | None


@dataclass
class Vector:
    """A buffer for Alltoallv: `buf`, and per-rank counts and displacements in bytes."""

    buf: Any
    counts: list[int]
    displs: list[int]


def _split(spec: Any) -> tuple[Any, list[Any]]:
    if isinstance(spec, list | tuple):
        if len(spec) == 0 or len(spec) > 4:
            raise ArgumentError(f"a buffer specification has 1 to 4 items, got {len(spec)}")
        return spec[0], list(spec[1:])
    return spec, []


def _items(rest: list[Any]) -> tuple[Any, int | None, int]:
    """(datatype, count, displacement) of the items after the buffer in a specification."""
    dtype: Any = None
    count: int | None = None
    displ = 0
    for item in rest:
        if _is_int(item) and count is None:
            count = int(item)
        elif isinstance(item, tuple | list) and len(item) == 2 and count is None:
            count, displ = int(item[0]), int(item[1])
        elif item is not None and dtype is None:
            dtype = item
        else:
            raise ArgumentError(f"cannot interpret {item!r} in a buffer specification")
    return dtype, count, displ


def parse_simple(spec: Any, size: int) -> Simple:
    """Resolve a send or receive specification of Alltoall."""
    buf, rest = _split(spec)
    dtype, count, displ = _items(rest)
    isz = datatype_size(dtype) if dtype is not None else _itemsize(buf)
    if count is not None and count < 0:
        raise ArgumentError(f"negative count {count}")
    if displ < 0:
        raise ArgumentError(f"negative displacement {displ}")
    if count is None:
        nbytes = _nbytes(buf) - displ * isz
        elems, rem = divmod(nbytes, isz)
        if rem or elems % size:
            raise ArgumentError(
                f"cannot split a buffer of {nbytes} bytes into {size} blocks of whole "
                f"{isz}-byte elements; pass [buf, count, datatype]"
            )
        count = elems // size
    return Simple(_offset(buf, displ * isz), count * isz)


def parse_vector(spec: Any, size: int) -> Vector:
    """Resolve a send or receive specification of Alltoallv."""
    # Counts as lists, tuples or NumPy integer arrays with a predefined mpi4py or a NumPy
    # datatype resolve natively (ten microseconds less per specification with NumPy
    # counts); the native parser declines everything else.
    hit = _core.vector_spec(spec, size)
    if hit is not None:
        return Vector(*hit)
    return parse_vector_py(spec, size)


def parse_vector_py(spec: Any, size: int) -> Vector:
    """`parse_vector` in Python: every form, and the errors."""
    buf, rest = _split(spec)
    dtype: Any = None
    counts: Any = None
    displs: Any = None
    if rest and rest[-1] is None:  # [buf, counts, None]: the buffer's own element type
        rest.pop()
    if rest and not _is_seq(rest[-1]) and not _is_int(rest[-1]) and rest[-1] is not None:
        dtype = rest.pop()
    if len(rest) == 2:
        counts, displs = rest
    elif len(rest) == 1:
        item = rest[0]
        if isinstance(item, tuple) and len(item) == 2 and all(x is None or _is_seq(x) for x in item):
            counts, displs = item
        else:
            counts = item
    elif rest:
        raise ArgumentError("cannot interpret the vector buffer specification")
    isz = datatype_size(dtype) if dtype is not None else _itemsize(buf)
    if counts is None:
        elems, rem = divmod(_nbytes(buf), isz)
        if rem or elems % size:
            raise ArgumentError(f"cannot split {elems} elements into {size} equal blocks; pass counts")
        counts = [elems // size] * size
    elif _is_int(counts):
        counts = [int(counts)] * size
    counts = [int(c) for c in counts]
    if len(counts) != size:
        raise ArgumentError(f"counts has {len(counts)} entries but the communicator has {size} ranks")
    if displs is None:
        displs = [0] * size
        for j in range(1, size):
            displs[j] = displs[j - 1] + counts[j - 1]
    displs = [int(d) for d in displs]
    if len(displs) != size:
        raise ArgumentError(f"displacements has {len(displs)} entries but the communicator has {size} ranks")
    if any(c < 0 for c in counts) or any(d < 0 for d in displs):
        raise ArgumentError("counts and displacements must not be negative")
    return Vector(buf, [c * isz for c in counts], [d * isz for d in displs])


def resolve_alltoall(sendbuf: Any, recvbuf: Any, size: int) -> tuple[Any, Any, int | None, int | None]:
    """(send buffer or None for in place, receive buffer, send bytes per rank, receive
    bytes per rank) of an Alltoall call; None counts mean "the buffer length / size".
    Called by the native Comm.Alltoall for anything but two plain buffers."""
    r = parse_simple(recvbuf, size)
    if is_in_place(sendbuf):
        return None, r.buf, None, r.bytes_per_rank
    s = parse_simple(sendbuf, size)
    return s.buf, r.buf, s.bytes_per_rank, r.bytes_per_rank


@dataclass
class Whole:
    """A buffer as one contiguous run: the exact bytes (`buf`), their count, and the
    element type when it is known (for reductions)."""

    buf: Any
    nbytes: int
    dtype: np.dtype | None


def _numpy_dtype(dt: Any) -> np.dtype | None:
    if _is_mpi_datatype(dt):
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
    if (count is not None and count < 0) or displ < 0:
        raise ArgumentError("counts and displacements must not be negative")
    total = _nbytes(buf)
    nbytes = total - displ * isz if count is None else count * isz * blocks
    if displ * isz + nbytes > total:
        raise BadBufferError(
            f"the specification asks for {nbytes} bytes from byte {displ * isz} of a {total}-byte buffer"
        )
    np_dt = _numpy_dtype(dtype) if dtype is not None else _buffer_dtype(buf)
    return Whole(_exact(buf, displ * isz, nbytes), nbytes, np_dt)
