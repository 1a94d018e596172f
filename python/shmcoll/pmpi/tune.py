"""``shmcoll pmpi --tune``: measure where MPI's own collectives beat the library on this
machine, and write the pass-through windows the library reads (csrc/window.c).

The C benchmark (bench/pmpi/alltoall_bench.c) runs with the library preloaded, every
window closed (every size served) and ``-s 1``: each iteration times the library's call and
MPI's own PMPI_ call on the same data, in alternating turns, so load that comes and goes
hits both alike. It runs with its buffers in the shared arena and with them private (the
arena off), since a program may have either and the decision can only depend on the size,
and it repeats that pair of launches (``--rounds``, alternating), since on a shared
machine one launch can be 10% off another; a size goes to MPI when MPI was faster by more
than the margin in the geometric mean of all the launches' ratios. A window is a prefix
[0, S): the sizes from the smallest up to the first the library wins. A collective whose
fixed cost is MPI's advantage loses at small sizes, and beyond the first size where copying
dominates it does not lose again (a lone loss further up is taken for noise, not a reason
to pass every size below it).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..bundle import shipped
from .build import MpiInfo, PmpiBuildError, _run, cache_dir

#: The operations with a window: the bench's name -> the windows file's (csrc/window.c).
OPS = {
    "alltoall": "alltoall",
    "allgather": "allgather",
    "allreduce": "allreduce",
    "reduce-scatter": "reduce_scatter_block",
    "bcast": "bcast",
    "barrier": "barrier",
}
#: MPI must win by this much to get a size: a tie is served (it still saves MPI's copies
#: of large buffers elsewhere in the program's caches, and the medians are noisy).
MARGIN = 0.05


def windows_path(mpi: MpiInfo, directory: str | os.PathLike[str] | None = None) -> Path:
    """The windows file of `mpi`, where the library looks for it (beside its cache
    directory, so that rebuilds of the library keep it); $SHMCOLL_PMPI_WINDOWS wins."""
    env = os.environ.get("SHMCOLL_PMPI_WINDOWS")
    return Path(env) if env else cache_dir(directory) / f"{mpi.key}.windows"


@dataclass(frozen=True)
class Window:
    op: str  # the windows file's name
    hi: int  # pass [0, hi) to MPI; 0: serve every size
    times: tuple[tuple[int, float, float], ...]  # (bytes, library µs, MPI µs)


def choose(op: str, times: list[tuple[int, float, float]]) -> Window:
    """The window of one operation from its (bytes, library µs, MPI µs) rows (one or more
    rows per size)."""
    rows = sorted(times)
    speedup: dict[int, list[float]] = {}
    for n, lib, mpi in rows:
        speedup.setdefault(n, []).append(lib / mpi)  # > 1: MPI faster
    hi = 0
    for n in sorted(speedup):
        if math.prod(speedup[n]) ** (1 / len(speedup[n])) * (1 - MARGIN) <= 1:
            break
        hi = 1 if op == "barrier" else n * 2  # up to the next measured size (powers of 2)
    return Window(OPS[op], hi, tuple(rows))


def mpiexec_for(mpicc: str) -> str:
    """The launcher of the MPI of `mpicc`: beside it, with the same suffix (mpicc.mpich ->
    mpiexec.mpich), else the one on PATH."""
    p = Path(mpicc)
    for name in (p.name.replace("mpicc", "mpiexec"), "mpiexec"):
        cand = p.with_name(name)
        if cand.is_file():
            return str(cand)
    found = shutil.which("mpiexec")
    if not found:
        raise PmpiBuildError(f"no mpiexec beside {mpicc} nor on PATH")
    return found


def measure(
    mpi: MpiInfo,
    library: Path,
    nranks: int,
    max_bytes: int,
    iters: int,
    log: TextIO | None = None,
    rounds: int = 3,
) -> list[Window]:
    """Build and run the benchmark (see the module's docstring); one window per op."""
    bench = shipped("bench/alltoall_bench.c")
    if not bench.is_file():
        raise PmpiBuildError(f"the benchmark's source {bench} is missing from this installation")
    mpiexec = mpiexec_for(mpi.mpicc)
    env = {**os.environ, "LD_PRELOAD": str(library)}
    env.pop("SHMCOLL_PMPI_WINDOWS", None)
    for name in OPS.values():
        env[f"SHMCOLL_PMPI_{name.upper()}_PASS"] = "0:0"  # serve every size
    flags = []
    if mpi.flavour == "openmpi":
        flags = ["--oversubscribe"]
        env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    out = ""
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "alltoall_bench"
        _run([mpi.mpicc, "-O2", "-o", str(exe), str(bench)], "building the benchmark")
        cmd = [mpiexec, *flags, "-n", str(nranks), str(exe), "-m", f"8:{max_bytes}", "-i", str(iters)]
        cmd += ["-x", str(max(2, iters // 10)), "-o", ",".join(OPS), "-s", "1"]
        # The buffers in the arena (as the library's setting puts them), then private.
        kinds: tuple[tuple[str, dict[str, str]], ...] = (
            ("", {}),
            (" with private buffers", {"SHMCOLL_PMPI_SHARED_MALLOC": "off"}),
        )
        for r in range(rounds):
            for label, extra in kinds:
                if log is not None:
                    log.write(f"measuring{label} ({r + 1}/{rounds}): {' '.join(cmd)}\n")
                out += _run(cmd, "running the benchmark", env={**env, **extra}, timeout=1800)
    rows: dict[str, list[tuple[int, float, float]]] = {op: [] for op in OPS}
    for line in out.splitlines():
        m = re.fullmatch(r"(\S+) (\d+) ([\d.]+) ([\d.]+)", line.strip())
        if m and m[1] in rows:
            rows[m[1]].append((int(m[2]), float(m[3]), float(m[4])))
    missing = [op for op, r in rows.items() if not r]
    if missing:
        raise PmpiBuildError(f"the benchmark printed nothing for {', '.join(missing)}:\n{out}")
    return [choose(op, r) for op, r in rows.items()]


def write(path: Path, windows: list[Window], mpi: MpiInfo, nranks: int) -> None:
    """The windows file (csrc/window.c reads it), replaced atomically."""
    lines = [
        f"# shmcoll pmpi --tune for {mpi.flavour} {mpi.version} ({mpi.mpicc}), {nranks} ranks:",
        "# calls of these sizes (bytes, [LO:HI)) go to MPI, which was faster there.",
    ]
    lines += [f"{w.op} 0:{w.hi}" for w in windows]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
