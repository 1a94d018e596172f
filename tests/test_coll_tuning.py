"""Tuning tables for the collectives other than Alltoall: the embedded model covers them,
a table file's rows bind and change what serves a call, bad rows are rejected with the
entry named, `shmcoll tune --ops allreduce,bcast` measures them and writes rows that
bind, and `shmcoll explain` shows them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import run_ranks
from shmcoll import _core
from shmcoll.errors import TuningTableError
from shmcoll.tuning import table

pytestmark = pytest.mark.timeout(120)


def test_the_model_document_covers_every_collective_and_validates() -> None:
    doc = table.model_document([2, 4])
    assert set(doc["operations"]) == set(table.OPERATIONS)
    table.validate(doc, "model")
    rows = table.rows_for(doc, "allreduce", 2)
    assert rows is not None
    assert rows == _core.model_table("Allreduce", 2)
    assert rows[-1][1] is None and rows[-1][2][-1] == table.choice("staging")


@pytest.mark.parametrize("op", table.OPERATIONS)
def test_every_operation_has_one_row_format_and_one_function_per_job(op: str) -> None:
    """Every operation's table goes through the same natives in the same row format: the
    model, the checks, selection, the file's reader; only Alltoall's candidates carry
    parameters, and a parameter on another operation's candidate is refused."""
    rows = _core.model_table(op, 2)
    _core.check_table(op, rows)
    assert rows[0][0] == 0 and rows[-1][1] is None
    params = op == "alltoall"
    for _, _, cands in rows:
        for _, order, store, _, _ in cands:
            assert (order is not None, store is not None) == (params, params), (op, rows)
    assert table.rows_for(table.model_document([2]), op, 2) == rows
    # a large call between private buffers takes a candidate of the last range
    algo, order, _, _, _, _ = _core.resolve(op, rows, 2, 1 << 20, False, False, False)
    assert any(algo == c[0] for c in rows[-1][2]), (op, algo, rows)
    assert (order is not None) == params
    if not params:
        with pytest.raises(shmcoll.ArgumentError, match="names only an algorithm"):
            _core.check_table(op, [(0, None, [("staging", "linear", None, None, None)])])


@pytest.mark.parametrize("op", table.OPERATIONS)
def test_the_registry_is_asked_by_operation(op: str) -> None:
    """`_core.algorithms(op)` names the algorithms its model tables choose from, and the
    copy orders and store policies only where candidates take them (Alltoall)."""
    algos, orders, stores = _core.algorithms(op)
    names = {name for name, _ in algos}
    assert all(desc for _, desc in algos)
    for _, _, cands in _core.model_table(op, 2):
        assert {c[0] for c in cands} <= names, (op, names)
    params = op == "alltoall"
    assert bool(orders) == params and bool(stores) == params
    assert _core.algorithms() == _core.algorithms("Alltoall")


def test_the_registry_refuses_an_operation_without_a_table() -> None:
    for op in ("Barrier", "Sendrecv"):
        with pytest.raises(shmcoll.ArgumentError, match="no selection table"):
            _core.algorithms(op)


def _bound_tables() -> dict[str, Any]:
    """Every operation's table on a communicator, then each replaced by a one-range table
    of staging through the one binding function."""
    comm = shmcoll.Comm()
    out: dict[str, Any] = {"model": {op: comm._table(op) for op in table.OPERATIONS}}
    for op in table.OPERATIONS:
        staging = (
            ("staging", "linear", "temporal", None, None) if op == "alltoall" else table.choice("staging")
        )
        comm._set_table(op, [(0, None, [staging])], f"test {op}")
    out["set"] = {op: comm.selection(table.FAMILY.get(op, "Alltoall")) for op in table.OPERATIONS}
    comm.Free()
    return out


def test_a_communicator_binds_every_operation_through_one_function() -> None:
    for out in run_ranks(2, _bound_tables, timeout=60):
        for op in table.OPERATIONS:
            assert out["model"][op] == ("model", _core.model_table(op, 2)), op
            source, rows = out["set"][op]
            assert source == f"test {op}" and len(rows) == 1 and rows[0][:2] == (0, None), (op, rows)
            assert rows[0][2][0][0] == "staging", (op, rows)


def forced_by_table(size: int) -> tuple[str | None, list[Any]]:
    comm = shmcoll.Comm()
    x = np.ones(size // 8)
    comm.Allreduce(x, np.empty_like(x))
    c = comm.last_choice()
    rows = comm._table("Allreduce")[1]
    comm.Free()
    return (None if c is None else c.algorithm), rows


def write(tmp: Path, ops: dict[str, Any]) -> Path:
    doc = table.new_document("measured", "quick")
    doc["operations"] = ops
    path = tmp / "t.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_table_file_changes_what_serves_a_collective(tmp_path: Path) -> None:
    rows = [
        {"bytes": [0, 1024], "choices": [{"algorithm": "staging"}]},
        {"bytes": [1025, "inf"], "choices": [{"algorithm": "cma"}, {"algorithm": "staging"}]},
    ]
    path = write(tmp_path, {"allreduce": [{"nprocs": [2, 2], "sizes": rows}]})
    small = run_ranks(2, forced_by_table, 64, env={"SHMCOLL_TUNING_FILE": str(path)})
    assert [s[0] for s in small] == ["staging", "staging"]
    staging, cma = table.choice("staging"), table.choice("cma")
    assert small[0][1] == [(0, 1024, [staging]), (1025, None, [cma, staging])]
    big = run_ranks(2, forced_by_table, 8192, env={"SHMCOLL_TUNING_FILE": str(path)})
    assert [b[0] for b in big] == ["cma", "cma"]
    # not covered (3 ranks): the model
    three = run_ranks(3, forced_by_table, 64, env={"SHMCOLL_TUNING_FILE": str(path)})
    assert three[0][1] == _core.model_table("Allreduce", 3)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ([{"bytes": [0, "inf"], "choices": [{"algorithm": "pull"}]}], "unknown algorithm 'pull'"),
        (
            [
                {"bytes": [0, 100], "choices": [{"algorithm": "inline"}]},
                {"bytes": [50, "inf"], "choices": [{"algorithm": "staging"}]},
            ],
            "overlap",
        ),
        (
            [{"bytes": [0, "inf"], "choices": [{"algorithm": "staging", "chunk_bytes": 4096}]}],
            "names only an algorithm",
        ),
    ],
)
def test_bad_collective_rows_are_rejected_naming_the_entry(tmp_path: Path, sizes: Any, message: str) -> None:
    path = write(tmp_path, {"bcast": [{"nprocs": [1, "inf"], "sizes": sizes}]})
    with pytest.raises(TuningTableError, match="operations/bcast/0") as e:
        table.load(path)
    assert message in str(e.value)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", *args],
        capture_output=True,
        text=True,
        timeout=110,
        env={**os.environ, **env},
        check=False,
    )


def test_tune_measures_collectives_and_the_result_binds(tmp_path: Path) -> None:
    out = tmp_path / "tuned.json"
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "SHMCOLL_TUNING_FILE": ""}
    p = cli(
        "tune",
        "-n",
        "2",
        "--ops",
        "allreduce,bcast",
        "--effort",
        "quick",
        "--sizes",
        "8,64K",
        "--out",
        str(out),
        env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    doc = table.load(out)
    assert set(doc["operations"]) == {"allreduce", "bcast"}
    recs = doc["measurements"]
    # every algorithm measured, direct on heap buffers only
    assert {(r["op"], r["algorithm"]) for r in recs} >= {
        (o, a) for o in ("allreduce", "bcast") for a in ("inline", "cma", "staging", "direct")
    }
    assert all(r["buffers"] == "heap" for r in recs if r["algorithm"] == "direct")
    for op in ("allreduce", "bcast"):
        rows = table.rows_for(doc, op, 2)
        assert rows is not None and rows[-1][1] is None
        assert all(cands[-1] == table.choice("staging") for _, _, cands in rows)
    bound = run_ranks(2, forced_by_table, 64, env={"SHMCOLL_TUNING_FILE": str(out)})
    assert bound[0][1] == table.rows_for(doc, "allreduce", 2)
    e = cli("explain", "-n", "2", env={**env, "SHMCOLL_TUNING_FILE": str(out), "COLUMNS": "400"})
    assert e.returncode == 0 and "Allreduce" in e.stdout and str(out) in e.stdout.replace("\n", ""), e.stdout
