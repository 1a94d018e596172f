"""Persistent collectives: ``Alltoall_init``, ``Alltoallv_init``, ``Allreduce_init``,
``Allgather_init`` and ``Bcast_init``, as MPI-4 and mpi4py define them.

Each returns a request (``shmcoll._core.Prequest``) with ``Start()``, ``Wait()``,
``Test()`` and ``Free()``; ``Prequest.Startall`` / ``Waitall`` take lists. Buffer
specifications, datatypes, operators and forced choices are resolved and the buffers
borrowed once, at creation; a started call goes straight to the engine. Creation is
collective: every rank learns whether any rank's arguments were rejected.

What shmcoll does not serve (`ServedByMPI`: operators it does not implement, derived
datatypes with gaps, device memory) gets MPI's persistent request instead (``MPI.Prequest``,
the same ``Start``/``Wait``/``Test``/``Free``), once every rank agreed to, announced and
counted as every fallback (`CommBase._on_mpi`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core
from ._core import Prequest
from .buffers import is_in_place, parse_simple, parse_vector, parse_whole
from .errors import ArgumentError, ServedByMPI, ShmcollError, as_shmcoll_error
from .ops import SUM
from .resolve import reduction


class Persistent(_core.CommBase):
    """The ``*_init`` methods of `shmcoll.Comm`."""

    _mpi: Any

    def _agree(self, name: str, make: Any, args: tuple[Any, ...]) -> Any:
        """Build a request with `make()`; if any rank fails, every rank raises. Where
        `make` finds that MPI must serve the call, MPI's request for `name(*args)`."""
        req = None
        err: BaseException | None = None
        try:
            req = make()
        except ServedByMPI as why:
            return self._on_mpi(name, why, args)
        except Exception as e:
            err = e
        flag = np.array([0 if err is None else 1], np.int32)
        everyone = np.empty(1, np.int32)
        self.Allreduce(flag, everyone, "max", algorithm="inline")
        if err is not None:
            # As a rejected call raises (errors.as_shmcoll_error): a shmcoll error of the
            # same built-in family.
            mine = as_shmcoll_error(err)
            if mine is err:
                raise err
            raise mine from err
        if everyone[0]:
            if req is not None:
                req.Free()
            raise ShmcollError(f"{name}: another rank's arguments were rejected")
        assert req is not None
        return req

    def Alltoall_init(
        self,
        sendbuf: Any,
        recvbuf: Any,
        *,
        algorithm: str | None = None,
        order: str | None = None,
        store: str | None = None,
    ) -> Any:
        """A persistent Alltoall."""

        def make() -> Prequest:
            recv = parse_simple(recvbuf, self.size)
            r, rb = recv.buf, recv.bytes_per_rank
            if is_in_place(sendbuf):
                return Prequest._alltoall_init(self, None, r, (rb, rb), None, algorithm, order, store)
            send = parse_simple(sendbuf, self.size)
            s, sb = send.buf, send.bytes_per_rank
            return Prequest._alltoall_init(self, s, r, (sb, rb), None, algorithm, order, store)

        return self._agree("Alltoall_init", make, (sendbuf, recvbuf))

    def Alltoallv_init(
        self,
        sendbuf: Any,
        recvbuf: Any,
        *,
        algorithm: str | None = None,
        order: str | None = None,
        store: str | None = None,
    ) -> Any:
        """A persistent Alltoallv (vector buffer specifications as in Alltoallv)."""

        def make() -> Prequest:
            r = parse_vector(recvbuf, self.size)
            if is_in_place(sendbuf):
                arrays = [r.counts, r.displs, r.counts, r.displs]
                return Prequest._alltoall_init(self, None, r.buf, None, arrays, algorithm, order, store)
            s = parse_vector(sendbuf, self.size)
            arrays = [s.counts, s.displs, r.counts, r.displs]
            return Prequest._alltoall_init(self, s.buf, r.buf, None, arrays, algorithm, order, store)

        return self._agree("Alltoallv_init", make, (sendbuf, recvbuf))

    def Allreduce_init(
        self, sendbuf: Any, recvbuf: Any, op: Any = SUM, *, algorithm: str | None = None
    ) -> Any:
        """A persistent Allreduce."""

        def make() -> Prequest:
            s, r, dt, o = reduction("Allreduce_init", sendbuf, recvbuf, op)
            assert r is not None
            return Prequest._coll_init(self, "Allreduce", s, r.buf, 0, None, None, None, dt, o, algorithm)

        return self._agree("Allreduce_init", make, (sendbuf, recvbuf, op or SUM))

    def Allgather_init(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> Any:
        """A persistent Allgather."""

        def make() -> Prequest:
            r = parse_whole(recvbuf, blocks=self.size)
            if r.nbytes % self.size:
                raise ArgumentError(
                    f"the receive buffer ({r.nbytes} bytes) does not split into {self.size} blocks"
                )
            s = None if is_in_place(sendbuf) else parse_whole(sendbuf).buf
            return Prequest._coll_init(
                self, "Allgather", s, r.buf, 0, r.nbytes // self.size, None, None, None, None, algorithm
            )

        return self._agree("Allgather_init", make, (sendbuf, recvbuf))

    def Bcast_init(self, buf: Any, root: int = 0, *, algorithm: str | None = None) -> Any:
        """A persistent Bcast."""

        def make() -> Prequest:
            b = parse_whole(buf)
            return Prequest._coll_init(
                self, "Bcast", None, b.buf, root, None, None, None, None, None, algorithm
            )

        return self._agree("Bcast_init", make, (buf, root))
