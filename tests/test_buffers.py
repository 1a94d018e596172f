"""Unit tests of shmcoll.buffers: mpi4py buffer specifications resolved to bytes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shmcoll
from shmcoll.buffers import (
    IN_PLACE,
    Simple,
    Vector,
    datatype_size,
    is_in_place,
    parse_simple,
    parse_vector,
    parse_whole,
)


@pytest.fixture(scope="module")
def MPI():
    return pytest.importorskip("mpi4py.MPI")


def _nbytes(buf: object) -> int:
    with memoryview(buf) as m:  # type: ignore[arg-type]
        return m.nbytes


def _addr(buf: object) -> int:
    return np.frombuffer(buf, np.uint8).__array_interface__["data"][0]  # type: ignore[call-overload]


# -- IN_PLACE -------------------------------------------------------------------------
def test_in_place_is_a_singleton_that_pickles_to_itself() -> None:
    assert shmcoll.IN_PLACE is IN_PLACE
    assert type(IN_PLACE)() is IN_PLACE
    assert pickle.loads(pickle.dumps(IN_PLACE)) is IN_PLACE
    assert repr(IN_PLACE) == "shmcoll.IN_PLACE"


def test_is_in_place() -> None:
    assert is_in_place(IN_PLACE)
    assert is_in_place(None)  # mpi4py's reading where MPI takes IN_PLACE
    for other in (0, np.zeros(3), "IN_PLACE", [IN_PLACE]):
        assert not is_in_place(other)


def test_is_in_place_accepts_mpi4py_marker(MPI) -> None:
    assert is_in_place(MPI.IN_PLACE)
    assert not is_in_place(MPI.BOTTOM)


# -- datatypes ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dt", "size"),
    [("d", 8), ("f", 4), ("i", 4), ("b", 1), ("B", 1), (np.complex128, 16), (np.int16, 2), ("float32", 4)],
)
def test_datatype_size_numpy(dt: object, size: int) -> None:
    assert datatype_size(dt) == size


def test_datatype_size_mpi4py(MPI) -> None:
    assert datatype_size(MPI.DOUBLE) == 8
    assert datatype_size(MPI.INT) == 4
    assert datatype_size(MPI.FLOAT) == 4
    assert datatype_size(MPI.BYTE) == 1
    assert datatype_size(MPI.CHAR) == 1
    assert datatype_size(MPI.C_DOUBLE_COMPLEX) == 16
    assert datatype_size(MPI.INT64_T) == 8
    contig = MPI.DOUBLE.Create_contiguous(3).Commit()
    try:
        assert datatype_size(contig) == 24
    finally:
        contig.Free()


def test_datatype_with_gaps_is_served_by_mpi(MPI) -> None:
    vec = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
    try:
        with pytest.raises(shmcoll.ServedByMPI, match="gaps"):  # an UnsupportedError
            datatype_size(vec)
        with pytest.raises(NotImplementedError):  # the matching built-in
            parse_simple([np.zeros(8), vec], 2)
    finally:
        vec.Free()


def test_datatype_null_is_rejected(MPI) -> None:
    with pytest.raises(shmcoll.ArgumentError, match="DATATYPE_NULL"):
        datatype_size(MPI.DATATYPE_NULL)


@pytest.mark.parametrize("bad", ["xx", 1.5, object(), "not-a-type"])
def test_datatype_size_rejects_non_types(bad: object) -> None:
    with pytest.raises(shmcoll.ArgumentError):
        datatype_size(bad)
    with pytest.raises(ValueError):  # ArgumentError is a ValueError
        datatype_size(bad)


# -- Alltoall specifications ------------------------------------------------------------
def test_simple_plain_array() -> None:
    b = np.zeros(12)
    s = parse_simple(b, 3)
    assert isinstance(s, Simple)
    assert s.buf is b
    assert s.bytes_per_rank == 32


@pytest.mark.parametrize("size", [1, 2, 3, 4, 6])
def test_simple_counts_in_bytes(size: int) -> None:
    b = np.zeros(12, np.int16)
    assert parse_simple(b, size).bytes_per_rank == 24 // size


def test_simple_buffer_protocol_objects() -> None:
    assert parse_simple(bytearray(12), 3).bytes_per_rank == 4
    assert parse_simple(memoryview(bytearray(12)).cast("i"), 3).bytes_per_rank == 4
    assert parse_simple(bytes(6), 2).bytes_per_rank == 3  # read-only is fine for sending
    assert parse_simple(np.zeros((3, 4), np.float32), 3).bytes_per_rank == 16


def test_simple_buf_datatype() -> None:
    b = np.zeros(12)
    assert parse_simple([b, "d"], 3).bytes_per_rank == 32
    # as float32: 24 elements, 8 per rank
    assert parse_simple([b, "f"], 3).bytes_per_rank == 32
    assert parse_simple([b, np.int16], 3).bytes_per_rank == 32
    assert parse_simple((b, "d"), 3).bytes_per_rank == 32


def test_simple_buf_count() -> None:
    b = np.zeros(12)
    s = parse_simple([b, 2], 3)
    assert s.bytes_per_rank == 16
    assert s.buf is b
    assert parse_simple([b, np.int64(3)], 3).bytes_per_rank == 24
    assert parse_simple([b, 0], 3).bytes_per_rank == 0


def test_simple_buf_count_datatype() -> None:
    b = np.zeros(12)
    assert parse_simple([b, 2, "d"], 3).bytes_per_rank == 16
    assert parse_simple([b, 3, "f"], 3).bytes_per_rank == 12
    # order of count and datatype does not matter
    assert parse_simple([b, "f", 3], 3).bytes_per_rank == 12


def test_simple_count_and_displacement() -> None:
    b = np.arange(12, dtype=np.float64)
    s = parse_simple([b, (2, 3), "d"], 3)
    assert s.bytes_per_rank == 16
    assert _nbytes(s.buf) == 96 - 24
    assert _addr(s.buf) == b.__array_interface__["data"][0] + 24
    # the view shares memory with the original
    np.frombuffer(s.buf, np.float64)[0] = -1.0  # type: ignore[call-overload]
    assert b[3] == -1.0


def test_simple_displacement_leaves_the_tail() -> None:
    b = np.zeros(14)
    s = parse_simple([b, (4, 2), "d"], 3)
    assert s.bytes_per_rank == 32
    assert _nbytes(s.buf) == 12 * 8


def test_simple_mpi4py_datatypes(MPI) -> None:
    b = np.zeros(12)
    assert parse_simple([b, MPI.DOUBLE], 3).bytes_per_rank == 32
    assert parse_simple([b, 2, MPI.DOUBLE], 3).bytes_per_rank == 16
    assert parse_simple([b, (2, 1), MPI.DOUBLE], 3).bytes_per_rank == 16
    assert parse_simple([b, MPI.INT], 3).bytes_per_rank == 32
    assert parse_simple([b, 5, MPI.INT], 3).bytes_per_rank == 20


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(lambda b: [], id="empty-list"),
        pytest.param(lambda b: [b, 1, 2, 3, 4], id="five-items"),
        pytest.param(lambda b: [b, -1, "d"], id="negative-count"),
        pytest.param(lambda b: [b, (1, -1), "d"], id="negative-displacement"),
        pytest.param(lambda b: [b, "d", "d"], id="two-datatypes"),
        pytest.param(lambda b: [b, 1, 2], id="two-counts"),
        pytest.param(lambda b: [b, "xx"], id="unknown-datatype"),
        pytest.param(lambda b: [b, True], id="bool-count"),
        pytest.param(lambda b: np.zeros(5), id="not-divisible"),
        pytest.param(lambda b: [np.zeros(5), "f"], id="not-divisible-as-float32"),
        pytest.param(lambda b: [np.zeros(3, np.uint8), "d"], id="partial-element"),
    ],
)
def test_simple_bad_specs(spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(shmcoll.ArgumentError):
        parse_simple(spec(np.zeros(12)), 4)


def test_simple_not_a_buffer() -> None:
    with pytest.raises(shmcoll.BadBufferError, match="buffer protocol"):
        parse_simple(object(), 2)
    with pytest.raises(shmcoll.BadBufferError, match="buffer protocol"):
        parse_simple([[1.0, 2.0]], 2)


def test_simple_not_a_buffer_with_datatype() -> None:
    with pytest.raises(shmcoll.BadBufferError, match="buffer protocol"):
        parse_simple([[1.0, 2.0], "d"], 2)


def test_simple_offset_into_non_contiguous_buffer() -> None:
    b = np.zeros(24)[::2]
    with pytest.raises(shmcoll.BadBufferError, match="non-contiguous"):
        parse_simple([b, (2, 1), "d"], 2)


# -- Alltoallv specifications -----------------------------------------------------------
def test_vector_plain_array() -> None:
    b = np.zeros(12)
    v = parse_vector(b, 3)
    assert isinstance(v, Vector)
    assert v.buf is b
    assert v.counts == [32, 32, 32]
    assert v.displs == [0, 32, 64]


def test_vector_counts_prefix_sums() -> None:
    b = np.zeros(12)
    v = parse_vector([b, [1, 2, 3], "d"], 3)
    assert v.counts == [8, 16, 24]
    assert v.displs == [0, 8, 24]
    v = parse_vector([b, np.array([3, 0, 1]), "f"], 3)
    assert v.counts == [12, 0, 4]
    assert v.displs == [0, 12, 12]


def test_vector_counts_and_displs_tuple() -> None:
    b = np.zeros(12)
    v = parse_vector([b, ([1, 2, 3], [9, 0, 4]), "d"], 3)
    assert v.counts == [8, 16, 24]
    assert v.displs == [72, 0, 32]
    # displacements None: prefix sums
    v = parse_vector([b, ([1, 2, 3], None), "d"], 3)
    assert v.displs == [0, 8, 24]


def test_vector_counts_displs_separate() -> None:
    b = np.zeros(12)
    v = parse_vector([b, [1, 2, 3], [0, 4, 8], "d"], 3)
    assert v.counts == [8, 16, 24]
    assert v.displs == [0, 32, 64]
    # without a datatype, the buffer's own item size
    v = parse_vector([np.zeros(12, np.int16), [1, 2, 3], [0, 4, 8]], 3)
    assert v.counts == [2, 4, 6]
    assert v.displs == [0, 8, 16]


def test_vector_uniform_count() -> None:
    b = np.zeros(12)
    v = parse_vector([b, 2], 3)
    assert v.counts == [16, 16, 16]
    assert v.displs == [0, 16, 32]
    v = parse_vector([b, "f"], 3)
    assert v.counts == [32, 32, 32]


def test_vector_mpi4py_datatypes(MPI) -> None:
    b = np.zeros(12)
    v = parse_vector([b, ([1, 2, 3], [0, 4, 8]), MPI.DOUBLE], 3)
    assert v.counts == [8, 16, 24]
    assert v.displs == [0, 32, 64]
    v = parse_vector([b, [1, 2, 3], [0, 4, 8], MPI.INT], 3)
    assert v.counts == [4, 8, 12]
    assert v.displs == [0, 16, 32]
    v = parse_vector([b, MPI.DOUBLE], 3)
    assert v.counts == [32, 32, 32]


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(lambda b: [b, [1, 2], "d"], id="too-few-counts"),
        pytest.param(lambda b: [b, [1, 2, 3, 4], "d"], id="too-many-counts"),
        pytest.param(lambda b: [b, ([1, 2, 3], [0, 1]), "d"], id="too-few-displs"),
        pytest.param(lambda b: [b, [1, -2, 3], "d"], id="negative-count"),
        pytest.param(lambda b: [b, [1, 2, 3], [0, -1, 4], "d"], id="negative-displ"),
        pytest.param(lambda b: [bytearray(13), "d"], id="not-whole-elements"),
        pytest.param(lambda b: [b, [1, 2, 3], "xx"], id="unknown-datatype"),
        pytest.param(lambda b: [b, 1, 2, 3], id="unreadable"),
        pytest.param(lambda b: [b, [1, 2, 3], [0, 1, 2], [3, 4, 5]], id="three-arrays"),
    ],
)
def test_vector_bad_specs(spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(shmcoll.ArgumentError):
        parse_vector(spec(np.zeros(12)), 3)


def test_vector_not_a_buffer() -> None:
    with pytest.raises(shmcoll.BadBufferError, match="buffer protocol"):
        parse_vector(object(), 2)
    with pytest.raises(shmcoll.BadBufferError, match="buffer protocol"):
        parse_vector([[1.0, 2.0], [1, 1]], 2)


# -- mpi4py's readings (src/mpi4py/MPI.src/msgbuffer.pxi: message_simple, message_vector) --
def test_vector_scalar_count_and_stride() -> None:
    """[buf, (count, displ), type] with integers: every rank's count, and displacements
    displ * i (strided), as mpi4py reads it; at 2 ranks too, where the pair has as many
    items as there are ranks."""
    b = np.zeros(12)
    for size in (2, 3):
        v = parse_vector([b, (2, 4), "d"], size)
        assert v.counts == [16] * size
        assert v.displs == [32 * i for i in range(size)]
    v = parse_vector([b, (1, [0, 5]), "d"], 2)
    assert (v.counts, v.displs) == ([8, 8], [0, 40])
    v = parse_vector([b, ([1, 2], 3), "d"], 2)
    assert (v.counts, v.displs) == ([8, 16], [0, 24])
    v = parse_vector([b, 3, 1, "d"], 3)  # [buf, count, displ, type]
    assert (v.counts, v.displs) == ([24] * 3, [0, 8, 16])


def test_vector_tuple_is_counts_and_displs() -> None:
    b = np.zeros(12)
    with pytest.raises(shmcoll.ArgumentError, match="tuple"):
        parse_vector([b, (1, 2, 3), "d"], 3)
    v = parse_vector([b, [1, 2], "d"], 2)  # a list is the counts
    assert (v.counts, v.displs) == ([8, 16], [0, 8])


def test_vector_counts_inferred_split_as_evenly_as_they_go() -> None:
    """Without counts, mpi4py gives the first n % size ranks one element more."""
    v = parse_vector(np.zeros(13), 3)
    assert (v.counts, v.displs) == ([40, 32, 32], [0, 40, 72])
    v = parse_vector([np.zeros(2), "d"], 3)
    assert (v.counts, v.displs) == ([8, 8, 0], [0, 8, 16])


def test_simple_count_displ_datatype() -> None:
    """[buf, count, displ, type]: `displ` elements into the buffer."""
    b = np.arange(12, dtype=np.float64)
    s = parse_simple([b, 2, 3, "d"], 2)
    assert s.bytes_per_rank == 16
    assert np.frombuffer(s.buf, np.float64)[0] == 3.0
    w = parse_whole([b, 2, 3, "d"], 2)
    assert w.nbytes == 32
    assert np.frombuffer(w.buf, np.float64).tolist() == [3.0, 4.0, 5.0, 6.0]


def test_none_as_a_specification_buffer_is_empty() -> None:
    assert parse_whole([None, 0, "d"]).nbytes == 0
    assert parse_vector([None, [0, 0], "d"], 2).counts == [0, 0]
    with pytest.raises(shmcoll.ShmcollError):
        parse_whole([None, 1, "d"])


def test_bottom_is_served_by_mpi(MPI) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(shmcoll.ServedByMPI, match="BOTTOM"):
        parse_whole([MPI.BOTTOM, 1, MPI.INT])
    with pytest.raises(shmcoll.ServedByMPI, match="BOTTOM"):
        parse_vector([MPI.BOTTOM, ([1, 1], [0, 0]), MPI.INT], 2)


# -- the native vector parser -------------------------------------------------------------
def _vector_specs(MPI, buf, counts, displs):  # type: ignore[no-untyped-def]
    """Every vector form, with predefined, derived, NumPy and no datatypes, and counts as
    lists, tuples and NumPy arrays: (spec, whether the native parser must take it when the
    counts are valid, whether it gives displacements) triples."""
    derived = MPI.DOUBLE.Create_contiguous(1).Commit()
    out = []
    arrays = [np.array(counts, dt) for dt in (np.int64, np.int32, np.uint16) if min(counts) >= 0]
    arrays.append(np.array(counts, np.int64))  # negative counts stay negative
    datatypes = [MPI.DOUBLE, MPI.BYTE, MPI.INT, MPI.C_DOUBLE_COMPLEX, "d", "int16", np.dtype(np.int16)]
    datatypes += [np.float32, None]
    da = np.array(displs)
    for dt in [*datatypes, derived]:
        common = dt is not derived
        out += [
            ([buf, (counts, displs), dt], common, True),
            ([buf, (tuple(counts), list(displs)), dt], common, True),
            ([buf, counts, displs, dt], common, True),
            ([buf, counts, dt], common, False),
            ((buf, list(counts), dt), common, False),
        ]
        for ca in arrays:
            out += [([buf, (ca, da), dt], common, True), ([buf, ca, da, dt], common, True)]
            out += [([buf, ca, dt], common, False)]
    # Without a datatype: the buffer's own item size.
    out += [([buf, (counts, displs)], True, True), ([buf, counts, displs], True, True)]
    out += [([buf, counts], True, False), ((buf, list(counts)), True, False)]
    # A tuple in the counts' place is (counts, displs), as mpi4py reads it: scalars there
    # (every rank's count, a stride) and tuples of another length are the Python parser's.
    out += [([buf, (counts[0], 3), MPI.DOUBLE], False, True), ([buf, (counts[0], displs)], False, True)]
    out += [([buf, tuple(counts) * 3, MPI.DOUBLE], False, False), ([buf, 2, MPI.DOUBLE], False, False)]
    out += [([buf, np.array(counts)], True, False), ([buf.astype(np.int16), counts], True, False)]
    out += [([memoryview(buf), (counts, displs)], True, True), ([bytearray(8), counts], False, False)]
    # Arrays that are not integer counts: the Python parser decides (it converts floats).
    out += [([buf, np.array(counts, float), MPI.DOUBLE], False, False)]
    out += [([buf, np.array([counts]), MPI.DOUBLE], False, False)]
    return out, derived


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 6),
    data=st.data(),
)
def test_native_vector_parser_agrees_with_python(MPI, size: int, data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    """Where the native parser resolves a vector specification it gives the Python parser's
    bytes exactly; where it declines (derived types, negative or wrong-length counts, float
    arrays) the Python parser decides. Counts as lists, tuples or NumPy integer arrays with
    a predefined mpi4py datatype, a NumPy dtype or type code, or none, the common cases,
    always resolve natively."""
    from shmcoll import _core
    from shmcoll.buffers import parse_vector_py

    n = data.draw(st.integers(-1, 5))  # -1: a negative count somewhere
    counts = [data.draw(st.integers(0, 9)) for _ in range(size)]
    if n < 0:
        counts[data.draw(st.integers(0, size - 1))] = -1
    displs = [data.draw(st.integers(0, 50)) for _ in range(size)]
    if data.draw(st.booleans()):
        displs = displs[:-1]  # wrong length
    buf = np.zeros(400)
    specs, derived = _vector_specs(MPI, buf, counts, displs)
    try:
        for spec, common, has_displs in specs:
            hit = _core.vector_spec(spec, size)
            try:
                want = parse_vector_py(spec, size)
            except (shmcoll.ShmcollError, ValueError, TypeError):
                assert hit is None, spec
                continue
            if hit is None:
                # Valid counts of the common forms never reach the Python parser.
                valid = min(counts) >= 0 and (len(displs) == size or not has_displs)
                assert not (common and valid), spec
                continue
            got = Vector(*hit)
            assert got.buf is want.buf and got.counts == want.counts and got.displs == want.displs, spec
    finally:
        derived.Free()


def test_native_vector_parser_declines_counts_that_overflow(MPI) -> None:  # type: ignore[no-untyped-def]
    from shmcoll import _core

    buf = np.zeros(8, np.uint8)
    assert _core.vector_spec([buf, [2**63, 2**63, 1], MPI.BYTE], 3) is None  # prefix sums
    assert _core.vector_spec([buf, [2**62, 1], MPI.DOUBLE], 2) is None  # bytes
    assert _core.vector_spec([buf, [2**64, 1], MPI.BYTE], 2) is None  # not a usize
    assert _core.vector_spec([buf, [3, 1], MPI.BYTE], 2) == (buf, [3, 1], [0, 3])


# -- the native single-buffer parser ------------------------------------------------------
def _whole_specs(MPI, buf, count, displ):  # type: ignore[no-untyped-def]
    """Single-buffer forms: (spec, whether the native parser must take it when the count
    and displacement fit the buffer)."""
    derived = MPI.DOUBLE.Create_contiguous(1).Commit()
    out = [([buf], True), ((buf,), True)]
    for dt in (MPI.DOUBLE, MPI.BYTE, MPI.INT, MPI.FLOAT, "d", "int16", np.dtype(np.int8), np.float32):
        out += [([buf, dt], True), ([buf, count, dt], True), ([buf, dt, count], True)]
        out += [([buf, (count, displ), dt], True), ((buf, [count, displ], dt), True)]
    out += [([buf, count], True), ([buf, (count, displ)], True), ([buf, derived], False)]
    out += [([buf, np.int64(count), MPI.DOUBLE], False), ([buf, count, count], False)]
    out += [([buf, None], False), ([buf, count, MPI.DOUBLE, None], False), ([bytearray(64), count], False)]
    out += [([buf.reshape(4, -1), count, MPI.BYTE], False), ([memoryview(buf), count], True)]
    return out, derived


def _bytes_of(buf, off: int, n: int) -> bytes:  # type: ignore[no-untyped-def]
    return bytes(memoryview(buf).cast("B")[off : off + n])


@settings(max_examples=60, deadline=None)
@given(count=st.integers(-1, 70), displ=st.integers(-1, 70), blocks=st.integers(1, 4))
def test_native_whole_parser_agrees_with_python(MPI, count: int, displ: int, blocks: int) -> None:  # type: ignore[no-untyped-def]
    """Where the native parser resolves a single-buffer specification it gives the Python
    parser's bytes and element type exactly; where it declines, the Python parser decides.
    Predefined mpi4py and NumPy datatypes with counts that fit always resolve natively."""
    from shmcoll import _core
    from shmcoll.buffers import parse_whole

    buf = np.arange(16, dtype=np.float32)  # 64 bytes, every byte distinct enough to tell offsets
    specs, derived = _whole_specs(MPI, buf, count, displ)
    try:
        for spec, common in specs:
            hit = _core.whole_spec(spec, blocks)
            try:
                want = parse_whole(spec, blocks)
            except (shmcoll.ShmcollError, ValueError, TypeError):
                assert hit is None, spec
                continue
            if hit is None:
                assert not (common and count >= 0 and displ >= 0), spec
                continue
            b, off, n, elem = hit
            assert b is spec[0] and n == want.nbytes, spec
            assert _bytes_of(b, off, n) == _bytes_of(want.buf, 0, want.nbytes), spec
            # None (reductions then take the Python path) only where the kernels have no
            # such type, or for a memoryview without a datatype (its format is Python's to read).
            want_elem = None if want.dtype is None else want.dtype.name
            unknown = want_elem is None or not _core.reduction_supported("sum", want_elem)
            assert elem == want_elem or (elem is None and (unknown or isinstance(b, memoryview))), spec
    finally:
        derived.Free()


@settings(max_examples=60, deadline=None)
@given(count=st.integers(-1, 20), ranks=st.integers(1, 5))
def test_native_alltoall_parser_agrees_with_python(MPI, count: int, ranks: int) -> None:  # type: ignore[no-untyped-def]
    """Alltoall's reading (a count per rank): the native parser gives the Python parser's
    bytes per rank for specifications without a displacement, and declines the rest."""
    from shmcoll import _core
    from shmcoll.buffers import parse_simple

    buf = np.zeros(12)
    for spec in (
        [buf, MPI.DOUBLE],
        [buf, count, MPI.DOUBLE],
        [buf, "f"],
        [buf, count],
        [buf, (count, 1), "d"],
    ):
        hit = _core.per_rank_spec(spec, ranks)
        try:
            want = parse_simple(spec, ranks)
        except (shmcoll.ShmcollError, ValueError, TypeError):
            assert hit is None, spec
            continue
        if hit is None:
            assert isinstance(spec[1], tuple) or count < 0, spec
            continue
        assert hit[0] is want.buf and hit[1] == want.bytes_per_rank, spec


def test_an_inferred_count_is_whole_elements_in_whole_blocks() -> None:
    # As mpi4py: "cannot infer count, buffer length ... is not a multiple of datatype
    # extent" and "... number of entries ... is not a multiple of required number of
    # blocks" (1.5 elements moved before).
    with pytest.raises(shmcoll.ArgumentError, match="extent 8"):
        parse_whole([np.zeros(3, np.int32), "d"])
    with pytest.raises(shmcoll.ArgumentError, match="blocks 2"):
        parse_whole([np.zeros(3), "d"], 2)
    assert parse_whole([np.zeros(4), "d"], 2).nbytes == 32
    assert parse_whole([np.zeros(3), None]).nbytes == 24  # None: the buffer's own type
