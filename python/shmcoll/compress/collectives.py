"""Compressed collectives: encode before the exchange, decode after.

Every piece travels with 32 bytes of metadata (status, element count, a key of the
codec's settings and the dtype, compressed bytes), so every rank can raise the same
error when the ranks disagree on the codec, the dtype or the sizes. A fixed-size codec
makes every compressed size known in advance, so the metadata rides as a header in front
of each piece in the one exchange the call needs, and a rank whose own arguments are bad
rejects the exchange itself (its peers raise PeerRejectedError). A variable-size codec
(MPC, any numcodecs codec) needs the sizes first: one small Alltoall or Allgather of the
metadata precedes the data, and that round carries the rejections. Bcast always takes
the metadata round (a root cannot receive the other ranks' headers in a broadcast).

Compressed Allreduce (SUM) is a reduce-scatter by Alltoall followed by an Allgather of
compressed bytes: each rank quantizes its contribution once, chunk i goes to rank i,
rank i decodes the p chunks it received and sums them in rank order, quantizes the sum
once, and every rank (the owner too) decodes the same compressed bytes of every chunk.
So all replicas end with bitwise identical results, the property data-parallel training
needs. Bcast and Allgather decode on every rank, the root and the owner included, for
the same reason.

CuPy arrays, and other libraries' tensors on a CUDA device (torch, JAX: by DLPack), are
encoded and decoded on the GPU; only compressed bytes cross to the host (see device.py).
"""

from __future__ import annotations

import json
import weakref
import zlib
from typing import Any

import numpy as np

from ..buffers import is_in_place
from ..errors import ArgumentError, MismatchError, PeerRejectedError, UnsupportedError
from ..ops import op_name
from .device import array_module, as_array, concatenate, foreign_cuda, is_device_array, stage_like, to_host
from .feedback import ErrorFeedback

_META = 4  # status, elements, codec key, compressed bytes
_OK, _BAD = 0, 1

#: Counters per operation: calls, bytes before and after compression (this rank's sends).
_stats: dict[str, list[int]] = {}


def stats() -> dict[str, dict[str, int]]:
    """Compressed calls per operation on this process: calls, raw bytes, wire bytes."""
    return {op: {"calls": c, "raw_bytes": r, "wire_bytes": w} for op, (c, r, w) in _stats.items()}


def _count(op: str, raw: int, wire: int) -> None:
    s = _stats.setdefault(op, [0, 0, 0])
    s[0] += 1
    s[1] += raw
    s[2] += wire


# -- scratch buffers ---------------------------------------------------------------------
_scratch: weakref.WeakKeyDictionary[Any, dict[str, np.ndarray]] = weakref.WeakKeyDictionary()


def _buf(comm: Any, tag: str, nbytes: int) -> np.ndarray:
    """A reusable uint8 array of `nbytes` for `comm`, in its shared heap when it has one
    (peers then read it directly: one copy per exchange)."""
    per = _scratch.setdefault(comm, {})
    b = per.get(tag)
    if b is None or b.size < nbytes:
        cap = max(nbytes, 2 * (b.size if b is not None else 0), 64)
        empty = getattr(comm, "empty", None)
        b = empty(cap, np.uint8) if callable(empty) else np.empty(cap, np.uint8)
        per[tag] = b
    return b[:nbytes]


# -- codec plumbing ----------------------------------------------------------------------
def codec_key(codec: Any, dtype: Any = None) -> int:
    """A 31-bit digest of the codec's configuration and the dtype it codes (ranks must agree
    on both: a float32 and a float64 stream of a fixed-rate codec can have the same size,
    and a rank would decode the other's bytes as its own type)."""
    cfg = codec.get_config() if hasattr(codec, "get_config") else {"repr": repr(codec)}
    what = {"codec": cfg, "dtype": None if dtype is None else np.dtype(dtype).str}
    return zlib.crc32(json.dumps(what, sort_keys=True, default=str).encode()) & 0x7FFFFFFF


def _encode(codec: Any, x: Any) -> Any:
    """Compressed bytes of the 1-D array `x` as a uint8 array on x's device."""
    enc = codec.encode_raw(x)
    if is_device_array(enc):
        return enc.view(array_module(enc).uint8).ravel()
    if isinstance(enc, np.ndarray):
        return enc.view(np.uint8).ravel()
    return np.frombuffer(enc, np.uint8)


def _decode(codec: Any, data: Any, dtype: np.dtype, n: int, out: Any) -> None:
    """Decode the bytes `data` (on out's device: see stage_like) into `out` (n elements)."""
    if n == 0:
        return
    codec.decode_raw(data, dtype, n, out=out)


def _flat(a: Any, what: str, written: bool = False) -> Any:
    """Buffer `a` (a NumPy or CuPy array, or another library's by DLPack) as a flat array;
    raises, inside the call's agreement, for anything else, and for a buffer the call
    must write (`written`) that is read-only (the write would fail after the exchange, on
    this rank alone)."""
    a = as_array(a)
    if not hasattr(a, "dtype") or not hasattr(a, "reshape"):
        raise ArgumentError(f"compressed collectives take arrays; the {what} is {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise ArgumentError(f"the {what} must be C-contiguous")
    if written and not getattr(a.flags, "writeable", True):
        raise ArgumentError(f"the {what} is read-only")
    return a.reshape(-1)


def _check_sum(op: Any) -> None:
    if op is not None and op_name(op) != "sum":
        raise UnsupportedError(f"compressed reductions implement SUM only, not {op!r}")


def _chunks(n: int, p: int) -> tuple[list[int], list[int]]:
    """Counts and offsets of n elements split into p near-equal chunks (the first n % p
    one larger)."""
    counts = [n // p + (1 if i < n % p else 0) for i in range(p)]
    return counts, _displs(counts)


def _pack(
    comm: Any, pieces: list[Any], tag: str, heads: np.ndarray | None = None
) -> tuple[np.ndarray, list[int]]:
    """Lay compressed pieces end to end in one host buffer, each after its header row
    when `heads` is given; (buffer, bytes of each framed piece). Device pieces cross to
    the host in one transfer."""
    sizes = [int(x.size) for x in pieces]
    if pieces and is_device_array(pieces[0]):
        flat = to_host(concatenate(pieces, tag), tag)
        pieces = [flat[o : o + n] for o, n in zip(_displs(sizes), sizes, strict=True)]
    h = 0 if heads is None else _HDR
    host = _buf(comm, tag, sum(sizes) + h * len(pieces))
    o = 0
    for j, (x, n) in enumerate(zip(pieces, sizes, strict=True)):
        if heads is not None:
            host[o : o + _HDR] = heads[j].view(np.uint8)
        host[o + h : o + h + n] = x
        o += h + n
    return host, [n + h for n in sizes]


def _displs(sizes: list[int]) -> list[int]:
    d = [0] * len(sizes)
    for i in range(1, len(sizes)):
        d[i] = d[i - 1] + sizes[i - 1]
    return d


# -- the metadata round ------------------------------------------------------------------
def _agree(comm: Any, rows: np.ndarray, error: BaseException | None, *, gather: bool) -> np.ndarray:
    """Exchange per-destination metadata rows (Alltoall) or this rank's row (Allgather);
    raise on every rank when a rank rejected its part or ranks disagree on the codec or dtype."""
    p = comm.size
    if error is not None:
        rows[:, 0] = _BAD
    got = np.empty((p, _META), np.int64)
    if gather:
        comm.Allgather(rows[0], got)
    else:
        comm.Alltoall(rows, got)
    if error is not None:
        raise error
    _check_headers(got)
    return got


def _rows(p: int, elems: int, key: int, nbytes: list[int] | None = None) -> np.ndarray:
    rows = np.zeros((p, _META), np.int64)
    rows[:, 1] = elems
    rows[:, 2] = key
    if nbytes is not None:
        rows[:, 3] = nbytes
    return rows


_HDR = _META * 8  # bytes of the in-band header of a fixed-size piece


def _fixed_size(codec: Any, n: int, dtype: np.dtype) -> int | None:
    """The compressed bytes of `n` values when the codec says in advance, else None."""
    size = getattr(codec, "compressed_size", None)
    got = size(n, dtype) if callable(size) else None
    return None if got is None else int(got)


def is_fixed_size(codec: Any) -> bool:
    """Whether `codec` makes compressed sizes a function of the input size alone (a
    property of the codec, so that every rank of a call decides alike)."""
    fixed = getattr(codec, "fixed_size", None)
    if isinstance(fixed, bool):
        return fixed
    try:
        return codec.compressed_size(4, np.dtype(np.float32)) is not None
    except Exception:
        return False


def _in_band(comm: Any, codec: Any) -> bool:
    """Whether the metadata can ride in front of the pieces: sizes known in advance and a
    communicator whose collectives a rank can reject (shmcoll.Comm)."""
    return is_fixed_size(codec) and callable(getattr(comm, "_reject_with", None))


def _check_headers(heads: np.ndarray) -> None:
    bad = np.flatnonzero(heads[:, 0] != _OK)
    if bad.size:
        e = PeerRejectedError(f"rank {int(bad[0])} rejected its part of the compressed collective")
        e.rank = int(bad[0])
        raise e
    if np.any(heads[:, 2] != heads[0, 2]):
        raise MismatchError("ranks use different codecs, codec settings or dtypes for the same collective")


def _transfer(
    comm: Any,
    codec: Any,
    op: str,
    pieces: list[Any],
    elems: int,
    key: int,
    err: BaseException | None,
    expect: list[int] | None,
    *,
    gather: bool,
) -> tuple[np.ndarray, list[int], list[int], list[int]]:
    """Send pieces[j] to rank j (Alltoallv), or this rank's one piece to every rank
    (`gather`: Allgatherv). `expect`: the compressed bytes this rank receives from each
    rank, when known in advance (fixed-size codecs). Returns (received bytes, offset and
    size of each source's piece in them, element counts the sources announced)."""
    rows = _rows(1 if gather else comm.size, elems, key, [int(x.size) for x in pieces] or None)
    in_band = _in_band(comm, codec)
    if in_band:
        if err is not None or expect is None:
            why = err or ArgumentError("no compressed size")
            comm._reject_with(op, why)  # raises here too
            raise AssertionError("unreachable")
        send, ssizes = _pack(comm, pieces, f"{op}-send", rows)
        rsizes = [_HDR + e for e in expect]
    else:
        got = _agree(comm, rows, err, gather=gather)
        send, ssizes = _pack(comm, pieces, f"{op}-send")
        rsizes = [int(v) for v in got[:, 3]]
    rd = _displs(rsizes)
    recv = _buf(comm, f"{op}-recv", sum(rsizes))
    if gather:
        comm.Allgatherv(send, [recv, (rsizes, rd)])
    else:
        comm.Alltoallv([send, (ssizes, _displs(ssizes))], [recv, (rsizes, rd)])
    if not in_band:
        return recv, rd, rsizes, [int(v) for v in got[:, 1]]
    heads = np.stack([recv[o : o + _HDR].view(np.int64) for o in rd])
    _check_headers(heads)
    return recv, [o + _HDR for o in rd], [n - _HDR for n in rsizes], [int(v) for v in heads[:, 1]]


# -- the collectives -------------------------------------------------------------------------
@foreign_cuda
def alltoall(comm: Any, sendbuf: Any, recvbuf: Any, codec: Any) -> None:
    """Alltoall of compressed blocks: block j of `sendbuf` is encoded, sent to rank j and
    decoded into block i of rank j's `recvbuf`."""
    p, key = comm.size, codec_key(codec)
    err: BaseException | None = None
    pieces: list[Any] = []
    expect: list[int] | None = None
    n = 0
    try:
        r = _flat(recvbuf, "receive buffer", written=True)
        s = r.copy() if is_in_place(sendbuf) else _flat(sendbuf, "send buffer")
        if s.size % p or s.size != r.size or s.dtype != r.dtype:
            raise ArgumentError(
                f"send ({s.size} {s.dtype}) and receive ({r.size} {r.dtype}) buffers must hold the "
                f"same number of elements of one dtype, split into {p} blocks"
            )
        n = s.size // p
        key = codec_key(codec, s.dtype)
        cb = _fixed_size(codec, n, s.dtype)
        expect = None if cb is None else [cb] * p
        pieces = [_encode(codec, s[j * n : (j + 1) * n]) for j in range(p)]
    except Exception as e:
        err, expect = e, None
    recv, offs, sizes, elems = _transfer(comm, codec, "Alltoall", pieces, n, key, err, expect, gather=False)
    if any(e != n for e in elems):
        raise MismatchError(f"ranks send different block sizes: {elems} elements")
    src = stage_like(recv, r, "Alltoall-recv")
    for j in range(p):
        _decode(codec, src[offs[j] : offs[j] + sizes[j]], r.dtype, n, r[j * n : (j + 1) * n])
    _count("alltoall", s.nbytes, sum(int(x.size) for x in pieces))


@foreign_cuda
def allgather(comm: Any, sendbuf: Any, recvbuf: Any, codec: Any) -> None:
    """Allgather of compressed contributions; every rank decodes every block (its own
    too), so all ranks hold the same values."""
    p, key = comm.size, codec_key(codec)
    err: BaseException | None = None
    piece: Any = np.empty(0, np.uint8)
    expect: list[int] | None = None
    n = 0
    try:
        r = _flat(recvbuf, "receive buffer", written=True)
        if r.size % p:
            raise ArgumentError(f"the receive buffer ({r.size} elements) does not split into {p} blocks")
        n = r.size // p
        s = r[comm.rank * n : (comm.rank + 1) * n].copy() if is_in_place(sendbuf) else _flat(sendbuf, "send")
        if s.size != n or s.dtype != r.dtype:
            raise ArgumentError(
                f"the send buffer must hold {n} elements of {r.dtype}, not {s.size} {s.dtype}"
            )
        key = codec_key(codec, s.dtype)
        cb = _fixed_size(codec, n, s.dtype)
        expect = None if cb is None else [cb] * p
        piece = _encode(codec, s)
    except Exception as e:
        err, expect = e, None
    recv, d, sizes, elems = _transfer(comm, codec, "Allgather", [piece], n, key, err, expect, gather=True)
    if any(e != n for e in elems):
        raise MismatchError(f"ranks contribute different sizes: {elems} elements")
    src = stage_like(recv, r, "Allgather-recv")
    for j in range(p):
        _decode(codec, src[d[j] : d[j] + sizes[j]], r.dtype, n, r[j * n : (j + 1) * n])
    _count("allgather", s.nbytes, int(piece.size))


@foreign_cuda
def bcast(comm: Any, buf: Any, root: int, codec: Any) -> None:
    """Broadcast of the root's compressed `buf`; every rank, the root too, ends with the
    decoded values (so replicas agree bitwise)."""
    p, key = comm.size, codec_key(codec)
    err: BaseException | None = None
    piece: Any = np.empty(0, np.uint8)
    n = 0
    try:
        if not 0 <= root < p:
            raise ArgumentError(f"root {root} out of range for {p} ranks")
        b = _flat(buf, "buffer", written=True)
        n = b.size
        key = codec_key(codec, b.dtype)
        # Every rank's buffer must suit the codec before the exchange, not only the root's
        # (the others would fail decoding it, after the root has returned).
        _fixed_size(codec, n, b.dtype)
        if comm.rank == root:
            piece = _encode(codec, b)
    except Exception as e:
        err = e
    got = _agree(comm, _rows(1, n, key, [int(piece.size)]), err, gather=True)
    if np.any(got[:, 1] != n):
        raise MismatchError(f"ranks pass buffers of different sizes: {got[:, 1].tolist()} elements")
    nbytes = int(got[root, 3])
    if comm.rank == root:
        data, _ = _pack(comm, [piece], "bcast")
    else:
        data = _buf(comm, "bcast", nbytes)
    comm.Bcast(data, root=root)
    _decode(codec, stage_like(data, b, "bcast-recv"), b.dtype, n, b)
    if comm.rank == root:
        _count("bcast", b.nbytes, nbytes)


def _reduce_scatter(
    comm: Any,
    x: Any,
    counts: list[int],
    offs: list[int],
    codec: Any,
    key: int,
    err: BaseException | None,
    feedback: ErrorFeedback | None,
    op: str,
) -> Any:
    """Stage one of Allreduce and Reduce_scatter: encode chunk i of `x` for rank i, exchange,
    decode this rank's p chunks and sum them in rank order. Returns the sum (on x's device)."""
    p, me = comm.size, comm.rank
    pieces: list[Any] = []
    expect: list[int] | None = None
    if err is None:
        try:
            cb = _fixed_size(codec, counts[me], x.dtype)
            expect = None if cb is None else [cb] * p
            pieces = [_encode(codec, x[offs[i] : offs[i] + counts[i]]) for i in range(p)]
            if feedback is not None:
                decoded = array_module(x).empty_like(x)
                for i in range(p):
                    _decode(codec, pieces[i], x.dtype, counts[i], decoded[offs[i] : offs[i] + counts[i]])
                feedback.update(x, decoded)
        except Exception as e:
            err, expect = e, None
    name = "Allreduce" if op == "allreduce" else "Reduce_scatter_block"
    elems = int(x.size) if x is not None else 0
    recv, rd, rsizes, announced = _transfer(comm, codec, name, pieces, elems, key, err, expect, gather=False)
    if any(e != announced[0] for e in announced):
        raise MismatchError(f"ranks reduce vectors of different lengths: {announced} elements")
    ssizes = [int(v.size) for v in pieces]
    xp = array_module(x)
    acc = xp.empty(counts[me], x.dtype)
    part = xp.empty(counts[me], x.dtype)
    # Rank order, always: float addition is not associative, and every replica of this
    # chunk must come out of the same sequence of roundings.
    src = stage_like(recv, x, f"{name}-recv")
    _decode(codec, src[rd[0] : rd[0] + rsizes[0]], x.dtype, counts[me], acc)
    for j in range(1, p):
        _decode(codec, src[rd[j] : rd[j] + rsizes[j]], x.dtype, counts[me], part)
        acc += part
    _count(op, x.nbytes, sum(ssizes))
    return acc


@foreign_cuda
def allreduce(
    comm: Any, sendbuf: Any, recvbuf: Any, codec: Any, op: Any = None, feedback: ErrorFeedback | None = None
) -> None:
    """Compressed Allreduce (SUM): quantize once, reduce-scatter by Alltoall with rank-order
    sums, quantize the sums once, Allgather of compressed bytes, every rank decodes every
    chunk. Results are bitwise identical on every rank. `feedback` carries the quantization
    errors (of this rank's contribution, and of the sum of the chunk it owns) into its
    next call."""
    p, key = comm.size, codec_key(codec)
    err: BaseException | None = None
    x: Any = None
    counts, offs = [0] * p, [0] * p
    try:
        _check_sum(op)
        r = _flat(recvbuf, "receive buffer", written=True)
        x = r.copy() if is_in_place(sendbuf) else _flat(sendbuf, "send buffer")
        if x.size != r.size or x.dtype != r.dtype:
            raise ArgumentError(f"send ({x.size} {x.dtype}) and receive ({r.size} {r.dtype}) buffers differ")
        key = codec_key(codec, x.dtype)
        if feedback is not None:
            x = feedback.corrected(x)
        counts, offs = _chunks(int(x.size), p)
    except Exception as e:
        err = e
    acc = _reduce_scatter(comm, x, counts, offs, codec, key, err, feedback, "allreduce")
    piece = _encode(codec, acc)
    fixed = [_fixed_size(codec, c, x.dtype) for c in counts]
    expect = None if any(f is None for f in fixed) else [int(f or 0) for f in fixed]
    recv, d, sizes, _ = _transfer(
        comm, codec, "Allreduce", [piece], int(acc.size), key, None, expect, gather=True
    )
    src = stage_like(recv, r, "Allreduce-gathered")
    for i in range(p):
        _decode(codec, src[d[i] : d[i] + sizes[i]], r.dtype, counts[i], r[offs[i] : offs[i] + counts[i]])
    if feedback is not None and feedback.residual is not None:
        # The owner also carries the second quantization's error of its chunk: added to
        # one contribution, it corrects the sum of every rank's next call.
        mine = slice(offs[comm.rank], offs[comm.rank] + counts[comm.rank])
        feedback.residual[mine] += acc - r[mine]


@foreign_cuda
def reduce_scatter_block(comm: Any, sendbuf: Any, recvbuf: Any, codec: Any, op: Any = None) -> None:
    """Compressed Reduce_scatter_block (SUM): block i of every rank's `sendbuf` is encoded,
    sent to rank i, decoded and summed in rank order into rank i's `recvbuf` (one
    quantization per contribution; the result is not quantized again)."""
    p, key = comm.size, codec_key(codec)
    err: BaseException | None = None
    x: Any = None
    n = 0
    try:
        _check_sum(op)
        r = _flat(recvbuf, "receive buffer", written=True)
        if is_in_place(sendbuf):
            raise UnsupportedError("compressed Reduce_scatter_block does not take IN_PLACE")
        x = _flat(sendbuf, "send buffer")
        n = r.size
        if x.size != n * p or x.dtype != r.dtype:
            raise ArgumentError(
                f"the send buffer must hold {p} blocks of {n} {r.dtype}, not {x.size} {x.dtype}"
            )
        key = codec_key(codec, x.dtype)
    except Exception as e:
        err = e
    acc = _reduce_scatter(
        comm, x, [n] * p, [i * n for i in range(p)], codec, key, err, None, "reduce_scatter"
    )
    r[...] = acc
