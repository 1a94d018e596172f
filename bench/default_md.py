"""Markdown tables from `bench/default_speed.sh`'s results: per size, MPI's median and each
shmcoll variant's with MPI/variant, then the launch's floor (from the machine record taken
before the launch) and shmcoll/floor.

    python bench/default_md.py bench/results/default/alltoall-mpich-np2.csv [...]
    python bench/default_md.py --ordinary-vs-heap bench/results/default/allreduce-mpich-np2.csv [...]

The second form puts several operations side by side: per size, ordinary arrays' median
against heap arrays' (the bar: within 1.25x from 16 KiB up) and MPI/ordinary.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from shmcoll.bench.machine_state import describe, floor_us, load
from shmcoll.bench.sizes import fmt_size

ORDER = (
    "shmcoll",
    "shmcoll before",
    "shmcoll heap",
    "shmcoll private",
    "tuned",
    "tuned heap",
    "tuned private",
)


def table(path: Path) -> str:
    op = path.name.split("-")[0]
    with path.open() as f:
        rows = list(csv.DictReader(f))
    nranks = int(rows[0]["nranks"])
    peer = next(r["variant"] for r in rows if not r["variant"].startswith(("shmcoll", "tuned", "heap")))
    variants = [v for v in ORDER if any(r["variant"] == v for r in rows)]
    machine = path.with_suffix(".machine.json")
    state = load(str(machine)) if machine.exists() else None
    head = f"| bytes | {peer} | " + " | ".join(variants) + (" | floor | shmcoll/floor |" if state else " |")
    rule = "|---:" * (2 + len(variants) + (2 if state else 0)) + "|"
    out = [f"{op}, {nranks} ranks, median µs and {peer}/shmcoll (`{path}`)", "", head, rule]
    for size in sorted({int(r["bytes"]) for r in rows}):
        by = {r["variant"]: r for r in rows if int(r["bytes"]) == size}
        ref = float(by[peer]["median_us"]) if by.get(peer, {}).get("median_us") else None
        cells = [fmt_size(size), f"{ref:.2f}" if ref else "error"]
        for v in variants:
            m = by.get(v, {}).get("median_us")
            cells.append(
                "error" if not m else f"{float(m):.2f} ({ref / float(m):.2f}x)" if ref else f"{float(m):.2f}"
            )
        if state:
            fl = floor_us(op, size, nranks, state)
            m = by.get("shmcoll", {}).get("median_us")
            cells += [f"{fl:.2f}", f"{float(m) / fl:.2f}x" if m and fl > 0 else ""]
        out.append("| " + " | ".join(cells) + " |")
    if state:
        out += ["", describe(state)]
    return "\n".join(out)


def ordinary_vs_heap(paths: list[Path]) -> str:
    ops, data = [], {}
    for path in paths:
        op = path.name.split("-")[0]
        with path.open() as f:
            rows = list(csv.DictReader(f))
        peer = next(r["variant"] for r in rows if not r["variant"].startswith(("shmcoll", "tuned", "heap")))
        ops.append(op)
        for r in rows:
            variant = "peer" if r["variant"] == peer else r["variant"]
            if r["median_us"]:
                data[(op, int(r["bytes"]), variant)] = float(r["median_us"])
    sizes = sorted({size for (_, size, _) in data})
    head = "| bytes | " + " | ".join(f"{op}: ordinary / heap µs, ratio" for op in ops) + " |"
    out = [head, "|---:" * (1 + len(ops)) + "|"]
    for size in sizes:
        cells = [fmt_size(size)]
        for op in ops:
            o, h, m = (data.get((op, size, v)) for v in ("shmcoll", "shmcoll heap", "peer"))
            if not (o and h):
                cells.append("error")
                continue
            cells.append(f"{o:.1f} / {h:.1f}, {o / h:.2f}x" + (f" ({m / o:.1f}x MPI)" if m else ""))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--ordinary-vs-heap"]:
        print(ordinary_vs_heap([Path(p) for p in sys.argv[2:]]))
    else:
        print("\n\n".join(table(Path(p)) for p in sys.argv[1:]))
