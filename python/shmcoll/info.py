"""What `shmcoll info` reports: the machine as shmcoll sees it, the kernel settings that
matter to it, whether CMA works and from which block size private buffers take it,
versions, MPI, every setting, the tuning table."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import _core


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "(unreadable)"


def kernel_settings() -> dict[str, str]:
    st = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    shm = (
        f"{st.f_blocks * st.f_frsize / 2**30:.1f} GiB, {st.f_bavail * st.f_frsize / 2**30:.1f} GiB free"
        if st
        else "(absent)"
    )
    return {
        "kernel": platform.release(),
        "transparent huge pages (anonymous)": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "transparent huge pages (shmem)": _read("/sys/kernel/mm/transparent_hugepage/shmem_enabled"),
        "NumPy arrays in the shared arena": shared_arrays_summary(),
        "/dev/shm": shm,
        "yama ptrace_scope": _read("/proc/sys/kernel/yama/ptrace_scope")
        if os.path.exists("/proc/sys/kernel/yama/ptrace_scope")
        else "(no Yama)",
    }


def shared_arrays_summary() -> str:
    """Which NumPy arrays come from the shared-array arena here, and why not larger ones."""
    from .bench.sizes import fmt_size
    from .shared_arrays import shared_arrays_info

    i = shared_arrays_info()
    if not i["installed"] or i["max_bytes"] is None:
        return "none (off: SHMCOLL_SHARED_ARRAYS=0, or no arena fits this process's limits)"
    span = f"{fmt_size(i['min_bytes'])}B to {fmt_size(i['max_bytes'])}B"
    if i["huge_pages"]:
        return f"{span}, large ones on huge pages ({i['huge_pages_setting']})"
    return (
        f"{span}: larger ones stay NumPy's, since shared memory gets no huge pages "
        f"({i['huge_pages_setting']}; 'advise' there lets them in on huge pages)"
    )


def _cma_probe() -> bool:
    import shmcoll

    return bool(shmcoll.Comm().cma_ok)


def cma_works() -> str:
    """Probe process_vm_readv between two fresh ranks (as every communicator does)."""
    from .launch import spawn

    try:
        ok = spawn(2, _cma_probe, timeout=30, start_method="fork")
    except Exception as e:
        return f"unknown ({type(e).__name__}: {e})"
    return "yes" if all(ok) else "no (the cma algorithms are unavailable; staging serves instead)"


def mpi_info() -> str:
    """mpi4py and the MPI library, probed in a subprocess (importing mpi4py.MPI initialises MPI)."""
    code = (
        "from mpi4py import MPI; import mpi4py; "
        "print(mpi4py.__version__, '|', MPI.Get_library_version().splitlines()[0])"
    )
    try:
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"not usable ({e})"
    if r.returncode != 0:
        return "not found (pip install 'shmcoll[mpi]' for mpi4py and MPICH)"
    v, _, lib = r.stdout.strip().partition("|")
    return f"mpi4py {v.strip()}, {lib.strip()}"


def versions() -> dict[str, str]:
    import numpy

    return {
        "shmcoll": _core.__version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "MPI": mpi_info(),
    }


def tuning_source(nprocs: int) -> str:
    from .errors import ShmcollError
    from .tuning.lookup import resolve

    try:
        r = resolve("alltoall", nprocs)
    except ShmcollError as e:
        return f"error: {e}"
    if r.source == "model":
        return "model embedded in shmcoll" + (
            "" if r.covered else f" (the {r.origin} table does not cover {nprocs} ranks)"
        )
    return f"{r.source} ({r.origin})"


def cma_from() -> dict[str, Any]:
    """The block size from which private buffers take CMA in this process, where it came
    from, and the probe's figures when this process has them (runs the probe, a few
    milliseconds, unless forced or cached)."""
    return dict(_core.cma_from())


def cma_from_summary(c: dict[str, Any]) -> str:
    from .bench.sizes import fmt_size

    return f"{fmt_size(int(c['bytes']))} bytes per block ({c['describe']})"


def probe_rows(c: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(block size, CMA read, CMA write, staged, inline) in microseconds per transfer."""
    from .bench.sizes import fmt_size

    f = c.get("figures")
    if not f:
        return []
    us = [f"{k}_ns" for k in ("cma_read", "cma_write", "staged", "inline")]
    return [
        (fmt_size(int(size)), *(f"{f[k][i] / 1000:.2f}" for k in us))  # type: ignore[misc]
        for i, size in enumerate(f["sizes"])
    ]


def probe_note(c: dict[str, Any]) -> str:
    from .bench.sizes import fmt_size

    f = c.get("figures")
    if not f:
        return ""
    return (
        f"{f['reps']} repetitions in {f['took_us'] / 1000:.1f} ms, staging ring chunks of "
        f"{fmt_size(int(f['chunk_bytes']))}; staged and inline hand each chunk to a second thread"
    )


def gather(probe_cma: bool = True) -> dict[str, Any]:
    m = _core.machine()
    return {
        "machine": m,
        "kernel": kernel_settings(),
        "cma": cma_works() if probe_cma else "(not probed)",
        "cma_from": cma_from(),
        "versions": versions(),
        "settings": [(name, os.environ.get(name, "(default)"), desc) for name, desc in _core.settings()],
        "tuning": tuning_source(int(m["logical_cpus"])),
    }
