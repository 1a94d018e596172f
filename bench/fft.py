"""Benchmark of shmcoll.fft.PFFT: forward + backward pairs on N ranks, the share of the time
spent in the transposes, the same at one rank (scaling), and mpi4py-fft on the same grid
when it is installed and the run is under mpiexec.

    python bench/fft.py -n 2 --shape 128 128 128 --dtype complex128 --backend numpy --iters 10
    mpiexec -n 2 python bench/fft.py --shape 128 128 128      # adds the mpi4py-fft comparison

Both libraries run with mpi4py-fft's defaults (forward normalised, backward not; output in
the layout of the last transform), so they do the same work per pair.

Without a launcher the script starts its own ranks (``shmcoll.spawn``); under mpiexec or
``shmcoll run`` it uses the launcher's. Times are the median over `iters` of the slowest
rank's time per pair (ranks synchronised before each pair).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import shmcoll
from shmcoll.comm import ENV_SEGMENT, under_mpi_launcher
from shmcoll.fft import PFFT, newDistArray


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--ranks", type=int, default=2, help="ranks to start without a launcher")
    p.add_argument("--shape", type=int, nargs="+", default=[128, 128, 128])
    p.add_argument("--dtype", default="complex128", choices=["complex128", "complex64", "float64", "float32"])
    p.add_argument("--backend", default="numpy", choices=["numpy", "scipy", "pyfftw"])
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--grid", type=int, nargs="+", default=None, help="process grid (mpi4py-fft's meaning)")
    p.add_argument("--slab", action="store_true", help="slab decomposition (grid=(-1,))")
    p.add_argument(
        "--transposed-out",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="leave the output in the last transform's layout (the default: mpi4py-fft's layout, so the "
        "comparison is like with like); --no-transposed-out transposes it back (twice the exchanges)",
    )
    p.add_argument("--no-scaling", action="store_true", help="skip the one-rank run")
    return p.parse_args(argv)


def _time_pairs(
    comm: Any, step: Callable[[], None], iters: int, warmup: int, max_op: Any = shmcoll.MAX
) -> tuple[float, list[float], float]:
    """(median slowest-rank seconds per pair, all of them, wall seconds of the timed loop).

    `comm` synchronises the ranks and takes the maximum (with `max_op`); it must be the
    library's own that `step` uses: a rank waiting in another library's barrier makes no
    MPI progress, so a peer still inside an MPI exchange with it can wait forever."""
    for _ in range(warmup):
        step()
    times = []
    t_all = time.perf_counter()
    for _ in range(iters):
        comm.Barrier()
        t0 = time.perf_counter()
        step()
        mine = np.array([time.perf_counter() - t0])
        worst = np.empty(1)
        comm.Allreduce(mine, worst, op=max_op)
        times.append(float(worst[0]))
    return statistics.median(times), times, time.perf_counter() - t_all


def run_shmcoll(comm: Any, a: argparse.Namespace) -> dict[str, Any]:
    """Time PFFT forward + backward on `comm`; rank 0's result holds the summary."""
    grid = None if a.slab or a.grid is None else tuple(a.grid)
    with PFFT(
        comm, tuple(a.shape), dtype=a.dtype, grid=grid, slab=a.slab, backend=a.backend,
        transposed_out=a.transposed_out,
    ) as fft:  # fmt: skip
        u = newDistArray(fft, False)
        rng = np.random.default_rng(comm.rank)
        u[...] = rng.standard_normal(u.shape).astype(u.dtype)
        u_hat = newDistArray(fft, True)
        v = newDistArray(fft, False)

        def step() -> None:
            fft.forward(u, u_hat)
            fft.backward(u_hat, v)

        for _ in range(a.warmup):
            step()
        fft.reset_timers()
        med, times, wall = _time_pairs(comm, step, a.iters, 0)
        share = np.array([fft.transpose_seconds() / wall, fft.exchange_seconds() / wall])
        worst = np.empty(2)
        comm.Allreduce(share, worst, op=shmcoll.MAX)
        err = float(np.abs(v - u).max())
        fft.forward(u, u_hat)  # so that each exchange communicator's last call is a transpose
        algos = sorted({str(c.algorithm) for c in (p.comm.last_choice() for p in fft.plans) if c})
        return {
            "ranks": comm.size,
            "grid": fft.grid,
            "median_s": med,
            "min_s": min(times),
            "transpose_share": float(worst[0]),
            "exchange_share": float(worst[1]),
            "exchanges_per_pair": 2 * len(fft.plans) * (1 if a.transposed_out else 2),
            "roundtrip_err": err,
            "algorithms": algos,
        }


def run_mpi4py_fft(mpi_comm: Any, a: argparse.Namespace) -> float | None:
    """mpi4py-fft's median forward + backward on the same grid, or None if not installed."""
    try:
        mpi4py_fft = importlib.import_module("mpi4py_fft")
    except ImportError:
        return None
    MPFFT, mp_new = mpi4py_fft.PFFT, mpi4py_fft.newDistArray
    # FFTW on both sides: shmcoll through pyFFTW, mpi4py-fft through its own FFTW wrappers.
    backend = "fftw" if a.backend == "pyfftw" else a.backend
    kw: dict[str, Any] = {"dtype": np.dtype(a.dtype), "backend": backend}
    if a.slab:
        kw["grid"] = (-1,)
    elif a.grid is not None:
        kw["grid"] = tuple(a.grid)
    fft = MPFFT(mpi_comm, tuple(a.shape), **kw)
    u = mp_new(fft, False)
    u[...] = np.random.default_rng(mpi_comm.Get_rank()).standard_normal(u.shape).astype(u.dtype)
    u_hat = mp_new(fft, True)
    v = mp_new(fft, False)

    def step() -> None:
        fft.forward(u, u_hat)
        fft.backward(u_hat, v)

    from mpi4py import MPI

    med, _, _ = _time_pairs(mpi_comm, step, a.iters, a.warmup, MPI.MAX)
    fft.destroy()
    return med


def describe(r: dict[str, Any], a: argparse.Namespace) -> str:
    shape = "x".join(map(str, a.shape))
    return (
        f"shmcoll.fft  np={r['ranks']} grid={r['grid']} {shape} {a.dtype} backend={a.backend} "
        f"transposed_out={a.transposed_out}: {r['median_s'] * 1e3:.2f} ms per forward+backward "
        f"(min {r['min_s'] * 1e3:.2f}); transposes {100 * r['transpose_share']:.0f}% of the time "
        f"(Alltoallv alone {100 * r['exchange_share']:.0f}%), {r['exchanges_per_pair']} exchanges per pair, "
        f"served by {','.join(r['algorithms']) or '-'}; round-trip error {r['roundtrip_err']:.1e}"
    )


def _rank_main(a: argparse.Namespace) -> dict[str, Any]:
    with shmcoll.Comm() as comm:
        return run_shmcoll(comm, a)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if ENV_SEGMENT in os.environ or under_mpi_launcher():
        comm = shmcoll.Comm()
        res = run_shmcoll(comm, a)
        mpi = comm.mpi_comm
        if comm.rank == 0:
            print(describe(res, a), flush=True)
        ours = res["median_s"]
        theirs = run_mpi4py_fft(mpi, a) if mpi is not None else None
        if comm.rank == 0:
            if mpi is None:
                print("mpi4py-fft: comparison needs mpiexec (mpiexec -n N python bench/fft.py ...)")
            elif theirs is None:
                print("mpi4py-fft: not installed (pip install mpi4py-fft); comparison skipped")
            else:
                print(
                    f"mpi4py-fft   np={comm.size}: {theirs * 1e3:.2f} ms per forward+backward; "
                    f"mpi4py-fft / shmcoll.fft = {theirs / ours:.2f}"
                )
        comm.Free()
        return 0
    res = shmcoll.spawn(a.ranks, _rank_main, a, start_method="fork")[0]
    print(describe(res, a), flush=True)
    if a.ranks > 1 and not a.no_scaling:
        one_a = argparse.Namespace(**{**vars(a), "grid": None, "slab": False})
        one = shmcoll.spawn(1, _rank_main, one_a, start_method="fork")[0]
        print(describe(one, one_a), flush=True)
        print(f"speedup np=1 -> np={a.ranks}: {one['median_s'] / res['median_s']:.2f}x")
    print("mpi4py-fft: comparison needs mpiexec (mpiexec -n N python bench/fft.py ...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
