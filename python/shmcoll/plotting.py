"""PNG plots of benchmark and tuning results (matplotlib, an optional dependency:
``pip install 'shmcoll[plot]'``)."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

from .bench.sizes import fmt_size
from .errors import ArgumentError


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ArgumentError("plots need matplotlib: pip install 'shmcoll[plot]'") from e
    return plt


def _size_axis(ax: Any, sizes: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([fmt_size(s) for s in sizes], rotation=60, fontsize=7)
    ax.grid(True, which="major", alpha=0.3)


def plot_bench(rows: list[dict[str, Any]], nranks: int, path: str | Path, title: str = "Alltoall") -> None:
    """Latency and bandwidth against size, one line per variant and per MPI peer; where a
    shmcoll variant beats the peer, the area between them is shaded green (red where slower)."""
    plt = _pyplot()
    by: dict[str, dict[int, float]] = defaultdict(dict)
    peers = set()
    for r in rows:
        m = r.get("median_us")
        if m in (None, "") or r.get("error"):
            continue
        by[r["variant"]][int(r["bytes"])] = float(m)
        if str(r.get("peer", "")).lower() in ("true", "1"):
            peers.add(r["variant"])
    sizes = sorted({s for v in by.values() for s in v if s > 0})
    if not sizes:
        raise ArgumentError("nothing to plot: no successful measurements")
    fig, (lat, bw) = plt.subplots(1, 2, figsize=(13, 5))
    for label, pts in sorted(by.items()):
        xs = [s for s in sizes if s in pts]
        style = "--" if label in peers else "-"
        lat.plot(xs, [pts[s] for s in xs], style, marker="o", ms=3, label=label)
        bw.plot(
            xs,
            [nranks * nranks * s / (pts[s] * 1e-6) / 1e9 for s in xs],
            style,
            marker="o",
            ms=3,
            label=label,
        )
    peer = next(iter(peers), None)
    if peer is not None:
        for label, pts in by.items():
            if label in peers:
                continue
            xs = [s for s in sizes if s in pts and s in by[peer]]
            a = [pts[s] for s in xs]
            b = [by[peer][s] for s in xs]
            lat.fill_between(
                xs, a, b, where=[x <= y for x, y in zip(a, b, strict=True)], color="g", alpha=0.08
            )
            lat.fill_between(
                xs, a, b, where=[x > y for x, y in zip(a, b, strict=True)], color="r", alpha=0.15
            )
    lat.set_yscale("log")
    lat.set_ylabel("median latency (µs)")
    bw.set_ylabel("effective bandwidth p·p·bytes/latency (GB/s)")
    for ax in (lat, bw):
        _size_axis(ax, sizes)
        ax.set_xlabel("bytes per rank")
    lat.legend(fontsize=7)
    fig.suptitle(f"{title}, {nranks} ranks")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_csv(src: str | Path, dst: str | Path) -> None:
    """Redraw a bench CSV (`shmcoll bench --csv`) or a tune CSV (`shmcoll tune --csv`)."""
    rows = read_csv(src)
    if not rows:
        raise ArgumentError(f"{src}: no rows")
    if "algorithm" in rows[0]:
        plot_tuning({"measurements": rows}, dst)
        return
    if "method" in rows[0] and "gbs" in rows[0]:
        plot_copy(rows, dst)
        return
    if "variant" not in rows[0]:
        raise ArgumentError(
            f"{src}: neither a bench nor a tune CSV (no 'variant', 'method' or 'algorithm' column)"
        )
    nranks = int(rows[0].get("nranks") or 2)
    plot_bench(rows, nranks, dst)


def plot_copy(rows: list[dict[str, Any]], path: str | Path) -> None:
    """A `bench copy` CSV: bandwidth against size, one line per method."""
    plt = _pyplot()
    series: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows:
        series[r["method"]][int(r["bytes"])] = float(r["gbs"])
    sizes = sorted({s for v in series.values() for s in v})
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, pts in sorted(series.items()):
        xs = [s for s in sizes if s in pts]
        ax.plot(xs, [pts[s] for s in xs], marker="o", ms=3, label=label)
    _size_axis(ax, sizes)
    ax.set_xlabel("bytes")
    ax.set_ylabel("GB/s")
    ax.legend()
    fig.suptitle("copy bandwidth")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_tuning(doc: dict[str, Any], path: str | Path) -> None:
    """Every candidate's latency against size, per operation, process count and buffer
    kind; where a candidate replaced the model (the table's decisions), it is marked."""
    plt = _pyplot()
    recs = [
        r for r in doc.get("measurements", []) if not r.get("error") and r.get("median_us") not in (None, "")
    ]
    groups = sorted({(r.get("op", "alltoall"), int(r["nprocs"]), r["buffers"]) for r in recs})
    if not groups:
        raise ArgumentError("nothing to plot: no measurements")
    changed = {
        (d["op"], d["nprocs"], d["buffers"], d["bytes"]): d["choice"]
        for d in doc.get("decisions", [])
        if d.get("why") == "faster"
    }
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 5), squeeze=False)
    for ax, (op, p, kind) in zip(axes[0], groups, strict=True):
        mine = [r for r in recs if (r.get("op", "alltoall"), int(r["nprocs"]), r["buffers"]) == (op, p, kind)]
        sizes = sorted({int(r["bytes"]) for r in mine})
        series: dict[str, dict[int, float]] = defaultdict(dict)
        for r in mine:
            label = "/".join(x for x in (r["algorithm"], r["order"], r["store"]) if x != "-")
            series[label][int(r["bytes"])] = float(r["median_us"])
        for label, pts in sorted(series.items()):
            xs = [s for s in sizes if s in pts]
            style = {"color": "k", "lw": 2.0} if label == "model" else {"lw": 0.8}
            ax.plot([max(x, 1) for x in xs], [pts[s] for s in xs], marker=".", label=label, **style)
        for s in sizes:
            won = changed.get((op, p, kind, s))
            if won is not None and s in series.get(won, {}):
                ax.plot([max(s, 1)], [series[won][s]], "k*", ms=9)
        ax.set_yscale("log")
        _size_axis(ax, [max(s, 1) for s in sizes])
        ax.set_title(f"{op}, {p} ranks, {kind} buffers (★ = replaces the model)")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("median latency (µs)")
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
