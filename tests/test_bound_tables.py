"""Remembered tuning tables (shmcoll.bound_tables): the inputs a binding is remembered
under change whenever the table file in force changes (another file, another content, a
file appearing or going, the variables that place the files), so a new communicator
always binds what the file holds now; and communicators on forked ranks bind the new
table after the file changed between two creations, and the model once the variable says
``none``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import shmcoll
from conftest import run_ranks
from shmcoll import _core, bound_tables
from shmcoll.tuning import lookup, table

ENV = lookup.ENV_FILE

pytestmark = pytest.mark.timeout(60)


def _doc(order: str) -> dict[str, Any]:
    doc = table.new_document("measured", "quick")
    choice = {"algorithm": "staging", "order": order, "store": "temporal"}
    doc["operations"]["alltoall"] = [
        {"nprocs": [1, "inf"], "sizes": [{"bytes": [0, "inf"], "choices": [choice]}]}
    ]
    return doc


def _write(path: Path, doc: dict[str, Any], stamp: int) -> None:
    """Write `doc` with the modification time of second `stamp` of the epoch, distinct for
    each rewrite (the lookup itself rereads a file whose time in seconds changed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    os.utime(path, (stamp, stamp))


def test_the_inputs_change_whenever_the_file_in_force_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if Path("/etc/shmcoll/tuning.json").exists():
        pytest.skip("/etc/shmcoll/tuning.json exists on this machine")
    home, other_home, sysdir = tmp_path / "home", tmp_path / "home2", tmp_path / "sys"
    for d in (home, other_home, sysdir):
        d.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(sysdir))
    monkeypatch.delenv(ENV, raising=False)
    user = home / "shmcoll" / "tuning.json"
    site = sysdir / "shmcoll" / "tuning.json"
    named = tmp_path / "named.json"
    steps = [
        ("nothing", lambda: None),
        ("a site file", lambda: _write(site, _doc("xor"), 2_000_000_000)),
        ("a user file", lambda: _write(user, _doc("linear"), 2_000_000_000)),
        ("the user file rewritten", lambda: _write(user, _doc("morton"), 2_000_000_001)),
        ("another config home", lambda: monkeypatch.setenv("XDG_CONFIG_HOME", str(other_home))),
        ("the first home again", lambda: monkeypatch.setenv("XDG_CONFIG_HOME", str(home))),
        ("the user file removed", user.unlink),
        (
            "a named file",
            lambda: (
                _write(named, _doc("reverse-shifted"), 2_000_000_000),
                monkeypatch.setenv(ENV, str(named)),
            ),
        ),
        ("the named file rewritten", lambda: _write(named, _doc("xor"), 2_000_000_005)),
        ("none", lambda: monkeypatch.setenv(ENV, "none")),
        ("unset", lambda: monkeypatch.delenv(ENV)),
        ("the site file removed", site.unlink),
    ]
    seen: list[tuple[str, Any, Any]] = []
    for what, act in steps:
        act()
        path, origin = lookup.find_file()
        content = None if path is None else path.read_text()
        seen.append((what, (str(path), origin, content), bound_tables.lookup_inputs()))
    for a in range(len(seen)):
        for b in range(a + 1, len(seen)):
            if seen[a][1] != seen[b][1]:
                assert seen[a][2] != seen[b][2], f"{seen[a][0]} and {seen[b][0]} look alike"
    # The same state again gives the same inputs (the binding is found again).
    assert bound_tables.lookup_inputs() == seen[-1][2]


def _bindings(path: str) -> list[Any]:
    """The Alltoall table of four duplicates: under the file, after rank 0 rewrote it,
    again unchanged, and with the variable set to none."""
    world = shmcoll.Comm()
    out = []
    for step in range(4):
        if step == 1 and world.rank == 0:
            _write(Path(path), _doc("linear"), 2_000_000_007)
        if step == 3:
            os.environ[ENV] = "none"
        world.Barrier()
        c = world.Dup()
        source, rows = c.selection()
        out.append((source, json.loads(json.dumps(rows))))
        c.Free()
    world.Free()
    return out


def test_communicators_bind_what_the_file_holds_now(tmp_path: Path) -> None:
    path = tmp_path / "table.json"
    _write(path, _doc("xor"), 2_000_000_000)
    for got in run_ranks(2, _bindings, str(path), env={ENV: str(path)}, timeout=40):
        orders = [rows[0][2][0][1] for _, rows in got[:3]]
        assert [s for s, _ in got[:3]] == [str(path)] * 3
        assert orders == ["xor", "linear", "linear"], got
        assert got[3][0] == "model"
        assert got[3][1] == json.loads(json.dumps(_core.model_table("alltoall", 2)))


def _resolutions(count: int) -> tuple[int, list[str]]:
    """How often `bind` resolved tables for `count` duplicates after the first
    communicator, and their table sources."""
    world = shmcoll.Comm()
    calls = []
    real = bound_tables.bind

    def counting(comm: Any) -> Any:
        calls.append(comm.size)
        return real(comm)

    bound_tables.bind = counting  # type: ignore[assignment]
    sources = []
    for _ in range(count):
        c = world.Dup()
        sources.append(c.selection()[0])
        c.Free()
    bound_tables.bind = real  # type: ignore[assignment]
    world.Free()
    return len(calls), sources


def test_a_remembered_binding_is_set_again_without_resolving() -> None:
    for resolved, sources in run_ranks(3, _resolutions, 4, env={ENV: "none"}):
        assert resolved == 0 and sources == ["model"] * 4
