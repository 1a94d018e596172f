"""What `shmcoll tune` prints at the end: the cells whose choice changed from the model
(median of the model and of the winner measured beside it, their ratio), and, per
operation and process count, the cells that kept the model and why (runs of measured
sizes, per buffer kind)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..bench.sizes import fmt_size
from .build import Outcome


def runs(sizes: Sequence[int], measured: Sequence[int]) -> str:
    """`sizes` as runs of consecutive measured sizes: "8..1K, 1M"."""
    idx = sorted(measured.index(s) for s in sizes)
    parts: list[str] = []
    start = prev = idx[0]
    for i in [*idx[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        a, b = fmt_size(measured[start]), fmt_size(measured[prev])
        parts.append(a if start == prev else f"{a}..{b}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


def lines(outcomes: Sequence[Outcome]) -> list[str]:
    changed = [o for o in outcomes if o.changed]
    out = []
    if changed:
        out.append("changed from the model (median µs: model -> tuned, tuned/model):")
        for o in changed:
            model, tuned = o.model_us or 0.0, o.choice_us or 0.0
            out.append(
                f"  {o.op} {o.nprocs} ranks {fmt_size(o.bytes):>5} {o.buffers:<8} {o.choice}: "
                f"{model:.2f} -> {tuned:.2f} ({tuned / model:.2f}x)"
            )
    else:
        out.append("no cell changed from the model")
    measured: dict[tuple[str, int], list[int]] = defaultdict(list)
    kept: dict[tuple[str, int], dict[str, dict[str, list[int]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for o in outcomes:
        if o.bytes not in measured[o.op, o.nprocs]:
            measured[o.op, o.nprocs].append(o.bytes)
        if not o.changed:
            kept[o.op, o.nprocs][o.why][o.buffers].append(o.bytes)
    for key, whys in kept.items():
        sizes = sorted(measured[key])
        parts = [
            f"{why}: " + "; ".join(f"{kind} {runs(ss, sizes)}" for kind, ss in kinds.items())
            for why, kinds in whys.items()
        ]
        out.append(f"kept the model, {key[0]} {key[1]} ranks: " + "; ".join(parts))
    return out
