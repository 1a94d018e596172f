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
