"""Finding and removing segments left in /dev/shm by processes that no longer exist.

Segment names are ``shmcoll-<uid>-<creator pid>-<random>``. A segment is stale when its
creator is gone; a live job's segment (creator alive) is never touched. Normally there is
nothing to clean: rank 0 unlinks the name as soon as every rank has mapped it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import _core

SHM_DIR = Path("/dev/shm")


@dataclass(frozen=True)
class Leftover:
    path: Path
    uid: int
    pid: int
    nbytes: int
    alive: bool


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find(shm_dir: Path = SHM_DIR) -> list[Leftover]:
    """Every shmcoll segment in `shm_dir`, with whether its creator still runs."""
    out: list[Leftover] = []
    prefix = _core.SEGMENT_PREFIX
    if not shm_dir.is_dir():
        return out
    for path in sorted(shm_dir.iterdir()):
        if not path.name.startswith(prefix):
            continue
        parts = path.name[len(prefix) :].split("-")
        try:
            uid, pid = int(parts[0]), int(parts[1])
        except (IndexError, ValueError):
            continue
        try:
            nbytes = path.stat().st_size
        except FileNotFoundError:
            continue
        out.append(Leftover(path, uid, pid, nbytes, _pid_alive(pid)))
    return out


def remove_stale(shm_dir: Path = SHM_DIR, dry_run: bool = False) -> list[Leftover]:
    """Remove segments of this user whose creator is gone; return what was (or would be) removed."""
    removed = []
    for s in find(shm_dir):
        if s.alive or s.uid != os.getuid():
            continue
        if not dry_run:
            try:
                s.path.unlink()
            except FileNotFoundError:
                continue
        removed.append(s)
    return removed
