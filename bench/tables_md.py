"""Render `shmcoll bench <op> --csv` results (bench/results/*.csv) as Markdown tables:
median latency per size for MPI and each shmcoll variant, with the ratios MPI/shmcoll
(>1: shmcoll is faster).

Files of the same operation, MPI and rank count (several launches, as
``LAUNCHES=5 bench/mpi_tables.sh`` writes them) make one table: each cell is the median
over the launches of that launch's median, and each ratio the median of the launches'
own ratios (MPI and shmcoll measured in the same launch, so a slow minute of this
shared machine slows both), with the lowest and highest launch beside it.

    python bench/tables_md.py bench/results/allreduce-mpich-np2.csv [...]
    python bench/tables_md.py bench/results/*-np4-l*.csv

Where every launch of a table has its machine record (``<csv stem>.machine.json``, which
``bench/mpi_tables.sh`` writes with ``shmcoll bench machine`` before each launch), the
table also gives each size's floor on that launch's machine (its synchronisation or its
writes at the write ceiling, whichever is larger: ``shmcoll.bench.machine_state``) and
MPI/floor, the ratio that an implementation running at the floor would show: where it is
below a bar, no implementation could have met that bar in that launch.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

#: One launch: size -> variant -> median µs (None where the variant failed that size).
Launch = dict[int, dict[str, float | None]]
#: What the machine allowed before a launch (a shmcoll.bench.machine_state.MachineState).
State = Any


def fmt_size(n: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def machine_of(path: Path) -> State | None:
    """The machine record written next to a launch's CSV, if there is one."""
    side = path.with_name(path.stem + ".machine.json")
    if not side.exists():
        return None
    from shmcoll.bench.machine_state import load

    return load(str(side))


def read(path: Path) -> tuple[tuple[str, str, str], list[str], Launch]:
    """(op, MPI label, ranks), the variants in column order (MPI first), and the launch."""
    rows = list(csv.DictReader(path.open()))
    if not rows:
        raise ValueError(f"{path}: no rows")
    launch: Launch = defaultdict(dict)
    for r in rows:
        launch[int(r["bytes"])][r["variant"]] = float(r["median_us"]) if r.get("median_us") else None
    labels = list(dict.fromkeys(r["variant"] for r in rows))
    op = rows[0].get("op") or path.stem.split("-")[0]
    return (op, labels[0], rows[0].get("nranks", "?")), labels, launch


def _span(xs: list[float], fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}-{hi:{fmt}}"


def machine_line(states: list[State]) -> str:
    """One line on what the machine allowed over the launches (ranges)."""
    lines = [s.line_ns for s in states if s.line_ns is not None]
    return (
        f"Machine before each launch: handoff {_span([s.handoff_us for s in states], '.2f')} µs, "
        + (f"cache line {_span(lines, '.0f')} ns one way, " if lines else "")
        + f"write ceiling {_span([s.write_all_gbs for s in states], '.1f')} GB/s "
        f"({states[0].cpus} CPUs at once)."
    )


def floor_cells(op: str, nranks: int, size: int, peer: str, launches: list[Launch], states: list[State],
                many: bool) -> list[str]:  # fmt: skip
    """The floor (median over launches) and MPI/floor (median of the launches' own, and
    their range) at one size."""
    from shmcoll.bench.machine_state import floor_us

    floors = [floor_us(op, size, nranks, st) for st in states]
    refs = [launch.get(size, {}).get(peer) for launch in launches]
    best = [ref / f for ref, f in zip(refs, floors, strict=True) if ref and f > 0]
    cells = [f"{statistics.median(floors):.2f}", f"{statistics.median(best):.2f}x" if best else ""]
    if many:
        cells.append(f"{min(best):.2f}-{max(best):.2f}x" if best else "")
    return cells


def render_group(key: tuple[str, str, str], labels: list[str], launches: list[Launch],
                 states: list[State | None] | None = None) -> str:  # fmt: skip
    op, peer, nranks = key
    mine = labels[1:]
    many = len(launches) > 1
    known = [s for s in states or [] if s is not None]
    with_floors = bool(known) and len(known) == len(launches)
    title = f"### {op}, {peer}, {nranks} ranks"
    if many:
        title += f" (medians of {len(launches)} launches)"
    head = f"| bytes | {peer} µs |"
    rule = "|---:|---:|"
    if with_floors:
        head += " floor µs | MPI/floor |" + (" launches |" if many else "")
        rule += "---:|---:|" + ("---:|" if many else "")
    head += "".join(f" {m} µs | ratio |" + (" launches |" if many else "") for m in mine)
    rule += ("---:|---:|---:|" if many else "---:|---:|") * len(mine)
    out = [title, ""] + ([machine_line(known), ""] if with_floors else []) + [head, rule]
    for size in sorted({s for launch in launches for s in launch}):
        refs = [v for launch in launches if (v := launch.get(size, {}).get(peer))]
        cells = [fmt_size(size), f"{statistics.median(refs):.2f}" if refs else "error"]
        if with_floors:
            cells += floor_cells(op, int(nranks), size, peer, launches, known, many)
        for m in mine:
            times = [v for launch in launches if (v := launch.get(size, {}).get(m))]
            ratios = [
                ref / v
                for launch in launches
                if (ref := launch.get(size, {}).get(peer)) and (v := launch.get(size, {}).get(m))
            ]
            cells.append(f"{statistics.median(times):.2f}" if times else "error")
            cells.append(f"{statistics.median(ratios):.2f}x" if ratios else "")
            if many:
                cells.append(f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def render(paths: list[Path]) -> str:
    """One table per (operation, MPI, ranks) among `paths`, in the order first seen."""
    groups: dict[tuple[str, str, str], tuple[list[str], list[Launch], list[State | None]]] = {}
    for path in paths:
        key, labels, launch = read(path)
        if key not in groups:
            groups[key] = (labels, [], [])
        groups[key][1].append(launch)
        groups[key][2].append(machine_of(path))
    return "\n".join(
        render_group(key, labels, launches, states) for key, (labels, launches, states) in groups.items()
    )


if __name__ == "__main__":
    print(render([Path(p) for p in sys.argv[1:]]))
