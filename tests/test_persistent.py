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


def settled_alltoall(algorithm: str | None, heap: bool, nbytes: int) -> list[str]:
    """Persistent Alltoall(v) Starts after the first skip the checks and the selection
    (their heads are compared with the first Start's): many Starts with the buffers
    rewritten each time, interleaved with plain calls on the same buffers, another request
    and other collectives, give the closed-form result every time."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails: list[str] = []
    n = max(1, nbytes // 8)
    kw = {"algorithm": algorithm} if algorithm else {}

    def buf(k: int) -> np.ndarray:
        return comm.empty(k) if heap else np.empty(k)

    s, r = buf(n * p), buf(n * p)
    req = comm.Alltoall_init(s, r, **kw)
    sc = [(me + j) % 3 + n for j in range(p)]
    rc = [(j + me) % 3 + n for j in range(p)]
    vs, vr = buf(sum(sc)), buf(sum(rc))
    req_v = comm.Alltoallv_init([vs, sc], [vr, rc], **kw)
    for rnd in range(6):
        for j in range(p):
            s[j * n : (j + 1) * n] = np.arange(n) + 1000 * me + 100 * j + rnd
        vs[:] = np.arange(vs.size) + 10_000 * me + rnd
        r[:] = -1
        vr[:] = -1
        if rnd % 3 == 2:
            comm.Alltoall(s, r, **kw)  # a plain call on the same buffers in between
        else:
            req.Start()
            req.Wait()
        req_v.Start()
        want = np.concatenate([np.arange(n) + 1000 * j + 100 * me + rnd for j in range(p)])
        if not np.array_equal(r, want):
            fails.append(f"Alltoall round {rnd}: {r[:8]}")
        parts = []
        for j in range(p):
            off = sum((j + k) % 3 + n for k in range(me))
            parts.append(np.arange(off, off + rc[j]) + 10_000 * j + rnd)
        if not np.array_equal(vr, np.concatenate(parts)):
            fails.append(f"Alltoallv round {rnd}")
        x = np.full(2, float(me))
        comm.Allreduce(shmcoll.IN_PLACE, x)
        if x[0] != sum(range(p)):
            fails.append(f"Allreduce in between, round {rnd}: {x}")
    req.Free()
    req_v.Free()
    comm.Free()
    return fails


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("nbytes", [8, 2048, 300_000])
def test_settled_starts_run_the_first_starts_choice(nranks: int, nbytes: int) -> None:
    check_all(run_ranks(nranks, settled_alltoall, None, nbytes >= 2048, nbytes))


@pytest.mark.parametrize("algorithm", ["inline", "staging", "pull", "push", "cma"])
def test_settled_starts_with_forced_algorithms(algorithm: str) -> None:
    heap = algorithm in ("pull", "push")
    check_all(run_ranks(3, settled_alltoall, algorithm, heap, 2048 if algorithm == "inline" else 40_000))


def mismatched_starts(case: str) -> str:
    """Ranks that do not start the same persistent request (or one starts it and another
    calls the plain Alltoall) all raise, and the communicator stays usable."""
    comm = shmcoll.Comm()
    me = comm.rank
    s, r = np.ones(4 * comm.size), np.zeros(4 * comm.size)
    a = comm.Alltoall_init(s, r)
    b = comm.Alltoall_init(s, r)
    a.Start()  # the first Starts, in the same order everywhere: ids 1 and 2
    b.Start()
    try:
        if case == "other-request":
            (a if me == 0 else b).Start()
        elif case == "plain-call":
            if me == 0:
                a.Start()
            else:
                comm.Alltoall(s, r)
        else:
            raise AssertionError(case)
    except shmcoll.ShmcollError as e:
        comm.Barrier()  # still usable after a rejected call
        a.Start()  # and the requests too
        comm.Free()
        return type(e).__name__
    comm.Free()
    return "no error"


@pytest.mark.parametrize("case", ["other-request", "plain-call"])
def test_mismatched_starts_raise_on_every_rank(case: str) -> None:
    got = run_ranks(3, mismatched_starts, case)
    assert got == ["MismatchError"] * 3, got


def settled_collectives(algorithm: str | None, nbytes: int) -> list[str]:
    """Persistent Allreduce and Allgather Starts after the first run the first Start's
    choice on its kept descriptors: many Starts with rewritten buffers, plain calls on
    the same buffers and a Bcast request in between, against closed-form values."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails: list[str] = []
    n = max(1, nbytes // 8)
    kw = {"algorithm": algorithm} if algorithm else {}
    heap = algorithm in ("direct", None)
    buf = comm.empty if heap else np.empty
    s, r = buf(n), buf(n)
    ag_s, ag_r = buf(n), buf(n * p)
    ar = comm.Allreduce_init(s, r, shmcoll.SUM, **kw)
    ag = comm.Allgather_init(ag_s, ag_r, **kw)
    bc_buf = buf(n)
    bc = comm.Bcast_init(bc_buf, root=0)
    for rnd in range(6):
        s[:] = np.arange(n) + me + rnd
        ag_s[:] = 10 * me + rnd
        bc_buf[:] = rnd if me == 0 else -1
        if rnd % 3 == 2:
            comm.Allreduce(s, r, **kw)
        else:
            ar.Start()
        ag.Start()
        bc.Start()
        want = sum(np.arange(n) + j + rnd for j in range(p))
        if not np.array_equal(r, want):
            fails.append(f"Allreduce round {rnd}: {r[:4]}")
        if not np.array_equal(ag_r, np.repeat(10.0 * np.arange(p) + rnd, n)):
            fails.append(f"Allgather round {rnd}: {ag_r[:4]}")
        if not (bc_buf == rnd).all():
            fails.append(f"Bcast round {rnd}: {bc_buf[:4]}")
    for req in (ar, ag, bc):
        req.Free()
    comm.Free()
    return fails


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("algorithm", [None, "inline", "direct", "cma", "staging"])
def test_settled_collective_starts(nranks: int, algorithm: str | None) -> None:
    nbytes = 512 if algorithm == "inline" else 96_000
    check_all(run_ranks(nranks, settled_collectives, algorithm, nbytes))


def mismatched_collective_starts() -> str:
    comm = shmcoll.Comm()
    x, y = np.ones(4), np.zeros(4)
    a = comm.Allreduce_init(x, y, shmcoll.SUM)
    b = comm.Allreduce_init(x, y, shmcoll.SUM)  # the same call: only the ids differ
    a.Start()
    b.Start()
    try:
        if comm.rank == 0:
            a.Start()
        elif comm.rank == 1:
            b.Start()
        else:
            comm.Allreduce(x, y, shmcoll.SUM)
    except shmcoll.ShmcollError as e:
        comm.Barrier()
        a.Start()
        comm.Free()
        return type(e).__name__
    comm.Free()
    return "no error"


def test_mismatched_collective_starts_raise_on_every_rank() -> None:
    got = run_ranks(3, mismatched_collective_starts)
    assert got == ["MismatchError"] * 3, got
