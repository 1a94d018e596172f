"""The rule of `shmcoll tune` (tuning never makes things worse), on synthetic measurements
(no processes): a winner within the spread keeps the model, a clear winner replaces it, a
winner measured on heap buffers leaves private buffers to the model, unmeasured sizes
between disagreeing neighbours fall back to the model, a winner the table cannot run as it
was measured keeps the model, and (property) a table built from any measurements never
picks, at a measured cell, a candidate whose median is not below the model's. What the
engine selects is asked of the engine itself (``_core.resolve``)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmcoll import _core
from shmcoll.tuning import build, decide, report, table

P = 2
HEAP, PRIVATE = (True, True, False, True), (False, False, False, True)
CALLS = {"heap": HEAP, "ordinary": PRIVATE}
#: Sizes in the model's last range (single copies) at 2 ranks on any machine.
BIG = [64 << 10, 256 << 10, 1 << 20]
HYP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rec(
    size: int,
    kind: str,
    algo: str,
    median: float,
    order: str = "shifted",
    store: str = "hybrid",
    spread: float = 0.0,
    op: str = "alltoall",
    model: float | None = None,
) -> dict[str, Any]:
    """One cell's record as the ranks write it; `spread` widens the per-round medians
    (interquartile range = `spread`), `model` is the model measured beside it."""
    named = algo != build.MODEL and op == "alltoall"
    r: dict[str, Any] = {
        "op": op,
        "nprocs": P,
        "bytes": size,
        "buffers": kind,
        "algorithm": algo,
        "order": order if named else "-",
        "store": store if named else "-",
        "median_us": median,
        "rounds_us": [median - spread, median - spread / 2, median, median + spread / 2, median + spread],
    }
    if model is not None:
        r["model_median_us"] = model
        r["model_rounds_us"] = [model] * 5
    return r


def pick(doc: dict[str, Any], size: int, kind: str) -> tuple[Any, ...]:
    """What the table makes Alltoall select for `kind` buffers of `size` (gaps: the model)."""
    rows = table.rows_for(doc, "alltoall", P)
    assert rows is not None
    return tuple(_core.resolve("alltoall", rows, P, size, *CALLS[kind])[:5])


def model_pick(size: int, kind: str) -> tuple[Any, ...]:
    return tuple(_core.resolve("alltoall", _core.model_table("alltoall", P), P, size, *CALLS[kind])[:5])


def decisions(doc: dict[str, Any]) -> dict[tuple[int, str], build.Outcome]:
    return {(o.bytes, o.buffers): o for o in build.decisions_of(doc) if o.op == "alltoall"}


def a2a_doc(cells: list[dict[str, Any]]) -> dict[str, Any]:
    doc = build.build_document(cells, "quick")
    table.validate(doc, "synthetic")
    return doc


# -- the cell rule --------------------------------------------------------------------------
def test_the_margin_is_the_larger_of_5_percent_and_the_round_spreads() -> None:
    model = decide.Timing(100.0, (98.0, 99.0, 100.0, 101.0, 102.0))  # IQR 2
    assert decide.Paired(decide.Timing(94.0, (94.0,) * 5), model).beats_model  # 6 > 5
    assert not decide.Paired(decide.Timing(95.5, (95.5,) * 5), model).beats_model  # 4.5 < 5
    noisy = decide.Timing(80.0, (60.0, 70.0, 80.0, 95.0, 100.0))  # IQR 25
    assert not decide.Paired(noisy, model).beats_model  # 20 < 25
    wide_model = decide.Timing(100.0, (70.0, 80.0, 100.0, 110.0, 130.0))  # IQR 30
    assert not decide.Paired(decide.Timing(75.0, (75.0,) * 5), wide_model).beats_model
    assert decide.Paired(decide.Timing(65.0, (65.0,) * 5), wide_model).beats_model


def test_a_candidate_must_win_every_round() -> None:
    model = decide.Timing(1724.0, (1944.0, 1347.0, 1744.0, 1714.0, 1728.0))
    # far ahead at the median, the spread under the gain, but behind in the third round
    cand = decide.Timing(1003.0, (764.0, 1216.0, 1800.0, 662.0, 484.0))
    assert decide.Paired(cand, model).margin_us < model.median_us - cand.median_us
    assert not decide.Paired(cand, model).beats_model
    ahead = decide.Timing(1003.0, (764.0, 1216.0, 1003.0, 662.0, 484.0))
    assert decide.Paired(ahead, model).beats_model


def test_of_the_candidates_that_beat_the_model_the_best_ratio_wins() -> None:
    m = decide.Timing(100.0, (100.0,))
    pairs = {
        "a": decide.Paired(decide.Timing(80.0, (80.0,)), m),
        "b": decide.Paired(decide.Timing(90.0, (90.0,)), decide.Timing(150.0, (150.0,))),
        "c": decide.Paired(decide.Timing(99.0, (99.0,)), m),
    }
    assert decide.winner(pairs) == "b"  # 0.6 of the model beside it
    assert decide.winner({"c": pairs["c"]}) is None
    assert decide.winner({}) is None


def test_spans_cover_between_points_only_where_the_same_winner_won_at_both() -> None:
    pts = [(8, "a"), (64, "a"), (512, "b"), (4096, None), (1 << 15, "b"), (1 << 16, "b")]
    assert decide.spans(pts) == [(8, 64, "a"), (512, 512, "b"), (1 << 15, 1 << 16, "b")]
    assert decide.spans([(8, None)]) == []


# -- Alltoall tables ------------------------------------------------------------------------
def cells_with(
    size: int, kind: str, *cands: tuple[str, str, float], model: float = 100.0, spread: float = 0.0
):
    out = [rec(size, kind, build.MODEL, model, spread=spread)]
    out += [rec(size, kind, a, us, store=s, spread=spread) for a, s, us in cands]
    return out


def test_a_winner_within_the_spread_keeps_the_model() -> None:
    for size in BIG:
        # 4% faster: under the 5% margin. 10% faster, but rounds spread by 20 µs.
        close = cells_with(size, "ordinary", ("staging", "temporal", 96.0))
        noisy = cells_with(size, "heap", ("pull", "nt", 90.0), spread=20.0)
        doc = a2a_doc(close + noisy)
        for kind in ("ordinary", "heap"):
            assert pick(doc, size, kind) == model_pick(size, kind)
            assert decisions(doc)[size, kind].why == "within the spread"


def test_a_clear_winner_replaces_the_model() -> None:
    recs = [c for s in BIG for c in cells_with(s, "ordinary", ("staging", "temporal", 60.0))]
    doc = a2a_doc(recs)
    for size in BIG:
        assert pick(doc, size, "ordinary")[:3] == ("staging", "shifted", "temporal")
        o = decisions(doc)[size, "ordinary"]
        assert o.changed and o.choice == "staging/shifted/temporal"
        assert (o.model_us, o.choice_us) == (100.0, 60.0)
        # the heap buffers were not measured better: the model's choice stays
        assert pick(doc, size, "heap") == model_pick(size, "heap")
    out = "\n".join(report.lines(build.decisions_of(doc)))
    assert "256K ordinary staging/shifted/temporal: 100.00 -> 60.00 (0.60x)" in out


def test_a_winner_measured_on_heap_buffers_leaves_private_buffers_to_the_model() -> None:
    # cma (any buffers) wins on heap buffers only: a list cannot give it to heap calls
    # without giving it to private ones, so heap keeps the model too.
    recs = [c for s in BIG for c in cells_with(s, "heap", ("cma", "hybrid", 50.0))]
    recs += [c for s in BIG for c in cells_with(s, "ordinary", ("cma", "hybrid", 101.0))]
    doc = a2a_doc(recs)
    for size in BIG:
        assert pick(doc, size, "ordinary") == model_pick(size, "ordinary")
        assert pick(doc, size, "heap") == model_pick(size, "heap")
        assert decisions(doc)[size, "heap"].why == "not expressible"
    # pull with streaming stores (heap send buffers only) wins on heap buffers: heap calls
    # take it, private ones keep the model's choice.
    recs = [c for s in BIG for c in cells_with(s, "heap", ("pull", "nt", 50.0))]
    recs += [c for s in BIG for c in cells_with(s, "ordinary")]
    doc = a2a_doc(recs)
    for size in [*BIG, 100_000, 500_000]:
        assert pick(doc, size, "heap")[:3] == ("pull", "shifted", "nt")
        assert pick(doc, size, "ordinary") == model_pick(size, "ordinary")
    # and calls with one buffer in the heap, in place or without CMA keep the model's algorithm
    rows = table.rows_for(doc, "alltoall", P)
    for call in (*build.A2A_UNMEASURED, (False, False, False, False)):
        assert (
            _core.resolve("alltoall", rows, P, 1 << 20, *call)[0]
            == _core.resolve("alltoall", _core.model_table("alltoall", P), P, 1 << 20, *call)[0]
        )


def test_unmeasured_sizes_between_disagreeing_neighbours_fall_back_to_the_model() -> None:
    a, b = ("staging", "temporal", 50.0), ("staging", "nt", 50.0)
    recs = cells_with(64 << 10, "ordinary", a) + cells_with(256 << 10, "ordinary", a)
    recs += cells_with(1 << 20, "ordinary", b) + cells_with(4 << 20, "ordinary", b)
    doc = a2a_doc(recs)
    stores = {
        s: pick(doc, s, "ordinary")[2] for s in (64 << 10, 100_000, 256 << 10, 1 << 20, 2 << 20, 4 << 20)
    }
    assert stores == {
        64 << 10: "temporal",
        100_000: "temporal",  # the same winner at both neighbours
        256 << 10: "temporal",
        1 << 20: "nt",
        2 << 20: "nt",
        4 << 20: "nt",
    }
    for between in ((256 << 10) + 1, 512 << 10, (1 << 20) - 1):
        assert pick(doc, between, "ordinary") == model_pick(between, "ordinary"), between
    for outside in (1 << 10, 63 << 10, (4 << 20) + 1, 64 << 20):
        assert pick(doc, outside, "ordinary") == model_pick(outside, "ordinary"), outside


def test_a_winner_the_table_cannot_run_as_measured_keeps_the_model() -> None:
    # Where the model lists inline, every rank writes its inline payload before arriving;
    # a forced candidate measured without that copy cannot be given to heap calls there.
    rows = _core.model_table("alltoall", P)
    small = next(hi for lo, hi, cands in rows if lo > 0 and any(c[0] == "push" for c in cands))
    assert _core.resolve("alltoall", rows, P, small, False, False, False)[5]  # ranks write inline
    doc = a2a_doc(cells_with(small, "heap", ("pull", "nt", 40.0)))
    assert pick(doc, small, "heap") == model_pick(small, "heap")
    assert decisions(doc)[small, "heap"].why == "not expressible"


def test_a_winner_that_is_the_models_own_choice_changes_nothing() -> None:
    size = 1 << 20
    algo, _, store, _, _ = model_pick(size, "heap")
    doc = a2a_doc(cells_with(size, "heap", (algo, store, 50.0)))
    assert decisions(doc)[size, "heap"].why == "same as the model"
    assert pick(doc, size, "heap") == model_pick(size, "heap")


def test_a_cell_whose_model_failed_keeps_the_model() -> None:
    size = 1 << 20
    cells = cells_with(size, "ordinary", ("staging", "temporal", 10.0))
    cells[0] = {**cells[0], "error": "no samples"}
    doc = a2a_doc(cells)
    assert decisions(doc)[size, "ordinary"].why == "model not measured"
    assert pick(doc, size, "ordinary") == model_pick(size, "ordinary")


# -- the other collectives ------------------------------------------------------------------
def coll_pick(doc: dict[str, Any], op: str, size: int, heap: bool) -> str:
    rows = table.rows_for(doc, op, P)
    assert rows is not None
    return _core.resolve(op, rows, P, size, heap, heap, False, True, True)[0]


def coll_model_pick(op: str, size: int, heap: bool) -> str:
    return _core.resolve(op, _core.model_table(op, P), P, size, heap, heap, False, True, True)[0]


def test_collectives_keep_the_model_unless_a_winner_clears_the_margin() -> None:
    op, size = "allreduce", 1 << 20
    assert coll_model_pick(op, size, True) == "direct" and coll_model_pick(op, size, False) == "cma"
    recs = [rec(size, k, build.MODEL, 100.0, op=op) for k in ("heap", "ordinary")]
    recs += [rec(size, "heap", "direct", 97.0, op=op), rec(size, "heap", "staging", 98.0, op=op)]
    recs += [rec(size, "ordinary", "staging", 70.0, op=op), rec(size, "ordinary", "inline", 99.0, op=op)]
    doc = build.build_document(recs, "quick")
    table.validate(doc, "synthetic")
    assert coll_pick(doc, op, size, True) == "direct"
    assert coll_pick(doc, op, size, False) == "staging"
    # other sizes: the model's rows
    for other in (8, 4096, size - 1, size + 1, 64 << 20):
        for heap in (True, False):
            assert coll_pick(doc, op, other, heap) == coll_model_pick(op, other, heap), (other, heap)
    got = {(o.buffers, o.why) for o in build.decisions_of(doc)}
    assert got == {("heap", "within the spread"), ("ordinary", "faster")}


def test_compressed_is_listed_only_where_it_beats_the_model_and_the_uncompressed_winner() -> None:
    op, size = "allreduce", 1 << 20

    def doc_with(compressed: float, staging: float) -> dict[str, Any]:
        recs = [rec(size, k, build.MODEL, 100.0, op=op) for k in ("heap", "ordinary")]
        recs += [rec(size, "ordinary", "staging", staging, op=op)]
        recs += [rec(size, "ordinary", table.COMPRESSED, compressed, op=op)]
        return build.build_document(recs, "quick")

    def listed(doc: dict[str, Any]) -> bool:
        rows = table.compression_rows_for(doc, op, P)
        assert rows is not None
        return any(on and lo <= size and (hi is None or size <= hi) for lo, hi, on in rows)

    assert listed(doc_with(50.0, 100.0))
    assert not listed(doc_with(97.0, 100.0))  # within the margin
    assert not listed(doc_with(60.0, 40.0))  # the uncompressed winner is faster


# -- property: never slower than the model at a measured cell --------------------------------
A2A_CANDS = [
    (a, s) for a in ("inline", "staging", "pull", "push", "cma", "cma-push") for s in ("hybrid", "nt")
]


@st.composite
def measurements(draw: st.DrawFn) -> list[dict[str, Any]]:
    sizes = draw(
        st.lists(
            st.sampled_from([8, 256, 1024, 4096, 64 << 10, 256 << 10, 1 << 20]),
            min_size=1,
            max_size=5,
            unique=True,
        )
    )
    out = []
    for size, kind in itertools.product(sorted(sizes), ("heap", "ordinary")):
        spread = draw(st.floats(0.0, 30.0))
        out.append(rec(size, kind, build.MODEL, 100.0, spread=draw(st.floats(0.0, 10.0))))
        for a, s in draw(st.lists(st.sampled_from(A2A_CANDS), max_size=6, unique=True)):
            if (kind == "ordinary" and a in build.HEAP_ONLY) or (a == "inline" and size * P > 64 << 10):
                continue
            out.append(rec(size, kind, a, draw(st.floats(20.0, 130.0)), store=s, spread=spread))
    return out


@HYP
@given(measurements())
def test_a_tuned_alltoall_table_never_picks_a_candidate_slower_than_the_model(
    recs: list[dict[str, Any]],
) -> None:
    doc = a2a_doc(recs)
    for size, kind in {(r["bytes"], r["buffers"]) for r in recs}:
        got = pick(doc, size, kind)
        if got == model_pick(size, kind):
            continue
        cell = [r for r in recs if (r["bytes"], r["buffers"]) == (size, kind)]
        model = next(r for r in cell if r["algorithm"] == build.MODEL)["median_us"]
        chosen = [r for r in cell if (r["algorithm"], r["order"], r["store"]) == got[:3]]
        assert chosen, (size, kind, got)  # never a candidate that was not measured there
        assert chosen[0]["median_us"] < 0.95 * model, (size, kind, got, chosen[0], model)


COLL_CANDS = ("inline", "direct", "cma", "staging")


@st.composite
def coll_measurements(draw: st.DrawFn) -> list[dict[str, Any]]:
    sizes = draw(
        st.lists(st.sampled_from([8, 1024, 4096, 32 << 10, 1 << 20]), min_size=1, max_size=4, unique=True)
    )
    out = []
    for size, kind in itertools.product(sorted(sizes), ("heap", "ordinary")):
        out.append(rec(size, kind, build.MODEL, 100.0, op="allreduce", spread=draw(st.floats(0.0, 10.0))))
        for a in draw(st.lists(st.sampled_from(COLL_CANDS), max_size=4, unique=True)):
            if (kind == "ordinary" and a == "direct") or (a == "inline" and size > 64 << 10):
                continue
            out.append(
                rec(
                    size, kind, a, draw(st.floats(20.0, 130.0)), op="allreduce", spread=draw(st.floats(0, 30))
                )
            )
    return out


@HYP
@given(coll_measurements())
def test_a_tuned_collective_table_never_picks_a_candidate_slower_than_the_model(
    recs: list[dict[str, Any]],
) -> None:
    doc = build.build_document(recs, "quick")
    table.validate(doc, "synthetic")
    for size, kind in {(r["bytes"], r["buffers"]) for r in recs}:
        heap = kind == "heap"
        got = coll_pick(doc, "allreduce", size, heap)
        if got == coll_model_pick("allreduce", size, heap):
            continue
        cell = [r for r in recs if (r["bytes"], r["buffers"]) == (size, kind)]
        model = next(r for r in cell if r["algorithm"] == build.MODEL)["median_us"]
        chosen = [r for r in cell if r["algorithm"] == got]
        assert chosen, (size, kind, got)
        assert chosen[0]["median_us"] < 0.95 * model, (size, kind, got, chosen[0], model)


@pytest.mark.parametrize("effort", ["quick", "measure"])
def test_the_model_is_a_candidate_in_every_cell(effort: str) -> None:
    from shmcoll.tuning import tuner

    plan = tuner.Plan(
        P, [8, 1 << 20], tuner.candidates(effort), "", 0, ops=["alltoall", "allreduce"], effort=effort
    )
    cells = plan.cells()
    for op, size, kind in itertools.product(("alltoall", "allreduce"), (8, 1 << 20), ("heap", "ordinary")):
        assert (op, size, kind, build.MODEL, "-", "-") in cells
