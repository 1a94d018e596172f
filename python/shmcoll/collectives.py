"""The collectives beyond Alltoall, with mpi4py's names, signatures and buffer specs.

`Collectives` is a mixin of `shmcoll.Comm`: each method resolves its buffer
specifications to byte counts here and hands them to the native engine
(`CommBase._coll`), which checks them against the other ranks' and picks an algorithm
(``algorithm=`` or ``SHMCOLL_<OP>_ALGORITHM`` force one: inline, direct, cma, staging).

``IN_PLACE`` follows MPI: Allgather(v) and Allreduce take it as the send buffer on every
rank, Gather(v) and Reduce at the root, Scatter(v) as the root's receive buffer,
Reduce_scatter(_block) as the send buffer (the input then fills the receive buffer and
the result lands at its start); None there is IN_PLACE too, as in mpi4py.

What shmcoll does not serve itself (operators and datatypes its kernels do not reduce,
derived datatypes with gaps, buffers in device memory, MPI.BOTTOM: `ServedByMPI`) runs on
the wrapped MPI communicator, once every rank agreed to (`_on_mpi`), announced once per
kind and counted in ``shmcoll.ops.fallback_calls``.
"""

from __future__ import annotations

import functools
import itertools
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from .buffers import IN_PLACE, Whole, in_bytes, is_in_place, parse_counts, parse_vector, parse_whole
from .errors import ArgumentError, ServedByMPI, UnsupportedError
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
        except ServedByMPI as why:
            return self._on_mpi("Bcast", why, (buf, root))
        except Exception as e:
            self._reject_with("Bcast", e)
        self._coll("Bcast", None, b.buf, root, None, None, None, None, None, algorithm)

    def _py_Allgather(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """Gather every rank's `sendbuf` into every rank's `recvbuf` (rank order)."""
        try:
            r = parse_whole(recvbuf, blocks=self.size)
            block = _split_bytes(r, self.size, "receive buffer")
            s = None if is_in_place(sendbuf) else parse_whole(sendbuf).buf
        except ServedByMPI as why:
            return self._on_mpi("Allgather", why, (sendbuf, recvbuf))
        except Exception as e:
            self._reject_with("Allgather", e)
        self._coll("Allgather", s, r.buf, 0, block, None, None, None, None, algorithm)

    def _py_Allgatherv(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """Allgather with per-rank counts and displacements in `recvbuf`'s specification."""
        try:
            r = parse_vector(recvbuf, self.size)
            s = None if is_in_place(sendbuf) else parse_whole(sendbuf).buf
        except ServedByMPI as why:
            return self._on_mpi("Allgatherv", why, (sendbuf, recvbuf))
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
        except ServedByMPI as why:
            return self._on_mpi("Gather", why, (sendbuf, recvbuf, root))
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
        except ServedByMPI as why:
            return self._on_mpi("Gatherv", why, (sendbuf, recvbuf, root))
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
        except ServedByMPI as why:
            return self._on_mpi("Scatter", why, (sendbuf, recvbuf, root))
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
        except ServedByMPI as why:
            return self._on_mpi("Scatterv", why, (sendbuf, recvbuf, root))
        except Exception as e:
            self._reject_with("Scatterv", e)
        alg = algorithm
        self._coll("Scatterv", s, r, root, None, counts, displs, None, None, alg)

    # -- reductions -------------------------------------------------------------------
    def _reduction(
        self, name: str, sendbuf: Any, recvbuf: Any, op: Any, send_blocks: int = 1, recv_blocks: int = 1
    ) -> tuple[Any, Whole | None, str, str]:
        """(send buffer or None, receive buffer, dtype name, op name); ServedByMPI for an
        operator or element type the kernels do not combine."""
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
            raise ServedByMPI(f"operator {op!r}" if o is None else f"{o.upper()} on {dt.name}{order}")
        return (None if s is None else s.buf), r, dtype_name(dt), str(o)

    def _on_mpi(self, name: str, why: ServedByMPI, args: tuple[Any, ...], method: str | None = None) -> Any:
        """Run call `name` on the wrapped MPI communicator (its method `method`, default
        `name`, with `args`; shmcoll's IN_PLACE and operators become mpi4py's) once every
        rank agreed to: a rank that ran it on shmcoll while this one went to MPI would
        leave both waiting. Announced once per kind of `why`, counted per call. Without
        an MPI communicator, every rank raises UnsupportedError."""
        agreed_as = name.removesuffix("_init")
        if self._mpi is None:
            self._reject_with(
                agreed_as,
                UnsupportedError(
                    f"{name}: {why} is not supported by shmcoll, and there is no MPI to fall back to"
                ),
            )
        self._fallback_agree(agreed_as, str(why))
        note_fallback(str(why))
        return getattr(self._mpi, method or name)(*[self._mpi_arg(a) for a in args])

    def _mpi_arg(self, a: Any) -> Any:
        """An argument as mpi4py understands it (shmcoll's IN_PLACE and operators become
        mpi4py's)."""
        if isinstance(a, Op):
            return getattr(sys.modules["mpi4py.MPI"], a.upper())
        return _mpi_spec(a)

    def _py_Allreduce(
        self, sendbuf: Any, recvbuf: Any, op: Any = SUM, *, algorithm: str | None = None
    ) -> None:
        """Combine every rank's `sendbuf` element-wise with `op` into every `recvbuf`."""
        try:
            s, r, dt, o = self._reduction("Allreduce", sendbuf, recvbuf, op)
        except ServedByMPI as why:
            return self._on_mpi("Allreduce", why, (sendbuf, recvbuf, op or SUM))
        except Exception as e:
            self._reject_with("Allreduce", e)
        assert r is not None
        self._coll("Allreduce", s, r.buf, 0, None, None, None, dt, o, algorithm)

    def _py_Reduce(
        self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0, *, algorithm: str | None = None
    ) -> None:
        """Combine every rank's `sendbuf` element-wise with `op` into the root's `recvbuf`."""
        try:
            s, r, dt, o = self._reduction("Reduce", sendbuf, recvbuf if self.rank == root else None, op)
        except ServedByMPI as why:
            return self._on_mpi("Reduce", why, (sendbuf, recvbuf, op or SUM, root))
        except Exception as e:
            self._reject_with("Reduce", e)
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
            s, r, dt, o = self._reduction(
                "Reduce_scatter_block", sendbuf, recvbuf, op, p, p if is_in_place(sendbuf) else 1
            )
            assert r is not None
            block = _split_bytes(r, self.size, "receive buffer") if s is None else r.nbytes
        except ServedByMPI as why:
            return self._on_mpi("Reduce_scatter_block", why, (sendbuf, recvbuf, op or SUM))
        except Exception as e:
            self._reject_with("Reduce_scatter_block", e)
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
            s, r, dt, o = self._reduction("Reduce_scatter", sendbuf, recvbuf, op)
            assert r is not None
            isz = _itemsize(dt)
            if recvcounts is None and s is None:
                raise ArgumentError("Reduce_scatter with IN_PLACE needs recvcounts")
            if recvcounts is not None:
                counts = parse_counts(recvcounts, self.size, isz, "recvcounts")
        except ServedByMPI as why:
            return self._on_mpi("Reduce_scatter", why, (sendbuf, recvbuf, recvcounts, op or SUM))
        except Exception as e:
            self._reject_with("Reduce_scatter", e)
        if counts is None:
            mine = np.array([r.nbytes // isz], np.int64)
            everyone = np.empty(self.size, np.int64)
            self._coll("Allgather", mine, everyone, 0, 8, None, None, None, None, None)
            counts = [int(c) for c in everyone]
        nbytes = [in_bytes(c, isz, "a count") for c in counts]
        displs = list(itertools.accumulate(nbytes, initial=0))[:-1]
        self._coll("Reduce_scatter", s, r.buf, 0, None, nbytes, displs, dt, o, algorithm)
