"""mpi4py's communicator methods that shmcoll does not implement, taken from the wrapped
mpi4py communicator, so that ``comm`` -> ``shmcoll.Comm(comm)`` stays the whole migration.

* Collectives (``Scan``, ``Exscan``, ``Alltoallw``, the nonblocking ``I...`` forms, the
  other persistent ``..._init`` forms, and the lowercase ones that move Python objects:
  ``bcast``, ``allreduce``, ``gather``, ...) run on MPI. That is a fallback, so it is
  announced once per method (a RuntimeWarning) and counted in
  ``shmcoll.ops.fallback_calls``; ``shmcoll.IN_PLACE`` becomes ``MPI.IN_PLACE``.
* Everything else (point-to-point, attributes, names, groups, topology queries, new MPI
  communicators) is the MPI communicator's own method, returned as it is: shmcoll does
  not claim it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .collectives import _mpi_spec
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
        return method(*[_mpi_spec(a) for a in args], **{k: _mpi_spec(v) for k, v in kw.items()})

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"mpi4py's {name}, run on the wrapped MPI communicator (a counted fallback)."
    return run
