"""One global transpose of a distributed FFT: a grid dimension moves from one axis to another.

Why a plan: the geometry (which slab of the local array goes to which peer, the counts and
displacements, the views of the send and receive buffers shaped like those slabs) depends
only on the layouts, so it is computed once when the FFT is planned and every call is just
``np.copyto`` into fixed views, one ``Alltoallv`` and ``np.copyto`` out of fixed views:
no allocation per call. The buffers live in the shared heap of the communicator that runs
the exchange, so the engine moves each byte once (peers read or write them directly).

When the source array itself lives in the shared heap of that communicator (the work
arrays of a plan do), there is no packing at all: each rank copies the sub-blocks it
needs straight out of its peers' arrays into its own transposed layout (one strided copy
per byte instead of pack, exchange and unpack). An Allgather of the arrays' heap offsets
starts the transpose (every peer has finished writing its array) and a Barrier ends it
(nobody rewrites an array a peer still reads).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .decomposition import Layout, block


def _views(buf: np.ndarray, shapes: list[tuple[int, ...]]) -> tuple[list[np.ndarray], list[int], list[int]]:
    """Consecutive C-ordered views of `buf` with the given shapes, with counts and displs."""
    views, counts, displs = [], [], []
    off = 0
    for shp in shapes:
        n = int(np.prod(shp, dtype=np.int64))
        views.append(buf[off : off + n].reshape(shp))
        counts.append(n)
        displs.append(off)
        off += n
    return views, counts, displs


class TransposePlan:
    """Redistribute between layout `a` (axis `i` whole, axis `j` cut by grid dimension `d`)
    and layout `b` (axis `i` cut by `d`, axis `j` whole) over `comm`, the ranks that differ
    only in their coordinate along `d` (ordered by it).

    :meth:`forward` goes a -> b, :meth:`backward` b -> a; both reuse the same heap buffers
    (`sendbuf`, `recvbuf`: flat, of the exchange dtype, at least as large as either local
    array; shared by every plan of the same communicator since transposes run one at a time).
    """

    def __init__(
        self,
        comm: Any,
        a: Layout,
        b: Layout,
        i: int,
        j: int,
        sendbuf: np.ndarray,
        recvbuf: np.ndarray,
    ) -> None:
        self.comm = comm
        self.a, self.b, self.i, self.j = a, b, i, j
        p = comm.size
        ni, nj = a.global_shape[i], a.global_shape[j]
        self._islices: list[tuple[slice, ...]] = []
        self._jslices: list[tuple[slice, ...]] = []
        a_blocks: list[tuple[int, ...]] = []
        b_blocks: list[tuple[int, ...]] = []
        for q in range(p):
            si, oi = block(ni, p, q)
            sj, oj = block(nj, p, q)
            isl = [slice(None)] * len(a.shape)
            isl[i] = slice(oi, oi + si)
            jsl = [slice(None)] * len(b.shape)
            jsl[j] = slice(oj, oj + sj)
            self._islices.append(tuple(isl))
            self._jslices.append(tuple(jsl))
            ab = list(a.shape)
            ab[i] = si
            a_blocks.append(tuple(ab))  # what this rank sends to q going a -> b
            bb = list(b.shape)
            bb[j] = sj
            b_blocks.append(tuple(bb))  # what this rank receives from q going a -> b
        self._fwd_send, fsc, fsd = _views(sendbuf, a_blocks)
        self._fwd_recv, frc, frd = _views(recvbuf, b_blocks)
        self._bwd_send, bsc, bsd = _views(sendbuf, b_blocks)
        self._bwd_recv, brc, brd = _views(recvbuf, a_blocks)
        self._fwd_specs = ([sendbuf, (fsc, fsd), None], [recvbuf, (frc, frd), None])
        self._bwd_specs = ([sendbuf, (bsc, bsd), None], [recvbuf, (brc, brd), None])
        #: Seconds spent in the Alltoallv calls, and in whole transposes (pack + exchange + unpack).
        self.exchange_seconds = 0.0
        self.transpose_seconds = 0.0
        # Local shapes of every rank in layouts a and b (for reading peers' arrays in place).
        self._a_shapes = [(*a.shape[:j], block(nj, p, q)[0], *a.shape[j + 1 :]) for q in range(p)]
        self._b_shapes = [(*b.shape[:i], block(ni, p, q)[0], *b.shape[i + 1 :]) for q in range(p)]
        self._offsets = np.empty(p, np.int64)
        self._peer_arrays: dict[tuple[int, int, str], np.ndarray] = {}
        #: Transposes done by reading peers' arrays in place (the rest packed).
        self.direct_count = 0

    def _peer(self, q: int, off: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """Rank q's array at heap offset `off` (read-only), cached."""
        key = (q, off, dtype.str + str(shape))
        arr = self._peer_arrays.get(key)
        if arr is None:
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            arr = np.frombuffer(self.comm._peer_view(off, nbytes), dtype=dtype).reshape(shape)
            if len(self._peer_arrays) > 64:
                self._peer_arrays.clear()
            self._peer_arrays[key] = arr
        return arr

    def _direct(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        src_shapes: list[tuple[int, ...]],
        src_slices: list[tuple[slice, ...]],
        dst_slices: list[tuple[slice, ...]],
    ) -> bool:
        """The one-copy transpose when every rank's `src` is in the heap; False (on every
        rank alike) when some rank's is not."""
        off = self.comm._heap_offset(src) if src.flags.c_contiguous else None
        mine = np.array([-1 if off is None else off], np.int64)
        self.comm.Allgather(mine, self._offsets)
        if (self._offsets < 0).any():
            return False
        me = self.comm.rank
        for k in range(self.comm.size):
            q = (me + k) % self.comm.size
            peer = src if q == me else self._peer(q, int(self._offsets[q]), src_shapes[q], src.dtype)
            np.copyto(dst[dst_slices[q]], peer[src_slices[me]])
        self.comm.Barrier()
        self.direct_count += 1
        return True

    def _run(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        src_slices: list[tuple[slice, ...]],
        send: list[np.ndarray],
        specs: tuple[list[Any], list[Any]],
        recv: list[np.ndarray],
        dst_slices: list[tuple[slice, ...]],
    ) -> None:
        t0 = time.perf_counter()
        for view, sl in zip(send, src_slices, strict=True):
            np.copyto(view, src[sl])
        t1 = time.perf_counter()
        self.comm.Alltoallv(*specs)
        t2 = time.perf_counter()
        for view, sl in zip(recv, dst_slices, strict=True):
            np.copyto(dst[sl], view)
        self.exchange_seconds += t2 - t1
        self.transpose_seconds += time.perf_counter() - t0

    def forward(self, src: np.ndarray, dst: np.ndarray) -> None:
        """`src` in layout a -> `dst` in layout b (collective over the plan's communicator)."""
        t0 = time.perf_counter()
        if self._direct(src, dst, self._a_shapes, self._islices, self._jslices):
            self.transpose_seconds += time.perf_counter() - t0
            return
        self._run(src, dst, self._islices, self._fwd_send, self._fwd_specs, self._fwd_recv, self._jslices)

    def backward(self, src: np.ndarray, dst: np.ndarray) -> None:
        """`src` in layout b -> `dst` in layout a (collective over the plan's communicator)."""
        t0 = time.perf_counter()
        if self._direct(src, dst, self._b_shapes, self._jslices, self._islices):
            self.transpose_seconds += time.perf_counter() - t0
            return
        self._run(src, dst, self._jslices, self._bwd_send, self._bwd_specs, self._bwd_recv, self._islices)
