"""A collective call crosses from Python into the engine once: the native method reads
what it can, asks the Python resolver (`shmcoll.resolve`) for the rest in the same call,
and runs the call itself; no second native method (a resolved-buffer entry, a rejection,
an agreement to fall back) is entered from Python afterwards. A plain NumPy call runs no
Python code at all. Counted with a profile hook: every native method of the
communicator called from Python code, and every Python frame, while the call runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import check_all, run_ranks


def profiled(comm: shmcoll.Comm, call: Callable[[], Any]) -> tuple[list[str], list[str], str]:
    """(native methods of `comm` entered from Python, Python functions that ran, the
    class of the exception raised or "") while `call()` runs; `call` itself is left out."""
    native: list[str] = []
    frames: list[str] = []
    outer = call.__code__

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and getattr(arg, "__self__", None) is comm:
            native.append(arg.__name__)
        elif event == "call" and frame.f_code is not outer:
            frames.append(frame.f_code.co_name)

    raised = ""
    sys.setprofile(hook)
    try:
        call()
    except Exception as e:
        raised = type(e).__name__
    finally:
        sys.setprofile(None)
    return native, frames, raised


def calls_and_crossings() -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    fails: list[str] = []

    def expect(
        label: str, got: tuple[list[str], list[str], str], name: str, python: bool, raised: str
    ) -> None:
        native, frames, exc = got
        if native != [name]:
            fails.append(f"{label}: native entries {native}, want [{name!r}]")
        if python != bool(frames):
            fails.append(f"{label}: Python frames {frames}")
        if exc != raised:
            fails.append(f"{label}: raised {exc!r}, want {raised!r}")

    # Plain NumPy arrays: straight into the engine, no Python frame.
    x, y = np.arange(8.0) + me, np.zeros(8)
    expect("Allreduce of arrays", profiled(comm, lambda: comm.Allreduce(x, y)), "Allreduce", False, "")
    if not np.array_equal(y, sum(np.arange(8.0) + j for j in range(p))):
        fails.append(f"Allreduce: {y}")
    s, r = np.arange(2.0 * p) + 10 * me, np.zeros(2 * p)
    expect("Alltoall of arrays", profiled(comm, lambda: comm.Alltoall(s, r)), "Alltoall", False, "")

    # A list specification only Python reads (a displacement): the resolver, in the call.
    big = np.concatenate([[-1.0], s])
    r[:] = 0
    run = lambda: comm.Alltoall([big, (2, 1), "d"], [r, "d"])  # noqa: E731
    expect("Alltoall of [buf, (count, displ), dt]", profiled(comm, run), "Alltoall", True, "")
    want = np.concatenate([np.arange(2.0 * me, 2.0 * me + 2) + 10 * j for j in range(p)])
    if not np.array_equal(r, want):
        fails.append(f"Alltoall with a displacement: {r} != {want}")

    # A vector specification only Python reads (one count for every rank).
    mine, every = np.full(3, float(me)), np.zeros(3 * p)
    run = lambda: comm.Allgatherv(mine, [every, 3, "d"])  # noqa: E731
    expect("Allgatherv of [buf, count, dt]", profiled(comm, run), "Allgatherv", True, "")
    if not np.array_equal(every, np.repeat(np.arange(float(p)), 3)):
        fails.append(f"Allgatherv: {every}")

    # What MPI would serve, without MPI: rejected on every rank, in the same call.
    swapped, out = (np.arange(4.0) + me).astype(">f8"), np.zeros(4, ">f8")
    run = lambda: comm.Allreduce(swapped, out)  # noqa: E731
    expect("Allreduce of >f8 without MPI", profiled(comm, run), "Allreduce", True, "UnsupportedError")

    # A bad specification on the last rank: it raises its error, the others theirs.
    r[:] = 0
    spec: Any = [s, (-1, 1), "d"] if me == p - 1 else s
    run = lambda: comm.Alltoall(spec, r)  # noqa: E731
    bad = "ArgumentError" if me == p - 1 else "PeerRejectedError"
    expect("Alltoall of a bad specification", profiled(comm, run), "Alltoall", me == p - 1, bad)
    comm.Free()
    return fails


@pytest.mark.parametrize("nranks", [2, 3])
def test_a_call_enters_the_engine_once(nranks: int) -> None:
    check_all(run_ranks(nranks, calls_and_crossings))
