"""Regenerate the measured tables of docs/results-*.md in place: one script for every table
that `shmcoll bench` launches or `bench/pmpi_bench.sh` runs produce, so that a table is
never pasted by hand and always states the command and the machine behind it.

Each generated table sits between marker comments that name its block:

    <!-- generated: allreduce np4 heap mpich -->
    Command: `python bench/results.py --run 'allreduce np4 heap mpich'` (...the launches...).
    Machine: ...the `shmcoll bench machine` record of each launch...

    | bytes | ... |
    <!-- end generated -->

`BLOCKS` below says, for every block, which launches make it (operation, MPI, ranks,
sizes, options, how many launches) and how its table is drawn (`tables_md.py`,
`default_md.py`, the side-by-side forms here, or `pmpi_table.py` for the PMPI library's
blocks, whose launches are runs of `bench/pmpi_bench.sh`: NP, ROUNDS, SIDE, the sizes and
the ops of `bench/pmpi/alltoall_bench.c`). The script rewrites only what lies between a
block's markers; the prose around them is never touched.

    python bench/results.py --list                     # the blocks and their launches
    python bench/results.py --run                      # measure everything (about an hour), rewrite
    python bench/results.py --run 'allreduce np2 heap'  # one block
    python bench/results.py 'allreduce np2 heap'        # rewrite from the CSVs already there
    python bench/results.py --run --sizes 8:4K --results /tmp/r --docs /tmp/docs 'gather np2'

`--run` launches, for each MPI, from `.venv-bench-<mpi>` (as bench/mpi_tables.sh makes
them; `--venv mpich=.venv` names another) `shmcoll bench machine` and then the benchmark,
writing `<results>/<stem>.csv` beside `<stem>.machine.json`; a PMPI block's run of
`bench/pmpi_bench.sh` (with that environment's python, mpicc and mpiexec) keeps its
launches' outputs in the directory `<results>/<stem>/` instead. Without `--run`, blocks
whose outputs are missing are left as they are and listed.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import default_md  # noqa: E402
import pmpi_table  # noqa: E402
import tables_md  # noqa: E402
from shmcoll.bench.machine_state import describe, load  # noqa: E402
from shmcoll.bench.sizes import fmt_size  # noqa: E402

MPI_NAMES = {"mpich": "MPICH", "openmpi": "Open MPI"}
BEGIN = re.compile(r"^<!-- generated: (?P<name>[^>]+?) -->$", re.M)
END = "<!-- end generated -->"


@dataclass(frozen=True)
class Launch:
    """One `shmcoll bench` launch: its CSV is `<results>/<stem>.csv`."""

    op: str
    mpi: str
    nranks: int
    #: The buffers measured, in the file name (launches of one operation, MPI and ranks
    #: with other options keep apart).
    tag: str
    sizes: str = "8:16M"
    options: tuple[str, ...] = ()
    #: Launches of the same measurement (files <stem>-l<i>.csv; tables give medians).
    repeat: int = 1

    def stem(self, i: int | None = None) -> str:
        base = f"{self.op}-{self.mpi}-np{self.nranks}-{self.tag}"
        return base if self.repeat == 1 or i is None else f"{base}-l{i}"

    def stems(self) -> list[str]:
        return [self.stem()] if self.repeat == 1 else [self.stem(i) for i in range(1, self.repeat + 1)]

    def argv(self, csv_path: str, sizes: str | None = None) -> list[str]:
        return ["shmcoll", "bench", self.op, "-n", str(self.nranks), "-m", sizes or self.sizes, "-c",
                *self.options, "--csv", csv_path]  # fmt: skip

    def shown(self, sizes: str | None = None) -> str:
        many = self.repeat > 1
        path = f"bench/results/{self.stem()}" + ("-l<i>.csv" if many else ".csv")
        times = f", launches i = 1..{self.repeat}" if many else ""
        return f"`{shlex.join(self.argv(path, sizes))}` under {MPI_NAMES[self.mpi]}{times}"

    def output(self, results: Path, stem: str) -> Path:
        return results / f"{stem}.csv"

    def ready(self, path: Path) -> bool:
        return path.exists()

    def sizes_in(self, path: Path) -> set[int]:
        return {int(r["bytes"]) for r in _rows(path)}

    def run(self, results: Path, bindir: Path, env: dict[str, str], sizes: str | None) -> None:
        for stem in self.stems():
            machine = _record_machine(results, stem, bindir, env)
            argv = self.argv(str(self.output(results, stem)), sizes)
            subprocess.run(
                [str(bindir / argv[0]), *argv[1:]],
                env={**env, "SHMCOLL_BENCH_MACHINE": str(machine)},
                check=True,
            )


@dataclass(frozen=True)
class PmpiLaunch:
    """One run of `bench/pmpi_bench.sh`: ROUNDS plain and ROUNDS preloaded launches of
    `bench/pmpi/alltoall_bench.c`, alternating, and with SIDE=1 one launch that times the
    library and MPI's own PMPI_ calls in the same processes. Its launches' outputs stay in
    the directory `<results>/<stem>/` (the script's OUT), drawn by `pmpi_table.py`."""

    #: The ops measured, in the directory's name.
    tag: str
    ops: tuple[str, ...]
    sizes: str = "8:16M"
    rounds: int = 3
    side: bool = True
    nranks: int = 2
    mpi: str = "mpich"
    #: Set for every launch of the run (e.g. the library's shared allocator off).
    env: tuple[tuple[str, str], ...] = ()

    def stem(self) -> str:
        return f"pmpi-{self.mpi}-np{self.nranks}-{self.tag}"

    def stems(self) -> list[str]:
        return [self.stem()]

    def settings(self, out: str) -> dict[str, str]:
        """The script's environment: this run's own, then NP, ROUNDS, SIDE and OUT."""
        own = {"NP": str(self.nranks), "ROUNDS": str(self.rounds), "SIDE": "1" if self.side else "0"}
        return {**dict(self.env), **own, "OUT": out}

    def argv(self, sizes: str | None = None) -> list[str]:
        return ["bench/pmpi_bench.sh", "-m", sizes or self.sizes, "-o", ",".join(self.ops)]

    def shown(self, sizes: str | None = None) -> str:
        settings = self.settings(f"bench/results/{self.stem()}")
        assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
        return f"`{assign} {shlex.join(self.argv(sizes))}` under {MPI_NAMES[self.mpi]}"

    def output(self, results: Path, stem: str) -> Path:
        return results / stem

    def ready(self, path: Path) -> bool:
        need = ["plain.1", "shmcoll.1", *(["side"] if self.side else [])]
        return all((path / name).exists() for name in need)

    def sizes_in(self, path: Path) -> set[int]:
        files = [*path.glob("plain.*"), *path.glob("shmcoll.*"), *path.glob("side")]
        words = (line.split() for f in files for line in f.read_text().splitlines())
        return {int(w[1]) for w in words if len(w) == 4}

    def run(self, results: Path, bindir: Path, env: dict[str, str], sizes: str | None) -> None:
        for stem in self.stems():
            _record_machine(results, stem, bindir, env)
            out = str(self.output(results, stem).resolve())
            subprocess.run(
                ["bash", *self.argv(sizes)],
                cwd=ROOT,
                env={**env, "PYTHON": str(bindir / "python"), **self.settings(out)},
                check=True,
            )


def _record_machine(results: Path, stem: str, bindir: Path, env: dict[str, str]) -> Path:
    """`shmcoll bench machine` before a launch: `<results>/<stem>.machine.json`."""
    machine = results / f"{stem}.machine.json"
    print(f"== {stem}", flush=True)
    subprocess.run([str(bindir / "shmcoll"), "bench", "machine", "--json", str(machine)], env=env, check=True)
    return machine


@dataclass(frozen=True)
class Block:
    """One generated table: its name (the marker's), page, launches and drawing."""

    name: str
    page: str
    launches: tuple[Launch | PmpiLaunch, ...]
    draw: str  # a key of DRAW


def _heap(op: str, mpi: str, n: int, repeat: int = 1) -> Launch:
    return Launch(op, mpi, n, "heap", options=("--no-ordinary",), repeat=repeat)


def _private(op: str, mpi: str, n: int) -> Launch:
    return Launch(op, mpi, n, "private", options=("--no-heap", "--private", "--no-ordinary"))


#: Private and heap arrays in one launch.
_BOTH = ("--private", "--no-ordinary")


COLLECTIVES = ("allreduce", "allgather", "bcast", "reduce_scatter")
BLOCKS: tuple[Block, ...] = (
    *(
        b
        for op in COLLECTIVES
        for b in (
            Block(
                f"{op} np2 heap",
                "results-collectives.md",
                (_heap(op, "mpich", 2), _heap(op, "openmpi", 2)),
                "ratio-pair",
            ),
            Block(f"{op} np4 heap mpich", "results-collectives.md", (_heap(op, "mpich", 4, 5),), "medians"),
            Block(
                f"{op} np2 private",
                "results-collectives.md",
                (_private(op, "mpich", 2), _private(op, "openmpi", 2)),
                "side-by-side",
            ),
            Block(
                f"{op} np4 private mpich", "results-collectives.md", (_private(op, "mpich", 4),), "medians"
            ),
        )
    ),
    Block(
        "collectives np2 ordinary vs heap",
        "results-collectives.md",
        tuple(Launch(op, "mpich", 2, "default", options=("--private",)) for op in COLLECTIVES),
        "ordinary-vs-heap",
    ),
    *(
        Block(
            f"{op} np2", "results-collectives.md", (Launch(op, "mpich", 2, "both", options=_BOTH),), "medians"
        )
        for op in ("gather", "scatter")
    ),
    *(
        Block(
            f"alltoall np{n} {mpi}",
            "results-alltoall.md",
            (Launch("alltoall", mpi, n, "default", options=("--before", "--private")),),
            "default",
        )
        for mpi in ("mpich", "openmpi")
        for n in (2, 4)
    ),
    Block(
        "pmpi alltoall np2 mpich",
        "results-pmpi.md",
        (
            PmpiLaunch(
                "alltoall", ("alltoall", "alltoallv", "alltoallv-ragged", "alltoall-derived", "copy-floor")
            ),
        ),
        "pmpi",
    ),
    Block(
        "pmpi collectives np2 mpich",
        "results-pmpi.md",
        (
            PmpiLaunch(
                "collectives", ("allgather", "allreduce", "reduce-scatter", "bcast", "barrier"), "8:4M", 2
            ),
        ),
        "pmpi",
    ),
    Block(
        "pmpi bcast np2 private mpich",
        "results-pmpi.md",
        (
            PmpiLaunch(
                "bcast-private",
                ("bcast",),
                "64K:16M",
                2,
                side=False,
                env=(("SHMCOLL_PMPI_SHARED_MALLOC", "off"),),
            ),
        ),
        "pmpi",
    ),
)


# -- drawing ------------------------------------------------------------------------------
def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _peer(rows: list[dict[str, str]]) -> str:
    return next(r["variant"] for r in rows if not r["variant"].startswith(("shmcoll", "tuned", "heap")))


def _medians(groups: list[list[Path]]) -> str:
    """tables_md.py's table of each launch group (medians over its launches), titles
    left out (the page's heading says what the table is)."""
    parts = []
    for paths in groups:
        out = tables_md.render(paths)
        parts.append("\n".join(line for line in out.splitlines() if not line.startswith("### ")).strip())
    return "\n\n".join(parts)


def _side_by_side(groups: list[list[Path]]) -> str:
    """tables_md.py's one-launch tables of several MPIs, their columns side by side (one
    bytes column)."""
    tables = [_medians([paths]).splitlines() for paths in groups]
    rows = [[line for line in t if line.startswith("|")] for t in tables]
    if len({len(r) for r in rows}) != 1:
        raise ValueError("the launches measured different sizes")
    out = []
    for parts in zip(*rows, strict=True):
        first, *rest = parts
        out.append(first + "".join(p.split("|", 2)[2] for p in rest))
    return "\n".join(out)


def _ratio_pair(groups: list[list[Path]]) -> str:
    """Per size, for each MPI: MPI/shmcoll (shmcoll heap's median µs), side by side."""
    data = []
    for paths in groups:
        rows = _rows(paths[0])
        peer = _peer(rows)
        by = {(int(r["bytes"]), r["variant"]): float(r["median_us"]) for r in rows if r.get("median_us")}
        data.append((peer, by))
    head = "| bytes | " + " | ".join(f"against {peer}: ratio (shmcoll heap µs)" for peer, _ in data) + " |"
    out = [head, "| ---: |" + " ---: |" * len(data)]
    for size in sorted({s for _, by in data for s, _ in by}):
        cells = [fmt_size(size)]
        for peer, by in data:
            ref, mine = by.get((size, peer)), by.get((size, "shmcoll heap"))
            if ref and mine:
                cells.append(
                    f"{ref / mine:.2f}x ({mine:.1f})" if mine < 100 else f"{ref / mine:.2f}x ({mine:.0f})"
                )
            else:
                cells.append("error")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _default(groups: list[list[Path]]) -> str:
    """default_md.py's table of each launch, its title and machine line left out (the
    page's heading and the block's Machine line say them)."""
    tables = (default_md.table(p).splitlines() for paths in groups for p in paths)
    return "\n\n".join("\n".join(line for line in t if line.startswith("|")) for t in tables)


def _ordinary_vs_heap(groups: list[list[Path]]) -> str:
    return default_md.ordinary_vs_heap([p for paths in groups for p in paths])


def _pmpi(groups: list[list[Path]]) -> str:
    """pmpi_table.py's table of each run of bench/pmpi_bench.sh (the directories its OUT
    kept): lowest medians of the plain and the preloaded launches, the bars, and the floor
    and same-launch columns where the run measured them."""
    tables = []
    for out in (d for paths in groups for d in paths):
        side = out / "side"
        tables.append(
            pmpi_table.render(
                sorted(out.glob("plain.*")), sorted(out.glob("shmcoll.*")), side if side.exists() else None
            )
        )
    return "\n\n".join(tables)


DRAW: dict[str, Callable[[list[list[Path]]], str]] = {
    "medians": _medians,
    "ratio-pair": _ratio_pair,
    "side-by-side": _side_by_side,
    "default": _default,
    "ordinary-vs-heap": _ordinary_vs_heap,
    "pmpi": _pmpi,
}


# -- the block's text and the rewriter -------------------------------------------------------
def command_line(block: Block, sizes: str | None = None) -> str:
    """The command that makes the block (with `sizes` measured instead of the launches'
    own, where given) and the launches it runs."""
    runs = "; ".join(launch.shown(sizes) for launch in block.launches)
    other = f" --sizes {sizes}" if sizes else ""
    return f"Command: `python bench/results.py --run{other} '{block.name}'` (runs {runs})."


def measured_sizes(block: Block, groups: list[list[Path]]) -> str | None:
    """The sizes the outputs hold as `-m` spells them, None where they are the launches' own."""
    sizes = sorted(
        {
            n
            for launch, paths in zip(block.launches, groups, strict=True)
            for p in paths
            for n in launch.sizes_in(p)
        }
    )
    if not sizes:
        return None
    span = f"{fmt_size(sizes[0])}:{fmt_size(sizes[-1])}"
    return None if span == block.launches[0].sizes else span


def machine_line(block: Block, results: Path) -> str:
    """The machine record each launch left (`shmcoll bench machine`), or that it left none."""
    seen = []
    for launch in block.launches:
        for stem in launch.stems():
            side = results / f"{stem}.machine.json"
            seen.append(f"{stem}: {describe(load(str(side)))}" if side.exists() else f"{stem}: no record")
            mpi = launch.output(results, stem) / "mpi"
            if isinstance(launch, PmpiLaunch) and mpi.exists():
                # "MPI: mpich 5.0.2 (/path/to/mpicc)": the MPI, not this machine's paths
                seen[-1] += f", {mpi.read_text().strip().split(' (')[0]}"
    return "Machine: development machine as `shmcoll bench machine` recorded it; " + "; ".join(seen) + "."


def output_groups(block: Block, results: Path) -> list[list[Path]] | None:
    """Each launch's outputs (CSVs, or a PMPI run's directory), None where some are missing."""
    groups = [[launch.output(results, s) for s in launch.stems()] for launch in block.launches]
    ready = all(launch.ready(p) for launch, g in zip(block.launches, groups, strict=True) for p in g)
    return groups if ready else None


def generate(block: Block, results: Path) -> str | None:
    """The block's text from its launches' outputs, None where some are missing."""
    groups = output_groups(block, results)
    if groups is None:
        return None
    table = DRAW[block.draw](groups)
    return (
        f"{command_line(block, measured_sizes(block, groups))}\n{machine_line(block, results)}\n\n{table}\n\n"
    )


def blocks_of(text: str) -> list[tuple[str, str]]:
    """(name, content) of every generated block of a page, in order."""
    out = []
    for m in BEGIN.finditer(text):
        end = text.find("\n" + END, m.end())
        if end < 0:
            raise ValueError(f"block {m['name']!r} has no {END!r}")
        out.append((m["name"], text[m.end() + 1 : end + 1]))
    return out


def rewrite(text: str, contents: dict[str, str]) -> str:
    """`text` with the content of each block named in `contents` replaced (content ends
    with a newline); everything outside the markers, and other blocks, stay as they are."""
    out, pos = [], 0
    for m in BEGIN.finditer(text):
        end = text.find("\n" + END, m.end())
        if end < 0:
            raise ValueError(f"block {m['name']!r} has no {END!r}")
        if m["name"] in contents:
            out.append(text[pos : m.end() + 1])
            out.append(contents[m["name"]])
            pos = end + 1
    out.append(text[pos:])
    return "".join(out)


# -- running the launches --------------------------------------------------------------------
def run_launch(launch: Launch | PmpiLaunch, results: Path, venvs: dict[str, Path], sizes: str | None) -> None:
    bindir = venvs.get(launch.mpi, ROOT / f".venv-bench-{launch.mpi}") / "bin"
    if not (bindir / "shmcoll").exists():
        sys.exit(
            f"{bindir}/shmcoll not found: make it as bench/mpi_tables.sh does, "
            f"or give --venv {launch.mpi}=DIR"
        )
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    if os.geteuid() == 0:
        env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    launch.run(results, bindir, env, sizes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("blocks", nargs="*", help="block names (default: every block)")
    ap.add_argument("--run", action="store_true", help="measure before rewriting")
    ap.add_argument("--list", action="store_true", help="list the blocks and their launches")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results", help="CSV directory")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs", help="directory of the results pages")
    ap.add_argument("--sizes", help="measure these sizes instead of each launch's (a quick check)")
    ap.add_argument(
        "--venv", action="append", default=[], metavar="MPI=DIR", help="virtual environment of an MPI"
    )
    opts = ap.parse_args(argv)
    known = {b.name: b for b in BLOCKS}
    unknown = [n for n in opts.blocks if n not in known]
    if unknown:
        ap.error(f"unknown blocks {unknown}; --list shows them")
    chosen = [known[n] for n in opts.blocks] if opts.blocks else list(BLOCKS)
    if opts.list:
        for b in chosen:
            print(f"{b.name} ({b.page}, {b.draw}):\n  {command_line(b)}")
        return 0
    venvs = {k: Path(v) for k, _, v in (s.partition("=") for s in opts.venv)}
    if opts.run:
        opts.results.mkdir(parents=True, exist_ok=True)
    missing = []
    for b in chosen:
        if opts.run:
            for launch in b.launches:
                run_launch(launch, opts.results, venvs, opts.sizes)
        text = generate(b, opts.results)
        if text is None:
            missing.append(b.name)
            continue
        page = opts.docs / b.page
        before = page.read_text()
        if b.name not in dict(blocks_of(before)):
            sys.exit(f"{page}: no block {b.name!r}")
        page.write_text(rewrite(before, {b.name: text}))
        print(f"rewrote {b.name!r} in {page}")
    if missing:
        print(f"left as they are (outputs missing in {opts.results}): {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
