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

Other collectives (the vector variants, Reduce_scatter, in-place Reduce, Gather and
Scatter), and any call when nodes differ in size or are not numbered node by node, run on
`mpi_comm` itself: announced once with a RuntimeWarning and counted in
`HierComm.fallbacks`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from .buffers import is_in_place, parse_simple, parse_whole
from .collectives import mpi_arg
from .comm import Comm, serve_spanning_nodes_with
from .compress import compressible
from .nodes import agreed_node_split, node_color
from .ops import SUM, Op
from .passthrough import COLLECTIVES, MPI4PY_NAMES, forward_missing, forward_type, lookup


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
        L = self.local_size
        root_node, root_local = divmod(root, L)
        b = parse_whole(buf)
        if self.local_rank == root_local:
            self.cross.Bcast([_as_bytes(b.buf), b.nbytes, _byte()], root=root_node)
        self.local.Bcast(b.buf, root=root_local)
        return None

    @compressible("Allgather")
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        if not self.uniform:
            return self._fallback("Allgather", sendbuf, recvbuf)
        N, a = self.nnodes, self.node
        r = _as_bytes(parse_whole(recvbuf).buf)
        part = r.size // N
        mine = r[a * part : (a + 1) * part]
        if is_in_place(sendbuf):
            from .buffers import IN_PLACE

            self.local.Allgather(IN_PLACE, mine)
        else:
            self.local.Allgather(_as_bytes(parse_whole(sendbuf).buf), mine)
        from mpi4py import MPI

        self.cross.Allgather(MPI.IN_PLACE, [r, part, _byte()])
        return None

    @compressible("Alltoall")
    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        if not self.uniform:
            return self._fallback("Alltoall", sendbuf, recvbuf)
        L, N = self.local_size, self.nnodes
        rs = parse_simple(recvbuf, self.size)
        r = _as_bytes(rs.buf)
        n = rs.bytes_per_rank or 0
        if is_in_place(sendbuf):
            s = r[: n * self.size].copy()
        else:
            s = _as_bytes(parse_simple(sendbuf, self.size).buf)[: n * self.size]
        # send block (b, j) -> row j, column b: each local rank gets its N-block aggregate
        by_local = np.ascontiguousarray(s.reshape(N, L, n).transpose(1, 0, 2))
        got = np.empty_like(by_local)  # [source local i][destination node b]
        self.local.Alltoall(by_local, got)
        by_node = np.ascontiguousarray(got.transpose(1, 0, 2))  # [b][i]
        self.cross.Alltoall([by_node, L * n, _byte()], [r, L * n, _byte()])
        return None

    @compressible("Allreduce")
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        if not self.uniform:
            return self._fallback("Allreduce", sendbuf, recvbuf, _mpi_op(op))
        rw = parse_whole(recvbuf)
        if rw.dtype is None:
            return self._fallback("Allreduce", sendbuf, recvbuf, _mpi_op(op))
        r = _typed(rw.buf, rw.dtype)
        s = r.copy() if is_in_place(sendbuf) else _typed(parse_whole(sendbuf).buf, rw.dtype)
        L, n = self.local_size, r.size
        counts, displs = _slices(n, L)
        mine = np.empty(counts[self.local_rank], rw.dtype)
        self.local.Reduce_scatter(s, mine, counts, op)
        from mpi4py import MPI

        self.cross.Allreduce(MPI.IN_PLACE, mine, op=_mpi_op(op))
        self.local.Allgatherv(mine, [r, counts, displs, None])
        return None

    @compressible("Reduce_scatter_block")
    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        if not self.uniform or is_in_place(sendbuf):
            return self._fallback("Reduce_scatter_block", sendbuf, recvbuf, _mpi_op(op))
        rw = parse_whole(recvbuf)
        if rw.dtype is None:
            return self._fallback("Reduce_scatter_block", sendbuf, recvbuf, _mpi_op(op))
        r = _typed(rw.buf, rw.dtype)
        s = _typed(parse_whole(sendbuf).buf, rw.dtype)
        L, N, n = self.local_size, self.nnodes, r.size
        # block (b, i) -> part i, slot b: local rank i combines the blocks of every node's
        # i-th rank over this node, then the nodes combine over `cross`.
        by_local = np.ascontiguousarray(s[: N * L * n].reshape(N, L, n).transpose(1, 0, 2))
        part = np.empty(N * n, rw.dtype)
        self.local.Reduce_scatter_block(by_local.reshape(-1), part, op)
        self.cross.Reduce_scatter_block(part, r, op=_mpi_op(op))
        return None

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> None:
        if not self.uniform or is_in_place(sendbuf):
            return self._fallback("Reduce", sendbuf, recvbuf, _mpi_op(op), root)
        sw = parse_whole(sendbuf)
        if sw.dtype is None:
            return self._fallback("Reduce", sendbuf, recvbuf, _mpi_op(op), root)
        s = _typed(sw.buf, sw.dtype)
        L, n = self.local_size, s.size
        root_node, root_local = divmod(root, L)
        counts, displs = _slices(n, L)
        mine = np.empty(counts[self.local_rank], sw.dtype)
        self.local.Reduce_scatter(s, mine, counts, op)
        from mpi4py import MPI

        if self.node == root_node:
            self.cross.Reduce(MPI.IN_PLACE, mine, op=_mpi_op(op), root=root_node)
            r = _typed(parse_whole(recvbuf).buf, sw.dtype) if self.rank == root else None
            self.local.Gatherv(mine, None if r is None else [r, counts, displs, None], root=root_local)
        else:
            self.cross.Reduce(mine, None, op=_mpi_op(op), root=root_node)
        return None

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if not self.uniform or is_in_place(sendbuf):
            return self._fallback("Gather", sendbuf, recvbuf, root)
        L = self.local_size
        root_node, root_local = divmod(root, L)
        s = _as_bytes(parse_whole(sendbuf).buf)
        n = s.size
        node_part = np.empty(L * n, np.uint8) if self.local_rank == root_local else None
        self.local.Gather(s, node_part, root=root_local)
        if self.local_rank == root_local:
            r = _as_bytes(parse_whole(recvbuf).buf) if self.rank == root else None
            self.cross.Gather(
                [node_part, L * n, _byte()], None if r is None else [r, L * n, _byte()], root=root_node
            )
        return None

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if not self.uniform or is_in_place(recvbuf):
            return self._fallback("Scatter", sendbuf, recvbuf, root)
        L = self.local_size
        root_node, root_local = divmod(root, L)
        r = _as_bytes(parse_whole(recvbuf).buf)
        n = r.size
        node_part = np.empty(L * n, np.uint8) if self.local_rank == root_local else None
        if self.local_rank == root_local:
            s = _as_bytes(parse_whole(sendbuf).buf) if self.rank == root else None
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


def _typed(buf: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """A flat, writable view of `buf`'s memory as `dtype`."""
    if isinstance(buf, np.ndarray):
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
