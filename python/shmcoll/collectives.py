"""The collectives beyond Alltoall, with mpi4py's names, signatures and buffer specs.

`Collectives` is a mixin of `shmcoll.Comm`: each method resolves its buffer
specifications to byte counts here and hands them to the native engine
(`CommBase._coll`), which checks them against the other ranks' and picks an algorithm
(``algorithm=`` or ``SHMCOLL_<OP>_ALGORITHM`` force one: inline, direct, cma, staging).

``IN_PLACE`` follows MPI: Allgather(v) and Allreduce take it as the send buffer on every
rank, Gather(v) and Reduce at the root, Scatter(v) as the root's receive buffer,
Reduce_scatter(_block) as the send buffer (the input then fills the receive buffer and
the result lands at its start).
"""

from __future__ import annotations

import functools
import itertools
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from .buffers import IN_PLACE, Whole, in_bytes, is_in_place, parse_counts, parse_vector, parse_whole
from .errors import ArgumentError, UnsupportedError
from .ops import SUM, Op, check_operator, defined_in_mpi, dtype_name, note_fallback, op_name, supports


@functools.lru_cache(maxsize=64)
def _itemsize(name: str) -> int:
    return int(np.dtype(name).itemsize)


def _split_bytes(w: Whole, p: int, what: str) -> int:
    if w.nbytes % max(p, 1):
        raise ArgumentError(f"the {what} ({w.nbytes} bytes) does not split into {p} equal blocks")
    return w.nbytes // max(p, 1)


def _mpi_spec(spec: Any) -> Any:
    """`spec` with shmcoll.IN_PLACE replaced by mpi4py's (for the MPI fallback)."""
    if spec is IN_PLACE:
        return sys.modules["mpi4py.MPI"].IN_PLACE
    return spec


class Collectives:
    """Bcast, Allgather(v), Gather(v), Scatter(v), Reduce_scatter(_block), Allreduce, Reduce.

    Allreduce, Reduce, Bcast, Allgather, Reduce_scatter_block, Gather and Scatter are
    native methods of `_core.CommBase` for plain arrays and predefined operators, and
    Allgatherv, Gatherv and Scatterv for vector specifications with counts as lists or NumPy
    integer arrays and a predefined mpi4py or NumPy datatype; for anything else they call
    the `_py_<Name>` methods here."""

    # Provided by shmcoll.Comm and its native base.
    size: int
    rank: int
    _mpi: Any

    if TYPE_CHECKING:

        def _coll(self, *args: Any) -> None: ...  # _core.CommBase

        def _fallback_agree(self, op: str, why: str) -> None: ...  # _core.CommBase

        def _reject_with(self, op: str, e: BaseException) -> NoReturn: ...  # Comm

    # -- compressed calls (compress= / traffic=, routed here by the native methods) -----
    def _compressed(self, name: str, args: tuple[Any, ...], compress: Any, traffic: str | None) -> None:
        from .compress import run_compressed

        run_compressed(self, name, args, compress, traffic)

    # -- data movement ----------------------------------------------------------------
    def _py_Bcast(self, buf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Broadcast the root's `buf` to every rank's `buf`."""
        try:
            b = parse_whole(buf)
        except Exception as e:
            self._reject_with("Bcast", e)
        self._coll("Bcast", None, b.buf, root, None, None, None, None, None, algorithm)

    def _py_Allgather(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """Gather every rank's `sendbuf` into every rank's `recvbuf` (rank order)."""
        try:
            r = parse_whole(recvbuf, blocks=self.size)
            block = _split_bytes(r, self.size, "receive buffer")
            s = None if is_in_place(sendbuf) else parse_whole(sendbuf).buf
        except Exception as e:
            self._reject_with("Allgather", e)
        self._coll("Allgather", s, r.buf, 0, block, None, None, None, None, algorithm)

    def _py_Allgatherv(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """Allgather with per-rank counts and displacements in `recvbuf`'s specification."""
        try:
            r = parse_vector(recvbuf, self.size)
            s = None if is_in_place(sendbuf) else parse_whole(sendbuf).buf
        except Exception as e:
            self._reject_with("Allgatherv", e)
        alg = algorithm
        self._coll("Allgatherv", s, r.buf, 0, None, r.counts, r.displs, None, None, alg)

    def _py_Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Gather every rank's `sendbuf` into the root's `recvbuf` (rank order)."""
        try:
            block = r = None
            if self.rank == root:
                rw = parse_whole(recvbuf, blocks=self.size)
                block, r = _split_bytes(rw, self.size, "receive buffer"), rw.buf
            s = None if is_in_place(sendbuf) else parse_whole(sendbuf).buf
        except Exception as e:
            self._reject_with("Gather", e)
        self._coll("Gather", s, r, root, block, None, None, None, None, algorithm)

    def _py_Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Gather with per-rank counts and displacements (the root's `recvbuf` spec)."""
        try:
            counts = displs = r = None
            if self.rank == root:
                v = parse_vector(recvbuf, self.size)
                counts, displs, r = v.counts, v.displs, v.buf
            s = None if is_in_place(sendbuf) else parse_whole(sendbuf).buf
        except Exception as e:
            self._reject_with("Gatherv", e)
        alg = algorithm
        self._coll("Gatherv", s, r, root, None, counts, displs, None, None, alg)

    def _py_Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Send block j of the root's `sendbuf` to rank j's `recvbuf`."""
        try:
            block = s = None
            if self.rank == root:
                sw = parse_whole(sendbuf, blocks=self.size)
                block, s = _split_bytes(sw, self.size, "send buffer"), sw.buf
            r = None if is_in_place(recvbuf) else parse_whole(recvbuf).buf
        except Exception as e:
            self._reject_with("Scatter", e)
        self._coll("Scatter", s, r, root, block, None, None, None, None, algorithm)

    def _py_Scatterv(
        self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None
    ) -> None:
        """Scatter with per-rank counts and displacements (the root's `sendbuf` spec)."""
        try:
            counts = displs = s = None
            if self.rank == root:
                v = parse_vector(sendbuf, self.size)
                counts, displs, s = v.counts, v.displs, v.buf
            r = None if is_in_place(recvbuf) else parse_whole(recvbuf).buf
        except Exception as e:
            self._reject_with("Scatterv", e)
        alg = algorithm
        self._coll("Scatterv", s, r, root, None, counts, displs, None, None, alg)

    # -- reductions -------------------------------------------------------------------
    def _reduction(
        self, name: str, sendbuf: Any, recvbuf: Any, op: Any, send_blocks: int = 1, recv_blocks: int = 1
    ) -> tuple[Any, Whole | None, str, str] | None:
        """(send buffer or None, receive buffer, dtype name, op name), or None when the
        call went to MPI instead."""
        if op is None:
            op = SUM
        r = None if recvbuf is None else parse_whole(recvbuf, blocks=recv_blocks)
        s = None if is_in_place(sendbuf) else parse_whole(sendbuf, blocks=send_blocks)
        dt = (r.dtype if r is not None and r.dtype is not None else None) or (s.dtype if s else None)
        o = op_name(op)
        if o is None:
            check_operator(op)
        if dt is None:
            raise ArgumentError(f"{name}: cannot tell the element type; pass [buf, datatype]")
        if o is not None and not defined_in_mpi(o, dt):
            raise ArgumentError(f"{name}: {o.upper()} is not defined on {dt.name} (in MPI either)")
        if o is None or not supports(o, dt):
            order = "" if dt.isnative else " in non-native byte order"
            what = f"operator {op!r}" if o is None else f"{o.upper()} on {dt.name}{order}"
            if self._mpi is None:
                raise UnsupportedError(
                    f"{name}: {what} is not supported (and there is no MPI to fall back to)"
                )
            note_fallback(what)
            return None
        return (None if s is None else s.buf), r, dtype_name(dt), str(o)

    def _fallback(self, name: str, *args: Any, **kw: Any) -> None:
        """Hand the call to MPI, once every rank agreed to (a rank that ran it on shmcoll
        while this one went to MPI would leave both waiting)."""
        self._fallback_agree(name, "an operator or datatype shmcoll does not reduce")
        getattr(self._mpi, name)(*[_mpi_spec(a) for a in args], **kw)

    def _mpi_op(self, op: Any) -> Any:
        """`op` as mpi4py understands it (shmcoll's operators become MPI's)."""
        if isinstance(op, Op):
            return getattr(sys.modules["mpi4py.MPI"], op.upper())
        return op

    def _py_Allreduce(
        self, sendbuf: Any, recvbuf: Any, op: Any = SUM, *, algorithm: str | None = None
    ) -> None:
        """Combine every rank's `sendbuf` element-wise with `op` into every `recvbuf`."""
        try:
            red = self._reduction("Allreduce", sendbuf, recvbuf, op)
        except Exception as e:
            self._reject_with("Allreduce", e)
        if red is None:
            return self._fallback("Allreduce", sendbuf, recvbuf, self._mpi_op(op or SUM))
        s, r, dt, o = red
        assert r is not None
        self._coll("Allreduce", s, r.buf, 0, None, None, None, dt, o, algorithm)

    def _py_Reduce(
        self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0, *, algorithm: str | None = None
    ) -> None:
        """Combine every rank's `sendbuf` element-wise with `op` into the root's `recvbuf`."""
        try:
            red = self._reduction("Reduce", sendbuf, recvbuf if self.rank == root else None, op)
        except Exception as e:
            self._reject_with("Reduce", e)
        if red is None:
            return self._fallback("Reduce", sendbuf, recvbuf, self._mpi_op(op or SUM), root)
        s, r, dt, o = red
        alg = algorithm
        self._coll("Reduce", s, None if r is None else r.buf, root, None, None, None, dt, o, alg)

    def _py_Reduce_scatter_block(
        self, sendbuf: Any, recvbuf: Any, op: Any = SUM, *, algorithm: str | None = None
    ) -> None:
        """Combine every rank's `sendbuf` (p equal blocks) with `op`; rank i gets block i."""
        try:
            # As mpi4py: a count in the send specification (and in the receive one in
            # place) is per block.
            p = self.size
            red = self._reduction(
                "Reduce_scatter_block", sendbuf, recvbuf, op, p, p if is_in_place(sendbuf) else 1
            )
            if red is not None:
                s, r, dt, o = red
                assert r is not None
                block = _split_bytes(r, self.size, "receive buffer") if s is None else r.nbytes
        except Exception as e:
            self._reject_with("Reduce_scatter_block", e)
        if red is None:
            return self._fallback("Reduce_scatter_block", sendbuf, recvbuf, self._mpi_op(op or SUM))
        assert r is not None
        self._coll("Reduce_scatter_block", s, r.buf, 0, block, None, None, dt, o, algorithm)

    def _py_Reduce_scatter(
        self,
        sendbuf: Any,
        recvbuf: Any,
        recvcounts: Any = None,
        op: Any = SUM,
        *,
        algorithm: str | None = None,
    ) -> None:
        """Combine every rank's `sendbuf` with `op`; rank i gets the `recvcounts[i]`
        elements after those of ranks 0..i-1. Without `recvcounts`, each rank's receive
        buffer length is its count (gathered from every rank)."""
        counts: list[int] | None = None
        try:
            red = self._reduction("Reduce_scatter", sendbuf, recvbuf, op)
            if red is not None:
                s, r, dt, o = red
                assert r is not None
                isz = _itemsize(dt)
                if recvcounts is None and s is None:
                    raise ArgumentError("Reduce_scatter with IN_PLACE needs recvcounts")
                if recvcounts is not None:
                    counts = parse_counts(recvcounts, self.size, isz, "recvcounts")
        except Exception as e:
            self._reject_with("Reduce_scatter", e)
        if red is None:
            return self._fallback("Reduce_scatter", sendbuf, recvbuf, recvcounts, self._mpi_op(op or SUM))
        assert r is not None
        if counts is None:
            mine = np.array([r.nbytes // isz], np.int64)
            everyone = np.empty(self.size, np.int64)
            self._coll("Allgather", mine, everyone, 0, 8, None, None, None, None, None)
            counts = [int(c) for c in everyone]
        nbytes = [in_bytes(c, isz, "a count") for c in counts]
        displs = list(itertools.accumulate(nbytes, initial=0))[:-1]
        self._coll("Reduce_scatter", s, r.buf, 0, None, nbytes, displs, dt, o, algorithm)
