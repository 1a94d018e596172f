"""The table of bench/pmpi_bench.sh: per operation and size, the lowest median of the plain
launches (MPI) and of the launches with the PMPI library, their ratio, and the bars of
docs/results-pmpi.md: MPI_Alltoall(v) at least 1.5x faster from 1 KiB to 16 MiB per peer
and never slower below; calls passed through (derived types) at most 2% slower. With --side, two more
columns from the launch that timed the library and MPI's own PMPI_ calls alternately in
the same processes. When the launches ran the copy-floor op (alltoall_bench.c), two more:
the floor (one memcpy per byte into the peers' buffers, and a barrier) and how far the
library's time is above it. `render` is the table as text: bench/results.py draws the
generated blocks of docs/results-pmpi.md with it from the outputs that
`OUT=DIR bench/pmpi_bench.sh` keeps."""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

SERVED = ("alltoall", "alltoallv", "alltoallv-ragged")
#: Served too, but without a bar (reported for information).
OTHERS = ("allgather", "allreduce", "reduce-scatter", "bcast", "barrier")
KIB, MIB = 1 << 10, 1 << 20
#: Not an operation: the machine's one-copy floor for an Alltoall of each size.
FLOOR = "copy-floor"


def load(paths: list[Path]) -> dict[tuple[str, int], tuple[float, float]]:
    """{(op, bytes): (lowest MPI_ median, lowest PMPI_ median)} over the launches."""
    best: dict[tuple[str, int], list[float]] = defaultdict(lambda: [float("inf"), float("inf")])
    for p in paths:
        for line in p.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                b = best[(parts[0], int(parts[1]))]
                b[0], b[1] = min(b[0], float(parts[2])), min(b[1], float(parts[3]))
    return {k: (v[0], v[1]) for k, v in best.items()}


def bar(op: str, size: int, ratio: float) -> tuple[str, bool]:
    if op in SERVED:
        need = 1.5 if KIB <= size <= 16 * MIB else 1.0
        return f">= {need:.1f}x", ratio >= need
    if op in OTHERS:
        return "-", True
    return "<= 2% slower", ratio >= 1 / 1.02


def size_name(n: int) -> str:
    for unit, scale in (("M", MIB), ("K", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def render(plain_paths: list[Path], shmcoll_paths: list[Path], side_path: Path | None = None) -> str:
    """The table (markdown) and the count of rows under their bar, from the outputs of the
    plain launches, the preloaded ones and, where given, the side-by-side one."""
    plain, lib = load(plain_paths), load(shmcoll_paths)
    side = load([side_path]) if side_path else {}
    # The floor is a property of the machine: the lowest of all launches that measured it.
    floor: dict[int, float] = {}
    for runs in (plain, lib):
        for (op, n), (t, _) in runs.items():
            if op == FLOOR:
                floor[n] = min(t, floor.get(n, t))
    head = "| op | bytes/peer | MPI µs | with library µs | ratio | bar | met |"
    rule = "|---|---:|---:|---:|---:|---|---|"
    if floor:
        head += " memcpy floor µs | library / floor |"
        rule += "---:|---:|"
    if side:
        head += " same launch: library µs | PMPI_ µs | ratio |"
        rule += "---:|---:|---:|"
    out = [head, rule]
    missed = 0
    for op, size in sorted(lib):
        if (op, size) not in plain or op == FLOOR:
            continue
        mpi, with_lib = plain[(op, size)][0], lib[(op, size)][0]
        ratio = mpi / with_lib
        want, ok = bar(op, size, ratio)
        missed += not ok
        row = f"| {op} | {size_name(size)} | {mpi:.2f} | {with_lib:.2f} | {ratio:.2f}x | {want} | "
        row += "yes |" if ok else "NO |"
        if floor:
            f = floor.get(size) if op.startswith("alltoall") and op != "alltoall-derived" else None
            row += f" {f:.2f} | {with_lib / f:.2f} |" if f else " | |"
        if (op, size) in side:
            s_lib, s_mpi = side[(op, size)]
            row += f" {s_lib:.2f} | {s_mpi:.2f} | {s_mpi / s_lib:.2f}x |"
        out.append(row)
    out.append(f"\n{missed} row(s) miss their bar (ratio = MPI time / time with the library).")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--plain", nargs="+", type=Path, required=True)
    ap.add_argument("--shmcoll", nargs="+", type=Path, required=True)
    ap.add_argument("--side", type=Path, help="the side-by-side launch (alltoall_bench -s 1)")
    a = ap.parse_args()
    print(render(a.plain, a.shmcoll, a.side))


if __name__ == "__main__":
    main()
