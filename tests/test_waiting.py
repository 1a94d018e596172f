"""Waiting for a late peer: the other Python threads of a rank keep running (the wait
releases the GIL once it outlasts a few microseconds), with a core per rank (spin, then
yield) and with more ranks than cores (yield at once)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import shmcoll
from conftest import run_ranks

LATE_S = 0.3


def _thread_runs_while_blocked() -> tuple[float, float] | None:
    comm = shmcoll.Comm()
    comm.Barrier()
    if comm.rank == 0:
        time.sleep(LATE_S)  # the late peer
        comm.Barrier()
        return None
    count = [0]
    stop = threading.Event()

    def count_up() -> None:
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=count_up)
    t.start()
    time.sleep(0.01)  # the thread is running
    # Its pace while this thread sleeps (the GIL released), for reference.
    before, t0 = count[0], time.monotonic()
    time.sleep(0.05)
    pace = (count[0] - before) / (time.monotonic() - t0)
    before, t0 = count[0], time.monotonic()
    comm.Barrier()  # waits ~LATE_S for rank 0
    waited = time.monotonic() - t0
    during = count[0] - before
    stop.set()
    t.join()
    return waited, during / (pace * waited)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nranks", [2, 3])
def test_other_threads_run_while_a_collective_waits(nranks: int) -> None:
    for rank, res in enumerate(run_ranks(nranks, _thread_runs_while_blocked)[1:], start=1):
        assert res is not None
        waited, share = res
        assert waited > LATE_S / 2, f"rank {rank} did not wait ({waited:.3f} s)"
        # The thread's progress during the wait, as a share of its pace while this thread
        # slept: ~0.3-1 with the GIL released (the waiting thread's yields compete for the
        # CPU); holding the GIL through the wait leaves it one switch interval (5 ms of the
        # ~0.25 s, ~0.02).
        assert share > 0.1, f"rank {rank}: the thread ran at {share:.3f} of its pace"


def _leave_yields_after_allgathers(calls: int) -> tuple[int, int, bool]:
    comm = shmcoll.Comm()
    send = np.full(1, comm.rank, dtype=np.int64)
    recv = np.empty(comm.size, dtype=np.int64)
    ok = True
    for _ in range(calls):
        comm.Allgather(send, recv)
        ok &= bool((recv == np.arange(comm.size)).all())
    return comm.stats()["leave_yields"], comm.config()["leave_yields"], ok


@pytest.mark.timeout(60)
@pytest.mark.parametrize("setting", [None, "0"])
def test_ranks_sharing_a_cpu_leave_in_arrival_order(setting: str | None) -> None:
    # Three ranks on one CPU (each is bound to the only CPU it may use): the last to arrive
    # sees a call complete first and yields to the two that arrived before it.
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        results = run_ranks(3, _leave_yields_after_allgathers, 200, env={"SHMCOLL_LEAVE_YIELDS": setting})
    finally:
        os.sched_setaffinity(0, cpus)
    assert all(ok for _, _, ok in results)
    assert {limit for _, limit, _ in results} == {4 if setting is None else 0}
    yields = sum(y for y, _, _ in results)
    if setting == "0":
        assert yields == 0
    else:
        assert yields > 0, "no rank let a CPU-mate that arrived first leave first"


def _leave_yields_over_barriers(calls: int) -> int:
    comm = shmcoll.Comm()
    before = comm.stats()["leave_yields"]
    for k in range(calls):
        if k % comm.size == comm.rank:
            # Arrive last at every comm.size-th barrier: sleep (a busy wait would keep the
            # others, which share this CPU, from arriving at all).
            time.sleep(100e-6)
        comm.Barrier()
    return comm.stats()["leave_yields"] - before


@pytest.mark.timeout(60)
def test_a_barrier_releases_ranks_sharing_a_cpu_in_rank_order() -> None:
    # Three ranks on one CPU, each arriving last at every third barrier. In arrival order
    # rank 0 would yield to the two ahead of it there; in rank order it never waits, and
    # the others wait for the lower ranks.
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        yields = run_ranks(3, _leave_yields_over_barriers, 200)
    finally:
        os.sched_setaffinity(0, cpus)
    assert yields[0] == 0, f"rank 0 yielded {yields[0]} times leaving barriers"
    assert yields[1] + yields[2] > 0, "no rank let a lower-ranked CPU-mate leave first"
