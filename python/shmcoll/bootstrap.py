"""How a new communicator gets its segment and its tuning tables: the creation exchange.

Every rank makes a creation record (`_core.SegmentOffer`: its pid and node, the segment
sizes its settings ask for, the segments of freed communicators it offers, and a token
naming the tuning tables it remembers, see `bound_tables`), and the ranks exchange the
records once: by MPI's Allgather for a communicator over an MPI one, through the parent
for Dup and Split of a standalone one. Every rank settles the same records alike
(rust/shmcoll-coll/src/pool.rs): a pooled segment every rank offers in the same state
serves again at once, without a round of its own; otherwise the group's first rank
creates a segment and sends its name, and every rank maps it and joins it (the
handshake). Tables every rank remembers alike are set again without resolving them.

Errors are agreed on: a rank whose settings are not valid makes every rank raise at the
exchange, and a rank that cannot create or map a new segment makes every rank raise
before anyone waits in the handshake. Over MPI the exchange also carries each rank's
``SHMCOLL_NODE_SPLIT`` (`nodes.agree_node_split`), which decides whether the flat
communicator or the hierarchy's MPI splits follow: a value that is not valid on one rank,
or values that differ, make every rank raise there.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import _core, bound_tables, nodes
from .errors import ShmcollError, UnsupportedError

#: Bytes reserved for a segment name (or an error) sent through a parent communicator.
_NAME_BYTES = 256


def _allgather(parent: Any, mine: np.ndarray) -> np.ndarray:
    """Every rank's `mine` (one row per rank of `parent`), through `parent`. The algorithm
    is pinned, so that one forced in the environment (which may not serve private
    buffers) cannot break creation: staging serves every call."""
    everyone = np.empty((parent.size, mine.size), mine.dtype)
    parent.Allgather(mine, everyone, algorithm="staging")
    return everyone


class Settled(NamedTuple):
    """What a rank joins, and what it binds."""

    segment: Any  # a PooledSegment, a SegmentHandle, or None (no group: a negative color)
    rank: int
    size: int
    one_node: bool  # every rank's node digest is the same
    tables: bound_tables.Agreed  # the tuning tables every rank remembers alike
    node_split: int | None = None  # SHMCOLL_NODE_SPLIT as every rank read it (`survey`)


class _Offer:
    """This rank's offer and the tuning binding its token names."""

    def __init__(self, nranks: int) -> None:
        self.offer = _core.SegmentOffer(nranks)
        self.known, token = bound_tables.token_for(nranks, self.offer.areas)
        self.record = self.offer.record(token)

    def settle(self, records: bytes, rank: int, size: int) -> Settled:
        """Settle from every rank's record (rank order); raises alike on every rank."""
        one_node, pooled, agree = self.offer.settle(records, rank)
        return Settled(pooled, rank, size, bool(one_node), self.known if agree else None)


def survey(mpi_comm: Any) -> Settled:
    """The creation exchange over `mpi_comm` (collective): a Settled whose segment is the
    pooled one every rank takes again, or None (`mpi_segment` then creates one), and whose
    `node_split` is the SHMCOLL_NODE_SPLIT every rank read. That variable rides in the
    same Allgather (8 bytes after each record), since it decides which collectives follow
    (`Comm` serves spanning communicators with the hierarchy's MPI splits): a rank whose
    value is not valid, or ranks whose values differ, make every rank raise here."""
    size, rank = mpi_comm.Get_size(), mpi_comm.Get_rank()
    split = nodes.read_node_split()
    offer = _Offer(size)
    record = offer.record
    mine = np.frombuffer(record + split.word, np.uint8)
    everyone = np.empty((size, mine.size), np.uint8)
    mpi_comm.Allgather(mine, everyone)
    n = len(record)
    k = nodes.agree_node_split(mpi_comm, split, everyone[:, n:].tobytes())
    s = offer.settle(everyone[:, :n].tobytes(), rank, size)
    return s if k is None else s._replace(node_split=k)


def lone() -> Settled:
    """The segment of a communicator of this process alone (no exchange)."""
    offer = _Offer(1)
    s = offer.settle(offer.record, 0, 1)
    return s if s.segment is not None else s._replace(segment=_core.SegmentHandle(1))


def mpi_segment(mpi_comm: Any, surveyed: Settled | None) -> Settled:
    """The segment for the ranks of `mpi_comm`: the pooled one the survey settled on, else
    a new one (rank 0 creates it, the others open it); collective."""
    from mpi4py import MPI

    s = surveyed if surveyed is not None else survey(mpi_comm)
    if s.segment is not None:
        return s
    if not s.one_node:
        # Another build or another view of /dev/shm: MPI tells whether the node is one.
        node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=mpi_comm.Get_rank())
        try:
            spans_nodes = node.Get_size() != mpi_comm.Get_size()
        finally:
            node.Free()
        if mpi_comm.allreduce(spans_nodes, op=MPI.LOR):
            raise UnsupportedError(
                "this communicator spans several nodes; shmcoll.Comm serves ranks of one node "
                "(split with MPI.COMM_TYPE_SHARED, or wait for the hierarchical path)"
            )
    handle = None
    name_or_error: Any = None
    if s.rank == 0:
        try:
            handle = _core.SegmentHandle(s.size)
            name_or_error = handle.name
        except ShmcollError as e:
            name_or_error = e
    name_or_error = mpi_comm.bcast(name_or_error, root=0)
    if isinstance(name_or_error, BaseException):
        raise name_or_error
    # Map everywhere first and agree, so that a rank that cannot map the segment makes
    # every rank fail at once instead of leaving the others waiting in the handshake.
    err: BaseException | None = None
    seg = handle
    try:
        if seg is None:
            seg = _core.SegmentHandle.open(name_or_error)
    except ShmcollError as e:
        err = e
    failed = [e for e in mpi_comm.allgather(None if err is None else f"rank {s.rank}: {err}") if e]
    if failed:
        if err is not None:
            raise err
        raise ShmcollError("could not create the node communicator: " + "; ".join(failed))
    return s._replace(segment=seg)


def split_segment(parent: Any, color: int | None, key: int) -> Settled:
    """This rank's group: the ranks of the shmcoll communicator `parent` with the same
    `color` (every rank for None: a duplicate), ordered by (key, parent rank); a negative
    color is no group (segment None). The group takes again a pooled segment its ranks
    all offer, else its first rank creates one and sends its name through `parent`
    (every rank sends what it has, the members read their first rank's).
    Collective over `parent`: every rank takes part in every exchange whatever its group
    settled, and an error raises on every rank of the group (a failure to map a new
    segment, on every rank of `parent`)."""
    p, rank = parent.size, parent.rank
    if color is None:
        members = list(range(p))
    else:
        pairs = _allgather(parent, np.array([color, key], np.int64))
        group = sorted((int(pairs[j, 1]), j) for j in range(p) if pairs[j, 0] == color)
        members = [j for _, j in group]
    grouped = color is None or color >= 0
    offer = _Offer(len(members)) if grouped else None
    record = offer.record if offer is not None else bytes(_core.pool_record_bytes())
    records = _allgather(parent, np.frombuffer(record, np.uint8))
    err: BaseException | None = None
    settled = Settled(None, members.index(rank), len(members), True, None)
    if offer is not None:
        try:
            settled = offer.settle(records[members].tobytes(), members.index(rank), len(members))
        except ShmcollError as e:
            err = e
    if color is None and (err is not None or settled.segment is not None):
        # Every rank settled the same records alike: no creation follows.
        if err is not None:
            raise err
        return settled
    leader = members[0]
    send = np.zeros(_NAME_BYTES, np.uint8)
    handle = None
    if rank == leader and grouped:
        msg = b"R"  # the group takes a pooled segment again
        if err is not None:
            msg = b"E" + str(err).encode()[: _NAME_BYTES - 2]
        elif settled.segment is None:
            try:
                handle = _core.SegmentHandle(len(members))
                msg = b"N" + handle.name.encode()
            except ShmcollError as e:
                msg = b"E" + str(e).encode()[: _NAME_BYTES - 2]
        send[: len(msg)] = np.frombuffer(msg, np.uint8)
    msg = bytes(_allgather(parent, send)[leader]).rstrip(b"\0")
    if msg[:1] == b"E" and err is None:
        err = ShmcollError(f"rank {leader} could not create a segment: {msg[1:].decode(errors='replace')}")
    seg = settled.segment if settled.segment is not None else handle
    try:
        if seg is None and err is None and msg[:1] == b"N":
            seg = _core.SegmentHandle.open(msg[1:].decode())
    except ShmcollError as e:
        err = e
    flags = _allgather(parent, np.array([0 if err is None else 1], np.uint8)).ravel()
    if flags.any():
        if err is not None:
            raise err
        bad = [int(r) for r in np.flatnonzero(flags)]
        raise ShmcollError(f"ranks {bad} could not map their new segment")
    return settled._replace(segment=seg if grouped else None)
