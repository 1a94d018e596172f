"""Run under ``mpiexec -n N`` with ``SHMCOLL_NODE_SPLIT=k``, with a case name: the last
rank (on the last node) passes a bad argument to one collective of a HierComm, and every
rank must raise in that call, none wait for it: the last rank its own error, the others
PeerRejectedError naming it. The communicator must then still work (an Allreduce that
gives MPI's result). Prints ``rank R: <case> raised <class> rank=<r>`` and then ``rank R:
usable``, or a line with ``FAIL``."""

from __future__ import annotations

import sys
import warnings

import numpy as np
from mpi4py import MPI

import shmcoll
from shmcoll.hierarchy import HierComm

W = MPI.COMM_WORLD
P, ME = W.Get_size(), W.Get_rank()
BAD = ME == P - 1


def bcast_root(c: HierComm) -> None:
    c.Bcast(np.zeros(4), root=P + 5 if BAD else 0)


def allgather_send_short(c: HierComm) -> None:
    c.Allgather(np.zeros(1 if BAD else 2), np.zeros(2 * P))


def alltoall_send_odd(c: HierComm) -> None:
    c.Alltoall(np.zeros(2 * P + (1 if BAD else 0)), np.zeros(2 * P))


def allreduce_recv_short(c: HierComm) -> None:
    c.Allreduce(np.ones(8), np.zeros(7 if BAD else 8))


def allreduce_bad_op(c: HierComm) -> None:
    c.Allreduce(np.ones(8), np.zeros(8), op="bogus" if BAD else MPI.SUM)


def allreduce_mixed_types(c: HierComm) -> None:
    c.Allreduce(np.ones(8, np.float32 if BAD else np.float64), np.zeros(8))


def reduce_scatter_block_bad_op(c: HierComm) -> None:
    c.Reduce_scatter_block(np.ones(2 * P), np.zeros(2), op="bogus" if BAD else MPI.SUM)


def reduce_root(c: HierComm) -> None:
    c.Reduce(np.ones(4), np.zeros(4), root=-1 if BAD else 0)


def gather_root_recv_short(c: HierComm) -> None:
    # the root is the bad rank: its receive buffer cannot hold every rank's block
    c.Gather(np.ones(2), np.zeros(2 * P - (1 if BAD else 0)), root=P - 1)


def scatter_root_send_short(c: HierComm) -> None:
    c.Scatter(np.ones(2 * P - (1 if BAD else 0)), np.zeros(2), root=P - 1)


def say(line: str) -> None:
    """One line in one write (print's two writes interleave with other ranks' lines)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


CASES = {
    f.__name__: f
    for f in list(globals().values())
    if callable(f) and f.__module__ == "__main__" and f.__name__ not in ("say", "main")
}


def main() -> int:
    warnings.simplefilter("ignore", RuntimeWarning)
    c = shmcoll.Comm(W)
    assert isinstance(c, HierComm), c
    case = CASES[sys.argv[1]]
    try:
        case(c)
    except shmcoll.PeerRejectedError as e:
        say(f"rank {ME}: {case.__name__} raised PeerRejectedError rank={e.rank}")
    except shmcoll.ShmcollError as e:
        say(f"rank {ME}: {case.__name__} raised {type(e).__name__} rank={ME}: {e}")
    else:
        say(f"rank {ME}: FAIL {case.__name__} returned")
    x = np.arange(5.0) + ME
    y, ref = np.zeros(5), np.zeros(5)
    W.Allreduce(x, ref)
    c.Allreduce(x, y)
    say(f"rank {ME}: usable" if np.array_equal(y, ref) else f"rank {ME}: FAIL {y} != {ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
