"""Bad calls: the right exception on every rank that can know, nothing written into any
receive buffer, and a communicator that keeps working afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import block, check_all, recv_expected, run_ranks, send_data

N = 6  # elements per rank in the scenarios


def _sentinel_recv(p: int, dtype: Any = np.float64, n: int = N) -> np.ndarray:
    return np.full(p * n, -1, dtype)


def _follow_up_ok(comm: shmcoll.Comm) -> bool:
    """A correct Alltoall and Alltoallv after the failed call."""
    p, me = comm.size, comm.rank
    s = send_data(me, p, 3, np.int32)
    r = np.zeros_like(s)
    comm.Alltoall(s, r)
    ok = np.array_equal(r, recv_expected(me, p, 3, np.int32))
    r2 = np.zeros_like(s)
    comm.Alltoallv(s, r2)
    comm.Barrier()
    return ok and np.array_equal(r2, r)


def _outcome(comm: shmcoll.Comm, call: Callable[[], None], recvs: list[np.ndarray]) -> dict[str, Any]:
    """Run the bad call; report the exception, whether any receive buffer changed, and
    whether the communicator still works."""
    before = [r.copy() for r in recvs]
    out: dict[str, Any] = {"exc": None, "peer": None, "msg": ""}
    try:
        call()
    except Exception as e:
        out["exc"] = type(e).__name__
        out["msg"] = str(e)
        out["peer"] = getattr(e, "rank", None)
        out["classes"] = [c.__name__ for c in type(e).__mro__]
    out["untouched"] = all(np.array_equal(a, b) for a, b in zip(recvs, before, strict=True))
    out["follow_up"] = _follow_up_ok(comm)
    return out


# -- scenarios (each runs on every rank; `bad` is the rank that misbehaves) ---------------
def _sizes_disagree(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    n = N + (1 if comm.rank == bad else 0)
    s = np.ones(p * n)
    r = _sentinel_recv(p, n=n)
    return _outcome(comm, lambda: comm.Alltoall(s, r), [r])


def _send_recv_sizes_disagree_on_one_rank(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p, n=N + 1) if comm.rank == bad else _sentinel_recv(p)
    return _outcome(comm, lambda: comm.Alltoall([s, N, "d"], [r, N + (comm.rank == bad), "d"]), [r])


def _v_counts_disagree(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p, me = comm.size, comm.rank
    sc = [2] * p
    rc = [2] * p
    if me == bad:
        rc[(me + 1) % p] = 3  # expects 3 from its neighbour, which sends 2
    s = np.ones(sum(sc))
    r = np.full(sum(rc), -1.0)
    return _outcome(comm, lambda: comm.Alltoallv([s, sc, "d"], [r, rc, "d"]), [r])


def _recv_too_small(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p, n=N)[:-1].copy() if comm.rank == bad else _sentinel_recv(p)
    return _outcome(comm, lambda: comm.Alltoall([s, N, "d"], [r, N, "d"]), [r])


def _recv_read_only(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    if comm.rank == bad:
        r.flags.writeable = False
    return _outcome(comm, lambda: comm.Alltoall(s, r), [r])


def _recv_read_only_spec(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    if comm.rank == bad:
        r.flags.writeable = False
    return _outcome(comm, lambda: comm.Alltoall([s, N, "d"], [r, N, "d"]), [r])


def _recv_bytes_object(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    target: Any = r.tobytes() if comm.rank == bad else r
    return _outcome(comm, lambda: comm.Alltoall(s, target), [r])


def _recv_non_contiguous(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    big = np.full(2 * p * N, -1.0)
    r = big[::2] if comm.rank == bad else big[: p * N]
    return _outcome(comm, lambda: comm.Alltoall(s, r), [big])


def _recv_non_contiguous_v(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    big = np.full(2 * p * N, -1.0)
    r = big[::2] if comm.rank == bad else big[: p * N]
    return _outcome(comm, lambda: comm.Alltoallv(s, r), [big])


def _overlap_all(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    buf = np.full(2 * p * N, -1.0)
    if comm.rank == bad:
        s, r = buf[: p * N], buf[p * N // 2 : p * N // 2 + p * N]
    else:
        s, r = np.ones(p * N), buf[: p * N]
    return _outcome(comm, lambda: comm.Alltoall(s, r), [buf])


def _overlap_same_buffer(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    r = _sentinel_recv(p)
    s = r if comm.rank == bad else np.ones(p * N)
    return _outcome(comm, lambda: comm.Alltoall(s, r), [r])


def _overlap_v_recv_blocks(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    """Two receive blocks at the same displacement (peers would write the same bytes)."""
    p, me = comm.size, comm.rank
    s = np.ones(2 * p)
    r = np.full(2 * p, -1.0)
    rd = [0] * p if me == bad else [2 * j for j in range(p)]
    return _outcome(comm, lambda: comm.Alltoallv([s, [2] * p, "d"], [r, [2] * p, rd, "d"]), [r])


def _v_block_beyond_buffer(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p, me = comm.size, comm.rank
    s = np.ones(2 * p)
    r = np.full(2 * p, -1.0)
    rd = [2 * j for j in range(p)]
    if me == bad:
        rd[-1] += 1
    return _outcome(comm, lambda: comm.Alltoallv([s, [2] * p, "d"], [r, [2] * p, rd, "d"]), [r])


def _v_wrong_number_of_counts(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p, me = comm.size, comm.rank
    s = np.ones(2 * p)
    r = np.full(2 * p, -1.0)
    rc = [2] * (p + 1) if me == bad else [2] * p
    return _outcome(comm, lambda: comm.Alltoallv([s, [2] * p, "d"], [r, rc, "d"]), [r])


def _unknown_algorithm(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    return _outcome(comm, lambda: comm.Alltoall(s, r, algorithm="quantum"), [r])


def _unknown_order_one_rank(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    order = "spiral" if comm.rank == bad else None
    return _outcome(comm, lambda: comm.Alltoall(s, r, order=order), [r])


def _unknown_store_v(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    return _outcome(comm, lambda: comm.Alltoallv(s, r, store="fast"), [r])


def _forced_differently(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    algo = "inline" if comm.rank == bad else "staging"
    return _outcome(comm, lambda: comm.Alltoall(s, r, algorithm=algo), [r])


def _pull_one_rank_ordinary(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    """Pull needs every rank's send buffer in the heap; one rank's is not."""
    p = comm.size
    if comm.rank == bad:
        s = np.ones(p * N)
    else:
        s = comm.empty(p * N)
        s[...] = 1.0
    r = comm.empty(p * N)
    r[...] = -1.0
    return _outcome(comm, lambda: comm.Alltoall(s, r, algorithm="pull"), [r])


def _push_one_rank_ordinary(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = comm.empty(p * N)
    s[...] = 1.0
    r = np.full(p * N, -1.0) if comm.rank == bad else comm.empty(p * N)
    r[...] = -1.0
    return _outcome(comm, lambda: comm.Alltoall(s, r, algorithm="push"), [r])


def _inline_too_big(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    n = int(comm.config()["inline_bytes"]) // p + 8
    s = np.ones(p * n, np.uint8)
    r = np.zeros(p * n, np.uint8)
    return _outcome(comm, lambda: comm.Alltoall(s, r, algorithm="inline"), [r])


def _in_place_cma(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    r = _sentinel_recv(p)
    return _outcome(comm, lambda: comm.Alltoall(shmcoll.IN_PLACE, r, algorithm="cma"), [r])


def _not_divisible(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N + 1, np.uint8)
    r = np.zeros(p * N + 1, np.uint8)
    return _outcome(comm, lambda: comm.Alltoall(s, r), [r])


def _not_divisible_spec(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N + 1)
    r = np.zeros(p * N + 1)
    return _outcome(comm, lambda: comm.Alltoall([s, "d"], [r, "d"]), [r])


def _not_divisible_elements(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    """3 doubles on 2 ranks: 24 bytes split into 12-byte halves would cut elements."""
    s = np.ones(2 * N + 1)
    r = np.full(2 * N + 1, -1.0)
    return _outcome(comm, lambda: comm.Alltoall(s, r), [r])


def _not_divisible_one_rank(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    n = p * N + (1 if comm.rank == bad else 0)
    s = np.ones(n, np.uint8)
    r = np.zeros(n, np.uint8)
    return _outcome(comm, lambda: comm.Alltoall(s, r), [r])


def _negative_count(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    cnt = -1 if comm.rank == bad else N
    return _outcome(comm, lambda: comm.Alltoall([s, N, "d"], [r, cnt, "d"]), [r])


def _bad_datatype_name(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    dt = "no-such-type" if comm.rank == bad else "d"
    return _outcome(comm, lambda: comm.Alltoall([s, "d"], [r, dt]), [r])


def _datatype_with_gaps(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    from mpi4py import MPI

    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    vec = MPI.DOUBLE.Create_vector(2, 1, 2).Commit() if comm.rank == bad else MPI.DOUBLE
    return _outcome(comm, lambda: comm.Alltoall([s, MPI.DOUBLE], [r, vec]), [r])


def _not_a_buffer(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    target: Any = object() if comm.rank == bad else r
    return _outcome(comm, lambda: comm.Alltoall(s, target), [r])


def _barrier_vs_alltoall(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    call = comm.Barrier if comm.rank == bad else (lambda: comm.Alltoall(s, r))
    return _outcome(comm, call, [r])


def _alltoall_vs_alltoallv(comm: shmcoll.Comm, bad: int) -> dict[str, Any]:
    p = comm.size
    s = np.ones(p * N)
    r = _sentinel_recv(p)
    if comm.rank == bad:
        return _outcome(comm, lambda: comm.Alltoallv(s, r), [r])
    return _outcome(comm, lambda: comm.Alltoall(s, r), [r])


def _scenario(name: str, bad: int) -> dict[str, Any]:
    comm = shmcoll.Comm()
    out = globals()[name](comm, bad)
    out["rank"] = comm.rank
    return out


def _run(name: str, nranks: int, bad: int) -> list[dict[str, Any]]:
    return run_ranks(nranks, _scenario, name, bad, timeout=30)


def _assert_all(results: list[dict[str, Any]], exc: str, *, rank_exc: dict[int, str] | None = None) -> None:
    for r, res in enumerate(results):
        want = (rank_exc or {}).get(r, exc)
        assert res["exc"] == want, f"rank {r}: expected {want}, got {res['exc']}: {res['msg']}"
        assert res["untouched"], f"rank {r}: a receive buffer was modified"
        assert res["follow_up"], f"rank {r}: the communicator does not work after the error"


def _assert_local_and_peers(results: list[dict[str, Any]], bad: int, exc: str) -> None:
    """The bad rank raises `exc`; every other rank PeerRejectedError naming it."""
    _assert_all(results, "PeerRejectedError", rank_exc={bad: exc})
    for r, res in enumerate(results):
        if r != bad:
            assert res["peer"] == bad, f"rank {r}: PeerRejectedError.rank is {res['peer']}, not {bad}"
            assert f"rank {bad}" in res["msg"]
            assert "ValueError" in res["classes"] and "ShmcollError" in res["classes"]


pytestmark = pytest.mark.timeout(45)


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_sizes_disagree_between_ranks(nranks: int) -> None:
    _assert_all(_run("_sizes_disagree", nranks, nranks - 1), "MismatchError")


def test_send_and_receive_sizes_disagree_on_one_rank() -> None:
    _assert_all(_run("_send_recv_sizes_disagree_on_one_rank", 3, 1), "MismatchError")


@pytest.mark.parametrize("nranks", [2, 4])
def test_alltoallv_counts_disagree(nranks: int) -> None:
    _assert_all(_run("_v_counts_disagree", nranks, 0), "MismatchError")


@pytest.mark.parametrize(
    ("scenario", "exc"),
    [
        ("_recv_too_small", "BadBufferError"),
        ("_recv_read_only", "BadBufferError"),
        ("_recv_read_only_spec", "BadBufferError"),
        ("_recv_bytes_object", "BadBufferError"),
        ("_recv_non_contiguous", "BadBufferError"),
        ("_recv_non_contiguous_v", "BadBufferError"),
        ("_overlap_all", "BadBufferError"),
        ("_overlap_same_buffer", "BadBufferError"),
        ("_overlap_v_recv_blocks", "BadBufferError"),
        ("_v_block_beyond_buffer", "BadBufferError"),
        ("_v_wrong_number_of_counts", "ArgumentError"),
        ("_unknown_order_one_rank", "ArgumentError"),
        ("_not_divisible_one_rank", "ArgumentError"),
        ("_negative_count", "ArgumentError"),
        ("_bad_datatype_name", "ArgumentError"),
    ],
)
@pytest.mark.parametrize(("nranks", "bad"), [(2, 1), (3, 0), (4, 2)])
def test_one_rank_rejects(scenario: str, exc: str, nranks: int, bad: int) -> None:
    _assert_local_and_peers(_run(scenario, nranks, bad), bad, exc)


def test_unsupported_datatype_on_one_rank() -> None:
    pytest.importorskip("mpi4py.MPI")
    _assert_local_and_peers(_run("_datatype_with_gaps", 3, 2), 2, "UnsupportedError")


def test_not_a_buffer_on_one_rank() -> None:
    results = _run("_not_a_buffer", 3, 1)
    # the exporter's own exception (TypeError) or BadBufferError on the bad rank
    assert results[1]["exc"] in ("TypeError", "BadBufferError"), results[1]
    for r in (0, 2):
        assert results[r]["exc"] == "PeerRejectedError" and results[r]["peer"] == 1, results[r]
    assert all(res["untouched"] and res["follow_up"] for res in results)


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_unknown_algorithm_everywhere(nranks: int) -> None:
    results = _run("_unknown_algorithm", nranks, 0)
    _assert_all(results, "ArgumentError")
    assert all("quantum" in r["msg"] for r in results)


def test_unknown_store_everywhere_alltoallv() -> None:
    _assert_all(_run("_unknown_store_v", 3, 0), "ArgumentError")


def test_forced_choices_differ_between_ranks() -> None:
    _assert_all(_run("_forced_differently", 3, 1), "MismatchError")


@pytest.mark.parametrize(
    "scenario", ["_pull_one_rank_ordinary", "_push_one_rank_ordinary", "_inline_too_big", "_in_place_cma"]
)
@pytest.mark.parametrize("nranks", [2, 3])
def test_forced_algorithm_cannot_serve(scenario: str, nranks: int) -> None:
    results = _run(scenario, nranks, nranks - 1)
    _assert_all(results, "AlgorithmError")
    assert all("cannot serve" in r["msg"] for r in results)


@pytest.mark.parametrize("scenario", ["_not_divisible", "_not_divisible_spec"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_not_divisible_everywhere(scenario: str, nranks: int) -> None:
    _assert_all(_run(scenario, nranks, 0), "ArgumentError")


def test_not_divisible_in_elements_plain_arrays() -> None:
    _assert_all(_run("_not_divisible_elements", 2, 0), "ArgumentError")


@pytest.mark.parametrize("nranks", [2, 3])
def test_different_collectives(nranks: int) -> None:
    _assert_all(_run("_barrier_vs_alltoall", nranks, nranks - 1), "MismatchError")


def test_alltoall_against_alltoallv() -> None:
    _assert_all(_run("_alltoall_vs_alltoallv", 2, 1), "MismatchError")


def test_exception_classes_derive_from_builtins() -> None:
    pairs = {
        shmcoll.ArgumentError: ValueError,
        shmcoll.BadBufferError: BufferError,
        shmcoll.MismatchError: ValueError,
        shmcoll.PeerRejectedError: ValueError,
        shmcoll.UnsupportedError: NotImplementedError,
        shmcoll.AlgorithmError: ValueError,
        shmcoll.CommBrokenError: RuntimeError,
        shmcoll.ShmcollTimeoutError: TimeoutError,
        shmcoll.PeerFailedError: RuntimeError,
        shmcoll.HeapExhaustedError: MemoryError,
        shmcoll.SegmentError: OSError,
        shmcoll.SpawnError: RuntimeError,
    }
    for cls, builtin in pairs.items():
        assert issubclass(cls, shmcoll.ShmcollError)
        assert issubclass(cls, builtin), cls
    assert shmcoll.PeerRejectedError("x").rank == -1


def _freed() -> list[str]:
    comm = shmcoll.Comm()
    comm.Free()
    comm.Free()  # idempotent
    out = []
    for call in (
        lambda: comm.Alltoall(np.ones(4), np.zeros(4)),
        lambda: comm.Alltoallv(np.ones(4), np.zeros(4)),
        comm.Barrier,
        lambda: comm.empty(4),
    ):
        try:
            call()
        except shmcoll.ShmcollError as e:
            out.append(type(e).__name__)
        else:
            out.append("no error")
    return out


def test_calls_after_free_raise() -> None:
    for res in run_ranks(2, _freed, timeout=20):
        assert "no error" not in res, res


def test_spawn_argument_errors() -> None:
    with pytest.raises(shmcoll.ArgumentError):
        shmcoll.spawn(0, _freed, start_method="fork")
    with pytest.raises(shmcoll.ArgumentError):
        shmcoll.Comm(object())


def test_patterns_are_exact() -> None:
    assert block(1, 2, 3, np.int32).tolist() == [1 * 7919 + 2 * 104729 + 1 + 31 * k for k in range(3)]


def test_mpi4py_methods_without_an_mpi_communicator_raise_attribute_error() -> None:
    """A communicator made without mpi4py has no MPI methods to lend: asking for one says
    why, and private names stay private."""
    with shmcoll.Comm() as comm:
        with pytest.raises(AttributeError, match="wraps no MPI communicator"):
            comm.send  # noqa: B018
        with pytest.raises(AttributeError):
            comm._no_such_private  # noqa: B018
        assert not hasattr(comm, "Scan")


def test_forwarded_mpi4py_names_are_class_descriptors_not_getattr() -> None:
    """mpi4py's other methods are descriptors installed on the class: a class with
    ``__getattr__`` loses CPython's specialised method lookup, which cost every
    shmcoll call (Barrier, Allreduce, ...) more than a Barrier's own work. Names a
    wrapped communicator's class adds (another mpi4py version) are installed once."""
    from shmcoll.hierarchy import HierComm
    from shmcoll.passthrough import MPI4PY_NAMES, forward_type

    for cls in (shmcoll.Comm, HierComm):
        assert "__getattr__" not in vars(cls)
        assert all(hasattr(cls, n) for n in MPI4PY_NAMES)
    assert shmcoll.Comm.Allreduce is not None and "Shift" in MPI4PY_NAMES

    class Base:
        def _passthrough(self, name: str) -> str:
            return f"forwarded {name}"

    class Newer:  # an mpi4py communicator class with a method the list lacks
        def Brand_new(self) -> None: ...

    forward_type(Base, Newer)
    assert Base().Brand_new == "forwarded Brand_new"
    assert not hasattr(Base, "_private")


def _fork_children() -> list[str]:
    """A rank forks: the child's inherited communicator refuses every call (it would act
    as the parent's rank), its Comm() is its own, dropping its copy of a heap array leaves
    the parent's pages alone (blocks of 2 MiB and more give theirs back when freed), and
    the parent's communicator is untouched."""
    comm = shmcoll.Comm()
    f: list[str] = []
    big = comm.empty((4 << 20) // 8)
    big[:] = 5.0 + comm.rank
    comm.Barrier()
    if comm.rank == 0:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                comm.Allreduce(np.ones(4), np.empty(4))
                msg = b"the inherited communicator served a call"
            except shmcoll.ShmcollError as e:
                msg = b"" if "forked" in str(e) else str(e).encode()
            del big
            try:
                if shmcoll.Comm().size != 1:
                    msg += b" Comm() in the child joined the parent's"
            except shmcoll.ShmcollError as e:
                msg += f" Comm() in the child: {e}".encode()
            os.write(w, msg)
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            got = pipe.read().decode()
        os.waitpid(pid, 0)
        if got:
            f.append(f"forked child: {got}")
    if not (big == 5.0 + comm.rank).all():
        f.append("the parent's heap array changed when the child dropped its copy")
    if comm.allreduce(comm.rank) != sum(range(comm.size)):
        f.append("the outer communicator no longer adds up")
    return f


def test_a_forked_child_cannot_use_its_parents_communicator() -> None:
    check_all(run_ranks(2, _fork_children, env={"SHMCOLL_TIMEOUT": "20"}))


SPAWN_INSIDE = """
import shmcoll

def inner():
    c = shmcoll.Comm()
    return c.rank, c.size, c.allreduce(c.rank + 1)

if __name__ == "__main__":
    comm = shmcoll.Comm()
    got = shmcoll.spawn(2, inner, start_method="fork", timeout=30)
    assert sorted(got) == [(0, 2, 3), (1, 2, 3)], got
    assert comm.allreduce(comm.rank) == 1
    print("ok", flush=True)
"""


def test_spawn_by_fork_inside_a_rank_makes_its_own_communicator(tmp_path: Path) -> None:
    """shmcoll.spawn(start_method="fork") inside a rank of `shmcoll run`: the children's
    Comm() is theirs (it used to be the launcher's, inherited: both children took the
    parent's slot), and the outer communicator keeps working."""
    script = tmp_path / "spawn_inside.py"
    script.write_text(SPAWN_INSIDE)
    env = {**os.environ, "SHMCOLL_TIMEOUT": "20"}
    cmd = [sys.executable, "-m", "shmcoll.cli", "run", "-n", "2", str(script)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok") == 2, done.stdout  # lines of the two ranks may interleave
