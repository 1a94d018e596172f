"""Finding and removing segments left in /dev/shm by processes that no longer exist.

Segment names are ``shmcoll-<uid>-<creator pid>-<random>``. A segment is stale when its
creator is gone; a live job's segment (creator alive) is never touched. Normally there is
nothing to clean: rank 0 unlinks the name as soon as every rank has mapped it.

/dev/shm is shared by every user, so nothing in a name is trusted but the creator's pid
(used only to keep a segment whose creator still runs): the owner and the file type come
from ``lstat``, symlinks are never followed, and only regular files of this user are
removed. Everything else named like a segment is skipped with a reason, and a failure on
one entry never stops the others.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from . import _core

SHM_DIR = Path("/dev/shm")


@dataclass(frozen=True)
class Leftover:
    """A segment of this user: a regular file named like a segment."""

    path: Path
    uid: int
    pid: int
    nbytes: int
    alive: bool


@dataclass(frozen=True)
class Skipped:
    """An entry named like a segment that cleanup leaves alone (or failed to remove), and why."""

    path: Path
    reason: str


@dataclass
class Outcome:
    """What one cleanup did: removed (or would remove), kept, skipped, failed."""

    removed: list[Leftover] = field(default_factory=list)
    kept: list[Leftover] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    failed: list[Skipped] = field(default_factory=list)


class Unlistable(OSError):
    """The segments' directory exists but cannot be read."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _pid_alive(pid: int) -> bool:
    if pid <= 0 or pid >= 2**31:
        # No process has such a pid (and kill() would signal a process group, or overflow).
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _parse(name: str) -> int | None:
    """The creator pid of a segment name ``shmcoll-<uid>-<pid>-<hex>``, None if malformed."""
    parts = name[len(_core.SEGMENT_PREFIX) :].split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts[:2]) or not parts[2]:
        return None
    if any(c not in "0123456789abcdef" for c in parts[2]):
        return None
    return int(parts[1])


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed)"
    return "not a regular file"


def scan(shm_dir: Path = SHM_DIR) -> tuple[list[Leftover], list[Skipped]]:
    """This user's segments in `shm_dir` (with whether each creator runs), and the entries
    named like segments that are not (another user's, not a regular file, malformed name,
    gone or unreadable meanwhile). Raises Unlistable if `shm_dir` cannot be read."""
    found: list[Leftover] = []
    skipped: list[Skipped] = []
    try:
        names = sorted(os.listdir(shm_dir))
    except FileNotFoundError:
        return found, skipped
    except OSError as e:
        raise Unlistable(shm_dir, f"cannot list it: {e.strerror or e}") from e
    me = os.geteuid()
    for name in names:
        if not name.startswith(_core.SEGMENT_PREFIX):
            continue
        path = shm_dir / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            skipped.append(Skipped(path, "vanished while cleanup ran"))
            continue
        except OSError as e:
            skipped.append(Skipped(path, f"cannot stat it: {e.strerror or e}"))
            continue
        if not stat.S_ISREG(st.st_mode):
            skipped.append(Skipped(path, f"{_kind(st.st_mode)}, not a segment"))
            continue
        if st.st_uid != me:
            skipped.append(Skipped(path, f"owned by uid {st.st_uid}, not by you (uid {me})"))
            continue
        pid = _parse(name)
        if pid is None:
            skipped.append(Skipped(path, "name is not shmcoll-<uid>-<pid>-<hex>"))
            continue
        found.append(Leftover(path, st.st_uid, pid, st.st_size, _pid_alive(pid)))
    return found, skipped


def find(shm_dir: Path = SHM_DIR) -> list[Leftover]:
    """This user's shmcoll segments in `shm_dir`, with whether each creator still runs."""
    return scan(shm_dir)[0]


def clean(shm_dir: Path = SHM_DIR, dry_run: bool = False) -> Outcome:
    """Remove this user's segments whose creator is gone; say what happened to every entry."""
    try:
        found, skipped = scan(shm_dir)
    except Unlistable as e:
        return Outcome(failed=[Skipped(e.path, e.reason)])
    out = Outcome(skipped=skipped)
    for s in found:
        if s.alive:
            out.kept.append(s)
            continue
        if not dry_run:
            try:
                os.unlink(s.path)
            except FileNotFoundError:
                out.skipped.append(Skipped(s.path, "vanished while cleanup ran"))
                continue
            except OSError as e:
                out.failed.append(Skipped(s.path, f"cannot remove it: {e.strerror or e}"))
                continue
        out.removed.append(s)
    return out


def remove_stale(shm_dir: Path = SHM_DIR, dry_run: bool = False) -> list[Leftover]:
    """Remove segments of this user whose creator is gone; return what was (or would be) removed."""
    return clean(shm_dir, dry_run).removed
