"""The tuning-table format: versioned JSON with a JSON Schema (``schema.json`` beside this
file), like FFTW's wisdom for the workflow and MPICH's JSON selection for the shape.

A table holds, per operation, process-count ranges; per process count, block-size ranges
(bytes per peer, ``"inf"`` allowed); per block size, an ordered list of candidates. The
first candidate that can serve a call wins, so one list covers heap, private and in-place
buffers (``push`` needs heap receive buffers, the next candidate serves the others). Ranges
must not overlap; sizes or process counts that no range covers fall back to the model.
Every table records the hardware fingerprint and the shmcoll version that wrote it.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .. import _core
from ..errors import TuningTableError

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

#: (max bytes or None for inf, [algorithm, ...]) of a collective's table
CollRow = tuple[int | None, list[str]]

#: (algorithm, order, store, nt_threshold or None, chunk_bytes or None)
CandidateRow = tuple[str, str, str, int | None, int | None]
#: (min bytes, max bytes or None for inf, candidates)
RangeRow = tuple[int, int | None, list[CandidateRow]]

FINGERPRINT_KEYS = ("vendor", "model_name", "logical_cpus", "sockets", "l2_bytes", "l3_bytes", "simd")


@cache
def schema() -> dict[str, Any]:
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


def fingerprint_differences(fp: dict[str, Any]) -> list[str]:
    """Keys of `fp` that differ from this machine, as "key: theirs != ours"."""
    mine = fingerprint()
    out = []
    for k in FINGERPRINT_KEYS:
        theirs = sorted(fp.get(k, [])) if k == "simd" else fp.get(k)
        if theirs != mine[k]:
            out.append(f"{k}: {theirs!r} != {mine[k]!r}")
    return out


def _bound(v: int | str) -> int | None:
    return None if v == "inf" else int(v)


def _pointer(path: Any) -> str:
    return "/".join(str(p) for p in path) or "(top level)"


def validate(doc: Any, origin: str) -> None:
    """Raise TuningTableError naming `origin` and the offending entry unless `doc` is a
    usable table: valid against the schema, known names, no overlapping ranges."""
    import jsonschema  # type: ignore[import-untyped]

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise TuningTableError(f"{origin}: entry {_pointer(e.absolute_path)}: {e.message}")
    algos, orders, stores = _core.algorithms()
    a2a_names = {"algorithm": {a for a, _ in algos}, "order": set(orders), "store": set(stores)}
    coll_names = {"algorithm": {a for a, _ in _core.coll_algorithms()}}
    for op, entries in doc["operations"].items():
        names = coll_names if op in COLL_OPERATIONS else a2a_names
        if op in COMPRESSIBLE:
            names = {**names, "algorithm": names["algorithm"] | {COMPRESSED}}
        spans = []
        for i, entry in enumerate(entries):
            where = f"operations/{op}/{i}"
            lo, hi = entry["nprocs"][0], _bound(entry["nprocs"][1])
            if lo < 1 or (hi is not None and hi < lo):
                raise TuningTableError(
                    f"{origin}: entry {where}/nprocs: empty or invalid range {entry['nprocs']}"
                )
            spans.append((lo, hi, where))
            for k, size in enumerate(entry["sizes"]):
                if all(c["algorithm"] == COMPRESSED for c in size["choices"]):
                    raise TuningTableError(
                        f"{origin}: entry {where}/sizes/{k}/choices: {COMPRESSED!r} needs an "
                        "uncompressed candidate after it (for calls that carry no codec)"
                    )
                for c, choice in enumerate(size["choices"]):
                    # The collectives' algorithms take no parameters: a key there would be
                    # ignored, so it is refused.
                    extra = sorted(set(choice) - {"algorithm"}) if op in COLL_OPERATIONS else []
                    if extra:
                        raise TuningTableError(
                            f"{origin}: entry {where}/sizes/{k}/choices/{c}/{extra[0]}: a choice "
                            f"of {op} names only an algorithm"
                        )
                    for key, known in names.items():
                        if key in choice and choice[key] not in known:
                            raise TuningTableError(
                                f"{origin}: entry {where}/sizes/{k}/choices/{c}/{key}: unknown "
                                f"{key} {choice[key]!r} (known: {', '.join(sorted(known))})"
                            )
            try:
                if op in COLL_OPERATIONS:
                    check_coll_rows(entry)
                else:
                    _core.check_table(entry_rows(entry))
            except Exception as e:
                raise TuningTableError(f"{origin}: entry {where}/sizes: {e}") from None
        spans.sort(key=lambda s: s[0])
        for (_, hi, w0), (lo2, _, w1) in itertools.pairwise(spans):
            if hi is None or lo2 <= hi:
                raise TuningTableError(f"{origin}: entries {w0} and {w1}: process-count ranges overlap")


def entry_rows(entry: dict[str, Any]) -> list[RangeRow]:
    """One process-count entry as the rows the native module binds."""
    rows: list[RangeRow] = []
    for size in entry["sizes"]:
        cands: list[CandidateRow] = [
            (
                c["algorithm"],
                c.get("order", "shifted"),
                c.get("store", "hybrid"),
                c.get("nt_threshold"),
                c.get("chunk_bytes"),
            )
            for c in size["choices"]
            if c["algorithm"] != COMPRESSED
        ]
        rows.append((int(size["bytes"][0]), _bound(size["bytes"][1]), cands))
    return rows


def check_coll_rows(entry: dict[str, Any]) -> None:
    """Size ranges of a collective's entry must not overlap."""
    spans = sorted((int(s["bytes"][0]), _bound(s["bytes"][1])) for s in entry["sizes"])
    for (lo, hi), (lo2, _) in itertools.pairwise(spans):
        if hi is None or lo2 <= hi:
            raise ValueError(f"ranges {lo}..{hi} and {lo2}.. overlap")


def coll_rows(entry: dict[str, Any]) -> list[CollRow]:
    """A collective's process-count entry as the rows the native module binds (sizes in a
    gap between ranges fall to the next row)."""
    sizes = sorted(entry["sizes"], key=lambda s: int(s["bytes"][0]))
    return [
        (_bound(s["bytes"][1]), [c["algorithm"] for c in s["choices"] if c["algorithm"] != COMPRESSED])
        for s in sizes
    ]


def compression_rows(entry: dict[str, Any]) -> CompressionRows:
    """The size ranges of a process-count entry, each with whether it lists `compressed`."""
    return [
        (int(s["bytes"][0]), _bound(s["bytes"][1]), any(c["algorithm"] == COMPRESSED for c in s["choices"]))
        for s in entry["sizes"]
    ]


def coll_rows_to_sizes(rows: list[CollRow]) -> list[dict[str, Any]]:
    out = []
    lo = 0
    for hi, algos in rows:
        out.append({"bytes": [lo, "inf" if hi is None else hi], "choices": [{"algorithm": a} for a in algos]})
        lo = 0 if hi is None else hi + 1
    return out


def entry_for(doc: dict[str, Any], op: str, nprocs: int) -> dict[str, Any] | None:
    for entry in doc["operations"].get(op, []):
        lo, hi = entry["nprocs"][0], _bound(entry["nprocs"][1])
        if lo <= nprocs and (hi is None or nprocs <= hi):
            return entry
    return None


def rows_for(doc: dict[str, Any], op: str, nprocs: int) -> list[RangeRow] | None:
    """The rows of the entry covering `nprocs`, or None."""
    for entry in doc["operations"].get(op, []):
        lo, hi = entry["nprocs"][0], _bound(entry["nprocs"][1])
        if lo <= nprocs and (hi is None or nprocs <= hi):
            return entry_rows(entry)
    return None


def rows_to_sizes(rows: list[RangeRow]) -> list[dict[str, Any]]:
    """Rows back to the JSON form of a process-count entry's `sizes`."""
    out = []
    for lo, hi, cands in rows:
        choices = []
        for a, o, s, nt, chunk in cands:
            c: dict[str, Any] = {"algorithm": a, "order": o, "store": s}
            if nt is not None:
                c["nt_threshold"] = nt
            if chunk is not None:
                c["chunk_bytes"] = chunk
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
    doc["operations"]["alltoall"] = [
        {"nprocs": [p, p], "sizes": rows_to_sizes(_core.model_table(p))} for p in sorted(set(nprocs))
    ]
    for op in COLL_OPERATIONS:
        doc["operations"][op] = [
            {"nprocs": [p, p], "sizes": coll_rows_to_sizes(_core.coll_model_table(FAMILY[op], p))}
            for p in sorted(set(nprocs))
        ]
    return doc


def load(path: str | Path) -> dict[str, Any]:
    """Read and validate a table file."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TuningTableError(f"{path}: cannot read the tuning table: {e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TuningTableError(f"{path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    validate(doc, str(path))
    return doc


def dump(doc: dict[str, Any], path: str | Path) -> None:
    """Validate and write atomically."""
    validate(doc, str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
