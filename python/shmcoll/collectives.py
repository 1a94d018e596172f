"""What the native collective methods hand back to Python: compressed calls and calls
that MPI serves.

The collectives with mpi4py's names (Bcast, Allgather(v), Gather(v), Scatter(v),
Reduce_scatter(_block), Allreduce, Reduce, Alltoall(v)) are native methods of
`_core.CommBase` (one table, ``rust/shmcoll-py/src/engine.rs``): each reads its buffer
specifications (natively, or through `shmcoll.resolve` for the forms only Python reads)
and runs the call in the engine, which checks it against the other ranks' and picks an
algorithm (``algorithm=`` or ``SHMCOLL_<OP>_ALGORITHM`` force one).

``IN_PLACE`` follows MPI: Allgather(v) and Allreduce take it as the send buffer on every
rank, Gather(v) and Reduce at the root, Scatter(v) as the root's receive buffer,
Reduce_scatter(_block) as the send buffer (the input then fills the receive buffer and
the result lands at its start); None there is IN_PLACE too, as in mpi4py.

What shmcoll does not serve itself (operators and datatypes its kernels do not reduce,
derived datatypes with gaps, buffers in device memory, MPI.BOTTOM: `ServedByMPI`) runs on
the wrapped MPI communicator, once every rank agreed to, announced once per kind and
counted in ``shmcoll.ops.fallback_calls``.
"""

from __future__ import annotations

import sys
from typing import Any

from .buffers import IN_PLACE
from .ops import Op, note_fallback


def mpi_arg(a: Any) -> Any:
    """An argument as mpi4py understands it, for every call that runs on MPI (fallbacks,
    mpi4py's methods shmcoll lacks): shmcoll's IN_PLACE and operators become mpi4py's."""
    if a is IN_PLACE:
        return sys.modules["mpi4py.MPI"].IN_PLACE
    if isinstance(a, Op):
        return getattr(sys.modules["mpi4py.MPI"], a.upper())
    return a


class Collectives:
    """Compressed calls and the MPI fallback of `shmcoll.Comm`'s collectives."""

    # Provided by shmcoll.Comm.
    _mpi: Any

    def _compressed(self, name: str, args: tuple[Any, ...], compress: Any, traffic: str | None) -> None:
        """A call with ``compress=`` or ``traffic=`` (the native methods hand it here):
        its collectives around the codec, each a native call (`shmcoll.compress`)."""
        from .compress import run_compressed

        run_compressed(self, name, args, compress, traffic)

    def _served_by_mpi(self, name: str, why: str, args: tuple[Any, ...]) -> Any:
        """Run call `name` on the wrapped MPI communicator with `args` (shmcoll's IN_PLACE
        and operators become mpi4py's) once every rank agreed to (the native side agrees
        before it calls this: `CommBase._on_mpi`). Announced once per kind of `why`,
        counted per call."""
        note_fallback(why)
        return getattr(self._mpi, name)(*[mpi_arg(a) for a in args])
