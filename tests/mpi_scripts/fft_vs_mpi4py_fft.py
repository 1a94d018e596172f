"""Run under ``mpiexec -n N``: shmcoll.fft against mpi4py-fft itself, on identical input in
the same launch. Exits non-zero on any difference.

What "the same interface" has to mean for code switching between them: for every case
(c2c and r2c, slab and pencil grids, ragged shapes, an axes subset, each shmcoll backend)
both libraries are planned with the same arguments and mpi4py-fft's defaults, and must
agree on every layout query (``shape``, ``local_slice``, ``global_shape``, ``dtype``,
``dimensions``), on ``newDistArray`` (shape, dtype, zero fill, tensor rank, position in
the global array), and element by element on ``forward`` and ``backward`` with the
default and the opposite ``normalize`` (relative to the largest element: 1e-12 in double
precision, 1e-5 in single). The forward output is also checked against
``numpy.fft.fftn(U) / N`` of the global array (``rfftn`` for real input).
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import mpi4py_fft
import numpy as np
from mpi4py import MPI

import shmcoll
import shmcoll.fft as sf
from shmcoll.fft import available_backends

WORLD = MPI.COMM_WORLD


def tolerance(dtype: Any) -> float:
    return 1e-5 if np.dtype(dtype).char in "fF" else 1e-12


def global_input(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The same global array on every rank (a fixed seed)."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return float("inf")
    if not want.size:
        return 0.0
    return float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-300)


Case = tuple[tuple[int, ...], Any, dict[str, Any], dict[str, Any], tuple[int, ...] | None]


def cases(nranks: int) -> list[Case]:
    """(shape, dtype, shmcoll keywords, mpi4py-fft keywords, axes): the same grid spelled
    for each library (mpi4py-fft's ``slab`` keyword is deprecated; ``grid=(-1,)`` is it)."""
    grids: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {}),  # the default: all axes but the one transformed first
        ({"slab": True}, {"grid": (-1,)}),
        ({"grid": (-1,)}, {"grid": (-1,)}),
        ({"grid": (1, -1)}, {"grid": (1, -1)}),  # a slab on the second axis
        ({"slab": 1}, {"slab": 1}),  # the same, by mpi4py-fft's deprecated slab=axis
    ]
    if nranks == 4:
        grids.append(({"grid": (2, 2)}, {"grid": (2, 2)}))
    out: list[Case] = []
    for ours, theirs in grids:
        for shape in ((12, 10, 9), (8, 8, 8)):
            for dtype in (np.complex128, np.float64):
                out.append((shape, dtype, ours, theirs, None))
    for backend in available_backends():
        if backend != "numpy":
            for dtype in (np.complex128, np.float64):
                out.append(((12, 10, 9), dtype, {"backend": backend}, {}, None))
    out += [
        ((12, 10, 9), None, {}, {}, None),  # both libraries' default dtype
        ((12, 10, 9), np.complex64, {}, {}, None),
        ((12, 10, 9), np.float32, {"slab": True}, {"grid": (-1,)}, None),
        ((12, 10, 9), np.float64, {}, {}, (1, 2)),
        ((12, 10, 9), np.complex128, {}, {}, (0, 2)),
        ((10, 7), np.float64, {}, {}, None),
        ((10, 7), np.complex128, {}, {}, None),
    ]
    return out


def compare_dist_arrays(tag: str, ours: Any, theirs: Any, bad: list[str]) -> None:
    for attr in ("shape", "dtype", "global_shape", "substart", "rank", "dimensions"):
        a, b = getattr(ours, attr), getattr(theirs, attr)
        if a != b:
            bad.append(f"{tag}: DistArray.{attr} {a} != mpi4py-fft's {b}")
    if ours.local_slice() != theirs.local_slice():
        bad.append(f"{tag}: DistArray.local_slice() {ours.local_slice()} != {theirs.local_slice()}")
    if not np.array_equal(ours, theirs):
        bad.append(f"{tag}: newDistArray's values differ from mpi4py-fft's")


def transforms(fft: Any, new: Any, U: np.ndarray) -> dict[str, np.ndarray]:
    """The calls compared, on one library's `fft` (`new` its newDistArray): the defaults
    (forward normalised, backward not: the round trip is the identity), then the opposite
    scalings into given output arrays. Copies, since mpi4py-fft returns its own arrays."""
    u = new(fft, False)
    u[...] = U[fft.local_slice(False)]
    out: dict[str, np.ndarray] = {}
    out["forward(u)"] = np.array(fft.forward(u), copy=True)
    out["backward(forward(u))"] = np.array(fft.backward(out["forward(u)"]), copy=True)
    u_hat = new(fft, True)
    got = fft.forward(u, u_hat, normalize=False)
    out["forward returned its output_array (1.0)"] = np.array(1.0 if got is u_hat else 0.0)
    out["forward(u, u_hat, normalize=False)"] = np.array(u_hat, copy=True)
    v = new(fft, False)
    fft.backward(u_hat, v, normalize=True)
    out["backward(u_hat, v, normalize=True)"] = np.array(v, copy=True)
    out["backward(unnormalised u_hat)"] = np.array(fft.backward(u_hat), copy=True)
    return out


def one_case(
    comm: shmcoll.Comm,
    shape: tuple[int, ...],
    dtype: Any,
    ours_kw: dict[str, Any],
    theirs_kw: dict[str, Any],
    axes: tuple[int, ...] | None,
) -> list[str]:
    """One case on this rank. Each library's collective calls run as a block, followed by
    an MPI barrier: a rank busy in shmcoll makes no MPI progress, so a peer still inside
    one of mpi4py-fft's exchanges could otherwise wait for it forever."""
    bad: list[str] = []
    tag = f"np={WORLD.Get_size()} {shape} {np.dtype(dtype)} axes={axes} {ours_kw} / mpi4py-fft {theirs_kw}"
    U = global_input(shape, dtype)
    given = {} if dtype is None else {"dtype": dtype}
    theirs = mpi4py_fft.PFFT(WORLD, shape, axes=axes, **given, **theirs_kw)
    WORLD.Barrier()
    ours = sf.PFFT(comm, shape, axes=axes, **given, **ours_kw)
    dtype = theirs.dtype(False)
    try:
        for fo in (False, True):
            for q in ("shape", "local_slice", "global_shape", "dtype"):
                a, b = getattr(ours, q)(fo), getattr(theirs, q)(fo)
                if a != b:
                    bad.append(f"{tag}: {q}({fo}) {a} != mpi4py-fft's {b}")
        for q in ("shape", "local_slice", "global_shape", "dtype"):
            if getattr(ours, q)() != getattr(theirs, q)():
                bad.append(f"{tag}: the default of {q}() differs from mpi4py-fft's")
        if ours.dimensions != theirs.dimensions:
            bad.append(f"{tag}: dimensions {ours.dimensions} != {theirs.dimensions}")
        if any(WORLD.allgather(bool(bad))):
            return bad  # the layouts differ: nothing below can be compared element by element
        for fo in (False, True):
            for rank in (0, 1):
                compare_dist_arrays(
                    f"{tag} newDistArray({fo}, rank={rank})",
                    sf.newDistArray(ours, fo, rank=rank),
                    mpi4py_fft.newDistArray(theirs, fo, rank=rank),
                    bad,
                )
        vec_ours = sf.newDistArray(ours, False, rank=1)
        vec_theirs = mpi4py_fft.newDistArray(theirs, False, rank=1)
        compare_dist_arrays(f"{tag} component", vec_ours[1], vec_theirs[1], bad)

        want = transforms(theirs, mpi4py_fft.newDistArray, U)
        WORLD.Barrier()
        got = transforms(ours, sf.newDistArray, U)
        ax = tuple(range(len(shape))) if axes is None else axes
        n = int(np.prod([shape[a] for a in ax]))
        fftn = np.fft.rfftn if np.dtype(dtype).kind == "f" else np.fft.fftn
        raw = fftn(U, axes=ax)[ours.local_slice(True)]
        numpy_says = {
            "forward(u)": raw / n,
            "backward(forward(u))": U[ours.local_slice(False)],
            "forward(u, u_hat, normalize=False)": raw,
            "backward(u_hat, v, normalize=True)": U[ours.local_slice(False)],
        }
        tol = tolerance(dtype)
        for what, theirs_out in want.items():
            e = rel_err(got[what], theirs_out)
            if e > tol:
                bad.append(f"{tag}: {what} differs from mpi4py-fft's by {e:.1e} (relative)")
            e = rel_err(got[what], numpy_says[what]) if what in numpy_says else 0.0
            if e > tol:
                bad.append(f"{tag}: {what} differs from numpy's by {e:.1e}")
    finally:
        ours.destroy()
        WORLD.Barrier()
        theirs.destroy()
    return bad


def main() -> int:
    comm = shmcoll.Comm(WORLD)
    bad: list[str] = []
    todo = cases(WORLD.Get_size())
    for c in todo:
        try:
            bad += one_case(comm, *c)
        except Exception:
            bad.append(f"{c}: {traceback.format_exc()}")
    comm.Free()
    everyone = WORLD.allgather(bad)
    if WORLD.Get_rank() == 0:
        for r, b in enumerate(everyone):
            for line in b:
                print(f"rank {r}: {line}")
        if not any(everyone):
            print(f"OK: {len(todo)} cases agree with mpi4py-fft {mpi4py_fft.__version__}")
    return 1 if any(everyone) else 0


if __name__ == "__main__":
    sys.exit(main())
