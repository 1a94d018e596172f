"""Scale-out: communicators over several (fake) nodes. ``SHMCOLL_NODE_SPLIT=k`` groups the
ranks into nodes of k; every collective must give MPI's results at 2 nodes x 2, 3 x 1 and
1 x 4 (the last is a single node: the plain shared-memory communicator)."""

from __future__ import annotations

import re

import pytest

from conftest import MPI_SCRIPTS, run_mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


@pytest.mark.parametrize(("nranks", "split", "nodes"), [(4, 2, 2), (3, 1, 3), (4, 4, 1)])
def test_collectives_over_fake_nodes_match_mpi(nranks: int, split: int, nodes: int) -> None:
    proc = run_mpiexec(
        nranks, MPI_SCRIPTS / "hierarchy_vs_mpi.py", timeout=110, env={"SHMCOLL_NODE_SPLIT": str(split)}
    )
    m = re.search(r"hierarchy nodes=(\d+) local=(\d+) compared=(\d+) failures=0", proc.stdout)
    assert m, proc.stdout
    assert int(m.group(1)) == nodes and int(m.group(2)) == nranks // nodes
    assert int(m.group(3)) > 300, "too few comparisons ran"
    if nodes > 1:
        # every collective with a hierarchical algorithm ran hierarchically; only the one
        # without (Allgatherv) fell back to MPI
        assert "fallbacks={'Allgatherv': 1}" in proc.stdout, proc.stdout


def test_bad_node_split_is_a_clear_error() -> None:
    proc = run_mpiexec(
        2, MPI_SCRIPTS / "hierarchy_vs_mpi.py", env={"SHMCOLL_NODE_SPLIT": "zero"}, check=False
    )
    assert proc.returncode != 0
    assert "SHMCOLL_NODE_SPLIT='zero' is not a whole number; allowed: 1 to" in proc.stdout + proc.stderr


#: Each HierComm collective, with a bad argument on the last rank only (on the last node):
#: see mpi_scripts/hierarchy_rejects.py.
REJECT_CASES = [
    "bcast_root",
    "allgather_send_short",
    "alltoall_send_odd",
    "allreduce_recv_short",
    "allreduce_bad_op",
    "allreduce_mixed_types",
    "reduce_scatter_block_bad_op",
    "reduce_root",
    "gather_root_recv_short",
    "scatter_root_send_short",
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", REJECT_CASES)
def test_a_bad_argument_on_one_rank_raises_on_every_node(case: str) -> None:
    """The other nodes' ranks once went on into MPI calls over `cross` and waited there
    forever (MPI has no deadline): every rank must raise in the call, the bad one its own
    error and the others PeerRejectedError naming it, and the communicator stay usable."""
    nranks = 4
    proc = run_mpiexec(
        nranks,
        MPI_SCRIPTS / "hierarchy_rejects.py",
        case,
        timeout=45,
        env={"SHMCOLL_NODE_SPLIT": "2", "SHMCOLL_TIMEOUT": "10"},
    )
    out = proc.stdout
    assert "FAIL" not in out, out
    raised = dict(re.findall(rf"rank (\d+): {case} raised (\w+ rank=\d+)", out))
    bad = nranks - 1
    want = {str(r): f"PeerRejectedError rank={bad}" for r in range(bad)}
    assert {r: raised.get(r) for r in want} == want, out
    assert raised.get(str(bad), "").endswith(f"rank={bad}"), out
    assert not raised[str(bad)].startswith("PeerRejectedError"), out
    assert len(re.findall(r"rank \d+: usable", out)) == nranks, out


@pytest.mark.timeout(100)
@pytest.mark.parametrize(("nranks", "split"), [(4, 2), (3, 1)])
def test_specifications_read_as_mpi_reads_them(nranks: int, split: int) -> None:
    """Allreduce from float32 into float64 (mpi4py: a datatype mismatch; HierComm once
    combined the float32 bytes as float64), counts per rank in Allgather's, Gather's
    receive and Scatter's, Reduce_scatter_block's send specifications (once BadBufferError,
    numpy's ValueError, or reads past the counted bytes), and IN_PLACE at the root only of
    Reduce, Gather and Scatter (the root once went to MPI alone) give mpi4py's outcome."""
    proc = run_mpiexec(
        nranks,
        MPI_SCRIPTS / "hierarchy_specs.py",
        timeout=90,
        env={"SHMCOLL_NODE_SPLIT": str(split), "SHMCOLL_TIMEOUT": "10"},
    )
    assert re.search(r"specs compared=8 failures=0", proc.stdout), proc.stdout


def _outcomes(variable: str, values: list[str]) -> dict[int, str]:
    """Each rank's outcome of ``shmcoll.Comm(MPI.COMM_WORLD)`` with `variable` set per rank
    (``-``: unset), from mpi_scripts/per_rank_env.py; a rank that hangs fails the test."""
    proc = run_mpiexec(
        len(values), MPI_SCRIPTS / "per_rank_env.py", variable, *values, timeout=40, check=False
    )
    got = dict(re.findall(r"@@rank (\d+): (.*?)@@", proc.stdout))
    assert len(got) == len(values), proc.stdout + proc.stderr
    return {int(r): line for r, line in got.items()}


@pytest.mark.parametrize("values", [["-", "x"], ["2", "0"], ["x", "x"]])
def test_node_split_bad_on_one_rank_raises_on_every_rank(values: list[str]) -> None:
    """SHMCOLL_NODE_SPLIT decides which collectives creation runs (the hierarchy's splits or
    the flat communicator's); a rank where it is not valid used to raise alone and leave
    its peers waiting in creation forever. Now the ranks agree on it in the creation
    exchange: the bad rank raises its own error, the others one naming it."""
    got = _outcomes("SHMCOLL_NODE_SPLIT", values)
    first_bad = next(r for r, v in enumerate(values) if v in ("x", "0"))
    for rank, line in got.items():
        assert line.startswith("ERR ArgumentError: "), (rank, got)
        if values[rank] in ("x", "0"):
            assert f"environment: SHMCOLL_NODE_SPLIT={values[rank]!r} is " in line, (rank, got)
            assert "rank " not in line.split(": ", 1)[1][:6], (rank, got)
        else:
            assert f"rank {first_bad}: environment: SHMCOLL_NODE_SPLIT={values[first_bad]!r}" in line, got


@pytest.mark.parametrize(
    ("values", "seen"),
    [(["1", "2"], "1 on rank 0; 2 on rank 1"), (["-", "2"], "unset on rank 0; 2 on rank 1")],
)
def test_node_split_differing_between_ranks_is_a_mismatch_on_every_rank(values: list[str], seen: str) -> None:
    """Different SHMCOLL_NODE_SPLIT values sent ranks down different collectives (MPI aborted
    the job with "Message truncated", or ranks hung); now every rank raises MismatchError
    listing what each rank read."""
    got = _outcomes("SHMCOLL_NODE_SPLIT", values)
    for rank, line in got.items():
        assert line.startswith("ERR MismatchError: environment: SHMCOLL_NODE_SPLIT differs"), (rank, got)
        assert seen in line, (rank, got)


def test_node_split_set_alike_still_serves() -> None:
    """The agreement costs nothing to a good setting: alike on every rank it serves."""
    assert set(_outcomes("SHMCOLL_NODE_SPLIT", ["1", "1"]).values()) == {"OK HierComm -"}
    assert set(_outcomes("SHMCOLL_NODE_SPLIT", ["2", "2"]).values()) == {"OK Comm model"}
