"""``shmcoll bench alltoall --table PATH``: a tuned table against the model, in the same
launch, for the bar "a tuned table is never more than 5% slower than the untuned model at
any size".

Both run on the same communicator: the ranks bind the model when they create it, and
every shmcoll variant binds its table (the model, or the tuned file's rows for this
process count) when its round starts, untimed. The variants run in the benchmark's
interleaved rounds, so drifts of a shared machine hit both alike. The report gives, per
size and buffer kind, what each table selected, the medians and tuned/model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..bench.sizes import fmt_size
from .harness import Variant

#: The bar: tuned/model above this fails.
BAR = 1.05
#: Labels of the variants that run the tuned table, and of the model ones they face.
#: Each tuned variant and the model's variant on the same buffers: ordinary (np.empty: in
#: the shared-array arena between its bounds), heap, and private to each rank.
TUNED = {"tuned": "shmcoll", "tuned heap": "shmcoll heap", "tuned private": "shmcoll private"}


def tuned_rows(path: str, nranks: int) -> Any:
    """The file's Alltoall rows for `nranks` ranks (it must have an entry for them)."""
    from ..errors import TuningTableError
    from ..tuning import table

    rows = table.open_file(path).rows("alltoall", nranks)
    if rows is None:
        raise TuningTableError(f"{path}: no alltoall entry for {nranks} ranks")
    return rows


def bound(v: Variant, comm: Any, rows: Any, source: str) -> Variant:
    """`v`, binding `rows` on the communicator before each of its rounds."""
    inner = v.bind

    def bind(state: Any) -> Any:
        comm._set_table("alltoall", rows, source)
        return inner(state)

    return dataclasses.replace(v, bind=bind)


def report(rows: list[dict[str, Any]], sizes: list[int]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 130))  # the choices in full

    title = f"tuned table against the model, same launch, interleaved (median µs; tuned/model > {BAR} fails)"
    t = Table(title=title)
    for col in ("bytes/rank", "buffers", "model", "µs", "tuned", "µs", "tuned/model"):
        t.add_column(col, justify="right" if col in ("bytes/rank", "µs", "tuned/model") else "left")
    # Where both tables select alike the ratio is this launch's noise; the bar is about
    # the sizes where they differ.
    worst: dict[bool, tuple[float, str]] = {}
    for size in sizes:
        by = {r["variant"]: r for r in rows if r["bytes"] == size}
        for tuned, model in TUNED.items():
            a, b = by.get(model, {}), by.get(tuned, {})
            m, x = a.get("median_us"), b.get("median_us")
            ratio = None if m is None or x is None else x / m
            kind = {"tuned heap": "heap", "tuned private": "private"}.get(tuned, "ordinary")
            alike = a.get("choice") is not None and a.get("choice") == b.get("choice")
            if ratio is not None and (alike not in worst or ratio > worst[alike][0]):
                worst[alike] = (ratio, f"{fmt_size(size)} {kind}")
            cell = "" if ratio is None else f"{ratio:.2f}x" + (" ✗" if ratio > BAR else "")
            t.add_row(
                fmt_size(size),
                kind,
                a.get("choice") or "error",
                "" if m is None else f"{m:.2f}",
                "(alike)" if alike else b.get("choice") or "error",
                "" if x is None else f"{x:.2f}",
                cell,
            )
    console.print(t)
    if False in worst:
        r, where = worst[False]
        console.print(
            f"worst tuned/model where the tables differ: {r:.2f}x at {where} (bar {BAR}x: "
            + ("met)" if r <= BAR else "NOT met)")
        )
    else:
        console.print("the tuned table selects as the model at every size measured")
    if True in worst:
        r, where = worst[True]
        console.print(f"worst tuned/model where they select alike (this launch's noise): {r:.2f}x at {where}")
