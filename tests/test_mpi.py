"""Under ``mpiexec -n N`` (the MPICH wheel): shmcoll's results equal MPI's own on identical
inputs, on COMM_WORLD, on a communicator with reversed ranks and on even/odd halves."""

from __future__ import annotations

import re

import pytest

from conftest import MPI_SCRIPTS, run_mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(45)]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_same_results_as_mpi_on_comm_world(nranks: int) -> None:
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "compare_with_mpi.py", "world", timeout=40)
    m = re.search(r"mode=world size=(\d+) compared=\[([\d, ]+)\] failures=0", proc.stdout)
    assert m, proc.stdout
    assert int(m.group(1)) == nranks
    assert all(int(c) > 50 for c in m.group(2).split(",")), "too few comparisons ran"


@pytest.mark.parametrize("mode", ["reversed", "halves"])
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_same_results_as_mpi_on_split_communicators(nranks: int, mode: str) -> None:
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "compare_with_mpi.py", mode, timeout=40)
    assert f"mode={mode} size={nranks}" in proc.stdout and "failures=0" in proc.stdout, proc.stdout


@pytest.mark.parametrize("nranks", [1, 3])
def test_default_comm_is_comm_world(nranks: int) -> None:
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "default_comm.py", timeout=40)
    assert f"default_comm size={nranks} failures=0" in proc.stdout, proc.stdout
