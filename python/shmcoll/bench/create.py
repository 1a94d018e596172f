"""``shmcoll bench create``: what creating and freeing a communicator costs, against
MPI's ``Dup()`` + ``Free()``, in one launch (under mpiexec: the communicators wrap MPI's).

Variants, in interleaved rounds of the shared harness (per iteration the slowest rank's
time, then the median over iterations):

* ``MPI Dup+Free``: ``w.Dup()`` then ``Free()``;
* ``Comm+Free``: ``shmcoll.Comm(w)`` then ``Free()``;
* ``Comm.Dup+Free``: ``comm.Dup()`` then ``Free()`` (MPI's Dup and Free under it);
* ``Comm+Free, no pool``: ``shmcoll.Comm(w)`` with ``SHMCOLL_POOL_SEGMENTS=0`` (a new
  segment and the handshake every time: what the pool saves).

``--phases`` then times the steps of ``Comm+Free`` (pooled and not) by wrapping them:
the creation exchange (``bootstrap.survey``: the offer, MPI's Allgather, settling), the
segment (``bootstrap.mpi_segment``: a new segment's creation, its name's broadcast, the
mapping), joining it (the handshake for a new segment), binding the tuning tables, the
rest of the constructor, and Free. Rank 0 prints the medians, over iterations, of the
slowest rank's time.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

import shmcoll

from .. import bootstrap, bound_tables
from ..comm import Comm
from .alltoall import gather_times, mpi_name
from .harness import Variant, measure, summarize

#: The variable that turns the pool off (read at every creation).
POOL_ENV = "SHMCOLL_POOL_SEGMENTS"

#: The steps `--phases` times, in the order they run.
PHASES = ("exchange", "segment", "join", "tables", "constructor rest", "Free")


@dataclass
class Options:
    iters: int = 200
    warmup: int = 20
    rounds: int = 5
    phases: bool = False
    csv: str | None = None


@contextmanager
def pool_off() -> Iterator[None]:
    """Creations in this block make new segments (and leave nothing to the pool)."""
    old = os.environ.get(POOL_ENV)
    os.environ[POOL_ENV] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ[POOL_ENV]
        else:
            os.environ[POOL_ENV] = old


def _variant(label: str, peer: bool, call: Callable[[], None]) -> Variant:
    return Variant(
        label=label,
        peer=peer,
        setup=lambda size: None,
        refill=lambda s, it, last: None,
        bind=lambda s: call,
        check=lambda s, it: True,
    )


def variants(mpi_comm: Any, comm: Comm) -> list[Variant]:
    def mpi_dup() -> None:
        mpi_comm.Dup().Free()

    def create() -> None:
        shmcoll.Comm(mpi_comm).Free()

    def dup() -> None:
        comm.Dup().Free()

    def create_unpooled() -> None:
        with pool_off():
            shmcoll.Comm(mpi_comm).Free()

    return [
        _variant(f"{mpi_name()} Dup+Free", True, mpi_dup),
        _variant("Comm+Free", False, create),
        _variant("Comm.Dup+Free", False, dup),
        _variant("Comm+Free, no pool", False, create_unpooled),
    ]


class _Clock:
    """Seconds spent in each wrapped step during one creation."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def wrap(self, owner: Any, name: str, phase: str) -> Callable[[], None]:
        """Time `owner.name` as `phase`; returns the undo."""
        inner = getattr(owner, name)
        own = name in vars(owner)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spent[phase] += time.perf_counter() - t0

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, inner) if own else delattr(owner, name)


def phases(mpi_comm: Any, iters: int, warmup: int, pooled: bool) -> dict[str, np.ndarray]:
    """This rank's seconds per phase and iteration of ``Comm(mpi_comm)`` + ``Free()``."""
    clock = _Clock()
    undo = [
        clock.wrap(bootstrap, "survey", "exchange"),
        clock.wrap(bootstrap, "mpi_segment", "segment"),
        clock.wrap(Comm, "_join", "join"),
        clock.wrap(bound_tables, "bind_tables", "tables"),
    ]
    out: dict[str, list[float]] = {p: [] for p in PHASES}
    try:
        for k in range(warmup + iters):
            for p in PHASES:
                clock.spent[p] = 0.0
            mpi_comm.Barrier()
            with pool_off() if not pooled else nullcontext():
                t0 = time.perf_counter()
                c = shmcoll.Comm(mpi_comm)
                t1 = time.perf_counter()
                c.Free()
                t2 = time.perf_counter()
            if k < warmup:
                continue
            wrapped = sum(clock.spent[p] for p in PHASES[:4])
            clock.spent["constructor rest"] = t1 - t0 - wrapped
            clock.spent["Free"] = t2 - t1
            for p in PHASES:
                out[p].append(clock.spent[p])
    finally:
        for u in undo:
            u()
    return {p: np.array(v) for p, v in out.items()}


def run(opts: Options) -> list[dict[str, Any]] | None:
    from mpi4py import MPI

    w = MPI.COMM_WORLD
    comm = shmcoll.Comm(w)
    p, me = comm.size, comm.rank
    vs = variants(w, comm)
    measure(comm.Barrier, vs, 0, opts.iters, opts.warmup, opts.rounds, False)
    rows: list[dict[str, Any]] = []
    for v in vs:
        if v.error is not None:
            rows.append({"variant": v.label, "error": v.error})
            continue
        s = summarize(gather_times(comm, np.array(v.times)))
        rows.append({"variant": v.label, "peer": v.peer, "median_us": s.median_us, "p90_us": s.p90_us})
    phase_rows: list[dict[str, Any]] = []
    if opts.phases:
        for pooled in (True, False):
            for phase, times in phases(w, opts.iters, opts.warmup, pooled).items():
                s = summarize(gather_times(comm, times))
                phase_rows.append({"pooled": pooled, "phase": phase, "median_us": s.median_us})
    if me == 0:
        report(opts, rows, phase_rows, p)
    comm.Free()
    return rows if me == 0 else None


def report(opts: Options, rows: list[dict[str, Any]], phase_rows: list[dict[str, Any]], p: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    ref = next((r["median_us"] for r in rows if r.get("peer") and "median_us" in r), None)
    t = Table(title=f"create + free, {p} ranks, median µs (x = times MPI's Dup+Free)")
    t.add_column("variant")
    t.add_column("median", justify="right")
    t.add_column("p90", justify="right")
    t.add_column("x MPI", justify="right")
    for r in rows:
        if "error" in r:
            t.add_row(r["variant"], "error", "", r["error"][:60])
            continue
        x = "" if ref is None or r.get("peer") else f"{r['median_us'] / ref:.1f}x"
        t.add_row(r["variant"], f"{r['median_us']:.1f}", f"{r['p90_us']:.1f}", x)
    console.print(t)
    if phase_rows:
        ph = Table(title=f"Comm+Free by phase, {p} ranks, median µs of the slowest rank")
        ph.add_column("phase")
        ph.add_column("pooled", justify="right")
        ph.add_column("no pool", justify="right")
        for phase in PHASES:
            by = {r["pooled"]: r["median_us"] for r in phase_rows if r["phase"] == phase}
            ph.add_row(phase, f"{by[True]:.1f}", f"{by[False]:.1f}")
        console.print(ph)
    if opts.csv:
        import csv

        with open(opts.csv, "w", newline="") as f:
            wr = csv.DictWriter(
                f, fieldnames=["nranks", "variant", "median_us", "p90_us", "error"], extrasaction="ignore"
            )
            wr.writeheader()
            for r in rows:
                wr.writerow({"nranks": p, **r})


def main(argv: list[str] | None = None) -> int:
    """Entry point of each rank: ``python -m shmcoll.bench.create '<options json>'``."""
    args = sys.argv[1:] if argv is None else argv
    run(Options(**json.loads(args[0] if args else "{}")))
    return 0


def options_json(opts: Options) -> str:
    return json.dumps(asdict(opts))


if __name__ == "__main__":
    sys.exit(main())
