"""The documentation a new engineer reads first stays whole: every relative link in the
README and docs/ reaches a file of the repository (and, with a #fragment, a heading of
that file, by GitHub's anchor rule), the README stays short enough to read, and the
architecture map exists. Links are the part of documentation that breaks silently when a
file or heading is renamed, so they are checked like code. The measured tables of the
results pages (the collectives, Alltoall and the PMPI library) are blocks that
bench/results.py rewrites: each keeps its markers, the command and the machine, and
rewriting touches nothing else; and the results pages are current tables, not a diary, so
no heading there names a session."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 160

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation but hyphens dropped, spaces to
    hyphens."""
    text = heading.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {anchor(h) for h in _HEADING.findall(text)}


def links(page: Path) -> list[str]:
    """The link targets of `page` outside code blocks, web addresses left out."""
    text = _FENCE.sub("", page.read_text())
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT) or not dest.exists():
            broken.append(f"{target}: no such file in the repository")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_anchor_follows_githubs_rule() -> None:
    assert anchor("Where arrays live") == "where-arrays-live"
    assert anchor("`shmcoll run -n N`") == "shmcoll-run--n-n"
    assert anchor("A barrier releases CPU-mates in rank order; Bcast non-roots spin") == (
        "a-barrier-releases-cpu-mates-in-rank-order-bcast-non-roots-spin"
    )


def test_readme_is_short_and_the_architecture_map_exists() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    assert (ROOT / "docs" / "architecture.md").is_file()
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()


# -- generated result tables (bench/results.py) ---------------------------------------------
def _results_script() -> Any:
    spec = importlib.util.spec_from_file_location("bench_results", ROOT / "bench" / "results.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


RESULTS_PAGES = ("results-alltoall.md", "results-collectives.md", "results-pmpi.md")
#: A heading that dates its section by the work that produced it ("Re-measured in the
#: twelfth session"): the results pages state what is current, and git keeps the history.
_DIARY = re.compile(r"\bsessions?\b|\bre-?measured\b", re.I)


def test_the_results_pages_are_all_listed_and_none_has_a_diary_heading() -> None:
    pages = sorted(p.name for p in (ROOT / "docs").glob("results-*.md"))
    assert pages == sorted(RESULTS_PAGES), "a new results page: add it to RESULTS_PAGES"
    diary = [
        f"{page}: {h}"
        for page in pages
        for h in _HEADING.findall(_FENCE.sub("", (ROOT / "docs" / page).read_text()))
        if _DIARY.search(h)
    ]
    assert not diary, "headings that name a session or a re-measurement: " + "; ".join(diary)


def test_a_diary_heading_is_caught() -> None:
    for heading in ("Re-measured in the twelfth session (2026-12-02)", "Sixth session", "Remeasured"):
        assert _DIARY.search(heading), heading
    for heading in (
        "The other collectives (np=2, informational)",
        "Measurements that concern every collective",
    ):
        assert not _DIARY.search(heading), heading


def test_every_generated_block_has_its_markers_command_and_machine() -> None:
    results = _results_script()
    found: dict[str, str] = {}
    for page in RESULTS_PAGES:
        text = (ROOT / "docs" / page).read_text()
        assert text.count("<!-- generated: ") == text.count(results.END), page
        for name, content in results.blocks_of(text):
            assert name not in found, f"block {name!r} in {page} and {found[name]}"
            found[name] = page
            first, second, *_ = content.splitlines()
            block = next(b for b in results.BLOCKS if b.name == name)
            runs = "bench/pmpi_bench.sh -m " if block.draw == "pmpi" else "shmcoll bench "
            assert first.startswith(f"Command: `python bench/results.py --run '{name}'` (runs `"), first
            assert runs in first, first
            assert second.startswith("Machine: "), second
            assert any(line.startswith("| ") or line.startswith("|-") for line in content.splitlines()), name
    assert found == {b.name: b.page for b in results.BLOCKS}


def _prose(results: Any, text: str) -> str:
    """`text` with every generated block's content left out."""
    return results.rewrite(text, {name: "" for name, _ in results.blocks_of(text)})


@pytest.mark.parametrize("page", RESULTS_PAGES)
def test_the_rewriter_is_idempotent_and_leaves_the_prose(page: str) -> None:
    results = _results_script()
    text = (ROOT / "docs" / page).read_text()
    blocks = results.blocks_of(text)
    assert results.rewrite(text, dict(blocks)) == text
    new = {name: f"Command: x\nMachine: y\n\n| {name} |\n\n" for name, _ in blocks}
    once = results.rewrite(text, new)
    assert once != text
    assert results.rewrite(once, new) == once
    assert dict(results.blocks_of(once)) == new
    assert _prose(results, once) == _prose(results, text)


_MPI_LABEL = {"mpich": "MPICH 5.0.2", "openmpi": "Open MPI 5.0.11"}
_VARIANTS = ("shmcoll", "shmcoll before", "shmcoll heap", "shmcoll private")


def _fake_launch(where: Path, stem: str, op: str, mpi: str, nranks: int, sizes: tuple[int, ...]) -> None:
    """A CSV as `shmcoll bench --csv` writes it (MPI at 4 µs a byte-doubling, each variant
    faster) and the machine record `shmcoll bench machine --json` leaves beside it."""
    with (where / f"{stem}.csv").open("w") as f:
        f.write("op,nranks,bytes,variant,median_us,p90_us,valid,error\n")
        for k, size in enumerate(sizes):
            f.write(f"{op},{nranks},{size},{_MPI_LABEL[mpi]},{4.0 * (k + 1)},,True,\n")
            for i, v in enumerate(_VARIANTS):
                f.write(f"{op},{nranks},{size},{v},{(k + 1) * (1.0 + i / 4)},,True,\n")
    record = {"cpus": 2, "handoff_us": 1.5, "line_ns": 40.0, "write_1cpu_gbs": 10.0, "write_all_gbs": 20.0,
              "when": "2026-12-07T12:00:00Z", "cache_bytes": 1 << 25}  # fmt: skip
    (where / f"{stem}.machine.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    "name",
    # one block of each drawing: medians (one launch, and five), MPIs side by side, the
    # ratio pair, default_md's tables, ordinary against heap
    [
        "gather np2",
        "allreduce np4 heap mpich",
        "allreduce np2 private",
        "allreduce np2 heap",
        "alltoall np2 mpich",
        "collectives np2 ordinary vs heap",
    ],
)
def test_a_block_is_generated_from_its_launches_csv_and_machine_record(tmp_path: Path, name: str) -> None:
    """What `bench/results.py` writes for a block (here from CSVs made up in the format
    `shmcoll bench --csv` writes): the command that ran, each launch's machine record, the
    table with a row per size; the page around it unchanged."""
    results = _results_script()
    block = next(b for b in results.BLOCKS if b.name == name)
    assert results.generate(block, tmp_path) is None  # CSVs missing: the page keeps its table
    sizes = (8, 4096)
    for launch in block.launches:
        for stem in launch.stems():
            _fake_launch(tmp_path, stem, launch.op, launch.mpi, launch.nranks, sizes)
    content = results.generate(block, tmp_path)
    lines = content.splitlines()
    # the sizes the CSVs hold, not the launches' full range: the command says what ran
    assert lines[0] == results.command_line(block, "8:4K")
    assert (
        f"--run --sizes 8:4K '{name}'" in lines[0] and f"-n {block.launches[0].nranks} -m 8:4K -c" in lines[0]
    )
    assert lines[1].startswith("Machine: ")
    stems = [s for launch in block.launches for s in launch.stems()]
    assert lines[1].count("(2026-12-07T12:00:00Z): handoff 1.50 µs") == len(stems), lines[1]
    rows = [line for line in lines if line.startswith("| 8 |") or line.startswith("| 4K |")]
    assert len(rows) == len(sizes), content  # one table, a row per size
    assert all("error" not in row for row in rows), content
    page = (ROOT / "docs" / block.page).read_text()
    new = results.rewrite(page, {block.name: content})
    assert dict(results.blocks_of(new))[block.name] == content
    assert _prose(results, new) == _prose(results, page)
    assert results.rewrite(new, {block.name: content}) == new


def _fake_pmpi_run(out: Path, ops: tuple[str, ...], sizes: tuple[int, ...], rounds: int, side: bool) -> None:
    """The outputs `OUT=DIR bench/pmpi_bench.sh` keeps: each launch's lines "op bytes MPI_us
    PMPI_us" as bench/pmpi/alltoall_bench.c prints them (MPI at 4 µs a size, the library
    at 1), and the MPI they ran under."""
    out.mkdir()
    for kind, us in (("plain", 4.0), ("shmcoll", 1.0)):
        for r in range(1, rounds + 1):
            lines = (f"{op} {n} {us * (k + 1) + r:.2f} 0.00" for op in ops for k, n in enumerate(sizes))
            (out / f"{kind}.{r}").write_text("\n".join(lines) + "\n")
    if side:
        lines = (f"{op} {n} {k + 1.0:.2f} {4.0 * (k + 1):.2f}" for op in ops for k, n in enumerate(sizes))
        (out / "side").write_text("\n".join(lines) + "\n")
    (out / "mpi").write_text("MPI: mpich 5.0.2 (/somewhere/bin/mpicc)\n")


@pytest.mark.parametrize(
    "name", ["pmpi alltoall np2 mpich", "pmpi collectives np2 mpich", "pmpi bcast np2 private mpich"]
)
def test_a_pmpi_block_is_generated_from_its_runs_outputs_and_machine_record(
    tmp_path: Path, name: str
) -> None:
    """What `bench/results.py` writes for a PMPI block from the outputs that its run of
    bench/pmpi_bench.sh kept: the command that ran (NP, ROUNDS, SIDE, the sizes measured, the
    ops), the machine record and the MPI (not this machine's paths), and pmpi_table.py's table
    with a row per op and size, the floor and same-launch columns where the run measured
    them; the page around it unchanged."""
    results = _results_script()
    block = next(b for b in results.BLOCKS if b.name == name)
    (launch,) = block.launches
    assert results.generate(block, tmp_path) is None  # outputs missing: the page keeps its table
    sizes = (8, 4096)
    _fake_pmpi_run(tmp_path / launch.stem(), launch.ops, sizes, launch.rounds, launch.side)
    _fake_launch(tmp_path, "unused", "alltoall", "mpich", 2, sizes)  # for its machine record
    (tmp_path / "unused.machine.json").rename(tmp_path / f"{launch.stem()}.machine.json")
    content = results.generate(block, tmp_path)
    lines = content.splitlines()
    assert lines[0] == results.command_line(block, "8:4K")
    assert f"--run --sizes 8:4K '{name}'" in lines[0]
    assert f"NP={launch.nranks} ROUNDS={launch.rounds} SIDE={int(launch.side)} " in lines[0]
    assert f"bench/pmpi_bench.sh -m 8:4K -o {','.join(launch.ops)}`" in lines[0]
    assert all(f"{k}={v} " in lines[0] for k, v in launch.env)
    assert lines[1].startswith("Machine: ") and "(2026-12-07T12:00:00Z): handoff 1.50 µs" in lines[1]
    assert lines[1].endswith(", MPI: mpich 5.0.2.") and "/somewhere" not in lines[1], lines[1]
    head = next(line for line in lines if line.startswith("| op |"))
    assert ("memcpy floor µs" in head) == ("copy-floor" in launch.ops), head
    assert ("same launch" in head) == launch.side, head
    served = [op for op in launch.ops if op != "copy-floor"]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| op |")]
    assert len(rows) == len(served) * len(sizes), content
    # the lowest median of each kind: 4 + 1 against 1 + 1 µs at 8 B, 8 + 1 against 2 + 1 at 4 KiB
    assert all(("| 8 | 5.00 | 2.00 | 2.50x |" in r) != ("| 4K | 9.00 | 3.00 | 3.00x |" in r) for r in rows), (
        content
    )
    page = (ROOT / "docs" / block.page).read_text()
    new = results.rewrite(page, {block.name: content})
    assert dict(results.blocks_of(new))[block.name] == content
    assert _prose(results, new) == _prose(results, page)
    assert results.rewrite(new, {block.name: content}) == new
