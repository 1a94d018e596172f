"""MPI's own launcher as shmcoll starts it (the benchmarks against MPI, the tuner's MPI
sweep, `shmcoll bench --launcher mpiexec`): which mpiexec (the MPI wheel's beside this
Python, else PATH's), whether MPI is usable here, and the command line for `n` ranks with
the flags each MPI needs (Open MPI's oversubscription and root permission, and binding from
the start, as shmcoll.binding binds its own ranks)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from .binding import mpiexec_bind_flags


def default_mpiexec() -> str:
    """The mpiexec installed beside this Python (the MPI wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else "mpiexec"


def mpi_available(mpiexec: str | None = None) -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return shutil.which(mpiexec or default_mpiexec()) is not None


def mpiexec_command(n: int, mpiexec: str = "mpiexec") -> tuple[list[str], dict[str, str]]:
    """mpiexec and its flags for `n` ranks, and the environment it needs."""
    env = dict(os.environ)
    cmd = [mpiexec]
    try:
        version = subprocess.run(
            [mpiexec, "--version"], check=False, capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    flavour = "mpich"
    if "Open MPI" in version or "OpenRTE" in version or "PRRTE" in version:
        flavour = "openmpi"
        cmd.append("--oversubscribe")
        if os.geteuid() == 0:
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # Bound from the start, oversubscribed ranks skip the transient of being bound late
    # by the Comm (see shmcoll.binding); MPI's ranks in the same launch are bound alike.
    cmd += mpiexec_bind_flags(flavour, n)
    cmd += ["-n", str(n)]
    return cmd, env
