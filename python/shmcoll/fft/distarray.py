"""Distributed arrays that live in the shared heap, in mpi4py-fft's vocabulary.

Why the heap: an array from ``comm.empty`` is readable by the peers, so collectives on it
are single-copy; ``newDistArray`` gives PFFT inputs and outputs that qualify. The subclass
only adds where the local block sits in the global array (``global_shape``, ``substart``,
``local_slice()``) and the tensor rank (leading component axes, not distributed), with
mpi4py-fft's names and defaults, so that code written for its ``DistArray`` reads the
same attributes here.
"""

from __future__ import annotations

from numbers import Number
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from ..errors import ArgumentError

if TYPE_CHECKING:
    from .pfft import PFFT


class DistArray(np.ndarray):
    """This rank's block of a global array (a numpy array; the data may be in the heap).

    The first `rank` axes are tensor components (whole on every rank: a vector field has
    rank 1); the others are the distributed grid axes. Indexing only component axes
    gives a DistArray of lower rank (``u[0]`` is the first component, a rank-0 DistArray),
    as in mpi4py-fft; other views keep the attributes of the array they come from."""

    _grid_shape: tuple[int, ...]
    _grid_start: tuple[int, ...]
    _rank: int

    def __array_finalize__(self, obj: Any) -> None:
        self._grid_shape = getattr(obj, "_grid_shape", ())
        self._grid_start = getattr(obj, "_grid_start", ())
        self._rank = getattr(obj, "_rank", 0)

    def __getitem__(self, index: Any) -> Any:
        v = super().__getitem__(index)
        only_components = isinstance(index, (int, np.integer, slice)) or (
            isinstance(index, tuple) and len(index) <= self._rank
        )
        if self._rank > 0 and only_components and isinstance(v, DistArray):
            v._rank = self._rank - (self.ndim - v.ndim)
        return v

    @property
    def rank(self) -> int:
        """The tensor rank: how many leading axes are components (0: a scalar field)."""
        return self._rank

    @property
    def dimensions(self) -> int:
        """The number of grid axes (the rank's component axes not counted)."""
        return len(self._grid_shape)

    @property
    def global_shape(self) -> tuple[int, ...]:
        """The shape of the global array (component axes first)."""
        return tuple(self.shape[: self._rank]) + self._grid_shape

    @property
    def substart(self) -> tuple[int, ...]:
        """Global index of this rank's first element, per axis."""
        return (0,) * self._rank + self._grid_start

    @property
    def v(self) -> np.ndarray:
        """This block as a plain numpy array (the same memory)."""
        return self.view(np.ndarray)

    def local_slice(self) -> tuple[slice, ...]:
        """The part of the global array this rank holds."""
        return tuple(slice(s, s + n) for s, n in zip(self.substart, self.shape, strict=True))


@overload
def newDistArray(
    pfft: PFFT, forward_output: bool = True, val: Any = 0, rank: int = 0, view: Literal[False] = False
) -> DistArray: ...
@overload
def newDistArray(
    pfft: PFFT, forward_output: bool = True, val: Any = 0, rank: int = 0, *, view: Literal[True]
) -> np.ndarray: ...
def newDistArray(
    pfft: PFFT, forward_output: bool = True, val: Any = 0, rank: int = 0, view: bool = False
) -> np.ndarray:
    """A heap array laid out as `pfft`'s output (`forward_output` True) or input, with
    `rank` leading component axes of length ``pfft.dimensions``; filled with `val` when it
    is a number (0 by default, as in mpi4py-fft; None leaves it uninitialised). `view`
    returns the plain numpy array instead of the DistArray. Not collective (each rank
    allocates its own block)."""
    if rank < 0:
        raise ArgumentError(f"rank must be >= 0, got {rank}")
    components = (pfft.dimensions,) * rank
    a = pfft.comm.empty(components + pfft.shape(forward_output), pfft.dtype(forward_output)).view(DistArray)
    a._grid_shape = pfft.global_shape(forward_output)
    a._grid_start = tuple(s.start for s in pfft.local_slice(forward_output))
    a._rank = rank
    if isinstance(val, Number):
        a.fill(val)
    return a.v if view else a
