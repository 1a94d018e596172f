"""Signals while ranks wait: Ctrl-C (SIGINT) and SIGTERM end every rank of a job within a
second or two, under the standalone launcher and under mpiexec, instead of leaving the
ranks that sit inside a collective waiting for their deadline. A rank interrupted inside a
collective raises what the signal's handler raised (KeyboardInterrupt), its peers raise
PeerFailedError, and /dev/shm keeps nothing (the conftest fixtures check every test).

The deadline is set far above the bounds asserted here, so a rank that only stopped at its
deadline fails the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import find_tool, mpi_available, run_ranks, subprocess_env

#: Far beyond every bound below: a rank that waits for it shows as a failure.
DEADLINE_ENV = {"SHMCOLL_TIMEOUT": "60"}

#: How long a whole job may take to end after the signal (a loaded 2-core machine included).
END_WITHIN_S = 2.5


class Stop(Exception):
    """What the tests' own SIGTERM handler raises."""


def _raise_stop(signum: int, frame: Any) -> None:
    raise Stop(f"signal {signum}")


def _interrupted_while_waiting(signum: int, count: int) -> dict[str, Any]:
    """Rank 0 waits in an Alltoall that rank 1 joins late; a thread of rank 0 sends `signum`
    to its own process meanwhile. Rank 1 then calls and must learn of rank 0's abort
    without waiting for its deadline."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_stop)
    comm = shmcoll.Comm()
    s = np.ones(comm.size * count)
    r = np.zeros(comm.size * count)
    comm.Barrier()
    exc: BaseException | None = None
    t_sent = [0.0]
    if comm.rank == 0:

        def send() -> None:
            t_sent[0] = time.monotonic()
            os.kill(os.getpid(), signum)

        threading.Timer(0.5, send).start()
        try:
            comm.Alltoall(s, r)
        except BaseException as e:  # KeyboardInterrupt is what is tested
            exc = e
        elapsed = time.monotonic() - t_sent[0]
        # Stay alive while rank 1 calls: it must learn of the abort from the segment, not
        # from this process's exit.
        time.sleep(2.5)
    else:
        time.sleep(1.5)  # outside the call: rank 0 is interrupted meanwhile
        t0 = time.monotonic()
        try:
            # The first call may complete: rank 0 had published its part before it was
            # interrupted. The next cannot, and must fail at once.
            for _ in range(3):
                comm.Alltoall(s, r)
        except shmcoll.ShmcollError as e:
            exc = e
        elapsed = time.monotonic() - t0
    nxt = None
    try:
        comm.Barrier()
    except Exception as e:
        nxt = type(e).__name__
    return {
        "exc": None if exc is None else type(exc).__name__,
        "msg": str(exc),
        "elapsed": elapsed,
        "next": nxt,
    }


@pytest.mark.timeout(40)
@pytest.mark.parametrize(
    ("signum", "raised"),
    [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "Stop")],
    ids=["sigint", "sigterm-handler"],
)
# Small calls hold the GIL until they block and release it from the wait; large ones
# release it before they start: the handlers must run on both paths.
@pytest.mark.parametrize("count", [16, 1 << 16], ids=["gil-released-on-block", "gil-released-up-front"])
def test_a_rank_waiting_in_a_collective_runs_the_signal_handler(signum: int, raised: str, count: int) -> None:
    res = run_ranks(2, _interrupted_while_waiting, signum, count, timeout=30, env=DEADLINE_ENV)
    assert res[0]["exc"] == raised, res
    assert res[0]["elapsed"] < 1.0, f"rank 0 raised {res[0]['elapsed']:.2f} s after the signal"
    assert res[0]["next"] == "CommBrokenError", res
    assert res[1]["exc"] == "PeerFailedError", res
    assert "aborted" in res[1]["msg"], res
    assert res[1]["elapsed"] < 1.0, f"rank 1 waited {res[1]['elapsed']:.2f} s"
    assert res[1]["next"] == "CommBrokenError", res


def _handler_that_returns() -> dict[str, Any]:
    """A SIGINT handler that returns (ignores the signal) must not break the call."""
    hits: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: hits.append(signum))
    comm = shmcoll.Comm()
    x = np.full(4, comm.rank + 1.0)
    out = np.zeros(4)
    comm.Barrier()
    if comm.rank == 0:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    else:
        time.sleep(1.0)
    comm.Allreduce(x, out)
    return {"hits": len(hits), "sum": float(out[0])}


@pytest.mark.timeout(40)
def test_a_handler_that_returns_lets_the_collective_finish() -> None:
    res = run_ranks(2, _handler_that_returns, timeout=30, env=DEADLINE_ENV)
    assert res[0]["hits"] == 1, res
    assert [r["sum"] for r in res] == [3.0, 3.0], res


#: A rank script that loops Alltoalls forever (until a signal ends it), telling the test on
#: stdout when it has started.
LOOP_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    {setup}
    s = np.ones(comm.size * 4096)
    r = np.zeros(comm.size * 4096)
    comm.Barrier()
    if comm.rank == 0:
        print("looping", flush=True)
    i = 0
    while True:
        comm.Alltoall(s, r)
        i += 1
        if comm.rank == 1 and i % 1000 == 0:
            # rank 1 lingers between calls, so that at any moment one rank is likely to
            # wait inside a collective for the other
            import time
            time.sleep(0.01)
    """
)

SHMCOLL_SETUP = "import shmcoll\ncomm = shmcoll.Comm()"
MPI_SETUP = "from mpi4py import MPI  # noqa: F401\nimport shmcoll\ncomm = shmcoll.Comm()"


def _start_job(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """Start `cmd` in a new session (its own process group, as a terminal's foreground
    job) and wait until rank 0 loops."""
    proc = subprocess.Popen(
        cmd,
        env=subprocess_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "looping" not in line:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"the job did not start: {line!r}\n{err}")
    time.sleep(0.3)  # let the ranks settle into the loop
    return proc


def _signal_and_time(proc: subprocess.Popen[str], signum: int, group: bool) -> tuple[int, float, str]:
    """Send `signum` to the job's process group (as a terminal's Ctrl-C does) or to its
    launcher alone; the exit code, the seconds until every process ended, and stderr."""
    t0 = time.monotonic()
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the job did not end within 30 s of signal {signum}")
    # The ranks may outlive the launcher: wait until the group is empty.
    while True:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() - t0 > 30:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("ranks outlived the launcher by 30 s")
        time.sleep(0.02)
    return proc.returncode, time.monotonic() - t0, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("signum", "group"),
    [(signal.SIGINT, True), (signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
    ids=["ctrl-c", "sigint-to-launcher", "sigterm-to-launcher", "sigterm-to-group"],
)
def test_shmcoll_run_ends_every_rank_on_a_signal(tmp_path: Path, signum: int, group: bool) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP_SCRIPT.format(setup=SHMCOLL_SETUP))
    cmd = [sys.executable, "-m", "shmcoll.cli", "run", "-n", "2", str(script)]
    proc = _start_job(cmd, DEADLINE_ENV)
    code, took, err = _signal_and_time(proc, signum, group)
    assert code != 0, err
    assert took < END_WITHIN_S, f"the job took {took:.2f} s to end\n{err}"


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("group", [True, False], ids=["ctrl-c", "sigint-to-mpiexec"])
def test_mpiexec_ends_every_rank_on_ctrl_c(tmp_path: Path, group: bool) -> None:
    if not mpi_available():
        pytest.skip("mpiexec and mpi4py are needed (pip install mpich mpi4py)")
    mpiexec = find_tool("mpiexec")
    assert mpiexec is not None
    script = tmp_path / "loop.py"
    script.write_text(LOOP_SCRIPT.format(setup=MPI_SETUP))
    proc = _start_job([mpiexec, "-n", "2", sys.executable, str(script)], DEADLINE_ENV)
    code, took, err = _signal_and_time(proc, signal.SIGINT, group)
    assert code != 0, err
    assert took < END_WITHIN_S, f"the job took {took:.2f} s to end\n{err}"


def _terminated_peer(outdir: str) -> None:
    """Rank 1 gets SIGTERM with its default action (death) 0.5 s after the barrier, while
    rank 0 waits for it in an Alltoall; rank 0 writes what it raised and when."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    comm = shmcoll.Comm()
    s = np.ones(comm.size * 16)
    r = np.zeros(comm.size * 16)
    comm.Barrier()
    if comm.rank == 1:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        time.sleep(30)
        return
    t0 = time.monotonic()
    try:
        comm.Alltoall(s, r)
        exc = "none"
    except shmcoll.ShmcollError as e:
        exc = type(e).__name__
    Path(outdir, "rank0.txt").write_text(f"{exc} {time.monotonic() - t0}")


@pytest.mark.timeout(40)
def test_a_peer_killed_by_sigterm_is_a_failed_peer_at_once(tmp_path: Path) -> None:
    with pytest.raises(shmcoll.SpawnError, match="rank 1: process exited with code -15"):
        run_ranks(2, _terminated_peer, str(tmp_path), timeout=30, env=DEADLINE_ENV)
    exc, waited = (tmp_path / "rank0.txt").read_text().split()
    assert exc == "PeerFailedError"
    # 0.5 s until the signal, then the next health check (every millisecond of the wait).
    assert float(waited) < 1.0, f"rank 0 learnt of the death after {float(waited) - 0.5:.2f} s"
