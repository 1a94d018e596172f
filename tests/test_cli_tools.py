"""The command-line tools of the tuning issue, through the real entry point (subprocesses):
``tune`` (a real quick sweep, resume, time limit), ``explain``, ``plot``, ``bench copy``,
``bench --profile``/``--plot``, ``profiles``, ``info``, ``--help`` of every command and
exit codes on bad arguments. What a tuned table makes a ``Comm`` select runs on forked
ranks."""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import jsonschema
import numpy as np
import pytest

import shmcoll
from conftest import environ, mpi_available, private_empty, run_ranks
from shmcoll import _core
from shmcoll.bench.sizes import fmt_size
from shmcoll.tuning import build, table, tuner
from test_cli import cli

ENV = "SHMCOLL_TUNING_FILE"
PNG = b"\x89PNG\r\n\x1a\n"
TUNE_SIZES = [8, 4 << 10, 256 << 10]

pytestmark = pytest.mark.timeout(180)


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG


def output(p: Any) -> str:
    return f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"


def hermetic(tmp: Path, **extra: str) -> dict[str, str]:
    """An environment without this machine's user or system table files, and without
    SHMCOLL_TUNING_FILE (empty counts as unset; conftest sets it to "none")."""
    return {
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "XDG_CONFIG_DIRS": str(tmp / "config-dirs"),
        ENV: "",
        **extra,
    }


def plain(rows: Any) -> Any:
    """Rows (tuples or lists) as nested lists."""
    return json.loads(json.dumps(rows))


def covering(rows: list[Any], size: int) -> Any:
    hits = [r for r in rows if r[0] <= size and (r[1] is None or size <= r[1])]
    assert len(hits) == 1, (size, rows)
    return hits[0]


# -- a real quick tune (np=2, three sizes), shared by the tests below ------------------
@dataclass
class Tuned:
    out: Path
    csv: Path
    png: Path
    proc: Any
    dir: Path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    d = tmp_path_factory.mktemp("tune")
    out, csv_path, png = d / "table.json", d / "table.csv", d / "winners.png"
    p = cli(
        "tune", "-n", "2", "--effort", "quick", "--sizes", "8,4K,256K",
        "--out", str(out), "--csv", str(csv_path), "--plot", str(png),
        timeout=120, env=hermetic(d),
    )  # fmt: skip
    return Tuned(out, csv_path, png, p, d)


def test_tune_quick_writes_a_valid_table(tuned: Tuned) -> None:
    p = tuned.proc
    assert p.returncode == 0, output(p)
    assert f"wrote {tuned.out}" in p.stdout, output(p)
    doc = json.loads(tuned.out.read_text())
    jsonschema.validate(doc, table.schema(), cls=jsonschema.Draft202012Validator)
    assert table.load(tuned.out) == doc
    assert doc["format"] == "shmcoll-tuning" and doc["version"] == 1
    assert doc["source"] == "measured" and doc["effort"] == "quick"
    assert doc["shmcoll_version"] == shmcoll.__version__
    assert doc["fingerprint"] == table.fingerprint()
    assert "comment" not in doc, doc.get("comment")  # complete: no cell left to the model
    assert not (tuned.dir / "table.json.checkpoint").exists()
    assert not list(tuned.dir.glob("*.tmp"))
    assert not (tuned.dir / "config" / "shmcoll").exists(), "tune --out must not write the user table"


def test_tuned_table_gives_each_measured_cell_its_decision(tuned: Tuned) -> None:
    assert tuned.proc.returncode == 0, output(tuned.proc)
    doc = table.load(tuned.out)
    entries = doc["operations"]["alltoall"]
    assert [e["nprocs"] for e in entries] == [[2, 2]]
    rows = table.rows_for(doc, "alltoall", 2)
    assert rows is not None
    assert table.rows_for(doc, "alltoall", 3) is None
    for a, b in itertools.pairwise(rows):  # equal neighbours are merged
        assert not (a[2] == b[2] and a[1] is not None and a[1] + 1 == b[0]), (a, b)
    # every measured cell selects what was decided there: the winner where it replaced
    # the model, else the model's own choice (gaps of the table fall back to the model)
    model = _core.model_table("alltoall", 2)
    decided = {(o.bytes, o.buffers): o for o in build.decisions_of(doc)}
    assert set(decided) == {(s, k) for s in TUNE_SIZES for k in ("heap", "ordinary")}
    for (size, kind), o in decided.items():
        call = (True, True, False) if kind == "heap" else (False, False, False)
        got = _core.resolve("alltoall", rows, 2, size, *call)
        if o.changed:
            assert "/".join(got[:3]) == o.choice, (size, kind, got, o)
            assert o.choice_us is not None and o.model_us is not None
            assert f"{o.model_us:.2f} -> {o.choice_us:.2f}" in tuned.proc.stdout
        else:
            assert got == _core.resolve("alltoall", model, 2, size, *call), (size, kind, got, o)
    # the report: what changed, what kept the model
    changed = [o for o in decided.values() if o.changed]
    if changed:
        assert "changed from the model" in tuned.proc.stdout
    else:
        assert "no cell changed from the model" in tuned.proc.stdout
    if len(changed) < len(decided):
        assert "kept the model, alltoall 2 ranks:" in tuned.proc.stdout


def test_tune_records_every_cell_with_medians(tuned: Tuned) -> None:
    assert tuned.proc.returncode == 0, output(tuned.proc)
    doc = table.load(tuned.out)
    recs = doc["measurements"]
    plan = tuner.Plan(2, TUNE_SIZES, tuner.candidates("quick"), "", 0)
    want = {(op, 2, s, k, a, o, st) for (op, s, k, a, o, st) in plan.cells()}
    got = [tuner.cell_key(r) for r in recs]
    assert len(got) == len(set(got)), "a cell measured twice"
    assert set(got) == want
    assert f"({len(recs)} cells measured)" in tuned.proc.stdout
    assert f"{len(recs)}/{len(recs)} cells" in tuned.proc.stdout  # the progress bar's last state
    for r in recs:
        if r["algorithm"] == "staging":
            assert "error" not in r, r  # staging serves every cell
        if "error" in r:
            continue
        assert 0 < r["median_us"] <= r["p90_us"] <= r["p99_us"], r
        assert r["iterations"] >= 10, r
        assert isinstance(r["outliers"], bool)
        assert r["valid"] is True, r
        assert len(r["rounds_us"]) == tuner.Plan(2, [], [], "", 0).rounds, r
        if r["algorithm"] == build.MODEL:
            assert r["model_rows"] == plain(_core.model_table("alltoall", 2)), r  # what the ranks bound
        else:
            assert r["model_median_us"] > 0 and len(r["model_rounds_us"]) == len(r["rounds_us"]), r
    # the CSV holds the same cells
    with tuned.csv.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(recs)
    assert {"nprocs", "bytes", "buffers", "algorithm", "order", "store", "median_us"} <= set(rows[0])
    by_key = {tuner.cell_key(r): r for r in recs}
    for row in rows:
        key = (
            row["op"],
            int(row["nprocs"]),
            int(row["bytes"]),
            row["buffers"],
            row["algorithm"],
            row["order"],
            row["store"],
        )
        if row["median_us"]:
            assert float(row["median_us"]) == pytest.approx(by_key[key]["median_us"])


def test_tune_plot_and_plot_of_the_tune_csv(tuned: Tuned, tmp_path: Path) -> None:
    assert tuned.proc.returncode == 0, output(tuned.proc)
    assert is_png(tuned.png)
    dst = tmp_path / "redrawn.png"
    p = cli("plot", str(tuned.csv), "-o", str(dst))
    assert p.returncode == 0, output(p)
    assert is_png(dst)
    assert f"wrote {dst}" in p.stdout
    # without -o: beside the CSV
    copy = tmp_path / "tune.csv"
    copy.write_bytes(tuned.csv.read_bytes())
    p = cli("plot", str(copy))
    assert p.returncode == 0, output(p)
    assert is_png(tmp_path / "tune.png")


def test_explain_shows_the_tuned_table(tuned: Tuned) -> None:
    assert tuned.proc.returncode == 0, output(tuned.proc)
    p = cli("explain", "-n", "2", env=hermetic(tuned.dir, SHMCOLL_TUNING_FILE=str(tuned.out)))
    assert p.returncode == 0, output(p)
    assert f"{tuned.out} (environment table)" in p.stdout, p.stdout
    assert "model embedded" not in p.stdout.split("other collectives")[0]
    rows = table.rows_for(table.load(tuned.out), "alltoall", 2)
    assert rows is not None
    alltoall = p.stdout.split("other collectives")[0]
    lines = [line for line in alltoall.splitlines() if line.startswith("│")]
    assert len(lines) == len(rows), p.stdout
    for line, (lo, hi, cands) in zip(lines, rows, strict=True):
        cells = [c.strip() for c in line.split("│")[1:-1]]
        assert cells[0] == f"{fmt_size(lo)}..{'inf' if hi is None else fmt_size(hi)}", line
        assert cells[1] == ", ".join(f"{a}/{o}/{s}" for a, o, s, _, _ in cands), line
        probe = lo if hi is None else hi
        for cell, (hs, hr, ip) in zip(
            cells[2:], [(True, True, False), (False, False, False), (False, False, True)], strict=True
        ):
            a, o, s, *_ = _core.resolve("alltoall", rows, 2, probe, hs, hr, ip)
            assert cell == f"{a}/{o}/{s}", (line, cell)
    # and without it, the model
    p = cli("explain", "-n", "2", env=hermetic(tuned.dir, SHMCOLL_TUNING_FILE="none"))
    assert p.returncode == 0, output(p)
    assert "model embedded in shmcoll" in p.stdout
    assert str(tuned.out) not in p.stdout


def _choices_in_ranks(sizes: list[int]) -> dict[str, Any]:
    comm = shmcoll.Comm()
    p = comm.size
    source, rows = comm.selection()
    out: dict[str, Any] = {
        "source": source,
        "rows": json.loads(json.dumps(rows)),
        "cma_ok": comm.cma_ok,
        "calls": [],
    }
    for n in sizes:
        for heap in (False, True):
            if heap:
                s, r = comm.empty(p * n, np.uint8), comm.empty(p * n, np.uint8)
            else:
                s, r = private_empty(p * n, np.uint8), private_empty(p * n, np.uint8)
            s[:] = comm.rank + 1
            comm.Alltoall(s, r)
            assert (r.reshape(p, n) == np.arange(1, p + 1, dtype=np.uint8)[:, None]).all()
            out["calls"].append((n, heap, list(comm.last_choice())))
            del s, r
    comm.Free()
    return out


def test_comm_uses_the_tuned_table(tuned: Tuned) -> None:
    assert tuned.proc.returncode == 0, output(tuned.proc)
    doc = table.load(tuned.out)
    rows = table.rows_for(doc, "alltoall", 2)
    sizes = [*TUNE_SIZES, 100, 40_000]
    results = run_ranks(2, _choices_in_ranks, sizes, env={ENV: str(tuned.out)}, timeout=60)
    for out in results:
        assert out["source"] == str(tuned.out)
        assert out["rows"] == json.loads(json.dumps(rows))
        for n, heap, got in out["calls"]:
            want = _core.resolve("alltoall", rows, 2, n, heap, heap, False, out["cma_ok"])
            assert got == [*want[:3], False], (n, heap, got, want)


def test_bench_runs_a_tuned_table_against_the_model(tmp_path: Path) -> None:
    """`bench alltoall --table`: the tuned table and the model in one launch; per size and
    kind, what each selects, the medians and tuned/model."""
    size = 1 << 20
    recs = [
        {"op": "alltoall", "nprocs": 2, "bytes": size, "buffers": kind, "algorithm": a, "order": o,
         "store": st, "median_us": us, "rounds_us": [us] * 5}
        for kind, a, o, st, us in [
            ("heap", build.MODEL, "-", "-", 100.0),
            ("ordinary", build.MODEL, "-", "-", 100.0),
            ("ordinary", "staging", "shifted", "temporal", 10.0),
        ]
    ]  # fmt: skip
    path = tmp_path / "tuned.json"
    table.dump(build.build_document(recs, "quick"), path)
    p = cli(
        "bench", "alltoall", "-n", "2", "-m", "512K:2M", "-i", "20", "-x", "1", "--rounds", "2",
        "--no-ceiling", "--launcher", "standalone", "--table", str(path), "--private",
        timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, output(p)
    compared = {}
    kinds = ("heap", "ordinary", "private")
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 7 and cells[1] in kinds:
            compared[cells[0], cells[1]] = cells
    assert set(compared) == {(s, k) for s in ("512K", "1M", "2M") for k in kinds}, p.stdout
    # The table's "ordinary" entries are measured on private buffers; np.empty arrays of
    # these sizes are in the shared-array arena, served like heap ones (the model).
    assert compared["1M", "private"][4] == "staging/shifted/temporal", p.stdout
    for key, cells in compared.items():
        if key != ("1M", "private"):
            assert cells[4] == "(alike)", (key, p.stdout)  # the model serves the rest
        assert re.fullmatch(r"\d+\.\d\dx( ✗)?", cells[6]), cells
    assert "worst tuned/model where the tables differ: " in p.stdout
    assert "worst tuned/model where they select alike (this launch's noise): " in p.stdout
    # a table without an entry for the process count is refused before launching
    p = cli("bench", "alltoall", "-n", "3", "--table", str(path), "--launcher", "standalone", timeout=30)
    assert p.returncode == 2 and "no alltoall entry for 3 ranks" in p.stderr, output(p)


def _entries(path: Path) -> list[list[Any]]:
    return [e["nprocs"] for e in table.load(path)["operations"]["alltoall"]]


def test_tune_several_counts(tmp_path: Path) -> None:
    out = tmp_path / "counts.json"
    p = cli(
        "tune", "-n", "3,1", "--effort", "quick", "--sizes", "8", "--out", str(out),
        timeout=120, env=hermetic(tmp_path),
    )  # fmt: skip
    assert p.returncode == 0, output(p)
    assert _entries(out) == [[1, 1], [3, 3]]
    assert {r["nprocs"] for r in table.load(out)["measurements"]} == {1, 3}


@pytest.mark.mpi
def test_tune_under_mpiexec(tmp_path: Path) -> None:
    if not mpi_available():
        pytest.skip("mpiexec and mpi4py are needed")
    out = tmp_path / "mpi.json"
    p = cli(
        "tune", "-n", "2", "--effort", "quick", "--sizes", "8,4K", "--launcher", "mpiexec",
        "--out", str(out), timeout=120, env=hermetic(tmp_path),
    )  # fmt: skip
    assert p.returncode == 0, output(p)
    assert _entries(out) == [[2, 2]]
    assert len(table.load(out)["measurements"]) == len(
        tuner.Plan(2, [8, 4096], tuner.candidates("quick"), "", 0).cells()
    )


# -- resume, time limit --------------------------------------------------------------
def _fake(size: int, kind: str, algo: str, median: float) -> dict[str, Any]:
    order, store = ("-", "-") if algo == build.MODEL else ("shifted", "hybrid")
    return {
        "nprocs": 2, "bytes": size, "buffers": kind, "algorithm": algo, "order": order,
        "store": store, "median_us": median, "p90_us": median * 1.5, "p99_us": median * 2,
        "iterations": 100, "outliers": False, "valid": True,
    }  # fmt: skip


def test_tune_resume_keeps_the_checkpointed_cells(tmp_path: Path) -> None:
    out = tmp_path / "resumed.json"
    checkpoint = tmp_path / "resumed.json.checkpoint"
    # every cell of 8 bytes and one of 64 bytes were measured before the interruption;
    # the medians are impossible ones, so that the test sees whether they were kept (and
    # whether the table was built from them: staging wins everywhere)
    done = []
    for i, (_, _, kind, algo, _, _) in enumerate(
        tuner.Plan(2, [8], tuner.candidates("quick"), "", 0).cells()
    ):
        done.append(_fake(8, kind, algo, 0.001 if (algo, kind) == ("staging", "ordinary") else 5000.0 + i))
    done.append(_fake(64, "ordinary", "staging", 0.002))
    lines = "".join(json.dumps(r) + "\n" for r in done)
    checkpoint.write_text(lines + '{"nprocs": 2, "bytes": 64, "buff')  # a line cut by the kill
    p = cli(
        "tune", "-n", "2", "--effort", "quick", "--sizes", "8,64", "--out", str(out), "--resume",
        timeout=120, env=hermetic(tmp_path),
    )  # fmt: skip
    assert p.returncode == 0, output(p)
    doc = table.load(out)
    recs = doc["measurements"]
    keys = [tuner.cell_key(r) for r in recs]
    plan = tuner.Plan(2, [8, 64], tuner.candidates("quick"), "", 0)
    assert len(keys) == len(set(keys)), "a checkpointed cell was measured again"
    assert set(keys) == {(c[0], 2, *c[1:]) for c in plan.cells()}, "cells missing after resume"
    assert "comment" not in doc, doc.get("comment")
    by_key = {tuner.cell_key(r): r for r in recs}
    for r in done:
        assert by_key[tuner.cell_key(r)]["median_us"] == r["median_us"], r
    fresh = [r for r in recs if r["bytes"] == 64 and r["median_us"] != 0.002]
    assert fresh and all(r["iterations"] >= 10 and r["median_us"] > 0.01 for r in fresh if "error" not in r)
    # the table is built from the kept cells: staging beats the model for private buffers
    # at both sizes (where the model lists inline, so the table cannot run it as measured)
    decided = {(o.bytes, o.buffers): o for o in build.decisions_of(doc)}
    for size in (8, 64):
        assert decided[size, "ordinary"].choice == "staging/shifted/hybrid", decided[size, "ordinary"]
    assert decided[8, "heap"].why == "within the spread"  # the model's kept 5000 µs is the best
    assert not checkpoint.exists()


def test_a_checkpoint_keeps_only_records_of_cells(tmp_path: Path) -> None:
    # Valid JSON that is no record of a cell ([1], a record without its keys) ended
    # `shmcoll tune --resume` in an AttributeError; such lines are measured again.
    checkpoint = tmp_path / "t.json.checkpoint"
    good = _fake(8, "ordinary", "staging", 1.0)
    bad = [[1], 7, "x", None, {"nprocs": 2}, {k: v for k, v in good.items() if k != "store"}]
    checkpoint.write_text("".join(json.dumps(r) + "\n" for r in [*bad, good]))
    assert tuner.read_checkpoint(checkpoint) == [good]
    assert [tuner.cell_key(r) for r in tuner.read_checkpoint(checkpoint)]


def test_tune_without_resume_discards_the_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "fresh.json"
    checkpoint = tmp_path / "fresh.json.checkpoint"
    checkpoint.write_text(json.dumps(_fake(8, "ordinary", "staging", 0.001)) + "\n")
    p = cli(
        "tune",
        "-n",
        "2",
        "--effort",
        "quick",
        "--sizes",
        "8",
        "--out",
        str(out),
        timeout=120,
        env=hermetic(tmp_path),
    )
    assert p.returncode == 0, output(p)
    recs = table.load(out)["measurements"]
    staging = [r for r in recs if (r["algorithm"], r["buffers"]) == ("staging", "ordinary")]
    assert len(staging) == 1 and staging[0]["median_us"] != 0.001


def test_tune_time_limit_leaves_the_rest_to_the_model(tmp_path: Path) -> None:
    out = tmp_path / "limited.json"
    p = cli(
        "tune", "-n", "2", "--effort", "quick", "--sizes", "8:1M", "--time-limit", "0.001s",
        "--out", str(out), timeout=120, env=hermetic(tmp_path),
    )  # fmt: skip
    assert p.returncode == 0, output(p)
    doc = table.load(out)
    assert "incomplete" in doc.get("comment", ""), doc.get("comment")
    assert "incomplete" in p.stdout
    total = len(tuner.Plan(2, [8 << k for k in range(18)], tuner.candidates("quick"), "", 0).cells())
    assert len(doc["measurements"]) < total


# -- plot and bench --plot -------------------------------------------------------------
@pytest.fixture(scope="module")
def bench_csv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    d = tmp_path_factory.mktemp("bench")
    csv_path, png = d / "bench.csv", d / "bench-plot.png"
    p = cli(
        "bench", "alltoall", "-n", "2", "-m", "8:64", "-i", "20", "-x", "2", "--no-ceiling",
        "--launcher", "standalone", "--csv", str(csv_path), "--plot", str(png),
        timeout=90,
    )  # fmt: skip
    return csv_path, png, p


def test_bench_plot_writes_a_png(bench_csv: tuple[Path, Path, Any]) -> None:
    csv_path, png, p = bench_csv
    assert p.returncode == 0, output(p)
    assert is_png(png)
    assert f"wrote {png}" in p.stdout
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert sorted({int(r["bytes"]) for r in rows}) == [8, 16, 32, 64]


def test_plot_redraws_a_bench_csv(bench_csv: tuple[Path, Path, Any], tmp_path: Path) -> None:
    csv_path, _, p = bench_csv
    assert p.returncode == 0, output(p)
    dst = tmp_path / "again.png"
    p = cli("plot", str(csv_path), "-o", str(dst))
    assert p.returncode == 0, output(p)
    assert is_png(dst)
    beside = tmp_path / "b.csv"
    beside.write_bytes(csv_path.read_bytes())
    p = cli("plot", str(beside))
    assert p.returncode == 0, output(p)
    assert is_png(tmp_path / "b.png")


BAD_CSV = {
    "empty": b"",
    "header-only": b"nranks,bytes,variant,median_us\n",
    "unknown-columns": b"a,b,c\n1,2,3\n",
    "bad-number": b"nranks,bytes,variant,median_us\n2,lots,shmcoll,1.5\n",
    "bad-median": (
        b"nprocs,bytes,buffers,algorithm,order,store,median_us\n2,8,heap,push,shifted,hybrid,fast\n"
    ),
    "tune-missing-column": b"nprocs,bytes,algorithm,median_us\n2,8,push,1.5\n",
    "only-errors": b"nranks,bytes,variant,median_us,error\n2,8,shmcoll,,boom\n",
    "binary": b"\xff\xfe\x00\x81\x00garbage",
}


@pytest.mark.parametrize("kind", sorted(BAD_CSV))
def test_plot_rejects_a_bad_csv(kind: str, tmp_path: Path) -> None:
    src = tmp_path / f"{kind}.csv"
    src.write_bytes(BAD_CSV[kind])
    p = cli("plot", str(src))
    assert p.returncode == 1, output(p)
    assert "Traceback" not in p.stderr, output(p)
    assert p.stderr.startswith("Error: "), output(p)
    assert not (tmp_path / f"{kind}.png").exists()


def test_plot_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    p = cli("plot", str(tmp_path / "nope.csv"))
    assert p.returncode == 2, output(p)
    assert "does not exist" in p.stderr


# -- bench copy, profiles --------------------------------------------------------------
def test_bench_copy(tmp_path: Path) -> None:
    csv_path = tmp_path / "copy.csv"
    p = cli("bench", "copy", "-m", "4K:64K", "-i", "3", "--csv", str(csv_path), timeout=90)
    assert p.returncode == 0, output(p)
    out = p.stdout
    for method in ("numpy.copyto", "temporal", "nt", "hybrid"):
        assert method in out, method
    m = re.search(r"([\d.]+) GB/s single-core ceiling", out)
    assert m and float(m.group(1)) > 0, out
    # the node's write ceiling: one CPU, then every usable CPU streaming at once
    m = re.search(r"1 CPU ([\d.]+) GB/s, (\d+) CPUs at once ([\d.]+) GB/s", out)
    assert m and float(m.group(1)) > 0 and float(m.group(3)) > 0, out
    assert int(m.group(2)) == len(os.sched_getaffinity(0)), out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["4K", "8K", "16K", "32K", "64K"], out
    for r in rows:
        assert r.count("%") == 4, r  # every method as a share of the ceiling
    with csv_path.open() as f:
        recs = list(csv.DictReader(f))
    assert len(recs) == 5 * 4
    assert all(float(r["gbs"]) > 0 for r in recs)
    # `shmcoll plot` redraws any bench CSV, this one too
    p = cli("plot", str(csv_path), "-o", str(tmp_path / "copy.png"))
    assert p.returncode == 0, output(p)
    assert is_png(tmp_path / "copy.png")


def test_profiles_lists_every_profile() -> None:
    p = cli("profiles")
    assert p.returncode == 0, output(p)
    rows = {line.split("│")[1].strip(): line for line in p.stdout.splitlines() if line.startswith("│")}
    for name in ("fft3d", "moe", "dp-allreduce", "tp-allreduce", "lora"):
        assert name in rows, (name, p.stdout)
    for name in ("fft3d", "moe"):
        assert "not built" not in rows[name], rows[name]
    for name in ("dp-allreduce", "tp-allreduce", "lora"):
        assert "not built" in rows[name], rows[name]
    assert "P3DFFT" in rows["fft3d"]  # the source is stated


def test_bench_profile_fft3d() -> None:
    """The fft3d sizes at 2 ranks reach 512 MiB per peer (1 GiB buffers): larger than the
    default shared heap, so the heap column must degrade to errors, not crash the run."""
    p = cli(
        "bench", "alltoall", "--profile", "fft3d", "-n", "2", "-i", "10", "-x", "1", "--no-ceiling",
        "--launcher", "standalone", "--rounds", "1",
        timeout=150,
    )  # fmt: skip
    assert p.returncode == 0, output(p)
    assert "Traceback" not in p.stderr, output(p)
    rows = [line for line in p.stdout.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["8M", "27M", "64M", "216M", "512M"], p.stdout


@pytest.mark.parametrize(
    "command", [["bench", "alltoall"], ["tune", "--out", "UNUSED"]], ids=["bench", "tune"]
)
def test_profile_not_built_or_unknown_exits_2(command: list[str], tmp_path: Path) -> None:
    cmd = [c.replace("UNUSED", str(tmp_path / "t.json")) for c in command]
    n = ["-n", "2"]
    p = cli(*cmd, *n, "--profile", "dp-allreduce", "--launcher", "standalone", timeout=30)
    assert p.returncode == 2, output(p)
    assert "not built" in p.stderr, output(p)
    p = cli(*cmd, *n, "--profile", "nope", "--launcher", "standalone", timeout=30)
    assert p.returncode == 2, output(p)
    assert "unknown profile" in p.stderr and "fft3d" in p.stderr, output(p)
    assert not (tmp_path / "t.json").exists()


# -- --help of every command; bad arguments -------------------------------------------
COMMANDS = [
    [],
    ["run"],
    ["bench"],
    ["bench", "alltoall"],
    ["bench", "copy"],
    ["bench", "machine"],
    ["bench", "codec"],
    ["bench", "create"],
    *[["bench", op] for op in ("allreduce", "allgather", "bcast", "reduce_scatter")],
    *[["bench", op] for op in ("reduce", "gather", "scatter", "barrier")],
    ["profiles"],
    ["tune"],
    ["explain"],
    ["plot"],
    ["info"],
    ["cleanup"],
    ["pmpi"],
    ["selftest"],
]


def _all_commands(group: click.Group, prefix: list[str]) -> list[list[str]]:
    out = [prefix]
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += _all_commands(cmd, [*prefix, name])
        else:
            out.append([*prefix, name])
    return out


def test_the_help_list_is_complete() -> None:
    from shmcoll.cli import main

    assert sorted(_all_commands(main, [])) == sorted(COMMANDS)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "shmcoll")
def test_help_of_every_command(args: list[str]) -> None:
    p = cli(*args, "--help")
    assert p.returncode == 0, output(p)
    assert p.stdout.startswith("Usage: "), p.stdout
    assert p.stderr == ""
    # the help says what the command does, not just its options
    assert len(p.stdout.split("Options:")[0].strip().splitlines()) >= 2, p.stdout


BAD = [
    ["tune"],
    ["tune", "-n", "0"],
    ["tune", "-n", "x"],
    ["tune", "-n", ","],
    ["tune", "-n", "2", "--effort", "bogus"],
    ["tune", "-n", "2", "--ops", "allreduce_nope"],
    ["tune", "-n", "2", "--ops", "alltoall,broadcast"],
    ["tune", "-n", "2", "--time-limit", "abc"],
    ["tune", "-n", "2", "--time-limit", "10x"],
    ["tune", "-n", "2", "--time-limit", "-5m"],
    ["tune", "-n", "2", "--sizes", "lots"],
    ["tune", "-n", "2", "--sizes", "8", "--profile", "fft3d"],
    ["tune", "-n", "2", "-i", "5"],
    ["tune", "-n", "2", "--launcher", "slurm"],
    ["explain", "-n", "0"],
    ["explain", "-n", "x"],
    ["explain", "extra"],
    ["plot"],
    ["profiles", "extra"],
    ["bench", "copy", "-m", "foo"],
    ["bench", "copy", "-i", "0"],
    ["bench", "alltoall", "--profile", "nope"],
]


@pytest.mark.parametrize("args", BAD, ids=" ".join)
def test_bad_arguments_exit_2(args: list[str], tmp_path: Path) -> None:
    # tune always gets --out, so that a missed check cannot write the user's table
    extra = ["--out", str(tmp_path / "t.json")] if args[0] == "tune" else []
    p = cli(*args, *extra, timeout=30, env=hermetic(tmp_path))
    assert p.returncode == 2, output(p)
    assert "Error" in p.stderr, output(p)
    assert "Traceback" not in p.stderr, output(p)
    assert not (tmp_path / "t.json").exists()


# -- explain --------------------------------------------------------------------------
def test_explain_shows_forcing_and_a_broken_table(tmp_path: Path) -> None:
    p = cli(
        "explain",
        "-n",
        "3",
        env=hermetic(tmp_path, SHMCOLL_TUNING_FILE="none", SHMCOLL_ALLTOALL_ALGORITHM="staging"),
    )
    assert p.returncode == 0, output(p)
    assert "3 ranks" in p.stdout and "model embedded" in p.stdout
    assert "forced by the environment" in p.stdout and "SHMCOLL_ALLTOALL_ALGORITHM=staging" in p.stdout
    bad = tmp_path / "broken.json"
    bad.write_text("{")
    p = cli("explain", "-n", "2", env=hermetic(tmp_path, SHMCOLL_TUNING_FILE=str(bad)))
    assert p.returncode == 1, output(p)
    assert str(bad) in p.stderr and "Traceback" not in p.stderr, output(p)


def test_explain_without_files_uses_the_model(tmp_path: Path) -> None:
    p = cli("explain", "-n", "2", env=hermetic(tmp_path))
    assert p.returncode == 0, output(p)
    assert "model embedded in shmcoll (no table file found)" in p.stdout
    alltoall = p.stdout.split("other collectives")[0]
    rows = [line for line in alltoall.splitlines() if line.startswith("│")]
    assert len(rows) == len(_core.model_table("alltoall", 2))


# -- info -----------------------------------------------------------------------------
def test_info_reports_machine_settings_and_table(tmp_path: Path) -> None:
    t = tmp_path / "t.json"
    t.write_text(json.dumps(table.model_document([2, 4])))
    p = cli("info", env=hermetic(tmp_path, SHMCOLL_TUNING_FILE=str(t), COLUMNS="300"), timeout=90)
    assert p.returncode == 0, output(p)
    out = p.stdout
    m = _core.machine()
    lines = out.splitlines()

    def value(key: str) -> str:
        hits = [ln for ln in lines if ln.startswith("│") and ln.split("│")[1].strip() == key]
        assert hits, f"no {key!r} line in shmcoll info\n{out}"
        return hits[0].split("│")[2].strip()

    # hardware as shmcoll sees it
    for key in ("vendor", "model_name", "logical_cpus", "physical_cores", "sockets", "l2_bytes", "l3_bytes"):
        assert value(key) == str(m[key]), key
    assert all(s in value("simd") for s in m["simd"])
    # kernel settings that matter, CMA, versions, MPI
    assert re.search(r"transparent huge pages", out, re.I), out
    assert "/dev/shm" in out
    assert re.search(r"^│ CMA.*│ (yes|no|unknown)", out, re.M), out
    assert value("shmcoll") == shmcoll.__version__
    assert value("numpy") == np.__version__
    assert value("MPI")  # found or not, said either way
    # every setting with its value and meaning
    for name, desc in _core.settings():
        hits = [ln for ln in lines if ln.startswith(f"│ {name} ")]
        assert hits, f"setting {name} missing from shmcoll info"
        assert desc[:40] in hits[0], (name, hits[0])
    assert any(ln.startswith(f"│ {ENV} ") and str(t) in ln for ln in lines), out
    # the tuning table in use
    assert value("tuning table") == f"{t} (environment)"


def test_sizes_read_as_the_environment_reads_them() -> None:
    # One parser (the engine's): the CLI's -m sizes, the bench and the environment's
    # settings agree on every spelling.
    from shmcoll.bench.sizes import iterations, parse_range, parse_size

    assert [parse_size(s) for s in ("8", "4K", "64KiB", "16m", "1.5M", "2G")] == [
        8,
        4 << 10,
        64 << 10,
        16 << 20,
        3 << 19,
        2 << 30,
    ]
    assert parse_range("8:64") == [8, 16, 32, 64] and parse_range("0:2") == [0, 1, 2]
    for bad in ("x", "4Q", "-1", "", ".5K"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with environ({"SHMCOLL_SHARED_ARRAYS_MAX": "1.5M"}):
        assert _core._shared_arrays_env_bounds()[1] == parse_size("1.5M")
    # OSU's rule, once: a tenth of the iterations from 64 KiB moved per call.
    assert iterations(64 << 10, 1000, 100) == (1000, 100)
    assert iterations((64 << 10) + 1, 1000, 100) == (100, 10)
    assert iterations(1 << 30, 50, 5) == (10, 2)
