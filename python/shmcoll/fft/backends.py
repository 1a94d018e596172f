"""Serial 1-D transforms along one axis of a local array, from numpy, scipy or pyFFTW.

Why an adapter: the distributed transform only ever needs four operations (c2c forward and
inverse, r2c, c2r) along one axis, written into a preallocated output; each library spells
them differently (numpy >= 2 takes ``out=``; scipy takes ``workers=``; pyFFTW wants its
plans cached). Scaling is one flag for all four: ``scaled=True`` divides the result by the
product of the transformed lengths, ``False`` leaves it unscaled (FFTW's convention), in
either direction; :class:`~shmcoll.fft.PFFT` maps mpi4py-fft's ``normalize`` onto it.
Where the library scales inside the transform (numpy's and scipy's ``norm``), the flag
costs no pass over the data (``fused_scaling``); otherwise it is one in-place multiply.
"""

from __future__ import annotations

import importlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..envvars import env_whole
from ..errors import ArgumentError, ShmcollError

#: The backends PFFT knows, in the order `available_backends` lists them.
BACKENDS = ("numpy", "scipy", "pyfftw")


class BackendUnavailableError(ShmcollError, ImportError):
    """The FFT library a backend needs is not installed."""


#: The most threads SHMCOLL_FFT_THREADS may ask for.
MAX_FFT_THREADS = 1024


def _threads() -> int:
    """Threads for the local transforms: one per rank by default (ranks already fill the
    cores); ``SHMCOLL_FFT_THREADS`` (1 to MAX_FFT_THREADS) overrides."""
    return env_whole("SHMCOLL_FFT_THREADS", 1, MAX_FFT_THREADS) or 1


class Backend:
    """numpy.fft: always available; writes straight into `out` (numpy >= 2). Inputs and
    outputs may have any strides and alignment (numpy and scipy take any array), and the
    input is never written.

    Subclasses for other numpy-compatible modules set `_mod` (the module with ``fft``,
    ``ifft``, ``rfft``, ``irfft``) and `_kw` (extra keywords, e.g. threads)."""

    name = "numpy"
    _mod: Any = np.fft
    _kw: dict[str, Any]
    #: Whether ``scaled=True`` is applied inside the transform (no extra pass over `out`).
    fused_scaling = True

    def __init__(self) -> None:
        self._np_out = int(np.__version__.split(".")[0]) >= 2
        self._kw = {}

    def _call(self, f: Callable[..., np.ndarray], a: np.ndarray, out: np.ndarray, **kw: Any) -> np.ndarray:
        if self._np_out and self._mod is np.fft:
            return f(a, out=out, **kw)
        np.copyto(out, f(a, **kw, **self._kw), casting="same_kind")
        return out

    # Each transform runs over `axes` (numpy's order: for the real transforms the last
    # axis is the halved one); one axis uses the 1-D function, several the n-D one, which
    # the libraries run as one multi-dimensional plan. numpy's `norm` names the direction
    # that divides: "forward" scales a forward transform, "backward" an inverse one.
    def fft(self, a: np.ndarray, axes: tuple[int, ...], out: np.ndarray, scaled: bool) -> np.ndarray:
        norm = "forward" if scaled else "backward"
        if len(axes) == 1:
            return self._call(self._mod.fft, a, out, axis=axes[0], norm=norm)
        return self._call(self._mod.fftn, a, out, axes=axes, norm=norm)

    def ifft(self, a: np.ndarray, axes: tuple[int, ...], out: np.ndarray, scaled: bool) -> np.ndarray:
        norm = "backward" if scaled else "forward"
        if len(axes) == 1:
            return self._call(self._mod.ifft, a, out, axis=axes[0], norm=norm)
        return self._call(self._mod.ifftn, a, out, axes=axes, norm=norm)

    def rfft(self, a: np.ndarray, axes: tuple[int, ...], out: np.ndarray, scaled: bool) -> np.ndarray:
        norm = "forward" if scaled else "backward"
        if len(axes) == 1:
            return self._call(self._mod.rfft, a, out, axis=axes[0], norm=norm)
        return self._call(self._mod.rfftn, a, out, axes=axes, norm=norm)

    def irfft(self, a: np.ndarray, axes: tuple[int, ...], out: np.ndarray, scaled: bool) -> np.ndarray:
        """The inverse of rfft; the lengths come from `out` (the last axis is the halved one)."""
        norm = "backward" if scaled else "forward"
        if len(axes) == 1:
            return self._call(self._mod.irfft, a, out, n=out.shape[axes[0]], axis=axes[0], norm=norm)
        s = [out.shape[ax] for ax in axes]
        return self._call(self._mod.irfftn, a, out, s=s, axes=axes, norm=norm)


class ScipyBackend(Backend):
    """scipy.fft, with ``workers=`` threads (keeps float32 in single precision)."""

    name = "scipy"

    def __init__(self) -> None:
        super().__init__()
        try:
            mod = importlib.import_module("scipy.fft")
        except ImportError as e:
            raise BackendUnavailableError(
                "backend='scipy' needs scipy (pip install scipy); backend='numpy' always works"
            ) from e
        self._mod = mod
        self._kw = {"workers": _threads()}


def _plannable(x: np.ndarray) -> bool:
    """Whether a pyFFTW plan made on C-contiguous scratch of `x`'s shape and dtype can run
    on `x` itself: the same strides (numpy calls arrays with other strides along length-1
    axes C-contiguous too, pyFFTW does not) and the natural alignment of the real type."""
    step = x.dtype.itemsize
    for n, st in zip(reversed(x.shape), reversed(x.strides), strict=True):
        if st != step:
            return False
        step *= n
    return x.ctypes.data % (x.dtype.itemsize // (2 if x.dtype.kind == "c" else 1)) == 0


class PyfftwBackend(Backend):
    """FFTW through pyFFTW's planned ``FFTW`` objects: one plan per (transform, shapes,
    dtypes, axes, in place or not, SIMD-aligned or not), built once with FFTW_MEASURE
    (wisdom accumulates in the process) on C-contiguous scratch arrays and then executed
    straight on the caller's arrays when they are C-contiguous (PFFT's own arrays are),
    without the copies of pyFFTW's numpy-compatible interface; other arrays (strided
    views, Fortran order, misaligned buffers) are copied through the scratch. c2r
    transforms, which FFTW lets overwrite their input, read a copy (`PFFT.backward`
    promises to leave its argument unchanged)."""

    name = "pyfftw"
    fused_scaling = False

    def __init__(self) -> None:
        super().__init__()
        try:
            self._fftw = importlib.import_module("pyfftw")
        except ImportError as e:
            raise BackendUnavailableError(
                "backend='pyfftw' needs pyFFTW (pip install pyfftw); backend='numpy' always works"
            ) from e
        self._plans: dict[tuple[Any, ...], Any] = {}
        self._threads = _threads()
        self._load_wisdom()

    @staticmethod
    def wisdom_file() -> Path:
        """Where FFTW wisdom is kept between runs (``SHMCOLL_FFTW_WISDOM`` overrides)."""
        env = os.environ.get("SHMCOLL_FFTW_WISDOM")
        if env:
            return Path(env)
        import platformdirs

        return platformdirs.user_cache_path("shmcoll") / "fftw-wisdom.pickle"

    def _load_wisdom(self) -> None:
        """Reuse the wisdom of earlier runs, so that plans are found, not measured again."""
        try:
            with self.wisdom_file().open("rb") as f:
                self._fftw.import_wisdom(pickle.load(f))
        except (OSError, ValueError, TypeError, pickle.UnpicklingError, EOFError):
            pass  # no wisdom yet, or unusable: plans are measured

    def _save_wisdom(self) -> None:
        """Store the wisdom (after a new plan), atomically: ranks may write at once."""
        path = self.wisdom_file()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            with tmp.open("wb") as f:
                pickle.dump(self._fftw.export_wisdom(), f)
            tmp.replace(path)
        except OSError:
            pass  # a read-only cache only costs planning time

    def _run(
        self, kind: str, a: np.ndarray, out: np.ndarray, axes: tuple[int, ...], scaled: bool
    ) -> np.ndarray:
        inverse = kind in ("ifft", "irfft")
        # A plan accepts (update_arrays) only arrays with the strides of the arrays it was
        # planned on, C-contiguous scratch here, and at least the natural alignment of the
        # real type. Such arrays run in place of the scratch; any other (a strided view,
        # Fortran order, a misaligned buffer) goes through the scratch: the input copied
        # in, the result copied out. FFTW's c2r transforms overwrite their input, so an
        # irfft always reads a copy (PFFT.backward leaves its argument unchanged).
        in_place = a.__array_interface__["data"][0] == out.__array_interface__["data"][0]
        direct_in = kind != "irfft" and _plannable(a)
        direct_out = _plannable(out)
        if in_place and not (direct_in and direct_out):
            direct_in = direct_out = False  # both through the plan's one scratch array
        # SIMD-aligned arrays (heap arrays and the scratch are) get FFTW's aligned
        # codelets; others a plan made for any alignment.
        align = self._fftw.simd_alignment
        aligned = all(x.ctypes.data % align == 0 for x, d in ((a, direct_in), (out, direct_out)) if d)
        key = (kind, a.shape, a.dtype.str, out.shape, out.dtype.str, axes, in_place, aligned)
        cached = self._plans.get(key)
        if cached is None:
            # Plan on scratch arrays (FFTW_MEASURE overwrites them), kept beside the plan:
            # update_arrays re-points plan.input_array/output_array at the caller's arrays.
            tin = self._fftw.empty_aligned(a.shape, a.dtype)
            tout = tin if in_place else self._fftw.empty_aligned(out.shape, out.dtype)
            flags = ("FFTW_MEASURE",) if aligned else ("FFTW_MEASURE", "FFTW_UNALIGNED")
            plan = self._fftw.FFTW(
                tin, tout, axes=axes, direction="FFTW_BACKWARD" if inverse else "FFTW_FORWARD",
                flags=flags, threads=self._threads,
            )  # fmt: skip
            cached = self._plans[key] = (plan, tin, tout)
            self._save_wisdom()
        plan, tin, tout = cached
        if not direct_in:
            np.copyto(tin, a)
        plan.update_arrays(a if direct_in else tin, out if direct_out else tout)
        plan.execute()
        if not direct_out:
            np.copyto(out, tout)
        if scaled:  # FFTW computes unscaled transforms
            out *= 1.0 / int(np.prod([(out if inverse else a).shape[ax] for ax in axes], dtype=np.int64))
        return out

    def fft(self, a: np.ndarray, axes: tuple[int, ...], out: np.ndarray, scaled: bool) -> np.ndarray:
        return self._run("fft", a, out, axes, scaled)

    def ifft(self, a: np.ndarray, axes: tuple[int, ...], out: np.ndarray, scaled: bool) -> np.ndarray:
        return self._run("ifft", a, out, axes, scaled)

    def rfft(self, a: np.ndarray, axes: tuple[int, ...], out: np.ndarray, scaled: bool) -> np.ndarray:
        return self._run("rfft", a, out, axes, scaled)

    def irfft(self, a: np.ndarray, axes: tuple[int, ...], out: np.ndarray, scaled: bool) -> np.ndarray:
        return self._run("irfft", a, out, axes, scaled)


def get_backend(name: str) -> Backend:
    """The backend called `name`; ArgumentError for an unknown name,
    :class:`BackendUnavailableError` (an ImportError) when its library is missing."""
    if name == "numpy":
        return Backend()
    if name == "scipy":
        return ScipyBackend()
    if name == "pyfftw":
        return PyfftwBackend()
    hint = " (FFTW, mpi4py-fft's 'fftw', is 'pyfftw' here)" if name == "fftw" else ""
    raise ArgumentError(f"unknown FFT backend {name!r}; choose one of {', '.join(BACKENDS)}{hint}")


def available_backends() -> list[str]:
    """The backends whose library imports here."""
    out = []
    for name in BACKENDS:
        try:
            get_backend(name)
        except BackendUnavailableError:
            continue
        out.append(name)
    return out
