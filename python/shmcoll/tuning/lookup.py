"""Which tuning table a communicator uses.

Lookup order (first file found wins, as with FFTW's wisdom files; the engine decides it,
shmcoll_coll::tuning_file, for these bindings and for communicators created outside Python):
``SHMCOLL_TUNING_FILE`` (``none`` skips files), the user file
(``<user config dir>/shmcoll/tuning.json``), the system files
(``<site config dir>/shmcoll/tuning.json``, ``/etc/shmcoll/tuning.json``), then the model
embedded in shmcoll. Process counts the chosen file does not cover use the model. A
table from other hardware is used with a ForeignTableWarning; a broken one raises
TuningTableError naming the file and entry. The engine reads the file (``_core.TuningFile``,
the reader the PMPI library uses too) and computes the digest ranks compare when they bind
(``_core.tables_digest``); this module raises and warns in Python's terms.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from ..errors import ArgumentError, ForeignTableWarning, MismatchError, TuningTableError
from . import table

ENV_FILE = "SHMCOLL_TUNING_FILE"

#: Internal exchanges pin their choice, so that a forced algorithm in the environment
#: (which may not serve private buffers) cannot break communicator creation.
INTERNAL = {"algorithm": "staging", "order": "shifted", "store": "temporal"}


def user_file() -> Path:
    """Where `shmcoll tune` writes, and the first place a table is looked for."""
    return next(p for p, origin in _core.tuning_file_places() if origin == "user")


def system_files() -> list[Path]:
    return [p for p, origin in _core.tuning_file_places() if origin == "system"]


@dataclass(frozen=True)
class Resolved:
    """The table for one (operation, process count)."""

    rows: list[table.RangeRow]
    source: str  # a file path, or "model"
    origin: str  # "environment", "user", "system", "model"
    covered: bool  # False: the file exists but does not cover this process count


_cache: dict[tuple[str, int], _core.TuningFile] = {}


def _load_cached(path: Path) -> _core.TuningFile:
    """The file at `path`, read once per modification (its foreign-hardware warning too)."""
    key = (str(path), path.stat().st_mtime_ns)
    f = _cache.get(key)
    if f is None:
        f = table.open_file(path)
        diffs = f.fingerprint_differences()
        if diffs:
            warnings.warn(
                f"{path}: tuning table measured on other hardware ({'; '.join(diffs)}); "
                "using it anyway (run `shmcoll tune` to measure this machine)",
                ForeignTableWarning,
                stacklevel=4,
            )
        _cache[key] = f
    return f


def find_file() -> tuple[Path | None, str]:
    """The table file to use and where it was found ("environment", "user", "system"),
    or (None, "model"): the engine's lookup (shmcoll_coll::tuning_file), the one
    communicators created outside Python use too."""
    try:
        path, origin = _core.find_tuning_file()
    except ArgumentError as e:
        raise TuningTableError(str(e)) from e
    return path, origin


def resolve(
    op: str, nprocs: int, inline_bytes: int | None = None, staging_bytes: int | None = None
) -> Resolved:
    """The rows of operation `op` ("alltoall", "allreduce", ...) at `nprocs` ranks: from the
    table file when it covers them, else the model (the other collectives' with the
    communicator's inline and staging sizes, by default those this environment gives
    one)."""
    path, origin = find_file()
    if path is not None:
        rows = _load_cached(path).rows(op, nprocs)
        if rows is not None:
            return Resolved(rows, str(path), origin, True)
    model = _core.model_table(op, nprocs, inline_bytes, staging_bytes)
    return Resolved(model, "model", origin, path is None)


def compression_table(nprocs: int) -> dict[str, table.CompressionRows]:
    """Where the table lists `compressed` (shmcoll.compress consults it): for each
    operation the table file covers at `nprocs` ranks, its size ranges."""
    path, _ = find_file()
    if path is None:
        return {}
    f = _load_cached(path)
    out = {}
    for op in table.COMPRESSIBLE:
        rows = f.compression_rows(op, nprocs)
        if rows is not None:
            out[op] = rows
    return out


def digest(comm: Any) -> np.ndarray:
    """The 8 bytes ranks compare when they bind: the engine's digest of `comm`'s selection
    tables (the one the PMPI library compares) with the ranges `comm` compresses."""
    d = _core.tables_digest(comm, sorted(comm._compression.items()))
    return np.frombuffer(d.to_bytes(8, "little"), np.uint8)


def bind(comm: Any) -> Resolved:
    """Bind the table for `comm`'s size and check that every rank bound the same one (a
    rank selecting differently from its peers would break the protocol)."""
    r = resolve("alltoall", comm.size)
    comm._set_table("alltoall", r.rows, r.source)
    cfg = comm._config()
    areas = int(cfg["inline_bytes"]), int(cfg["staging_bytes"])
    for op in table.COLL_OPERATIONS:
        c = resolve(op, comm.size, *areas)
        if c.source != "model":
            comm._set_table(op, c.rows, c.source)
    comm._compression = compression_table(comm.size)
    mine = digest(comm)
    send = np.tile(mine, comm.size)
    recv = np.empty_like(send)
    comm.Alltoall(send, recv, **INTERNAL)
    others = recv.reshape(comm.size, 8)
    differ = [i for i in range(comm.size) if not np.array_equal(others[i], mine)]
    if differ:
        raise MismatchError(
            f"ranks {differ} bound a different tuning table than rank {comm.rank} ({r.source}); "
            f"check {ENV_FILE} and the table files on every rank"
        )
    return r
