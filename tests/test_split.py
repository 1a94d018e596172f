"""Comm.Split (mpi4py's signature) without MPI: groups by color, ranks by (key, rank),
each group a working communicator with its own segment; a negative color gives None."""

from __future__ import annotations

import numpy as np
import pytest

import shmcoll
from conftest import run_ranks

pytestmark = pytest.mark.timeout(60)


def split(mode: str) -> tuple[int, int, list[int]] | None:
    comm = shmcoll.Comm()
    me = comm.rank
    if mode == "halves":
        sub = comm.Split(me % 2, key=me)
    elif mode == "reversed":
        sub = comm.Split(0, key=-me)
    else:
        sub = comm.Split(-1 if me == 0 else 1, key=me)
    if sub is None:
        comm.Free()
        return None
    # who is in my group, in the group's rank order
    send = np.full(sub.size, me, np.int64)
    got = np.empty(sub.size, np.int64)
    sub.Alltoall(send, got)
    total = np.empty(1, np.int64)
    sub.Allreduce(np.array([me], np.int64), total)
    out = (sub.rank, sub.size, [int(g) for g in got])
    assert int(total[0]) == sum(out[2])
    sub.Free()
    comm.Free()
    return out


@pytest.mark.parametrize("nranks", [1, 3, 4])
def test_split_into_halves(nranks: int) -> None:
    res = run_ranks(nranks, split, "halves")
    for r, (sub_rank, sub_size, members) in enumerate(res):
        assert members == [j for j in range(nranks) if j % 2 == r % 2]
        assert sub_rank == members.index(r) and sub_size == len(members)


def test_split_orders_by_key() -> None:
    res = run_ranks(4, split, "reversed")
    assert [r[2] for r in res] == [[3, 2, 1, 0]] * 4
    assert [r[0] for r in res] == [3, 2, 1, 0]


def test_negative_color_gives_none() -> None:
    res = run_ranks(3, split, "undefined")
    assert res[0] is None
    assert res[1] == (0, 2, [1, 2]) and res[2] == (1, 2, [1, 2])
