"""``shmcoll bench allreduce|allgather|bcast|reduce_scatter|reduce|gather|scatter|barrier``:
shmcoll's collective against MPI's (through mpi4py), in one launch.

Sizes follow OSU: the vector for Allreduce/Reduce/Bcast, each rank's block for
Allgather/Gather/Scatter, the whole send vector for Reduce_scatter (each rank gets
size/p); Barrier has no size (one row, 0 bytes: the cost of synchronising alone, which
is also the floor under every other row of the same harness). Reductions use float32
SUM. Every iteration rewrites the send buffer (untimed); the validated iteration writes a
rank- and iteration-dependent pattern and checks the closed-form result. Rank 0 prints
the medians and the ratios MPI/shmcoll.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

import shmcoll

from . import sizes
from .alltoall import gather_times, mpi_name, print_progress
from .harness import Variant, measure, summarize
from .machine_state import MachineState, describe, floor_and_ratio
from .shapes import call_shape
from .sizes import fmt_size

OPS = ("allreduce", "allgather", "bcast", "reduce_scatter", "reduce", "gather", "scatter", "barrier")


@dataclass
class Options:
    op: str
    sizes: list[int]
    iters: int = 1000
    warmup: int = 100
    rounds: int = 5
    validate: bool = False
    mpi: bool = True
    ordinary: bool = True
    heap: bool = True
    algorithms: tuple[str, ...] = ()
    csv: str | None = None
    #: A codec configuration (JSON): adds a "compressed" variant (float32 data).
    compress: str | None = None
    #: Also time the persistent request (<Op>_init once, Start per call) on heap buffers.
    persistent: bool = False
    #: Also time NumPy arrays outside the shared-array arena (private to each process).
    private: bool = False
    #: Also time NumPy arrays allocated before the communicator existed.
    before: bool = False
    #: The machine's state measured before the launch (machine_state.MachineState as a
    #: dict): each size's floor and the ratio to it go into the table.
    machine: dict[str, Any] | None = None


#: Operations with a persistent form, and the name of their _init method.
PERSISTENT = {"allreduce": "Allreduce_init", "allgather": "Allgather_init", "bcast": "Bcast_init"}


def make_variant(
    opts: Options,
    label: str,
    comm: shmcoll.Comm,
    mpi: Any,
    heap: bool,
    algorithm: str | None,
    compress: Any = None,
    persistent: bool = False,
    private: bool = False,
    pool: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
) -> Variant:
    """A timed variant; with `compress` (a codec) shmcoll's compressed collective, whose
    validation allows the codec's error (5% of the largest value)."""
    p, me = comm.size, comm.rank
    op = opts.op
    peer = mpi is not None
    target = mpi if peer else comm
    kw: dict[str, Any] = {"algorithm": algorithm} if algorithm else {}
    if compress is not None:
        kw = {"compress": compress}
    floats = compress is not None or opts.compress is not None

    def alloc(n: int, dt: np.dtype) -> np.ndarray:
        if private:
            with shmcoll.private_arrays():
                return np.empty(n, dt)
        return comm.empty(n, dt) if heap else np.empty(n, dt)

    def setup(size: int) -> Any:
        ns, nr, dt = call_shape(op, size, p, floats)
        s, r = pool[size] if pool is not None else (alloc(ns, dt), alloc(nr, dt))
        s[:] = 1
        r[:] = 0
        return s, r

    def pattern(rank: int, it: int, n: int, dt: np.dtype) -> np.ndarray:
        return ((np.arange(n) + rank * 3 + it) % 7).astype(dt)

    def refill(st: Any, it: int, final: bool) -> None:
        s = st[0]
        if final:
            s[:] = pattern(me, it, s.size, s.dtype)
            if op == "bcast" and me != 0:
                s[:] = 0
        else:
            s.fill(it % 5)

    requests: list[Any] = []

    def bind(st: Any) -> Any:
        s, r = st
        if persistent:
            init = getattr(comm, PERSISTENT[op])
            req = init(s, root=0) if op == "bcast" else init(s, r)
            requests.append(req)
            return req.Start
        if op == "barrier":
            return target.Barrier
        if op == "allreduce":
            return lambda: target.Allreduce(s, r, **kw)
        if op == "reduce":
            return lambda: target.Reduce(s, r, root=0, **kw)
        if op == "reduce_scatter":
            return lambda: target.Reduce_scatter_block(s, r, **kw)
        if op == "allgather":
            return lambda: target.Allgather(s, r, **kw)
        if op == "gather":
            return lambda: target.Gather(s, r, root=0, **kw)
        if op == "scatter":
            return lambda: target.Scatter(s, r, root=0, **kw)
        return lambda: target.Bcast(s, root=0, **kw)

    def equal(got: np.ndarray, want: np.ndarray) -> bool:
        if compress is None:
            return bool(np.array_equal(got, want))
        tol = 0.05 * float(np.max(np.abs(want))) if want.size else 0.0
        return bool(got.shape == want.shape and np.allclose(got, want, rtol=0, atol=tol))

    def check(st: Any, it: int) -> bool:
        s, r = st
        n = s.size
        if op == "barrier":
            return True  # nothing to check but that every rank got through
        if op in ("allreduce", "reduce"):
            if op == "reduce" and me != 0:
                return True
            want = np.sum([pattern(j, it, n, s.dtype) for j in range(p)], axis=0, dtype=np.float64)
            return equal(r, want.astype(s.dtype))
        if op == "reduce_scatter":
            want = np.sum([pattern(j, it, n, s.dtype) for j in range(p)], axis=0, dtype=np.float64)
            return equal(r, want.astype(s.dtype)[me * r.size : (me + 1) * r.size])
        if op in ("allgather", "gather"):
            if op == "gather" and me != 0:
                return True
            return equal(r, np.concatenate([pattern(j, it, n, s.dtype) for j in range(p)]))
        if op == "scatter":
            return equal(r, pattern(0, it, s.size, s.dtype)[me * r.size : (me + 1) * r.size])
        return equal(s, pattern(0, it, n, s.dtype))

    def teardown(st: Any) -> None:
        while requests:
            requests.pop().Free()

    return Variant(label, peer, setup, refill, bind, check, teardown)


def run(opts: Options) -> list[dict[str, Any]] | None:
    from ..comm import under_mpi_launcher

    mpi_comm = None
    peer_name = None
    if under_mpi_launcher():
        from mpi4py import MPI

        mpi_comm = MPI.COMM_WORLD
        peer_name = mpi_name()
    if opts.op == "barrier":  # no data: one row, and no buffer variants
        opts.sizes, opts.heap, opts.algorithms, opts.before = [0], False, (), False
    pool = None
    if opts.before:  # every size's arrays, allocated while no communicator exists
        n = mpi_comm.Get_size() if mpi_comm is not None else int(os.environ.get("SHMCOLL_SIZE", "1"))
        floats = opts.compress is not None
        pool = {}
        for size in opts.sizes:
            ns, nr, dt = call_shape(opts.op, size, n, floats)
            pool[size] = (np.empty(ns, dt), np.empty(nr, dt))
    comm = shmcoll.Comm(mpi_comm)
    p, me = comm.size, comm.rank
    variants: list[Variant] = []
    if mpi_comm is not None and opts.mpi:
        variants.append(make_variant(opts, peer_name or "MPI", comm, mpi_comm, False, None))
    if opts.ordinary:
        variants.append(make_variant(opts, "shmcoll", comm, None, False, None))
    if opts.heap:
        variants.append(make_variant(opts, "shmcoll heap", comm, None, True, None))
    if opts.private:
        variants.append(make_variant(opts, "shmcoll private", comm, None, False, None, private=True))
    if pool is not None:
        variants.append(make_variant(opts, "shmcoll before", comm, None, False, None, pool=pool))
    # Forced algorithms run on heap arrays, or on ordinary ones when heap buffers are
    # skipped (how private buffers compare across algorithms).
    for a in opts.algorithms:
        label = f"heap {a}" if opts.heap else a
        variants.append(make_variant(opts, label, comm, None, opts.heap, a))
    if opts.persistent and opts.op in PERSISTENT:
        variants.append(make_variant(opts, "heap persistent", comm, None, True, None, persistent=True))
    if opts.compress:
        from ..codecs import get_codec

        codec = get_codec(json.loads(opts.compress))
        variants.append(make_variant(opts, "shmcoll compressed", comm, None, False, None, codec))
    rows: list[dict[str, Any]] = []
    for size in opts.sizes:
        iters, warmup = sizes.iterations(size * p, opts.iters, opts.warmup)
        measure(comm.Barrier, variants, size, iters, warmup, opts.rounds, opts.validate)
        for v in variants:
            if v.error is not None:
                rows.append({"bytes": size, "variant": v.label, "error": v.error})
                v.error = None
                continue
            s = summarize(gather_times(comm, np.array(v.times)))
            rows.append(
                {
                    "bytes": size,
                    "variant": v.label,
                    "peer": v.peer,
                    "median_us": s.median_us,
                    "p90_us": s.p90_us,
                    "valid": v.valid,
                }
            )
        if me == 0:
            print_progress(size, [r for r in rows if r["bytes"] == size])
    if me == 0:
        report(opts, rows, p, peer_name)
    comm.Free()
    return rows if me == 0 else None


def report(opts: Options, rows: list[dict[str, Any]], p: int, peer: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    labels = list(dict.fromkeys(r["variant"] for r in rows))
    peer_label = next((r["variant"] for r in rows if r.get("peer")), None)
    t = Table(title=f"{opts.op}, {p} ranks, median latency in µs (ratio = {peer_label or 'peer'} / shmcoll)")
    t.add_column("bytes", justify="right")
    for lab in labels:
        t.add_column(lab, justify="right")
        if peer_label and lab != peer_label:
            t.add_column("ratio", justify="right")

    state = MachineState.from_dict(opts.machine) if opts.machine else None
    main_label = "shmcoll" if "shmcoll" in labels else "shmcoll heap"
    if state:
        t.add_column("floor", justify="right")
        t.add_column(f"{main_label}/floor", justify="right")
    for size in opts.sizes:
        by = {r["variant"]: r for r in rows if r["bytes"] == size}
        ref = by.get(peer_label or "", {}).get("median_us")
        cells = [fmt_size(size)]
        for lab in labels:
            m = by.get(lab, {}).get("median_us")
            bad = by.get(lab, {}).get("valid") is False
            cells.append("error" if m is None else f"{m:.2f}" + (" ✗" if bad else ""))
            if peer_label and lab != peer_label:
                cells.append("" if m is None or ref is None else f"{ref / m:.2f}x")
        if state:
            cells += floor_and_ratio(opts.op, size, p, state, by.get(main_label, {}).get("median_us"))
        t.add_row(*cells)
    console.print(t)
    if state:
        console.print(describe(state))
    if any(r.get("valid") is False for r in rows):
        console.print("[red]VALIDATION FAILED[/red]")
    if opts.csv:
        import csv

        with open(opts.csv, "w", newline="") as f:
            w = csv.DictWriter(
                f,
                fieldnames=["op", "nranks", "bytes", "variant", "median_us", "p90_us", "valid", "error"],
                extrasaction="ignore",
            )
            w.writeheader()
            for r in rows:
                w.writerow({"op": opts.op, "nranks": p, **r})


def main(argv: list[str] | None = None) -> int:
    """Entry point of each rank: ``python -m shmcoll.bench.collective '<options json>'``."""
    args = sys.argv[1:] if argv is None else argv
    raw = json.loads(args[0] if args else os.environ["SHMCOLL_BENCH_OPTIONS"])
    raw["algorithms"] = tuple(raw.get("algorithms", ()))
    rows = run(Options(**raw))
    return 1 if rows is not None and any(r.get("valid") is False for r in rows) else 0


def options_json(opts: Options) -> str:
    return json.dumps(asdict(opts))


if __name__ == "__main__":
    sys.exit(main())
