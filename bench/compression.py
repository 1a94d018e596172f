"""A synthetic data-parallel training step under each compression policy: wire volume
and error per traffic class.

    python bench/compression.py -n 4 --mib 4
    python bench/compression.py -n 2 --policies none,hybrid --steps 5

Each rank runs one step's collectives with tensors shaped like a transformer layer's:

* dp   - gradients (heavy-tailed, mostly tiny): Allreduce, as DDP averages buckets;
* tp   - activations (GELU outputs: skewed, non-negative, a few outliers): Allreduce, as a
         row-parallel linear layer sums partial outputs;
* pp   - activations handed between stages, as an Alltoall of stage blocks;
* zero - parameters (normal, std 0.02): Allgather, as ZeRO-3 gathers shards.

For each policy (none, uniform, hybrid) it prints, per class, the codec the policy
picks, the bytes this rank sent before and after compression, the ratio, the error of
the result against the uncompressed collective run on the same inputs in the same launch
(relative L2 and max abs), and the median time of the compressed call. Error feedback
is on for dp (as the DDP hook does) and its effect over `--steps` steps is reported as
the error of the summed results.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import shmcoll
from shmcoll import compress as cz

CLASSES = ("dp", "tp", "pp", "zero")
OPS = {"dp": "Allreduce", "tp": "Allreduce", "pp": "Alltoall", "zero": "Allgather"}


def tensor(cls: str, n: int, rank: int, step: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * step + 17 * rank + CLASSES.index(cls))
    if cls == "dp":
        return (rng.standard_t(3, n) * 1e-3).astype(np.float32)
    if cls == "tp":
        x = rng.normal(0, 1, n)
        gelu = 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))
        gelu[rng.integers(0, n, max(1, n // 1000))] *= 20  # outlier features
        return gelu.astype(np.float32)
    if cls == "pp":
        return rng.normal(0, 1, n).astype(np.float32)
    return rng.normal(0, 0.02, n).astype(np.float32)


def run_class(comm: Any, cls: str, x: np.ndarray, traffic: str | None, fb: Any = None) -> np.ndarray:
    p = comm.size
    kw = {"traffic": traffic} if traffic else {}
    if cls in ("dp", "tp"):
        out = np.empty_like(x)
        if fb is not None and traffic is not None:
            codec = cz.resolve_codec(None, traffic, x.nbytes)
            if codec is not None:
                cz.allreduce(comm, x, out, codec, feedback=fb)
                return out
        comm.Allreduce(x, out, **kw)
        return out
    if cls == "pp":
        out = np.empty_like(x)
        comm.Alltoall(x, out, **kw)
        return out
    shard = x[: x.size // p]
    out = np.empty(shard.size * p, np.float32)
    comm.Allgather(shard, out, **kw)
    return out


def wire(op: str) -> tuple[int, int]:
    s = cz.stats().get(op.lower(), {"raw_bytes": 0, "wire_bytes": 0})
    return s["raw_bytes"], s["wire_bytes"]


def measure(policies: list[str], n: int, steps: int, reps: int) -> list[dict[str, Any]]:
    comm = shmcoll.Comm()
    p = comm.size
    n -= n % p
    rows = []
    for name in policies:
        with cz.use_policy(name):
            pol = cz.get_policy()
            for cls in CLASSES:
                x = tensor(cls, n, comm.rank, 0)
                ref = run_class(comm, cls, x, None)
                before = wire(OPS[cls])
                got = run_class(comm, cls, x, cls)
                after = wire(OPS[cls])
                times = []
                for _ in range(reps):
                    x[...] = tensor(cls, n, comm.rank, 0)  # rewritten: caches cannot flatter
                    comm.Barrier()
                    t0 = time.perf_counter()
                    run_class(comm, cls, x, cls)
                    times.append(time.perf_counter() - t0)
                base = []
                for _ in range(reps):
                    x[...] = tensor(cls, n, comm.rank, 0)
                    comm.Barrier()
                    t0 = time.perf_counter()
                    run_class(comm, cls, x, None)
                    base.append(time.perf_counter() - t0)
                raw_b, wire_b = after[0] - before[0], after[1] - before[1]
                if raw_b == 0:  # not compressed: what went over the wire is the input
                    raw_b = wire_b = int(x.nbytes if cls != "zero" else x.nbytes // p)
                err = got.astype(np.float64) - ref
                rel = float(np.linalg.norm(err) / max(np.linalg.norm(ref), 1e-300))
                row: dict[str, Any] = {
                    "policy": name,
                    "class": cls,
                    "op": OPS[cls],
                    "codec": dict(pol.describe())[cls] if pol.config_for(cls, x.nbytes) else "none",
                    "raw": raw_b,
                    "wire": wire_b,
                    "rel_l2": rel,
                    "max_abs": float(np.max(np.abs(err))) if err.size else 0.0,
                    "ms": statistics.median(times) * 1e3,
                    "base_ms": statistics.median(base) * 1e3,
                }
                if cls == "dp" and steps > 1:
                    row["steps_rel_l2"] = accumulated(comm, n, steps, fb=True)
                    row["steps_rel_l2_nofb"] = accumulated(comm, n, steps, fb=False)
                rows.append(row)
    return rows if comm.rank == 0 else []


def accumulated(comm: Any, n: int, steps: int, fb: bool) -> float:
    """Relative L2 error of the sum over `steps` dp Allreduces (with or without error
    feedback) against the sum of the exact results."""
    feedback = cz.ErrorFeedback() if fb else None
    exact = np.zeros(n)
    got = np.zeros(n)
    for t in range(steps):
        x = tensor("dp", n, comm.rank, t + 1)
        exact += run_class(comm, "dp", x, None)
        got += run_class(comm, "dp", x, "dp", fb=feedback) if fb else run_class(comm, "dp", x, "dp")
    return float(np.linalg.norm(got - exact) / np.linalg.norm(exact))


def show(rows: list[dict[str, Any]], p: int, mib: float) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"one synthetic step at {p} ranks, {mib:g} MiB per tensor and rank (float32)")
    text = ("policy", "class", "op", "codec")
    numbers = ("sent MiB", "wire MiB", "ratio", "rel L2 err", "max abs err", "ms (uncompressed ms)")
    for col in text + numbers:
        t.add_column(col, justify="left" if col in text else "right")
    for r in rows:
        t.add_row(
            r["policy"],
            r["class"],
            r["op"],
            r["codec"],
            f"{r['raw'] / 2**20:.2f}",
            f"{r['wire'] / 2**20:.2f}",
            f"{r['raw'] / max(r['wire'], 1):.2f}x",
            f"{r['rel_l2']:.2e}",
            f"{r['max_abs']:.2e}",
            f"{r['ms']:.2f} ({r['base_ms']:.2f})",
        )
    c = Console(width=160)
    c.print(t)
    for r in rows:
        if "steps_rel_l2" in r and r["codec"] != "none":
            c.print(
                f"{r['policy']}: dp error of the sum over steps: {r['steps_rel_l2']:.2e} with error "
                f"feedback, {r['steps_rel_l2_nofb']:.2e} without"
            )
    by = {(r["policy"], r["class"]): r for r in rows}
    for name in sorted({r["policy"] for r in rows}):
        raw = sum(by[(name, c)]["raw"] for c in CLASSES)
        w = sum(by[(name, c)]["wire"] for c in CLASSES)
        ratio = raw / max(w, 1)
        c.print(f"{name}: wire volume {w / 2**20:.2f} MiB of {raw / 2**20:.2f} MiB ({ratio:.2f}x less)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--ranks", type=int, default=4)
    ap.add_argument("--mib", type=float, default=4.0, help="MiB per tensor and rank")
    ap.add_argument("--policies", default="none,uniform,hybrid")
    ap.add_argument("--steps", type=int, default=8, help="dp steps for the error-feedback check")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    n = int(a.mib * 2**20) // 4
    rows = shmcoll.spawn(a.ranks, measure, a.policies.split(","), n, a.steps, a.reps, timeout=1800)[0]
    show(rows, a.ranks, a.mib)


if __name__ == "__main__":
    main()
