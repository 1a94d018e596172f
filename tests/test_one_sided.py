"""One-sided Bcast between processes: the root of a small Bcast leaves once its payload is
published, non-roots once they copied it, and the round they skipped is paid at their next
call (see rust/shmcoll-coll/src/one_sided.rs). Roots that run ahead of late peers, changing
roots mixed with other collectives, and the larger Bcasts that stay two-sided."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

import shmcoll
from conftest import check_all, run_ranks

pytestmark = pytest.mark.timeout(120)

LATE = 0.5  # seconds the non-roots arrive after the root


def root_timings(n: int, heap: bool, algorithm: str | None = None) -> tuple[list[float], list[str]]:
    comm = shmcoll.Comm()
    me = comm.rank
    fails: list[str] = []
    b = comm.empty(n, np.uint8) if heap else np.empty(n, np.uint8)
    spent = []
    if me != 0:
        time.sleep(LATE)
    for step in range(3):
        b[:] = (step * 37 + np.arange(n)) % 251 if me == 0 else 255
        t = time.perf_counter()
        comm.Bcast(b, root=0, **({"algorithm": algorithm} if algorithm else {}))
        spent.append(time.perf_counter() - t)
        want = ((step * 37 + np.arange(n)) % 251).astype(np.uint8)
        if not np.array_equal(b, want):
            fails.append(f"rank {me} step {step}: wrong data (first bytes {b[:4]})")
    comm.Barrier()
    algo = comm.last_choice()
    comm.Free()
    return spent, fails + ([] if algo is not None else ["no choice recorded"])


@pytest.mark.parametrize("heap", [False, True])
@pytest.mark.parametrize("n", [8, 1000, 40_000])  # in the arrive line, inline area, streamed
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_the_root_leaves_before_its_late_peers_arrive(nranks: int, n: int, heap: bool) -> None:
    got = run_ranks(nranks, root_timings, n, heap, "inline" if n > 1000 else None)
    check_all([f for _, f in got])
    root = got[0][0]
    assert root[0] < LATE / 2, root  # published and left
    assert root[1] > LATE / 2, root  # the next call waits for the first one's arrivals


def test_a_bcast_too_large_to_be_one_sided_waits_for_every_rank() -> None:
    got = run_ranks(2, root_timings, 200_000, True)
    check_all([f for _, f in got])
    assert got[0][0][0] > LATE / 2, got[0][0]


def schedule(seed: int, steps: int) -> list[str]:
    """A random program the same on every rank (seeded), with per-rank random delays."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    shared = random.Random(seed)
    own = random.Random(seed * 1000 + me)
    cap = int(comm.config()["inline_bytes"])
    fails: list[str] = []
    for step in range(steps):
        if own.random() < 0.3:
            time.sleep(own.random() * 2e-3)
        kind = shared.random()
        root = shared.randrange(p)
        if kind < 0.6:
            n = shared.choice([0, 1, 8, 80, 500, 3000, 12_000, 70_000])
            heap = shared.random() < 0.5
            # Inline up to the inline area: one-sided, and streamed above 8 KiB.
            kw = {"algorithm": "inline"} if 4 * n <= cap and shared.random() < 0.5 else {}
            b = comm.empty(n, np.int32) if heap else np.empty(n, np.int32)
            want = np.arange(n, dtype=np.int32) * (step + 1) + root
            b[:] = want if me == root else -7
            comm.Bcast(b, root=root, **kw)
            if not np.array_equal(b, want):
                fails.append(f"step {step}: Bcast of {n} int32 from {root} (heap={heap})")
        elif kind < 0.8:
            s = np.full(5, me + step, np.int64)
            r = np.empty(5, np.int64)
            comm.Allreduce(s, r)
            if not (r == sum(j + step for j in range(p))).all():
                fails.append(f"step {step}: Allreduce {r}")
        elif kind < 0.9:
            s = np.arange(p, dtype=np.int64) + 10 * me
            r = np.empty(p, np.int64)
            comm.Alltoall(s, r)
            if not np.array_equal(r, np.arange(p) * 10 + me):
                fails.append(f"step {step}: Alltoall {r}")
        else:
            comm.Barrier()
    comm.Free()
    return fails


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_changing_roots_mixed_with_other_collectives(nranks: int) -> None:
    check_all(run_ranks(nranks, schedule, 1234 + nranks, 150))
