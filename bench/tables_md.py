"""Render `shmcoll bench <op> --csv` results (bench/results/*.csv) as Markdown tables:
median latency per size for MPI, shmcoll on ordinary arrays and on heap arrays, with the
ratios MPI/shmcoll (>1: shmcoll is faster).

    python bench/tables_md.py bench/results/allreduce-mpich-np2.csv [...]
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path


def fmt_size(n: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def render(path: Path) -> str:
    rows = list(csv.DictReader(path.open()))
    by: dict[int, dict[str, dict[str, str]]] = defaultdict(dict)
    for r in rows:
        by[int(r["bytes"])][r["variant"]] = r
    labels = list(dict.fromkeys(r["variant"] for r in rows))
    peer, mine = labels[0], labels[1:]
    nranks = rows[0].get("nranks", "?")
    op = rows[0].get("op", path.stem.split("-")[0])
    head = f"### {op}, {peer}, {nranks} ranks\n\n| bytes | {peer} µs |"
    head += "".join(f" {m} µs | ratio |" for m in mine)
    out = [head, "|---:|---:|" + "---:|---:|" * len(mine)]
    for size in sorted(by):
        d = by[size]
        ref = float(d[peer]["median_us"]) if d.get(peer, {}).get("median_us") else None
        cells = [fmt_size(size), f"{ref:.2f}" if ref else "error"]
        for m in mine:
            v = d.get(m, {}).get("median_us")
            cells += ["error", ""] if not v else [f"{float(v):.2f}", f"{ref / float(v):.2f}x" if ref else ""]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print("\n".join(render(Path(p)) for p in sys.argv[1:]))
