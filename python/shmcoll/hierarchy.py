"""Communicators that span several nodes: shared memory inside each node, MPI between.

``shmcoll.Comm(comm)`` returns a `HierComm` when `comm`'s ranks live on more than one node
(``MPI.COMM_TYPE_SHARED``) or when ``SHMCOLL_NODE_SPLIT=k`` groups them into fake nodes of
k consecutive ranks (to test the hierarchy on one machine: 4 ranks with k=2 run as 2 nodes
x 2). It keeps three communicators: `local` (a shmcoll.Comm over this node's ranks),
`cross` (an MPI communicator of the ranks with this rank's local index, one per node) and
`mpi_comm` itself. With N nodes of L ranks each, numbered node by node (rank = node*L +
local), the collectives run as:

* Alltoall: blocks regrouped by destination local rank, a node-local Alltoall (shared
  memory) of N-block aggregates, regrouped by destination node, then one MPI Alltoall of
  L-block aggregates over `cross`, which lands in rank order in the receive buffer;
* Allreduce: node-local Reduce_scatter (one slice per local rank), MPI Allreduce of the
  slice over `cross`, node-local Allgatherv;
* Reduce_scatter_block: node-local Reduce_scatter of blocks regrouped by local rank, then
  MPI Reduce_scatter_block over `cross`;
* Allgather: node-local Allgather into this node's part, MPI Allgather over `cross`;
* Bcast: MPI Bcast over the root's `cross`, then a node-local Bcast;
* Reduce: node-local Reduce_scatter, MPI Reduce of each slice to the root's node over
  `cross`, node-local Gatherv to the root;
* Gather / Scatter: node-local Gather to (Scatter from) the rank with the root's local
  index, MPI Gather (Scatter) of node blocks over its `cross`;
* Barrier: node-local, MPI Barrier over `cross`, node-local.

Before any of these but Barrier moves data, every rank reads its arguments and the ranks
agree on them (`HierComm._agree`: a MAX reduction of a few integers over the node, then
over `cross`): a bad argument on one rank makes every rank raise (that rank its own
error, the others PeerRejectedError), ranks that pass different sizes, roots, element
types or operators raise MismatchError, and a call that one rank must hand to MPI goes to
MPI on every rank. Buffer specifications are read as MPI reads them (a count is per rank
in Allgather's and Gather's receive and in Scatter's and Reduce_scatter_block's send
specification), and a reduction's send and receive buffers must hold the same type.

Other collectives (the vector variants, Reduce_scatter, in-place Reduce_scatter_block,
Reduce, Gather and Scatter), and any call when nodes differ in size or are not numbered
node by node, run on `mpi_comm` itself: announced once with a RuntimeWarning and counted
in `HierComm.fallbacks`.
"""

from __future__ import annotations

import functools
import warnings
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import numpy as np

from .buffers import Whole, is_in_place, parse_simple, parse_whole
from .collectives import mpi_arg
from .comm import Comm, serve_spanning_nodes_with
from .compress import compressible
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    BadBufferError,
    MismatchError,
    PeerRejectedError,
    ServedByMPI,
    as_shmcoll_error,
)
from .nodes import agreed_node_split, node_color
from .ops import MAX, SUM, Op
from .passthrough import COLLECTIVES, MPI4PY_NAMES, forward_missing, forward_type, lookup
from .resolve import reduction

_P = TypeVar("_P")

#: What every rank's call must agree on before any data moves (`HierComm._agree`): the
#: collective, its root (0 where it has none), its size (bytes, or elements for the
#: reductions) and a checksum of the element type and operator of a reduction.
_SIGNATURE = ("collective", "root", "size", "element type and operator")
_NO_SIGNATURE = (0,) * (2 * len(_SIGNATURE))
_BCAST, _ALLGATHER, _ALLTOALL, _ALLREDUCE, _REDUCE_SCATTER_BLOCK, _REDUCE, _GATHER, _SCATTER = range(1, 9)


class _Unread:
    """HierComm's `node_split` when not given: read SHMCOLL_NODE_SPLIT and agree on it."""


_UNREAD = _Unread()


def _mpi_op(op: Any) -> Any:
    if op is None:
        op = SUM
    if isinstance(op, Op):
        from mpi4py import MPI

        return getattr(MPI, op.upper())
    return op


class HierComm:
    """A communicator over several nodes (see the module documentation)."""

    def __init__(self, mpi_comm: Any, node_split: int | _Unread | None = _UNREAD) -> None:
        # `node_split`: SHMCOLL_NODE_SPLIT as every rank agreed on it (Comm's creation
        # exchange brings it); read and agreed on here when not given.
        if isinstance(node_split, _Unread):
            node_split = agreed_node_split(mpi_comm)
        self._node_split = node_split
        self.mpi_comm = mpi_comm
        forward_type(type(self), type(mpi_comm))
        self.rank = int(mpi_comm.Get_rank())
        self.size = int(mpi_comm.Get_size())
        color = node_color(mpi_comm, node_split)
        self._node_mpi = mpi_comm.Split(color, key=self.rank)
        self.local = Comm(self._node_mpi)
        self.local_rank, self.local_size = self.local.rank, self.local.size
        self.cross = mpi_comm.Split(self.local_rank, key=self.rank)
        colors = mpi_comm.allgather(color)
        nodes = sorted(set(colors))
        self.nnodes = len(nodes)
        self.node = nodes.index(color)
        sizes = {c: colors.count(c) for c in nodes}
        # node by node: rank = node*L + local
        self.uniform = len(set(sizes.values())) == 1 and all(
            colors[r] == nodes[r // self.local_size] for r in range(self.size)
        )
        self.fallbacks: dict[str, int] = {}
        self._warned: set[str] = set()
        self._owned_mpi: Any = None  # an MPI communicator Dup made for this one
        from mpi4py import MPI

        # what every call's agreement (`_agree`) needs, looked up once
        self._cross_max = self.cross.Allreduce
        self._in_place, self._mpi_max = MPI.IN_PLACE, MPI.MAX

    # -- identity ---------------------------------------------------------------------
    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"<shmcoll.HierComm rank {self.rank} of {self.size}: {self.nnodes} nodes x {self.local_size}>"

    def Free(self) -> None:
        from .comm import free_owned

        self.local.Free()
        self.cross.Free()
        self._node_mpi.Free()
        free_owned(self)

    def Dup(self) -> HierComm:
        """A new communicator over the same ranks, on its own MPI communicator
        (MPI_Comm_dup), which Free frees (collective)."""
        from .comm import owning

        dup: HierComm = owning(HierComm(self.mpi_comm.Dup(), self._node_split))
        return dup

    def Clone(self) -> HierComm:
        return self.Dup()

    def free(self) -> None:
        """Alias of Free (mpi4py 4's lowercase name; the whole MPI communicator is the
        caller's to free)."""
        self.Free()

    @property
    def freed(self) -> bool:
        return bool(self.local.freed)

    def __enter__(self) -> HierComm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.Free()

    def empty(self, shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
        """An array in this node's shared heap (the node-local steps read it directly)."""
        return self.local.empty(shape, dtype, order)

    def zeros(self, shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
        return self.local.zeros(shape, dtype, order)

    def _fallback(self, name: str, *args: Any, **kw: Any) -> Any:
        """Run `name` on MPI itself (announced once, counted)."""
        self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
        if name not in self._warned:
            self._warned.add(name)
            why = "" if self.uniform else " (nodes differ in size or are not numbered node by node)"
            warnings.warn(f"shmcoll: {name} across nodes runs on MPI{why}", RuntimeWarning, stacklevel=3)
        from mpi4py import MPI

        # A None buffer reads as IN_PLACE here, as in this class's own methods
        # (buffers.is_in_place); keywords (ops, counts) only as mpi4py takes them.
        def conv(a: Any) -> Any:
            return MPI.IN_PLACE if is_in_place(a) else mpi_arg(a)

        return getattr(self.mpi_comm, name)(*map(conv, args), **{k: mpi_arg(v) for k, v in kw.items()})

    # -- agreement --------------------------------------------------------------------
    def _agree(self, op: str, parse: Callable[[], tuple[tuple[int, ...], _P]]) -> _P | None:
        """This rank's arguments of call `op`, read by `parse` (which returns the call's
        signature, the integers `_SIGNATURE` names, which every rank must pass alike, and
        what the call needs), agreed on with every rank before any rank moves data or waits for
        another in a step: returns what `parse` returned, or None when some rank's call is
        MPI's to serve (`ServedByMPI`: then every rank's is). When `parse` fails on any
        rank, every rank raises: that rank its own error (as the plain Comm raises it),
        the others PeerRejectedError naming the lowest such rank; when the ranks'
        signatures differ, every rank raises MismatchError.

        One MAX reduction of a few integers: over the node (shared memory), then over
        `cross` (the node's MAX reaches every local index, so every rank ends with the
        job's MAX)."""
        err: Exception | None = None
        served_by_mpi = False
        sig: tuple[int, ...] = ()
        plan: _P | None = None
        try:
            sig, plan = parse()
        except ServedByMPI:
            served_by_mpi = True
        except Exception as e:  # every argument error: rejected on every rank
            err = e
        if err is not None:
            word = [self.size - self.rank, 0, *_NO_SIGNATURE]
        elif served_by_mpi:
            word = [0, 1, *_NO_SIGNATURE]
        else:
            word = [0, 0, *sig, *(-x for x in sig)]
        v = np.array(word, np.int64)
        out = np.empty_like(v)
        self.local.Allreduce(v, out, MAX)
        self._cross_max(self._in_place, out, op=self._mpi_max)
        got = out.tolist()
        if got[0]:
            self._rejected(op, self.size - got[0], err)
        if got[1]:
            return None
        k = len(_SIGNATURE)
        for i, what in enumerate(_SIGNATURE):
            if got[2 + i] + got[2 + k + i]:  # the highest and the lowest differ
                lo, hi = -got[2 + k + i], got[2 + i]
                raise MismatchError(f"{op}: the ranks disagree on the {what} (from {lo} to {hi})")
        return plan

    def _rejected(self, op: str, bad: int, err: Exception | None) -> NoReturn:
        """Raise for call `op`, which rank `bad` (the lowest that did) rejected: `err` on
        a rank that rejected it, PeerRejectedError with rank `bad`'s reason on the others
        (that reason travels only on this, the failing, path)."""
        why = self.mpi_comm.bcast(None if err is None else f"{type(err).__name__}: {err}", root=bad)
        if err is not None:
            raise as_shmcoll_error(err)
        e = PeerRejectedError(f"rank {bad} rejected the call: {why}")
        e.rank = bad
        raise e

    def _root(self, root: Any) -> int:
        if isinstance(root, bool) or not isinstance(root, int | np.integer):
            raise ArgumentTypeError(f"root must be an int, not {type(root).__name__}")
        if not 0 <= root < self.size:
            raise ArgumentError(f"root {root} out of range for a communicator of {self.size} ranks")
        return int(root)

    # -- collectives ------------------------------------------------------------------
    def Barrier(self) -> None:
        self.local.Barrier()
        if self.local_rank == 0:
            self.cross.Barrier()
        self.local.Barrier()

    barrier = Barrier

    @compressible("Bcast")
    def Bcast(self, buf: Any, root: int = 0) -> None:
        if not self.uniform:
            return self._fallback("Bcast", buf, root)

        def parse() -> tuple[tuple[int, ...], tuple[int, Whole]]:
            r = self._root(root)
            b = parse_whole(buf)
            return (_BCAST, r, b.nbytes, 0), (r, b)

        got = self._agree("Bcast", parse)
        if got is None:
            return self._fallback("Bcast", buf, root)
        root_node, root_local = divmod(got[0], self.local_size)
        b = got[1]
        if self.local_rank == root_local:
            self.cross.Bcast([_as_bytes(b.buf), b.nbytes, _byte()], root=root_node)
        self.local.Bcast(b.buf, root=root_local)
        return None

    @compressible("Allgather")
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        if not self.uniform:
            return self._fallback("Allgather", sendbuf, recvbuf)

        def parse() -> tuple[tuple[int, ...], tuple[np.ndarray, Any]]:
            # As MPI: a count in the receive specification is per rank.
            r = _as_bytes(parse_whole(recvbuf, blocks=self.size).buf)
            block = _block(r.size, self.size, "receive buffer")
            s = None
            if not is_in_place(sendbuf):
                s = _as_bytes(parse_whole(sendbuf).buf)
                if s.size != block:
                    raise BadBufferError(
                        f"the send buffer holds {s.size} bytes but this rank's receive block holds {block}"
                    )
            return (_ALLGATHER, 0, block, 0), (r, s)

        got = self._agree("Allgather", parse)
        if got is None:
            return self._fallback("Allgather", sendbuf, recvbuf)
        r, s = got
        part = r.size // self.nnodes
        mine = r[self.node * part : (self.node + 1) * part]
        if s is None:
            from .buffers import IN_PLACE

            self.local.Allgather(IN_PLACE, mine)
        else:
            self.local.Allgather(s, mine)
        from mpi4py import MPI

        self.cross.Allgather(MPI.IN_PLACE, [r, part, _byte()])
        return None

    @compressible("Alltoall")
    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        if not self.uniform:
            return self._fallback("Alltoall", sendbuf, recvbuf)

        def parse() -> tuple[tuple[int, ...], tuple[np.ndarray, np.ndarray, int]]:
            rs = parse_simple(recvbuf, self.size)
            n = rs.bytes_per_rank or 0
            r = _as_bytes(rs.buf)
            if r.size < n * self.size:
                raise BadBufferError(
                    f"the receive buffer holds {r.size} bytes but the call needs {n * self.size}"
                )
            if is_in_place(sendbuf):
                s = r[: n * self.size].copy()
            else:
                ss = parse_simple(sendbuf, self.size)
                if ss.bytes_per_rank != n:
                    raise BadBufferError(
                        f"the send buffer's blocks hold {ss.bytes_per_rank} bytes, the receive buffer's {n}"
                    )
                s = _as_bytes(ss.buf)[: n * self.size]
                if s.size < n * self.size:
                    raise BadBufferError(
                        f"the send buffer holds {s.size} bytes but the call needs {n * self.size}"
                    )
            return (_ALLTOALL, 0, n, 0), (r, s, n)

        got = self._agree("Alltoall", parse)
        if got is None:
            return self._fallback("Alltoall", sendbuf, recvbuf)
        r, s, n = got
        L, N = self.local_size, self.nnodes
        # send block (b, j) -> row j, column b: each local rank gets its N-block aggregate
        by_local = np.ascontiguousarray(s.reshape(N, L, n).transpose(1, 0, 2))
        got_ = np.empty_like(by_local)  # [source local i][destination node b]
        self.local.Alltoall(by_local, got_)
        by_node = np.ascontiguousarray(got_.transpose(1, 0, 2))  # [b][i]
        self.cross.Alltoall([by_node, L * n, _byte()], [r, L * n, _byte()])
        return None

    def _reduction(
        self, name: str, sendbuf: Any, recvbuf: Any, op: Any, send_blocks: int = 1
    ) -> tuple[np.ndarray | None, np.ndarray | None, np.dtype[Any], int]:
        """A reduction's send and receive buffers as flat arrays of their (common) element
        type (None: in place, or no receive buffer here), that type and the checksum of
        the type and operator every rank must share. The rules are the plain Comm's
        (`resolve.reduction`): the send and receive buffers hold the same type (MPI
        raises for a mismatch; their bytes are never combined as another type's),
        ServedByMPI for what the kernels do not combine."""
        red = reduction(name, sendbuf, recvbuf, op, send_blocks=send_blocks)
        dt = _numpy_dtype(red.dtype)
        s = None if red.send is None else _typed(red.send, dt)
        r = None if red.recv is None else _typed(red.recv.buf, dt)
        return s, r, dt, _checksum(red.dtype, red.op)

    @compressible("Allreduce")
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        if not self.uniform:
            return self._fallback("Allreduce", sendbuf, recvbuf, _mpi_op(op))

        def parse() -> tuple[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.dtype[Any]]]:
            s, r, dt, ck = self._reduction("Allreduce", sendbuf, recvbuf, op)
            assert r is not None
            if s is None:
                s = r.copy()
            elif s.size != r.size:
                raise BadBufferError(
                    f"the receive buffer holds {r.nbytes} bytes but the call needs {s.nbytes}"
                )
            return (_ALLREDUCE, 0, r.size, ck), (s, r, dt)

        got = self._agree("Allreduce", parse)
        if got is None:
            return self._fallback("Allreduce", sendbuf, recvbuf, _mpi_op(op))
        s, r, dt = got
        counts, displs = _slices(r.size, self.local_size)
        mine = np.empty(counts[self.local_rank], dt)
        self.local.Reduce_scatter(s, mine, counts, op)
        from mpi4py import MPI

        self.cross.Allreduce(MPI.IN_PLACE, mine, op=_mpi_op(op))
        self.local.Allgatherv(mine, [r, counts, displs, None])
        return None

    @compressible("Reduce_scatter_block")
    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        if not self.uniform:
            return self._fallback("Reduce_scatter_block", sendbuf, recvbuf, _mpi_op(op))

        def parse() -> tuple[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.dtype[Any]]]:
            if is_in_place(sendbuf):
                raise ServedByMPI("an in-place Reduce_scatter_block")
            # As MPI: a count in the send specification is per rank.
            s, r, dt, ck = self._reduction(
                "Reduce_scatter_block", sendbuf, recvbuf, op, send_blocks=self.size
            )
            assert s is not None and r is not None
            if s.size != r.size * self.size:
                raise BadBufferError(
                    f"the send buffer holds {s.nbytes} bytes but the call needs {r.nbytes * self.size}"
                )
            return (_REDUCE_SCATTER_BLOCK, 0, r.size, ck), (s, r, dt)

        got = self._agree("Reduce_scatter_block", parse)
        if got is None:
            return self._fallback("Reduce_scatter_block", sendbuf, recvbuf, _mpi_op(op))
        s, r, dt = got
        L, N, n = self.local_size, self.nnodes, r.size
        # block (b, i) -> part i, slot b: local rank i combines the blocks of every node's
        # i-th rank over this node, then the nodes combine over `cross`.
        by_local = np.ascontiguousarray(s.reshape(N, L, n).transpose(1, 0, 2))
        part = np.empty(N * n, dt)
        self.local.Reduce_scatter_block(by_local.reshape(-1), part, op)
        self.cross.Reduce_scatter_block(part, r, op=_mpi_op(op))
        return None

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> None:
        if not self.uniform:
            return self._fallback("Reduce", sendbuf, recvbuf, _mpi_op(op), root)

        def parse() -> tuple[tuple[int, ...], tuple[int, np.ndarray, np.ndarray | None, np.dtype[Any]]]:
            rt = self._root(root)
            if is_in_place(sendbuf):  # the root's in-place Reduce: every rank's goes to MPI
                raise ServedByMPI("an in-place Reduce")
            at_root = self.rank == rt
            if at_root and recvbuf is None:
                raise ArgumentError("Reduce: the root needs a receive buffer")
            s, r, dt, ck = self._reduction("Reduce", sendbuf, recvbuf if at_root else None, op)
            assert s is not None
            if r is not None and r.size != s.size:
                raise BadBufferError(
                    f"the receive buffer holds {r.nbytes} bytes but the call needs {s.nbytes}"
                )
            return (_REDUCE, rt, s.size, ck), (rt, s, r, dt)

        got = self._agree("Reduce", parse)
        if got is None:
            return self._fallback("Reduce", sendbuf, recvbuf, _mpi_op(op), root)
        rt, s, r, dt = got
        L = self.local_size
        root_node, root_local = divmod(rt, L)
        counts, displs = _slices(s.size, L)
        mine = np.empty(counts[self.local_rank], dt)
        self.local.Reduce_scatter(s, mine, counts, op)
        from mpi4py import MPI

        if self.node == root_node:
            self.cross.Reduce(MPI.IN_PLACE, mine, op=_mpi_op(op), root=root_node)
            self.local.Gatherv(mine, None if r is None else [r, counts, displs, None], root=root_local)
        else:
            self.cross.Reduce(mine, None, op=_mpi_op(op), root=root_node)
        return None

    def _root_buffer(self, name: str, spec: Any, what: str, block: int) -> np.ndarray:
        """The bytes of the root's buffer of p blocks of `block` bytes in Gather (`what`
        "receive") or Scatter ("send"); as MPI, a count in its specification is per rank."""
        if spec is None:
            raise ArgumentError(f"{name}: the root needs a {what} buffer")
        b = _as_bytes(parse_whole(spec, blocks=self.size).buf)
        if b.size != block * self.size:
            raise BadBufferError(
                f"the {what} buffer holds {b.size} bytes but the call needs {block * self.size}"
            )
        return b

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if not self.uniform:
            return self._fallback("Gather", sendbuf, recvbuf, root)

        def parse() -> tuple[tuple[int, ...], tuple[int, np.ndarray, np.ndarray | None]]:
            rt = self._root(root)
            if is_in_place(sendbuf):  # the root's in-place Gather: every rank's goes to MPI
                raise ServedByMPI("an in-place Gather")
            s = _as_bytes(parse_whole(sendbuf).buf)
            r = self._root_buffer("Gather", recvbuf, "receive", s.size) if self.rank == rt else None
            return (_GATHER, rt, s.size, 0), (rt, s, r)

        got = self._agree("Gather", parse)
        if got is None:
            return self._fallback("Gather", sendbuf, recvbuf, root)
        rt, s, r = got
        L, n = self.local_size, s.size
        root_node, root_local = divmod(rt, L)
        node_part = np.empty(L * n, np.uint8) if self.local_rank == root_local else None
        self.local.Gather(s, node_part, root=root_local)
        if self.local_rank == root_local:
            self.cross.Gather(
                [node_part, L * n, _byte()], None if r is None else [r, L * n, _byte()], root=root_node
            )
        return None

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if not self.uniform:
            return self._fallback("Scatter", sendbuf, recvbuf, root)

        def parse() -> tuple[tuple[int, ...], tuple[int, np.ndarray | None, np.ndarray]]:
            rt = self._root(root)
            if is_in_place(recvbuf):  # the root's in-place Scatter: every rank's goes to MPI
                raise ServedByMPI("an in-place Scatter")
            r = _as_bytes(parse_whole(recvbuf).buf)
            s = self._root_buffer("Scatter", sendbuf, "send", r.size) if self.rank == rt else None
            return (_SCATTER, rt, r.size, 0), (rt, s, r)

        got = self._agree("Scatter", parse)
        if got is None:
            return self._fallback("Scatter", sendbuf, recvbuf, root)
        rt, s, r = got
        L, n = self.local_size, r.size
        root_node, root_local = divmod(rt, L)
        node_part = np.empty(L * n, np.uint8) if self.local_rank == root_local else None
        if self.local_rank == root_local:
            self.cross.Scatter(
                None if s is None else [s, L * n, _byte()], [node_part, L * n, _byte()], root=root_node
            )
        self.local.Scatter(node_part, r, root=root_local)
        return None

    if TYPE_CHECKING:  # mpi4py's other methods (forwarded by descriptors, see passthrough)

        def __getattr__(self, name: str) -> Any: ...

    def _passthrough(self, name: str) -> Any:
        """Other mpi4py collectives run on MPI (announced once, counted here); the rest of
        mpi4py's methods (point-to-point, lowercase object collectives, ...) come from the
        whole communicator as for shmcoll.Comm (see shmcoll.passthrough)."""
        if name[:1].isupper() and name in COLLECTIVES and hasattr(self.mpi_comm, name):
            return lambda *a, **k: self._fallback(name, *a, **k)
        return lookup("shmcoll.HierComm", self.mpi_comm, name)


def _slices(n: int, parts: int) -> tuple[list[int], list[int]]:
    """(counts, displacements) of `n` elements cut into `parts` nearly equal slices, as the
    engine's reduce-scatter cuts them."""
    displs = [n * j // parts for j in range(parts)]
    counts = [n * (j + 1) // parts - d for j, d in enumerate(displs)]
    return counts, displs


@functools.lru_cache(maxsize=256)
def _checksum(dtype: str, op: str) -> int:
    """A number for (element type, operator) that is the same in every process (Python's
    own string hashes are salted per process)."""
    return zlib.crc32(f"{dtype}/{op}".encode())


def _block(nbytes: int, size: int, what: str) -> int:
    """The bytes of each of `size` equal blocks of `nbytes`."""
    if nbytes % size:
        raise ArgumentError(f"the {what} ({nbytes} bytes) does not split into {size} equal blocks")
    return nbytes // size


@functools.lru_cache(maxsize=64)
def _numpy_dtype(name: str) -> np.dtype[Any]:
    return np.dtype(name)


def _typed(buf: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """A flat, writable view of `buf`'s memory as `dtype`."""
    if isinstance(buf, np.ndarray):
        if buf.ndim == 1 and buf.dtype == dtype:
            return buf
        return buf.reshape(-1).view(dtype)
    return np.frombuffer(memoryview(buf).cast("B"), dtype=dtype)


def _as_bytes(buf: Any) -> np.ndarray:
    return _typed(buf, np.dtype(np.uint8))


def _byte() -> Any:
    from mpi4py import MPI

    return MPI.BYTE


forward_missing(HierComm, MPI4PY_NAMES)


# Comm serves communicators that span nodes with HierComm, which builds on Comm: it is
# registered here rather than imported there (the package imports this module).
serve_spanning_nodes_with(HierComm)
