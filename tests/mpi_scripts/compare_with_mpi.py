"""Run under ``mpiexec -n N``: shmcoll's Alltoall and Alltoallv against MPI's own on
identical inputs, for every forced algorithm, several dtypes and sizes, in place and not,
zero/ragged/random counts, and mpi4py datatypes. Exits non-zero on any difference.

Usage: compare_with_mpi.py {world,reversed,halves}
  world     shmcoll.Comm(MPI.COMM_WORLD)
  reversed  a communicator whose ranks run backwards (Split(0, key=size-1-rank))
  halves    even and odd ranks in two communicators (Split(rank % 2))
"""

from __future__ import annotations

import sys
import traceback

import numpy as np
from mpi4py import MPI

import shmcoll
from shmcoll import _core

WORLD = MPI.COMM_WORLD
ALGORITHMS = [None, *(name for name, _ in _core.algorithms()[0])]
ORDERS = list(_core.algorithms()[1])
STORES = list(_core.algorithms()[2])
MPI_TYPES = {
    np.dtype(np.float64): MPI.DOUBLE,
    np.dtype(np.int32): MPI.INT,
    np.dtype(np.uint8): MPI.UNSIGNED_CHAR,
    np.dtype(np.complex128): MPI.C_DOUBLE_COMPLEX,
}


def sub_communicator(mode: str) -> MPI.Intracomm:
    r, n = WORLD.Get_rank(), WORLD.Get_size()
    if mode == "world":
        return WORLD
    if mode == "reversed":
        return WORLD.Split(0, key=n - 1 - r)
    if mode == "halves":
        return WORLD.Split(r % 2, key=r)
    raise SystemExit(f"unknown mode {mode!r}")


class Checker:
    def __init__(self, comm: shmcoll.Comm, mpi: MPI.Intracomm) -> None:
        self.comm = comm
        self.mpi = mpi
        self.p = comm.size
        self.me = comm.rank
        self.rng = np.random.default_rng(1000 + WORLD.Get_rank())
        self.inline_cap = int(comm.config()["inline_bytes"])
        self.failures: list[str] = []
        self.compared = 0

    def random(self, n: int, dtype: np.dtype) -> np.ndarray:
        if dtype.kind == "c":
            return self.rng.standard_normal(n) + 1j * self.rng.standard_normal(n)
        if dtype.kind == "f":
            return self.rng.standard_normal(n)
        info = np.iinfo(dtype)
        return self.rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)

    def buf(self, n: int, dtype: np.dtype, heap: bool) -> np.ndarray:
        return self.comm.empty(n, dtype) if heap else np.empty(n, dtype)

    def compare(self, label: str, got: np.ndarray, want: np.ndarray) -> None:
        self.compared += 1
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = np.flatnonzero(got != want)
            self.failures.append(f"{label}: {bad.size} elements differ from MPI (first at {bad[:1]})")

    # -- Alltoall -----------------------------------------------------------------
    def alltoall(
        self,
        algorithm: str | None,
        k: int,
        count: int,
        dtype: np.dtype,
        *,
        in_place: bool,
        use_mpi_type: bool,
    ) -> None:
        p = self.p
        n = p * count
        if algorithm in ("pull", "push", "cma", "cma-push") and in_place:
            return
        if algorithm == "inline" and n * dtype.itemsize > self.inline_cap:
            return
        heap_send = algorithm == "pull" or (algorithm is None and k % 2 == 0)
        heap_recv = algorithm == "push" or (algorithm is None and k % 3 == 0)
        order, store = ORDERS[k % len(ORDERS)], STORES[k % len(STORES)]
        data = self.random(n, dtype)
        mtype = MPI_TYPES[dtype]
        # MPI's result
        ref = np.zeros(n, dtype)
        if in_place:
            ref[...] = data
            self.mpi.Alltoall(MPI.IN_PLACE, [ref, mtype])
        else:
            self.mpi.Alltoall([data, mtype], [ref, mtype])
        # shmcoll's
        r = self.buf(n, dtype, heap_recv)
        r[...] = 0
        kw = {"algorithm": algorithm, "order": order, "store": store} if algorithm else {}
        if in_place:
            r[...] = data
            send = MPI.IN_PLACE if use_mpi_type else shmcoll.IN_PLACE
        else:
            send = self.buf(n, dtype, heap_send)
            send[...] = data
        if use_mpi_type:
            self.comm.Alltoall(send if in_place else [send, count, mtype], [r, count, mtype], **kw)
        else:
            self.comm.Alltoall(send, r, **kw)
        label = (
            f"Alltoall algo={algorithm} {order}/{store} count={count} {dtype} in_place={in_place} "
            f"heap={heap_send}/{heap_recv} mpi_type={use_mpi_type}"
        )
        c = self.comm.last_choice()
        if algorithm and (c is None or c.algorithm != algorithm):
            self.failures.append(f"{label}: ran {c}")
        self.compare(label, r, ref)

    # -- Alltoallv ----------------------------------------------------------------
    def alltoallv(self, algorithm: str | None, k: int, kind: str, in_place: bool) -> None:
        p, me = self.p, self.me
        shared = np.random.default_rng(77 + k)  # the same draws on every rank
        if kind == "zero":
            counts = np.zeros((p, p), int)
        elif kind == "ragged":
            counts = np.add.outer(np.arange(p), 2 * np.arange(p)) % 5
        else:
            counts = shared.integers(0, 300, (p, p))
        if in_place:
            counts = np.triu(counts) + np.triu(counts, 1).T
            if algorithm in ("pull", "push", "cma", "cma-push"):
                return
        if algorithm == "inline" and counts.sum(axis=1).max() * 8 > self.inline_cap:
            return
        scounts = [int(c) for c in counts[me]]
        rcounts = [int(c) for c in counts[:, me]]

        def layout(cnts: list[int]) -> tuple[list[int], int]:
            perm = shared.permutation(p) if kind == "random" else np.arange(p)[::-1]
            displs, at = [0] * p, 0
            for j in perm:
                at += int(shared.integers(0, 4))
                displs[j] = at
                at += cnts[j]
            return displs, at + 2

        # every rank draws every rank's layouts, in rank order, so the shared stream stays in step
        layouts = [
            (layout([int(c) for c in counts[i]]), layout([int(c) for c in counts[:, i]])) for i in range(p)
        ]
        (sdispls, slen), (rdispls, rlen) = layouts[me]
        dt = MPI.DOUBLE
        data = self.random(slen, np.dtype(np.float64))
        heap_send = algorithm == "pull" or (algorithm is None and k % 2 == 1)
        heap_recv = algorithm == "push"
        ref = np.full(rlen, -7.0)
        r = self.buf(rlen, np.dtype(np.float64), heap_recv)
        r[...] = -7.0
        kw = {"algorithm": algorithm, "store": STORES[k % 3]} if algorithm else {}
        if in_place:
            init = self.random(rlen, np.dtype(np.float64))
            ref[...] = init
            r[...] = init
            self.mpi.Alltoallv(MPI.IN_PLACE, [ref, (rcounts, rdispls), dt])
            self.comm.Alltoallv(MPI.IN_PLACE, [r, (rcounts, rdispls), dt], **kw)
        else:
            self.mpi.Alltoallv([data, (scounts, sdispls), dt], [ref, (rcounts, rdispls), dt])
            s = self.buf(slen, np.dtype(np.float64), heap_send)
            s[...] = data
            if k % 2:
                self.comm.Alltoallv([s, scounts, sdispls, dt], [r, rcounts, rdispls, dt], **kw)
            else:
                self.comm.Alltoallv([s, (scounts, sdispls), dt], [r, (rcounts, rdispls), dt], **kw)
        label = f"Alltoallv algo={algorithm} kind={kind} in_place={in_place} heap={heap_send}/{heap_recv}"
        self.compare(label, r, ref)


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "world"
    mpi = sub_communicator(mode)
    comm = shmcoll.Comm(mpi)
    ck = Checker(comm, mpi)
    try:
        if (comm.rank, comm.size) != (mpi.Get_rank(), mpi.Get_size()):
            ck.failures.append(
                f"rank/size {comm.rank}/{comm.size} != MPI's {mpi.Get_rank()}/{mpi.Get_size()}"
            )
        if comm.mpi_comm is not mpi:
            ck.failures.append("mpi_comm is not the wrapped communicator")
        dtypes = [np.dtype(t) for t in (np.float64, np.int32, np.uint8, np.complex128)]
        k = 0
        for algorithm in ALGORITHMS:
            for count in (0, 1, 7, 1001, 20_000):
                for in_place in (False, True):
                    k += 1
                    ck.alltoall(
                        algorithm,
                        k,
                        count,
                        dtypes[k % len(dtypes)],
                        in_place=in_place,
                        use_mpi_type=k % 3 == 0,
                    )
            for kind in ("zero", "ragged", "random"):
                for in_place in (False, True):
                    k += 1
                    ck.alltoallv(algorithm, k, kind, in_place)
        # one large exchange with the automatic choice, on heap buffers
        k += 1
        ck.alltoall(None, 0, 1 << 18, np.dtype(np.float64), in_place=False, use_mpi_type=False)
        # mpi4py datatype spellings
        p = comm.size
        a = ck.random(4 * p, np.dtype(np.float64))
        r1, r2 = np.zeros(4 * p), np.zeros(4 * p)
        comm.Alltoall([a, MPI.DOUBLE], [r1, MPI.DOUBLE])
        mpi.Alltoall([a, MPI.DOUBLE], [r2, MPI.DOUBLE])
        ck.compare("[buf, MPI.DOUBLE]", r1, r2)
        ai = ck.random(3 * p, np.dtype(np.int32))
        ri1, ri2 = np.zeros(3 * p, np.int32), np.zeros(3 * p, np.int32)
        comm.Alltoall([ai, 3, MPI.INT], [ri1, 3, MPI.INT])
        mpi.Alltoall([ai, 3, MPI.INT], [ri2, 3, MPI.INT])
        ck.compare("[buf, 3, MPI.INT]", ri1, ri2)
        comm.Barrier()
    except Exception:
        ck.failures.append(traceback.format_exc())
    all_failures = WORLD.allgather(ck.failures)
    compared = WORLD.allgather(ck.compared)
    comm.Free()
    if mpi is not WORLD:
        mpi.Free()
    if WORLD.Get_rank() == 0:
        bad = [(r, f) for r, fs in enumerate(all_failures) for f in fs]
        for r, f in bad[:40]:
            print(f"world rank {r}: {f}")
        print(f"mode={mode} size={WORLD.Get_size()} compared={compared} failures={len(bad)}")
        return 1 if bad else 0
    return 1 if any(all_failures) else 0


if __name__ == "__main__":
    sys.exit(main())
