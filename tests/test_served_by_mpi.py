"""Under ``mpiexec -n N`` (the MPICH wheel): what shmcoll does not serve itself (derived
datatypes with gaps, buffers with only the CUDA array interface, MPI.BOTTOM, persistent
forms of those and of operators shmcoll does not implement) runs on MPI with MPI's
results, announced once per kind and counted; a fallback on some ranks only raises on
every rank; CPU DLPack buffers stay shmcoll's; a bad object root is mpi4py's ERR_ROOT
(mpi_scripts/served_by_mpi.py)."""

from __future__ import annotations

import re

import pytest

from conftest import MPI_SCRIPTS, run_mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_what_shmcoll_does_not_serve_runs_on_mpi(nranks: int) -> None:
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "served_by_mpi.py", timeout=100)
    found = re.findall(r"rank (\d+) served-by-mpi failures=(\d+)", proc.stdout)
    assert sorted(int(r) for r, _ in found) == list(range(nranks)), proc.stdout + proc.stderr
    assert all(f == "0" for _, f in found), proc.stdout
