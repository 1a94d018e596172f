"""Block geometry of a distributed array: how a global shape is cut over a process grid.

The rules are mpi4py-fft's, so that arrays distributed by either library line up rank for
rank: an axis of length ``n`` split over ``p`` ranks gives rank ``r`` ``n // p`` entries,
one more to the first ``n % p`` ranks (:func:`block`); the process grid is Cartesian with
the last grid dimension varying fastest (MPI's ``Create_cart`` order); wildcard grid sizes
are filled like ``MPI.Compute_dims`` (balanced, non-increasing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError


def block(n: int, parts: int, index: int) -> tuple[int, int]:
    """(size, start) of part `index` of an axis of length `n` cut into `parts` blocks."""
    q, r = divmod(n, parts)
    return q + (1 if index < r else 0), index * q + min(index, r)


def _factors(n: int) -> list[int]:
    out: list[int] = []
    f = 2
    while f * f <= n:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    if n > 1:
        out.append(n)
    return out


def compute_dims(nnodes: int, ndims: int) -> list[int]:
    """A balanced factorisation of `nnodes` into `ndims` factors, non-increasing (what
    ``MPI.Compute_dims(nnodes, ndims)`` returns), so a wildcard grid matches mpi4py-fft's."""
    if ndims == 0:
        if nnodes != 1:
            raise ArgumentError(f"cannot place {nnodes} ranks on a grid with no free dimension")
        return []
    dims = [1] * ndims
    for f in sorted(_factors(nnodes), reverse=True):
        dims[dims.index(min(dims))] *= f
    return sorted(dims, reverse=True)


def resolve_grid(
    size: int, ndim: int, first_axis: int, grid: Sequence[int] | None, slab: bool | int
) -> tuple[int, ...]:
    """Grid sizes per array axis (product `size`) of the input layout.

    `grid` as in mpi4py-fft: one entry per leading axis (missing trailing entries are 1);
    entries <= 0 are wildcards. `slab` as mpi4py-fft's: True distributes only the axis
    after `first_axis` (the axis transformed first), an integer only that axis. The axis
    transformed first must be whole on every rank, so its grid size is forced to 1."""
    if slab is not False and slab is not None:
        if grid is not None:
            raise ArgumentError("pass either grid or slab, not both")
        axis = (first_axis + 1) % ndim if slab is True else int(slab) + (ndim if int(slab) < 0 else 0)
        if ndim == 1 and size > 1:
            raise ArgumentError("a 1-D transform cannot be distributed (its only axis is transformed first)")
        if not 0 <= axis < ndim or (axis == first_axis and size > 1):
            raise ArgumentError(
                f"slab={slab} must name an axis of the {ndim}-D array other than {first_axis}, "
                "which is transformed first"
            )
        dims = [1] * ndim
        dims[axis] = size
        return tuple(dims)
    if grid is None:
        g = [0] * ndim
        g[first_axis] = 1
    else:
        g = [int(x) for x in grid]
        if len(g) > ndim:
            raise ArgumentError(f"grid {tuple(grid)} has more entries than the array has axes ({ndim})")
        g += [1] * (ndim - len(g))
        if g[first_axis] > 1:
            raise ArgumentError(
                f"grid {tuple(grid)} distributes axis {first_axis}, which is transformed first and must be "
                "whole on every rank (choose other axes or a different grid)"
            )
        g[first_axis] = 1
    fixed = int(np.prod([x for x in g if x > 0], dtype=np.int64))
    wild = [i for i, x in enumerate(g) if x <= 0]
    if size % fixed or (not wild and fixed != size):
        raise ArgumentError(
            f"grid {tuple(grid) if grid is not None else None} does not match the communicator size {size}"
        )
    for i, d in zip(wild, compute_dims(size // fixed, len(wild)), strict=True):
        g[i] = d
    return tuple(g)


@dataclass(frozen=True)
class Layout:
    """One distribution of a global array over the grid.

    `owner[a]` is the grid dimension that cuts axis ``a`` (None: the axis is whole on
    every rank). Grid dimensions move between axes as the transform proceeds, as in
    mpi4py-fft's ``Pencil.pencil``."""

    global_shape: tuple[int, ...]
    owner: tuple[int | None, ...]
    dims: tuple[int, ...]
    coords: tuple[int, ...]

    def _blocks(self) -> list[tuple[int, int]]:
        return [
            (n, 0) if d is None else block(n, self.dims[d], self.coords[d])
            for n, d in zip(self.global_shape, self.owner, strict=True)
        ]

    @property
    def shape(self) -> tuple[int, ...]:
        """This rank's local shape."""
        return tuple(s for s, _ in self._blocks())

    @property
    def start(self) -> tuple[int, ...]:
        """Global index of this rank's first element, per axis."""
        return tuple(s for _, s in self._blocks())

    @property
    def slices(self) -> tuple[slice, ...]:
        """This rank's part of the global array."""
        return tuple(slice(s, s + n) for n, s in self._blocks())

    def moved(self, from_axis: int, to_axis: int) -> Layout:
        """The layout after the grid dimension cutting `from_axis` moves to `to_axis`."""
        owner = list(self.owner)
        owner[to_axis], owner[from_axis] = owner[from_axis], None
        return Layout(self.global_shape, tuple(owner), self.dims, self.coords)

    def resized(self, axis: int, n: int) -> Layout:
        """The same distribution with axis `axis` of global length `n` (r2c halves an axis)."""
        gs = list(self.global_shape)
        gs[axis] = n
        return Layout(tuple(gs), self.owner, self.dims, self.coords)
