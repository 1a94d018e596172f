"""Persistent collectives (Alltoall_init, Alltoallv_init, Allreduce_init, Allgather_init,
Bcast_init) on 1 to 4 ranks: started several times with the buffers rewritten between
starts (the request must read the current contents, not a snapshot), against closed-form
values; Free, Startall/Waitall, Test; a rank whose arguments are rejected at creation makes
every rank raise."""

from __future__ import annotations

import numpy as np
import pytest

import shmcoll
from conftest import check_all, run_ranks

pytestmark = pytest.mark.timeout(60)


def persistent(heap: bool, algorithm: str | None) -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails: list[str] = []

    def buf(n: int, dt: str = "float64") -> np.ndarray:
        return comm.empty(n, dt) if heap else np.empty(n, dt)

    kw = {"algorithm": algorithm} if algorithm else {}
    n = 5
    # Alltoall: block j of rank i holds 100*i + 10*j + round
    a2a_s, a2a_r = buf(n * p), buf(n * p)
    r_a2a = comm.Alltoall_init(a2a_s, a2a_r)
    # Alltoallv with ragged counts: rank i sends (i + j) % 3 elements to rank j
    sc = [(me + j) % 3 for j in range(p)]
    rc = [(j + me) % 3 for j in range(p)]
    v_s, v_r = buf(sum(sc)), buf(sum(rc))
    r_v = comm.Alltoallv_init([v_s, sc], [v_r, rc])
    ar_s, ar_r = buf(n), buf(n)
    r_ar = comm.Allreduce_init(ar_s, ar_r, shmcoll.SUM, **kw)
    ag_s, ag_r = buf(n), buf(n * p)
    r_ag = comm.Allgather_init(ag_s, ag_r, **kw)
    bc = buf(n)
    r_bc = comm.Bcast_init(bc, root=p - 1, **kw)
    for rnd in range(3):
        for j in range(p):
            a2a_s[j * n : (j + 1) * n] = 100 * me + 10 * j + rnd
        v_s[:] = np.arange(v_s.size) + 1000 * me + rnd
        ar_s[:] = np.arange(n) * (me + 1) + rnd
        ag_s[:] = me * 7 + rnd
        bc[:] = (rnd + 1) * 11 if me == p - 1 else -1
        shmcoll._core.Prequest.Startall([r_a2a, r_v, r_ar, r_ag, r_bc])
        shmcoll._core.Prequest.Waitall([r_a2a, r_v, r_ar, r_ag, r_bc])
        if not r_ar.Test():
            fails.append("Test() after Start: False")
        want = np.concatenate([np.full(n, 100 * j + 10 * me + rnd, float) for j in range(p)])
        if not np.array_equal(a2a_r, want):
            fails.append(f"Alltoall round {rnd}: {a2a_r}")
        parts = []
        for j in range(p):
            off = sum((j + k) % 3 for k in range(me))
            parts.append(np.arange(off, off + rc[j]) + 1000 * j + rnd)
        if not np.array_equal(v_r, np.concatenate(parts).astype(float)):
            fails.append(f"Alltoallv round {rnd}: {v_r}")
        want_ar = sum(np.arange(n) * (j + 1) + rnd for j in range(p))
        if not np.array_equal(ar_r, want_ar):
            fails.append(f"Allreduce round {rnd}: {ar_r} != {want_ar}")
        if not np.array_equal(ag_r, np.repeat([j * 7 + rnd for j in range(p)], n).astype(float)):
            fails.append(f"Allgather round {rnd}: {ag_r}")
        if not (bc == (rnd + 1) * 11).all():
            fails.append(f"Bcast round {rnd}: {bc}")
    for r in (r_a2a, r_v, r_ar, r_ag, r_bc):
        r.Free()
    try:
        r_ar.Start()
        fails.append("Start after Free did not raise")
    except shmcoll.ShmcollError:
        pass
    comm.Free()
    return fails


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("heap", [False, True])
def test_persistent_requests_see_the_current_buffers(nranks: int, heap: bool) -> None:
    check_all(run_ranks(nranks, persistent, heap, None))


@pytest.mark.parametrize("algorithm", ["inline", "cma", "staging"])
def test_persistent_with_forced_algorithms(algorithm: str) -> None:
    check_all(run_ranks(3, persistent, False, algorithm))


def bad_init() -> str:
    comm = shmcoll.Comm()
    try:
        n = 7 if comm.rank == 1 else 8  # 7 does not split into 2 blocks
        comm.Alltoall_init(np.zeros(n), np.zeros(n))
    except shmcoll.ShmcollError as e:
        comm.Barrier()
        comm.Free()
        return type(e).__name__
    comm.Free()
    return "no error"


def test_rejected_arguments_at_creation_raise_on_every_rank() -> None:
    got = run_ranks(2, bad_init)
    assert got[1] == "ArgumentError" and got[0] == "ShmcollError", got
