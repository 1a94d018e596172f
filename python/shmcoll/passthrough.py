"""mpi4py's communicator methods that shmcoll does not implement, taken from the wrapped
mpi4py communicator, so that ``comm`` -> ``shmcoll.Comm(comm)`` stays the whole migration.

* Collectives (``Scan``, ``Exscan``, ``Alltoallw``, the nonblocking ``I...`` forms, the
  other persistent ``..._init`` forms, and on a HierComm the lowercase ones that move
  Python objects, which shmcoll.Comm has of its own: objects.py) run on MPI. That is a
  fallback, so it is announced once per method (a RuntimeWarning) and counted in
  ``shmcoll.ops.fallback_calls``; ``shmcoll.IN_PLACE`` becomes ``MPI.IN_PLACE``.
* Everything else (point-to-point, attributes, names, groups, topology queries, new MPI
  communicators) is the MPI communicator's own method, returned as it is: shmcoll does
  not claim it.

The methods are installed on the class as descriptors (`forward_missing`) rather than
found by ``__getattr__``: a class with ``__getattr__`` loses CPython's specialised method
lookup, which cost every call of shmcoll's own methods 0.1-0.2 µs (a Barrier's own cost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .collectives import mpi_arg
from .ops import note_fallback

_UPPER = (
    "Allgather", "Allgatherv", "Allreduce", "Alltoall", "Alltoallv", "Alltoallw", "Barrier",
    "Bcast", "Exscan", "Gather", "Gatherv", "Reduce", "Reduce_scatter", "Reduce_scatter_block",
    "Scan", "Scatter", "Scatterv",
)  # fmt: skip
_OBJECTS = (
    "allgather", "allreduce", "alltoall", "barrier", "bcast", "exscan", "gather", "reduce",
    "scan", "scatter",
)  # fmt: skip
#: mpi4py's collective methods of an intra-communicator, in every form.
COLLECTIVES = frozenset(
    [*_UPPER, *(f"I{n.lower()}" for n in _UPPER), *(f"{n}_init" for n in _UPPER), *_OBJECTS]
)


#: The public attributes of mpi4py 4's intra-communicator and topology communicators
#: (``dir(MPI.Intracomm)``, ``MPI.Cartcomm``, ``MPI.Graphcomm``, ``MPI.Distgraphcomm``),
#: forwarded where shmcoll's class does not define them. Names of the wrapped communicator's class
#: that this list lacks (another mpi4py version) are added when it is wrapped.
MPI4PY_NAMES = (
    "Abort", "Accept", "Ack_failed", "Agree", "Allgather", "Allgather_init", "Allgatherv",
    "Allgatherv_init", "Allreduce", "Allreduce_init", "Alltoall", "Alltoall_init", "Alltoallv",
    "Alltoallv_init", "Alltoallw", "Alltoallw_init", "Attach_buffer", "Barrier", "Barrier_init",
    "Bcast", "Bcast_init", "Bsend", "Bsend_init", "Call_errhandler", "Cart_map", "Clone",
    "Compare", "Connect", "Create", "Create_cart", "Create_dist_graph",
    "Create_dist_graph_adjacent", "Create_errhandler", "Create_from_group", "Create_graph",
    "Create_group", "Create_intercomm", "Create_keyval", "Delete_attr", "Detach_buffer",
    "Disconnect", "Dup", "Dup_with_info", "Exscan", "Exscan_init", "Flush_buffer", "Free",
    "Free_keyval", "Gather", "Gather_init", "Gatherv", "Gatherv_init", "Get_attr",
    "Get_cart_rank", "Get_coords", "Get_dim", "Get_dims", "Get_dist_neighbors",
    "Get_dist_neighbors_count", "Get_errhandler", "Get_failed", "Get_group", "Get_info",
    "Get_name", "Get_neighbors", "Get_neighbors_count", "Get_parent", "Get_rank", "Get_size",
    "Get_topo", "Get_topology", "Graph_map", "Iagree", "Iallgather", "Iallgatherv", "Iallreduce",
    "Ialltoall", "Ialltoallv", "Ialltoallw", "Ibarrier", "Ibcast", "Ibsend", "Idup",
    "Idup_with_info", "Iexscan", "Iflush_buffer", "Igather", "Igatherv", "Improbe",
    "Ineighbor_allgather", "Ineighbor_allgatherv", "Ineighbor_alltoall", "Ineighbor_alltoallv",
    "Ineighbor_alltoallw", "Iprobe", "Irecv", "Ireduce", "Ireduce_scatter",
    "Ireduce_scatter_block", "Irsend", "Is_inter", "Is_intra", "Is_revoked", "Iscan", "Iscatter",
    "Iscatterv", "Isend", "Isendrecv", "Isendrecv_replace", "Ishrink", "Issend", "Join", "Mprobe",
    "Neighbor_allgather", "Neighbor_allgather_init", "Neighbor_allgatherv",
    "Neighbor_allgatherv_init", "Neighbor_alltoall", "Neighbor_alltoall_init",
    "Neighbor_alltoallv", "Neighbor_alltoallv_init", "Neighbor_alltoallw",
    "Neighbor_alltoallw_init", "Precv_init", "Probe", "Psend_init", "Recv", "Recv_init", "Reduce",
    "Reduce_init", "Reduce_scatter", "Reduce_scatter_block", "Reduce_scatter_block_init",
    "Reduce_scatter_init", "Revoke", "Rsend", "Rsend_init", "Scan", "Scan_init", "Scatter",
    "Scatter_init", "Scatterv", "Scatterv_init", "Send", "Send_init", "Sendrecv",
    "Sendrecv_replace", "Set_attr", "Set_errhandler", "Set_info", "Set_name", "Shift", "Shrink",
    "Spawn", "Spawn_multiple", "Split", "Split_type", "Ssend", "Ssend_init", "Sub", "allgather",
    "allreduce", "alltoall", "barrier", "bcast", "bsend", "coords", "degrees", "dim", "dims",
    "edges", "exscan", "f2py", "free", "fromhandle", "fromint", "gather", "group", "handle",
    "ibsend", "improbe", "indegree", "index", "inedges", "info", "inoutedges", "iprobe", "irecv",
    "is_inter", "is_intra", "is_topo", "isend", "issend", "mprobe", "name", "ndim", "nedges",
    "neighbor_allgather", "neighbor_alltoall", "neighbors", "nneighbors", "nnodes", "outdegree",
    "outedges", "periods", "probe", "py2f", "rank", "recv", "reduce", "scan", "scatter", "send",
    "sendrecv", "size", "ssend", "toint", "topo", "topology"
)  # fmt: skip


class _Forward:
    """A non-data descriptor: attribute `name` of an instance is its class's
    ``_passthrough(name)`` (mpi4py's method or value, from the wrapped communicator)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        return obj._passthrough(self.name)

    def __repr__(self) -> str:
        return f"<mpi4py's {self.name}, forwarded>"


def forward_missing(cls: type, names: Any) -> None:
    """Forward each public name in `names` that `cls` does not define (see _Forward)."""
    for name in names:
        if not name.startswith("_") and not hasattr(cls, name):
            setattr(cls, name, _Forward(name))


_forwarded_types: set[tuple[type, type]] = set()


def forward_type(cls: type, mpi_type: type) -> None:
    """Forward the names of `mpi_type` (the wrapped communicator's class) that `cls` lacks;
    once per pair, so wrapping stays cheap."""
    if (cls, mpi_type) not in _forwarded_types:
        forward_missing(cls, dir(mpi_type))
        _forwarded_types.add((cls, mpi_type))


def lookup(owner: str, mpi_comm: Any, name: str) -> Any:
    """The attribute `name` for a shmcoll communicator (`owner` names its class in errors)
    wrapping `mpi_comm` (None: no MPI communicator)."""
    if name.startswith("_"):
        raise AttributeError(name)
    if mpi_comm is None:
        raise AttributeError(
            f"{owner} has no attribute {name!r}; it wraps no MPI communicator (it was made "
            "without mpi4py), so mpi4py's other methods are not available"
        )
    attr = getattr(mpi_comm, name)  # mpi4py's own AttributeError when it has none either
    if name not in COLLECTIVES or not callable(attr):
        return attr
    return _on_mpi(name, attr)


def _on_mpi(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kw: Any) -> Any:
        note_fallback(f"{name} (mpi4py's)")
        return method(*[mpi_arg(a) for a in args], **{k: mpi_arg(v) for k, v in kw.items()})

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"mpi4py's {name}, run on the wrapped MPI communicator (a counted fallback)."
    return run
