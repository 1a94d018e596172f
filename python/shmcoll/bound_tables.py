"""The tuning tables a new communicator binds, remembered per process.

`shmcoll.tuning.bind` resolves the table file in force for every collective family (and
the model for what the file does not cover) and checks that every rank bound the same
tables; that costs more than the rest of creating a communicator on a pooled segment. What
it binds is a function of the communicator's size, its inline and staging areas and what
`lookup.find_file` reads: the variable that names a table file, the places of the user and
system files (which follow the XDG variables and HOME) and those files' identity and
modification time. A process that bound the tables for the same inputs already sets the
same ones again without resolving them; the inputs are read with one `stat` per candidate
file (finding the candidates' places costs more, so they are remembered per value of the
variables that place them).

Every rank still binds what every other rank binds: the ranks compare tokens (the digest
of the binding each remembers for its key, 0 for none), and they set their remembered
tables only when every rank has the same nonzero token; otherwise every rank runs `bind`
(which checks agreement itself) and remembers the result. The tokens travel in the
creation exchange (`bootstrap`); where none ran (the standalone launcher's first
communicator), one Alltoall compares them.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .tuning import bind, lookup
from .tuning.lookup import INTERNAL, Resolved
from .tuning.table import OPERATIONS


class _Binding(NamedTuple):
    """What `bind` set on a communicator, to set again."""

    resolved: Resolved
    tables: list[tuple[str, str, list[Any]]]  # (operation, source, rows) bind changed
    compression: dict[str, Any]
    digest: np.ndarray  # 8 bytes, equal where the bindings are


#: The binding every rank remembers alike, as the creation exchange settled, or None.
Agreed = _Binding | None


class Unsettled:
    """No creation exchange compared the ranks' tokens (see `bind_tables`)."""


UNSETTLED = Unsettled()

_lock = threading.Lock()
_remembered: dict[tuple[Any, ...], _Binding] = {}

#: The variables `lookup.find_file` depends on: the one naming a table file, and those that
#: place the user and system files (XDG's rules, shmcoll_coll::tuning_file::places).
LOOKUP_ENV = (lookup.ENV_FILE, "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "HOME")
_places: dict[tuple[str | None, ...], tuple[Path, ...]] = {}


def _stamp(path: Path) -> tuple[int, ...] | None:
    """What identifies `path`'s content: type, device, inode, size, modification time;
    None when there is nothing there (asked without raising: most candidates are
    missing, and a raised FileNotFoundError costs more than the question)."""
    try:
        if not os.access(path, os.F_OK):
            return None
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _expanded(named: str) -> Path:
    """The path the variable names, ``~`` expanded where there is a home to expand it to
    (never raising: this runs before the creation exchange, where a rank that raised would
    leave its peers waiting; the lookup itself then reports the file, on every rank)."""
    try:
        return Path(named).expanduser()
    except RuntimeError:  # "~nosuchuser/...", or no HOME
        return Path(named)


def lookup_inputs() -> tuple[Any, ...]:
    """Everything `lookup.find_file` decides from, as a value: equal values, same file."""
    env = tuple(os.environ.get(v) for v in LOOKUP_ENV)
    with _lock:
        places = _places.get(env)
    if places is None:
        named = (env[0] or "").strip()
        places = (
            *([_expanded(named)] if named else []),
            lookup.user_file(),
            *lookup.system_files(),
        )
        with _lock:
            _places[env] = places
    return env, tuple(_stamp(p) for p in places)


def _key(size: int, inline_bytes: int, staging_bytes: int) -> tuple[Any, ...]:
    """What `bind` resolves from for a communicator of these sizes."""
    return (size, inline_bytes, staging_bytes, lookup_inputs())


def _token(b: _Binding | None) -> int:
    return 0 if b is None else int.from_bytes(b.digest.tobytes(), "little") or 1


def token_for(size: int, areas: tuple[int, int] | None) -> tuple[_Binding | None, int]:
    """The binding this process remembers for a new communicator of `size` ranks whose
    segment has `areas` (inline and staging bytes), and its token (0: none)."""
    if areas is None:
        return None, 0
    key = _key(size, *areas)
    with _lock:
        known = _remembered.get(key)
    return known, _token(known)


def _tables(comm: Any) -> dict[str, tuple[str, list[Any]]]:
    """Every operation's table on `comm`: (source, rows)."""
    return {op: comm._table(op) for op in OPERATIONS}


def _replay(comm: Any, known: _Binding) -> Resolved:
    for op, source, rows in known.tables:
        comm._set_table(op, rows, source)
    comm._compression = known.compression
    return known.resolved


def bind_tables(comm: Any, agreed: Agreed | Unsettled) -> Resolved:
    """Bind `comm`'s tuning tables (collective over `comm`): the remembered ones when
    every rank remembers the same (`agreed`, or, UNSETTLED, compared here), else through
    `bind`."""
    if isinstance(agreed, _Binding):
        return _replay(comm, agreed)
    cfg = comm._config()
    key = _key(comm.size, int(cfg["inline_bytes"]), int(cfg["staging_bytes"]))
    if isinstance(agreed, Unsettled):
        with _lock:
            known = _remembered.get(key)
        mine = np.frombuffer(_token(known).to_bytes(8, "little"), np.uint8)
        everyone = np.empty((comm.size, 8), np.uint8)
        comm.Alltoall(np.tile(mine, comm.size), everyone, **INTERNAL)
        agreed = known if known is not None and bool((everyone == mine).all()) else None
    if agreed is not None:
        return _replay(comm, agreed)
    model = _tables(comm)
    resolved = bind(comm)
    tables = [(op, src, list(rows)) for op, (src, rows) in _tables(comm).items() if (src, rows) != model[op]]
    compression = comm._compression
    digest = lookup.digest(comm)
    with _lock:
        _remembered[key] = _Binding(resolved, tables, compression, digest)
    return resolved
