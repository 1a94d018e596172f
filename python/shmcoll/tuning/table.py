"""The tuning-table format: versioned JSON with a JSON Schema (``schema.json`` beside this
file), like FFTW's wisdom for the workflow and MPICH's JSON selection for the shape.

A table holds, per operation, process-count ranges; per process count, block-size ranges
(bytes per peer, ``"inf"`` allowed); per block size, an ordered list of candidates. The
first candidate that can serve a call wins, so one list covers heap, private and in-place
buffers (``push`` needs heap receive buffers, the next candidate serves the others). Ranges
must not overlap; sizes or process counts that no range covers fall back to the model.
Every table records the hardware fingerprint and the shmcoll version that wrote it.

Reading is the engine's (shmcoll_coll::tuning_file, through ``_core.TuningFile``): it
checks a table whole (the schema, names, ranges, ``compressed``) and gives the rows of an
(operation, process count), for these bindings and for communicators created outside
Python alike. This module writes tables (``new_document``, ``model_document``, ``dump``)
and turns the reader's errors into TuningTableError.
"""

from __future__ import annotations

import datetime as _dt
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .. import _core
from ..errors import ArgumentError, TuningTableError

FORMAT = "shmcoll-tuning"
VERSION = 1
OPERATIONS = ("alltoall", "allreduce", "allgather", "bcast", "reduce_scatter", "reduce", "gather", "scatter")
#: The collectives other than Alltoall: their choices name an algorithm only (inline,
#: direct, cma, staging), and a size is the largest contribution of a rank in bytes.
COLL_OPERATIONS = OPERATIONS[1:]
#: Table operation -> the native collective family.
FAMILY = {
    "allreduce": "Allreduce",
    "allgather": "Allgather",
    "bcast": "Bcast",
    "reduce_scatter": "Reduce_scatter_block",
    "reduce": "Reduce",
    "gather": "Gather",
    "scatter": "Scatter",
}
#: The candidate that sends compressed data (shmcoll.compress). It serves a call only
#: when the call carries a codec (``compress=``, or ``traffic=`` with a policy that names
#: one); the native engine never sees it (stripped before binding), shmcoll.compress
#: consults where it appears.
COMPRESSED = "compressed"
#: Operations with a compressed form.
COMPRESSIBLE = ("alltoall", "allreduce", "allgather", "bcast", "reduce_scatter")
#: (min bytes, max bytes or None for inf, whether the range lists `compressed`) of an
#: operation's process-count entry.
CompressionRows = list[tuple[int, int | None, bool]]

#: One candidate as the engine's bindings give and take it, for every operation:
#: (algorithm, order, store, nt_threshold, chunk_bytes). Only Alltoall's take parameters:
#: its rows name the order and store (None elsewhere) and may set the thresholds (None:
#: the communicator's).
CandidateRow = tuple[str, str | None, str | None, int | None, int | None]
#: (min bytes, max bytes or None for inf, candidates): one size range of any operation's
#: table (the size is Alltoall's largest block, the others' largest contribution).
RangeRow = tuple[int, int | None, list[CandidateRow]]


def choice(algorithm: str) -> CandidateRow:
    """A candidate that names only an algorithm (every operation but Alltoall)."""
    return (algorithm, None, None, None, None)


@cache
def schema() -> dict[str, Any]:
    """The format's JSON Schema (shipped for editors and other tools; the reader,
    shmcoll_coll::tuning_file, enforces it)."""
    text = resources.files(__package__).joinpath("schema.json").read_text()
    return json.loads(text)


def fingerprint() -> dict[str, Any]:
    """This machine as tables record it."""
    m = _core.machine()
    return {
        "vendor": m["vendor"],
        "model_name": m["model_name"],
        "logical_cpus": m["logical_cpus"],
        "physical_cores": m["physical_cores"],
        "sockets": m["sockets"],
        "l2_bytes": m["l2_bytes"],
        "l3_bytes": m["l3_bytes"],
        "simd": sorted(m["simd"]),
    }


def checked(doc: Any, origin: str = "document") -> _core.TuningFile:
    """The reader's view of `doc` (a table as JSON values), checked whole; raises
    TuningTableError naming `origin` and the offending entry."""
    try:
        text = json.dumps(doc)
    except (TypeError, ValueError) as e:
        raise TuningTableError(f"{origin}: not a JSON document: {e}") from None
    try:
        return _core.TuningFile.parse(text, origin)
    except ArgumentError as e:
        raise TuningTableError(str(e)) from None


def open_file(path: str | Path) -> _core.TuningFile:
    """Read and check a table file; TuningTableError naming the file and the entry."""
    try:
        return _core.TuningFile.load(Path(path))
    except ArgumentError as e:
        raise TuningTableError(str(e)) from None


def validate(doc: Any, origin: str) -> None:
    """Raise TuningTableError naming `origin` and the offending entry unless `doc` is a
    usable table."""
    checked(doc, origin)


def rows_for(doc: dict[str, Any], op: str, nprocs: int) -> list[RangeRow] | None:
    """The rows of operation `op` ("alltoall", "allreduce", ...) of the entry covering
    `nprocs`, as the engine binds them; None where none covers them."""
    return checked(doc).rows(op, nprocs)


def compression_rows_for(doc: dict[str, Any], op: str, nprocs: int) -> CompressionRows | None:
    """The size ranges of `op`'s entry for `nprocs`, each with whether it lists
    `compressed`, or None."""
    return checked(doc).compression_rows(op, nprocs)


def rows_to_sizes(rows: list[RangeRow]) -> list[dict[str, Any]]:
    """Rows back to the JSON form of a process-count entry's `sizes` (a choice names the
    parameters its candidate sets)."""
    out = []
    for lo, hi, cands in rows:
        choices = []
        for a, o, s, nt, chunk in cands:
            c: dict[str, Any] = {"algorithm": a}
            for key, value in (("order", o), ("store", s), ("nt_threshold", nt), ("chunk_bytes", chunk)):
                if value is not None:
                    c[key] = value
            choices.append(c)
        out.append({"bytes": [lo, "inf" if hi is None else hi], "choices": choices})
    return out


def new_document(source: str, effort: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "shmcoll_version": _core.__version__,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "source": source,
        "fingerprint": fingerprint(),
        "operations": {},
    }
    if effort:
        doc["effort"] = effort
    return doc


def model_document(nprocs: list[int]) -> dict[str, Any]:
    """The embedded default (the model of this machine) for these process counts."""
    doc = new_document("model")
    for op in OPERATIONS:
        doc["operations"][op] = [
            {"nprocs": [p, p], "sizes": rows_to_sizes(_core.model_table(op, p))} for p in sorted(set(nprocs))
        ]
    return doc


def load(path: str | Path) -> dict[str, Any]:
    """Read and check a table file: its document (for the tools that show or extend it)."""
    open_file(path)
    return dict(json.loads(Path(path).read_text()))


def dump(doc: dict[str, Any], path: str | Path) -> None:
    """Validate and write atomically."""
    validate(doc, str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
