"""Alltoall on 1 to 4 ranks (4 oversubscribes the 2 cores of the CI machine): every
algorithm x order x store forced in turn, in place and not, heap and ordinary buffers,
several sizes and dtypes, against closed-form values; the automatic choice; mpi4py's
buffer specifications; forcing through the environment.

Each test launches its ranks once and runs many cases inside them (a launch costs far
more than a small Alltoall)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

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
    environ,
    first_difference,
    new_buffer,
    private_empty,
    recv_expected,
    run_ranks,
    send_data,
    sentinel,
)

#: (send kind, receive kind, in place)
MODES = (
    ("ordinary", "ordinary", False),
    ("heap", "heap", False),
    ("heap", "ordinary", False),
    ("ordinary", "heap", False),
    (None, "ordinary", True),
    (None, "heap", True),
)
#: Elements per rank of the small cases; the dtype rotates, so bytes per rank range from
#: 0 and 1 to odd sizes and 16 KB.
SMALL_COUNTS = (0, 1, 7, 1001)
#: Bytes per rank of the larger cases (uint8 / float64 elements).
LARGE_BYTES = (70_000, 1 << 20)


class Cases:
    """One rank's view of a sequence of Alltoall cases; collects failures."""

    def __init__(self, comm: shmcoll.Comm) -> None:
        self.comm = comm
        self.p = comm.size
        self.me = comm.rank
        self.inline_cap = int(comm.config()["inline_bytes"])
        self.cma_ok = comm.cma_ok
        self.failures: list[str] = []
        self.ran = 0
        self.rejected = 0
        self._cache: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}

    def data(self, count: int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        key = (count, np.dtype(dtype).str)
        if key not in self._cache:
            self._cache[key] = (
                send_data(self.me, self.p, count, dtype),
                recv_expected(self.me, self.p, count, dtype),
            )
        return self._cache[key]

    def run(
        self,
        algorithm: str,
        order: str,
        store: str,
        count: int,
        dtype: Any,
        *,
        mode: tuple[str | None, str, bool],
    ) -> bool:
        """One forced Alltoall, checked; `mode` is (send kind, receive kind, in place).
        Returns False when the communicator is gone."""
        send_kind, recv_kind, in_place = mode
        comm, p = self.comm, self.p
        sdata, want = self.data(count, dtype)
        label = (
            f"{algorithm}/{order}/{store} p={p} count={count} {np.dtype(dtype).name} "
            f"send={'IN_PLACE' if in_place else send_kind} recv={recv_kind}"
        )
        recv = new_buffer(comm, recv_kind, p * count, dtype)
        send: Any
        if in_place:
            recv[...] = sdata
            send = shmcoll.IN_PLACE
        else:
            assert send_kind is not None
            recv[...] = sentinel(dtype)
            send = new_buffer(comm, send_kind, p * count, dtype)
            send[...] = sdata
        before = recv.copy()
        nbytes = p * count * np.dtype(dtype).itemsize
        must_fail = cannot_serve(
            algorithm,
            in_place=in_place,
            all_send_heap=send_kind == "heap",
            all_recv_heap=recv_kind == "heap",
            all_inline_fit=nbytes <= self.inline_cap,
            cma_ok=self.cma_ok,
        )
        try:
            comm.Alltoall(send, recv, algorithm=algorithm, order=order, store=store)
        except shmcoll.AlgorithmError as e:
            self.rejected += 1
            if not must_fail:
                self.failures.append(f"{label}: unexpected AlgorithmError: {e}")
            elif not np.array_equal(recv, before):
                self.failures.append(f"{label}: AlgorithmError, but the receive buffer was modified")
            return True
        except FATAL as e:
            self.failures.append(f"{label}: {type(e).__name__}: {e}")
            return False
        except Exception as e:
            self.failures.append(f"{label}: {type(e).__name__}: {e}")
            return True
        self.ran += 1
        if must_fail:
            self.failures.append(f"{label}: expected AlgorithmError, but it ran ({comm.last_choice()})")
            return True
        choice = comm.last_choice()
        if choice != (algorithm, order, store, True):
            self.failures.append(f"{label}: last_choice() is {choice}")
        if not np.array_equal(recv, want):
            self.failures.append(f"{label}: wrong result: {first_difference(recv, want)}")
        if not in_place and not np.array_equal(send, sdata):
            self.failures.append(f"{label}: the send buffer was modified")
        return True


def _forced_matrix(algorithm: str) -> tuple[list[str], int, int]:
    """Every order x store x small count x mode, and a few larger cases, with `algorithm`."""
    comm = shmcoll.Comm()
    cases = Cases(comm)
    ok = True
    for oi, order in enumerate(ORDERS):
        for si, store in enumerate(STORES):
            combo = oi * len(STORES) + si
            for ci, count in enumerate(SMALL_COUNTS):
                dtype = DTYPES[(combo + ci) % len(DTYPES)]
                for send_kind, recv_kind, in_place in MODES:
                    ok = ok and cases.run(
                        algorithm, order, store, count, dtype, mode=(send_kind, recv_kind, in_place)
                    )
            # larger cases in every mode, rotating the size and the dtype
            for mi, (send_kind, recv_kind, in_place) in enumerate(MODES):
                nbytes = LARGE_BYTES[(combo + mi) % len(LARGE_BYTES)]
                dtype = (np.uint8, np.float64, np.int32)[(combo + mi) % 3]
                count = nbytes // np.dtype(dtype).itemsize
                ok = ok and cases.run(
                    algorithm, order, store, count, dtype, mode=(send_kind, recv_kind, in_place)
                )
            if not ok:
                return cases.failures, cases.ran, cases.rejected, cases.cma_ok
    comm.Barrier()
    comm.Free()
    return cases.failures, cases.ran, cases.rejected, cases.cma_ok


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_forced_algorithm_order_store(nranks: int, algorithm: str, cma_works: bool) -> None:
    results = run_ranks(nranks, _forced_matrix, algorithm, timeout=50)
    check_all([r[0] for r in results])
    # the cma algorithms must really have run where the machine allows CMA
    assert all(r[3] == cma_works for r in results), f"cma_ok {[r[3] for r in results]}, probe {cma_works}"
    ran = {r[1] for r in results}
    rejected = {r[2] for r in results}
    assert len(ran) == 1 and len(rejected) == 1, f"ranks disagree on what ran: {results}"
    assert ran.pop() > 0, "no case ran at all"
    if algorithm in ("pull", "push", "cma", "inline"):
        assert rejected.pop() > 0, "no case was rejected, so the restrictions were not exercised"


def _big(algorithm: str) -> tuple[list[str], int]:
    """16 MiB per rank with `algorithm` (2 ranks: 32 MiB send + 32 MiB receive each)."""
    comm = shmcoll.Comm()
    cases = Cases(comm)
    count = (16 << 20) // 16
    modes = [("heap", "heap", False)]
    if algorithm in ("staging", "cma"):
        modes.append(("ordinary", "ordinary", False))
    if algorithm == "staging":
        modes.append((None, "heap", True))
    if algorithm == "inline":
        modes = [("ordinary", "ordinary", False)]  # must be rejected: far beyond the inline area
    orders = ("shifted", "xor", "morton")
    for (send_kind, recv_kind, in_place), order, store in zip(
        modes, orders, ("nt", "hybrid", "temporal"), strict=False
    ):
        if not cases.run(
            algorithm, order, store, count, np.complex128, mode=(send_kind, recv_kind, in_place)
        ):
            break
    comm.Free()
    return cases.failures, cases.ran, cases.rejected


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_16mib_per_rank(algorithm: str) -> None:
    results = run_ranks(2, _big, algorithm, timeout=50)
    check_all([r[0] for r in results])
    want = {"inline": (0, 1), "staging": (3, 0), "cma": (2, 0)}.get(algorithm, (1, 0))
    assert all(r[1:] == want for r in results), results


# -- the automatic choice -------------------------------------------------------------
def _expected_auto(comm: shmcoll.Comm, bpp: int, send_heap: bool, recv_heap: bool, in_place: bool) -> tuple:
    """What the bound table must choose: in the range holding `bpp`, the first candidate
    whose algorithm can serve the call (written out here independently of the engine)."""
    _, ranges = comm.selection()
    rng = next((r for r in ranges if r[0] <= bpp and (r[1] is None or bpp <= r[1])), None)
    assert rng is not None, f"no range holds {bpp}"
    wants_inline = any(c[0] == "inline" for c in rng[2])
    inline_fit = wants_inline and comm.size * bpp <= comm.config()["inline_bytes"]
    for algo, order, store, _, _ in rng[2]:
        if not cannot_serve(
            algo,
            in_place=in_place,
            all_send_heap=send_heap,
            all_recv_heap=recv_heap,
            all_inline_fit=inline_fit,
            cma_ok=comm.cma_ok,
        ):
            return (algo, order, store, False)
    return ("staging", "shifted", "hybrid", False)


def _auto_choice() -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    failures = []
    calls_before = comm.stats()["calls"]  # creating the Comm checks the tuning table once
    for nbytes in (0, 8, 1000, 4096, 16 << 10, 70_000, 1 << 20):
        for send_kind, recv_kind, in_place in MODES:
            sdata = send_data(me, p, nbytes, np.uint8)
            recv = new_buffer(comm, recv_kind, p * nbytes, np.uint8)
            if in_place:
                recv[...] = sdata
                send: Any = shmcoll.IN_PLACE
            else:
                send = new_buffer(comm, send_kind or "", p * nbytes, np.uint8)
                send[...] = sdata
            comm.Alltoall(send, recv)
            want = _expected_auto(comm, nbytes, send_kind == "heap", recv_kind == "heap", in_place)
            got = comm.last_choice()
            label = f"auto bytes={nbytes} send={send_kind} recv={recv_kind} in_place={in_place}"
            if got != want:
                failures.append(f"{label}: chose {got}, the rules say {want}")
            if not np.array_equal(recv, recv_expected(me, p, nbytes, np.uint8)):
                failures.append(f"{label}: wrong result")
            if got is not None and got.forced:
                failures.append(f"{label}: reported as forced")
            single_copy = ("pull", "push", "cma", "cma-push")
            if (
                nbytes >= 70_000
                and not in_place
                and send_kind == recv_kind == "heap"
                and (got is None or got.algorithm not in single_copy)
            ):
                failures.append(f"{label}: heap buffers but no single-copy algorithm: {got}")
    stats = comm.stats()
    if stats["calls"] - calls_before != 7 * len(MODES):
        failures.append(f"stats: {stats}")
    if sum(stats[a] for a in ALGORITHMS) != stats["calls"]:
        failures.append(f"stats per algorithm do not add up: {stats}")
    return failures


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_automatic_choice(nranks: int) -> None:
    check_all(run_ranks(nranks, _auto_choice, timeout=50))


# -- mpi4py buffer specifications ----------------------------------------------------
def _specs() -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    failures: list[str] = []

    def expect(label: str, got: np.ndarray, want: np.ndarray) -> None:
        if not np.array_equal(got, want):
            failures.append(f"{label}: {first_difference(got, want)}")

    n = 5
    sdata = send_data(me, p, n, np.float64)
    want = recv_expected(me, p, n, np.float64)
    for kind in ("ordinary", "heap"):
        # [buf, count, "d"] on buffers longer than needed: the tail stays untouched
        send = new_buffer(comm, kind, p * n + 3, np.float64)
        send[: p * n] = sdata
        send[p * n :] = 99.0
        recv = new_buffer(comm, kind, p * n + 3, np.float64)
        recv[...] = -1.0
        comm.Alltoall([send, n, "d"], [recv, n, "d"])
        expect(f"{kind} [buf, count, 'd']", recv[: p * n], want)
        expect(f"{kind} [buf, count, 'd'] tail", recv[p * n :], np.full(3, -1.0))
        # [buf, "d"]
        recv2 = new_buffer(comm, kind, p * n, np.float64)
        comm.Alltoall([send[: p * n], "d"], [recv2, "d"])
        expect(f"{kind} [buf, 'd']", recv2, want)
        # [buf, (count, displ), "d"]: displ elements into the buffer
        sd = new_buffer(comm, kind, p * n + 4, np.float64)
        sd[:4] = 7.0
        sd[4:] = sdata
        rd = new_buffer(comm, kind, p * n + 6, np.float64)
        rd[...] = -1.0
        comm.Alltoall([sd, (n, 4), "d"], [rd, (n, 2), "d"])
        expect(f"{kind} [buf, (count, displ), 'd']", rd[2 : 2 + p * n], want)
        expect(f"{kind} [buf, (count, displ), 'd'] head", rd[:2], np.full(2, -1.0))
        expect(f"{kind} [buf, (count, displ), 'd'] tail", rd[2 + p * n :], np.full(4, -1.0))
        # another datatype than the array's own: the float64 buffer as bytes
        rb = new_buffer(comm, kind, p * n, np.float64)
        comm.Alltoall([send[: p * n], p * n * 8 // p, "B"], [rb, "B"])
        expect(f"{kind} [buf, count, 'B']", rb, want)
        # in place with a spec
        ip = new_buffer(comm, kind, p * n, np.float64)
        ip[...] = sdata
        comm.Alltoall(shmcoll.IN_PLACE, [ip, n, "d"])
        expect(f"{kind} IN_PLACE, [buf, count, 'd']", ip, want)
        del send, recv, recv2, sd, rd, rb, ip

    # 2-D arrays, one row per rank
    s2 = send_data(me, p, 4, np.int32).reshape(p, 4)
    r2 = np.zeros((p, 4), np.int32)
    comm.Alltoall(s2, r2)
    expect("2-D int32", r2.reshape(-1), recv_expected(me, p, 4, np.int32))
    # non-NumPy buffer-protocol objects
    sb = bytearray(send_data(me, p, 3, np.uint8).tobytes())
    rb2 = bytearray(3 * p)
    comm.Alltoall(sb, rb2)
    expect("bytearray", np.frombuffer(rb2, np.uint8), recv_expected(me, p, 3, np.uint8))
    rb3 = bytearray(3 * p)
    comm.Alltoall(bytes(sb), memoryview(rb3))
    expect("bytes -> memoryview", np.frombuffer(rb3, np.uint8), recv_expected(me, p, 3, np.uint8))
    # read-only send buffers are fine
    ro = send_data(me, p, 6, np.int32)
    ro.flags.writeable = False
    r3 = np.zeros(6 * p, np.int32)
    comm.Alltoall(ro, r3)
    expect("read-only send", r3, recv_expected(me, p, 6, np.int32))
    return failures


@pytest.mark.timeout(40)
@pytest.mark.parametrize("nranks", [1, 3])
def test_mpi4py_buffer_specs(nranks: int) -> None:
    check_all(run_ranks(nranks, _specs, timeout=30))


def _mpi_datatypes() -> list[str]:
    from mpi4py import MPI

    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    failures = []
    s = send_data(me, p, 4, np.float64)
    r = np.zeros_like(s)
    comm.Alltoall([s, MPI.DOUBLE], [r, MPI.DOUBLE])
    if not np.array_equal(r, recv_expected(me, p, 4, np.float64)):
        failures.append("[buf, MPI.DOUBLE]")
    si = send_data(me, p, 4, np.int32)
    ri = np.zeros_like(si)
    comm.Alltoall([si, 4, MPI.INT], [ri, 4, MPI.INT])
    if not np.array_equal(ri, recv_expected(me, p, 4, np.int32)):
        failures.append("[buf, 4, MPI.INT]")
    ip = s.copy()
    comm.Alltoall(MPI.IN_PLACE, [ip, MPI.DOUBLE])
    if not np.array_equal(ip, recv_expected(me, p, 4, np.float64)):
        failures.append("MPI.IN_PLACE")
    # MPI.IN_PLACE exports an empty buffer: it must not be taken for a 0-byte send buffer.
    for plain in (s.copy(), private_empty(s.shape, s.dtype)):
        plain[...] = s
        comm.Alltoall(MPI.IN_PLACE, plain)
        if not np.array_equal(plain, recv_expected(me, p, 4, np.float64)):
            failures.append("MPI.IN_PLACE with a plain array")
    return failures


@pytest.mark.timeout(30)
def test_mpi4py_datatypes_without_mpiexec() -> None:
    pytest.importorskip("mpi4py.MPI")
    check_all(run_ranks(2, _mpi_datatypes, timeout=20))


# -- identity and lifetime -----------------------------------------------------------
def _identity() -> dict[str, Any]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    out: dict[str, Any] = {
        "rank": comm.rank,
        "size": comm.size,
        "Get_rank": comm.Get_rank(),
        "Get_size": comm.Get_size(),
        "repr": repr(comm),
        "mpi": comm.mpi_comm,
    }
    for _ in range(3):
        comm.Barrier()
        comm.barrier()
    # a second Comm() and Dup(): new communicators over the same ranks, each working
    # independently of the first
    second = shmcoll.Comm()
    dup = comm.Dup()
    out["dups"] = [(c.rank, c.size) for c in (second, dup)]
    s = send_data(me, p, 5, np.int32)
    ok = True
    for c in (dup, comm, second, dup):
        r = np.zeros_like(s)
        c.Alltoall(s, r)
        ok = ok and np.array_equal(r, recv_expected(me, p, 5, np.int32))
    out["dup_ok"] = ok
    out["dup_stats"] = (comm.stats()["calls"], dup.stats()["calls"], second.stats()["calls"])
    dup.Free()
    second.Free()
    with comm:
        comm.Barrier()
    out["freed_repr"] = repr(comm)
    return out


@pytest.mark.timeout(30)
def test_identity_barrier_dup_and_context_manager() -> None:
    results = run_ranks(3, _identity, timeout=20)
    for r, res in enumerate(results):
        assert res["rank"] == res["Get_rank"] == r
        assert res["size"] == res["Get_size"] == 3
        assert res["repr"] == f"<shmcoll.Comm rank {r} of 3>"
        assert res["freed_repr"] == "<shmcoll.Comm freed>"
        assert res["mpi"] is None
        assert res["dups"] == [(r, 3), (r, 3)]
        assert res["dup_ok"]
        # the parent's count also includes the exchanges that created the two duplicates
        # (which also compared the tuning tables every rank remembers from the parent),
        # so each duplicate's own count is its own calls alone
        assert res["dup_stats"][1:] == (2, 1), res["dup_stats"]
        assert res["dup_stats"][0] >= 1


@pytest.mark.parent_comm
def test_single_process_comm_without_launcher() -> None:
    with shmcoll.Comm() as comm:
        assert (comm.rank, comm.size) == (0, 1)
        s = np.arange(10.0)
        r = np.zeros(10)
        for algorithm in ("inline", "staging", "cma"):
            r[...] = 0
            comm.Alltoall(s, r, algorithm=algorithm)
            assert np.array_equal(r, s)
        hs = comm.empty(10)
        hs[...] = s
        hr = comm.zeros(10)
        comm.Alltoall(hs, hr, algorithm="pull")
        assert np.array_equal(hr, s)
        del hs, hr


# -- forcing through the environment ------------------------------------------------
def _env_forced() -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    failures = []
    n = 100
    s = send_data(me, p, n, np.float64)
    want = recv_expected(me, p, n, np.float64)
    r = np.zeros_like(s)
    comm.Alltoall(s, r)
    if comm.last_choice() != ("staging", "xor", "nt", True):
        failures.append(f"env: {comm.last_choice()}")
    if not np.array_equal(r, want):
        failures.append("env: wrong result")
    if comm.config()["forced"] != "algorithm=staging, order=xor, store=nt":
        failures.append(f"config: {comm.config()['forced']}")
    # keywords win over the environment, field by field
    r[...] = 0
    comm.Alltoall(s, r, algorithm="inline")
    if comm.last_choice() != ("inline", "xor", "nt", True):
        failures.append(f"keyword over env: {comm.last_choice()}")
    r[...] = 0
    comm.Alltoall(s, r, order="morton", store="temporal")
    if comm.last_choice() != ("staging", "morton", "temporal", True):
        failures.append(f"keyword order/store over env: {comm.last_choice()}")
    if not np.array_equal(r, want):
        failures.append("keywords: wrong result")
    return failures


@pytest.mark.timeout(30)
def test_environment_forces_the_choice() -> None:
    env = {
        "SHMCOLL_ALLTOALL_ALGORITHM": "staging",
        "SHMCOLL_ALLTOALL_ORDER": "xor",
        "SHMCOLL_ALLTOALL_STORE": "nt",
    }
    check_all(run_ranks(3, _env_forced, timeout=20, env=env))


def _env_pull_ordinary() -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    s = send_data(me, p, 10, np.int32)
    r = np.zeros_like(s)
    try:
        comm.Alltoall(s, r)
    except shmcoll.AlgorithmError:
        pass
    else:
        return [f"ran: {comm.last_choice()}"]
    if r.any():
        return ["receive buffer modified"]
    hs, hr = comm.empty(s.size, np.int32), comm.zeros(s.size, np.int32)
    hs[...] = s
    comm.Alltoall(hs, hr)
    c = comm.last_choice()
    if c is None or c.algorithm != "pull" or not c.forced:
        return [f"heap: {c}"]
    if not np.array_equal(hr, recv_expected(me, p, 10, np.int32)):
        return ["heap: wrong result"]
    return []


@pytest.mark.timeout(30)
def test_environment_forced_algorithm_that_cannot_serve() -> None:
    check_all(run_ranks(2, _env_pull_ordinary, timeout=20, env={"SHMCOLL_ALLTOALL_ALGORITHM": "PULL"}))


def _noop() -> None:
    return None


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("SHMCOLL_ALLTOALL_ALGORITHM", "bogus"),
        ("SHMCOLL_ALLTOALL_ORDER", "diagonal"),
        ("SHMCOLL_ALLTOALL_STORE", "streaming"),
        ("SHMCOLL_TIMEOUT", "-1"),
        ("SHMCOLL_HEAP_BYTES", "lots"),
        ("SHMCOLL_LEAVE_YIELDS", "2.5"),
    ],
)
def test_bad_environment_is_an_argument_error(var: str, value: str) -> None:
    with environ({var: value}), pytest.raises(shmcoll.ArgumentError):
        shmcoll.spawn(2, _noop, start_method="fork", timeout=20)


@pytest.mark.timeout(30)
def test_auto_in_environment_means_not_forced() -> None:
    results = run_ranks(
        2,
        _auto_choice_small,
        timeout=20,
        env={"SHMCOLL_ALLTOALL_ALGORITHM": "auto", "SHMCOLL_ALLTOALL_STORE": " "},
    )
    assert all(not r.forced for r in results), results


def _auto_choice_small() -> Any:
    comm = shmcoll.Comm()
    s = np.arange(2 * 4, dtype=np.int64)
    comm.Alltoall(s, np.empty_like(s))
    return comm.last_choice()


def test_closed_form_blocks_are_distinct() -> None:
    """The check is only as good as the data: blocks of different (i, j) must differ."""
    for dtype in DTYPES:
        seen = set()
        for i in range(4):
            for j in range(4):
                b = block(i, j, 8, dtype).tobytes()
                assert b not in seen, (i, j, dtype)
                seen.add(b)
        assert sentinel(dtype) not in block(0, 0, 10_000, dtype)


def _cma_ok() -> bool:
    return shmcoll.Comm().cma_ok


@pytest.mark.parent_comm
@pytest.mark.timeout(30)
def test_cma_in_ranks_forked_after_a_comm(cma_works: bool) -> None:
    if not cma_works:
        pytest.skip("process_vm_readv is not permitted here")
    shmcoll.Comm().Free()  # a communicator in this process first
    assert run_ranks(2, _cma_ok, timeout=20) == [True, True]
