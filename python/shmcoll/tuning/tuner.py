"""`shmcoll tune`: measure this machine and write a tuning table (FFTW's wisdom, for
collectives).

The parent process launches the ranks for each process count (standalone launcher, or
mpiexec), shows a progress bar fed by the checkpoint file, and builds the table at the
end (build.py, by the rule of decide.py). The ranks sweep every (block size, buffer kind,
candidate) cell, the model's own choice among the candidates: buffers rewritten before
every iteration, an untimed barrier between iterations, the candidates of one size and
kind interleaved over rounds with the model beside them (so that drifts of a shared
machine hit them alike), the slowest rank's time per iteration, medians over iterations
and per round. Rank 0 appends each finished size to the checkpoint (JSON lines);
`--resume` skips the cells already there, so an interrupted run continues where it
stopped.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from ..bench.sizes import iterations
from ..mpiexec import default_mpiexec, mpiexec_command
from . import table
from .build import COLL_HEAP_ONLY, HEAP_ONLY, KINDS, MODEL, build_document

#: Effort levels: block sizes and candidates swept.
EFFORTS = ("quick", "measure", "exhaustive")

#: The collectives' algorithms (bench names of the operations: table.COLL_OPERATIONS).
COLL_ALGORITHMS = ("inline", "direct", "cma", "staging")
#: The model's own choice (nothing forced), a candidate in every cell.
MODEL_CANDIDATE = (MODEL, "-", "-")
#: Bytes of buffers one interleaved batch of a cell may hold on a rank (send and receive
#: buffers of each candidate); cells with more candidates run in several batches, each
#: with the model beside its candidates.
BATCH_BYTES = 256 << 20


def default_sizes(effort: str) -> list[int]:
    if effort == "quick":
        return [8, 1 << 10, 64 << 10, 1 << 20]
    if effort == "measure":
        return [1 << k for k in range(3, 25)]  # 8 B .. 16 MiB, the bench's default sweep
    return [1 << k for k in range(0, 27)]  # 1 B .. 64 MiB


def candidates(effort: str) -> list[tuple[str, str, str]]:
    """Alltoall's candidates at an effort level: the model's own choice, then forced ones."""
    algos = [a for a, _ in _core.algorithms()[0]]
    orders, stores = _core.algorithms()[1], _core.algorithms()[2]
    if effort == "quick":
        forced = [(a, "shifted", "hybrid") for a in algos]
    elif effort == "measure":
        forced = [(a, "shifted", s) for a in algos for s in stores]
    else:
        forced = [(a, o, s) for a in algos for o in orders for s in stores]
    return [MODEL_CANDIDATE, *forced]


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
    return [MODEL_CANDIDATE, *((a, "-", "-") for a in COLL_ALGORITHMS), *extra]


@dataclass
class Plan:
    nprocs: int
    sizes: list[int]
    cands: list[tuple[str, str, str]]
    checkpoint: str
    deadline: float  # epoch seconds; 0 = none
    iters: int = 300
    rounds: int = 5
    skip: list[list[Any]] = field(default_factory=list)  # cells already measured
    ops: list[str] = field(default_factory=lambda: ["alltoall"])
    effort: str = "quick"
    compress: str | None = None  # codec configuration (JSON) of the compressed candidate

    def op_cands(self, op: str) -> list[tuple[str, str, str]]:
        # (tuples again: the plan reaches the ranks as JSON)
        cands = [(a, o, s) for a, o, s in self.cands]
        return cands if op == "alltoall" else op_candidates(op, self.effort, self.compress)

    def cells(self) -> list[tuple[str, int, str, str, str, str]]:
        return [
            (op, s, k, a, o, st)
            for op in self.ops
            for s in self.sizes
            for (a, o, st) in self.op_cands(op)
            for k in kinds_for(a, op)
        ]


#: The fields that name a cell, in cell_key's order.
CELL_FIELDS = ("op", "nprocs", "bytes", "buffers", "algorithm", "order", "store")


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
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interruption
            if isinstance(rec, dict) and all(k in rec for k in CELL_FIELDS[1:]):
                out.append(rec)  # anything else is no record of ours: measured again
    return out


# -- the ranks ------------------------------------------------------------------------
def worker(plan: Plan) -> None:
    import shmcoll

    from ..bench import collective
    from ..bench.alltoall import _make_variant, gather_times
    from ..bench.harness import Variant, measure
    from ..bench.stats import Summary
    from ..tuning.lookup import INTERNAL

    comm = shmcoll.Comm()
    p = comm.size
    done = {tuple(k) for k in plan.skip}

    def variant(op: str, size: int, kind: str, a: str, o: str, st: str) -> Variant:
        # "ordinary": buffers private to each rank, outside the shared-array arena (arena
        # buffers are reached like heap ones, and the table's lists tell the two apart).
        heap = kind == "heap"
        label = f"{kind}|{a}|{o}|{st}"
        if op == "alltoall":
            forced = None if a == MODEL else {"algorithm": a, "order": o, "store": st}
            return _make_variant(label, comm, None, heap, heap, forced, private=not heap)
        if a == table.COMPRESSED:
            from ..codecs import get_codec

            copts = collective.Options(op=op, sizes=[size], compress=plan.compress)
            codec = get_codec(json.loads(plan.compress or "{}"))
            return collective.make_variant(copts, label, comm, None, heap, None, codec, private=not heap)
        copts = collective.Options(op=op, sizes=[size])
        algo = None if a == MODEL else a
        return collective.make_variant(copts, label, comm, None, heap, algo, private=not heap)

    def result(v: Variant) -> dict[str, Any]:
        """The variant's figures over all ranks (every rank takes part, failed ones too)."""
        t = np.array(v.times if v.error is None else [], np.float64)
        n = np.array([t.size] * p, np.int64)
        counts = np.empty_like(n)
        comm.Alltoall(n, counts, **INTERNAL)
        if v.error is not None or counts.min() == 0:
            return {"error": v.error or "no samples"}
        slowest = gather_times(comm, t[: int(counts.min())]).max(axis=0)
        s = Summary.of(slowest)
        rounds = [float(np.median(c)) * 1e6 for c in np.array_split(slowest, plan.rounds) if c.size]
        rec: dict[str, Any] = {
            "median_us": s.median_us,
            "p90_us": s.p90_us,
            "p99_us": s.p99_us,
            "iterations": s.n,
            "outliers": bool(s.p99_us > 3 * s.median_us),
            "valid": v.valid,
            "rounds_us": rounds,
        }
        if v.valid is False:
            rec["error"] = "wrong result"
        return rec

    for op, size in [(op, size) for op in plan.ops for size in plan.sizes]:
        # Rank 0 decides whether time is left; everyone follows (a collective decision).
        go = np.full(p, 1 if (plan.deadline == 0 or time.time() < plan.deadline) else 0, np.uint8)
        got = np.empty_like(go)
        comm.Alltoall(go, got, **INTERNAL)
        if not got[0]:
            break
        # The benchmarks' rule, with enough iterations left for every interleaved round.
        n, warm = iterations(size * p, plan.iters, 20)
        iters = max(8 * plan.rounds, n)
        # Per batch: the model and the candidates whose buffers fit beside it.
        per_batch = max(1, BATCH_BYTES // max(1, 2 * p * size) - 1)
        records = []
        for kind in KINDS:
            key = (op, p, size, kind)
            cands = [
                c
                for c in plan.op_cands(op)
                if c != MODEL_CANDIDATE and kind in kinds_for(c[0], op) and (*key, *c) not in done
            ]
            model_done = (*key, *MODEL_CANDIDATE) in done
            if not cands and model_done:
                continue
            for b in range(0, max(1, len(cands)), per_batch):
                model = variant(op, size, kind, *MODEL_CANDIDATE)
                batch = [model, *(variant(op, size, kind, *c) for c in cands[b : b + per_batch])]
                measure(comm.Barrier, batch, size, iters, warm, plan.rounds, True, True)
                beside = result(model)
                if b == 0 and not model_done:
                    # The model's table as the ranks bound it, for the table builder.
                    rows = comm._table(op)[1]
                    names = dict(zip(CELL_FIELDS, (*key, *MODEL_CANDIDATE), strict=True))
                    records.append({**names, **beside, "model_rows": rows})
                for v in batch[1:]:
                    names = dict(zip(CELL_FIELDS, (*key, *v.label.split("|")[1:]), strict=True))
                    rec = {**names, **result(v)}
                    if "error" not in beside:
                        rec["model_median_us"] = beside["median_us"]
                        rec["model_rounds_us"] = beside["rounds_us"]
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

                    mcmd, env = mpiexec_command(p, default_mpiexec())
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
