"""The arguments a native collective method cannot read itself, read for it: one function
per shape of argument, which the method calls in the middle of its own call and then
goes on natively with the result (a call enters the engine once).

The native readers (`rust/shmcoll-py/src/buffer_spec.rs`, `vector_spec.rs`) take the
common forms: plain buffers, ``[buf, MPI.DOUBLE]``-style specifications of NumPy arrays
and memoryviews, counts as lists or integer arrays, predefined datatypes and operators.
Everything else comes here: mpi4py's other specification forms, bytearrays and other
exporters, DLPack tensors, operators and element types the kernels do not combine. Each
function returns plain buffers and byte counts, or raises:

* `ServedByMPI` when MPI must serve the call (the native method then agrees on it with
  every rank and runs it on the wrapped MPI communicator, `Comm._served_by_mpi`);
* any other exception when the argument is wrong (the native method then rejects the
  call on every rank and raises the exception here as a shmcoll error,
  `errors.as_shmcoll_error`).

The functions are looked up on this module at every call, so a test can count them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .buffers import BYTES, Whole, is_in_place, parse_counts, parse_simple, parse_vector_py, parse_whole
from .errors import ArgumentError, ServedByMPI
from .ops import SUM, check_operator, defined_in_mpi, dtype_name, op_name, supports


def whole(spec: Any, blocks: int = 1) -> tuple[Any, int]:
    """A single-buffer specification as (the exact bytes it names, their count); with
    `blocks` > 1 a count in it is per block (Gather's and Scatter's root buffers, as mpi4py
    reads them)."""
    w = parse_whole(spec, blocks)
    return w.buf, w.nbytes


def per_rank(spec: Any, size: int) -> tuple[Any, int]:
    """An Alltoall specification as (buffer, bytes per rank)."""
    s = parse_simple(spec, size)
    return s.buf, s.bytes_per_rank


def vector(spec: Any, size: int) -> tuple[Any, list[int], list[int]]:
    """A vector specification as (buffer, counts in bytes, displacements in bytes)."""
    v = parse_vector_py(spec, size)
    return v.buf, v.counts, v.displs


def counts(recvcounts: Any, size: int, itemsize: int) -> list[int]:
    """Reduce_scatter's `recvcounts` as `size` element counts whose bytes fit a buffer."""
    return parse_counts(recvcounts, size, itemsize, "recvcounts")


class Reduction(NamedTuple):
    """A reduction's arguments resolved: the send buffer (None in place), the receive
    buffer (None where this rank has none), and the element type and operator names the
    kernels combine."""

    send: Any
    recv: Whole | None
    dtype: str
    op: str


def reduction(
    name: str, sendbuf: Any, recvbuf: Any, op: Any, send_blocks: int = 1, recv_blocks: int = 1
) -> Reduction:
    """The buffers, element type and operator of reduction `name`: ServedByMPI for an
    operator or element type the kernels do not combine, ArgumentError for one MPI does
    not define either. The receive buffer's element type comes first, as mpi4py's."""
    if op is None:
        op = SUM
    r = None if recvbuf is None else parse_whole(recvbuf, blocks=recv_blocks)
    s = None if is_in_place(sendbuf) else parse_whole(sendbuf, blocks=send_blocks)
    if r is not None and s is not None and r.dtype is not None and s.dtype is not None and r.dtype != s.dtype:
        # As mpi4py: the bytes of one type are never combined as another's.
        raise ArgumentError(
            f"{name}: the send buffer holds {s.dtype} and the receive buffer {r.dtype}: "
            "mismatch in send and receive datatypes"
        )
    dt: np.dtype | None = (r.dtype if r is not None and r.dtype is not None else None) or (
        s.dtype if s else None
    )
    o = op_name(op)
    if o is None:
        check_operator(op)
    if dt is None:
        raise ArgumentError(f"{name}: cannot tell the element type; pass [buf, datatype]")
    if o is not None and not defined_in_mpi(o, dt):
        what = "bytes (MPI.BYTE, MPI.PACKED)" if dt == BYTES else dt.name
        raise ArgumentError(f"{name}: {o.upper()} is not defined on {what} (in MPI either)")
    if dt == BYTES:  # bitwise on bytes: as on uint8
        dt = np.dtype(np.uint8)
    if o is None or not supports(o, dt):
        order = "" if dt.isnative else " in non-native byte order"
        raise ServedByMPI(f"operator {op!r}" if o is None else f"{o.upper()} on {dt.name}{order}")
    return Reduction(None if s is None else s.buf, r, dtype_name(dt), str(o))


__all__ = ["Reduction", "counts", "per_rank", "reduction", "vector", "whole"]
