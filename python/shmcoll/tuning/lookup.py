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

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from ..errors import ArgumentError, ForeignTableWarning, MismatchError, PeerRejectedError, TuningTableError
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


#: The digest a rank sends when it could not resolve its tables (`bind`): no table's
#: digest, so that a peer never mistakes a failure for agreement.
FAILED_DIGEST = np.full(8, 0xFF, np.uint8)

#: Bytes of a failed rank's message that its peers receive (`bind`).
_MESSAGE_BYTES = 512


def _resolve_all(comm: Any) -> Resolved:
    """Set every table of `comm` from the files in force (and the model)."""
    r = resolve("alltoall", comm.size)
    comm._set_table("alltoall", r.rows, r.source)
    cfg = comm._config()
    areas = int(cfg["inline_bytes"]), int(cfg["staging_bytes"])
    for op in table.COLL_OPERATIONS:
        c = resolve(op, comm.size, *areas)
        if c.source != "model":
            comm._set_table(op, c.rows, c.source)
    comm._compression = compression_table(comm.size)
    return r


def _failure_text(failure: Exception) -> str:
    """What a rank's peers are told of its failure to bind: its error, which names the
    file (the variable's value is added where it does not)."""
    why = f"{type(failure).__name__}: {failure}"
    named = os.environ.get(ENV_FILE, "").strip()
    return why if not named or named in why else f"{why} ({ENV_FILE}={named!r})"


def bind(comm: Any) -> Resolved:
    """Bind the table for `comm`'s size and check that every rank bound the same one (a
    rank selecting differently from its peers would break the protocol).

    A rank that cannot resolve its tables (a broken or missing file, TuningTableError)
    still takes part in the comparison, with FAILED_DIGEST: then it raises its own error
    and every other rank a PeerRejectedError naming it and its file (the message comes in
    one more exchange, on this failure path only), instead of leaving its peers to wait
    for it until their timeout."""
    failure: Exception | None = None
    r: Resolved | None = None
    try:
        r = _resolve_all(comm)
        mine = digest(comm)
    except Exception as e:  # any failure here is reported to the peers
        failure, mine = e, FAILED_DIGEST
    send = np.tile(mine, comm.size)
    recv = np.empty_like(send)
    comm.Alltoall(send, recv, **INTERNAL)
    others = recv.reshape(comm.size, 8)
    failed = [i for i in range(comm.size) if np.array_equal(others[i], FAILED_DIGEST)]
    if failed:
        text = b"" if failure is None else _failure_text(failure).encode()[:_MESSAGE_BYTES]
        out = np.zeros(_MESSAGE_BYTES, np.uint8)
        out[: len(text)] = np.frombuffer(text, np.uint8)
        every = np.empty((comm.size, _MESSAGE_BYTES), np.uint8)
        comm.Allgather(out, every, algorithm=INTERNAL["algorithm"])
        if failure is not None:
            raise failure
        j = failed[0]
        why = bytes(every[j]).rstrip(b"\0").decode(errors="replace")
        err = PeerRejectedError(
            f"rank {j} could not bind its tuning tables: {why}; "
            f"check {ENV_FILE} and the table files on every rank"
        )
        err.rank = j
        raise err
    assert r is not None
    differ = [i for i in range(comm.size) if not np.array_equal(others[i], mine)]
    if differ:
        raise MismatchError(
            f"ranks {differ} bound a different tuning table than rank {comm.rank} ({r.source}); "
            f"check {ENV_FILE} and the table files on every rank"
        )
    return r
