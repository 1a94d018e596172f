"""shmcoll.fft.PFFT on 1 to 4 forked ranks against numpy.fft on the global array.

Every rank builds the same global input from a seeded RNG, transforms its block, and
compares its block of the output with ``numpy.fft.fftn(U) / N`` / ``rfftn(U) / N`` of the
global array (mpi4py-fft's normalisation; N the product of the transformed lengths), the
unnormalised variants with ``fftn`` and ``ifftn``, and the round trip with its input.
Shapes are ragged on purpose (12x10x9 splits unevenly over 3 and 4 ranks), so the per-rank
counts of the Alltoallv differ."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import TESTS_DIR, check_all, run_mpiexec, run_ranks, subprocess_env
from shmcoll.fft import PFFT, BackendUnavailableError, available_backends, block, compute_dims, newDistArray

pytestmark = pytest.mark.timeout(120)

BACKENDS = available_backends()


def tolerance(dtype: Any) -> float:
    return 1e-5 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else 1e-12


def global_input(shape: tuple[int, ...], dtype: Any, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-300)
    return float(np.abs(got - want).max()) / scale if got.size else 0.0


def roundtrip_case(
    comm: shmcoll.Comm,
    shape: tuple[int, ...],
    dtype: Any,
    kw: dict[str, Any],
    heap: bool,
    axes: tuple[int, ...] | None = None,
) -> list[str]:
    """One configuration on this rank: forward vs numpy, backward vs the input, layout
    queries vs the arrays."""
    bad: list[str] = []
    with PFFT(comm, shape, axes=axes, dtype=dtype, **kw) as fft:
        tag = f"{shape} {np.dtype(dtype)} {kw} heap={heap} axes={axes} grid={fft.grid}"
        U = global_input(shape, dtype)
        ax = tuple(range(len(shape))) if axes is None else axes
        n = int(np.prod([shape[a] for a in ax]))
        raw = np.fft.rfftn(U, axes=ax) if np.dtype(dtype).kind == "f" else np.fft.fftn(U, axes=ax)
        want = raw / n
        isl, osl = fft.local_slice(False), fft.local_slice(True)
        if fft.shape(False) != U[isl].shape or fft.shape(True) != want[osl].shape:
            bad.append(f"{tag}: shape() {fft.shape(False)}/{fft.shape(True)} != slices")
        if fft.global_shape(True) != want.shape or fft.global_shape() != shape:
            bad.append(f"{tag}: global_shape {fft.global_shape()} / {fft.global_shape(True)}")
        if heap:
            du = newDistArray(fft, False)
            du[...] = U[isl]
            u: np.ndarray = du
            if not comm.in_heap(du) or du.local_slice() != isl or du.global_shape != shape:
                bad.append(f"{tag}: newDistArray input is not a heap DistArray of the input layout")
            u_hat = newDistArray(fft, True)
            out = fft.forward(u, u_hat)
            if out is not u_hat:
                bad.append(f"{tag}: forward did not return u_hat")
        else:
            u = np.ascontiguousarray(U[isl])
            out = fft.forward(u)
            if out.local_slice() != osl or out.dtype != fft.dtype(True):
                bad.append(f"{tag}: forward output {out.local_slice()} {out.dtype}")
        tol = tolerance(dtype)
        e = rel_err(out, want[osl])
        if e > tol:
            bad.append(f"{tag}: forward rel. error {e:.2e}")
        keep = np.array(out, copy=True)
        back = fft.backward(out, newDistArray(fft, False) if heap else None)
        if not np.array_equal(out, keep):
            bad.append(f"{tag}: backward modified its input")
        if back.dtype != np.dtype(dtype) or back.shape != U[isl].shape:
            bad.append(f"{tag}: backward gave {back.dtype} {back.shape}")
        else:
            e = rel_err(back, U[isl])
            if e > tol:
                bad.append(f"{tag}: round trip rel. error {e:.2e}")
        # A second call reuses the plan and its buffers; normalize flips each direction's
        # scaling: forward unscaled is numpy's fftn, backward scaled is numpy's ifftn.
        again = fft.forward(u, normalize=False)
        if rel_err(again, raw[osl]) > tol:
            bad.append(f"{tag}: forward(normalize=False) rel. error {rel_err(again, raw[osl]):.2e}")
        back = fft.backward(again, normalize=True)
        if rel_err(back, U[isl]) > tol:
            bad.append(f"{tag}: backward(normalize=True) rel. error {rel_err(back, U[isl]):.2e}")
        unscaled = fft.backward(again)
        if rel_err(unscaled, n * U[isl]) > tol:
            bad.append(f"{tag}: backward() is not the unscaled inverse")
    return bad


def many(cases: list[tuple[Any, ...]]) -> list[str]:
    """All `cases` on this rank, on one communicator (a rank joins the launcher's once)."""
    bad: list[str] = []
    with shmcoll.Comm() as comm:
        for c in cases:
            bad += roundtrip_case(comm, *c)
    return bad


def _cases(nranks: int) -> list[tuple[Any, ...]]:
    """The configurations run at `nranks` ranks (shape, dtype, PFFT keywords, heap)."""
    grids: list[dict[str, Any]] = [{"slab": True}, {}]
    if nranks == 4:
        grids.append({"grid": (2, 2)})
    if nranks == 3:
        grids += [{"grid": (3, 1)}, {"grid": (1, 3)}]
    out: list[tuple[Any, ...]] = []
    for i, g in enumerate(grids):
        for shape in ((8, 8, 8), (12, 10, 9)):
            for j, dtype in enumerate((np.complex128, np.float64, np.complex64, np.float32)):
                to = (i + j) % 2 == 1
                heap = (i + j + len(shape)) % 2 == 0
                out.append((shape, dtype, {**g, "transposed_out": to}, heap))
                if j < 2:  # both output layouts for the double-precision types
                    out.append((shape, dtype, {**g, "transposed_out": not to}, not heap))
    return out


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_forward_matches_numpy_and_roundtrips(nranks: int) -> None:
    check_all(run_ranks(nranks, many, _cases(nranks)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_installed_backend(backend: str) -> None:
    cases = [
        ((12, 10, 9), np.float64, {"backend": backend}, True),
        ((12, 10, 9), np.complex64, {"backend": backend, "grid": (2, 1), "transposed_out": True}, False),
    ]
    check_all(run_ranks(2, many, cases))


def test_larger_shapes() -> None:
    cases = [
        ((32, 32, 32), np.complex128, {}, True),
        ((64, 48, 40), np.float64, {"slab": True, "transposed_out": True}, True),
    ]
    check_all(run_ranks(2, many, cases))


def test_axes_subset_and_2d() -> None:
    cases = [
        ((12, 10, 9), np.complex128, {}, True, (1, 2)),
        ((12, 10, 9), np.float64, {"transposed_out": True}, False, (0, 2)),
        ((10, 7), np.float64, {}, True, None),
        ((10, 7), np.complex128, {"transposed_out": True}, False, None),
    ]
    check_all(run_ranks(3, many, cases))


def test_mpi4py_fft_layouts() -> None:
    """transposed_out=True (the default) gives mpi4py-fft's output layout; default grids
    match MPI.Compute_dims; the split is n // p, the first n % p ranks one more."""
    assert [block(10, 4, r) for r in range(4)] == [(3, 0), (3, 3), (2, 6), (2, 8)]
    assert compute_dims(4, 2) == [2, 2] and compute_dims(12, 2) == [4, 3] and compute_dims(3, 2) == [3, 1]

    def layouts() -> list[Any]:
        comm = shmcoll.Comm()
        try:
            res = []
            for kw in ({"slab": True}, {"grid": (2, 2)}, {}):
                with PFFT(comm, (8, 10, 12), dtype=np.complex128, **kw) as f:
                    res.append((f.grid, f.local_slice(False), f.local_slice(True)))
            with PFFT(comm, (8, 10, 12), dtype=np.float64, transposed_out=False) as f:
                res.append((f.grid, f.local_slice(False), f.local_slice(True)))
            return res
        finally:
            comm.Free()

    res = run_ranks(4, layouts)
    s = slice
    # rank 1 of 4: slab cuts axis 0 on input and axis 1 on output (mpi4py-fft's slab).
    assert res[1][0] == ((4, 1, 1), (s(2, 4), s(0, 10), s(0, 12)), (s(0, 8), s(3, 6), s(0, 12)))
    # pencil (2, 2), rank 1 = coords (0, 1): input axes 0, 1 cut; output axes 1 (P), 2 (Q).
    assert res[1][1] == ((2, 2, 1), (s(0, 4), s(5, 10), s(0, 12)), (s(0, 8), s(0, 5), s(6, 12)))
    assert res[1][2] == res[1][1]  # the default grid at 4 ranks is (2, 2, 1)
    # transposed_out=False: the input's distribution, r2c axis shortened to 12 // 2 + 1.
    assert res[3][3] == ((2, 2, 1), (s(4, 8), s(5, 10), s(0, 12)), (s(4, 8), s(5, 10), s(0, 7)))


def dist_arrays() -> list[str]:
    """newDistArray's mpi4py-fft defaults: output side, zero-filled, rank 0, a DistArray."""
    bad: list[str] = []
    with shmcoll.Comm() as comm, PFFT(comm, (12, 10, 9), dtype=np.float64) as fft:
        a = newDistArray(fft)
        if a.shape != fft.shape(True) or a.dtype != fft.dtype(True) or np.any(a != 0):
            bad.append(f"default newDistArray: {a.shape} {a.dtype}, zero-filled {not np.any(a)}")
        if a.rank != 0 or a.dimensions != 3 or a.local_slice() != fft.local_slice(True):
            bad.append(f"default newDistArray: rank {a.rank}, {a.dimensions} dims, {a.local_slice()}")
        v = newDistArray(fft, False, val=2.5, rank=1)
        if v.shape != (3, *fft.shape(False)) or np.any(v != 2.5) or not comm.in_heap(v):
            bad.append(f"rank-1 input array: {v.shape}, filled {bool(np.all(v == 2.5))}")
        if v.global_shape != (3, 12, 10, 9) or v.substart != (0, *(s.start for s in fft.local_slice(False))):
            bad.append(f"rank-1 input array: global_shape {v.global_shape}, substart {v.substart}")
        c = v[1]
        if c.rank != 0 or c.global_shape != (12, 10, 9) or c.local_slice() != fft.local_slice(False):
            bad.append(f"component: rank {c.rank}, global_shape {c.global_shape}, {c.local_slice()}")
        t = newDistArray(fft, True, rank=2)
        if t[0].rank != 1 or t[0, 1].rank != 0 or t[0:2].rank != 2 or t[0:2].global_shape[:2] != (2, 3):
            bad.append(f"rank-2 components: {t[0].rank} {t[0, 1].rank} {t[0:2].rank} {t[0:2].global_shape}")
        # a component is a valid transform argument: the vector field's forward, per component
        c[...] = np.random.default_rng(comm.rank).standard_normal(c.shape)
        fft.forward(c, t[0, 1])
        if not np.allclose(fft.backward(t[0, 1]), c):
            bad.append("forward/backward on components of tensor arrays")
        plain = newDistArray(fft, False, view=True)
        if type(plain) is not np.ndarray or not comm.in_heap(plain):
            bad.append(f"view=True gave a {type(plain).__name__}")
    return bad


def test_new_dist_array_has_mpi4py_ffts_defaults() -> None:
    check_all(run_ranks(2, dist_arrays))


def bad_arguments() -> list[str]:
    bad: list[str] = []
    comm = shmcoll.Comm()

    def expect(exc: type[BaseException], what: str, fn: Any, match: str = "") -> None:
        try:
            fn()
        except exc as e:
            if not str(e) or match not in str(e):
                bad.append(f"{what}: message {str(e)!r} lacks {match!r}")
        except BaseException as e:
            bad.append(f"{what}: raised {type(e).__name__}: {e}")
        else:
            bad.append(f"{what}: did not raise {exc.__name__}")

    try:
        expect(ValueError, "unknown backend", lambda: PFFT(comm, (8, 8, 8), backend="fftpack"))
        expect(
            ValueError, "mpi4py-fft's backend name", lambda: PFFT(comm, (8, 8, 8), backend="fftw"), "'pyfftw'"
        )
        expect(ValueError, "grid not matching size", lambda: PFFT(comm, (8, 8, 8), grid=(3, 1)))
        expect(ValueError, "grid cutting the first axis", lambda: PFFT(comm, (8, 8, 8), grid=(1, 1, 2)))
        expect(ValueError, "grid too long", lambda: PFFT(comm, (8, 8), grid=(2, 1, 1)))
        expect(ValueError, "grid and slab", lambda: PFFT(comm, (8, 8, 8), grid=(2,), slab=True))
        expect(ValueError, "slab on the first-transformed axis", lambda: PFFT(comm, (8, 8, 8), slab=2))
        expect(ValueError, "slab axis out of range", lambda: PFFT(comm, (8, 8, 8), slab=3))
        expect(ValueError, "integer dtype", lambda: PFFT(comm, (8, 8, 8), dtype=np.int32))
        expect(ValueError, "repeated axes", lambda: PFFT(comm, (8, 8, 8), axes=(0, 0, 1)))
        expect(ValueError, "axis out of range", lambda: PFFT(comm, (8, 8, 8), axes=(3,)))
        expect(ValueError, "groups of axes", lambda: PFFT(comm, (8, 8, 8), axes=((0,), (1, 2))))
        expect(ValueError, "empty shape", lambda: PFFT(comm, (8, 0, 8)))
        with PFFT(comm, (8, 8, 8), dtype=np.float64) as f:
            expect(ValueError, "global-shaped input", lambda: f.forward(np.zeros((8, 8, 8))))
            expect(ValueError, "complex input to r2c", lambda: f.forward(np.zeros(f.shape(False), complex)))
            expect(
                ValueError,
                "wrong u_hat dtype",
                lambda: f.forward(np.zeros(f.shape(False)), np.zeros(f.shape(True))),
            )
            expect(ValueError, "wrong backward input", lambda: f.backward(np.zeros(f.shape(False), complex)))
            expect(ValueError, "negative tensor rank", lambda: newDistArray(f, rank=-1))
        for name in ("scipy", "pyfftw"):
            if name not in BACKENDS:
                expect(ImportError, f"missing {name}", lambda n=name: PFFT(comm, (8, 8, 8), backend=n))
                expect(
                    BackendUnavailableError,
                    f"missing {name}",
                    lambda n=name: PFFT(comm, (8, 8, 8), backend=n),
                )
    finally:
        comm.Free()
    return bad


def test_bad_arguments() -> None:
    check_all(run_ranks(2, bad_arguments))


def test_mpi4py_communicator_is_wrapped() -> None:
    """A non-communicator is refused with a clear message."""
    with pytest.raises(ValueError, match=r"shmcoll\.Comm or an mpi4py communicator"):
        PFFT(object(), (4, 4))


MPI_SCRIPT = """
import sys
import numpy as np
from mpi4py import MPI
from shmcoll.fft import PFFT, newDistArray

shape = (12, 10, 9)
rng = np.random.default_rng(3)
U = rng.standard_normal(shape)
bad = []
for kw in ({"grid": (2, 2)}, {"slab": True, "transposed_out": False}):
    with PFFT(MPI.COMM_WORLD, shape, dtype=np.float64, **kw) as fft:
        u = newDistArray(fft, False)
        u[...] = U[fft.local_slice(False)]
        u_hat = fft.forward(u)
        want = np.fft.rfftn(U)[fft.local_slice(True)] / U.size
        if np.abs(u_hat - want).max() > 1e-12 * np.abs(want).max():
            bad.append(f"forward {kw}")
        if np.abs(fft.backward(u_hat) - u).max() > 1e-12:
            bad.append(f"backward {kw}")
bad = MPI.COMM_WORLD.allgather(bad)
if any(bad):
    print(bad)
    sys.exit(1)
print("OK")
"""


@pytest.mark.mpi
def test_under_mpiexec_with_an_mpi4py_communicator(tmp_path: Any) -> None:
    """PFFT on MPI.COMM_WORLD (wrapped; sub-communicators through MPI's Split)."""
    script = tmp_path / "pfft_mpi.py"
    script.write_text(MPI_SCRIPT)
    proc = run_mpiexec(4, script, timeout=60)
    assert "OK" in proc.stdout


@pytest.mark.mpi
def test_benchmark_script_runs_under_mpiexec() -> None:
    bench = TESTS_DIR.parent / "bench" / "fft.py"
    proc = run_mpiexec(2, bench, "--shape", "16", "16", "16", "--iters", "2", "--warmup", "1", timeout=60)
    assert "shmcoll.fft  np=2" in proc.stdout and "mpi4py-fft" in proc.stdout


def test_benchmark_script_standalone() -> None:
    """The benchmark starts its own ranks without a launcher and reports the np=1 run."""
    bench = TESTS_DIR.parent / "bench" / "fft.py"
    proc = subprocess.run(
        [
            sys.executable,
            str(bench),
            "-n",
            "2",
            "--shape",
            "16",
            "12",
            "10",
            "--iters",
            "2",
            "--dtype",
            "float64",
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "np=2" in proc.stdout and "np=1" in proc.stdout and "speedup" in proc.stdout


class _FakeFFTW:
    """pyFFTW's ``FFTW`` object as the adapter uses it (numpy.fft underneath): planned on
    two arrays, re-pointed with ``update_arrays``, run by ``execute`` unscaled in either
    direction (FFTW's convention)."""

    def __init__(
        self, a: np.ndarray, b: np.ndarray, axes: tuple[int, ...], direction: str, **kw: Any
    ) -> None:
        assert {"flags", "threads"} <= set(kw), f"missing keywords {{'flags', 'threads'}} - {set(kw)}"
        self.input_array, self.output_array = a, b
        self.axes, self.direction = axes, direction

    def update_arrays(self, a: np.ndarray, b: np.ndarray) -> None:
        # pyFFTW's checks: a plan runs only on arrays laid out like those it was planned
        # on (same strides) and at least as aligned as the real type
        for new, old, what in ((a, self.input_array, "input"), (b, self.output_array, "output")):
            if new.shape != old.shape or new.dtype != old.dtype or new.strides != old.strides:
                raise ValueError(f"Invalid {what} striding: {new.strides} != {old.strides}")
            if new.ctypes.data % new.real.dtype.alignment:
                raise ValueError(f"Invalid {what} alignment")
        self.input_array, self.output_array = a, b

    def execute(self) -> None:
        a, out, ax = self.input_array, self.output_array, self.axes
        real_in, real_out = a.dtype.kind == "f", out.dtype.kind == "f"
        if self.direction == "FFTW_FORWARD":
            res = np.fft.rfftn(a, axes=ax) if real_in else np.fft.fftn(a, axes=ax)
        elif real_out:
            res = np.fft.irfftn(a, s=[out.shape[i] for i in ax], axes=ax, norm="forward")
        else:
            res = np.fft.ifftn(a, axes=ax, norm="forward")
        np.copyto(out, res, casting="same_kind")


def _fake_library(kind: str) -> None:
    """Register a stand-in for scipy.fft or pyFFTW (numpy.fft underneath, checking the
    extra keywords the adapter passes) in place of the real one, so that the adapters'
    glue, scaling included, is tested whether or not the libraries are installed. Runs in
    forked ranks only."""
    import types

    def wrap(f: Any) -> Any:
        def call(a: np.ndarray, **kw: Any) -> np.ndarray:
            assert "workers" in kw, "missing keyword workers"
            return f(a, **{k: v for k, v in kw.items() if k != "workers"})

        return call

    mod = types.ModuleType(f"fake_{kind}")
    if kind == "scipy":
        for name in ("fft", "ifft", "rfft", "irfft", "fftn", "ifftn", "rfftn", "irfftn"):
            setattr(mod, name, wrap(getattr(np.fft, name)))
        sys.modules["scipy"] = types.ModuleType("scipy")
        sys.modules["scipy.fft"] = mod
    else:
        mod.FFTW = _FakeFFTW  # type: ignore[attr-defined]
        mod.simd_alignment = 16  # type: ignore[attr-defined]
        mod.empty_aligned = np.empty  # type: ignore[attr-defined]
        mod.import_wisdom = lambda w: None  # type: ignore[attr-defined]
        mod.export_wisdom = lambda: ((),)  # type: ignore[attr-defined]
        sys.modules["pyfftw"] = mod


def with_fake_library(kind: str, cases: list[tuple[Any, ...]]) -> list[str]:
    _fake_library(kind)
    return many(cases)


@pytest.mark.parametrize("backend", ["scipy", "pyfftw"])
def test_backend_adapters_with_a_stand_in_library(backend: str, tmp_path: Any) -> None:
    cases = [
        ((12, 10, 9), np.float32, {"backend": backend}, True),
        ((12, 10, 9), np.complex128, {"backend": backend, "transposed_out": False}, False),
    ]
    # the stand-in's wisdom goes to a scratch file, not the user's FFTW wisdom cache
    env = {"SHMCOLL_FFTW_WISDOM": str(tmp_path / "wisdom.pickle")}
    check_all(run_ranks(2, with_fake_library, backend, cases, env=env))


# -- array layouts ---------------------------------------------------------------------
# forward/backward take any array of the right shape and dtype (mpi4py-fft copies into
# its own planned arrays): strided views, negative strides, Fortran order, buffers at any
# offset. pyFFTW plans run only on arrays laid out like those they were planned on, so
# the adapter must copy the others through its scratch arrays.


def _laid_out(x: np.ndarray, layout: str) -> np.ndarray:
    """A new array equal to `x` (C-contiguous) with the memory layout `layout`."""
    if layout == "strided":  # every other element of a larger array
        big = np.zeros((*x.shape, 2), x.dtype)
        big[..., 0] = x
        return big[..., 0]
    if layout == "reversed":  # negative strides
        return x[::-1].copy()[::-1]
    if layout == "fortran":
        return np.asfortranarray(x)
    # contiguous at an offset of a SIMD-aligned buffer: one real element (FFTW's
    # unaligned plans run on it) or one byte (not even the real type's alignment)
    raw = np.empty(x.nbytes + 128, np.uint8)
    off = (-raw.ctypes.data) % 64 + (1 if layout == "offset-1" else x.real.dtype.itemsize)
    y = raw[off : off + x.nbytes].view(x.dtype).reshape(x.shape)
    y[...] = x
    return y


LAYOUTS = ("strided", "reversed", "fortran", "offset-real", "offset-1")


def layouts_case(backend: str, fake: bool) -> list[str]:
    """forward and backward, r2c and c2c, with every argument in every layout of
    `LAYOUTS`, against numpy.fft on the global array; the input is never modified."""
    if fake:
        _fake_library(backend)
    bad: list[str] = []
    shape = (10, 6, 5)
    with shmcoll.Comm() as comm:
        for dtype, to in ((np.float64, True), (np.complex128, True), (np.complex64, False)):
            with PFFT(comm, shape, dtype=dtype, backend=backend, transposed_out=to) as fft:
                tag = f"{backend} {np.dtype(dtype)} transposed_out={to}"
                U = global_input(shape, dtype)
                raw = np.fft.rfftn(U) if np.dtype(dtype).kind == "f" else np.fft.fftn(U)
                want, want_u = raw[fft.local_slice(True)] / U.size, U[fft.local_slice(False)]
                u = np.ascontiguousarray(want_u)
                u_hat = np.ascontiguousarray(want, fft.dtype(True))
                u0, u_hat0 = u.copy(), u_hat.copy()  # what every input must still hold
                tol = tolerance(dtype)
                for lay in LAYOUTS:
                    x, o = _laid_out(u, lay), _laid_out(np.zeros_like(u_hat), lay)
                    y, z = _laid_out(u_hat, lay), _laid_out(np.zeros_like(u), lay)
                    # (what, method, its arguments, the output array passed, expected, the
                    # input's values before the call)
                    calls: list[tuple[str, Any, tuple[np.ndarray, ...], Any, np.ndarray, np.ndarray]] = [
                        (f"forward(input {lay})", fft.forward, (x,), None, want, u0),
                        (f"forward(output {lay})", fft.forward, (u, o), o, want, u0),
                        (f"backward(input {lay})", fft.backward, (y,), None, want_u, u_hat0),
                        (f"backward(output {lay})", fft.backward, (u_hat, z), z, want_u, u_hat0),
                    ]
                    # the plans made for other layouts still run on contiguous arrays
                    calls.append((f"forward after {lay}", fft.forward, (u,), None, want, u0))
                    for what, method, args, out, expect, before in calls:
                        try:
                            got = method(*args)
                        except Exception as e:
                            bad.append(f"{tag} {what}: raised {type(e).__name__}: {e}")
                            continue
                        if out is not None and got is not out:
                            bad.append(f"{tag} {what}: returned another array than output_array")
                        if got.shape != expect.shape or rel_err(got, expect) > tol:
                            bad.append(f"{tag} {what}: rel. error {rel_err(got, expect):.2e}")
                        if not np.array_equal(args[0], before):
                            bad.append(f"{tag} {what}: modified its input")
    return bad


@pytest.mark.parametrize("nranks", [1, 2])
@pytest.mark.parametrize("backend", BACKENDS)
def test_any_array_layout(backend: str, nranks: int, tmp_path: Any) -> None:
    env = {"SHMCOLL_FFTW_WISDOM": str(tmp_path / "wisdom.pickle")}
    check_all(run_ranks(nranks, layouts_case, backend, False, env=env))


@pytest.mark.parametrize("backend", ["scipy", "pyfftw"])
def test_any_array_layout_with_a_stand_in_library(backend: str, tmp_path: Any) -> None:
    """The adapters' handling of layouts where scipy or pyFFTW is not installed (the
    stand-in refuses re-pointing a plan at other strides, as pyFFTW does)."""
    env = {"SHMCOLL_FFTW_WISDOM": str(tmp_path / "wisdom.pickle")}
    check_all(run_ranks(2, layouts_case, backend, True, env=env))


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_transforms_take_any_layout(backend: str, tmp_path: Any, monkeypatch: Any) -> None:
    """The serial transforms themselves, out of place and in place, on every layout and
    on a length-1 axis with another stride than a C-contiguous array's (numpy still
    calls it C-contiguous; pyFFTW does not), against numpy.fft; the input stays as it was."""
    from shmcoll.fft.backends import get_backend

    monkeypatch.setenv("SHMCOLL_FFTW_WISDOM", str(tmp_path / "wisdom.pickle"))
    be = get_backend(backend)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 6, 8))
    c = x + 1j * rng.standard_normal(x.shape)
    ch = np.fft.rfftn(x, axes=(1, 2))

    def length_one(a: np.ndarray) -> np.ndarray:
        big = np.zeros((2, *a.shape[1:]), a.dtype)
        big[0] = a[0]
        return big[::2]

    # (method, input, expected output, its dtype) over axes (1, 2), unscaled
    ops = [
        (be.fft, c, np.fft.fftn(c, axes=(1, 2)), c.dtype),
        (be.ifft, c, np.fft.ifftn(c, axes=(1, 2), norm="forward"), c.dtype),
        (be.rfft, x, ch, ch.dtype),
        (be.irfft, ch, np.fft.irfftn(ch, s=(6, 8), axes=(1, 2), norm="forward"), x.dtype),
    ]
    bad = []
    for method, a, want, dt in ops:
        for lay in (*LAYOUTS, "length-1 axis"):
            layout = length_one if lay == "length-1 axis" else lambda v, lay=lay: _laid_out(v, lay)
            name = f"{backend} {method.__name__} {lay}"
            cases = [
                ("input", layout(a), np.zeros(want.shape, dt)),
                ("output", a.copy(), layout(np.zeros(want.shape, dt))),
            ]
            if dt == a.dtype:  # in place, as PFFT runs the transforms after the first
                v = layout(a)
                cases.append(("in place", v, v))
            for where, src, out in cases:
                before = src.copy()
                try:
                    got = method(src, (1, 2), out, False)
                except Exception as e:
                    bad.append(f"{name} {where}: raised {type(e).__name__}: {e}")
                    continue
                if got is not out or rel_err(out, want) > 1e-12:
                    bad.append(f"{name} {where}: rel. error {rel_err(out, want):.2e}")
                if where != "in place" and not np.array_equal(src, before):
                    bad.append(f"{name} {where}: modified its input")
    assert not bad, "\n".join(bad)


def test_pyfftw_runs_on_contiguous_arrays_without_a_copy(tmp_path: Any, monkeypatch: Any) -> None:
    """Only other layouts go through the plan's scratch arrays: a plan runs on C-contiguous
    arguments themselves (aligned or not), so PFFT's own arrays cost no copy."""
    pyfftw = pytest.importorskip("pyfftw")
    from shmcoll.fft.backends import PyfftwBackend

    monkeypatch.setenv("SHMCOLL_FFTW_WISDOM", str(tmp_path / "wisdom.pickle"))
    be = PyfftwBackend()
    a = pyfftw.empty_aligned((4, 6), np.complex128)
    a[...] = 1.0
    for src, out in (
        (a, pyfftw.empty_aligned((4, 6), np.complex128)),
        (a, a),
        (a, np.empty((4, 6), complex)),
    ):
        be.fft(src, (1,), out, False)
        plans = [p for p, _, _ in be._plans.values() if p.input_array is src and p.output_array is out]
        assert len(plans) == 1, (
            f"no plan ran on the arrays themselves ({src.ctypes.data % 64}, {out.ctypes.data % 64})"
        )


def _paths(grid: tuple[int, ...]) -> list[str]:
    import shmcoll.fft as sf

    comm = shmcoll.Comm()
    fail: list[str] = []
    shape = (12, 10, 9)
    fft = sf.PFFT(comm, shape, dtype=np.complex128, grid=grid, transposed_out=True)
    rng = np.random.default_rng(5)
    glob = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    u = sf.newDistArray(fft, False)
    u[...] = glob[fft.local_slice(False)]
    u_hat = fft.forward(u)
    if not np.allclose(u_hat, np.fft.fftn(glob)[fft.local_slice(True)] / glob.size):
        fail.append("forward differs from numpy")
    if not np.allclose(fft.backward(u_hat), u):
        fail.append("round trip differs")
    direct = sum(p.direct_count for p in fft.plans)
    total = 2 * len(fft.plans)
    if len(fft.plans) == 1 and direct != total:
        # a slab's work arrays live in the heap of the one communicator of the exchange
        fail.append(f"{direct} of {total} transposes read peers' arrays in place")
    if len(fft.plans) == 2 and not 0 < direct < total:
        # a pencil's middle array lives in one sub-communicator's heap: the other exchange
        # that reads it packs instead (the fallback), the rest read in place
        fail.append(f"{direct} of {total} transposes read peers' arrays in place")
    fft.destroy()
    comm.Free()
    return fail


@pytest.mark.parametrize(("nranks", "grid"), [(2, (-1,)), (4, (2, 2))])
def test_transposes_read_peers_heap_arrays_in_place(nranks: int, grid: tuple[int, ...]) -> None:
    check_all(run_ranks(nranks, _paths, grid))


def _small_pyfftw() -> bool:
    import shmcoll.fft as sf

    comm = shmcoll.Comm()
    fft = sf.PFFT(comm, (8, 6, 4), dtype=np.complex128, backend="pyfftw")
    u = sf.newDistArray(fft, False)
    u[...] = 1.0
    ok = bool(np.allclose(fft.backward(fft.forward(u)), u))
    fft.destroy()
    comm.Free()
    return ok


def test_fftw_wisdom_is_kept_between_runs(tmp_path: Any) -> None:
    pytest.importorskip("pyfftw")
    import pickle

    wisdom = tmp_path / "wisdom.pickle"
    env = {"SHMCOLL_FFTW_WISDOM": str(wisdom)}
    assert run_ranks(2, _small_pyfftw, env=env) == [True, True]
    saved = pickle.loads(wisdom.read_bytes())
    assert isinstance(saved, tuple) and any(len(w) for w in saved)
    # the next run loads it; a damaged file only costs planning time
    assert run_ranks(2, _small_pyfftw, env=env) == [True, True]
    wisdom.write_bytes(b"not a pickle")
    assert run_ranks(2, _small_pyfftw, env=env) == [True, True]
