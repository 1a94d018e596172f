"""Bcast, Allgather(v), Gather(v), Scatter(v), Reduce_scatter(_block), Allreduce and Reduce
on 1 to 4 forked ranks, against closed-form values.

Every rank can compute every rank's contribution (a function of rank and index alone),
hence the exact expected result; reductions are predicted by combining those
contributions in rank order with NumPy operations that have the kernels' semantics
(wrapping integers, MIN/MAX keeping the left operand on NaN). Each algorithm is forced in
turn (and the automatic choice), with heap and ordinary buffers, in place and not, zero,
odd and ragged sizes; a small staging area makes the staging algorithm run many rounds."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import check_all, private_empty, run_ranks

pytestmark = pytest.mark.timeout(120)

ALGOS: tuple[str | None, ...] = (None, "inline", "direct", "cma", "staging")
INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_TYPES = ("float32", "float64", "complex64", "complex128")
OPS = ("sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor")


def supported(op: str, dtype: str) -> bool:
    kind = np.dtype(dtype).kind
    if op in ("band", "bor", "bxor", "land", "lor"):
        return kind in "iu"
    if op in ("min", "max"):
        return kind != "c"
    return True


def contribution(rank: int, n: int, dtype: str, salt: int = 0) -> np.ndarray:
    """Rank `rank`'s data: small values (sums and products stay exact in floats), zeros
    included (so that LAND/LOR see both truth values)."""
    k = np.arange(n)
    v = (rank * 131 + k * 7 + salt * 13) % 11 - 3
    dt = np.dtype(dtype)
    if dt.kind == "u":
        v = np.abs(v)
    out = v.astype(dt)
    if dt.kind == "c":
        out = (out + 1j * ((k + rank) % 3)).astype(dt)
    return out


def combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a op b with the kernels' semantics (a: lower ranks' result, b: the next rank)."""
    with np.errstate(all="ignore"):
        if op == "sum":
            return (a + b).astype(a.dtype)
        if op == "prod":
            return (a * b).astype(a.dtype)
        if op == "min":
            return np.where(b < a, b, a)
        if op == "max":
            return np.where(b > a, b, a)
        if op == "band":
            return a & b
        if op == "bor":
            return a | b
        if op == "bxor":
            return a ^ b
        if op == "land":
            return ((a != 0) & (b != 0)).astype(a.dtype)
        if op == "lor":
            return ((a != 0) | (b != 0)).astype(a.dtype)
    raise AssertionError(op)


def reduced(op: str, parts: list[np.ndarray]) -> np.ndarray:
    acc = parts[0].copy()
    for x in parts[1:]:
        acc = combine(op, acc, x)
    return acc


class Run:
    """Failures of one rank, with helpers to make buffers and check results."""

    def __init__(self, comm: shmcoll.Comm, algorithm: str | None, heap: bool) -> None:
        self.c = comm
        self.p, self.me = comm.size, comm.rank
        self.alg = algorithm
        self.heap = heap
        self.failures: list[str] = []
        self.inline_cap = int(comm.config()["inline_bytes"])

    def buf(self, n: int, dtype: str, fill: Any = None) -> np.ndarray:
        a = self.c.empty(n, dtype) if self.heap else np.empty(n, dtype)
        if fill is None:
            a[...] = np.array(0x5A).astype(dtype)  # a sentinel that results must replace
        else:
            a[...] = fill
        return a

    def fits_inline(self, nbytes: int) -> bool:
        return nbytes <= self.inline_cap

    def check(self, label: str, got: np.ndarray, want: np.ndarray) -> None:
        if got.shape != want.shape or got.tobytes() != want.tobytes():
            diff = np.flatnonzero(got != want) if got.shape == want.shape else [None]
            self.failures.append(
                f"{label} alg={self.alg} heap={self.heap}: got {got[:6]} want {want[:6]} "
                f"(first diff {diff[:1]})"
            )

    def served(self, label: str) -> None:
        c = self.c.last_choice()
        if self.alg is not None and (c is None or c.algorithm != self.alg):
            self.failures.append(f"{label}: forced {self.alg} but {c} served")

    def call(self, label: str, fn: Callable[..., None], *args: Any, **kw: Any) -> bool:
        """Run a collective; False (and a failure) if it raised."""
        try:
            fn(*args, algorithm=self.alg, **kw)
        except shmcoll.ShmcollError as e:
            self.failures.append(f"{label} alg={self.alg} heap={self.heap}: raised {type(e).__name__}: {e}")
            return False
        self.served(label)
        return True


def data_movement(algorithm: str | None, heap: bool) -> list[str]:
    comm = shmcoll.Comm()
    r = Run(comm, algorithm, heap)
    p, me = r.p, r.me
    sizes = [0, 1, 7, 300] + ([5000, 70_000] if algorithm != "inline" else [])
    for t, n in enumerate(sizes):
        dt = ("float64", "uint8", "int32", "complex128")[t % 4]
        isz = np.dtype(dt).itemsize
        for root in sorted({0, p - 1}):
            # Bcast
            b = r.buf(n, dt) if me != root else r.buf(n, dt, contribution(root, n, dt))
            if r.call(f"Bcast n={n} root={root}", comm.Bcast, b, root=root):
                r.check(f"Bcast n={n} root={root}", b, contribution(root, n, dt))
            # Gather, in place at the root and not
            for in_place in (False, True):
                recv = r.buf(n * p, dt) if me == root else None
                send: Any = r.buf(n, dt, contribution(me, n, dt))
                if in_place and me == root:
                    assert recv is not None
                    recv[me * n : (me + 1) * n] = contribution(me, n, dt)
                    send = shmcoll.IN_PLACE
                if (
                    r.call(f"Gather n={n} root={root} ip={in_place}", comm.Gather, send, recv, root=root)
                    and recv is not None
                ):
                    want = np.concatenate([contribution(j, n, dt) for j in range(p)])
                    r.check(f"Gather n={n} root={root} ip={in_place}", recv, want)
                # Scatter
                sbuf = (
                    r.buf(n * p, dt, np.concatenate([contribution(j, n, dt, 1) for j in range(p)]))
                    if me == root
                    else None
                )
                rbuf: Any = r.buf(n, dt)
                if in_place and me == root:
                    rbuf = shmcoll.IN_PLACE
                ok = r.call(f"Scatter n={n} root={root} ip={in_place}", comm.Scatter, sbuf, rbuf, root=root)
                if ok and rbuf is not shmcoll.IN_PLACE:
                    r.check(f"Scatter n={n} root={root} ip={in_place}", rbuf, contribution(me, n, dt, 1))
        # Allgather
        if algorithm == "inline" and not r.fits_inline(n * isz):
            continue
        for in_place in (False, True):
            recv = r.buf(n * p, dt)
            send = r.buf(n, dt, contribution(me, n, dt, 2))
            if in_place:
                recv[me * n : (me + 1) * n] = send
                send = shmcoll.IN_PLACE
            if r.call(f"Allgather n={n} ip={in_place}", comm.Allgather, send, recv):
                r.check(
                    f"Allgather n={n} ip={in_place}",
                    recv,
                    np.concatenate([contribution(j, n, dt, 2) for j in range(p)]),
                )
    # Vector variants: zero and ragged counts, displacements with gaps and reversed order.
    for kind in ("zero", "ragged", "reversed"):
        dt = "int64"
        counts = [0] * p if kind == "zero" else [(j * 3 + 1) % 4 for j in range(p)]
        if kind == "reversed":
            counts = [j + 2 for j in range(p)]
        displs = []
        at = 1  # a gap in front
        order = range(p - 1, -1, -1) if kind == "reversed" else range(p)
        tmp = [0] * p
        for j in order:
            tmp[j] = at
            at += counts[j] + 2  # and gaps between blocks
        displs = tmp
        total = at
        mine = contribution(me, counts[me], dt, 3)
        # Allgatherv
        recv = r.buf(total, dt)
        if r.call(
            f"Allgatherv {kind}", comm.Allgatherv, r.buf(counts[me], dt, mine), [recv, counts, displs, None]
        ):
            want = np.full(total, 0x5A, dt)
            for j in range(p):
                want[displs[j] : displs[j] + counts[j]] = contribution(j, counts[j], dt, 3)
            r.check(f"Allgatherv {kind}", recv, want)
        root = p // 2
        # Gatherv
        recv = r.buf(total, dt) if me == root else None
        spec = [recv, (counts, displs), None] if me == root else None
        if (
            r.call(f"Gatherv {kind}", comm.Gatherv, r.buf(counts[me], dt, mine), spec, root=root)
            and recv is not None
        ):
            want = np.full(total, 0x5A, dt)
            for j in range(p):
                want[displs[j] : displs[j] + counts[j]] = contribution(j, counts[j], dt, 3)
            r.check(f"Gatherv {kind}", recv, want)
        # Scatterv
        if me == root:
            src = r.buf(total, dt, 0)
            for j in range(p):
                src[displs[j] : displs[j] + counts[j]] = contribution(j, counts[j], dt, 4)
            sspec: Any = [src, counts, displs, None]
        else:
            sspec = None
        got = r.buf(counts[me], dt)
        if r.call(f"Scatterv {kind}", comm.Scatterv, sspec, got, root=root):
            r.check(f"Scatterv {kind}", got, contribution(me, counts[me], dt, 4))
    comm.Free()
    return r.failures


def reductions(algorithm: str | None, heap: bool, dtypes: tuple[str, ...]) -> list[str]:
    comm = shmcoll.Comm()
    r = Run(comm, algorithm, heap)
    p, me = r.p, r.me
    for t, dt in enumerate(dtypes):
        isz = np.dtype(dt).itemsize
        sizes = [0, 1, 33] + ([20_000] if algorithm != "inline" else [200])
        for n in sizes:
            for op in OPS:
                if not supported(op, dt):
                    continue
                parts = [contribution(j, n, dt, t) for j in range(p)]
                want = reduced(op, parts)
                big = algorithm == "inline" and not r.fits_inline(n * isz * p)
                in_place = (n + OPS.index(op)) % 2 == 1
                label = f"{dt} {op} n={n} ip={in_place}"
                # Allreduce
                recv = r.buf(n, dt, parts[me] if in_place else None)
                send: Any = shmcoll.IN_PLACE if in_place else r.buf(n, dt, parts[me])
                if r.call(f"Allreduce {label}", comm.Allreduce, send, recv, op=op):
                    r.check(f"Allreduce {label}", recv, want)
                # Reduce
                root = (n + t) % p
                rr = r.buf(n, dt, parts[me] if in_place else None) if me == root else None
                send = shmcoll.IN_PLACE if (in_place and me == root) else r.buf(n, dt, parts[me])
                if (
                    r.call(f"Reduce {label} root={root}", comm.Reduce, send, rr, op=op, root=root)
                    and rr is not None
                ):
                    r.check(f"Reduce {label} root={root}", rr, want)
                # Reduce_scatter_block: p blocks of n
                if big:
                    continue
                full = [contribution(j, n * p, dt, t + 1) for j in range(p)]
                wfull = reduced(op, full)
                if in_place:
                    rb = r.buf(n * p, dt, full[me])
                    ok = r.call(
                        f"Reduce_scatter_block {label}",
                        comm.Reduce_scatter_block,
                        shmcoll.IN_PLACE,
                        rb,
                        op=op,
                    )
                    got = rb[:n]
                else:
                    rb = r.buf(n, dt)
                    ok = r.call(
                        f"Reduce_scatter_block {label}",
                        comm.Reduce_scatter_block,
                        r.buf(n * p, dt, full[me]),
                        rb,
                        op=op,
                    )
                    got = rb
                if ok:
                    r.check(f"Reduce_scatter_block {label}", got, wfull[me * n : (me + 1) * n])
    # Reduce_scatter with zero and ragged counts
    for counts in ([0] * p, [(j * 5 + 2) % 7 for j in range(p)], [0] + [300] * (p - 1)):
        tot = sum(counts)
        off = sum(counts[:me])
        full = [contribution(j, tot, "float64", 9) for j in range(p)]
        want = reduced("sum", full)[off : off + counts[me]]
        for in_place in (False, True):
            if in_place:
                rb = r.buf(tot, "float64", full[me])
                if r.call(f"Reduce_scatter {counts} ip", comm.Reduce_scatter, shmcoll.IN_PLACE, rb, counts):
                    r.check(f"Reduce_scatter {counts} ip", rb[: counts[me]], want)
            else:
                rb = r.buf(counts[me], "float64")
                # Without recvcounts: each rank's receive buffer length is its count.
                if r.call(
                    f"Reduce_scatter {counts}", comm.Reduce_scatter, r.buf(tot, "float64", full[me]), rb
                ):
                    r.check(f"Reduce_scatter {counts}", rb, want)
    comm.Free()
    return r.failures


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("algorithm", ALGOS)
def test_data_movement(nranks: int, algorithm: str | None) -> None:
    # `direct` serves heap buffers only (test_direct_needs_the_heap).
    for heap in (True,) if algorithm == "direct" else (False, True):
        check_all(run_ranks(nranks, data_movement, algorithm, heap))


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("algorithm", ALGOS)
def test_reductions_every_dtype_and_op(nranks: int, algorithm: str | None) -> None:
    heap = nranks % 2 == 0 or algorithm == "direct"
    check_all(run_ranks(nranks, reductions, algorithm, heap, INT_TYPES + FLOAT_TYPES))


@pytest.mark.parametrize("nranks", [2, 3])
def test_staging_in_many_rounds(nranks: int) -> None:
    """A 16 KiB staging area: 20_000-element reductions and 70_000-byte blocks take many
    rounds, and the round arithmetic (halves, per-rank regions) is exercised."""
    env = {"SHMCOLL_STAGING_BYTES": "16K"}
    check_all(run_ranks(nranks, data_movement, "staging", False, env=env))
    check_all(run_ranks(nranks, reductions, "staging", True, ("float64", "int16", "complex64"), env=env))


def push_and_pull(algorithm: str | None, placement: str) -> list[str]:
    """Scatter(v) and Allgather where the data moves by push and by pull: Scatter blocks
    just under and over the root's push limit (a quarter of the L2), and buffers in the
    heap, private, or mixed (the send side in the heap and the receive side private, or
    every other rank in the heap), which decide who copies."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank

    def buf(n: int, side: str, fill: Any = 0x5A) -> np.ndarray:
        heap = {
            "heap": True,
            "ordinary": False,
            "send_heap": side == "send",
            "alternate": me % 2 == 0,
        }[placement]
        a = comm.empty(n, "uint8") if heap else np.empty(n, "uint8")
        a[...] = fill
        return a

    fails: list[str] = []

    def check(label: str, got: np.ndarray, want: np.ndarray) -> None:
        if not np.array_equal(got, want):
            first = np.flatnonzero(got != want)[:1]
            fails.append(f"{label} alg={algorithm} {placement}: first difference at {first}")

    limit = max(int(shmcoll._core.machine()["l2_bytes"]) // 4, 128 << 10)
    for per in (limit // max(p - 1, 1) - 64, limit // max(p - 1, 1) + 4096):
        for root in sorted({0, p - 1}):
            for in_place in (False, True):
                blocks = [contribution(j, per, "uint8", 5) for j in range(p)]
                send = buf(per * p, "send", np.concatenate(blocks)) if me == root else None
                recv: Any = buf(per, "recv")
                if in_place and me == root:
                    recv = shmcoll.IN_PLACE
                comm.Scatter(send, recv, root=root, algorithm=algorithm)
                if recv is not shmcoll.IN_PLACE:
                    check(f"Scatter per={per} root={root} ip={in_place}", recv, blocks[me])
        # Scatterv, ragged: rank j gets per - 100 * j bytes, in reverse order in the buffer.
        counts = [max(per - 100 * j, 0) for j in range(p)]
        displs = [sum(counts[j + 1 :]) for j in range(p)]
        root = p // 2
        parts = [contribution(j, counts[j], "uint8", 6) for j in range(p)]
        spec: Any = None
        if me == root:
            src = buf(sum(counts), "send")
            for j in range(p):
                src[displs[j] : displs[j] + counts[j]] = parts[j]
            spec = [src, counts, displs, None]
        got = buf(counts[me], "recv")
        comm.Scatterv(spec, got, root=root, algorithm=algorithm)
        check(f"Scatterv per={per}", got, parts[me])
    for n in (5000, 70_000):
        for in_place in (False, True):
            mine = contribution(me, n, "uint8", 7)
            recv = buf(n * p, "recv")
            send = buf(n, "send", mine)
            if in_place:
                recv[me * n : (me + 1) * n] = mine
                send = shmcoll.IN_PLACE
            comm.Allgather(send, recv, algorithm=algorithm)
            want = np.concatenate([contribution(j, n, "uint8", 7) for j in range(p)])
            check(f"Allgather n={n} ip={in_place}", recv, want)
    comm.Free()
    return fails


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("placement", ["heap", "ordinary", "send_heap", "alternate"])
def test_push_and_pull_paths_agree(nranks: int, placement: str) -> None:
    for algorithm in (None, "cma") + (("direct",) if placement == "heap" else ()):
        check_all(run_ranks(nranks, push_and_pull, algorithm, placement))


def allreduce_digest(n: int) -> str:
    comm = shmcoll.Comm()
    rng = np.random.default_rng(comm.rank)
    x = comm.empty(n)
    x[:] = rng.standard_normal(n)
    digests = []
    for alg in ALGOS:
        if alg == "inline" and n * 8 * comm.size > comm.config()["inline_bytes"]:
            continue
        y = comm.empty(n)
        comm.Allreduce(x, y, algorithm=alg)
        digests.append(hashlib.sha256(y.tobytes()).hexdigest())
    comm.Free()
    return ",".join(digests)


@pytest.mark.parametrize("n", [3, 2000, 300_000])
def test_reductions_bitwise_identical_on_every_rank_and_algorithm(n: int) -> None:
    digests = run_ranks(3, allreduce_digest, n)
    assert len(set(digests)) == 1, digests
    assert len(set(digests[0].split(","))) == 1, "algorithms disagree"


def errors_case(case: str) -> str:
    comm = shmcoll.Comm()
    me = comm.rank
    try:
        if case == "sizes":
            comm.Allreduce(np.ones(4 + me), np.empty(4 + me))
        elif case == "root":
            comm.Bcast(np.zeros(3), root=me)
        elif case == "root-range":
            comm.Bcast(np.zeros(3), root=7)
        elif case == "op-dtype":
            comm.Allreduce(np.ones(3), np.empty(3), op=shmcoll.BAND)
        elif case == "op-mismatch":
            comm.Allreduce(np.ones(3), np.empty(3), op=shmcoll.SUM if me == 0 else shmcoll.MAX)
        elif case == "inline-too-big":
            comm.Allreduce(np.ones(100_000), np.empty(100_000), algorithm="inline")
        elif case == "allgather-send":
            recv = np.full(4 * comm.size, -1.0)
            try:
                comm.Allgather(np.ones(3 if me == 0 else 4), recv)
            except shmcoll.ShmcollError:
                if not (recv == -1).all():
                    return "receive buffer written"
                raise
        elif case == "small-recv":
            comm.Allreduce(np.ones(8), np.empty(4 if me == 1 else 8))
        elif case == "overlap":
            a = np.ones(8)
            comm.Allreduce(a, a)
        elif case == "direct-private":
            comm.Allreduce(np.ones(8), np.empty(8), algorithm="direct")
        elif case == "different-ops":
            if me == 0:
                comm.Bcast(np.zeros(2))
            else:
                comm.Allreduce(np.zeros(2), np.zeros(2))
        elif case == "bcast-sizes":
            comm.Bcast(np.zeros(3 + me))
        elif case == "bcast-direct-sizes":  # too large to be one-sided: every rank waits
            comm.Bcast(comm.zeros(50_000 + me))
        else:
            raise AssertionError(case)
        # A small Bcast is one-sided: ranks that completed it learn of a disagreement at
        # their next call.
        comm.Barrier()
    except (shmcoll.CallsDivergedError, shmcoll.PeerFailedError) as e:
        # Fatal. A rank still waiting for another's arrival when a peer broke the
        # communicator sees that peer's abort (PeerFailedError) rather than the cause.
        try:
            comm.Barrier()
        except shmcoll.CommBrokenError:  # unusable afterwards
            comm.Free()
            return type(e).__name__
        return f"usable after {type(e).__name__}"
    except shmcoll.ShmcollError as e:
        comm.Barrier()  # still usable after a rejected call
        comm.Free()
        return type(e).__name__
    comm.Free()
    return "no error"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("sizes", {"MismatchError"}),
        ("root", {"CallsDivergedError", "PeerFailedError"}),  # every rank a root
        ("bcast-sizes", {"CallsDivergedError", "PeerFailedError"}),
        ("bcast-direct-sizes", {"MismatchError"}),
        ("root-range", {"ArgumentError"}),
        ("op-dtype", {"ArgumentError"}),  # BAND on float64: MPI does not define it either
        ("op-mismatch", {"MismatchError"}),
        ("inline-too-big", {"AlgorithmError"}),
        ("allgather-send", {"BadBufferError", "PeerRejectedError"}),
        ("small-recv", {"BadBufferError", "PeerRejectedError"}),
        ("overlap", {"BadBufferError"}),
        ("different-ops", {"CallsDivergedError", "PeerFailedError"}),
        ("direct-private", {"AlgorithmError"}),
    ],
)
def test_bad_calls_raise_on_every_rank(case: str, expected: set[str]) -> None:
    got = run_ranks(3, errors_case, case)
    assert set(got) <= expected and all(g in expected for g in got), got
    if "CallsDivergedError" in expected:  # whoever saw the disagreement names it
        assert "CallsDivergedError" in got, got


def failed_push(op: str) -> str:
    """Rank 1 pushes its block into rank 0's receive buffer with process_vm_writev, and the
    kernel refuses: rank 0 made those pages read-only behind numpy's back (the buffer
    still says writable). Rank 0 must not return success with the block missing."""
    import ctypes
    import mmap

    comm = shmcoll.Comm()
    me, page = comm.rank, mmap.PAGESIZE
    n = 16 * page  # per block: small enough for a Scatter root to push
    area = mmap.mmap(-1, 2 * n)
    recv = np.frombuffer(area, np.uint8)
    with shmcoll.private_arrays():  # reached through CMA, not the shared-array arena
        send = np.full(2 * n, me + 1, np.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    # The block rank 1 writes: Alltoall's and Allgather's block 1, all of a Scatter's.
    first = 0 if op == "Scatter" else n
    if me == 0 and libc.mprotect(recv.ctypes.data + first, 2 * n - first, mmap.PROT_READ):
        raise OSError(ctypes.get_errno(), "mprotect")
    try:
        if op == "Alltoall":
            comm.Alltoall(send, recv, algorithm="cma-push")
        elif op == "Allgather":
            comm.Allgather(send[:n], recv, algorithm="cma")
        else:
            comm.Scatter(send if me == 1 else None, recv[:n], root=1, algorithm="cma")
        outcome = "success"
    except shmcoll.ShmcollError as e:
        outcome = f"{type(e).__name__} rank={getattr(e, 'rank', None)}"
    finally:
        if me == 0:
            libc.mprotect(recv.ctypes.data, 2 * n, mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        comm.Barrier()
    except shmcoll.CommBrokenError:
        outcome += ", then broken"
    comm.Free()
    del recv
    try:
        area.close()
    except BufferError:
        # The failed call keeps its buffers for good (rust/shmcoll-py/src/quarantine.rs:
        # a peer may still copy into them), and so its export of the mapping.
        outcome += ", kept"
    return outcome


@pytest.mark.parametrize("op", ["Alltoall", "Allgather", "Scatter"])
def test_a_refused_push_fails_the_receiver_too(op: str) -> None:
    got = run_ranks(2, failed_push, op)
    assert got[0] == "PeerFailedError rank=1, then broken, kept", got
    assert got[1].startswith("SegmentError") and got[1].endswith("then broken, kept"), got


def fallback_without_mpi() -> str:
    comm = shmcoll.Comm()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            comm.Allreduce(np.ones(3, np.float16), np.empty(3, np.float16))
    except shmcoll.UnsupportedError as e:
        return str(e)
    finally:
        comm.Free()
    return "no error"


def test_unsupported_dtype_without_mpi_raises_everywhere() -> None:
    got = run_ranks(2, fallback_without_mpi)
    assert all("float16" in g and "not supported" in g for g in got), got


def dtype_objects_in_turn() -> list[str]:
    """The fast path maps a dtype object to the engine's type by identity: alternate
    builtin dtypes, equal but distinct dtype objects (metadata) and byte-swapped arrays,
    whose bits would come out wrong if a cached mapping were reused for another type."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails = []
    kinds: list[Any] = ["float32", "int64", np.dtype("f8", metadata={"unit": "m"}), "uint8", "complex64"]
    kinds += [np.dtype("i4", metadata={"k": j}) for j in range(40)]  # more than the cache holds
    for rep in range(2):
        for dt in kinds:
            x = (np.arange(7) % 5 + me).astype(dt)
            y = np.zeros(7, dtype=dt)
            comm.Allreduce(x, y)
            want = sum((np.arange(7) % 5 + j).astype(dt) for j in range(p))
            if not np.array_equal(y, want):
                fails.append(f"{rep} {np.dtype(dt).str} {y} != {want}")
    swapped = (np.arange(5.0) + me).astype(">f8")
    out = np.zeros(5, dtype=">f8")
    try:
        comm.Allreduce(swapped, out)
        if not np.array_equal(out, sum(np.arange(5.0) + j for j in range(p))):
            fails.append(f">f8 {out}")
    except shmcoll.errors.ShmcollError:
        pass  # rejected (on every rank) is right too; wrong bits are not
    comm.Free()
    return fails


def test_fast_path_dtype_by_identity() -> None:
    check_all(run_ranks(2, dtype_objects_in_turn))


def gather_scatter_routes() -> list[str]:
    """Gather, Scatter and Reduce_scatter (with recvcounts, a list or a NumPy array, or
    without: the counts are gathered in the same native call) of plain arrays, and Gather
    of a specification with a datatype, run natively (the Python resolver is never asked,
    whatever the non-roots pass as the buffer they do not use); a specification of a
    bytearray is the resolver's."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails: list[str] = []
    calls: list[str] = []
    for name in ("whole", "per_rank", "vector", "counts", "reduction"):
        impl = getattr(shmcoll.resolve, name)
        setattr(shmcoll.resolve, name, lambda *a, _n=name, _f=impl, **k: (calls.append(_n), _f(*a, **k))[1])
    mine = np.full(3, me, np.int32)
    every = np.repeat(np.arange(p, dtype=np.int32), 3)
    for root in range(p):
        got = np.zeros(3 * p, np.int32) if me == root else None
        comm.Gather(mine, got, root=root)
        if got is not None and not np.array_equal(got, every):
            fails.append(f"Gather root={root}: {got}")
        part = np.zeros(3, np.int32)
        comm.Scatter(every if me == root else None, part, root=root)
        if not np.array_equal(part, mine):
            fails.append(f"Scatter root={root}: {part}")
    counts = list(range(1, p + 1))
    x = np.arange(sum(counts), dtype=np.float64) + me
    part = np.zeros(counts[me])
    comm.Reduce_scatter(x, part, counts, op=shmcoll.SUM)
    lo = sum(counts[:me])
    want = sum(np.arange(sum(counts), dtype=np.float64) + j for j in range(p))[lo : lo + counts[me]]
    if not np.array_equal(part, want):
        fails.append(f"Reduce_scatter: {part} != {want}")
    part[:] = 0
    comm.Reduce_scatter(x, part, np.array(counts), op=shmcoll.SUM)
    if not np.array_equal(part, want):
        fails.append(f"Reduce_scatter with NumPy counts: {part} != {want}")
    if calls:
        fails.append(f"plain arrays took the Python path: {calls}")
    part[:] = 0
    comm.Reduce_scatter(x, part, op=shmcoll.SUM)  # each rank's count is its buffer's length
    if calls or not np.array_equal(part, want):
        fails.append(f"Reduce_scatter without recvcounts: {calls} {part}")
    calls.clear()
    got = np.zeros(3 * p, np.int32) if me == 0 else None
    comm.Gather([mine, "i"], None if got is None else [got, "i"], root=0)
    if calls or (got is not None and not np.array_equal(got, every)):
        fails.append(f"a buffer spec with a datatype: {calls} {got}")
    got = np.zeros(3 * p, np.int32) if me == 0 else None
    comm.Gather([bytearray(mine.tobytes()), "i"], None if got is None else [got, "i"], root=0)
    if calls != ["whole"] or (got is not None and not np.array_equal(got, every)):
        fails.append(f"a specification of a bytearray: {calls} {got}")
    comm.Free()
    return fails


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_gather_scatter_and_reduce_scatter_of_plain_arrays_run_natively(nranks: int) -> None:
    check_all(run_ranks(nranks, gather_scatter_routes))


def mpi_spec_forms() -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails = []
    x = np.arange(10, dtype=np.float64) + me
    y = np.empty(10)
    comm.Allreduce([x, "d"], [y, "d"])
    if not np.array_equal(y, sum(np.arange(10.0) + j for j in range(p))):
        fails.append(f"[buf, 'd'] {y}")
    y[:] = -1
    comm.Allreduce([x, 4, "d"], [y, 4, "d"])
    if not (np.array_equal(y[:4], sum(np.arange(4.0) + j for j in range(p))) and (y[4:] == -1).all()):
        fails.append(f"[buf, count, 'd'] {y}")
    g = np.zeros(2 * p)
    comm.Allgather([x, 2, "d"], [g, 2, "d"])
    if not np.array_equal(g, np.concatenate([np.arange(2.0) + j for j in range(p)])):
        fails.append(f"Allgather count spec {g}")
    b = bytearray(b"abc" if me == 0 else b"xyz")
    comm.Bcast(b)
    if bytes(b) != b"abc":
        fails.append(f"Bcast bytearray {b!r}")
    comm.Free()
    return fails


def test_mpi4py_buffer_specifications() -> None:
    check_all(run_ranks(3, mpi_spec_forms))


def env_forcing() -> str:
    comm = shmcoll.Comm()
    x = np.ones(4)
    comm.Allreduce(x, np.empty(4))
    c = comm.last_choice()
    comm.Free()
    return "" if c is None else c.algorithm


def test_environment_forces_the_algorithm() -> None:
    assert run_ranks(2, env_forcing, env={"SHMCOLL_ALLREDUCE_ALGORITHM": "staging"}) == ["staging"] * 2
    assert run_ranks(2, env_forcing) == ["inline"] * 2


def auto_choice(nbytes: int, heap: bool) -> str:
    comm = shmcoll.Comm()
    n = nbytes // 8
    x = comm.empty(n) if heap else private_empty(n)
    y = comm.empty(n) if heap else private_empty(n)
    x[:] = 1
    comm.Allreduce(x, y)
    c = comm.last_choice()
    comm.Free()
    return "" if c is None else c.algorithm


def test_model_serves_private_buffers_inline_and_heap_buffers_directly() -> None:
    """Between the tiny and the large sizes the model lists direct before inline: heap
    buffers get direct, private ones still get inline (each rank copies its contribution
    inline unless its buffers are in the heap), not CMA with its system calls."""
    rows = shmcoll._core.model_table("Allreduce", 2)
    mid = rows[1][1]
    assert [c[0] for c in rows[1][2][:2]] == ["direct", "inline"], rows
    assert run_ranks(2, auto_choice, mid, False) == ["inline"] * 2
    assert run_ranks(2, auto_choice, mid, True) == ["direct"] * 2
    assert run_ranks(2, auto_choice, 64 << 10, False) == ["cma"] * 2


class _Sub(np.ndarray):
    """An ndarray subclass: served through the buffer protocol, not read directly."""


def exporters_agree() -> list[str]:
    """Exact ndarrays are read from the array itself (no buffer request); subclasses,
    memoryviews and bytearrays through the buffer protocol. Every form gives the same
    bytes, item size (Alltoall's default split) and refusals: read-only receive buffers,
    non-contiguous arrays, Fortran order and 0-d arrays as NumPy exports them."""
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails: list[str] = []
    x = np.arange(6, dtype=np.float64) + 10 * me
    want = sum(np.arange(6, dtype=np.float64) + 10 * j for j in range(p))
    forms: dict[str, Callable[[np.ndarray], Any]] = {
        "ndarray": lambda a: a,
        "subclass": lambda a: a.view(_Sub),
        "memoryview": memoryview,
    }
    for name, wrap in forms.items():
        out = np.zeros(6)
        comm.Allreduce(wrap(x), wrap(out))
        if not np.array_equal(out, want):
            fails.append(f"Allreduce {name}: {out}")
        got = np.zeros(6 * p)
        comm.Allgather(wrap(x), wrap(got))
        if not np.array_equal(got, np.concatenate([np.arange(6.0) + 10 * j for j in range(p)])):
            fails.append(f"Allgather {name}: {got}")
    raw = bytearray(8 * p)
    comm.Allgather(np.full(8, me, np.uint8), raw)
    if bytes(raw) != bytes(np.repeat(np.arange(p, dtype=np.uint8), 8)):
        fails.append(f"Allgather into a bytearray: {bytes(raw)!r}")
    # Fortran order is contiguous; a 0-d array is one element.
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3) + me)
    fo = np.zeros((2, 3), order="F")
    comm.Allreduce(f, fo)
    if not np.array_equal(fo, sum(np.arange(6.0).reshape(2, 3) + j for j in range(p))):
        fails.append(f"Fortran order: {fo}")
    z = np.zeros(())
    comm.Allreduce(np.array(float(me)), z)
    if float(z) != sum(range(p)):
        fails.append(f"0-d: {z}")
    # Alltoall splits a buffer into whole elements: 3 float64 per rank, whatever the form.
    s = np.arange(3 * p, dtype=np.float64) + 100 * me
    for name, wrap in forms.items():
        r = np.zeros(3 * p)
        comm.Alltoall(wrap(s), wrap(r))
        exp = np.concatenate([np.arange(3 * me, 3 * me + 3, dtype=np.float64) + 100 * j for j in range(p)])
        if not np.array_equal(r, exp):
            fails.append(f"Alltoall {name}: {r}")
    # Refusals, on every rank alike (the engine announces a rank's rejection to the others).
    ro = np.zeros(6)
    ro.flags.writeable = False
    strided = np.zeros(12)[::2]
    for label, bad in (("read-only", ro), ("non-contiguous", strided)):
        for name, wrap in (("ndarray", lambda a: a), ("subclass", lambda a: a.view(_Sub))):
            try:
                comm.Allreduce(x, wrap(bad))
                fails.append(f"{label} {name}: accepted")
            except shmcoll.BadBufferError as e:
                if label.split("-")[-1] not in str(e):
                    fails.append(f"{label} {name}: {e}")
            if bad.any():
                fails.append(f"{label} {name}: written")
    comm.Free()
    return fails


@pytest.mark.parametrize("nranks", [1, 3])
def test_ndarrays_read_directly_agree_with_the_buffer_protocol(nranks: int) -> None:
    check_all(run_ranks(nranks, exporters_agree))
