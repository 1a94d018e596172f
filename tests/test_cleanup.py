"""``shmcoll cleanup`` on a hostile /dev/shm: it trusts only lstat, never a name or a symlink,
reports every entry it leaves alone, never raises, and fails only when a removal fails.

A temporary directory stands in for /dev/shm (``--shm-dir``); the real one is left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import dead_pid, subprocess_env
from shmcoll import _core, cleanup
from shmcoll.cli import main

pytestmark = pytest.mark.timeout(60)

PREFIX = _core.SEGMENT_PREFIX
ME = os.geteuid()
OTHER_UID = 54321


def seg_name(pid: int, uid: int = ME, tail: str = "0123456789abcdef") -> str:
    return f"{PREFIX}{uid}-{pid}-{tail}"


@pytest.fixture
def shm(tmp_path: Path) -> Path:
    d = tmp_path / "shm"
    d.mkdir()
    return d


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env({"COLUMNS": "250"}),
        check=False,
    )


def test_a_hostile_directory_is_reported_entry_by_entry_and_only_stale_segments_go(
    shm: Path, tmp_path: Path
) -> None:
    dead = dead_pid()
    stale = shm / seg_name(dead)
    stale.write_bytes(b"\0" * 4096)
    live = shm / seg_name(os.getpid(), tail="fedcba9876543210")
    live.write_bytes(b"\0" * 100)
    # A directory named like a stale segment.
    (shm / seg_name(dead, tail="aa")).mkdir()
    # A symlink named like a stale segment, pointing at a file that must survive.
    precious = tmp_path / "precious"
    precious.write_text("keep me")
    link = shm / seg_name(dead, tail="bb")
    link.symlink_to(precious)
    # A name that claims to be this user's but is not a segment name.
    odd = shm / f"{PREFIX}not-a-segment"
    odd.write_bytes(b"x")
    # A name that claims another uid, on a file of this user: the owner counts, not the name.
    mislabeled = shm / seg_name(dead, uid=OTHER_UID, tail="cc")
    mislabeled.write_bytes(b"x")
    # Not ours at all (no prefix).
    foreign = shm / "other-file"
    foreign.write_bytes(b"x")

    p = run_cli("cleanup", "--shm-dir", str(shm), "--dry-run")
    assert p.returncode == 0, p.stderr
    assert f"would remove {stale}" in p.stdout
    assert stale.exists()

    p = run_cli("cleanup", "--shm-dir", str(shm))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    out = p.stdout
    assert f"removed {stale}" in out
    assert f"removed {mislabeled}" in out
    assert f"kept {live}" in out
    assert f"skipped {shm / seg_name(dead, tail='aa')}: a directory" in out
    assert f"skipped {link}: a symbolic link" in out
    assert f"skipped {odd}: name is not" in out
    assert "other-file" not in out
    assert not stale.exists() and not mislabeled.exists()
    assert live.exists() and odd.exists() and foreign.exists()
    assert (shm / seg_name(dead, tail="aa")).is_dir()
    assert link.is_symlink() and precious.read_text() == "keep me"

    p = run_cli("cleanup", "--shm-dir", str(shm))
    assert p.returncode == 0, p.stderr
    assert "nothing to remove" in p.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another uid")
def test_another_users_file_is_skipped_whatever_its_name_says(shm: Path) -> None:
    # The name claims this user and a dead creator: an old cleanup would have removed it.
    theirs = shm / seg_name(dead_pid())
    theirs.write_bytes(b"x")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    p = run_cli("cleanup", "--shm-dir", str(shm))
    assert p.returncode == 0, p.stderr
    assert f"skipped {theirs}: owned by uid {OTHER_UID}" in p.stdout
    assert "nothing to remove" in p.stdout
    assert theirs.exists()


def test_an_entry_that_vanishes_meanwhile_is_reported_and_the_rest_handled(
    shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = dead_pid()
    gone = shm / seg_name(dead, tail="01")
    stale = shm / seg_name(dead, tail="02")
    for f in (gone, stale):
        f.write_bytes(b"x")
    real_lstat = os.lstat

    def lstat(path: os.PathLike[str] | str) -> os.stat_result:
        if Path(path) == gone:
            os.unlink(gone)  # another cleanup got there first
        return real_lstat(path)

    monkeypatch.setattr(os, "lstat", lstat)
    out = cleanup.clean(shm)
    assert [s.path for s in out.removed] == [stale]
    assert [(k.path, k.reason) for k in out.skipped] == [(gone, "vanished while cleanup ran")]
    assert not out.failed


def test_a_failed_removal_is_exit_1_after_handling_every_entry(
    shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = dead_pid()
    stuck = shm / seg_name(dead, tail="01")
    stale = shm / seg_name(dead, tail="02")
    for f in (stuck, stale):
        f.write_bytes(b"x")
    real_unlink = os.unlink

    def unlink(path: os.PathLike[str] | str, *a: object, **kw: object) -> None:
        if Path(path) == stuck:
            raise PermissionError(1, "Operation not permitted")
        real_unlink(path)

    monkeypatch.setattr(os, "unlink", unlink)
    r = CliRunner().invoke(main, ["cleanup", "--shm-dir", str(shm)])
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert f"failed on {stuck}: cannot remove it: Operation not permitted" in r.output
    assert f"removed {stale}" in r.output
    assert stuck.exists() and not stale.exists()


def test_an_unreadable_directory_is_exit_1_without_a_traceback(
    shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def listdir(path: object) -> list[str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "listdir", listdir)
    r = CliRunner().invoke(main, ["cleanup", "--shm-dir", str(shm)])
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert f"failed on {shm}: cannot list it: Permission denied" in r.output


def test_a_missing_directory_has_nothing_to_remove(tmp_path: Path) -> None:
    p = run_cli("cleanup", "--shm-dir", str(tmp_path / "absent"))
    assert p.returncode == 0, p.stderr
    assert "nothing to remove" in p.stdout


@pytest.mark.parametrize("pid", [0, 2**31, 2**40])
def test_pids_no_process_can_have_count_as_gone(shm: Path, pid: int) -> None:
    f = shm / seg_name(pid)
    f.write_bytes(b"x")
    assert [s.path for s in cleanup.remove_stale(shm)] == [f]
    assert not f.exists()
