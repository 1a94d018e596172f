"""Helpers of test_pmpi.py: one MPI installation (its mpicc and mpiexec), the test
programs built with it, runs under mpiexec with or without the preloaded library, and the
parsing of the library's SHMCOLL_PMPI_STATS lines (per operation, and the shared arena's)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import shm_segments, subprocess_env

PROGRAMS_DIR = Path(__file__).resolve().parent / "pmpi"
STATS_LINE = re.compile(r"^\[shmcoll-pmpi\] rank=(\d+) op=(\S+) (.*)$", re.M)
ARENA_LINE = re.compile(r"^\[shmcoll-pmpi\] rank=(\d+) shared-malloc (.*)$", re.M)
SETUP_LINE = re.compile(r"^\[shmcoll-pmpi\] rank=(\d+) communicators (.*)$", re.M)


@dataclass
class Mpi:
    """An MPI installation and what was built with it."""

    name: str
    mpicc: str
    mpiexec: str
    library: Path
    build_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    programs: dict[str, Path] = field(default_factory=dict)
    #: Its Fortran compiler wrapper, where it has one.
    fortran: str = ""

    def compile(self, name: str, *extra: str, compiler: str | None = None, suffix: str = ".c") -> Path:
        """Build tests/pmpi/<name><suffix> once; its executable."""
        if name not in self.programs:
            out = self.build_dir / name
            source = PROGRAMS_DIR / f"{name}{suffix}"
            cmd = [compiler or self.mpicc, "-O2", "-Wall", "-o", str(out), str(source)]
            p = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=120, check=False)
            if p.returncode != 0:
                pytest.fail(f"{' '.join(cmd)} failed:\n{p.stdout}{p.stderr}", pytrace=False)
            self.programs[name] = out
        return self.programs[name]

    def run(
        self,
        n: int,
        program: Path,
        *args: str,
        preload: bool = True,
        env: Mapping[str, str] | None = None,
        expect_rc: int | None = 0,
        timeout: float = 90,
    ) -> subprocess.CompletedProcess[str]:
        """mpiexec -n N program args, the library preloaded unless `preload` is False; fails
        the test on another exit status (`expect_rc` None: any but 0, an aborted job) or on a
        shmcoll segment left in /dev/shm."""
        full = subprocess_env({**self.env, "SHMCOLL_PMPI_STATS": "1", **(env or {})})
        full.pop("LD_PRELOAD", None)
        if preload:
            full["LD_PRELOAD"] = str(self.library)
        flags = ["--oversubscribe"] if self.name.startswith("openmpi") else []
        cmd = [self.mpiexec, *flags, "-n", str(n), str(program), *args]
        before = shm_segments()
        try:
            p = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s\n{e.stdout}\n{e.stderr}")
        if p.returncode != expect_rc if expect_rc is not None else p.returncode == 0:
            pytest.fail(
                f"{' '.join(cmd)} exited with {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}",
                pytrace=False,
            )
        # Only segments of dead creators are leaks (others' tests may run at the same time).
        left = {s for s in shm_segments() - before if not _alive(s)}
        assert not left, f"segments left in /dev/shm: {sorted(left)}"
        return p


def _alive(segment: str) -> bool:
    """Whether the creator of a segment (named shmcoll-<v>-<pid>-<random>) still runs."""
    parts = segment.split("-")
    try:
        os.kill(int(parts[2]), 0)
    except (IndexError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def stats(stderr: str) -> dict[tuple[int, str], dict[str, int]]:
    """{(rank, "MPI_Alltoall"): {"handled": .., "bytes": .., "passed": .., reason: ..}}."""
    out: dict[tuple[int, str], dict[str, int]] = {}
    for rank, op, rest in STATS_LINE.findall(stderr):
        out[(int(rank), op)] = {k: int(v) for k, v in (kv.split("=") for kv in rest.split())}
    return out


def arena_stats(stderr: str) -> dict[int, dict[str, int]]:
    """{rank: {"served": .., "in-use-bytes": .., "fallbacks": ..}}: the shared arena's line."""
    return {
        int(rank): {k: int(v) for k, v in (kv.split("=") for kv in rest.split())}
        for rank, rest in ARENA_LINE.findall(stderr)
    }


def setup_stats(stderr: str) -> dict[int, dict[str, int]]:
    """{rank: {"new-segment": .., "pooled-segment": ..}}: the engines set up."""
    return {
        int(rank): {k: int(v) for k, v in (kv.split("=") for kv in rest.split())}
        for rank, rest in SETUP_LINE.findall(stderr)
    }


def openmpi_env() -> dict[str, str]:
    """What Open MPI's launcher needs here (root, no network interfaces to probe)."""
    env = {}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env
