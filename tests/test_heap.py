"""The shared heap: Comm.empty/zeros/empty_like, in_heap, usage, exhaustion, reuse, and
arrays that outlive their communicator."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import environ, run_ranks

HEAP = 1 << 20

# most tests here create communicators in the pytest process (see conftest.py)
pytestmark = pytest.mark.parent_comm


@pytest.fixture
def comm() -> Iterator[shmcoll.Comm]:
    """A one-process communicator with a 1 MiB heap."""
    with environ({"SHMCOLL_HEAP_BYTES": "1M"}):
        c = shmcoll.Comm()
    yield c
    c.Free()
    gc.collect()


def _addr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        (10, np.float64),
        ((3, 4), np.int32),
        ((2, 3, 5), np.complex128),
        ((0,), np.uint8),
        (0, np.float32),
        ((), np.float64),
        ((7, 0, 3), np.int16),
        (np.int64(5), "f4"),
        ([2, 2], "u2"),
    ],
)
def test_empty_and_zeros_shapes_and_dtypes(comm: shmcoll.Comm, shape: Any, dtype: Any) -> None:
    want_shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
    for make in (comm.empty, comm.zeros):
        a = make(shape, dtype)
        assert isinstance(a, np.ndarray)
        assert a.shape == want_shape
        assert a.dtype == np.dtype(dtype)
        assert a.flags.c_contiguous and a.flags.writeable
        assert comm.in_heap(a)
        if make is comm.zeros:
            assert not a.any()
        a[...] = 3
        assert (a == 3).all()


def test_default_dtype_is_float64(comm: shmcoll.Comm) -> None:
    assert comm.empty(3).dtype == np.float64
    assert comm.zeros((2, 2)).dtype == np.float64


def test_fortran_order(comm: shmcoll.Comm) -> None:
    a = comm.zeros((3, 4), np.int32, order="F")
    assert a.flags.f_contiguous and not a.flags.c_contiguous
    assert a.strides == (4, 12)
    a[...] = np.arange(12).reshape(3, 4)
    assert a.tolist() == np.arange(12).reshape(3, 4).tolist()
    assert comm.in_heap(a)


def test_empty_like(comm: shmcoll.Comm) -> None:
    src = np.zeros((2, 3), np.complex64)
    a = comm.empty_like(src)
    assert a.shape == (2, 3) and a.dtype == np.complex64
    assert comm.in_heap(a)


def test_bad_arguments(comm: shmcoll.Comm) -> None:
    with pytest.raises(shmcoll.ArgumentError):
        comm.empty(-1)
    with pytest.raises(shmcoll.ArgumentError):
        comm.zeros((2, -3))
    with pytest.raises(shmcoll.ArgumentError):
        comm.empty(3, order="K")
    with pytest.raises(TypeError):
        comm.empty(3, dtype="no-such-dtype")


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        (2**63 - 1, np.int16),  # 2**64 - 2 bytes: rounding up to a cache line wrapped to 0
        (2**63 - 1, np.int8),
        (2**62, np.float64),  # 2**65 bytes
        (2**64 - 1, np.uint8),
        ((2**32, 2**32), np.uint8),  # NumPy's int64 product wraps to 0
        ((2**62, 4), np.float64),
        ((2**31, 2**31, 4), np.uint8),
        ((3, 2**62), np.int32),
    ],
)
def test_huge_sizes_are_exhausted_not_a_panic(comm: shmcoll.Comm, shape: Any, dtype: Any) -> None:
    # (HierComm.empty and zeros are its node communicator's)
    for make in (comm.empty, comm.zeros):
        with pytest.raises(shmcoll.HeapExhaustedError, match="exhausted"):
            make(shape, dtype)
    with pytest.raises(shmcoll.HeapExhaustedError):  # 2**60 bytes, all of one element
        comm.empty_like(
            np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=(2**40, 2**20), strides=(0, 0))
        )
    assert comm.heap_usage()[0] == 0
    a = comm.zeros(10)  # the heap still serves
    assert comm.in_heap(a)


@pytest.mark.parametrize(
    "nbytes", [2**64 - 1, 2**64 - 2, 2**64 - 63, 2**64 - 64, 2**64 - 65, 2**63, HEAP + 1]
)
def test_huge_byte_counts_reach_the_heap_as_exhaustion(comm: shmcoll.Comm, nbytes: int) -> None:
    # the native entry itself, below comm.empty's own check
    with pytest.raises(shmcoll.HeapExhaustedError, match="SHMCOLL_HEAP_BYTES"):
        comm._heap_alloc(nbytes)
    assert comm.heap_usage()[0] == 0


def test_empty_peer_view_at_the_end_of_the_heap(comm: shmcoll.Comm) -> None:
    a = comm.empty(HEAP, np.uint8)
    end = comm._heap_offset(a) + HEAP
    assert len(memoryview(comm._peer_view(end, 0))) == 0
    assert len(memoryview(comm._peer_view(end - 8, 8))) == 8
    with pytest.raises(shmcoll.ArgumentError):
        comm._peer_view(end, 1)
    del a


def test_in_heap(comm: shmcoll.Comm) -> None:
    a = comm.zeros(100)
    assert comm.in_heap(a)
    assert comm.in_heap(a[10:20])
    assert comm.in_heap(a.reshape(10, 10)[3])
    assert comm.in_heap(memoryview(a))
    assert not comm.in_heap(np.zeros(100))
    assert not comm.in_heap(bytearray(10))
    assert not comm.in_heap(b"abc")


def test_heap_of_another_communicator_is_not_ours() -> None:
    with environ({"SHMCOLL_HEAP_BYTES": "1M"}):
        c1, c2 = shmcoll.Comm(), shmcoll.Comm()
    try:
        a = c1.zeros(10)
        assert c1.in_heap(a)
        assert not c2.in_heap(a)
        del a
    finally:
        c1.Free()
        c2.Free()


def test_usage_and_exhaustion(comm: shmcoll.Comm) -> None:
    used, cap = comm.heap_usage()
    assert (used, cap) == (0, HEAP)
    assert comm.config()["heap_bytes"] == HEAP
    a = comm.empty(1000)
    used, _ = comm.heap_usage()
    assert 8000 <= used < 8000 + 4096
    with pytest.raises(shmcoll.HeapExhaustedError, match="SHMCOLL_HEAP_BYTES"):
        comm.empty(HEAP, np.uint8)
    with pytest.raises(MemoryError):  # the matching built-in
        comm.zeros(2 * HEAP, np.uint8)
    # exhaustion is not fatal: the heap and the communicator still serve
    b = comm.empty(1000)
    assert comm.in_heap(b)
    comm.Barrier()
    del a, b


def test_fill_exactly_then_reuse(comm: shmcoll.Comm) -> None:
    quarter = HEAP // 4
    blocks = [comm.empty(quarter, np.uint8) for _ in range(4)]
    assert comm.heap_usage()[0] == HEAP
    with pytest.raises(shmcoll.HeapExhaustedError):
        comm.empty(1, np.uint8)
    for k, b in enumerate(blocks):
        b[...] = k
    freed_addr = _addr(blocks[2])
    del blocks[2]
    gc.collect()
    c = comm.empty(quarter, np.uint8)
    assert _addr(c) == freed_addr, "the freed range is reused"
    assert [int(b[0]) for b in blocks] == [0, 1, 3]  # neighbours untouched
    del blocks, c, b  # b: the loop variable still holds the last block
    gc.collect()
    assert comm.heap_usage()[0] == 0
    # the whole heap in one piece once everything was freed
    whole = comm.empty(HEAP, np.uint8)
    whole[...] = 1
    del whole


def test_views_keep_memory_alive(comm: shmcoll.Comm) -> None:
    a = comm.zeros(1000)
    view = a[100:200]
    del a
    gc.collect()
    assert comm.heap_usage()[0] > 0, "a live view must keep its block allocated"
    view[...] = 5
    del view
    gc.collect()
    assert comm.heap_usage()[0] == 0


def test_many_small_allocations(comm: shmcoll.Comm) -> None:
    for _ in range(20):
        arrs = [comm.empty(k % 97 + 1, np.float64) for k in range(200)]
        for k, x in enumerate(arrs):
            x[...] = k
        assert all(int(x[0]) == k for k, x in enumerate(arrs))
        del arrs, x
        gc.collect()
    assert comm.heap_usage()[0] == 0


def test_arrays_stay_valid_after_free() -> None:
    with environ({"SHMCOLL_HEAP_BYTES": "1M"}):
        comm = shmcoll.Comm()
    a = comm.zeros(1000)
    a[...] = np.arange(1000)
    comm.Free()
    assert comm.freed
    assert a.sum() == 999 * 1000 / 2
    a[...] = 7  # still mapped and writable
    assert (a == 7).all()
    del comm
    gc.collect()
    assert (a == 7).all()
    del a
    gc.collect()


def _per_rank_heaps() -> dict[str, Any]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    out: dict[str, Any] = {"cap": comm.heap_usage()[1]}
    big = comm.empty(HEAP // 2, np.uint8)  # each rank has a heap of its own
    out["after_big"] = comm.heap_usage()[0]
    try:
        comm.empty(HEAP, np.uint8)
        out["exhausted"] = False
    except shmcoll.HeapExhaustedError:
        out["exhausted"] = True
    # heap arrays of every rank serve a push and a pull after an exhaustion
    s = comm.empty(p * 4, np.int64)
    s[...] = [100 * me + j for j in range(p) for _ in range(4)]
    r = comm.zeros(p * 4, np.int64)
    comm.Alltoall(s, r, algorithm="push")
    r2 = comm.zeros(p * 4, np.int64)
    comm.Alltoall(s, r2, algorithm="pull")
    out["ok"] = r.tolist() == [100 * i + me for i in range(p) for _ in range(4)] and r2.tolist() == r.tolist()
    del big
    comm.Free()
    out["survives_free"] = (s.reshape(p, 4)[:, 0] // 100 == me).all()
    return out


@pytest.mark.timeout(30)
@pytest.mark.parametrize("nranks", [2, 4])
def test_heaps_per_rank(nranks: int) -> None:
    for res in run_ranks(nranks, _per_rank_heaps, timeout=20, env={"SHMCOLL_HEAP_BYTES": "1M"}):
        assert res["cap"] == HEAP
        assert res["after_big"] >= HEAP // 2
        assert res["exhausted"]
        assert res["ok"]
        assert res["survives_free"]


def test_heap_bytes_zero() -> None:
    with environ({"SHMCOLL_HEAP_BYTES": "0"}):
        try:
            comm = shmcoll.Comm()
        except shmcoll.ArgumentError:
            return  # refusing a heap-less communicator is fine too
    try:
        with pytest.raises(shmcoll.HeapExhaustedError):
            comm.empty(1)
        s, r = np.ones(4), np.zeros(4)
        comm.Alltoall(s, r)  # collectives do not need the heap
        assert (r == 1).all()
    finally:
        comm.Free()
