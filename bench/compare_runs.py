"""Two builds of shmcoll against each other, from `shmcoll bench <op> --csv` files of
alternating launches (a refactor's "nothing moved"): per size, each variant's median in
the first build and the second, and second/first; MPI's own ratio in the same launches is
the noise to read them against (MPI did not change between the builds).

    python bench/compare_runs.py --before a-1.csv a-2.csv --after b-1.csv b-2.csv

Medians over the launches given for each side.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from shmcoll.bench.sizes import fmt_size


def medians(paths: list[str]) -> dict[tuple[int, str], float]:
    """(bytes, variant) -> median over the launches of each launch's median µs; MPI's
    variant is named "MPI"."""
    per: dict[tuple[int, str], list[float]] = {}
    for p in paths:
        with open(p) as f:
            for r in csv.DictReader(f):
                if not r.get("median_us"):
                    continue
                v = r["variant"]
                v = v if v.startswith(("shmcoll", "tuned", "heap")) else "MPI"
                per.setdefault((int(r["bytes"]), v), []).append(float(r["median_us"]))
    return {k: statistics.median(v) for k, v in per.items()}


def table(before: dict[tuple[int, str], float], after: dict[tuple[int, str], float]) -> str:
    variants = sorted({v for (_, v) in before} & {v for (_, v) in after}, key=lambda v: (v != "MPI", v))
    head = "| bytes | " + " | ".join(f"{v}: before / after µs, after/before" for v in variants) + " |"
    out = [head, "|---:" * (1 + len(variants)) + "|"]
    for size in sorted({s for (s, _) in before}):
        cells = [fmt_size(size)]
        for v in variants:
            b, a = before.get((size, v)), after.get((size, v))
            cells.append(f"{b:.2f} / {a:.2f}, {a / b:.2f}x" if a and b else "")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", nargs="+", required=True)
    ap.add_argument("--after", nargs="+", required=True)
    a = ap.parse_args()
    print(table(medians(a.before), medians(a.after)))


if __name__ == "__main__":
    main()
