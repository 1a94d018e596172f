"""Tuning tables: the schema, lookup (boundaries, gaps, ``"inf"``, overlaps), the lookup
order of table files, corrupted and foreign tables, and what a communicator binds.

Most of this runs in the pytest process without ranks (the format, ``_core.resolve``,
``tuning.lookup.resolve``); what a ``Comm`` binds runs on forked ranks (:func:`run_ranks`).
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import time
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shmcoll
from conftest import (
    ALGORITHMS,
    MPI_SCRIPTS,
    ORDERS,
    STORES,
    private_empty,
    run_mpiexec,
    run_ranks,
    shm_segments,
)
from shmcoll import _core
from shmcoll.errors import ForeignTableWarning, MismatchError, TuningTableError
from shmcoll.tuning import lookup, table

ENV = lookup.ENV_FILE
INF = "inf"
HYP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pytestmark = pytest.mark.timeout(120)


# -- helpers --------------------------------------------------------------------------
def choice(algorithm: str = "staging", order: str = "shifted", store: str = "hybrid", **kw: int) -> dict:
    return {"algorithm": algorithm, "order": order, "store": store, **kw}


def document(entries: list[dict[str, Any]], fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    """A table holding `entries` (each {"nprocs": [lo, hi], "sizes": [...]}) for alltoall."""
    doc = table.new_document("measured", "quick")
    if fingerprint is not None:
        doc["fingerprint"] = fingerprint
    doc["operations"]["alltoall"] = entries
    return doc


def staging_only(order: str = "shifted", store: str = "hybrid") -> dict[str, Any]:
    """One candidate, staging, for every size and every process count."""
    return document(
        [{"nprocs": [1, INF], "sizes": [{"bytes": [0, INF], "choices": [choice("staging", order, store)]}]}]
    )


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc, indent=1))
    return path


def plain(rows: Any) -> Any:
    """Rows (tuples or lists, from Python or the native module) as nested lists."""
    return json.loads(json.dumps(rows))


def entry_rows(entry: dict[str, Any]) -> list[Any]:
    """An entry's Alltoall rows, converted here (not by the reader) so that the native
    checks can be given rows the reader would refuse."""
    return [
        (
            s["bytes"][0],
            None if s["bytes"][1] == INF else s["bytes"][1],
            [
                (
                    c["algorithm"],
                    c.get("order", "shifted"),
                    c.get("store", "hybrid"),
                    c.get("nt_threshold"),
                    c.get("chunk_bytes"),
                )
                for c in s["choices"]
            ],
        )
        for s in sorted(entry["sizes"], key=lambda s: s["bytes"][0])
    ]


def schema_errors(doc: Any) -> list[str]:
    v = jsonschema.Draft202012Validator(table.schema())
    return [e.message for e in v.iter_errors(doc)]


@pytest.fixture
def no_table_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty user and site config directory (so no table file of this machine
    interferes) and no SHMCOLL_TUNING_FILE; returns the config home."""
    home = tmp_path / "config-home"
    sysdir = tmp_path / "config-dirs"
    home.mkdir()
    sysdir.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(sysdir))
    monkeypatch.delenv(ENV, raising=False)
    if Path("/etc/shmcoll/tuning.json").exists():
        pytest.skip("/etc/shmcoll/tuning.json exists on this machine")
    return home


# -- 1. the schema and the embedded default -------------------------------------------
def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(table.schema())


def test_embedded_default_validates() -> None:
    counts = [1, 2, 3, 4, 8]
    doc = table.model_document(counts)
    jsonschema.validate(doc, table.schema(), cls=jsonschema.Draft202012Validator)
    assert schema_errors(doc) == []
    table.validate(doc, "embedded")
    # and it survives a round trip through a file
    assert json.loads(json.dumps(doc)) == doc
    assert doc["fingerprint"] == table.fingerprint()
    assert doc["shmcoll_version"] == shmcoll.__version__
    entries = doc["operations"]["alltoall"]
    assert [e["nprocs"] for e in entries] == [[p, p] for p in counts]
    for p in counts:
        rows = table.rows_for(doc, "alltoall", p)
        assert rows is not None
        assert plain(rows) == plain(_core.model_table("alltoall", p)), p
        # the model covers every size, 0..inf, without gaps, and ends with staging
        nxt = 0
        for lo, hi, cands in rows:
            assert lo == nxt
            assert cands[-1][0] == "staging"
            nxt = None if hi is None else hi + 1
        assert nxt is None, f"the model for {p} ranks does not reach inf"
    assert table.rows_for(doc, "alltoall", 5) is None


def test_model_document_matches_the_schema_required_fingerprint() -> None:
    fp = table.fingerprint()
    required = table.schema()["properties"]["fingerprint"]["required"]
    assert set(required) <= set(fp)


_VALID = staging_only()


def _mutate(path: list[Any], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(_VALID)
    target: Any = doc
    for k in path[:-1]:
        target = target[k]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()
_SIZE0 = ["operations", "alltoall", 0, "sizes", 0]


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (["format"], "fftw-wisdom", "format"),
        (["version"], 2, "version"),
        (["fingerprint"], _DELETE, "(top level)"),
        (["shmcoll_version"], _DELETE, "(top level)"),
        (["operations"], _DELETE, "(top level)"),
        (["surprise"], 1, "(top level)"),
        (["source"], "guessed", "source"),
        (["effort"], "extreme", "effort"),
        (["comment"], 3, "comment"),
        (["measurements"], {}, "measurements"),
        (["decisions"], [1], "decisions/0"),
        (["fingerprint", "simd"], "avx2", "fingerprint/simd"),
        (["fingerprint", "simd"], ["avx2", 1], "fingerprint/simd/1"),
        (["fingerprint", "l3_bytes"], "big", "fingerprint/l3_bytes"),
        (["fingerprint", "logical_cpus"], 0, "fingerprint/logical_cpus"),
        (["operations", "alltoallw"], [], "operations"),
        (["operations", "alltoall", 0, "nprocs"], [1], "operations/alltoall/0/nprocs"),
        (["operations", "alltoall", 0, "surprise"], 1, "operations/alltoall/0"),
        (["operations", "alltoall"], {}, "operations/alltoall"),
        (["operations", "alltoall", 0, "nprocs"], [-1, 4], "operations/alltoall/0/nprocs/0"),
        (["operations", "alltoall", 0, "sizes"], [], "operations/alltoall/0/sizes"),
        ([*_SIZE0, "bytes"], [0, "infinity"], "operations/alltoall/0/sizes/0/bytes/1"),
        ([*_SIZE0, "bytes"], [-5, 10], "operations/alltoall/0/sizes/0/bytes/0"),
        ([*_SIZE0, "bytes"], [0, 1, 2], "operations/alltoall/0/sizes/0/bytes"),
        ([*_SIZE0, "choices"], [], "operations/alltoall/0/sizes/0/choices"),
        ([*_SIZE0, "choices", 0, "algorithm"], _DELETE, "operations/alltoall/0/sizes/0/choices/0"),
        ([*_SIZE0, "choices", 0, "chunk_bytes"], 10, "operations/alltoall/0/sizes/0/choices/0/chunk_bytes"),
        ([*_SIZE0, "choices", 0, "nt_threshold"], -1, "operations/alltoall/0/sizes/0/choices/0/nt_threshold"),
        ([*_SIZE0, "choices", 0, "colour"], "red", "operations/alltoall/0/sizes/0/choices/0"),
    ],
    ids=lambda v: "/".join(map(str, v)) if isinstance(v, list) else None,
)
def test_schema_rejects(path: list[Any], value: Any, where: str) -> None:
    """The schema itself (jsonschema, directly) and table.validate reject each defect, and
    the error names the file and the entry."""
    assert schema_errors(_VALID) == []
    doc = _mutate(path, value)
    assert schema_errors(doc), f"the schema accepts {path}={value!r}"
    with pytest.raises(TuningTableError) as ei:
        table.validate(doc, "/some/dir/table.json")
    msg = str(ei.value)
    assert msg.startswith("/some/dir/table.json: "), msg
    assert f"entry {where}:" in msg, msg


# -- 2. lookup edge cases (hypothesis) -------------------------------------------------
_gap = st.one_of(st.sampled_from([0, 0, 1, 2, 63]), st.integers(0, 1 << 20))
_len = st.one_of(st.sampled_from([0, 0, 1, 7]), st.integers(0, 1 << 22))


@st.composite
def block_ranges(draw: st.DrawFn, min_size: int = 1) -> list[tuple[int, int | None]]:
    """Disjoint (lo, hi) ranges in increasing order, with gaps of any width (0 included),
    single-byte ranges, and an optional "inf" upper bound on the last."""
    n = draw(st.integers(min_size, 8))
    out: list[tuple[int, int | None]] = []
    nxt = 0
    for _ in range(n):
        lo = nxt + draw(_gap)
        hi = lo + draw(_len)
        out.append((lo, hi))
        nxt = hi + 1
    if draw(st.booleans()):
        out[-1] = (out[-1][0], None)
    return out


def _tag(i: int) -> dict[str, Any]:
    """A staging candidate (it serves every call) whose parameters identify range i."""
    return choice(
        "staging",
        ORDERS[i % len(ORDERS)],
        STORES[i % len(STORES)],
        nt_threshold=100_000 + i,
        chunk_bytes=4096 + 64 * i,
    )


def _entry(ranges: list[tuple[int, int | None]], nprocs: list[Any]) -> dict[str, Any]:
    return {
        "nprocs": nprocs,
        "sizes": [
            {"bytes": [lo, INF if hi is None else hi], "choices": [_tag(i)]}
            for i, (lo, hi) in enumerate(ranges)
        ],
    }


def _probes(ranges: list[tuple[int, int | None]], extra: list[int]) -> list[int]:
    out = set(extra) | {0, 1, (1 << 63) + 5, (1 << 64) - 1}
    for lo, hi in ranges:
        out |= {lo, lo + 1, max(lo - 1, 0)}
        if hi is not None:
            out |= {hi, hi + 1, max(hi - 1, 0)}
    return sorted(out)


@HYP
@given(
    ranges=block_ranges(),
    nprocs=st.integers(1, 9),
    shuffle=st.randoms(use_true_random=False),
    extra=st.lists(st.integers(0, 1 << 40), max_size=5),
)
def test_lookup_picks_the_range_holding_the_size(
    ranges: list[tuple[int, int | None]], nprocs: int, shuffle: random.Random, extra: list[int]
) -> None:
    """Boundaries are inclusive, sizes in gaps (and above a finite last range) fall to the
    model, "inf" reaches every size; the order of ranges in the file does not matter."""
    entry = _entry(ranges, [nprocs, nprocs])
    tagged = list(zip(ranges, entry["sizes"], strict=True))
    shuffle.shuffle(entry["sizes"])
    doc = document([entry])
    table.validate(doc, "hyp.json")
    rows = table.rows_for(doc, "alltoall", nprocs)
    assert rows is not None
    assert table.rows_for(doc, "alltoall", nprocs + 1) is None
    _core.check_table("alltoall", rows)
    model = _core.model_table("alltoall", nprocs)
    tags = {s["choices"][0]["chunk_bytes"] for _, s in tagged}
    for size in _probes(ranges, extra):
        got = _core.resolve("alltoall", rows, nprocs, size, False, False, False)
        holding = [s for (lo, hi), s in tagged if lo <= size and (hi is None or size <= hi)]
        assert len(holding) <= 1
        if holding:
            c = holding[0]["choices"][0]
            want = (c["algorithm"], c["order"], c["store"], c["nt_threshold"], c["chunk_bytes"])
            assert got[:5] == want, (size, ranges)
        else:
            assert got == _core.resolve("alltoall", model, nprocs, size, False, False, False), (size, ranges)
            assert got[4] not in tags, (size, ranges)


@st.composite
def procs_ranges(draw: st.DrawFn) -> list[tuple[int, int | None]]:
    n = draw(st.integers(1, 6))
    out: list[tuple[int, int | None]] = []
    nxt = 1
    for _ in range(n):
        lo = nxt + draw(st.integers(0, 3))
        hi = lo + draw(st.integers(0, 4))
        out.append((lo, hi))
        nxt = hi + 1
    if draw(st.booleans()):
        out[-1] = (out[-1][0], None)
    return out


@HYP
@given(spans=procs_ranges(), shuffle=st.randoms(use_true_random=False))
def test_nprocs_lookup_boundaries_gaps_and_inf(
    spans: list[tuple[int, int | None]], shuffle: random.Random
) -> None:
    entries = []
    for i, (lo, hi) in enumerate(spans):
        e = _entry([(0, None)], [lo, INF if hi is None else hi])
        e["sizes"][0]["choices"] = [_tag(i)]
        entries.append(e)
    order = list(range(len(entries)))
    shuffle.shuffle(order)
    doc = document([entries[i] for i in order])
    table.validate(doc, "hyp.json")
    top = max(lo if hi is None else hi for lo, hi in spans) + 3
    for p in [*range(1, top), 1 << 20]:
        holding = [i for i, (lo, hi) in enumerate(spans) if lo <= p and (hi is None or p <= hi)]
        rows = table.rows_for(doc, "alltoall", p)
        if holding:
            assert rows is not None, p
            assert plain(rows) == plain(entry_rows(entries[holding[0]])), p
        else:
            assert rows is None, p
    assert table.rows_for(doc, "alltoallv", spans[0][0]) is None


@HYP
@given(ranges=block_ranges(), data=st.data())
def test_overlapping_block_ranges_are_rejected(
    ranges: list[tuple[int, int | None]], data: st.DataObject
) -> None:
    lo, hi = data.draw(st.sampled_from(ranges))
    # a range that shares at least one size with (lo, hi)
    top = lo + (1 << 30) if hi is None else hi
    a = data.draw(st.integers(max(lo - 100, 0), top))
    b_min = max(a, lo)
    b = data.draw(st.one_of(st.none(), st.integers(b_min, b_min + (1 << 20))))
    bad = (a, b)
    assert a <= top and (b is None or b >= lo)
    entry = _entry([*ranges, bad], [2, 2])
    random.Random(data.draw(st.integers(0, 1000))).shuffle(entry["sizes"])
    pos = data.draw(st.integers(0, 2))
    entries = [_entry([(0, None)], [p, p]) for p in (1, 3)]
    entries.insert(pos, entry)
    doc = document(entries)
    assert schema_errors(doc) == []
    with pytest.raises(TuningTableError) as ei:
        table.validate(doc, "/tables/overlap.json")
    msg = str(ei.value)
    assert msg.startswith("/tables/overlap.json: entry "), msg
    assert f"operations/alltoall/{pos}/sizes" in msg, msg
    assert "overlap" in msg, msg
    with pytest.raises(shmcoll.ArgumentError, match="overlap"):
        _core.check_table("alltoall", entry_rows(entry))
    with pytest.raises(shmcoll.ArgumentError, match="overlap"):
        _core.resolve("alltoall", entry_rows(entry), 2, 0, False, False, False)


@HYP
@given(spans=procs_ranges(), data=st.data())
def test_overlapping_nprocs_ranges_are_rejected(
    spans: list[tuple[int, int | None]], data: st.DataObject
) -> None:
    lo, hi = data.draw(st.sampled_from(spans))
    top = lo + 50 if hi is None else hi
    a = data.draw(st.integers(max(lo - 3, 1), top))
    b_min = max(a, lo)
    b = data.draw(st.one_of(st.none(), st.integers(b_min, b_min + 5)))
    entries = [_entry([(0, None)], [x, INF if y is None else y]) for x, y in spans]
    j = data.draw(st.integers(0, len(entries)))
    entries.insert(j, _entry([(0, None)], [a, INF if b is None else b]))
    doc = document(entries)
    assert schema_errors(doc) == []
    with pytest.raises(TuningTableError) as ei:
        table.validate(doc, "/tables/procs.json")
    msg = str(ei.value)
    assert msg.startswith("/tables/procs.json: entries "), msg
    assert re.search(rf"operations/alltoall/{j}(?!\d)", msg), (j, msg)
    assert "process-count ranges overlap" in msg, msg


@HYP
@given(lo=st.integers(0, 1 << 40), shrink=st.integers(1, 1 << 20), pos=st.integers(0, 3))
def test_empty_block_ranges_are_rejected(lo: int, shrink: int, pos: int) -> None:
    hi = max(lo - shrink, 0)
    if hi >= lo:
        lo = hi + 1
    sizes = [{"bytes": [k * 10, k * 10 + 9], "choices": [choice()]} for k in range(3)]
    sizes = [s for s in sizes if not (lo <= s["bytes"][1] and s["bytes"][0] <= lo)]
    sizes.insert(min(pos, len(sizes)), {"bytes": [lo, hi], "choices": [choice()]})
    doc = document([{"nprocs": [2, 2], "sizes": sizes}])
    with pytest.raises(TuningTableError) as ei:
        table.validate(doc, "/tables/empty.json")
    msg = str(ei.value)
    assert msg.startswith("/tables/empty.json: entry operations/alltoall/0/sizes"), msg
    assert "empty" in msg and f"{lo}..{hi}" in msg, msg


@pytest.mark.parametrize("nprocs", [[3, 2], [0, 4], [0, 0], [5, 1]])
def test_empty_or_invalid_nprocs_ranges_are_rejected(nprocs: list[int]) -> None:
    doc = document([_entry([(0, None)], [1, 1]), _entry([(0, None)], nprocs)])
    with pytest.raises(TuningTableError) as ei:
        table.validate(doc, "/tables/np.json")
    msg = str(ei.value)
    assert msg.startswith("/tables/np.json: entry operations/alltoall/1/nprocs"), msg


_KNOWN = {"algorithm": set(ALGORITHMS), "order": set(ORDERS), "store": set(STORES)}
_ALIASES = {
    "algorithm": set(),
    "order": {"xor-pairwise", "pairwise", "tiled", "z", "reverse", "reverse-shift", "shift"},
    "store": {"non-temporal", "nontemporal"},
}


@HYP
@given(
    key=st.sampled_from(sorted(_KNOWN)),
    data=st.data(),
    k=st.integers(0, 2),
    c=st.integers(0, 2),
)
def test_unknown_names_are_rejected(key: str, data: st.DataObject, k: int, c: int) -> None:
    name = data.draw(
        st.one_of(
            st.sampled_from(["", "Staging", "staging ", "cma_push", "nontemporal", "auto", "xor2"]),
            st.text(max_size=12),
        ).filter(lambda s: s not in _KNOWN[key])
    )
    sizes = [
        {
            "bytes": [i * 100, i * 100 + 99],
            "choices": [choice(), choice("staging", "xor"), choice("staging", "linear", "nt")],
        }
        for i in range(3)
    ]
    sizes[k]["choices"][c][key] = name
    doc = document([_entry([(0, None)], [1, 1]), {"nprocs": [2, 2], "sizes": sizes}])
    assert schema_errors(doc) == []
    with pytest.raises(TuningTableError) as ei:
        table.validate(doc, "/tables/names.json")
    msg = str(ei.value)
    assert msg.startswith(
        f"/tables/names.json: entry operations/alltoall/1/sizes/{k}/choices/{c}/{key}: unknown {key}"
    ), msg
    assert repr(name) in msg, msg
    # the native module is lenient (case, "_" for "-", aliases like "pairwise", as for the
    # environment variables) but rejects anything else; files must spell names exactly
    lenient = name.strip().lower().replace("_", "-")
    if lenient not in _KNOWN[key] | _ALIASES[key]:
        with pytest.raises(shmcoll.ArgumentError, match="unknown"):
            _core.check_table("alltoall", entry_rows(doc["operations"]["alltoall"][1]))


def test_every_registered_name_is_accepted() -> None:
    sizes = []
    i = 0
    for a in ALGORITHMS:
        for o in ORDERS:
            for s in STORES:
                sizes.append({"bytes": [i, i], "choices": [choice(a, o, s), choice()]})
                i += 1
    doc = document([{"nprocs": [1, INF], "sizes": sizes}])
    table.validate(doc, "all.json")
    for p in (1, 2, 4):
        rows = table.rows_for(doc, "alltoall", p)
        assert rows is not None
        for size, (a, o, s) in enumerate((a, o, s) for a in ALGORITHMS for o in ORDERS for s in STORES):
            got = _core.resolve("alltoall", rows, p, size, True, True, False)
            # every algorithm except inline serves heap buffers on every rank; inline only
            # when the payload fits (always, for these sizes)
            assert got[:3] == (a, o, s), (p, size, got)


# -- 3. lookup order ------------------------------------------------------------------
def test_lookup_order(no_table_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = no_table_files
    r = lookup.resolve("alltoall", 2)
    assert (r.source, r.origin, r.covered) == ("model", "model", True)
    assert plain(r.rows) == plain(_core.model_table("alltoall", 2))

    system = Path(os.environ["XDG_CONFIG_DIRS"]) / "shmcoll" / "tuning.json"
    system.parent.mkdir(parents=True)
    write(system, staging_only("linear", "nt"))
    assert lookup.system_files()[0] == system
    r = lookup.resolve("alltoall", 2)
    assert (r.source, r.origin) == (str(system), "system")
    assert r.rows[0][2][0][:3] == ("staging", "linear", "nt")

    user = home / "shmcoll" / "tuning.json"
    user.parent.mkdir(parents=True)
    write(user, staging_only("xor", "temporal"))
    assert lookup.user_file() == user
    r = lookup.resolve("alltoall", 2)
    assert (r.source, r.origin) == (str(user), "user")
    assert r.rows[0][2][0][:3] == ("staging", "xor", "temporal")

    env = write(tmp_path / "env.json", staging_only("morton", "hybrid"))
    monkeypatch.setenv(ENV, str(env))
    r = lookup.resolve("alltoall", 2)
    assert (r.source, r.origin) == (str(env), "environment")
    assert r.rows[0][2][0][:3] == ("staging", "morton", "hybrid")

    for none in ("none", "NONE", " none "):
        monkeypatch.setenv(ENV, none)
        r = lookup.resolve("alltoall", 2)
        assert (r.source, r.origin) == ("model", "model"), none
    monkeypatch.setenv(ENV, "")  # empty: as if unset
    assert lookup.resolve("alltoall", 2).origin == "user"
    # `~/` in the variable is the home directory, as a shell would expand it.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(ENV, "~/env.json")
    assert lookup.find_file() == (env, "environment")
    # Without XDG_CONFIG_HOME the user file is under the home's .config.
    monkeypatch.delenv(ENV)
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert lookup.user_file() == tmp_path / ".config" / "shmcoll" / "tuning.json"


def test_a_file_that_does_not_cover_the_count_falls_back_to_the_model(
    no_table_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "t.json", document([_entry([(0, None)], [2, 3])]))
    monkeypatch.setenv(ENV, str(path))
    assert lookup.resolve("alltoall", 3).source == str(path)
    r = lookup.resolve("alltoall", 4)
    assert (r.source, r.origin, r.covered) == ("model", "environment", False)
    assert plain(r.rows) == plain(_core.model_table("alltoall", 4))


# -- 4. corrupted files ---------------------------------------------------------------
def _valid_text() -> str:
    return json.dumps(staging_only(), indent=1)


def _without(key: str) -> str:
    doc = staging_only()
    del doc[key]
    return json.dumps(doc)


def _with(key: str, value: Any) -> str:
    doc = staging_only()
    doc[key] = value
    return json.dumps(doc)


CORRUPT: dict[str, bytes] = {
    "not-json": b"this is not a tuning table\n",
    "empty": b"",
    "truncated": _valid_text()[: len(_valid_text()) // 2].encode(),
    "truncated-at-end": _valid_text()[:-2].encode(),
    "binary": b"\xff\xfe\x00\x81garbage\x00",
    "a-list": b"[]",
    "wrong-format": _with("format", "ompi-tuned-rules").encode(),
    "wrong-version": _with("version", 99).encode(),
    "missing-fingerprint": _without("fingerprint").encode(),
    "unknown-algorithm": json.dumps(
        document([{"nprocs": [1, INF], "sizes": [{"bytes": [0, INF], "choices": [choice("hint")]}]}])
    ).encode(),
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_corrupted_table_load(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"corrupt-{kind}.json"
    path.write_bytes(CORRUPT[kind])
    with pytest.raises(TuningTableError) as ei:
        table.load(path)
    assert str(path) in str(ei.value), str(ei.value)
    assert isinstance(ei.value, shmcoll.ShmcollError) and isinstance(ei.value, ValueError)


def _comm_outcome() -> dict[str, Any]:
    """Create a Comm; report the exception (or the bound table)."""
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            comm = shmcoll.Comm()
    except Exception as e:
        return {"exc": type(e).__name__, "msg": str(e), "mro": [c.__name__ for c in type(e).__mro__]}
    source, rows = comm.selection()
    comm.Free()
    return {
        "exc": None,
        "source": source,
        "rows": plain(rows),
        "warnings": [(x.category.__name__, str(x.message)) for x in w],
    }


def _check_every_rank_raised(results: list[dict[str, Any]], path: Path) -> None:
    for rank, out in enumerate(results):
        assert out["exc"] == "TuningTableError", (rank, out)
        assert "ShmcollError" in out["mro"]
        assert str(path) in out["msg"], (rank, out)


@pytest.mark.parametrize(
    "kind",
    [
        "not-json",
        "truncated",
        "wrong-format",
        "wrong-version",
        "missing-fingerprint",
        "binary",
        "unknown-algorithm",
    ],
)
def test_corrupted_table_fails_comm_creation_on_every_rank(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / f"corrupt-{kind}.json"
    path.write_bytes(CORRUPT[kind])
    before = shm_segments()
    results = run_ranks(2, _comm_outcome, env={ENV: str(path)}, timeout=30)
    _check_every_rank_raised(results, path)
    assert shm_segments() - before == set()
    # `shmcoll explain` and everything else that resolves the table says the same
    monkeypatch.setenv(ENV, str(path))
    with pytest.raises(TuningTableError, match=re.escape(str(path))):
        lookup.resolve("alltoall", 2)


def test_missing_table_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "no-such-table.json"
    results = run_ranks(3, _comm_outcome, env={ENV: str(path)}, timeout=30)
    _check_every_rank_raised(results, path)
    monkeypatch.setenv(ENV, str(path))
    with pytest.raises(TuningTableError, match="does not exist"):
        lookup.resolve("alltoall", 2)
    monkeypatch.setenv(ENV, str(tmp_path))  # a directory is not a table either
    with pytest.raises(TuningTableError, match=re.escape(str(tmp_path))):
        lookup.resolve("alltoall", 2)


def test_tuning_file_none_binds_the_model(tmp_path: Path) -> None:
    results = run_ranks(2, _comm_outcome, env={ENV: "none"}, timeout=30)
    for out in results:
        assert out["exc"] is None, out
        assert out["source"] == "model"
        assert out["rows"] == plain(_core.model_table("alltoall", 2))
        assert out["warnings"] == []


def _bind_per_rank(paths: list[str]) -> dict[str, Any]:
    os.environ[ENV] = paths[int(os.environ["SHMCOLL_RANK"])]
    return _comm_outcome()


def test_ranks_binding_different_tables_all_raise(tmp_path: Path) -> None:
    path = write(tmp_path / "staging.json", staging_only())
    results = run_ranks(2, _bind_per_rank, [str(path), "none"], timeout=30)
    for rank, out in enumerate(results):
        assert out["exc"] == MismatchError.__name__, (rank, out)
        assert ENV in out["msg"]


def _timed_bind_per_rank(paths: list[str]) -> dict[str, Any]:
    """`_bind_per_rank`, with how long creation took and a PeerRejectedError's rank."""
    os.environ[ENV] = paths[int(os.environ["SHMCOLL_RANK"])]
    t0 = time.monotonic()
    try:
        shmcoll.Comm().Free()
        out: dict[str, Any] = {"exc": None}
    except Exception as e:
        out = {"exc": type(e).__name__, "msg": str(e), "mro": [c.__name__ for c in type(e).__mro__]}
        out["rank"] = getattr(e, "rank", None)
    out["seconds"] = time.monotonic() - t0
    return out


@pytest.mark.parametrize("bad", ["broken", "missing", "unknown-home"])
def test_a_table_failing_on_one_rank_fails_every_rank_at_once(bad: str, tmp_path: Path) -> None:
    """A rank whose table file is broken or missing (or names a home that does not exist)
    used to raise before the ranks compared their tables, leaving its peers to wait the
    whole SHMCOLL_TIMEOUT and raise a timeout that named nothing. It now takes part in the
    comparison: it raises its TuningTableError, every peer at once a PeerRejectedError
    naming it and the file."""
    path = {
        "broken": tmp_path / "broken.json",
        "missing": tmp_path / "no-such-table.json",
        "unknown-home": Path("~no-such-user-shmcoll/tuning.json"),
    }[bad]
    if bad == "broken":
        path.write_bytes(CORRUPT["truncated"])
    results = run_ranks(3, _timed_bind_per_rank, ["none", str(path), "none"], timeout=60)
    assert results[1]["exc"] == "TuningTableError", results
    assert str(path) in results[1]["msg"], results
    for rank in (0, 2):
        out = results[rank]
        assert out["exc"] == "PeerRejectedError", (rank, out)
        assert "ShmcollError" in out["mro"] and out["rank"] == 1, (rank, out)
        assert out["msg"].startswith("rank 1 could not bind its tuning tables: TuningTableError: "), out
        assert str(path) in out["msg"], out
    for out in results:
        assert out["seconds"] < 10, results  # at once, not after SHMCOLL_TIMEOUT


@pytest.mark.mpi
def test_a_table_failing_on_one_rank_fails_every_rank_under_mpiexec(tmp_path: Path) -> None:
    """The same over MPI (the creation exchange path): the reviewer's case, a broken file on
    rank 0 and none on rank 1."""
    path = tmp_path / "broken.json"
    path.write_bytes(CORRUPT["not-json"])
    proc = run_mpiexec(2, MPI_SCRIPTS / "per_rank_env.py", ENV, str(path), "none", timeout=40, check=False)
    got = dict(re.findall(r"@@rank (\d+): (.*?)@@", proc.stdout))
    assert got.get("0", "").startswith(f"ERR TuningTableError: {path}"), proc.stdout + proc.stderr
    assert got.get("1", "").startswith("ERR PeerRejectedError: rank 0 could not bind its tuning tables"), got
    assert str(path) in got["1"] and got["1"].endswith("[rank=0]"), got


def _digests() -> list[str]:
    """The binding digest of a fresh communicator, after one family's table changes, and
    after the compressed ranges change."""
    comm = shmcoll.Comm()
    out = [lookup.digest(comm).tobytes().hex()]
    comm._set_table("Bcast", [(0, None, [table.choice("staging")])], "test")
    out.append(lookup.digest(comm).tobytes().hex())
    comm._compression = {"bcast": [(0, None, True)]}
    out.append(lookup.digest(comm).tobytes().hex())
    comm.Free()
    return out


def test_the_binding_digest_is_the_engines_and_sees_every_table(tmp_path: Path) -> None:
    """lookup.digest is the engine's (the PMPI library compares its table part): equal on
    ranks that bound the same, changed by any family's table and by the compressed ranges
    (which only Python consults)."""
    results = run_ranks(2, _digests, env={ENV: "none"}, timeout=30)
    assert results[0] == results[1]
    assert len(set(results[0])) == 3, results[0]


# -- 5. foreign fingerprints ----------------------------------------------------------
def _foreign(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    fp = dict(doc["fingerprint"])
    fp["model_name"] = "Imaginary CPU 9000"
    fp["l3_bytes"] = 2 * fp["l3_bytes"] + 1
    fp["simd"] = ["neon"]
    doc["fingerprint"] = fp
    return doc


def _two_ranges() -> dict[str, Any]:
    """staging/xor/temporal up to 1 KiB, staging/reverse-shifted/nt above (neither is the
    model's choice for ordinary buffers)."""
    return document(
        [
            {
                "nprocs": [1, INF],
                "sizes": [
                    {"bytes": [0, 1024], "choices": [choice("staging", "xor", "temporal"), choice()]},
                    {"bytes": [1025, INF], "choices": [choice("staging", "reverse-shifted", "nt")]},
                ],
            }
        ]
    )


def test_foreign_table_warns_and_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "foreign.json", _foreign(_two_ranges()))
    table.load(path)  # valid: only the hardware differs
    monkeypatch.setenv(ENV, str(path))
    with pytest.warns(ForeignTableWarning) as rec:
        r = lookup.resolve("alltoall", 2)
    msg = str(rec[0].message)
    assert str(path) in msg and "model_name" in msg and "Imaginary CPU 9000" in msg, msg
    assert (r.source, r.origin) == (str(path), "environment")
    assert plain(r.rows) == plain(table.rows_for(_two_ranges(), "alltoall", 2))


def test_own_fingerprint_does_not_warn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _two_ranges()
    doc["fingerprint"]["simd"] = list(reversed(doc["fingerprint"]["simd"]))  # order is irrelevant
    path = write(tmp_path / "own.json", doc)
    monkeypatch.setenv(ENV, str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lookup.resolve("alltoall", 2).source == str(path)


def _foreign_in_ranks() -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        comm = shmcoll.Comm()
    source, rows = comm.selection()
    p = comm.size
    out: dict[str, Any] = {
        "warnings": [x.category.__name__ for x in w],
        "source": source,
        "rows": plain(rows),
    }
    choices = {}
    for n in (64, 1024, 1025, 70_000):
        s = np.ones(p * n, np.uint8)
        r = np.zeros(p * n, np.uint8)
        comm.Alltoall(s, r)
        c = comm.last_choice()
        choices[n] = None if c is None else list(c)
    out["choices"] = choices
    comm.Free()
    return out


def test_foreign_table_is_bound_by_comm(tmp_path: Path) -> None:
    path = write(tmp_path / "foreign-ranks.json", _foreign(_two_ranges()))
    results = run_ranks(2, _foreign_in_ranks, env={ENV: str(path)}, timeout=30)
    for out in results:
        assert "ForeignTableWarning" in out["warnings"], out
        assert out["source"] == str(path)
        rows = out["rows"]
        first_small, first_large = rows[0][2][0], rows[1][2][0]
        assert first_small[:3] == ["staging", "xor", "temporal"]
        assert first_large[:3] == ["staging", "reverse-shifted", "nt"]
        for n in (64, 1024):
            assert out["choices"][n] == [*first_small[:3], False], (n, out["choices"])
        for n in (1025, 70_000):
            assert out["choices"][n] == [*first_large[:3], False], (n, out["choices"])


# -- 6. a table changes what a Comm selects; forcing still wins -------------------------
def _selection_probe() -> dict[str, Any]:
    comm = shmcoll.Comm()
    p = comm.size
    out: dict[str, Any] = {"source": comm.selection()[0], "cma_ok": comm.cma_ok}
    for kind, n in (("heap", 4096), ("ordinary", 64), ("ordinary", 70_000), ("heap", 70_000)):
        if kind == "heap":
            s, r = comm.empty(p * n, np.uint8), comm.empty(p * n, np.uint8)
        else:
            s, r = private_empty(p * n, np.uint8), private_empty(p * n, np.uint8)
        s[:] = comm.rank
        comm.Alltoall(s, r)
        assert (r.reshape(p, n) == np.arange(p, dtype=np.uint8)[:, None]).all()
        out[f"{kind}-{n}"] = list(comm.last_choice())
        del s, r
    s, r = np.ones(p * 64, np.uint8), np.zeros(p * 64, np.uint8)
    comm.Alltoall(s, r, algorithm="inline", order="xor")
    out["forced-call"] = list(comm.last_choice())
    comm.Free()
    return out


def test_a_table_changes_the_selection_and_forcing_wins(tmp_path: Path) -> None:
    path = write(tmp_path / "staging.json", staging_only("reverse-shifted", "temporal"))
    model = run_ranks(2, _selection_probe, env={ENV: "none"}, timeout=30)
    tuned = run_ranks(2, _selection_probe, env={ENV: str(path)}, timeout=30)
    rows = _core.model_table("alltoall", 2)
    for rank in range(2):
        m, t = model[rank], tuned[rank]
        assert m["source"] == "model" and t["source"] == str(path)
        for key in ("heap-4096", "ordinary-64", "ordinary-70000", "heap-70000"):
            kind, n = key.split("-")
            heap = kind == "heap"
            want = _core.resolve("alltoall", rows, 2, int(n), heap, heap, False, m["cma_ok"])
            assert m[key][:3] == list(want[:3]), (key, m[key], want)
            assert t[key] == ["staging", "reverse-shifted", "temporal", False], (key, t[key])
        # the model picks a single-copy or inline algorithm where the table says staging
        assert m["heap-4096"][0] != "staging" and m["ordinary-64"][0] != "staging", m
        assert t["forced-call"][:2] == ["inline", "xor"] and t["forced-call"][3] is True, t
    forced_env = run_ranks(
        2,
        _selection_probe,
        env={ENV: str(path), "SHMCOLL_ALLTOALL_ORDER": "linear", "SHMCOLL_ALLTOALL_STORE": "nt"},
        timeout=30,
    )
    for out in forced_env:
        # forcing the order and store keeps the table's algorithm
        for key in ("heap-4096", "ordinary-64", "ordinary-70000", "heap-70000"):
            assert out[key][:3] == ["staging", "linear", "nt"], (key, out)
        assert out["forced-call"][:3] == ["inline", "xor", "nt"], out
