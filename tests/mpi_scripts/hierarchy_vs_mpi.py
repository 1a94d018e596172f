"""Run under ``mpiexec -n N`` with ``SHMCOLL_NODE_SPLIT=k``: a shmcoll.Comm over fake nodes
of k ranks must give MPI's results for every collective (the hierarchical ones and those
that fall back to MPI), in place and not, for several dtypes, operators, sizes and roots,
on ordinary and node-heap buffers. Prints ``hierarchy nodes=N local=L compared=C
failures=F fallbacks=...``; exits 1 on any failure."""

from __future__ import annotations

import sys
import traceback
import warnings

import numpy as np
from mpi4py import MPI

import shmcoll
from shmcoll.hierarchy import HierComm

W = MPI.COMM_WORLD
P, ME = W.Get_size(), W.Get_rank()
failures: list[str] = []
compared = 0


def gen(rank: int, n: int, dt: np.dtype, salt: int) -> np.ndarray:
    v = (np.arange(n) * 7 + rank * 13 + salt * 5) % 23 - 7
    if dt.kind == "u":
        v = np.abs(v)
    out = v.astype(dt)
    if dt.kind == "c":
        out = (out + 1j * (np.arange(n) % 3)).astype(dt)
    return out


def same(label: str, got: np.ndarray | None, want: np.ndarray | None, exact: bool = True) -> None:
    global compared
    compared += 1
    if got is None or want is None:
        return
    ok = np.array_equal(got, want) if exact else np.allclose(got, want)
    if not ok:
        failures.append(f"rank {ME}: {label}: got {got[:6]} want {want[:6]}")


def run(c: object) -> None:
    comm = c  # HierComm, or a plain Comm for a single node
    heap_of = comm
    k = 0
    for dt in map(np.dtype, ("float64", "int32", "uint8", "complex128", "float32")):
        for n in (0, 1, 5, 1000):
            for heap in (False, True):
                k += 1

                def buf(m: int, dt: np.dtype = dt, heap: bool = heap) -> np.ndarray:
                    return heap_of.empty(m, dt) if heap else np.empty(m, dt)

                root = k % P
                in_place = k % 2 == 0
                tag = f"{dt} n={n} heap={heap} in_place={in_place} root={root}"
                # Alltoall
                s = buf(n * P)
                s[:] = gen(ME, n * P, dt, k)
                r, ref = buf(n * P), np.empty(n * P, dt)
                W.Alltoall(s, ref)
                if in_place:
                    r[:] = s
                    comm.Alltoall(shmcoll.IN_PLACE, r)
                else:
                    comm.Alltoall(s, r)
                same(f"Alltoall {tag}", r, ref)
                # Allgather
                g, gref = buf(n * P), np.empty(n * P, dt)
                mine = gen(ME, n, dt, k + 1)
                W.Allgather(mine, gref)
                if in_place:
                    g[ME * n : (ME + 1) * n] = mine
                    comm.Allgather(shmcoll.IN_PLACE, g)
                else:
                    comm.Allgather(mine, g)
                same(f"Allgather {tag}", g, gref)
                # Bcast
                b = buf(n)
                b[:] = gen(root, n, dt, k + 2) if root == ME else gen(99, n, dt, 0)
                comm.Bcast(b, root=root)
                same(f"Bcast {tag}", b, gen(root, n, dt, k + 2))
                # Allreduce, Reduce_scatter_block with every operator of this dtype
                ops = ["SUM", "PROD"] + (["MIN", "MAX"] if dt.kind != "c" else [])
                ops += ["BAND", "BOR", "BXOR", "LAND", "LOR"] if dt.kind in "iu" else []
                for opn in ops:
                    x = buf(n)
                    x[:] = gen(ME, n, dt, k + 3)
                    y, yref = buf(n), np.empty(n, dt)
                    W.Allreduce(x, yref, op=getattr(MPI, opn))
                    op = getattr(shmcoll, opn) if k % 3 else getattr(MPI, opn)
                    if in_place:
                        y[:] = x
                        comm.Allreduce(shmcoll.IN_PLACE, y, op)
                    else:
                        comm.Allreduce(x, y, op)
                    same(f"Allreduce {opn} {tag}", y, yref, exact=dt.kind in "iu")
                    xs = buf(n * P)
                    xs[:] = gen(ME, n * P, dt, k + 4)
                    q, qref = buf(n), np.empty(n, dt)
                    W.Reduce_scatter_block(xs, qref, op=getattr(MPI, opn))
                    comm.Reduce_scatter_block(xs, q, op)
                    same(f"Reduce_scatter_block {opn} {tag}", q, qref, exact=dt.kind in "iu")
                # Scatter
                src = None
                if root == ME:
                    src = np.concatenate([gen(j, n, dt, k + 5) for j in range(P)])
                got = buf(n)
                comm.Scatter(src, got, root=root)
                same(f"Scatter {tag}", got, gen(ME, n, dt, k + 5))
                # Gather, Reduce
                gg = np.empty(n * P, dt) if root == ME else None
                ggref = np.empty(n * P, dt) if root == ME else None
                W.Gather(mine, ggref, root=root)
                comm.Gather(mine, gg, root=root)
                same(f"Gather {tag}", gg, ggref)
                rr = np.empty(n, dt) if root == ME else None
                rrref = np.empty(n, dt) if root == ME else None
                W.Reduce(mine, rrref, op=MPI.SUM, root=root)
                comm.Reduce(mine, rr, op=MPI.SUM, root=root)
                same(f"Reduce {tag}", rr, rrref, exact=dt.kind in "iu")
    # a collective without a hierarchical algorithm: runs on MPI (announced, counted)
    counts = [(j % 3) + 1 for j in range(P)]
    mine = np.full(counts[ME], ME, np.int64)
    got, ref = np.empty(sum(counts), np.int64), np.empty(sum(counts), np.int64)
    W.Allgatherv(mine, [ref, counts])
    comm.Allgatherv(mine, [got, counts])
    same("Allgatherv (MPI fallback)", got, ref)
    comm.Barrier()
    if isinstance(comm, HierComm):
        before_compressed.update(comm.fallbacks)
    compressed(comm)


#: HierComm's fallbacks before the compressed calls (which move variable-size bytes
#: through Alltoallv/Allgatherv, on MPI across nodes).
before_compressed: dict[str, int] = {}


def compressed(comm: object) -> None:
    """Compressed collectives with a lossless codec give MPI's results exactly."""
    import numcodecs

    assert isinstance(comm, shmcoll.Comm | HierComm)
    codec = numcodecs.Zlib(level=1)
    for n in (1, 1000):
        x = gen(ME, n * P, np.dtype(np.float64), 9)
        y, yref = np.empty_like(x), np.empty_like(x)
        W.Allreduce(x, yref)
        comm.Allreduce(x, y, compress=codec)
        same(f"compressed Allreduce n={n}", y, yref)
        W.Alltoall(x, yref)
        comm.Alltoall(x, y, compress=codec)
        same(f"compressed Alltoall n={n}", y, yref)
        g, gref = np.empty(n * P * P), np.empty(n * P * P)
        W.Allgather(x, gref)
        comm.Allgather(x, g, compress=codec)
        same(f"compressed Allgather n={n}", g, gref)
        b = x.copy() if ME == P - 1 else np.zeros_like(x)
        bref = b.copy()
        W.Bcast(bref, root=P - 1)
        comm.Bcast(b, root=P - 1, compress=codec)
        same(f"compressed Bcast n={n}", b, bref)


def main() -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            c = shmcoll.Comm(W)
            run(c)
        except Exception:
            failures.append(f"rank {ME}: raised\n{traceback.format_exc()}")
            c = None
    everyone = W.gather(failures, root=0)
    counts = W.gather(compared, root=0)
    if ME == 0:
        assert everyone is not None and counts is not None
        flat = [f for fs in everyone for f in fs]
        nodes, local = (c.nnodes, c.local_size) if isinstance(c, HierComm) else (1, P)
        fb = before_compressed if isinstance(c, HierComm) else {}
        summary = f"compared={min(counts)} failures={len(flat)} fallbacks={fb}"
        print(f"hierarchy nodes={nodes} local={local} {summary}")
        for f in flat[:30]:
            print(f)
        return 1 if flat else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
