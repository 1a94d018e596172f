"""Run under ``mpiexec -n N``: shmcoll's collectives beyond Alltoall (Bcast, Allgather(v),
Gather(v), Scatter(v), Reduce_scatter(_block), Allreduce, Reduce) against MPI's own on
identical inputs. Exits non-zero on any difference or exception.

Usage: compare_collectives_with_mpi.py {world,reversed,halves}
  world     shmcoll.Comm(MPI.COMM_WORLD)
  reversed  a communicator whose ranks run backwards (Split(0, key=size-1-rank))
  halves    even and odd ranks in two communicators (Split(rank % 2))

The matrix: every collective x algorithm (auto, inline, direct, staging) x sizes (0, 1,
odd, a few thousand elements; about 1.5 MiB per rank for auto/direct/staging) x in place
and not, with dtypes, heap/ordinary buffers, roots (0 and size-1), buffer-spec spellings and
reduction operators cycled across the cases (a full cartesian product would not fit the
time budget); the v-variants and Reduce_scatter with zero, ragged and random counts and
permuted displacements with gaps; and, for the four reductions, every (dtype, operator)
pair shmcoll implements natively. Inputs are drawn from generators seeded per (case, rank),
so every rank also rebuilds every other rank's input locally:

* data movement and integer or MIN/MAX reductions: exactly MPI's bytes, and the expected
  values rebuilt from the inputs;
* float/complex SUM and PROD: bitwise equal to a NumPy reduction in rank order (shmcoll
  combines contributions in rank order), and np.allclose to MPI's result (MPI's order may
  differ);
* Allreduce results bitwise identical on every rank (digests compared at the end);
* the algorithm that served a forced call (``last_choice``);
* the MPI fallback (user-defined operator, float16, bool; in place and not): MPI's result,
  one RuntimeWarning per kind and a growing ``shmcoll.ops.fallback_calls``;
* odd spellings: unaligned arrays, 2-D arrays, bytearrays, [buf, (count, displ), type]
  windows and root buffers longer than needed (bytes outside must stay untouched);
* a forced inline that cannot serve raises UnsupportedError/AlgorithmError on every rank;
* a second communicator with the smallest staging areas, a 256-byte inline area and a
  192-byte chunk: many staging rounds and sizes around the inline and arrive-line limits.

Summary line (rank 0): ``mode=<mode> size=<world size> compared=[per rank] failures=<k>``,
then skipped known bugs, a timing line, and each failure. SHMCOLL_COMPARE_VERBOSE=1 also
lists the (collective, algorithm, in place, heap) combinations that ran.

Known shmcoll bugs are listed in KNOWN_BUGS: their cases are skipped (and named in the
summary) unless SHMCOLL_COMPARE_KNOWN_BUGS=1.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype, to_numpy_dtype

import shmcoll
import shmcoll.ops

WORLD = MPI.COMM_WORLD
ALGORITHMS: list[str | None] = [None, "inline", "direct", "cma", "staging"]
#: For cases on ordinary (non-heap) buffers: `direct` serves heap buffers only.
PRIVATE_ALGORITHMS = [a for a in ALGORITHMS if a != "direct"]
SEED = 20240611

#: dtypes of the main matrix (cycled across cases) and of the (dtype, operator) sweep.
MAIN_DTYPES = [np.dtype(t) for t in ("float64", "float32", "int32", "uint8", "complex128", "int64")]
ALL_DTYPES = [
    np.dtype(t)
    for t in (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
]
OP_NAMES = ["SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR"]

#: Combinations that a known shmcoll bug breaks: skipped (and listed in the summary) unless
#: SHMCOLL_COMPARE_KNOWN_BUGS=1. Keys are the `bug=` names used at the call sites.
KNOWN_BUGS: dict[str, str] = {}
RUN_KNOWN_BUGS = os.environ.get("SHMCOLL_COMPARE_KNOWN_BUGS", "") == "1"


def supported_ops(dt: np.dtype) -> list[str]:
    if dt.kind in "iu":
        return list(OP_NAMES)
    if dt.kind == "f":
        return ["SUM", "PROD", "MIN", "MAX"]
    return ["SUM", "PROD"]


def np_op(name: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def land(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return ((a != 0) & (b != 0)).astype(a.dtype)

    def lor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return ((a != 0) | (b != 0)).astype(a.dtype)

    def prod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind != "c":
            return np.multiply(a, b)
        # shmcoll's documented formula, (ar*br - ai*bi, ar*bi + ai*br) without FMA, in real
        # arithmetic: NumPy's SIMD complex multiply fuses multiply-adds on AVX2/AVX-512
        # machines, so a*b on complex arrays is not bitwise this formula there.
        out = np.empty_like(a)
        out.real = a.real * b.real - a.imag * b.imag
        out.imag = a.real * b.imag + a.imag * b.real
        return out

    table: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
        "SUM": np.add,
        "PROD": prod,
        "MIN": np.minimum,
        "MAX": np.maximum,
        "BAND": np.bitwise_and,
        "BOR": np.bitwise_or,
        "BXOR": np.bitwise_xor,
        "LAND": land,
        "LOR": lor,
    }
    return table[name]


def rank_order_reduce(contribs: list[np.ndarray], op: str) -> np.ndarray:
    """c0 op c1 op ... op c(p-1), left to right, as shmcoll combines them."""
    f = np_op(op)
    acc = contribs[0].copy()
    with np.errstate(all="ignore"):
        for c in contribs[1:]:
            acc = f(acc, c).astype(acc.dtype, copy=False)
    return acc


def sub_communicator(mode: str) -> MPI.Intracomm:
    r, n = WORLD.Get_rank(), WORLD.Get_size()
    if mode == "world":
        return WORLD
    if mode == "reversed":
        return WORLD.Split(0, key=n - 1 - r)
    if mode == "halves":
        return WORLD.Split(r % 2, key=r)
    raise SystemExit(f"unknown mode {mode!r}")


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def describe_diff(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    g, w = got.reshape(-1), want.reshape(-1)
    if g.size == 0:
        return "equal"
    gb, wb = g.view(np.uint8).reshape(g.size, -1), w.view(np.uint8).reshape(w.size, -1)
    bad = np.flatnonzero((gb != wb).any(axis=1))
    if bad.size == 0:
        return "equal"
    i = int(bad[0])
    return f"{bad.size} of {g.size} elements differ, first at {i}: got {g[i]!r}, want {w[i]!r}"


class Checker:
    def __init__(self, comm: shmcoll.Comm, mpi: MPI.Intracomm, color: int) -> None:
        self.comm = comm
        self.mpi = mpi
        self.p = comm.size
        self.me = comm.rank
        self.color = color
        self.inline_cap = int(comm.config()["inline_bytes"])
        self.cma = bool(comm.cma_ok)
        self.failures: list[str] = []
        self.compared = 0
        self.case = 0
        self.skipped_bugs: dict[str, int] = {}
        self.skipped_inline = 0
        self.digests: list[tuple[str, str]] = []
        self.timing: dict[str, float] = {}
        #: (collective, algorithm, in place, heap flags) combinations run; algorithms served
        self.covered: set[tuple[str, str, bool, str]] = set()
        self.served: dict[str, int] = {}

    # -- inputs ---------------------------------------------------------------------
    def next_case(self) -> int:
        self.case += 1
        return self.case

    def gen(self, j: int, n: int, dt: np.dtype, salt: int = 0) -> np.ndarray:
        """Rank j's input of the current case (the same on every rank that asks)."""
        rng = np.random.default_rng([SEED, self.case, j, self.color, salt])
        if dt.kind == "c":
            return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
        if dt.kind == "f":
            return rng.standard_normal(n).astype(dt)
        if dt.kind == "b":
            return rng.random(n) < 0.5
        info = np.iinfo(dt)
        v = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        v[rng.random(n) < 0.25] = 0  # zeros, so that LAND/LOR see both truth values
        return v

    def shared_rng(self, salt: int = 0) -> np.random.Generator:
        """The same draws on every rank of this communicator."""
        return np.random.default_rng([SEED, self.case, 999_999, self.color, salt])

    def counts_of(self, kind: str, scale: int = 1) -> list[int]:
        p = self.p
        rng = self.shared_rng(1)
        if kind == "zero":
            return [0] * p
        if kind == "ragged":  # zeros included, never all zero for p > 1
            return [(3 * j + 1) % 5 if j % 3 != 2 else 0 for j in range(p)]
        if kind == "random":
            return [int(c) for c in rng.integers(0, 40, p)]
        if kind == "big":
            return [int(c) for c in rng.integers(0, 3000, p)]
        if kind == "uniform":
            return [scale] * p
        raise AssertionError(kind)

    def layout(self, counts: list[int], contiguous: bool) -> tuple[list[int], int]:
        """Displacements (permuted, with gaps unless `contiguous`) and the buffer length."""
        p = self.p
        if contiguous:
            displs = [int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]])] if p else []
            return displs, int(sum(counts))
        rng = self.shared_rng(2)
        perm = rng.permutation(p)
        displs, at = [0] * p, 0
        for j in perm:
            at += int(rng.integers(0, 4))
            displs[int(j)] = at
            at += counts[int(j)]
        return displs, at + 2

    def buf(self, n: int, dt: np.dtype, heap: bool) -> np.ndarray:
        return self.comm.empty(n, dt) if heap else np.empty(n, dt)

    def filled(self, data: np.ndarray, heap: bool) -> np.ndarray:
        b = self.buf(data.size, data.dtype, heap)
        b[...] = data
        return b

    def sentinel(self, n: int, dt: np.dtype, heap: bool) -> np.ndarray:
        b = self.buf(n, dt, heap)
        b.view(np.uint8)[...] = 0x5A
        return b

    def kw(self, alg: str | None) -> dict[str, Any]:
        return {"algorithm": alg} if alg else {}

    def heap_flags(self, alg: str | None, k: int) -> tuple[bool, bool]:
        """(heap send, heap recv) for case k; direct needs the heap."""
        if alg == "direct":
            return True, True
        h = ((k * 2654435761) % (1 << 32)) >> 30  # scrambled, so it does not follow k's parity
        return bool(h & 1), bool(h & 2)

    def inline_ok(self, alg: str | None, contrib_bytes: int) -> bool:
        """False (and counted) when a forced inline cannot serve these contributions."""
        if alg == "inline" and contrib_bytes > self.inline_cap:
            self.skipped_inline += 1
            return False
        return True

    def known_bug(self, name: str) -> bool:
        """True when the case must be skipped because of KNOWN_BUGS[name]."""
        assert name in KNOWN_BUGS
        if RUN_KNOWN_BUGS:
            return False
        self.skipped_bugs[name] = self.skipped_bugs.get(name, 0) + 1
        return True

    # -- verdicts -------------------------------------------------------------------
    def fail(self, label: str, msg: str) -> None:
        self.failures.append(f"{label}: {msg}")

    def exact(self, label: str, got: np.ndarray, want: np.ndarray, what: str = "MPI") -> None:
        self.compared += 1
        if not same_bytes(got, want):
            self.fail(label, f"differs from {what}: {describe_diff(got, want)}")

    def choice(self, label: str, alg: str | None) -> None:
        m = re.search(r"heap=(\w+)/(\w+)|heap=(\w+)", label)
        heap = m.group(0) if m else "-"
        self.covered.add((label.split(maxsplit=1)[0], str(alg), "in_place=True" in label, heap))
        c = self.comm.last_choice()
        if c is not None:
            self.served[c.algorithm] = self.served.get(c.algorithm, 0) + 1
        if c is None:
            self.fail(label, "last_choice() is None after a call")
        elif alg is not None and (c.algorithm != alg or not c.forced):
            self.fail(label, f"forced {alg} but ran {c}")
        elif alg is None and c.algorithm not in ("inline", "direct", "cma", "staging"):
            self.fail(label, f"unexpected algorithm {c}")

    def reduced(
        self, label: str, got: np.ndarray, mpi_res: np.ndarray, ref: np.ndarray, op: str, nterms: int
    ) -> None:
        """A reduction's result: exact vs MPI where the order cannot matter, else bitwise vs
        the rank-order reference and close to MPI's."""
        dt = got.dtype
        if dt.kind in "iu" or op in ("MIN", "MAX"):
            self.exact(label, got, mpi_res)
            self.exact(label, got, ref, "the rank-order reference")
            return
        self.exact(label, got, ref, "the rank-order NumPy reference (bitwise)")
        self.compared += 1
        if got.shape != mpi_res.shape:
            self.fail(label, f"shape {got.shape} != MPI's {mpi_res.shape}")
            return
        eps = float(np.finfo(dt).eps)
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        rtol = 64 * nterms * eps
        if not np.allclose(got, mpi_res, rtol=rtol, atol=rtol * max(scale, 1.0)):
            i = int(np.flatnonzero(~np.isclose(got, mpi_res, rtol=rtol, atol=rtol * max(scale, 1.0)))[0])
            self.fail(label, f"not close to MPI's result: first at {i}: got {got[i]!r}, MPI {mpi_res[i]!r}")

    def mpi_op(self, name: str, k: int) -> tuple[Any, Any]:
        """(the MPI op for the reference, the spelling passed to shmcoll, cycled)."""
        m = getattr(MPI, name)
        return m, (m if k % 3 else getattr(shmcoll, name))

    @staticmethod
    def op_label(sop: Any, name: str) -> str:
        return f"shmcoll.{name}" if isinstance(sop, shmcoll.Op) else f"MPI.{name}"

    # -- data movement ----------------------------------------------------------------
    def bcast(self, alg: str | None, n: int, dt: np.dtype, root: int, k: int) -> None:
        if not self.inline_ok(alg, n * dt.itemsize):
            return
        self.next_case()
        heap, _ = self.heap_flags(alg, k)
        data = self.gen(root, n, dt)
        ref = data.copy() if self.me == root else np.zeros(n, dt)
        self.mpi.Bcast(ref, root=root)
        b = self.filled(data, heap) if self.me == root else self.sentinel(n, dt, heap)
        spec = [b, from_numpy_dtype(dt)] if k % 3 == 1 else b
        spelling = "[buf, MPI type]" if k % 3 == 1 else "buf"
        label = f"Bcast alg={alg} n={n} {dt} root={root} heap={heap} spec={spelling}"
        self.comm.Bcast(spec, root=root, **self.kw(alg))
        self.choice(label, alg)
        self.exact(label, b, ref)
        self.exact(label, b, data, "the root's input")

    def allgather(self, alg: str | None, n: int, dt: np.dtype, in_place: bool, k: int) -> None:
        p, me = self.p, self.me
        if not self.inline_ok(alg, n * dt.itemsize):
            return
        self.next_case()
        hs, hr = self.heap_flags(alg, k)
        mine = self.gen(me, n, dt)
        want = np.concatenate([self.gen(j, n, dt) for j in range(p)]) if n else np.zeros(0, dt)
        ref = np.zeros(p * n, dt)
        r = self.sentinel(p * n, dt, hr)
        if in_place:
            ref[me * n : (me + 1) * n] = mine
            self.mpi.Allgather(MPI.IN_PLACE, ref)
            r[me * n : (me + 1) * n] = mine
            self.comm.Allgather(MPI.IN_PLACE if k % 2 else shmcoll.IN_PLACE, r, **self.kw(alg))
        else:
            self.mpi.Allgather(mine, ref)
            s = self.filled(mine, hs)
            if k % 3 == 0:
                t = from_numpy_dtype(dt)
                self.comm.Allgather([s, n, t], [r, n, t], **self.kw(alg))
            else:
                self.comm.Allgather(s, r, **self.kw(alg))
            self.exact(f"Allgather alg={alg} n={n} {dt}: send buffer", s, mine, "its input (unchanged)")
        label = f"Allgather alg={alg} n={n} {dt} in_place={in_place} heap={hs}/{hr} k={k}"
        self.choice(label, alg)
        self.exact(label, r, ref)
        self.exact(label, r, want, "the gathered inputs")

    def allgatherv(
        self, alg: str | None, kind: str, dt: np.dtype, in_place: bool, k: int, scale: int = 1
    ) -> None:
        p, me = self.p, self.me
        self.next_case()
        counts = self.counts_of(kind, scale)
        if not self.inline_ok(alg, max(counts, default=0) * dt.itemsize):
            return
        contiguous = k % 3 == 2
        displs, length = self.layout(counts, contiguous)
        hs, hr = self.heap_flags(alg, k)
        mine = self.gen(me, counts[me], dt)
        t = from_numpy_dtype(dt)
        ref = np.empty(length, dt)
        ref.view(np.uint8)[...] = 0x5A
        r = self.sentinel(length, dt, hr)
        want = ref.copy()
        for j in range(p):
            want[displs[j] : displs[j] + counts[j]] = self.gen(j, counts[j], dt)
        if contiguous:
            spec = [r, counts, t]
        elif k % 2:
            spec = [r, counts, displs, t]
        else:
            spec = [r, (counts, displs), t if k % 4 else dt]
        if in_place:
            ref[displs[me] : displs[me] + counts[me]] = mine
            r[displs[me] : displs[me] + counts[me]] = mine
            self.mpi.Allgatherv(MPI.IN_PLACE, [ref, (counts, displs), t])
            self.comm.Allgatherv(MPI.IN_PLACE, spec, **self.kw(alg))
        else:
            self.mpi.Allgatherv(mine, [ref, (counts, displs), t])
            s = self.filled(mine, hs)
            self.comm.Allgatherv(s, spec, **self.kw(alg))
        label = (
            f"Allgatherv alg={alg} counts={kind}{counts if p <= 4 and kind != 'uniform' else ''} {dt} "
            f"in_place={in_place} heap={hs}/{hr} spec={len(spec)}-item contiguous={contiguous}"
        )
        self.choice(label, alg)
        self.exact(label, r, ref)
        self.exact(label, r, want, "the gathered inputs (gaps untouched)")

    def gather(self, alg: str | None, n: int, dt: np.dtype, root: int, in_place: bool, k: int) -> None:
        p, me = self.p, self.me
        if not self.inline_ok(alg, n * dt.itemsize):
            return
        self.next_case()
        hs, hr = self.heap_flags(alg, k)
        mine = self.gen(me, n, dt)
        is_root = me == root
        ip = in_place and is_root
        label = f"Gather alg={alg} n={n} {dt} root={root} in_place={in_place} heap={hs}/{hr}"
        ref = np.zeros(p * n, dt) if is_root else None
        if ip:
            assert ref is not None
            ref[me * n : (me + 1) * n] = mine
            self.mpi.Gather(MPI.IN_PLACE, ref, root=root)
        else:
            self.mpi.Gather(mine, ref, root=root)
        r = self.sentinel(p * n, dt, hr) if is_root else None
        s = None
        if ip:
            assert r is not None
            r[me * n : (me + 1) * n] = mine
            self.comm.Gather(shmcoll.IN_PLACE, r, root=root, **self.kw(alg))
        else:
            s = self.filled(mine, hs)
            self.comm.Gather(s, r, root=root, **self.kw(alg))
        self.choice(label, alg)
        if is_root:
            assert r is not None and ref is not None
            self.exact(label, r, ref)
            want = np.concatenate([self.gen(j, n, dt) for j in range(p)]) if n else np.zeros(0, dt)
            self.exact(label, r, want, "the gathered inputs")
        else:
            assert s is not None
            self.exact(label + " (send buffer)", s, mine, "its input (unchanged)")

    def gatherv(self, alg: str | None, kind: str, dt: np.dtype, root: int, in_place: bool, k: int) -> None:
        p, me = self.p, self.me
        self.next_case()
        counts = self.counts_of(kind)
        if not self.inline_ok(alg, max(counts, default=0) * dt.itemsize):
            return
        contiguous = k % 3 == 2
        displs, length = self.layout(counts, contiguous)
        hs, hr = self.heap_flags(alg, k)
        t = from_numpy_dtype(dt)
        mine = self.gen(me, counts[me], dt)
        is_root = me == root
        ip = in_place and is_root
        label = (
            f"Gatherv alg={alg} counts={kind}{counts if p <= 4 else ''} {dt} root={root} "
            f"in_place={in_place} heap={hs}/{hr} contiguous={contiguous}"
        )
        ref = r = None
        if is_root:
            ref = np.empty(length, dt)
            ref.view(np.uint8)[...] = 0x5A
            r = self.sentinel(length, dt, hr)
            if ip:
                ref[displs[me] : displs[me] + counts[me]] = mine
                r[displs[me] : displs[me] + counts[me]] = mine
        self.mpi.Gatherv(
            MPI.IN_PLACE if ip else mine, None if ref is None else [ref, (counts, displs), t], root=root
        )
        s = None if ip else self.filled(mine, hs)
        if r is None:
            spec = None
        elif contiguous:
            spec = [r, counts, t]
        elif k % 2:
            spec = [r, counts, displs, t]
        else:
            spec = [r, (counts, displs), t]
        self.comm.Gatherv(MPI.IN_PLACE if ip else s, spec, root=root, **self.kw(alg))
        self.choice(label, alg)
        if is_root:
            assert r is not None and ref is not None
            self.exact(label, r, ref)
            want = ref.copy()
            want.view(np.uint8)[...] = 0x5A
            for j in range(p):
                want[displs[j] : displs[j] + counts[j]] = self.gen(j, counts[j], dt)
            self.exact(label, r, want, "the gathered inputs (gaps untouched)")
        else:
            assert s is not None
            self.exact(label + " (send buffer)", s, mine, "its input (unchanged)")

    def scatter(self, alg: str | None, n: int, dt: np.dtype, root: int, in_place: bool, k: int) -> None:
        p, me = self.p, self.me
        if not self.inline_ok(alg, p * n * dt.itemsize):
            return
        self.next_case()
        hs, hr = self.heap_flags(alg, k)
        is_root = me == root
        ip = in_place and is_root
        whole = self.gen(root, p * n, dt)
        label = f"Scatter alg={alg} n={n} {dt} root={root} in_place={in_place} heap={hs}/{hr}"
        ref = np.zeros(n, dt)
        self.mpi.Scatter(whole if is_root else None, MPI.IN_PLACE if ip else ref, root=root)
        s = self.filled(whole, hs) if is_root else None
        r = None if ip else self.sentinel(n, dt, hr)
        self.comm.Scatter(s, shmcoll.IN_PLACE if ip else r, root=root, **self.kw(alg))
        self.choice(label, alg)
        if r is not None:
            self.exact(label, r, ref)
            self.exact(label, r, whole[me * n : (me + 1) * n], "the root's block")
        if s is not None:
            self.exact(label + " (root's send buffer)", s, whole, "its input (unchanged)")

    def scatterv(self, alg: str | None, kind: str, dt: np.dtype, root: int, in_place: bool, k: int) -> None:
        p, me = self.p, self.me
        self.next_case()
        counts = self.counts_of(kind)
        contiguous = k % 3 == 2
        displs, length = self.layout(counts, contiguous)
        # inline packs the root's blocks back to back
        if not self.inline_ok(alg, sum(counts) * dt.itemsize):
            return
        hs, hr = self.heap_flags(alg, k)
        t = from_numpy_dtype(dt)
        is_root = me == root
        ip = in_place and is_root
        whole = self.gen(root, length, dt)
        label = (
            f"Scatterv alg={alg} counts={kind}{counts if p <= 4 else ''} {dt} root={root} "
            f"in_place={in_place} heap={hs}/{hr} contiguous={contiguous}"
        )
        ref = np.zeros(counts[me], dt)
        self.mpi.Scatterv(
            [whole, (counts, displs), t] if is_root else None, MPI.IN_PLACE if ip else ref, root=root
        )
        s = self.filled(whole, hs) if is_root else None
        r = None if ip else self.sentinel(counts[me], dt, hr)
        if s is None:
            spec = None
        elif contiguous:
            spec = [s, counts, t]
        elif k % 2:
            spec = [s, counts, displs, t]
        else:
            spec = [s, (counts, displs), t]
        self.comm.Scatterv(spec, MPI.IN_PLACE if ip else r, root=root, **self.kw(alg))
        self.choice(label, alg)
        if r is not None:
            self.exact(label, r, ref)
            self.exact(label, r, whole[displs[me] : displs[me] + counts[me]], "the root's block")
        if s is not None:
            self.exact(label + " (root's send buffer)", s, whole, "its input (unchanged)")

    # -- reductions -----------------------------------------------------------------
    def allreduce(self, alg: str | None, n: int, dt: np.dtype, op: str, in_place: bool, k: int) -> None:
        p = self.p
        if not self.inline_ok(alg, n * dt.itemsize):
            return
        self.next_case()
        hs, hr = self.heap_flags(alg, k)
        mop, sop = self.mpi_op(op, k)
        inputs = [self.gen(j, n, dt) for j in range(p)]
        mine = inputs[self.me]
        want = rank_order_reduce(inputs, op)
        label = (
            f"Allreduce alg={alg} n={n} {dt} op={self.op_label(sop, op)} in_place={in_place} heap={hs}/{hr}"
        )
        ref = np.zeros(n, dt)
        if in_place:
            ref[...] = mine
            self.mpi.Allreduce(MPI.IN_PLACE, ref, op=mop)
            r = self.filled(mine, hr)
            self.comm.Allreduce(shmcoll.IN_PLACE if k % 2 else MPI.IN_PLACE, r, op=sop, **self.kw(alg))
        else:
            self.mpi.Allreduce(mine, ref, op=mop)
            s = self.filled(mine, hs)
            r = self.sentinel(n, dt, hr)
            if k % 4 == 3:
                tt = from_numpy_dtype(dt)
                self.comm.Allreduce([s, tt], [r, n, tt], op=sop, **self.kw(alg))
            else:
                self.comm.Allreduce(s, r, op=sop, **self.kw(alg))
            self.exact(label + " (send buffer)", s, mine, "its input (unchanged)")
        self.choice(label, alg)
        self.reduced(label, r, ref, want, op, p)
        self.digests.append((label, hashlib.sha1(r.tobytes()).hexdigest()))

    def reduce(
        self, alg: str | None, n: int, dt: np.dtype, op: str, root: int, in_place: bool, k: int
    ) -> None:
        p, me = self.p, self.me
        if not self.inline_ok(alg, n * dt.itemsize):
            return
        self.next_case()
        hs, hr = self.heap_flags(alg, k)
        mop, sop = self.mpi_op(op, k)
        is_root = me == root
        ip = in_place and is_root
        inputs = [self.gen(j, n, dt) for j in range(p)]
        mine = inputs[me]
        label = (
            f"Reduce alg={alg} n={n} {dt} op={self.op_label(sop, op)} root={root} "
            f"in_place={in_place} heap={hs}/{hr}"
        )
        ref = mine.copy() if ip else (np.zeros(n, dt) if is_root else None)
        self.mpi.Reduce(MPI.IN_PLACE if ip else mine, ref, op=mop, root=root)
        s = None if ip else self.filled(mine, hs)
        r = None
        if is_root:
            r = self.filled(mine, hr) if ip else self.sentinel(n, dt, hr)
        self.comm.Reduce(shmcoll.IN_PLACE if ip else s, r, op=sop, root=root, **self.kw(alg))
        self.choice(label, alg)
        if is_root:
            assert r is not None and ref is not None
            self.reduced(label, r, ref, rank_order_reduce(inputs, op), op, p)
        if s is not None:
            self.exact(label + " (send buffer)", s, mine, "its input (unchanged)")

    def reduce_scatter_block(
        self, alg: str | None, n: int, dt: np.dtype, op: str, in_place: bool, k: int
    ) -> None:
        p, me = self.p, self.me
        if not self.inline_ok(alg, p * n * dt.itemsize):
            return
        self.next_case()
        hs, hr = self.heap_flags(alg, k)
        mop, sop = self.mpi_op(op, k)
        inputs = [self.gen(j, p * n, dt) for j in range(p)]
        mine = inputs[me]
        want = rank_order_reduce(inputs, op)[me * n : (me + 1) * n]
        label = (
            f"Reduce_scatter_block alg={alg} n={n} {dt} op={self.op_label(sop, op)} "
            f"in_place={in_place} heap={hs}/{hr}"
        )
        if in_place:
            ref = mine.copy()
            self.mpi.Reduce_scatter_block(MPI.IN_PLACE, ref, op=mop)
            r = self.filled(mine, hr)
            self.comm.Reduce_scatter_block(shmcoll.IN_PLACE, r, op=sop, **self.kw(alg))
            got, ref = r[:n], ref[:n]
        else:
            ref = np.zeros(n, dt)
            self.mpi.Reduce_scatter_block(mine, ref, op=mop)
            s = self.filled(mine, hs)
            r = self.sentinel(n, dt, hr)
            self.comm.Reduce_scatter_block(s, r, op=sop, **self.kw(alg))
            got = r
            self.exact(label + " (send buffer)", s, mine, "its input (unchanged)")
        self.choice(label, alg)
        self.reduced(label, got, ref, want, op, p)

    def reduce_scatter(
        self, alg: str | None, kind: str, dt: np.dtype, op: str, in_place: bool, k: int, scale: int = 1
    ) -> None:
        p, me = self.p, self.me
        self.next_case()
        counts = self.counts_of(kind, scale)
        total = sum(counts)
        if not self.inline_ok(alg, total * dt.itemsize):
            return
        hs, hr = self.heap_flags(alg, k)
        mop, sop = self.mpi_op(op, k)
        inputs = [self.gen(j, total, dt) for j in range(p)]
        mine = inputs[me]
        lo = sum(counts[:me])
        want = rank_order_reduce(inputs, op)[lo : lo + counts[me]]
        pass_counts = in_place or k % 2 == 0
        label = (
            f"Reduce_scatter alg={alg} counts={kind}{counts if p <= 4 and kind != 'uniform' else ''} {dt} "
            f"op={self.op_label(sop, op)} in_place={in_place} heap={hs}/{hr} "
            f"recvcounts={'given' if pass_counts else 'None'}"
        )
        if in_place:
            ref = mine.copy()
            self.mpi.Reduce_scatter(MPI.IN_PLACE, ref, counts, op=mop)
            r = self.filled(mine, hr)
            self.comm.Reduce_scatter(MPI.IN_PLACE, r, counts, op=sop, **self.kw(alg))
            got, ref = r[: counts[me]], ref[: counts[me]]
        else:
            ref = np.zeros(counts[me], dt)
            self.mpi.Reduce_scatter(mine, ref, counts, op=mop)
            s = self.filled(mine, hs)
            r = self.sentinel(counts[me], dt, hr)
            self.comm.Reduce_scatter(s, r, counts if pass_counts else None, op=sop, **self.kw(alg))
            got = r
            self.exact(label + " (send buffer)", s, mine, "its input (unchanged)")
        self.choice(label, alg)
        self.reduced(label, got, ref, want, op, p)

    # -- spellings and odd buffers ----------------------------------------------------
    def unaligned(self, n: int, dt: np.dtype, data: np.ndarray | None = None) -> np.ndarray:
        """An ordinary array whose data is 1 byte off its dtype's alignment."""
        raw = bytearray(n * dt.itemsize + 1)
        a = np.frombuffer(raw, dtype=dt, count=n, offset=1)
        if data is not None:
            a[...] = data
        return a

    def spellings(self) -> None:
        """Unaligned arrays, 2-D arrays, bytearrays and partial [buf, (count, displ), type]
        windows (bytes outside the window must stay untouched)."""
        p, me = self.p, self.me
        f8, c16 = np.dtype(np.float64), np.dtype(np.complex128)
        for alg in PRIVATE_ALGORITHMS:
            for n in (33, 3001):
                if not self.inline_ok(alg, n * 8):
                    continue
                self.next_case()
                inputs = [self.gen(j, n, f8) for j in range(p)]
                s, r = self.unaligned(n, f8, inputs[me]), self.unaligned(n, f8)
                ref = np.zeros(n, f8)
                self.mpi.Allreduce(inputs[me], ref, op=MPI.SUM)
                label = f"Allreduce unaligned alg={alg} n={n} float64 op=MPI.SUM"
                self.comm.Allreduce(s, r, op=MPI.SUM, **self.kw(alg))
                self.choice(label, alg)
                self.reduced(label, r, ref, rank_order_reduce(inputs, "SUM"), "SUM", p)
                self.digests.append((label, hashlib.sha1(r.tobytes()).hexdigest()))
                # in place, unaligned
                self.next_case()
                inputs = [self.gen(j, n, c16) for j in range(p)]
                r = self.unaligned(n, c16, inputs[me])
                ref = inputs[me].copy()
                self.mpi.Allreduce(MPI.IN_PLACE, ref, op=MPI.PROD)
                label = f"Allreduce unaligned in_place alg={alg} n={n} complex128 op=MPI.PROD"
                self.comm.Allreduce(MPI.IN_PLACE, r, op=MPI.PROD, **self.kw(alg))
                self.choice(label, alg)
                self.reduced(label, r, ref, rank_order_reduce(inputs, "PROD"), "PROD", p)
                # Reduce_scatter_block, unaligned send and receive
                m = n // p + 1
                if not self.inline_ok(alg, p * m * 4):
                    continue
                self.next_case()
                i4 = np.dtype(np.int32)
                inputs = [self.gen(j, p * m, i4) for j in range(p)]
                s, r = self.unaligned(p * m, i4, inputs[me]), self.unaligned(m, i4)
                ref = np.zeros(m, i4)
                self.mpi.Reduce_scatter_block(inputs[me], ref, op=MPI.BXOR)
                label = f"Reduce_scatter_block unaligned alg={alg} n={m} int32 op=MPI.BXOR"
                self.comm.Reduce_scatter_block(s, r, op=MPI.BXOR, **self.kw(alg))
                self.choice(label, alg)
                self.reduced(
                    label, r, ref, rank_order_reduce(inputs, "BXOR")[me * m : (me + 1) * m], "BXOR", p
                )
            # Allgather into a 2-D array from a bytearray
            n = 11
            if self.inline_ok(alg, n * 8):
                self.next_case()
                mine = self.gen(me, n, f8)
                send = bytearray(mine.tobytes())
                r2 = np.full((p, n), -1.0)
                ref = np.full((p, n), -1.0)
                self.mpi.Allgather(mine, ref)
                label = f"Allgather bytearray->2-D alg={alg} n={n}"
                self.comm.Allgather(send, r2, **self.kw(alg))
                self.choice(label, alg)
                self.exact(label, r2, ref)
            # Bcast of a window [buf, (count, displ), MPI.DOUBLE] of a larger array
            n, displ, extra = 29, 3, 5
            if self.inline_ok(alg, n * 8):
                self.next_case()
                root = p - 1
                whole = self.gen(root, n + displ + extra, f8)
                ref = whole.copy() if me == root else np.full(n + displ + extra, -3.0)
                self.mpi.Bcast([ref, (n, displ), MPI.DOUBLE], root=root)
                b = whole.copy() if me == root else np.full(n + displ + extra, -3.0)
                label = f"Bcast window [buf, ({n}, {displ}), MPI.DOUBLE] alg={alg} root={root}"
                self.comm.Bcast([b, (n, displ), MPI.DOUBLE], root=root, **self.kw(alg))
                self.choice(label, alg)
                self.exact(label, b, ref)
            # Gather [buf, count, MPI.INT] into a root buffer longer than needed
            n = 9
            if self.inline_ok(alg, n * 4):
                self.next_case()
                i4 = np.dtype(np.int32)
                mine = self.gen(me, n + 2, i4)
                gref = np.full(p * n + 4, 7, i4) if me == 0 else None
                gr = np.full(p * n + 4, 7, i4) if me == 0 else None
                self.mpi.Gather([mine, n, MPI.INT], None if gref is None else [gref, n, MPI.INT], root=0)
                label = f"Gather [buf, {n}, MPI.INT] into a longer buffer alg={alg}"
                self.comm.Gather(
                    [mine, n, MPI.INT], None if gr is None else [gr, n, MPI.INT], root=0, **self.kw(alg)
                )
                self.choice(label, alg)
                if gr is not None:
                    assert gref is not None
                    self.exact(label, gr, gref)

    def reduce_scatter_block_counts(self) -> None:
        """mpi4py reads the count of a Reduce_scatter_block buffer spec as the count per
        block (the recvcount): [sendbuf, n, type] sends size*n elements, and in place
        [recvbuf, n, type] holds size*n inputs with the result in the first n."""
        p, me = self.p, self.me
        i8 = np.dtype(np.int64)
        n = 4
        for alg in PRIVATE_ALGORITHMS:
            for in_place in (False, True):
                if not self.inline_ok(alg, p * n * 8):
                    continue
                self.next_case()
                inputs = [self.gen(j, p * n + 3, i8) for j in range(p)]  # longer than needed
                want = rank_order_reduce([x[: p * n] for x in inputs], "SUM")[me * n : (me + 1) * n]
                mine = inputs[me]
                label = f"Reduce_scatter_block [buf, {n}, MPI.INT64_T] alg={alg} in_place={in_place}"
                t = MPI.INT64_T
                try:
                    if in_place:
                        ref, r = mine.copy(), mine.copy()
                        self.mpi.Reduce_scatter_block(MPI.IN_PLACE, [ref, n, t], op=MPI.SUM)
                        self.comm.Reduce_scatter_block(MPI.IN_PLACE, [r, n, t], op=MPI.SUM, **self.kw(alg))
                        got, ref = r[:n], ref[:n]
                    else:
                        ref, got = np.full(n + 1, -1, i8), np.full(n + 1, -1, i8)
                        self.mpi.Reduce_scatter_block([mine, n, t], [ref, n, t], op=MPI.SUM)
                        self.comm.Reduce_scatter_block([mine, n, t], [got, n, t], op=MPI.SUM, **self.kw(alg))
                except Exception as e:
                    self.fail(label, f"raised {type(e).__name__}: {e}")
                    continue
                self.choice(label, alg)
                self.exact(label, got, ref)
                self.exact(label, got[:n], want, "the rank-order reference")

    def rejections(self) -> None:
        """A forced inline that cannot serve raises on every rank; the communicator then
        still works."""
        p, me = self.p, self.me
        f8 = np.dtype(np.float64)
        n = self.inline_cap // 8 + 1  # one element too many
        calls: list[tuple[str, Callable[[], None]]] = [
            ("Bcast", lambda: self.comm.Bcast(np.zeros(n), root=p - 1, algorithm="inline")),
            ("Allgather", lambda: self.comm.Allgather(np.zeros(n), np.zeros(p * n), algorithm="inline")),
            ("Gather", lambda: self.comm.Gather(np.zeros(n), np.zeros(p * n), root=0, algorithm="inline")),
            (
                "Allreduce",
                lambda: self.comm.Allreduce(np.zeros(n), np.zeros(n), op=MPI.MAX, algorithm="inline"),
            ),
            ("Reduce", lambda: self.comm.Reduce(np.zeros(n), np.zeros(n), root=p - 1, algorithm="inline")),
            (
                "Reduce_scatter_block",
                lambda: self.comm.Reduce_scatter_block(np.zeros(p * n), np.zeros(n), algorithm="inline"),
            ),
        ]
        for name, call in calls:
            self.compared += 1
            label = f"{name} forced inline with {n * 8} bytes (inline area {self.inline_cap})"
            try:
                call()
            except (shmcoll.UnsupportedError, shmcoll.AlgorithmError):
                pass
            except Exception as e:
                self.fail(label, f"raised {type(e).__name__} instead of UnsupportedError/AlgorithmError: {e}")
            else:
                self.fail(label, f"did not raise (ran {self.comm.last_choice()})")
        # still usable
        self.allreduce("inline", 5, f8, "SUM", False, 1)
        self.allgather(None, 5, f8, False, 2)
        del me

    # -- MPI fallback ---------------------------------------------------------------
    def fallback(self) -> None:
        """Operators and dtypes shmcoll does not implement run on MPI: same result as
        MPI's, a RuntimeWarning, and shmcoll.ops.fallback_calls grows."""
        p, me = self.p, self.me

        def py_sum(a: Any, b: Any, t: MPI.Datatype) -> None:
            nd = np.dtype(to_numpy_dtype(t))
            x = np.frombuffer(a, dtype=nd)
            y = np.frombuffer(b, dtype=nd)
            y += x

        user = MPI.Op.Create(py_sum, commute=True)
        try:
            # (what, dtype, op (None: the default), shmcoll's kind of fallback, known bug)
            cases: list[tuple[str, np.dtype, Any, str, str | None]] = [
                ("user-defined op on float64", np.dtype(np.float64), user, "user", None),
                ("user-defined op on int32", np.dtype(np.int32), user, "user", None),
                ("MPI.SUM on float16", np.dtype(np.float16), MPI.SUM, "f16", None),
                ("MPI.LOR on bool", np.dtype(np.bool_), MPI.LOR, "bool", None),
                ("shmcoll.SUM on float16", np.dtype(np.float16), shmcoll.SUM, "f16", None),
                ("default op on float16", np.dtype(np.float16), None, "f16", None),
            ]
            warned: set[str] = set()
            for what, dt, op, kind, bug in cases:
                for coll, in_place in [
                    (c, ip)
                    for ip in (False, True)
                    for c in ("Allreduce", "Reduce", "Reduce_scatter_block", "Reduce_scatter")
                ]:
                    if bug and self.known_bug(bug):
                        continue
                    self.next_case()
                    n = 5
                    mop = MPI.SUM if op is None else op
                    if isinstance(op, shmcoll.Op):
                        mop = getattr(MPI, op.upper())
                    kw = {} if op is None else {"op": op}
                    mkw = {"op": mop}
                    label = f"fallback {coll} {what} in_place={in_place}"
                    inp = shmcoll.IN_PLACE if op is None or isinstance(op, shmcoll.Op) else MPI.IN_PLACE
                    before = sum(shmcoll.ops.fallback_calls.values())
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        try:
                            got: np.ndarray | None
                            ref: np.ndarray | None
                            if coll == "Allreduce":
                                x = self.gen(me, n, dt)
                                if in_place:
                                    got, ref = x.copy(), x.copy()
                                    self.comm.Allreduce(inp, got, **kw)
                                    self.mpi.Allreduce(MPI.IN_PLACE, ref, **mkw)
                                else:
                                    got, ref = np.zeros(n, dt), np.zeros(n, dt)
                                    self.comm.Allreduce(x, got, **kw)
                                    self.mpi.Allreduce(x, ref, **mkw)
                            elif coll == "Reduce":
                                root = p - 1 if in_place else 0
                                x = self.gen(me, n, dt)
                                ip = in_place and me == root
                                got = (x.copy() if ip else np.zeros(n, dt)) if me == root else None
                                ref = (x.copy() if ip else np.zeros(n, dt)) if me == root else None
                                self.comm.Reduce(inp if ip else x, got, root=root, **kw)
                                self.mpi.Reduce(MPI.IN_PLACE if ip else x, ref, root=root, **mkw)
                            elif coll == "Reduce_scatter_block":
                                x = self.gen(me, p * n, dt)
                                if in_place:
                                    got, ref = x.copy(), x.copy()
                                    self.comm.Reduce_scatter_block(inp, got, **kw)
                                    self.mpi.Reduce_scatter_block(MPI.IN_PLACE, ref, **mkw)
                                    got, ref = got[:n], ref[:n]
                                else:
                                    got, ref = np.zeros(n, dt), np.zeros(n, dt)
                                    self.comm.Reduce_scatter_block(x, got, **kw)
                                    self.mpi.Reduce_scatter_block(x, ref, **mkw)
                            else:
                                counts = self.counts_of("ragged")
                                x = self.gen(me, sum(counts), dt)
                                if in_place:
                                    got, ref = x.copy(), x.copy()
                                    self.comm.Reduce_scatter(inp, got, counts, **kw)
                                    self.mpi.Reduce_scatter(MPI.IN_PLACE, ref, counts, **mkw)
                                    got, ref = got[: counts[me]], ref[: counts[me]]
                                else:
                                    got, ref = np.zeros(counts[me], dt), np.zeros(counts[me], dt)
                                    self.comm.Reduce_scatter(x, got, counts, **kw)
                                    self.mpi.Reduce_scatter(x, ref, counts, **mkw)
                        except Exception as e:
                            self.fail(label, f"raised {type(e).__name__}: {e}")
                            continue
                    after = sum(shmcoll.ops.fallback_calls.values())
                    self.compared += 1
                    if after != before + 1:
                        self.fail(label, f"fallback_calls grew by {after - before}, not 1")
                    warns = [w for w in caught if issubclass(w.category, RuntimeWarning)]
                    if kind not in warned and not warns:
                        self.fail(label, "no RuntimeWarning on the first fallback of its kind")
                    if kind in warned and warns:
                        self.fail(label, f"warned again: {[str(w.message) for w in warns]}")
                    warned.add(kind)
                    if got is not None:
                        assert ref is not None
                        self.exact(label, got, ref)
        finally:
            user.Free()


def run_matrix(ck: Checker) -> None:
    p = ck.p
    big_world = WORLD.Get_size() >= 4
    # Fewer sizes when 4+ ranks share the 2 cores of a small machine.
    small_sizes = [0, 1, 33, 2999] if big_world else [0, 1, 7, 33, 2999]
    large = 196_608  # float64 elements: 1.5 MiB per rank
    vkinds = ["zero", "ragged", "random", "big"]
    roots = [0, p - 1]
    k = 0
    # Each pass draws other dtypes, heap flags, roots and spellings for the same cells.
    REPS = 2

    def dtype_for(i: int) -> np.dtype:
        return MAIN_DTYPES[i % len(MAIN_DTYPES)]

    def op_for(dt: np.dtype, i: int) -> str:
        ops = supported_ops(dt)
        return ops[i % len(ops)]

    def timed(name: str, fn: Callable[[], None]) -> None:
        t0 = time.perf_counter()
        fn()
        ck.timing[name] = ck.timing.get(name, 0.0) + time.perf_counter() - t0

    def guard(fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            ck.fail(f"{fn.__name__}{args}", "raised\n" + traceback.format_exc())

    def movement() -> None:
        nonlocal k
        for alg in ALGORITHMS * REPS:
            for n in small_sizes:
                k += 1
                guard(ck.bcast, alg, n, dtype_for(k), roots[k % 2], k)
                for in_place in (False, True):
                    k += 1
                    guard(ck.allgather, alg, n, dtype_for(k), in_place, k)
                    k += 1
                    guard(ck.gather, alg, n, dtype_for(k), roots[k % 2], in_place, k)
                    k += 1
                    guard(ck.scatter, alg, n, dtype_for(k), roots[(k // 2) % 2], in_place, k)
            for kind in vkinds:
                for in_place in (False, True):
                    k += 1
                    guard(ck.allgatherv, alg, kind, dtype_for(k), in_place, k)
                    k += 1
                    guard(ck.gatherv, alg, kind, dtype_for(k), roots[k % 2], in_place, k)
                    k += 1
                    guard(ck.scatterv, alg, kind, dtype_for(k), roots[(k // 2) % 2], in_place, k)

    def reductions() -> None:
        nonlocal k
        for alg in ALGORITHMS * REPS:
            for n in small_sizes:
                for in_place in (False, True):
                    k += 1
                    dt = dtype_for(k)
                    guard(ck.allreduce, alg, n, dt, op_for(dt, k), in_place, k)
                    k += 1
                    dt = dtype_for(k)
                    guard(ck.reduce, alg, n, dt, op_for(dt, k), roots[k % 2], in_place, k)
                    k += 1
                    dt = dtype_for(k)
                    guard(ck.reduce_scatter_block, alg, n, dt, op_for(dt, k), in_place, k)
            for kind in vkinds:
                for in_place in (False, True):
                    k += 1
                    dt = dtype_for(k)
                    guard(ck.reduce_scatter, alg, kind, dt, op_for(dt, k), in_place, k)

    def op_sweep() -> None:
        """Every (dtype, operator) pair shmcoll implements, on each reduction."""
        nonlocal k
        sizes = [1, 7, 33, 300]
        for dt in ALL_DTYPES:
            for op in supported_ops(dt):
                k += 1
                alg = ALGORITHMS[k % len(ALGORITHMS)]
                n = sizes[(k // 4) % 4]
                in_place = (k // 3) % 2 == 1
                guard(ck.allreduce, alg, n, dt, op, in_place, k)
                guard(
                    ck.reduce,
                    ALGORITHMS[(k + 1) % len(ALGORITHMS)],
                    n,
                    dt,
                    op,
                    roots[k % 2],
                    not in_place,
                    k + 1,
                )
                guard(
                    ck.reduce_scatter_block, ALGORITHMS[(k + 2) % len(ALGORITHMS)], n, dt, op, in_place, k + 2
                )
                guard(
                    ck.reduce_scatter,
                    ALGORITHMS[(k + 3) % len(ALGORITHMS)],
                    "ragged",
                    dt,
                    op,
                    not in_place,
                    k + 3,
                )

    def large_cases() -> None:
        """About 1.5 MiB per rank (per block for the gathers and scatters)."""
        nonlocal k
        for alg in (None, "direct", "cma", "staging"):
            k += 1
            dt = np.dtype(np.float64)
            guard(ck.bcast, alg, large, dt, roots[k % 2], k)
            guard(ck.allgather, alg, large // p if p > 2 else large, dt, k % 2 == 0, k)
            guard(ck.allgatherv, alg, "uniform", dt, k % 2 == 1, k, large // p)
            guard(ck.gather, alg, large, np.dtype(np.int32), roots[k % 2], k % 2 == 1, k)
            guard(ck.scatter, alg, large // p if p > 2 else large, dt, roots[(k + 1) % 2], k % 2 == 0, k)
            guard(ck.allreduce, alg, large, dt, "SUM", k % 2 == 0, k)
            guard(ck.allreduce, alg, large * 2, np.dtype(np.float32), "MAX", k % 2 == 1, k + 1)
            guard(ck.reduce, alg, large, dt, "PROD", roots[k % 2], k % 2 == 1, k)
            guard(ck.reduce_scatter_block, alg, large // p, dt, "SUM", k % 2 == 0, k)
            guard(ck.reduce_scatter, alg, "uniform", np.dtype(np.int64), "BXOR", k % 2 == 1, k, large // p)

    timed("movement", movement)
    timed("reductions", reductions)
    timed("op_sweep", op_sweep)
    timed("large", large_cases)
    timed("spellings", lambda: guard(ck.spellings))
    timed("rsb-counts", lambda: guard(ck.reduce_scatter_block_counts))
    timed("rejections", lambda: guard(ck.rejections))
    timed("fallback", lambda: guard(ck.fallback))


def run_small_segment(ck: Checker) -> None:
    """On a communicator with the smallest staging areas and a 256-byte inline area: many
    staging rounds (and partial last rounds), contributions around the inline and
    arrive-line payload limits."""
    p = ck.p
    sizes = [0, 1, 5, 8, 9, 15, 16, 17, 31, 32, 33, 257, 3001, 20011]
    if WORLD.Get_size() >= 4:
        sizes = [0, 1, 9, 16, 17, 31, 32, 33, 3001, 20011]
    k = 0
    roots = [0, p - 1]

    def guard(fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            ck.fail(f"{fn.__name__}{args}", "raised\n" + traceback.format_exc())

    for alg in ALGORITHMS:
        for n in sizes:
            k += 1
            dt = MAIN_DTYPES[k % len(MAIN_DTYPES)]
            ops = supported_ops(dt)
            in_place = k % 2 == 0
            guard(ck.bcast, alg, n, dt, roots[k % 2], k)
            guard(ck.allgather, alg, n, dt, in_place, k)
            guard(ck.gather, alg, n, dt, roots[(k + 1) % 2], not in_place, k + 1)
            guard(ck.scatter, alg, n, dt, roots[k % 2], in_place, k + 2)
            guard(ck.allreduce, alg, n, dt, ops[k % len(ops)], not in_place, k + 3)
            guard(ck.reduce, alg, n, dt, ops[(k + 1) % len(ops)], roots[k % 2], in_place, k)
            guard(
                ck.reduce_scatter_block,
                alg,
                max(n // p, 1) if n else 0,
                dt,
                ops[(k + 2) % len(ops)],
                in_place,
                k,
            )
            guard(ck.reduce_scatter, alg, "uniform", dt, ops[(k + 3) % len(ops)], not in_place, k + 1, n // 2)
        for kind in ("ragged", "big"):
            k += 1
            dt = MAIN_DTYPES[k % len(MAIN_DTYPES)]
            guard(ck.allgatherv, alg, kind, dt, k % 2 == 0, k)
            guard(ck.gatherv, alg, kind, dt, roots[k % 2], k % 2 == 1, k + 1)
            guard(ck.scatterv, alg, kind, dt, roots[(k + 1) % 2], k % 2 == 0, k + 2)
            guard(
                ck.reduce_scatter,
                alg,
                kind,
                dt,
                supported_ops(dt)[k % len(supported_ops(dt))],
                k % 2 == 1,
                k + 3,
            )


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "world"
    t_start = time.perf_counter()
    mpi = sub_communicator(mode)
    color = WORLD.Get_rank() % 2 if mode == "halves" else 0
    comm = shmcoll.Comm(mpi)
    ck = Checker(comm, mpi, color)
    try:
        if (comm.rank, comm.size) != (mpi.Get_rank(), mpi.Get_size()):
            ck.failures.append(
                f"rank/size {comm.rank}/{comm.size} != MPI's {mpi.Get_rank()}/{mpi.Get_size()}"
            )
        run_matrix(ck)
        # A second communicator with the smallest staging areas and a tiny inline area.
        small_env = {
            "SHMCOLL_STAGING_BYTES": str(4096 * mpi.Get_size()),
            "SHMCOLL_INLINE_BYTES": "256",
            "SHMCOLL_CHUNK_BYTES": "192",
        }
        saved = {v: os.environ.get(v) for v in small_env}
        os.environ.update(small_env)
        try:
            small = shmcoll.Comm(mpi)
        finally:
            for v, old in saved.items():
                if old is None:
                    os.environ.pop(v)
                else:
                    os.environ[v] = old
        ck2 = Checker(small, mpi, color)
        ck2.case = 1_000_000
        t0 = time.perf_counter()
        try:
            run_small_segment(ck2)
        finally:
            small.Free()
        ck.timing["small-segment"] = time.perf_counter() - t0
        ck.failures += [f"[small segment {small_env}] {f}" for f in ck2.failures]
        ck.compared += ck2.compared
        ck.digests += ck2.digests
        ck.skipped_inline += ck2.skipped_inline
        ck.case += ck2.case - 1_000_000
        # Allreduce results bitwise identical on every rank of the communicator.
        digests = mpi.allgather(ck.digests)
        ck.compared += 1
        for r, ds in enumerate(digests):
            if len(ds) != len(ck.digests):
                ck.failures.append(f"rank {r} ran {len(ds)} Allreduce cases, this rank {len(ck.digests)}")
                break
            for (label, h), (_, mine) in zip(ds, ck.digests, strict=True):
                if h != mine:
                    ck.failures.append(f"{label}: result differs between ranks {r} and {ck.me}")
        comm.Barrier()
    except Exception:
        ck.failures.append(traceback.format_exc())
    all_failures = WORLD.allgather(ck.failures)
    compared = WORLD.allgather(ck.compared)
    skipped = WORLD.allgather(ck.skipped_bugs)
    comm.Free()
    if mpi is not WORLD:
        mpi.Free()
    if WORLD.Get_rank() == 0:
        bad = [(r, f) for r, fs in enumerate(all_failures) for f in fs]
        print(f"mode={mode} size={WORLD.Get_size()} compared={compared} failures={len(bad)}")
        bugs = sorted({b for s in skipped for b in s})
        if bugs:
            print(f"skipped (KNOWN_BUGS, set SHMCOLL_COMPARE_KNOWN_BUGS=1 to run): {bugs}")
            for b in bugs:
                print(f"  {b}: {KNOWN_BUGS[b]}")
        if os.environ.get("SHMCOLL_COMPARE_VERBOSE"):
            print(f"served={ck.served} covered={len(ck.covered)} combinations:")
            for c in sorted(ck.covered):
                print("   ", c)
        print(
            f"cases={ck.case} inline-skipped={ck.skipped_inline} cma={ck.cma} "
            "timing="
            + " ".join(f"{k}:{v:.1f}s" for k, v in ck.timing.items())
            + f" total:{time.perf_counter() - t_start:.1f}s"
        )
        for r, f in bad[:40]:
            print(f"world rank {r}: {f}")
        if len(bad) > 40:
            print(f"... and {len(bad) - 40} more")
        sys.stdout.flush()
        return 1 if bad else 0
    return 1 if any(all_failures) else 0


if __name__ == "__main__":
    sys.exit(main())
