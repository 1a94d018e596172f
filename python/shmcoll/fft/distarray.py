"""Distributed arrays that live in the shared heap, in mpi4py-fft's vocabulary.

Why the heap: an array from ``comm.empty`` is readable by the peers, so collectives on it
are single-copy; ``newDistArray`` gives PFFT inputs and outputs that qualify. The subclass
only adds where the local block sits in the global array (``global_shape``, ``substart``,
``local_slice()``), like mpi4py-fft's ``DistArray``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .pfft import PFFT


class DistArray(np.ndarray):
    """This rank's block of a global array (a numpy array; the data may be in the heap).

    Views and slices keep the attributes of the array they come from (as in mpi4py-fft), so
    they describe the original block, not the view."""

    global_shape: tuple[int, ...]
    substart: tuple[int, ...]

    def __array_finalize__(self, obj: Any) -> None:
        self.global_shape = getattr(obj, "global_shape", ())
        self.substart = getattr(obj, "substart", ())

    def local_slice(self) -> tuple[slice, ...]:
        """The part of the global array this rank holds."""
        return tuple(slice(s, s + n) for s, n in zip(self.substart, self.shape, strict=True))


def newDistArray(pfft: PFFT, forward_output: bool = True, val: Any = None) -> DistArray:
    """A heap array laid out as `pfft`'s output (`forward_output` True) or input; filled
    with `val` when given. Not collective (each rank allocates its own block)."""
    shape = pfft.shape(forward_output)
    a = pfft.comm.empty(shape, pfft.dtype(forward_output)).view(DistArray)
    a.global_shape = pfft.global_shape(forward_output)
    a.substart = tuple(s.start for s in pfft.local_slice(forward_output))
    if val is not None:
        a[...] = val
    return a
