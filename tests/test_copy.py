"""shmcoll.copy: every store policy, sizes, alignments, dtypes, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import shmcoll

STORES = ("auto", "temporal", "nt", "hybrid")
GUARD = 128  # bytes of guard on both sides of every destination
SMALL_SIZES = (0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 1000, 4095, 4096, 4097)
LARGE_SIZES = (65535, 65536, 65537, 70_001, (3 << 20) + 5)
OFFSETS = (0, 1, 7, 8, 15, 31, 32, 33, 63)


def _rng_bytes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _check_copy(n: int, doff: int, soff: int, store: str) -> None:
    src_base = _rng_bytes(n + 64 + GUARD, n * 131 + soff)
    dst_base = np.full(n + 64 + 2 * GUARD, 0xA5, np.uint8)
    src = src_base[soff : soff + n]
    dst = dst_base[GUARD + doff : GUARD + doff + n]
    before = dst_base.copy()
    shmcoll.copy(dst, src, store)
    assert np.array_equal(dst, src), f"n={n} doff={doff} soff={soff} store={store}"
    # nothing outside dst changed
    lo, hi = GUARD + doff, GUARD + doff + n
    assert np.array_equal(dst_base[:lo], before[:lo])
    assert np.array_equal(dst_base[hi:], before[hi:])


@pytest.mark.parametrize("store", STORES)
def test_small_sizes_every_misalignment(store: str) -> None:
    for n in SMALL_SIZES:
        for doff in OFFSETS:
            for soff in OFFSETS:
                _check_copy(n, doff, soff, store)


@pytest.mark.parametrize("store", STORES)
def test_large_sizes(store: str) -> None:
    for n in LARGE_SIZES:
        for doff, soff in ((0, 0), (1, 0), (0, 63), (33, 7), (64 - 8, 8)):
            _check_copy(n, doff, soff, store)


@pytest.mark.parametrize("store", ["auto", "hybrid", "nt"])
def test_above_the_nt_threshold(store: str) -> None:
    """Large enough that hybrid streams (the threshold is tied to the cache share)."""
    n = max(int(shmcoll.machine()["nt_threshold"]), 1 << 20) + 4099
    n = min(n, 96 << 20)
    src = np.arange(n, dtype=np.uint64).view(np.uint8)[:n]
    dst_base = np.zeros(n + 2 * GUARD, np.uint8)
    dst = dst_base[GUARD + 3 : GUARD + 3 + n]
    shmcoll.copy(dst, src, store)
    assert np.array_equal(dst, src)
    assert not dst_base[: GUARD + 3].any()
    assert not dst_base[GUARD + 3 + n :].any()


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("store", STORES)
def test_dtypes(dtype: type, store: str) -> None:
    for n in (0, 1, 3, 1001, 50_000):
        src = (np.arange(n) * 3 + 1).astype(dtype)
        dst = np.zeros(n, dtype)
        shmcoll.copy(dst, src, store)
        assert np.array_equal(dst, src)


def test_multidimensional_and_fortran_order() -> None:
    src = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    dst = np.zeros((2, 3, 4))
    shmcoll.copy(dst, src)
    assert np.array_equal(dst, src)
    # F-contiguous arrays are contiguous: bytes are copied as laid out in memory
    f_src = np.asfortranarray(src)
    f_dst = np.zeros((2, 3, 4), order="F")
    shmcoll.copy(f_dst, f_src, "nt")
    assert np.array_equal(f_dst, src)


def test_raw_bytes_between_dtypes() -> None:
    src = np.arange(8, dtype=np.float64)
    dst = np.zeros(16, np.int32)
    shmcoll.copy(dst, src)
    assert dst.tobytes() == src.tobytes()


def test_other_buffer_protocol_objects() -> None:
    dst = bytearray(5)
    shmcoll.copy(dst, b"hello")
    assert dst == b"hello"
    mv = memoryview(bytearray(6))
    shmcoll.copy(mv, memoryview(b"abcdef"), "temporal")
    assert mv.tobytes() == b"abcdef"
    dst_arr = np.zeros(4, np.uint8)
    shmcoll.copy(dst_arr, bytearray(b"\x01\x02\x03\x04"), "nt")
    assert dst_arr.tolist() == [1, 2, 3, 4]


def test_store_names_are_case_insensitive_with_aliases() -> None:
    a = np.zeros(100)
    for store in ("NT", "Temporal", "HYBRID", "Auto", "non-temporal", "nontemporal", " nt "):
        shmcoll.copy(a, np.ones(100), store)
    assert (a == 1).all()


@pytest.mark.parent_comm
def test_copy_to_a_heap_array() -> None:
    with shmcoll.Comm() as comm:
        dst = comm.zeros(70_000, np.uint8)
        src = _rng_bytes(70_000, 5)
        shmcoll.copy(dst, src, "nt")
        assert np.array_equal(dst, src)
        del dst


# -- errors ---------------------------------------------------------------------------
def test_read_only_destination() -> None:
    ro = np.zeros(8)
    ro.flags.writeable = False
    for dst in (ro, np.frombuffer(bytes(64)), b"x" * 64):
        with pytest.raises(shmcoll.BadBufferError, match="read-only"):
            shmcoll.copy(dst, np.zeros(8))
    assert not ro.any()


@pytest.mark.parametrize("store", STORES)
def test_size_mismatch(store: str) -> None:
    dst = np.zeros(10)
    with pytest.raises(shmcoll.BadBufferError, match="bytes"):
        shmcoll.copy(dst, np.ones(9), store)
    with pytest.raises(shmcoll.BadBufferError):
        shmcoll.copy(dst, np.ones(10, np.float32), store)
    with pytest.raises(BufferError):  # the matching built-in
        shmcoll.copy(np.zeros(0), np.ones(1), store)
    assert not dst.any()


def test_overlap() -> None:
    a = np.arange(100, dtype=np.uint8)
    before = a.copy()
    for d, s in ((a[10:60], a[0:50]), (a[0:50], a[10:60]), (a[0:50], a[0:50]), (a, a)):
        with pytest.raises(shmcoll.BadBufferError, match="overlap"):
            shmcoll.copy(d, s)
    assert np.array_equal(a, before)
    # adjacent, not overlapping
    shmcoll.copy(a[50:100], a[0:50])
    assert np.array_equal(a[50:], before[:50])
    # empty ranges never overlap
    shmcoll.copy(a[5:5], a[5:5])


def test_non_contiguous() -> None:
    strided = np.zeros(20)[::2]
    with pytest.raises(shmcoll.BadBufferError, match="contiguous"):
        shmcoll.copy(strided, np.ones(10))
    with pytest.raises(shmcoll.BadBufferError, match="contiguous"):
        shmcoll.copy(np.zeros(10), np.ones(20)[::2])
    with pytest.raises(shmcoll.BadBufferError, match="contiguous"):
        shmcoll.copy(np.zeros((4, 4))[:, :2], np.ones(8))
    assert not strided.any()


@pytest.mark.parametrize("store", ["", "streaming", "non_temporal", "fast", "none", "linear"])
def test_unknown_store(store: str) -> None:
    dst = np.zeros(4)
    with pytest.raises(shmcoll.ArgumentError, match="store policy"):
        shmcoll.copy(dst, np.ones(4), store)
    assert not dst.any()


def test_not_a_buffer() -> None:
    with pytest.raises(TypeError):
        shmcoll.copy([0, 0], [1, 1])
    with pytest.raises(TypeError):
        shmcoll.copy(np.zeros(2), "ab")
