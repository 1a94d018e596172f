"""Alltoallv on 1 to 4 ranks: zero, ragged and random counts, displacements with gaps and
in any order, in place (symmetric counts) and not, every algorithm.

Hypothesis runs in the parent: it draws a whole list of cases, the ranks are launched once
per example and run every case. Each case is known to every rank in full (all ranks'
counts and displacements), so each rank rebuilds any peer's send buffer to compute what it
must receive, and checks that nothing outside its receive blocks changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shmcoll
from conftest import (
    ALGORITHMS,
    DTYPES,
    FATAL,
    ORDERS,
    STORES,
    block,
    cannot_serve,
    check_all,
    first_difference,
    new_buffer,
    run_ranks,
    sentinel,
)


@dataclass(frozen=True)
class VCase:
    """One Alltoallv, as every rank sees it. counts[i][j]: elements rank i sends to j."""

    dtype: str
    counts: tuple[tuple[int, ...], ...]
    sdispls: tuple[tuple[int, ...], ...]  # per rank, in elements (unused in place)
    rdispls: tuple[tuple[int, ...], ...]
    slen: tuple[int, ...]  # send buffer length of each rank, in elements
    rlen: tuple[int, ...]
    in_place: bool
    algorithm: str | None
    order: str | None
    store: str | None
    send_kind: str
    recv_kind: str
    spec: str  # how the buffers are passed: "tuple" | "four" | "counts-only"

    @property
    def p(self) -> int:
        return len(self.counts)

    def sendcounts(self, i: int) -> list[int]:
        return list(self.counts[i])

    def recvcounts(self, j: int) -> list[int]:
        return [self.counts[i][j] for i in range(self.p)]


def send_buffer(case: VCase, i: int) -> np.ndarray:
    """Rank i's send buffer (for in-place: its receive buffer before the call)."""
    dt = np.dtype(case.dtype)
    if case.in_place:
        buf = np.full(case.rlen[i], sentinel(dt), dt)
        for j in range(case.p):
            c = case.counts[i][j]  # symmetric: what i sends to j == what j sends to i
            buf[case.rdispls[i][j] : case.rdispls[i][j] + c] = block(i, j, c, dt)
        return buf
    buf = np.full(case.slen[i], sentinel(dt), dt)
    for j in range(case.p):  # later blocks win where send blocks overlap (that is allowed)
        c = case.counts[i][j]
        buf[case.sdispls[i][j] : case.sdispls[i][j] + c] = block(i, j, c, dt)
    return buf


def expected_recv(case: VCase, me: int) -> np.ndarray:
    dt = np.dtype(case.dtype)
    want = send_buffer(case, me) if case.in_place else np.full(case.rlen[me], sentinel(dt), dt)
    for i in range(case.p):
        c = case.counts[i][me]
        src = send_buffer(case, i)
        soff = case.rdispls[i][me] if case.in_place else case.sdispls[i][me]
        want[case.rdispls[me][i] : case.rdispls[me][i] + c] = src[soff : soff + c]
    return want


def _spec(case: VCase, buf: np.ndarray, counts: list[int], displs: list[int]) -> Any:
    dt = np.dtype(case.dtype).char
    if case.spec == "four":
        return [buf, counts, displs, dt]
    if case.spec == "ndarray":
        return [buf, (np.array(counts), np.array(displs)), np.dtype(case.dtype)]
    return [buf, (counts, displs), dt]


def run_case(comm: shmcoll.Comm, case: VCase, label: str) -> tuple[str | None, bool]:
    """Run one case on this rank. Returns (failure or None, communicator still usable)."""
    me, p = comm.rank, comm.size
    dt = np.dtype(case.dtype)
    recv = new_buffer(comm, case.recv_kind, case.rlen[me], dt)
    send: Any
    if case.in_place:
        recv[...] = send_buffer(case, me)
        send = shmcoll.IN_PLACE
    else:
        recv[...] = sentinel(dt)
        sdata = send_buffer(case, me)
        sb = new_buffer(comm, case.send_kind, case.slen[me], dt)
        sb[...] = sdata
        send = _spec(case, sb, case.sendcounts(me), list(case.sdispls[me]))
    before = recv.copy()
    rspec = _spec(case, recv, case.recvcounts(me), list(case.rdispls[me]))
    isz = dt.itemsize
    totals = [sum(case.counts[i]) * isz for i in range(p)]
    must_fail = case.algorithm is not None and cannot_serve(
        case.algorithm,
        in_place=case.in_place,
        all_send_heap=(case.recv_kind if case.in_place else case.send_kind) == "heap",
        all_recv_heap=case.recv_kind == "heap",
        all_inline_fit=max(totals) <= int(comm.config()["inline_bytes"]),
        cma_ok=comm.cma_ok,
    )
    try:
        comm.Alltoallv(send, rspec, algorithm=case.algorithm, order=case.order, store=case.store)
    except shmcoll.AlgorithmError as e:
        if not must_fail:
            return f"{label}: unexpected AlgorithmError: {e}", True
        if not np.array_equal(recv, before):
            return f"{label}: AlgorithmError, but the receive buffer was modified", True
        return None, True
    except FATAL as e:
        return f"{label}: {type(e).__name__}: {e}", False
    except Exception as e:
        return f"{label}: {type(e).__name__}: {e}", True
    if must_fail:
        return f"{label}: expected AlgorithmError, but it ran: {comm.last_choice()}", True
    c = comm.last_choice()
    if case.algorithm is not None and (c is None or c.algorithm != case.algorithm):
        return f"{label}: last_choice() is {c}", True
    if case.order is not None and (c is None or c.order != case.order):
        return f"{label}: last_choice() is {c}", True
    if case.store is not None and (c is None or c.store != case.store):
        return f"{label}: last_choice() is {c}", True
    want = expected_recv(case, me)
    if not np.array_equal(recv, want):
        return f"{label}: wrong result: {first_difference(recv, want)}", True
    if not case.in_place and not np.array_equal(sb, sdata):
        return f"{label}: the send buffer was modified", True
    return None, True


def _run_cases(cases: list[VCase]) -> list[str]:
    comm = shmcoll.Comm()
    failures = []
    for k, case in enumerate(cases):
        failure, usable = run_case(comm, case, f"case {k} {case}")
        if failure:
            failures.append(failure)
        if not usable:
            break
    else:
        comm.Barrier()
    return failures


# -- strategies -----------------------------------------------------------------------
def _layout(draw: Any, counts: list[int], overlap_ok: bool) -> tuple[list[int], int]:
    """Displacements for blocks of `counts`: in a random order, with random gaps (and, if
    allowed, all at 0: overlapping send blocks). Returns (displs, buffer length)."""
    p = len(counts)
    if overlap_ok and draw(st.integers(0, 9)) == 0:
        return [0] * p, max(counts, default=0) + draw(st.integers(0, 3))
    perm = draw(st.permutations(range(p)))
    displs = [0] * p
    at = 0
    for j in perm:
        at += draw(st.sampled_from((0, 0, 1, 3, 17)))
        displs[j] = at
        at += counts[j]
    return displs, at + draw(st.integers(0, 5))


@st.composite
def vcases(draw: Any, p: int) -> VCase:
    dtype = np.dtype(draw(st.sampled_from(DTYPES))).str
    kind = draw(st.sampled_from(("zero", "ragged", "random", "random", "one-sender", "big")))
    counts: list[list[int]]
    if kind == "zero":
        counts = [[0] * p for _ in range(p)]
    elif kind == "ragged":
        a, b = draw(st.integers(0, 5)), draw(st.integers(0, 7))
        counts = [[(i * a + j * b) % 11 for j in range(p)] for i in range(p)]
    elif kind == "one-sender":
        who = draw(st.integers(0, p - 1))
        counts = [[draw(st.integers(0, 50)) if i == who else 0 for j in range(p)] for i in range(p)]
    else:
        hi = 3000 if kind == "big" else draw(st.sampled_from((1, 9, 200)))
        counts = [[draw(st.integers(0, hi)) for _ in range(p)] for _ in range(p)]
    in_place = draw(st.integers(0, 3)) == 0
    if in_place:
        for i in range(p):
            for j in range(i):
                counts[i][j] = counts[j][i]
    sd, sl, rd, rl = [], [], [], []
    for i in range(p):
        d, n = _layout(draw, counts[i], overlap_ok=True)
        sd.append(tuple(d))
        sl.append(n)
        d, n = _layout(draw, [counts[j][i] for j in range(p)], overlap_ok=False)
        rd.append(tuple(d))
        rl.append(n)
    algorithm = draw(st.sampled_from((None, *ALGORITHMS)))
    return VCase(
        dtype=dtype,
        counts=tuple(tuple(r) for r in counts),
        sdispls=tuple(sd),
        rdispls=tuple(rd),
        slen=tuple(sl),
        rlen=tuple(rl),
        in_place=in_place,
        algorithm=algorithm,
        order=draw(st.sampled_from((None, *ORDERS))),
        store=draw(st.sampled_from((None, *STORES))),
        send_kind=draw(st.sampled_from(("heap", "ordinary"))),
        recv_kind=draw(st.sampled_from(("heap", "ordinary"))),
        spec=draw(st.sampled_from(("tuple", "four", "ndarray"))),
    )


def _property(p: int) -> Any:
    @pytest.mark.timeout(150)
    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=False,
    )
    @given(st.lists(vcases(p), min_size=20, max_size=20))
    def test(cases: list[VCase]) -> None:
        check_all(run_ranks(p, _run_cases, cases, timeout=25))

    test.__name__ = f"test_random_alltoallv_{p}_ranks"
    return test


test_random_alltoallv_1_ranks = _property(1)
test_random_alltoallv_2_ranks = _property(2)
test_random_alltoallv_3_ranks = _property(3)
test_random_alltoallv_4_ranks = _property(4)


# -- deterministic cases ------------------------------------------------------------
def _fixed_cases(p: int) -> list[VCase]:
    """Zero, ragged (rank i sends i + 2j + 1 elements to j) and one-empty-rank counts,
    compact and gapped layouts, every algorithm, heap and ordinary buffers."""
    out = []
    patterns = {
        "zero": [[0] * p for _ in range(p)],
        "ragged": [[i + 2 * j + 1 for j in range(p)] for i in range(p)],
        "last-rank-silent": [[0 if i == p - 1 or j == p - 1 else 3 for j in range(p)] for i in range(p)],
        "symmetric": [[min(i, j) * 5 + 2 for j in range(p)] for i in range(p)],
    }
    k = 0
    for counts in patterns.values():
        symmetric = all(counts[i][j] == counts[j][i] for i in range(p) for j in range(p))
        for algorithm in (None, *ALGORITHMS):
            for send_kind, recv_kind, in_place in (
                ("ordinary", "ordinary", False),
                ("heap", "heap", False),
                ("heap", "heap", True),
            ):
                if in_place and not symmetric:
                    continue
                k += 1
                dtype = np.dtype(DTYPES[k % len(DTYPES)]).str
                sd, sl, rd, rl = [], [], [], []
                for i in range(p):
                    # reversed block order with a 2-element gap before each block
                    send_counts = counts[i]
                    recv_counts = [counts[j][i] for j in range(p)]
                    d, at = [0] * p, 0
                    for j in reversed(range(p)):
                        at += 2
                        d[j] = at
                        at += send_counts[j]
                    sd.append(tuple(d))
                    sl.append(at + 1)
                    d, at = [0] * p, 0
                    for j in range(p):
                        at += 1
                        d[j] = at
                        at += recv_counts[j]
                    rd.append(tuple(d))
                    rl.append(at + 2)
                out.append(
                    VCase(
                        dtype=dtype,
                        counts=tuple(tuple(r) for r in counts),
                        sdispls=tuple(sd),
                        rdispls=tuple(rd),
                        slen=tuple(sl),
                        rlen=tuple(rl),
                        in_place=in_place,
                        algorithm=algorithm,
                        order=ORDERS[k % len(ORDERS)],
                        store=STORES[k % len(STORES)],
                        send_kind=send_kind,
                        recv_kind=recv_kind,
                        spec=("tuple", "four", "ndarray")[k % 3],
                    )
                )
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_fixed_alltoallv(nranks: int) -> None:
    check_all(run_ranks(nranks, _run_cases, _fixed_cases(nranks), timeout=50))


def _spec_forms() -> list[str]:
    """mpi4py's vector forms: plain array, [buf, counts, dt], [buf, count, dt] and friends."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    failures = []
    # plain arrays: equal blocks, like Alltoall
    s = np.concatenate([block(me, j, 3, np.float64) for j in range(p)])
    r = np.zeros_like(s)
    comm.Alltoallv(s, r)
    want = np.concatenate([block(i, me, 3, np.float64) for i in range(p)])
    if not np.array_equal(r, want):
        failures.append(f"plain arrays: {first_difference(r, want)}")
    # [buf, counts, "d"]: displacements are the prefix sums
    counts_s = [me + j + 1 for j in range(p)]
    counts_r = [i + me + 1 for i in range(p)]
    s = np.concatenate([block(me, j, counts_s[j], np.float64) for j in range(p)])
    r = np.zeros(sum(counts_r))
    comm.Alltoallv([s, counts_s, "d"], [r, counts_r, "d"])
    want = np.concatenate([block(i, me, counts_r[i], np.float64) for i in range(p)])
    if not np.array_equal(r, want):
        failures.append(f"[buf, counts, 'd']: {first_difference(r, want)}")
    # [buf, count] (one count for every rank), as int32
    s = np.concatenate([block(me, j, 4, np.int32) for j in range(p)])
    r = np.zeros_like(s)
    comm.Alltoallv([s, 4], [r, 4])
    want = np.concatenate([block(i, me, 4, np.int32) for i in range(p)])
    if not np.array_equal(r, want):
        failures.append(f"[buf, count]: {first_difference(r, want)}")
    # in place with a plain array
    ip = np.concatenate([block(me, j, 2, np.complex128) for j in range(p)])
    comm.Alltoallv(shmcoll.IN_PLACE, ip)
    want = np.concatenate([block(i, me, 2, np.complex128) for i in range(p)])
    if not np.array_equal(ip, want):
        failures.append(f"IN_PLACE plain: {first_difference(ip, want)}")
    return failures


@pytest.mark.timeout(30)
@pytest.mark.parametrize("nranks", [1, 3])
def test_vector_spec_forms(nranks: int) -> None:
    check_all(run_ranks(nranks, _spec_forms, timeout=20))


def test_case_model_round_trip() -> None:
    """The reference model itself: with identity-like counts, expected == blocks."""
    case = _fixed_cases(2)[0]
    for me in range(2):
        assert expected_recv(case, me).shape == (case.rlen[me],)
