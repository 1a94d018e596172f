"""The table of bench/pmpi_bench.sh: per operation and size, the lowest median of the plain
launches and of the launches with the PMPI library, their ratio, and the issue's bars:
MPI_Alltoall(v) at least 1.5x faster from 1 KiB to 16 MiB per peer and never slower below;
calls the library passes through (derived types, Allgather) at most 2% slower."""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

SERVED = ("alltoall", "alltoallv", "alltoallv-ragged")
KIB, MIB = 1 << 10, 1 << 20


def load(paths: list[Path]) -> dict[tuple[str, int], float]:
    best: dict[tuple[str, int], float] = defaultdict(lambda: float("inf"))
    for p in paths:
        for line in p.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                key = (parts[0], int(parts[1]))
                best[key] = min(best[key], float(parts[2]))
    return dict(best)


def bar(op: str, size: int, ratio: float) -> tuple[str, bool]:
    if op in SERVED:
        need = 1.5 if KIB <= size <= 16 * MIB else 1.0
        return f">= {need:.1f}x", ratio >= need
    return "<= 2% slower", ratio >= 1 / 1.02


def size_name(n: int) -> str:
    for unit, scale in (("M", MIB), ("K", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--plain", nargs="+", type=Path, required=True)
    ap.add_argument("--shmcoll", nargs="+", type=Path, required=True)
    a = ap.parse_args()
    plain, lib = load(a.plain), load(a.shmcoll)
    print("| op | bytes/peer | MPI µs | with library µs | ratio | bar | met |")
    print("|---|---:|---:|---:|---:|---|---|")
    missed = 0
    for op, size in sorted(plain, key=lambda k: (k[0], k[1])):
        if (op, size) not in lib:
            continue
        ratio = plain[(op, size)] / lib[(op, size)]
        want, ok = bar(op, size, ratio)
        missed += not ok
        row = f"| {op} | {size_name(size)} | {plain[(op, size)]:.2f} | {lib[(op, size)]:.2f} | {ratio:.2f}x"
        print(f"{row} | {want} | {'yes' if ok else 'NO'} |")
    print(f"\n{missed} row(s) miss their bar (ratio = MPI time / time with the library).")


if __name__ == "__main__":
    main()
