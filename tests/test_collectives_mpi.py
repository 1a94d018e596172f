"""Under ``mpiexec -n N`` (the MPICH wheel): shmcoll's collectives beyond Alltoall (Bcast,
Allgather(v), Gather(v), Scatter(v), Reduce_scatter(_block), Allreduce, Reduce) give MPI's
results on identical inputs, for every algorithm, on COMM_WORLD, on a communicator with
reversed ranks and on even/odd halves (see mpi_scripts/compare_collectives_with_mpi.py)."""

from __future__ import annotations

import re

import pytest

from conftest import MPI_SCRIPTS, run_mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(90)]

SCRIPT = MPI_SCRIPTS / "compare_collectives_with_mpi.py"

#: Every rank compares far more than this (about 2800-3800 at 1 to 4 ranks); fewer means
#: part of the matrix silently stopped running.
MIN_COMPARED = 1500


def check_summary(stdout: str, mode: str, nranks: int) -> None:
    m = re.search(rf"mode={mode} size=(\d+) compared=\[([\d, ]+)\] failures=(\d+)", stdout)
    assert m, stdout
    assert int(m.group(1)) == nranks, stdout
    assert int(m.group(3)) == 0, stdout
    compared = [int(c) for c in m.group(2).split(",")]
    assert len(compared) == nranks, stdout
    assert all(c > MIN_COMPARED for c in compared), f"too few comparisons ran: {compared}\n{stdout}"


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_collectives_match_mpi_on_comm_world(nranks: int) -> None:
    proc = run_mpiexec(nranks, SCRIPT, "world", timeout=80)
    check_summary(proc.stdout, "world", nranks)


@pytest.mark.parametrize(
    ("mode", "nranks"),
    [
        ("reversed", 2),
        ("reversed", 3),
        ("halves", 3),  # communicators of 2 and 1 ranks side by side
        ("halves", 4),
    ],
)
def test_collectives_match_mpi_on_split_communicators(mode: str, nranks: int) -> None:
    proc = run_mpiexec(nranks, SCRIPT, mode, timeout=80)
    check_summary(proc.stdout, mode, nranks)


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_vector_collectives_with_count_lists_or_arrays_run_natively(nranks: int) -> None:
    """Counts as lists or NumPy arrays with predefined mpi4py or NumPy datatypes never
    reach the Python resolver; a derived datatype does (once per side on every rank, in
    the script's last call); all equal MPI's results."""
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "vector_routes.py", timeout=60)
    lines = re.findall(r"rank (\d+) routes python=(\d+) failures=(\d+)", proc.stdout)
    assert len(lines) == nranks, proc.stdout + proc.stderr
    assert all(py == "2" and fails == "0" for _, py, fails in lines), proc.stdout


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_buffer_specifications_with_datatypes_run_natively(nranks: int) -> None:
    """``[buf, MPI.DOUBLE]``, ``[buf, count, dt]``, ``[buf, (count, displ), dt]`` (and NumPy
    datatypes, IN_PLACE) for Bcast, Reduce, Gather, Scatter, Allreduce, Allgather,
    Reduce_scatter_block and Alltoall never reach the Python resolver, and leave every
    receive buffer (the bytes a count leaves out too) as MPI does."""
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "spec_routes.py", timeout=60)
    lines = re.findall(r"rank (\d+) routes python=(\d+) failures=(\d+)", proc.stdout)
    assert len(lines) == nranks, proc.stdout + proc.stderr
    assert all(py == "0" and fails == "0" for _, py, fails in lines), proc.stdout


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_object_collectives_agree_with_mpi4pys(nranks: int) -> None:
    """bcast, gather, scatter, allgather, alltoall, reduce, allreduce, scan and exscan of
    short and long pickles, with mpi4py's operators and a callable, as mpi4py's own; none
    is a fallback."""
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "objects_vs_mpi.py", timeout=90)
    lines = re.findall(r"rank (\d+) objects compared=(\d+) failures=(\d+) fallbacks=(\d+)", proc.stdout)
    assert len(lines) == nranks, proc.stdout + proc.stderr
    assert all(int(n) > 50 and f == "0" and fb == "0" for _, n, f, fb in lines), proc.stdout


@pytest.mark.parametrize(("nranks", "split"), [(1, None), (2, None), (3, None), (4, "2"), (3, "1")])
def test_mpi4py_methods_shmcoll_lacks_come_from_the_mpi_communicator(nranks: int, split: str | None) -> None:
    """Point-to-point, Scan/Exscan, nonblocking collectives and names work on a
    shmcoll.Comm (a HierComm with fake nodes, the object collectives too) as on the mpi4py
    communicator; the collectives among them are counted fallbacks, each announced once.
    shmcoll.Comm's object collectives are its own (test_object_collectives_agree_...)."""
    env = {"SHMCOLL_NODE_SPLIT": split} if split else None
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "passthrough.py", timeout=60, env=env)
    lines = re.findall(r"rank (\d+) passthrough failures=(\d+) counted=(\S*) warned=(\d+)", proc.stdout)
    assert len(lines) == nranks, proc.stdout + proc.stderr
    assert all(fails == "0" for _, fails, _, _ in lines), proc.stdout
    if split is None:  # shmcoll.Comm: every fallback in shmcoll.ops.fallback_calls
        want = "Exscan,Iallreduce,Scan"
        assert all(c == want and w == "3" for _, _, c, w in lines), proc.stdout
    else:  # HierComm counts its uppercase fallbacks itself
        assert all(c == "allreduce,bcast,gather" and int(w) >= 3 for _, _, c, w in lines), proc.stdout


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_arguments_mpi4py_refuses_are_refused_and_those_it_takes_taken(nranks: int) -> None:
    """Send and receive element types that differ in a reduction, a datatype that does not
    divide the buffer, ``None`` as the datatype, arithmetic on MPI.BYTE/PACKED, and
    shmcoll's operators in the calls MPI serves: as mpi4py, on every rank (a ShmcollError
    where mpi4py raises, mpi4py's result where it does not)."""
    proc = run_mpiexec(nranks, MPI_SCRIPTS / "argument_parity.py", timeout=80)
    lines = re.findall(r"rank (\d+) parity cases=(\d+) failures=(\d+)", proc.stdout)
    assert len(lines) == nranks, proc.stdout + proc.stderr
    assert all(int(n) >= 23 and f == "0" for _, n, f in lines), proc.stdout
