"""shmcoll.fft against the real mpi4py-fft, in one mpiexec launch at 1 to 4 ranks.

shmcoll.fft claims mpi4py-fft's interface and conventions (names, defaults, output layout,
normalisation); this is the test of that claim: mpi_scripts/fft_vs_mpi4py_fft.py plans
both libraries with the same arguments, feeds them identical input and compares the
layout queries, ``newDistArray`` and the transforms element by element. mpi4py-fft builds
from source against FFTW's headers (scripts/test.sh installs both); without it the test
skips and says why."""

from __future__ import annotations

import pytest

from conftest import MPI_SCRIPTS, run_mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(180)]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_agrees_with_mpi4py_fft(nranks: int) -> None:
    pytest.importorskip(
        "mpi4py_fft",
        reason="mpi4py-fft is not installed (apt-get install libfftw3-dev; pip install mpi4py-fft)",
    )
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "fft_vs_mpi4py_fft.py", timeout=150)
    assert "cases agree with mpi4py-fft" in proc.stdout, proc.stdout + proc.stderr
