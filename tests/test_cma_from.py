"""The private-buffer crossover (SHMCOLL_CMA_FROM, rust/shmcoll-coll/src/cma_from): every
rank of a communicator selects with the value the segment's creator published, whatever
its own environment says; private Alltoalls below it take staging, from it cma-push, heap
ones push throughout; the probe's figures are cached per machine and a corrupt cache file
is ignored; `shmcoll explain` and `shmcoll info` show the value and where it came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

import shmcoll
from conftest import private_empty, run_ranks, subprocess_env
from shmcoll import _core
from test_cli import cli

#: What the creator forces in the multi-rank tests: past the model's own start of CMA.
CREATOR = 96 << 10


def _select_with_own_setting(own: dict[str, str | None]) -> dict[str, Any]:
    """A rank that sets its own SHMCOLL_CMA_FROM (by rank) before joining, then reports
    what its communicator selected for private and heap buffers around the creator's
    value."""
    rank = int(os.environ["SHMCOLL_RANK"])
    mine = own.get(str(rank))
    if mine is None:
        os.environ.pop("SHMCOLL_CMA_FROM", None)
    else:
        os.environ["SHMCOLL_CMA_FROM"] = mine
    comm = shmcoll.Comm()
    p = comm.size
    out: dict[str, Any] = {"cma_from": comm._cma_from(), "cma_ok": comm.cma_ok, "calls": {}}
    out["in_force"] = dict(_core.cma_from())
    for block in (CREATOR - 1, CREATOR):
        for heap in (False, True):
            if heap:
                s, r = comm.empty(p * block, np.uint8), comm.empty(p * block, np.uint8)
            else:
                s, r = private_empty(p * block, np.uint8), private_empty(p * block, np.uint8)
            s[:] = comm.rank + 1
            comm.Alltoall(s, r)
            assert (r.reshape(p, block) == np.arange(1, p + 1, dtype=np.uint8)[:, None]).all()
            choice = comm.last_choice()
            assert choice is not None
            out["calls"][f"{block} {'heap' if heap else 'private'}"] = choice.algorithm
            del s, r
        s, r = private_empty(block, np.uint8), private_empty(p * block, np.uint8)
        s[:] = comm.rank
        comm.Allgather(s, r)
        assert (r.reshape(p, block) == np.arange(p, dtype=np.uint8)[:, None]).all()
        choice = comm.last_choice()
        assert choice is not None
        out["calls"][f"{block} allgather"] = choice.algorithm
    comm.Free()
    return out


def test_every_rank_selects_with_the_creator_s_value() -> None:
    # The launcher (this process) creates the segment with CREATOR; rank 0 clears its own
    # setting (it would probe), rank 1 forces another value, rank 2 CMA everywhere.
    own = {"0": None, "1": str(1 << 30), "2": "0"}
    results = run_ranks(3, _select_with_own_setting, own, env={"SHMCOLL_CMA_FROM": str(CREATOR)}, timeout=90)
    for rank, out in enumerate(results):
        assert out["cma_from"] == CREATOR, rank
        # The bindings' model tables use it too (what lookup.bind compares across ranks).
        assert (out["in_force"]["bytes"], out["in_force"]["origin"]) == (CREATOR, "agreed"), rank
        calls = out["calls"]
        from_on = "cma-push" if out["cma_ok"] else "staging"
        assert calls[f"{CREATOR - 1} private"] == "staging", (rank, calls)
        assert calls[f"{CREATOR} private"] == from_on, (rank, calls)
        assert calls[f"{CREATOR - 1} heap"] == calls[f"{CREATOR} heap"] == "push", (rank, calls)
        assert calls[f"{CREATOR - 1} allgather"] == "staging", (rank, calls)
        assert calls[f"{CREATOR} allgather"] == ("cma" if out["cma_ok"] else "staging"), (rank, calls)


def test_model_tables_follow_the_crossover() -> None:
    rows = _core.model_table("alltoall", 2, cma_from=CREATOR)
    covering = [r for r in rows if r[0] <= CREATOR - 1 and (r[1] is None or r[1] >= CREATOR - 1)]
    assert covering[0][1] == CREATOR - 1, rows
    assert [c[0] for c in covering[0][2]] == ["push", "pull", "staging"], rows
    assert [c[0] for c in rows[-1][2]] == ["push", "pull", "cma-push", "staging"], rows
    # Below the model's own start of CMA the crossover changes nothing.
    assert _core.model_table("alltoall", 2, cma_from=0) == _core.model_table("alltoall", 2, cma_from=1)
    coll = [
        (hi, [c[0] for c in cands]) for _, hi, cands in _core.model_table("Allgather", 2, cma_from=CREATOR)
    ]
    below = next(algos for hi, algos in coll if hi is not None and hi >= CREATOR - 1)
    assert "cma" not in below and below[-1] == "staging", coll
    assert "cma" in coll[-1][1], coll


def _probe_in_a_fresh_process(cache: Path) -> dict[str, Any]:
    """`_core.cma_from()` in a new interpreter whose user cache is `cache`, unforced."""
    env = subprocess_env({"XDG_CACHE_HOME": str(cache)})
    env.pop("SHMCOLL_CMA_FROM", None)
    code = "import json; from shmcoll import _core; print(json.dumps(_core.cma_from()))"
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


def test_the_probe_is_cached_per_machine_and_a_corrupt_file_ignored(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _probe_in_a_fresh_process(cache)
    files = sorted((cache / "shmcoll").glob("cma-probe-*.json")) if (cache / "shmcoll").exists() else []
    markers = sorted((cache / "shmcoll").glob("cma-probe-*.gave-up")) if (cache / "shmcoll").exists() else []
    if first["origin"] == "failed":
        # A machine too busy to probe: CMA where the model's sizes put it, nothing kept but
        # a marker that spares the next processes the probe.
        assert first["bytes"] == 0 and first["figures"] is None and files == [], first
        assert len(markers) == 1, markers
        _spared(cache)
        return
    assert first["origin"] == "measured", first
    f = first["figures"]
    assert f["sizes"] == [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
    assert 0 <= first["bytes"] <= 1 << 20
    assert f["took_us"] < 50_000, f
    if f["reps"] < 5:
        # The budget cut it short (a busy machine): used, not kept; marked.
        assert files == [] and len(markers) == 1, (files, markers)
        _spared(cache)
        return
    assert len(files) == 1 and markers == [], (files, markers)
    second = _probe_in_a_fresh_process(cache)
    assert second["origin"] == "cache" and str(files[0]) in second["describe"], second
    assert (second["bytes"], second["figures"]) == (first["bytes"], first["figures"])
    # A file whose crossover its figures do not give, or that is not JSON, is ignored.
    doc = json.loads(files[0].read_text())
    doc["cma_from"] = doc["cma_from"] + 1
    files[0].write_text(json.dumps(doc))
    assert _probe_in_a_fresh_process(cache)["origin"] in ("measured", "failed")
    files[0].write_text("{")
    assert _probe_in_a_fresh_process(cache)["origin"] in ("measured", "failed")
    # A probe that kept nothing marks it; the next process then does not probe.
    files[0].unlink(missing_ok=True)
    files[0].with_suffix(".gave-up").write_text("")
    _spared(cache)


def _spared(cache: Path) -> None:
    """A fresh process under a recent marker takes the model's sizes without probing."""
    spared = _probe_in_a_fresh_process(cache)
    assert spared["origin"] == "failed" and spared["bytes"] == 0, spared
    assert "kept nothing" in spared["describe"], spared
    assert not list((cache / "shmcoll").glob("cma-probe-*.json")), "it probed"


def test_explain_and_info_show_the_crossover_and_its_origin(tmp_path: Path) -> None:
    env = {"SHMCOLL_CMA_FROM": "40000", "SHMCOLL_TUNING_FILE": "none"}
    p = cli("explain", "-n", "2", env=env)
    assert p.returncode == 0, p.stderr
    assert "private buffers take CMA from 40000 bytes per block (forced by SHMCOLL_CMA_FROM)" in p.stdout
    rows = [ln for ln in p.stdout.split("other collectives")[0].splitlines() if ln.startswith("│")]
    below = next(ln for ln in rows if ln.split("│")[1].strip().endswith("..39999"))
    assert below.split("│")[4].strip().startswith("staging/"), below
    after = next(ln for ln in rows if ln.split("│")[1].strip().startswith("40000.."))
    assert after.split("│")[4].strip().startswith("cma-push/"), after
    # Unforced, in a fresh user cache: the probe runs (or says why it could not).
    unforced = subprocess_env({"XDG_CACHE_HOME": str(tmp_path), "SHMCOLL_TUNING_FILE": "none"})
    unforced.pop("SHMCOLL_CMA_FROM")
    p = subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", "info", "--no-probe"],
        capture_output=True, text=True, env={**unforced, "COLUMNS": "250"}, timeout=90, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if "private buffers take CMA from" in ln)
    assert "measured now by this process's probe" in line or "no probe (" in line, line
    if "measured now" in line:
        assert "private-buffer probe" in p.stdout and "CMA write" in p.stdout, p.stdout
