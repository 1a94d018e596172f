"""PFFT: the distributed N-D FFT (slab or pencil), planned once, with mpi4py-fft's interface
and conventions (names, defaults, output layout, normalisation).

Why the plan does everything up front: the grid, the sub-communicators of its dimensions,
each layout on the way, the transposes' geometry and heap buffers, and the work arrays are
fixed by (comm, shape, axes, dtype, grid); a call then runs serial transforms (one
multi-axis transform for the axes between two exchanges) and
:class:`~shmcoll.fft.transpose.TransposePlan` exchanges with no planning or allocation
(except the output array when the caller passes none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import numpy as np

from ..comm import Comm
from ..errors import ArgumentError
from .backends import Backend, get_backend
from .decomposition import Layout, resolve_grid
from .distarray import DistArray, newDistArray
from .transpose import TransposePlan


@dataclass
class _Step:
    """Transform `axis` in layout `layout`; `plan` (if any) brings the data from the
    previous step's layout into this one; `buf` indexes the work array of this layout."""

    axis: int
    layout: Layout
    plan: TransposePlan | None
    buf: int


@dataclass(frozen=True)
class _Group:
    """Consecutive steps without a transpose between them: one transform over `axes`
    (numpy's order), after `plan` (if any) brought the data into work array `buf`."""

    axes: tuple[int, ...]
    plan: TransposePlan | None
    buf: int


_A = TypeVar("_A", bound=np.ndarray)


def _complex_of(dt: np.dtype) -> np.dtype:
    return np.result_type(dt, np.complex64)


class PFFT:
    """A planned distributed FFT over the axes `axes` of a global array of shape `shape`.

    comm: a :class:`shmcoll.Comm` or an mpi4py intra-communicator (wrapped, then freed by
        :meth:`destroy`).
    axes: the transformed axes (default: all); the last one is transformed first (r2c for
        real `dtype`, giving ``n // 2 + 1``), then the others in reverse order.
    dtype: of the input (float32/float64: r2c; complex64/complex128: c2c); float64 by
        default, as in mpi4py-fft.
    grid / slab: the process grid, as in mpi4py-fft (see the package docstring); ``slab``
        True distributes the axis after the one transformed first, an integer that axis.
    backend: "numpy", "scipy" or "pyfftw" (serial 1-D transforms).
    transposed_out: True (default, mpi4py-fft's only layout): the forward output stays in
        the layout of the last transform (no transposes back); False: it is transposed back
        to the input's distribution (twice the exchanges). :meth:`backward` expects the
        layout in force.

    Normalisation is mpi4py-fft's, per call: :meth:`forward` divides by the product of the
    transformed lengths (``normalize=True``), :meth:`backward` does not
    (``normalize=False``), so that ``backward(forward(u)) == u`` with the defaults.

    Every method that moves data is collective over `comm`.
    """

    def __init__(
        self,
        comm: Any,
        shape: Sequence[int],
        axes: Sequence[int] | int | None = None,
        dtype: Any = np.float64,
        grid: Sequence[int] | None = None,
        slab: bool | int = False,
        backend: str = "numpy",
        transposed_out: bool = True,
    ) -> None:
        self._own_comm = not isinstance(comm, Comm)
        if self._own_comm and not hasattr(comm, "Split_type"):
            raise ArgumentError(
                f"comm must be a shmcoll.Comm or an mpi4py communicator, not {type(comm).__name__}"
            )
        self._backend: Backend = get_backend(backend)
        self.comm: Any = Comm(comm) if self._own_comm else comm
        self._subcomms: dict[int, Any] = {}
        try:
            self._plan(shape, axes, dtype, grid, slab, transposed_out)
        except BaseException:
            self.destroy()
            raise

    # -- planning ---------------------------------------------------------------------
    def _plan(
        self,
        shape: Sequence[int],
        axes: Sequence[int] | int | None,
        dtype: Any,
        grid: Sequence[int] | None,
        slab: bool | int,
        transposed_out: bool,
    ) -> None:
        gshape = tuple(int(n) for n in np.atleast_1d(np.asarray(shape)))
        ndim = len(gshape)
        if ndim == 0 or min(gshape) < 1:
            raise ArgumentError(f"shape must have at least one axis and positive lengths, got {tuple(shape)}")
        nested = not isinstance(axes, (int, np.integer)) and any(
            not isinstance(a, (int, np.integer)) for a in (() if axes is None else axes)
        )
        if nested:
            raise ArgumentError(
                f"axes {axes}: groups of axes (mpi4py-fft's nested form) are not supported; pass a flat "
                "sequence (the axes between two exchanges are transformed in one call anyway)"
            )
        ax = list(range(ndim)) if axes is None else [int(a) for a in np.atleast_1d(np.asarray(axes))]
        ax = [a + ndim if a < 0 else a for a in ax]
        if not ax or any(not 0 <= a < ndim for a in ax) or len(set(ax)) != len(ax):
            raise ArgumentError(f"axes {axes} must be distinct axes of a {ndim}-D array")
        self.axes = tuple(ax)
        self._dtype_in = np.dtype(dtype)
        if self._dtype_in.kind not in "fc":
            raise ArgumentError(f"dtype must be a floating or complex type, not {self._dtype_in}")
        self._real = self._dtype_in.kind == "f"
        self._dtype_out = _complex_of(self._dtype_in)
        self.transposed_out = bool(transposed_out)
        #: The factor of a normalised transform: one over the product of the transformed
        #: lengths (the real lengths for r2c), as mpi4py-fft's ``normalize``.
        self._norm_factor = 1.0 / int(np.prod([gshape[a] for a in ax], dtype=np.int64))
        comm = self.comm
        order = ax[::-1]
        dims = resolve_grid(comm.size, ndim, order[0], grid, slab)
        self.grid = dims
        coords = tuple(int(c) for c in np.unravel_index(comm.rank, dims))
        for d, p in enumerate(dims):  # same order on every rank: Split is collective
            if 1 < p < comm.size:
                rest = list(coords)
                rest[d] = 0
                self._subcomms[d] = comm.Split(int(np.ravel_multi_index(rest, dims)), coords[d])
            elif p == comm.size > 1:
                self._subcomms[d] = comm
        owner = tuple(a if dims[a] > 1 else None for a in range(ndim))
        self._in_layout = Layout(gshape, owner, dims, coords)
        first = self._in_layout
        if self._real:
            first = first.resized(order[0], gshape[order[0]] // 2 + 1)
        # Walk the axes: each step moves the grid dimension cutting its axis onto the axis
        # transformed before (mpi4py-fft's Pencil.pencil), through one transpose.
        geometry: list[tuple[int, Layout, tuple[int, Layout, int, int] | None]] = [(order[0], first, None)]
        cur, prev = first, order[0]
        for a in order[1:]:
            g = cur.owner[a]
            if g is None:
                geometry.append((a, cur, None))
            else:
                new = cur.moved(a, prev)
                geometry.append((a, new, (g, cur, prev, a)))
                cur = new
            prev = a
        need: dict[int, int] = {}
        for _, layout, t in geometry:
            if t is not None:
                n = max(int(np.prod(t[1].shape, dtype=np.int64)), int(np.prod(layout.shape, dtype=np.int64)))
                need[t[0]] = max(need.get(t[0], 0), n)
        bufs = {d: (self._subcomms[d].empty(n, self._dtype_out), self._subcomms[d].empty(n, self._dtype_out))
                for d, n in need.items()}  # fmt: skip
        self._steps: list[_Step] = []
        self._work: list[np.ndarray] = []
        # The grid dimension of the transpose that reads each work array forward (the next
        # one), else of the one that reads it backward (the one that wrote it): the array
        # lives in that sub-communicator's heap, so that the transpose reads it in place.
        readers: list[int | None] = [t[0] if t is not None else None for _, _, t in geometry]
        for k, (a, layout, t) in enumerate(geometry):
            plan = None
            if t is not None or not self._work:
                reader = next((d for d in readers[k + 1 :] if d is not None), readers[k])
                self._work.append(self._alloc(layout.shape, reader))
            if t is not None:
                d, src, i, j = t
                plan = TransposePlan(self._subcomms[d], src, layout, i, j, *bufs[d])
            self._steps.append(_Step(a, layout, plan, len(self._work) - 1))
        self._out_layout = self._steps[-1].layout if self.transposed_out else self._steps[0].layout
        # Steps with no transpose between them run as one multi-axis transform (one FFTW
        # plan for the axes this rank holds whole); axes in numpy's order (the first
        # transformed, halved for real input, last).
        self._groups: list[_Group] = []
        for st in self._steps:
            if self._groups and st.plan is None:
                last = self._groups[-1]
                self._groups[-1] = _Group((st.axis, *last.axes), last.plan, last.buf)
            else:
                self._groups.append(_Group((st.axis,), st.plan, st.buf))

    def _alloc(self, shape: tuple[int, ...], dim: int | None) -> np.ndarray:
        """A work array in the heap of grid dimension `dim`'s sub-communicator (ordinary
        memory without one)."""
        if dim is None:
            return np.empty(shape, self._dtype_out)
        return self._subcomms[dim].empty(shape, self._dtype_out)

    # -- layout queries (mpi4py-fft's names) ------------------------------------------
    def shape(self, forward_output: bool = True) -> tuple[int, ...]:
        """This rank's local shape of the forward output (True) or input (False)."""
        return (self._out_layout if forward_output else self._in_layout).shape

    def local_slice(self, forward_output: bool = True) -> tuple[slice, ...]:
        """The part of the global output (True) or input (False) array this rank holds."""
        return (self._out_layout if forward_output else self._in_layout).slices

    def global_shape(self, forward_output: bool = False) -> tuple[int, ...]:
        """The global shape of the input (False, mpi4py-fft's default) or output (True)."""
        return (self._out_layout if forward_output else self._in_layout).global_shape

    def dtype(self, forward_output: bool = False) -> np.dtype:
        """The dtype of the input (False, mpi4py-fft's default) or output (True)."""
        return self._dtype_out if forward_output else self._dtype_in

    @property
    def dimensions(self) -> int:
        """The number of axes of the arrays (a property, as in mpi4py-fft)."""
        return len(self._in_layout.global_shape)

    # -- timing -----------------------------------------------------------------------
    @property
    def plans(self) -> list[TransposePlan]:
        """The transposes, in forward order."""
        return [s.plan for s in self._steps if s.plan is not None]

    def transpose_seconds(self) -> float:
        """Seconds spent in transposes (pack, exchange, unpack) since planning or reset."""
        return sum(p.transpose_seconds for p in self.plans)

    def exchange_seconds(self) -> float:
        """Seconds spent in the Alltoallv calls since planning or reset."""
        return sum(p.exchange_seconds for p in self.plans)

    def reset_timers(self) -> None:
        for p in self.plans:
            p.transpose_seconds = p.exchange_seconds = 0.0

    # -- transforms -------------------------------------------------------------------
    def _checked(self, a: Any, forward_output: bool, name: str, writable: bool) -> np.ndarray:
        want_shape, want_dtype = self.shape(forward_output), self.dtype(forward_output)
        arr = a if writable else np.asarray(a)
        if not isinstance(arr, np.ndarray) or arr.shape != want_shape:
            got = getattr(arr, "shape", None)
            raise ArgumentError(
                f"{name} must have this rank's local shape {want_shape} (see PFFT.shape({forward_output})), "
                f"got {got}"
            )
        if arr.dtype != want_dtype:
            if writable or not np.can_cast(arr.dtype, want_dtype, "same_kind"):
                raise ArgumentError(f"{name} must have dtype {want_dtype}, got {arr.dtype}")
            arr = arr.astype(want_dtype)
        if writable and not arr.flags.writeable:
            raise ArgumentError(f"{name} is read-only")
        return arr

    def _normalised(self, out: np.ndarray, normalize: bool) -> None:
        """The scaling the groups did not do (backends without fused scaling): one
        in-place multiply of the result."""
        if normalize and not self._backend.fused_scaling:
            out *= self._norm_factor

    @overload
    def forward(self, input_array: Any, output_array: None = None, normalize: bool = True) -> DistArray: ...
    @overload
    def forward(self, input_array: Any, output_array: _A, normalize: bool = True) -> _A: ...
    def forward(
        self, input_array: Any, output_array: np.ndarray | None = None, normalize: bool = True
    ) -> np.ndarray:
        """The forward transform of `input_array` (layout ``shape(False)``) into
        `output_array` (layout ``shape(True)``; a new heap DistArray when None), returned.
        Divided by the product of the transformed lengths when `normalize` (default, as in
        mpi4py-fft), i.e. ``numpy.fft.fftn(U) / N`` (``rfftn`` for real input)."""
        u = self._checked(input_array, False, "input_array", writable=False)
        if output_array is None:
            u_hat: np.ndarray = newDistArray(self, True, val=None)
        else:
            u_hat = self._checked(output_array, True, "output_array", True)
        groups = self._groups
        result = groups[-1].buf if self.transposed_out else groups[0].buf
        work = [u_hat if k == result else w for k, w in enumerate(self._work)]
        be = self._backend
        scaled = normalize and be.fused_scaling
        g0 = groups[0]
        cur = work[g0.buf]
        (be.rfft if self._real else be.fft)(u, g0.axes, cur, scaled)
        for g in groups[1:]:
            if g.plan is not None:
                g.plan.forward(cur, work[g.buf])
                cur = work[g.buf]
            be.fft(cur, g.axes, cur, scaled)
        if not self.transposed_out:
            for k in range(len(groups) - 1, 0, -1):
                plan = groups[k].plan
                if plan is not None:
                    plan.backward(cur, work[groups[k - 1].buf])
                    cur = work[groups[k - 1].buf]
        self._normalised(u_hat, normalize)
        return u_hat

    @overload
    def backward(self, input_array: Any, output_array: None = None, normalize: bool = False) -> DistArray: ...
    @overload
    def backward(self, input_array: Any, output_array: _A, normalize: bool = False) -> _A: ...
    def backward(
        self, input_array: Any, output_array: np.ndarray | None = None, normalize: bool = False
    ) -> np.ndarray:
        """The inverse of :meth:`forward` with its defaults: `input_array` (layout
        ``shape(True)``, left unchanged) into `output_array` (layout ``shape(False)``; a new
        heap DistArray when None), returned. Unscaled by default (mpi4py-fft's
        convention); divided by the product of the transformed lengths when `normalize`,
        i.e. ``numpy.fft.ifftn`` (``irfftn`` for real output)."""
        u_hat = self._checked(input_array, True, "input_array", writable=False)
        if output_array is None:
            u: np.ndarray = newDistArray(self, False, val=None)
        else:
            u = self._checked(output_array, False, "output_array", True)
        groups, work, be = self._groups, self._work, self._backend
        scaled = normalize and be.fused_scaling
        cur = u_hat
        if not self.transposed_out:
            for g in groups[1:]:
                if g.plan is not None:
                    g.plan.forward(cur, work[g.buf])
                    cur = work[g.buf]
        for k in range(len(groups) - 1, 0, -1):
            g = groups[k]
            be.ifft(cur, g.axes, work[g.buf], scaled)
            cur = work[g.buf]
            if g.plan is not None:
                g.plan.backward(cur, work[groups[k - 1].buf])
                cur = work[groups[k - 1].buf]
        g0 = groups[0]
        (be.irfft if self._real else be.ifft)(cur, g0.axes, u, scaled)
        self._normalised(u, normalize)
        return u

    # -- lifetime ---------------------------------------------------------------------
    def destroy(self) -> None:
        """Free the sub-communicators this plan created (and `comm`, if it wrapped an mpi4py
        one); collective. The plan is unusable afterwards; arrays from
        :func:`newDistArray` and :meth:`forward` stay valid while referenced."""
        self._steps = []
        self._work = []
        for d, sub in list(self._subcomms.items()):
            if sub is not self.comm:
                sub.Free()
            del self._subcomms[d]
        if self._own_comm and getattr(self, "comm", None) is not None:
            self.comm.Free()
            self.comm = None

    def __enter__(self) -> PFFT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


__all__ = ["PFFT", "DistArray", "newDistArray"]
