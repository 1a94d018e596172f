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
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

#: One launch: size -> variant -> median µs (None where the variant failed that size).
Launch = dict[int, dict[str, float | None]]


def fmt_size(n: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


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


def render_group(key: tuple[str, str, str], labels: list[str], launches: list[Launch]) -> str:
    op, peer, nranks = key
    mine = labels[1:]
    many = len(launches) > 1
    title = f"### {op}, {peer}, {nranks} ranks"
    if many:
        title += f" (medians of {len(launches)} launches)"
    head = f"| bytes | {peer} µs |" + "".join(
        f" {m} µs | ratio |" + (" launches |" if many else "") for m in mine
    )
    out = [title, "", head, "|---:|---:|" + ("---:|---:|---:|" if many else "---:|---:|") * len(mine)]
    for size in sorted({s for launch in launches for s in launch}):
        refs = [v for launch in launches if (v := launch.get(size, {}).get(peer))]
        cells = [fmt_size(size), f"{statistics.median(refs):.2f}" if refs else "error"]
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
    groups: dict[tuple[str, str, str], tuple[list[str], list[Launch]]] = {}
    for path in paths:
        key, labels, launch = read(path)
        if key not in groups:
            groups[key] = (labels, [])
        groups[key][1].append(launch)
    return "\n".join(render_group(key, labels, launches) for key, (labels, launches) in groups.items())


if __name__ == "__main__":
    print(render([Path(p) for p in sys.argv[1:]]))
