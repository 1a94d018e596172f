"""Which node each rank of an MPI communicator lives on, and whether a communicator spans
nodes: MPI's shared-memory split (``MPI.COMM_TYPE_SHARED``), or fake nodes of k consecutive
ranks with ``SHMCOLL_NODE_SPLIT=k`` (to run the hierarchy on one machine). ``Comm`` asks it
before serving a communicator on shared memory; ``HierComm`` to build its node-local and
cross-node communicators."""

from __future__ import annotations

from typing import Any

from .envvars import env_whole

ENV_NODE_SPLIT = "SHMCOLL_NODE_SPLIT"


#: The most ranks per fake node SHMCOLL_NODE_SPLIT may ask for.
MAX_NODE_SPLIT = 1 << 20


def node_split() -> int | None:
    """``SHMCOLL_NODE_SPLIT`` as a number of ranks per node (1 to MAX_NODE_SPLIT), or None."""
    return env_whole(ENV_NODE_SPLIT, 1, MAX_NODE_SPLIT)


def node_color(mpi_comm: Any) -> int:
    """The node of this rank, as the lowest rank of its node (collective)."""
    from mpi4py import MPI

    k = node_split()
    if k is not None:
        return int(mpi_comm.Get_rank() // k)
    node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=mpi_comm.Get_rank())
    try:
        first = node.allreduce(mpi_comm.Get_rank(), op=MPI.MIN)
    finally:
        node.Free()
    return int(first)


def spans_nodes(mpi_comm: Any) -> bool:
    """Whether `mpi_comm` must be served hierarchically (collective)."""
    from mpi4py import MPI

    k = node_split()
    if k is not None:
        # Fake nodes are k consecutive ranks of the communicator being wrapped.
        return bool(mpi_comm.Get_size() > k)
    colors = mpi_comm.allgather(node_color(mpi_comm))
    return bool(mpi_comm.allreduce(len(set(colors)) > 1, op=MPI.LOR))
