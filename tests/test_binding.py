"""Binding ranks to CPUs from process start (shmcoll.binding): the policy, the flags given
to each MPI's launcher, and the real affinity of ranks started by ``shmcoll run``,
``spawn`` and mpiexec with those flags."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import shmcoll
from conftest import environ, find_tool, run_ranks, subprocess_env
from shmcoll.binding import bind_policy, launch_cpus, mpiexec_bind_flags

pytestmark = pytest.mark.timeout(120)

CPUS = sorted(os.sched_getaffinity(0))
#: More ranks than CPUs: the case the launchers bind.
OVER = len(CPUS) + 1


def _unconfined() -> bool:
    return len(CPUS) >= (os.cpu_count() or 1)


needs_unconfined = pytest.mark.skipif(not _unconfined(), reason="this process is confined to some CPUs")


# -- the policy ---------------------------------------------------------------------------
SPELLINGS = {
    None: "auto",
    "": "auto",
    "AUTO": "auto",
    "core": "core",
    "1": "core",
    "none": "none",
    "0": "none",
}


@pytest.mark.parametrize(("value", "policy"), SPELLINGS.items())
def test_the_policy_reads_the_rust_sides_spellings(value: str | None, policy: str) -> None:
    with environ({"SHMCOLL_BIND": value}):
        assert bind_policy() == policy


def test_a_bad_policy_is_refused_by_name() -> None:
    with environ({"SHMCOLL_BIND": "sometimes"}), pytest.raises(shmcoll.ArgumentError, match="SHMCOLL_BIND"):
        launch_cpus(4)


def test_auto_binds_only_oversubscribed_unconfined_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHMCOLL_BIND", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert launch_cpus(1) is None
    assert launch_cpus(2) is None
    assert launch_cpus(3) == [0, 1, 0]
    assert launch_cpus(5) == [0, 1, 0, 1, 0]
    # confined by the user or a batch system: the ranks inherit that instead
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert launch_cpus(5) is None
    # `core` binds whenever; round-robin over the CPUs allowed, in order
    monkeypatch.setenv("SHMCOLL_BIND", "core")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {6, 3})
    assert launch_cpus(3) == [3, 6, 3]
    monkeypatch.setenv("SHMCOLL_BIND", "none")
    assert launch_cpus(64) is None


def test_each_mpi_gets_its_own_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHMCOLL_BIND", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert mpiexec_bind_flags("mpich", 4) == ["-bind-to", "hwthread"]
    spanning = ["--map-by", "hwthread:span", "--bind-to", "hwthread:overload-allowed"]
    assert mpiexec_bind_flags("openmpi", 4) == spanning
    assert mpiexec_bind_flags("mpich", 2) == []
    assert mpiexec_bind_flags("openmpi", 2) == []


# -- real ranks ---------------------------------------------------------------------------
#: Prints the rank's affinity before shmcoll is imported (what the launcher gave it), then
#: after the Comm exists (the Comm leaves a bound rank where it is).
AFFINITY_SCRIPT = textwrap.dedent(
    """
    import os
    names = ("SHMCOLL_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK")
    rank = next(int(os.environ[k]) for k in names if k in os.environ)
    at_start = sorted(os.sched_getaffinity(0))
    import shmcoll
    comm = shmcoll.Comm()
    after = sorted(os.sched_getaffinity(0))
    comm.Barrier()
    line = f"affinity {rank} {','.join(map(str, at_start))} {','.join(map(str, after))}\\n"
    os.write(1, line.encode())  # one write: the ranks share the pipe
    """
)


def _affinities(stdout: str) -> dict[int, tuple[list[int], list[int]]]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("affinity "):
            _, rank, start, after = line.split()
            out[int(rank)] = ([int(c) for c in start.split(",")], [int(c) for c in after.split(",")])
    return out


def _expect_round_robin(found: dict[int, tuple[list[int], list[int]]], n: int) -> None:
    assert sorted(found) == list(range(n)), found
    for r, (start, after) in found.items():
        assert start == [CPUS[r % len(CPUS)]], f"rank {r} started on {start}: {found}"
        assert after == start, f"rank {r} moved from {start} to {after} at Comm creation: {found}"


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=subprocess_env(env), check=False)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout}\n{p.stderr}"
    return p.stdout


@needs_unconfined
def test_shmcoll_run_binds_oversubscribed_ranks_from_the_start(tmp_path: Path) -> None:
    script = tmp_path / "affinity.py"
    script.write_text(AFFINITY_SCRIPT)
    out = _run([sys.executable, "-m", "shmcoll.cli", "run", "-n", str(OVER), str(script)])
    _expect_round_robin(_affinities(out), OVER)


def test_shmcoll_run_leaves_ranks_unbound_when_told_or_not_oversubscribed(tmp_path: Path) -> None:
    script = tmp_path / "affinity.py"
    script.write_text(AFFINITY_SCRIPT)
    for n, env in ((OVER, {"SHMCOLL_BIND": "none"}), (len(CPUS), None)):
        cmd = [sys.executable, "-m", "shmcoll.cli", "run", "-n", str(n), str(script)]
        found = _affinities(_run(cmd, env))
        assert sorted(found) == list(range(n)), found
        assert all(start == after == CPUS for start, after in found.values()), (n, env, found)


def _affinity_in_rank() -> list[int]:
    return sorted(os.sched_getaffinity(0))


@needs_unconfined
def test_spawn_binds_oversubscribed_ranks_from_the_start() -> None:
    with environ({"SHMCOLL_BIND": None}):
        got = run_ranks(OVER, _affinity_in_rank, timeout=60)
    assert got == [[CPUS[r % len(CPUS)]] for r in range(OVER)], got


@needs_unconfined
def test_mpiexec_under_shmcoll_bench_binds_as_shmcoll_run_does(tmp_path: Path) -> None:
    mpiexec = find_tool("mpiexec")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        mpiexec = None
    if mpiexec is None:
        pytest.skip("mpiexec and mpi4py are needed (pip install mpich mpi4py)")
    from shmcoll.mpiexec import mpiexec_command

    script = tmp_path / "affinity.py"
    script.write_text(AFFINITY_SCRIPT)
    cmd, env = mpiexec_command(OVER, mpiexec)
    out = _run([*cmd, sys.executable, str(script)], env)
    _expect_round_robin(_affinities(out), OVER)
