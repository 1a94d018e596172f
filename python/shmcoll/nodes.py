"""Which node each rank of an MPI communicator lives on, and whether a communicator spans
nodes: MPI's shared-memory split (``MPI.COMM_TYPE_SHARED``), or fake nodes of k consecutive
ranks with ``SHMCOLL_NODE_SPLIT=k`` (to run the hierarchy on one machine). ``Comm`` asks it
before serving a communicator on shared memory; ``HierComm`` to build its node-local and
cross-node communicators.

``SHMCOLL_NODE_SPLIT`` chooses between different collective paths (the hierarchy's MPI
splits or the flat communicator's creation), so the ranks agree on it before any of them
takes one: each reads it without raising (`read_node_split`) and sends it in the creation
exchange (`bootstrap.survey`), and `agree_node_split` makes every rank raise alike when it
is not valid on one rank or differs between ranks.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from .envvars import env_whole
from .errors import ArgumentError, MismatchError

ENV_NODE_SPLIT = "SHMCOLL_NODE_SPLIT"


#: The most ranks per fake node SHMCOLL_NODE_SPLIT may ask for.
MAX_NODE_SPLIT = 1 << 20

#: The word a rank sends in the creation exchange for SHMCOLL_NODE_SPLIT: the value (1 to
#: MAX_NODE_SPLIT), UNSET_WORD when unset, BAD_WORD when not valid.
UNSET_WORD = 0
BAD_WORD = -1


def node_split() -> int | None:
    """``SHMCOLL_NODE_SPLIT`` as a number of ranks per node (1 to MAX_NODE_SPLIT), or None."""
    return env_whole(ENV_NODE_SPLIT, 1, MAX_NODE_SPLIT)


class NodeSplit(NamedTuple):
    """``SHMCOLL_NODE_SPLIT`` as this rank read it: its value (None: unset), or the error,
    and the word it sends in the creation exchange (8 bytes, little-endian: the value,
    UNSET_WORD or BAD_WORD)."""

    value: int | None
    error: ArgumentError | None
    word: bytes


def _word(w: int) -> bytes:
    return w.to_bytes(8, "little", signed=True)


_UNSET = NodeSplit(None, None, _word(UNSET_WORD))


def read_node_split() -> NodeSplit:
    """``SHMCOLL_NODE_SPLIT`` read without raising: a rank that cannot use it still takes
    part in the creation exchange, where every rank learns of it."""
    if not os.environ.get(ENV_NODE_SPLIT):
        return _UNSET  # the usual case, without the parser's cost (creation's is in µs)
    try:
        k = node_split()
    except ArgumentError as e:
        return NodeSplit(None, e, _word(BAD_WORD))
    return _UNSET if k is None else NodeSplit(k, None, _word(k))


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def agree_node_split(mpi_comm: Any, mine: NodeSplit, words: bytes) -> int | None:
    """The ranks-per-node every rank of `mpi_comm` read (None: unset), from every rank's
    word (`words`: each rank's `NodeSplit.word` in rank order, as the creation exchange
    brought them). Raises alike on every rank: a rank whose value is not valid its own
    ArgumentError and the others an ArgumentError naming it (its message comes in one more
    exchange, on this failure path only); where the ranks read different values, a
    MismatchError listing them."""
    if mine.error is None and words == mine.word * (len(words) // 8):
        return mine.value  # every rank read the same valid value (the usual case)
    got = [int.from_bytes(words[i : i + 8], "little", signed=True) for i in range(0, len(words), 8)]
    bad = [j for j, w in enumerate(got) if w == BAD_WORD]
    if bad:
        messages = mpi_comm.allgather(None if mine.error is None else str(mine.error))
        if mine.error is not None:
            raise mine.error
        raise ArgumentError(f"rank {bad[0]}: {messages[bad[0]]}")
    if len(set(got)) > 1:
        by_value: dict[int, list[int]] = {}
        for j, w in enumerate(got):
            by_value.setdefault(w, []).append(j)
        seen = "; ".join(
            f"{'unset' if w == UNSET_WORD else w} on rank{'s' if len(js) > 1 else ''} {_ranks(js)}"
            for w, js in sorted(by_value.items())
        )
        raise MismatchError(
            f"environment: {ENV_NODE_SPLIT} differs between the ranks of the communicator ({seen}); "
            "set it alike on every rank"
        )
    return None if got[0] == UNSET_WORD else got[0]


def agreed_node_split(mpi_comm: Any) -> int | None:
    """``SHMCOLL_NODE_SPLIT`` as every rank of `mpi_comm` read it, in an exchange of its
    own (collective; raises alike on every rank, see `agree_node_split`). For a HierComm
    made directly: `Comm` gets it from the creation exchange."""
    mine = read_node_split()
    return agree_node_split(mpi_comm, mine, b"".join(mpi_comm.allgather(mine.word)))


def node_color(mpi_comm: Any, k: int | None) -> int:
    """The node of this rank, as the lowest rank of its node (collective), with `k` ranks
    per fake node as the ranks agreed on (None: MPI's nodes)."""
    from mpi4py import MPI

    if k is not None:
        return int(mpi_comm.Get_rank() // k)
    node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=mpi_comm.Get_rank())
    try:
        first = node.allreduce(mpi_comm.Get_rank(), op=MPI.MIN)
    finally:
        node.Free()
    return int(first)


def spans_nodes(mpi_comm: Any, k: int | None) -> bool:
    """Whether `mpi_comm` must be served hierarchically (collective), with `k` ranks per
    fake node as the ranks agreed on (None: MPI's nodes)."""
    from mpi4py import MPI

    if k is not None:
        # Fake nodes are k consecutive ranks of the communicator being wrapped.
        return bool(mpi_comm.Get_size() > k)
    colors = mpi_comm.allgather(node_color(mpi_comm, None))
    return bool(mpi_comm.allreduce(len(set(colors)) > 1, op=MPI.LOR))
