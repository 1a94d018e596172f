"""``shmcoll bench alltoall``: shmcoll's Alltoall against MPI's, in one launch.

Runs on every rank (under mpiexec, or under the standalone launcher without MPI). Rank 0
prints the table: median latency per size for MPI (through mpi4py), shmcoll on ordinary
NumPy buffers (``np.empty``, as a user allocates them: in the shared-array arena between
its bounds), shmcoll on shared-heap buffers, optionally on NumPy buffers private to each
process (outside the arena), and any forced variant, with the ratio MPI/shmcoll, the
bandwidth, and the share of the machine's NT copy ceiling.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import shmcoll
from shmcoll.errors import ShmcollError

from . import sizes
from .harness import Variant, measure, summarize
from .machine_state import MachineState, describe, floor_and_ratio
from .sizes import fmt_size


@dataclass
class Options:
    sizes: list[int]
    iters: int = 1000
    warmup: int = 100
    rounds: int = 5
    validate: bool = False
    mpi: bool = True
    ordinary: bool = True
    heap: bool = True
    persistent: bool = False  # also time Alltoall_init + Start on heap buffers
    private: bool = False  # also time NumPy arrays outside the shared-array arena
    before: bool = False  # also time NumPy arrays allocated before the communicator existed
    variants: list[str] = field(default_factory=list)  # "algo/order/store" forced variants
    percentiles: bool = False
    csv: str | None = None
    json_out: str | None = None
    ceiling: bool = True
    plot: str | None = None
    #: The machine's state measured before the launch (machine_state.MachineState as a
    #: dict): each size's floor and the ratio to it go into the table.
    machine: dict[str, Any] | None = None
    table: str | None = None  # a tuned table to run against the model (against_model.py)


def iterations(opts: Options, size: int, p: int) -> tuple[int, int]:
    """OSU's rule: fewer iterations for large messages (sizes.iterations)."""
    return sizes.iterations(size * p, opts.iters, opts.warmup)


def _pattern(rank: int, peer: int, it: int) -> int:
    return (rank * 31 + peer * 7 + it) & 0xFF


def _make_variant(
    label: str,
    comm: shmcoll.Comm,
    peer_comm: Any,
    heap_send: bool,
    heap_recv: bool,
    forced: dict[str, str] | None,
    peer: bool = False,
    persistent: bool = False,
    private: bool = False,
    pool: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
) -> Variant:
    p, me = comm.size, comm.rank

    # _pattern(me, j, it) == (base[j] + it) & 0xFF: one broadcast add writes a distinct
    # value into every block, for the iteration that is validated. The other iterations
    # rewrite the buffer with one memset: with ranks sharing a core, a peer's untimed refill
    # runs between this rank's t0 and t1 (for MPI and shmcoll alike), so it must be cheap.
    base = np.array([_pattern(me, j, 0) for j in range(p)], np.uint8).reshape(p, 1)

    def setup(size: int) -> Any:
        n = size * p
        if pool is not None:
            send, recv = pool[size]
        elif private:
            with shmcoll.private_arrays():
                send, recv = np.empty(n, np.uint8), np.empty(n, np.uint8)
        else:
            send = comm.empty(n, np.uint8) if heap_send else np.empty(n, np.uint8)
            recv = comm.empty(n, np.uint8) if heap_recv else np.empty(n, np.uint8)
        send[:] = 1
        recv[:] = 0
        return send, recv, size, send.reshape(p, size), []

    def refill(s: Any, it: int, final: bool) -> None:
        if final:
            np.add(base, np.uint8(it & 0xFF), out=s[3])
        else:
            s[0].fill(it & 0xFF)

    # The timed callable is a closure over the bound method and the two buffers, built the
    # same way for MPI and shmcoll, so that neither pays more Python overhead than a user would.
    fn = peer_comm.Alltoall if peer else comm.Alltoall
    kw = forced or {}

    def bind(s: Any) -> Any:
        a, b = s[0], s[1]
        if persistent:
            req = comm.Alltoall_init(a, b, **kw)
            s[4].append(req)
            return req.Start
        if kw:
            return lambda: fn(a, b, **kw)
        return lambda: fn(a, b)

    def check(s: Any, it: int) -> bool:
        _, recv, size, _, _ = s
        if size == 0:
            return True
        rows = recv.reshape(p, size)
        return all(bool((rows[j] == _pattern(j, me, it)).all()) for j in range(p))

    def teardown(s: Any) -> None:
        for req in s[4]:
            req.Free()

    return Variant(label, peer, setup, refill, bind, check, teardown)


def nt_ceiling(comm: shmcoll.Comm, nbytes: int = 64 << 20, reps: int = 5) -> float:
    """GB/s of all ranks copying `nbytes` each with streaming stores at the same time."""
    src = np.ones(nbytes, np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    shmcoll.copy(dst, src, "nt")
    times = []
    for _ in range(reps):
        src[::4096] += 1  # touch every page so nothing is lazily skipped
        comm.Barrier()
        t0 = time.perf_counter()
        shmcoll.copy(dst, src, "nt")
        times.append(time.perf_counter() - t0)
    all_t = gather_times(comm, np.array(times))
    slowest = all_t.max(axis=0)
    return float(np.median(comm.size * nbytes / slowest) / 1e9)


def gather_times(comm: shmcoll.Comm, times: np.ndarray) -> np.ndarray:
    """Every rank's array of times, as [rank, index] (an Alltoall of the same data)."""
    p = comm.size
    t = np.ascontiguousarray(times, dtype=np.float64)
    send = np.tile(t, p)
    recv = np.empty_like(send)
    comm.Alltoall(send, recv)
    return recv.reshape(p, t.size)


def mpi_name() -> str:
    from mpi4py import MPI

    v = MPI.Get_library_version().strip().splitlines()[0]
    if "Open MPI" in v:
        return "Open MPI " + v.split("v", 1)[-1].split(",")[0].strip()
    if "MPICH" in v:
        return "MPICH " + v.split(":", 1)[-1].strip()
    return v[:30]


def run(opts: Options) -> list[dict[str, Any]] | None:
    from ..comm import under_mpi_launcher

    mpi_comm = None
    peer_name = None
    if under_mpi_launcher():
        from mpi4py import MPI

        mpi_comm = MPI.COMM_WORLD
        peer_name = mpi_name()
    pool = None
    if opts.before:  # every size's arrays, allocated while no communicator exists
        n = mpi_comm.Get_size() if mpi_comm is not None else int(os.environ.get("SHMCOLL_SIZE", "1"))
        pool = {size: (np.empty(size * n, np.uint8), np.empty(size * n, np.uint8)) for size in opts.sizes}
    if opts.table:
        os.environ["SHMCOLL_TUNING_FILE"] = "none"  # the communicator binds the model
    comm = shmcoll.Comm(mpi_comm)
    p, me = comm.size, comm.rank
    variants: list[Variant] = []
    if mpi_comm is not None and opts.mpi:
        variants.append(_make_variant(peer_name or "MPI", comm, mpi_comm, False, False, None, peer=True))
    if opts.ordinary:
        variants.append(_make_variant("shmcoll", comm, None, False, False, None))
    if opts.heap:
        variants.append(_make_variant("shmcoll heap", comm, None, True, True, None))
    if opts.private:
        variants.append(_make_variant("shmcoll private", comm, None, False, False, None, private=True))
    if pool is not None:
        variants.append(_make_variant("shmcoll before", comm, None, False, False, None, pool=pool))
    if opts.persistent:
        variants.append(_make_variant("heap persistent", comm, None, True, True, None, persistent=True))
    for spec in opts.variants:
        algo, order, store = ([*spec.split("/"), "", ""])[:3]
        forced = {k: v for k, v in (("algorithm", algo), ("order", order), ("store", store)) if v}
        variants.append(_make_variant(f"heap {spec}", comm, None, True, True, forced))
    if opts.table:
        from . import against_model

        tuned = against_model.tuned_rows(opts.table, p)
        model = comm._table("alltoall")[1]
        variants = [v if v.peer else against_model.bound(v, comm, model, "model") for v in variants]
        for label, heap, private in (("tuned", False, False), ("tuned heap", True, False)) + (
            (("tuned private", False, True),) if opts.private else ()
        ):
            v = _make_variant(label, comm, None, heap, heap, None, private=private)
            variants.append(against_model.bound(v, comm, tuned, opts.table))
    automatic = ("shmcoll", "shmcoll heap", "shmcoll private", "tuned", "tuned heap", "tuned private")

    rows: list[dict[str, Any]] = []
    for size in opts.sizes:
        iters, warmup = iterations(opts, size, p)
        # (the tuned table and the model always interleaved, however many variants)
        measure(
            comm.Barrier, variants, size, iters, warmup, opts.rounds, opts.validate, bool(opts.table) or None
        )
        for v in variants:
            if v.error is not None:
                row = {"bytes": size, "variant": v.label, "error": v.error}
            else:
                s = summarize(gather_times(comm, np.array(v.times)))
                row = {
                    "bytes": size,
                    "variant": v.label,
                    "peer": v.peer,
                    "median_us": s.median_us,
                    "p50_us": s.p50_us,
                    "p90_us": s.p90_us,
                    "p99_us": s.p99_us,
                    "iterations": s.n,
                    "valid": v.valid,
                    "choice": None,
                }
            rows.append(row)
            v.error = None
        # record what the automatic selection picked for this size (ordinary and heap);
        # every rank sizes its buffers alike, so a failure here happens on every rank
        failed = {r["variant"] for r in rows if r["bytes"] == size and "error" in r}
        for v in variants:
            if v.label in automatic and v.label not in failed:
                try:
                    st = v.setup(size)
                    v.bind(st)()
                    del st
                except ShmcollError:
                    continue
                c = comm.last_choice()
                for row in rows:
                    if row["bytes"] == size and row["variant"] == v.label and c is not None:
                        row["choice"] = f"{c.algorithm}/{c.order}/{c.store}"
        if me == 0:
            print_progress(size, [r for r in rows if r["bytes"] == size])
    ceiling = nt_ceiling(comm) if opts.ceiling else None
    if me == 0:
        report(rows, p, peer_name, ceiling, opts)
    comm.Free()
    return rows if me == 0 else None


def print_progress(size: int, rows: list[dict[str, Any]]) -> None:
    parts = [f"{r['variant']}=" + ("error" if "error" in r else f"{r['median_us']:.2f}us") for r in rows]
    print(f"  {fmt_size(size):>5}: " + "  ".join(parts), file=sys.stderr, flush=True)


def report(
    rows: list[dict[str, Any]], p: int, peer: str | None, ceiling: float | None, opts: Options
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    labels = list(dict.fromkeys(r["variant"] for r in rows))
    peer_label = next((r["variant"] for r in rows if r.get("peer")), None)
    t = Table(
        title=f"Alltoall, {p} ranks, median latency in µs "
        f"(ratio = {peer_label or 'peer'} / shmcoll, >1 is faster)"
    )
    t.add_column("bytes/rank", justify="right")
    for lab in labels:
        t.add_column(lab, justify="right")
        if peer_label and lab != peer_label:
            t.add_column("ratio", justify="right")
    state = MachineState.from_dict(opts.machine) if opts.machine else None
    main_label = "shmcoll" if "shmcoll" in labels else "shmcoll heap"
    if state:
        t.add_column("floor", justify="right")
        t.add_column(f"{main_label}/floor", justify="right")
    t.add_column("heap GB/s", justify="right")
    if ceiling:
        t.add_column("% NT ceiling", justify="right")
    if opts.percentiles:
        t.add_column("heap p90/p99", justify="right")
    for size in opts.sizes:
        by = {r["variant"]: r for r in rows if r["bytes"] == size}
        cells = [fmt_size(size)]
        ref = by.get(peer_label, {}).get("median_us") if peer_label else None
        for lab in labels:
            r = by.get(lab, {})
            m = r.get("median_us")
            mark = "" if r.get("valid") in (None, True) else " ✗"
            cells.append("error" if m is None else f"{m:.2f}{mark}")
            if peer_label and lab != peer_label:
                cells.append("" if (m is None or ref is None) else f"{ref / m:.2f}x")
        if state:
            cells += floor_and_ratio("alltoall", size, p, state, by.get(main_label, {}).get("median_us"))
        h = by.get("shmcoll heap", {}).get("median_us")
        bw = (p * p * size / (h * 1e-6) / 1e9) if h else None
        cells.append("" if bw is None else f"{bw:.1f}")
        if ceiling:
            cells.append("" if bw is None or size < (1 << 20) else f"{100 * bw / ceiling:.0f}%")
        if opts.percentiles:
            hr = by.get("shmcoll heap", {})
            cells.append(f"{hr.get('p90_us', 0):.1f}/{hr.get('p99_us', 0):.1f}" if hr else "")
        t.add_row(*cells)
    console.print(t)
    if state:
        console.print(describe(state))
    if ceiling:
        console.print(f"NT copy ceiling ({p} ranks streaming 64 MiB each at once): {ceiling:.1f} GB/s")
    choices = {r["bytes"]: r.get("choice") for r in rows if r["variant"] == "shmcoll heap"}
    if any(choices.values()):
        console.print(
            "automatic choice (heap): " + ", ".join(f"{fmt_size(k)}={v}" for k, v in choices.items())
        )
    invalid = [r for r in rows if r.get("valid") is False]
    if invalid:
        console.print(f"[red]VALIDATION FAILED for {len(invalid)} rows[/red]")
    if opts.csv:
        write_csv(opts.csv, rows, p)
    if opts.plot:
        from ..plotting import plot_bench

        plot_bench(rows, p, opts.plot)
        console.print(f"wrote {opts.plot}")
    if opts.table:
        from .against_model import report as against

        against(rows, opts.sizes)
    if opts.json_out:
        with open(opts.json_out, "w") as f:
            json.dump({"nranks": p, "peer": peer, "nt_ceiling_gbs": ceiling, "rows": rows}, f, indent=1)


def write_csv(path: str, rows: list[dict[str, Any]], p: int) -> None:
    import csv

    keys = [
        "nranks",
        "bytes",
        "variant",
        "median_us",
        "p50_us",
        "p90_us",
        "p99_us",
        "iterations",
        "valid",
        "choice",
        "error",
    ]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({"nranks": p, **r})


def main(argv: list[str] | None = None) -> int:
    """Entry point of each rank: ``python -m shmcoll.bench.alltoall '<options json>'``."""
    args = sys.argv[1:] if argv is None else argv
    opts = Options(**json.loads(args[0] if args else os.environ["SHMCOLL_BENCH_OPTIONS"]))
    rows = run(opts)
    if rows is not None:
        failed = any(r.get("valid") is False for r in rows)
        return 1 if failed else 0
    return 0


def options_json(opts: Options) -> str:
    return json.dumps(asdict(opts))


if __name__ == "__main__":
    sys.exit(main())
