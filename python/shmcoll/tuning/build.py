"""A tuning table from `shmcoll tune`'s measurements, by the rule of decide.py, and what
changed from the model.

Each process count's entry starts from the model the ranks measured beside the
candidates. decide.py names, per cell (block size, buffer kind), the candidate that
replaces the model, and the size ranges a winner covers. A candidate list serves every
kind of buffer at once (the first candidate whose restrictions allow the call wins), so
per size range this module writes the list that gives each measured kind its winner, or
the model's choice where it keeps the model, and checks the list with the engine's own
selection (``_core.resolve``, for every operation) before writing it:

* heap and private (ordinary) buffers get exactly what was decided for them;
* calls the tuner did not measure (in place, one buffer in the heap, no CMA) keep the
  model's algorithm;
* ranks write their inline payload before arriving exactly where the measurement did
  (a forced candidate other than `inline` wrote none; a list that names `inline` makes
  every rank write it), so a winner runs in the table as it was measured.

Where no list passes, the kind with the smaller gain keeps the model, then both. Sizes
where every kind keeps the model are left to the model: Alltoall's entries leave them as
gaps (the engine falls back to the model there), the other collectives' rows, which have
no gaps, list the model's algorithms.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .. import _core
from . import decide, table

#: The model's own choice as the tuner names it in its measurements.
MODEL = "model"
#: The buffer kinds the tuner measures.
KINDS = ("heap", "ordinary")
#: Alltoall algorithms that serve heap buffers only (push: receive buffers, pull: send).
HEAP_ONLY = {"push": "recv", "pull": "send"}
#: The collectives' algorithm that serves heap buffers only.
COLL_HEAP_ONLY = ("direct",)
#: Compressed calls are a kind of their own in the report (they serve calls with a codec).
CODEC = "codec"
#: Alltoall calls the tuner does not measure, as (send in heap, receive in heap, in place,
#: CMA permitted): they must keep the model's algorithm. (Calls where CMA is not permitted
#: are checked beside each measured kind.)
A2A_UNMEASURED = (
    (True, False, False, True),
    (False, True, False, True),
    (False, False, True, True),
    (True, True, True, True),
)
#: The algorithms that need process_vm_readv/writev.
CMA = ("cma", "cma-push")
#: Alltoall calls the tuner measures, per kind (as A2A_UNMEASURED).
A2A_MEASURED = {"heap": (True, True, False, True), "ordinary": (False, False, False, True)}


@dataclass(frozen=True)
class Outcome:
    """What the table does in one measured cell: `choice` replaced the model (median
    `model_us` -> `choice_us`), or the model stays for the reason `why`."""

    op: str
    nprocs: int
    bytes: int
    buffers: str
    why: str  # "faster", "within the spread", "same as the model", "not expressible", "model not measured"
    choice: str | None = None
    model_us: float | None = None
    choice_us: float | None = None

    @property
    def changed(self) -> bool:
        return self.why == "faster"


# -- reading measurements -----------------------------------------------------------------
def usable(rec: dict[str, Any]) -> bool:
    return "error" not in rec and rec.get("median_us") is not None and rec.get("valid") is not False


def timing(rec: dict[str, Any], prefix: str = "") -> decide.Timing | None:
    m = rec.get(prefix + "median_us")
    if m is None:
        return None
    rounds = rec.get(prefix + "rounds_us") or [m]
    return decide.Timing(float(m), tuple(float(x) for x in rounds))


def name_of(rec: dict[str, Any]) -> str:
    return "/".join(x for x in (rec["algorithm"], rec["order"], rec["store"]) if x != "-")


@dataclass(frozen=True)
class Cell:
    """The decision in one cell: the winning record (None: the model stays) and why."""

    winner: dict[str, Any] | None
    pair: decide.Paired | None
    why: str


def decide_cell(recs: Sequence[dict[str, Any]]) -> Cell:
    """Apply decide.winner to one cell's records (the model's and the candidates')."""
    model = next((r for r in recs if r["algorithm"] == MODEL), None)
    mt = timing(model) if model is not None and usable(model) else None
    if mt is None:
        return Cell(None, None, "model not measured")
    pairs: dict[int, decide.Paired] = {}
    for i, r in enumerate(recs):
        ct = timing(r)
        if r["algorithm"] != MODEL and usable(r) and ct is not None:
            pairs[i] = decide.Paired(ct, timing(r, "model_") or mt)
    w = decide.winner(pairs)
    if w is None:
        return Cell(None, None, "within the spread")
    return Cell(recs[w], pairs[w], "faster")


def model_rows_of(recs: Iterable[dict[str, Any]]) -> list[table.RangeRow] | None:
    """The model table the ranks bound while measuring (recorded with the model's cells),
    as rows."""
    rows = next((r["model_rows"] for r in recs if r["algorithm"] == MODEL and r.get("model_rows")), None)
    return None if rows is None else _rows(rows)


def _rows(rows: Any) -> list[table.RangeRow]:
    """Rows as recorded in JSON (lists) back to the row format. Measurements of the other
    collectives recorded by earlier versions hold rows ``(max bytes, [algorithm, ...])``,
    each from the previous row's bound: read as the ranges they meant."""
    out: list[table.RangeRow] = []
    lo = 0
    for row in rows:
        if len(row) == 2:
            hi, cands = row[0], [table.choice(a) for a in row[1]]
        else:
            lo, hi, cands = int(row[0]), row[1], [_cand_row(c) for c in row[2]]
        hi = None if hi is None else int(hi)
        out.append((lo, hi, cands))
        lo = 0 if hi is None else hi + 1
    return out


def _cand_row(c: Sequence[Any]) -> table.CandidateRow:
    a, o, s, nt, chunk = c
    return (a, o, s, nt, chunk)


# -- pieces of the size axis ----------------------------------------------------------------
def pieces(starts: Iterable[int]) -> list[tuple[int, int | None]]:
    """The size axis cut where a range starts: [(lo, hi or None for inf)]."""
    s = sorted({0, *starts})
    return [(a, b - 1) for a, b in itertools.pairwise(s)] + [(s[-1], None)]


def covering(spans: dict[str, list[tuple[int, int, Any]]], lo: int) -> dict[str, Any]:
    """Per kind, the winner whose span holds the piece starting at `lo` (pieces never
    straddle a span's edge)."""
    return {k: w for k, ss in spans.items() for a, b, w in ss if a <= lo <= b}


def edges(model_starts: Iterable[int], spans: dict[str, list[tuple[int, int, Any]]]) -> list[int]:
    """Where the size axis is cut: the model's ranges and the winners' spans."""
    return [*model_starts, *(e for ss in spans.values() for a, b, _ in ss for e in (a, b + 1))]


def gains(
    cells: dict[tuple[int, str], Cell], spans: dict[str, list[tuple[int, int, Any]]], lo: int
) -> Callable[[str], float]:
    """A kind's gain over the model (1 - ratio) at the first measured point of the span
    holding `lo`."""

    def gain(kind: str) -> float:
        c = cells.get((next(a for a, b, _ in spans[kind] if a <= lo <= b), kind))
        return 0.0 if c is None or c.pair is None else 1 - c.pair.ratio

    return gain


def dedupe(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def options(want: dict[str, Any], gain: Callable[[str], float]) -> list[dict[str, Any]]:
    """The winners to try to express, most first; of one kind, the larger gain first."""
    if len(want) < 2:
        return [want]
    singles = sorted(want, key=gain, reverse=True)
    return [want, *({k: want[k]} for k in singles)]


# -- Alltoall -------------------------------------------------------------------------------
Cand = table.CandidateRow


def a2a_list(model: list[Cand], want: dict[str, Cand]) -> list[Cand]:
    """The candidate list that should give heap buffers want["heap"] and private buffers
    want["ordinary"] (the model's choice for a kind not in `want`): the heap winner, the
    model's leading heap-only candidates (so that calls with one buffer in the heap keep
    the model's), the private winner, then the model's list."""
    lead = list(itertools.takewhile(lambda c: c[0] in HEAP_ONLY, model))
    h, o = want.get("heap"), want.get("ordinary")
    return dedupe([*([h] if h else []), *lead, *([o] if o else []), *model])


def a2a_pick(rows: list[table.RangeRow], p: int, size: int, call: tuple[bool, bool, bool, bool]) -> Any:
    """What `rows` select at `size` for a call (send in heap, receive in heap, in place,
    CMA permitted): the candidate, its parameters resolved."""
    return _core.resolve("alltoall", rows, p, size, *call)[:5]


def a2a_writes(rows: list[table.RangeRow], p: int, size: int) -> bool:
    """Whether ranks with private buffers write their inline payload before arriving."""
    return _core.resolve("alltoall", rows, p, size, False, False, False)[5]


def a2a_ok(
    lst: list[Cand], model_rows: list[table.RangeRow], want: dict[str, Cand], p: int, lo: int, hi: int
) -> bool:
    """Whether `lst` on lo..hi selects as decided (see the module's docstring)."""
    rows: list[table.RangeRow] = [(lo, hi, lst)]
    for probe in sorted({lo, hi}):
        writes = a2a_writes(rows, p, probe)
        for kind, call in A2A_MEASURED.items():
            got = a2a_pick(rows, p, probe, call)
            w = want.get(kind)
            if w is not None:
                ref = a2a_pick([(lo, hi, [w])], p, probe, call)
                if ref[0] != w[0] or got != ref or writes != (w[0] == "inline"):
                    return False
            elif got != a2a_pick(model_rows, p, probe, call) or writes != a2a_writes(model_rows, p, probe):
                return False
            # Where CMA is not permitted, the kind keeps its choice, or, where that needs
            # CMA, takes the model's algorithm.
            no_cma = (*call[:3], False)
            want_algo = got[0] if got[0] not in CMA else a2a_pick(model_rows, p, probe, no_cma)[0]
            if a2a_pick(rows, p, probe, no_cma)[0] != want_algo:
                return False
        for call in A2A_UNMEASURED:
            if a2a_pick(rows, p, probe, call)[0] != a2a_pick(model_rows, p, probe, call)[0]:
                return False
    return True


def _cand(rec: dict[str, Any]) -> Cand:
    return (rec["algorithm"], rec["order"], rec["store"], None, None)


def alltoall_entry(recs: list[dict[str, Any]], p: int) -> tuple[dict[str, Any], list[Outcome]]:
    """The entry for `p` ranks and the outcome of every measured cell."""
    model_rows = model_rows_of(recs) or _core.model_table("alltoall", p)
    sizes = sorted({r["bytes"] for r in recs})
    cells: dict[tuple[int, str], Cell] = {}
    points: dict[str, list[tuple[int, Cand | None]]] = {k: [] for k in KINDS}
    for s, kind in itertools.product(sizes, KINDS):
        c = decide_cell([r for r in recs if r["bytes"] == s and r["buffers"] == kind])
        if c.winner is not None:
            call = A2A_MEASURED[kind]
            if a2a_pick([(s, s, [_cand(c.winner)])], p, s, call) == a2a_pick(model_rows, p, s, call):
                c = Cell(None, None, "same as the model")
        cells[s, kind] = c
        points[kind].append((s, None if c.winner is None else _cand(c.winner)))
    spans = {k: decide.spans(points[k]) for k in KINDS}
    out: list[table.RangeRow] = []
    applied: list[tuple[int, int, set[str]]] = []
    for lo, hi in pieces(edges((lo for lo, _, _ in model_rows), spans)):
        want = covering(spans, lo)
        if not want or hi is None:
            continue
        mlist = next(cs for a, b, cs in model_rows if a <= lo and (b is None or lo <= b))
        for opt in options(want, gains(cells, spans, lo)):
            lst = a2a_list(mlist, opt)
            if a2a_ok(lst, model_rows, opt, p, lo, hi):
                out.append((lo, hi, lst))
                applied.append((lo, hi, set(opt)))
                break
    merged: list[table.RangeRow] = []
    for lo, hi, lst in out:
        if merged and merged[-1][2] == lst and merged[-1][1] is not None and merged[-1][1] + 1 == lo:
            merged[-1] = (merged[-1][0], hi, lst)
        else:
            merged.append((lo, hi, lst))
    # A process count where every cell keeps the model gets the model's rows (an entry
    # needs one), which select alike.
    entry = {"nprocs": [p, p], "sizes": table.rows_to_sizes(merged or model_rows)}
    return entry, outcomes("alltoall", p, cells, applied)


def outcomes(
    op: str, p: int, cells: dict[tuple[int, str], Cell], applied: list[tuple[int, int, set[str]]]
) -> list[Outcome]:
    res = []
    for (s, kind), c in sorted(cells.items()):
        if c.winner is None or c.pair is None:
            res.append(Outcome(op, p, s, kind, c.why))
            continue
        used = any(lo <= s <= hi and kind in ks for lo, hi, ks in applied)
        if not used:
            res.append(Outcome(op, p, s, kind, "not expressible", name_of(c.winner)))
            continue
        pair = c.pair
        res.append(
            Outcome(op, p, s, kind, "faster", name_of(c.winner), pair.model.median_us, pair.cand.median_us)
        )
    return res


# -- the other collectives ----------------------------------------------------------------
def coll_list(model: list[str], want: dict[str, str]) -> list[str]:
    """As a2a_list, for a collective (`direct` is the heap-only algorithm)."""
    lead = list(itertools.takewhile(lambda a: a in COLL_HEAP_ONLY, model))
    h, o = want.get("heap"), want.get("ordinary")
    return dedupe([*([h] if h else []), *lead, *([o] if o else []), *model])


def coll_pick(
    op: str, rows: list[table.RangeRow], p: int, size: int, heap: bool, fits: bool, cma_ok: bool = True
) -> tuple[str, bool]:
    """What `rows` of collective `op` select at `size` with every buffer in the heap or
    none, the payload fitting the inline area or not: (algorithm, whether ranks write
    their inline payload before arriving)."""
    r = _core.resolve(op, rows, p, size, heap, heap, False, cma_ok, fits)
    return r[0], r[5]


def coll_ok(
    op: str, p: int, lst: list[str], model_rows: list[table.RangeRow], want: dict[str, str], lo: int, hi: int
) -> bool:
    """Whether `lst` on lo..hi selects as decided (see the module's docstring). Whether a
    payload fits the inline area depends on the operation: both are checked, except where
    a winner is `inline` (it was measured there, so it fits)."""
    rows: list[table.RangeRow] = [(lo, hi, [table.choice(a) for a in lst])]
    fits_cases = (True,) if "inline" in want.values() else (True, False)
    for probe, fits in itertools.product(sorted({lo, hi}), fits_cases):
        for kind in KINDS:
            heap = kind == "heap"
            got = coll_pick(op, rows, p, probe, heap, fits)
            w = want.get(kind)
            ref = (w, w == "inline") if w else coll_pick(op, model_rows, p, probe, heap, fits)
            if got != ref:
                return False
            # Where CMA is not permitted, the kind keeps its choice, or, where that needs
            # CMA, takes the model's algorithm.
            model_algo = coll_pick(op, model_rows, p, probe, heap, fits, False)[0]
            want_algo = got[0] if got[0] not in CMA else model_algo
            if coll_pick(op, rows, p, probe, heap, fits, False)[0] != want_algo:
                return False
    return True


def coll_entry(op: str, recs: list[dict[str, Any]], p: int) -> tuple[dict[str, Any], list[Outcome]]:
    """A collective's entry for `p` ranks (rows over every size) and the outcomes."""
    model_rows = model_rows_of(recs) or _core.model_table(op, p)
    ranges = [(lo, hi, [c[0] for c in cands]) for lo, hi, cands in model_rows]
    sizes = sorted({r["bytes"] for r in recs})
    cells: dict[tuple[int, str], Cell] = {}
    points: dict[str, list[tuple[int, str | None]]] = {k: [] for k in (*KINDS, CODEC)}
    for s in sizes:
        here = [r for r in recs if r["bytes"] == s]
        fits = any(usable(r) for r in here if r["algorithm"] == "inline")
        for kind in KINDS:
            mine = [r for r in here if r["buffers"] == kind and r["algorithm"] != table.COMPRESSED]
            c = decide_cell(mine)
            if c.winner is not None:
                same = coll_pick(op, model_rows, p, s, kind == "heap", fits)[0] == c.winner["algorithm"]
                if same:
                    c = Cell(None, None, "same as the model")
            cells[s, kind] = c
            points[kind].append((s, None if c.winner is None else c.winner["algorithm"]))
        comp = [r for r in here if r["buffers"] == "ordinary" and r["algorithm"] in (MODEL, table.COMPRESSED)]
        if any(r["algorithm"] == table.COMPRESSED for r in comp):
            c = decide_cell(comp)
            best = cells[s, "ordinary"].pair
            if c.pair is not None and best is not None and c.pair.ratio >= best.ratio:
                c = Cell(None, None, "within the spread")  # an uncompressed winner is faster
            cells[s, CODEC] = c
            points[CODEC].append((s, None if c.winner is None else table.COMPRESSED))
    spans = {k: decide.spans(v) for k, v in points.items()}
    rows: list[table.RangeRow] = []
    applied: list[tuple[int, int, set[str]]] = []
    for lo, hi in pieces(edges((a for a, _, _ in ranges), spans)):
        mlist = next(cs for a, b, cs in ranges if a <= lo and (b is None or lo <= b))
        want = covering(spans, lo)
        codec = want.pop(CODEC, None)
        lst = list(mlist)
        if want and hi is not None:
            for opt in options(want, gains(cells, spans, lo)):
                cand = coll_list(mlist, opt)
                if coll_ok(op, p, cand, model_rows, opt, lo, hi):
                    lst = cand
                    applied.append((lo, hi, set(opt)))
                    break
        if codec is not None and hi is not None:
            lst = [table.COMPRESSED, *lst]
            applied.append((lo, hi, {CODEC}))
        cands = [table.choice(a) for a in lst]
        if rows and rows[-1][2] == cands:
            rows[-1] = (rows[-1][0], hi, cands)
        else:
            rows.append((lo, hi, cands))
    return {"nprocs": [p, p], "sizes": table.rows_to_sizes(rows)}, outcomes(op, p, cells, applied)


# -- the document -----------------------------------------------------------------------------
def build_document(records: list[dict[str, Any]], effort: str) -> dict[str, Any]:
    """The table (with the measurements and every cell's outcome under "decisions")."""
    doc = table.new_document("measured", effort)
    decisions: list[Outcome] = []
    for op in table.OPERATIONS:
        recs = [r for r in records if r.get("op", "alltoall") == op]
        entries = []
        for p in sorted({r["nprocs"] for r in recs}):
            mine = [r for r in recs if r["nprocs"] == p]
            entry, outs = alltoall_entry(mine, p) if op == "alltoall" else coll_entry(op, mine, p)
            entries.append(entry)
            decisions += outs
        if entries:
            doc["operations"][op] = entries
    doc["measurements"] = records
    doc["decisions"] = [asdict(o) for o in decisions]
    return doc


def decisions_of(doc: dict[str, Any]) -> list[Outcome]:
    return [Outcome(**d) for d in doc.get("decisions", [])]
