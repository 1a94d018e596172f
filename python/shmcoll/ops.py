"""Reduction operators and datatypes of the collectives.

``shmcoll.SUM`` ... ``shmcoll.LOR`` are accepted wherever mpi4py's ``MPI.SUM`` ... are,
and mpi4py's own operators are understood too. Reductions combine the contributions in
rank order (rank 0 op rank 1 op ... op rank p-1) with the same element-wise kernels on
every rank, so results are bitwise identical on every rank, from run to run, and across
the algorithms shmcoll may pick. Integer SUM/PROD wrap around; float MIN/MAX keep the left
operand when a comparison involves NaN.
"""

from __future__ import annotations

import functools
import sys
import warnings
from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentTypeError


class Op(str):
    """A predefined reduction operator (a str subclass holding its name)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"shmcoll.{self.upper()}"


SUM = Op("sum")
PROD = Op("prod")
MIN = Op("min")
MAX = Op("max")
BAND = Op("band")
BOR = Op("bor")
BXOR = Op("bxor")
LAND = Op("land")
LOR = Op("lor")
OPS = (SUM, PROD, MIN, MAX, BAND, BOR, BXOR, LAND, LOR)

_mpi_ops: dict[int, Op] | None = None


def mpi_ops_by_id() -> dict[int, Op]:
    """mpi4py's predefined operators by identity (empty until mpi4py is imported)."""
    return _mpi_table()


def _mpi_table() -> dict[int, Op]:
    global _mpi_ops
    mpi = sys.modules.get("mpi4py.MPI")
    if _mpi_ops is None and mpi is not None:
        _mpi_ops = {id(getattr(mpi, o.upper())): o for o in OPS}
        from . import _core

        # The native fast path recognises them (and IN_PLACE, and BOTTOM) too, by identity.
        _core.register_mpi(mpi.IN_PLACE, [(getattr(mpi, o.upper()), str(o)) for o in OPS], mpi.BOTTOM)
    return _mpi_ops or {}


def op_name(op: Any) -> Op | None:
    """The native name of `op` (shmcoll.SUM, MPI.SUM, "sum"), or None when shmcoll does
    not implement it (MPI.MAXLOC, user-defined operators)."""
    if isinstance(op, Op):
        return op
    hit = _mpi_table().get(id(op))
    if hit is not None:
        return hit
    if isinstance(op, str) and op.lower() in OPS:
        return Op(op.lower())
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and isinstance(op, mpi.Op):
        for o in OPS:
            if op == getattr(mpi, o.upper()):
                return o
    return None


@functools.lru_cache(maxsize=256)
def dtype_name(dtype: np.dtype) -> str:
    """`dtype.name`, cached: NumPy computes it in Python (a few µs here), more than the rest
    of a small call's argument handling."""
    return str(dtype.name)


@functools.lru_cache(maxsize=256)
def supports(op: Op, dtype: np.dtype) -> bool:
    """Whether the native kernels reduce `dtype` with `op` (the kernels' own rules). They
    compute in this machine's byte order only: a byte-swapped array goes to MPI (or is
    rejected), never summed as if its bytes were native. Cached, as `dtype_name`."""
    from . import _core

    return dtype.isnative and bool(_core.reduction_supported(str(op), dtype_name(dtype)))


def check_operator(op: Any) -> None:
    """Refuse what cannot be an operator anywhere: a string that names none of shmcoll's, or
    an object that is neither one of them nor an mpi4py operator (those that shmcoll does
    not implement go to MPI)."""
    if isinstance(op, str):
        if op.lower() not in OPS:
            raise ArgumentError(f"unknown operator {op!r}; known: {', '.join(OPS)}")
        return
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not isinstance(op, mpi.Op):
        raise ArgumentTypeError(
            f"op must be an operator (shmcoll.SUM, MPI.SUM, ...), not {type(op).__name__}"
        )


#: The (operator, kind of element) pairs MPI does not define either (MPI 4.1, 6.9.2):
#: MIN/MAX need ordered numbers, the logical and bitwise operators integers (or booleans),
#: and bytes (MPI.BYTE, MPI.PACKED: kind "V") take the bitwise operators only.
_UNDEFINED_IN_MPI = {
    **{(o, k): True for o in (MIN, MAX) for k in "cb"},
    **{(o, k): True for o in (BAND, BOR, BXOR, LAND, LOR) for k in "fc"},
    **{(o, "b"): True for o in (SUM, PROD)},
    **{(o, "V"): True for o in (SUM, PROD, MIN, MAX, LAND, LOR)},
}


def defined_in_mpi(op: Op, dtype: np.dtype) -> bool:
    """Whether MPI defines `op` on elements of `dtype` (else the call is wrong everywhere,
    and handing it to MPI would only trade shmcoll's error for MPI's)."""
    return (op, dtype.kind) not in _UNDEFINED_IN_MPI


_warned: set[str] = set()
#: Calls handed to MPI because shmcoll does not implement their operator or datatype.
fallback_calls: dict[str, int] = {}


def note_fallback(what: str) -> None:
    """Count a fallback to MPI and warn once per kind."""
    fallback_calls[what] = fallback_calls.get(what, 0) + 1
    if what not in _warned:
        _warned.add(what)
        warnings.warn(
            f"shmcoll: {what} is not implemented natively; this call and the like run on MPI "
            "(counted in shmcoll.ops.fallback_calls)",
            RuntimeWarning,
            stacklevel=4,
        )
