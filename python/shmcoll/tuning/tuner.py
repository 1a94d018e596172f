"""`shmcoll tune`: measure this machine and write a tuning table (FFTW's wisdom, for
collectives).

The parent process launches the ranks for each process count (standalone launcher, or
mpiexec), shows a progress bar fed by the checkpoint file, and builds the table at the
end. The ranks sweep every (block size, buffer kind, candidate) cell: buffers rewritten
before every iteration, an untimed barrier between iterations, candidates of one size
interleaved over rounds (so that drifts of a shared machine hit them alike), the slowest
rank's time per iteration, medians over iterations. Rank 0 appends each finished size to
the checkpoint (JSON lines); `--resume` skips the cells already there, so an interrupted
run continues where it stopped.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from . import table

#: Effort levels: block sizes and candidates swept.
EFFORTS = ("quick", "measure", "exhaustive")

HEAP_ONLY = {"push": "recv", "pull": "send"}
#: The collectives' algorithms (bench names of the operations: table.COLL_OPERATIONS).
COLL_ALGORITHMS = ("inline", "direct", "cma", "staging")
COLL_HEAP_ONLY = ("direct",)


def default_sizes(effort: str) -> list[int]:
    if effort == "quick":
        return [8, 1 << 10, 64 << 10, 1 << 20]
    if effort == "measure":
        return [1 << k for k in range(3, 25)]  # 8 B .. 16 MiB, the bench's default sweep
    return [1 << k for k in range(0, 27)]  # 1 B .. 64 MiB


def candidates(effort: str) -> list[tuple[str, str, str]]:
    algos = [a for a, _ in _core.algorithms()[0]]
    orders, stores = _core.algorithms()[1], _core.algorithms()[2]
    if effort == "quick":
        return [(a, "shifted", "hybrid") for a in algos]
    if effort == "measure":
        return [(a, "shifted", s) for a in algos for s in stores]
    return [(a, o, s) for a in algos for o in orders for s in stores]


def kinds_for(algo: str, op: str = "alltoall") -> list[str]:
    """Buffer kinds a candidate is measured on: heap-only algorithms on heap buffers,
    compressed calls on ordinary ones (a codec's output is staged either way)."""
    if algo == table.COMPRESSED:
        return ["ordinary"]
    heap_only = HEAP_ONLY if op == "alltoall" else COLL_HEAP_ONLY
    return ["heap"] if algo in heap_only else ["heap", "ordinary"]


#: Collectives whose compressed form the tuner measures (table names).
TUNED_COMPRESSIBLE = ("allreduce", "allgather", "bcast", "reduce_scatter")


def op_candidates(op: str, effort: str, compress: str | None = None) -> list[tuple[str, str, str]]:
    if op == "alltoall":
        return candidates(effort)
    extra = [(table.COMPRESSED, "-", "-")] if compress and op in TUNED_COMPRESSIBLE else []
    return [(a, "-", "-") for a in COLL_ALGORITHMS] + extra


@dataclass
class Plan:
    nprocs: int
    sizes: list[int]
    cands: list[tuple[str, str, str]]
    checkpoint: str
    deadline: float  # epoch seconds; 0 = none
    iters: int = 300
    rounds: int = 3
    skip: list[list[Any]] = field(default_factory=list)  # cells already measured
    ops: list[str] = field(default_factory=lambda: ["alltoall"])
    effort: str = "quick"
    compress: str | None = None  # codec configuration (JSON) of the compressed candidate

    def op_cands(self, op: str) -> list[tuple[str, str, str]]:
        return self.cands if op == "alltoall" else op_candidates(op, self.effort, self.compress)

    def cells(self) -> list[tuple[str, int, str, str, str, str]]:
        return [
            (op, s, k, a, o, st)
            for op in self.ops
            for s in self.sizes
            for (a, o, st) in self.op_cands(op)
            for k in kinds_for(a, op)
        ]


def cell_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (
        rec.get("op", "alltoall"),
        rec["nprocs"],
        rec["bytes"],
        rec["buffers"],
        rec["algorithm"],
        rec["order"],
        rec["store"],
    )


def read_checkpoint(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for raw in p.read_text().splitlines():
        line = raw.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by an interruption
    return out


# -- the ranks ------------------------------------------------------------------------
def worker(plan: Plan) -> None:
    import shmcoll

    from ..bench import collective
    from ..bench.alltoall import _make_variant, gather_times
    from ..bench.harness import measure, summarize
    from ..tuning.lookup import INTERNAL

    comm = shmcoll.Comm()
    p = comm.size
    done = {tuple(k) for k in plan.skip}
    for op, size in [(op, size) for op in plan.ops for size in plan.sizes]:
        # Rank 0 decides whether time is left; everyone follows (a collective decision).
        go = np.full(p, 1 if (plan.deadline == 0 or time.time() < plan.deadline) else 0, np.uint8)
        got = np.empty_like(go)
        comm.Alltoall(go, got, **INTERNAL)
        if not got[0]:
            break
        variants = []
        for a, o, st in plan.op_cands(op):
            for kind in kinds_for(a, op):
                if (op, p, size, kind, a, o, st) in done:
                    continue
                heap = kind == "heap"
                label = f"{kind}|{a}|{o}|{st}"
                if op == "alltoall":
                    forced = {"algorithm": a, "order": o, "store": st}
                    v = _make_variant(label, comm, None, heap, heap, forced)
                elif a == table.COMPRESSED:
                    from ..codecs import get_codec

                    copts = collective.Options(op=op, sizes=[size], compress=plan.compress)
                    codec = get_codec(json.loads(plan.compress or "{}"))
                    v = collective.make_variant(copts, label, comm, None, heap, None, codec)
                else:
                    copts = collective.Options(op=op, sizes=[size])
                    v = collective.make_variant(copts, label, comm, None, heap, a)
                variants.append(v)
        if not variants:
            continue
        small = size * p <= 64 << 10
        iters = plan.iters if small else max(10, plan.iters // 10)
        interleave = 2 * p * size * len(variants) <= 256 << 20
        measure(comm.Barrier, variants, size, iters, 2 if not small else 20, plan.rounds, True, interleave)
        records = []
        for v in variants:
            kind, a, o, st = v.label.split("|")
            rec: dict[str, Any] = {
                "op": op,
                "nprocs": p,
                "bytes": size,
                "buffers": kind,
                "algorithm": a,
                "order": o,
                "store": st,
            }
            # every rank must take part in the gather, failed variants too
            t = np.array(v.times if v.error is None else [], np.float64)
            n = np.array([t.size] * p, np.int64)
            counts = np.empty_like(n)
            comm.Alltoall(n, counts, **INTERNAL)
            if v.error is not None or counts.min() == 0:
                rec["error"] = v.error or "no samples"
            else:
                s = summarize(gather_times(comm, t[: int(counts.min())]))
                rec.update(
                    median_us=s.median_us,
                    p90_us=s.p90_us,
                    p99_us=s.p99_us,
                    iterations=s.n,
                    outliers=bool(s.p99_us > 3 * s.median_us),
                    valid=v.valid,
                )
                if v.valid is False:
                    rec["error"] = "wrong result"
            v.error = None
            records.append(rec)
        if comm.rank == 0:
            with open(plan.checkpoint, "a") as f:
                for rec in records:
                    f.write(json.dumps(rec) + "\n")
    comm.Free()


def worker_main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    worker(Plan(**json.loads(args[0])))
    return 0


# -- building the table ---------------------------------------------------------------
def _boundaries(sizes: list[int]) -> list[tuple[int, int | None]]:
    """Cut the size axis at the geometric midpoints between measured sizes."""
    out: list[tuple[int, int | None]] = []
    for i, _ in enumerate(sizes):
        lo = 0 if i == 0 else math.isqrt(sizes[i - 1] * sizes[i]) + 1
        hi = None if i == len(sizes) - 1 else math.isqrt(sizes[i] * sizes[i + 1])
        out.append((lo, hi))
    return out


def choice_list(cells: list[dict[str, Any]]) -> list[table.CandidateRow]:
    """The ordered candidates for one (process count, size): the heap-only algorithms that
    beat the best candidate for ordinary buffers (fastest first), then that candidate,
    then staging (it serves everything, in-place calls included)."""
    ok = [c for c in cells if "error" not in c and c.get("median_us") is not None]
    ordinary = sorted((c for c in ok if c["buffers"] == "ordinary"), key=lambda c: c["median_us"])
    heap = sorted((c for c in ok if c["buffers"] == "heap"), key=lambda c: c["median_us"])
    row = lambda c: (c["algorithm"], c["order"], c["store"], None, None)  # noqa: E731
    out: list[table.CandidateRow] = []
    best_ord = ordinary[0] if ordinary else None
    for c in heap:
        if best_ord is not None and c["median_us"] >= best_ord["median_us"]:
            break
        if c["algorithm"] in HEAP_ONLY and all(r[0] != c["algorithm"] for r in out):
            out.append(row(c))
    if best_ord is not None:
        out.append(row(best_ord))
    if all(r[0] != "staging" for r in out):
        st = [c for c in ordinary if c["algorithm"] == "staging"]
        out.append(row(st[0]) if st else ("staging", "shifted", "hybrid", None, None))
    return out


def coll_choice_list(cells: list[dict[str, Any]]) -> list[str]:
    """The ordered algorithms of a collective for one (process count, size): `direct`
    first when it beats the best for private buffers on heap buffers, then that best, then
    the rest that serve private buffers, staging last (it serves everything)."""
    ok = [c for c in cells if "error" not in c and c.get("median_us") is not None]
    compressed = [c for c in ok if c["algorithm"] == table.COMPRESSED]
    ok = [c for c in ok if c["algorithm"] != table.COMPRESSED]
    ordinary = sorted((c for c in ok if c["buffers"] == "ordinary"), key=lambda c: c["median_us"])
    heap = sorted((c for c in ok if c["buffers"] == "heap"), key=lambda c: c["median_us"])
    out: list[str] = []
    # Compressed calls first where they beat every uncompressed way of serving the call.
    best = min((c["median_us"] for c in ok), default=None)
    if compressed and best is not None and compressed[0]["median_us"] < best:
        out.append(table.COMPRESSED)
    heap_wins = heap and (not ordinary or heap[0]["median_us"] < ordinary[0]["median_us"])
    if heap_wins and heap[0]["algorithm"] in COLL_HEAP_ONLY:
        out.append(heap[0]["algorithm"])
    out += [c["algorithm"] for c in ordinary if c["algorithm"] not in out and c["algorithm"] != "staging"]
    return [*out, "staging"]


def build_coll_entries(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    entries = []
    for p in sorted({r["nprocs"] for r in records}):
        recs = [r for r in records if r["nprocs"] == p]
        sizes = sorted({r["bytes"] for r in recs})
        rows: list[table.CollRow] = []
        for (_, hi), s in zip(_boundaries(sizes), sizes, strict=True):
            lst = coll_choice_list([r for r in recs if r["bytes"] == s])
            if rows and rows[-1][1] == lst:
                rows[-1] = (hi, lst)
            else:
                rows.append((hi, lst))
        entries.append({"nprocs": [p, p], "sizes": table.coll_rows_to_sizes(rows)})
    return entries


def build_document(records: list[dict[str, Any]], effort: str) -> dict[str, Any]:
    doc = table.new_document("measured", effort)
    for op in table.COLL_OPERATIONS:
        recs = [r for r in records if r.get("op") == op]
        if recs:
            doc["operations"][op] = build_coll_entries(recs)
    entries = []
    a2a = [r for r in records if r.get("op", "alltoall") == "alltoall"]
    for p in sorted({r["nprocs"] for r in a2a}):
        recs = [r for r in a2a if r["nprocs"] == p]
        sizes = sorted({r["bytes"] for r in recs})
        lists = [choice_list([r for r in recs if r["bytes"] == s]) for s in sizes]
        rows: list[table.RangeRow] = []
        for (lo, hi), lst in zip(_boundaries(sizes), lists, strict=True):
            if rows and rows[-1][2] == lst:
                rows[-1] = (rows[-1][0], hi, lst)  # merge with the previous range
            else:
                rows.append((lo, hi, lst))
        entries.append({"nprocs": [p, p], "sizes": table.rows_to_sizes(rows)})
    if entries:
        doc["operations"]["alltoall"] = entries
    doc["measurements"] = records
    return doc


# -- the parent -----------------------------------------------------------------------
@dataclass
class TuneOptions:
    nprocs: list[int]
    effort: str = "quick"
    sizes: list[int] | None = None
    out: str | None = None
    resume: bool = False
    time_limit: float = 0.0  # seconds; 0 = none
    plot: str | None = None
    launcher: str = "standalone"
    iters: int | None = None
    ops: list[str] = field(default_factory=lambda: ["alltoall"])
    compress: str | None = None


def run(opts: TuneOptions) -> dict[str, Any]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from ..cli import _mpiexec_command, default_mpiexec
    from ..launch import run as launch_run
    from .lookup import user_file

    out = Path(opts.out) if opts.out else user_file()
    checkpoint = out.with_name(out.name + ".checkpoint")
    if not opts.resume and checkpoint.exists():
        checkpoint.unlink()
    sizes = opts.sizes or default_sizes(opts.effort)
    cands = candidates(opts.effort)
    done = read_checkpoint(checkpoint) if opts.resume else []
    if opts.resume and checkpoint.exists():  # drop a line cut by the interruption (the next
        # record would otherwise be appended to it and lost)
        checkpoint.write_text("".join(json.dumps(r) + "\n" for r in done))
    done_keys = [list(cell_key(r)) for r in done]
    deadline = time.time() + opts.time_limit if opts.time_limit else 0.0
    total = sum(
        len(Plan(p, sizes, cands, "", 0, ops=opts.ops, effort=opts.effort, compress=opts.compress).cells())
        for p in opts.nprocs
    )
    iters = opts.iters or (300 if opts.effort != "quick" else 100)
    env_extra = {"SHMCOLL_TUNING_FILE": "none"}  # measure candidates, not an older table
    with Progress(
        TextColumn("[bold]tune[/bold] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} cells"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=False,
    ) as bar:
        task = bar.add_task("", total=total, completed=len(done))
        for p in opts.nprocs:
            bar.update(task, description=f"{p} ranks")
            plan = Plan(
                p,
                sizes,
                cands,
                str(checkpoint),
                deadline,
                iters=iters,
                skip=done_keys,
                ops=opts.ops,
                effort=opts.effort,
                compress=opts.compress,
            )
            payload = json.dumps(asdict(plan))
            cmd = [sys.executable, "-m", "shmcoll.tuning.tuner", payload]
            old = {k: os.environ.get(k) for k in env_extra}
            os.environ.update(env_extra)
            try:
                if opts.launcher == "mpiexec":
                    import subprocess

                    mcmd, env = _mpiexec_command(p, default_mpiexec())
                    proc = subprocess.Popen([*mcmd, *cmd], env=env)
                    while proc.poll() is None:
                        bar.update(task, completed=len(read_checkpoint(checkpoint)))
                        time.sleep(0.5)
                    rc = proc.returncode
                else:
                    import threading

                    result: list[int] = []
                    th = threading.Thread(
                        target=lambda n=p, argv=cmd[1:], res=result: res.append(launch_run(n, argv))
                    )
                    th.start()
                    while th.is_alive():
                        bar.update(task, completed=len(read_checkpoint(checkpoint)))
                        th.join(0.5)
                    rc = result[0] if result else 1
            finally:
                for k, v in old.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            bar.update(task, completed=len(read_checkpoint(checkpoint)))
            if rc != 0:
                raise RuntimeError(f"the {p}-rank sweep failed (exit code {rc}); rerun with --resume")
            if deadline and time.time() >= deadline:
                break
    records = read_checkpoint(checkpoint)
    doc = build_document(records, opts.effort)
    missing = total - len(records)
    if missing > 0:
        doc["comment"] = (
            f"incomplete: {missing} of {total} cells not measured (time limit); the model serves the rest"
        )
    table.dump(doc, out)
    checkpoint.unlink(missing_ok=True)
    if opts.plot:
        from ..plotting import plot_tuning

        plot_tuning(doc, opts.plot)
    doc["_path"] = str(out)
    return doc


if __name__ == "__main__":
    sys.exit(worker_main())
