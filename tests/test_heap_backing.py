"""Concurrent jobs on a /dev/shm too small for all their heaps: every rank either gets its
array or raises HeapExhaustedError; none dies of SIGBUS.

A job's default heap is half of the /dev/shm free when it starts, and jobs that start
together all see the others' heaps still empty. Their heaps together then promise more
than /dev/shm holds, so the heap backs each block when it hands it out (fallocate) and
refuses the block it cannot back, instead of mapping a page that faults when first
touched. The test mounts a small tmpfs over /dev/shm in a private mount namespace
(``unshare -m``), so it needs root and never touches the machine's /dev/shm."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import subprocess_env

TMPFS_MIB = 64
JOBS = 3
RANKS = 2

#: One rank of a job: create the communicator, wait until every rank of every job has one
#: (so that each job sized its heap while the others' were empty), fill the heap as far as
#: heap_usage() says it may, report, and hold the memory until every rank has tried.
RANK = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import numpy as np
    import shmcoll

    sync, everyone = Path(sys.argv[1]), int(sys.argv[2])

    def meet(stage, timeout):
        (sync / f"{stage}.{os.getpid()}").touch()
        deadline = time.monotonic() + timeout
        while len(list(sync.glob(f"{stage}.*"))) < everyone and time.monotonic() < deadline:
            time.sleep(0.02)

    comm = shmcoll.Comm()
    cap = comm.heap_usage()[1]
    meet("created", 60)
    try:
        a = comm.empty(cap // 8 - 1024)
        a[:] = 1.0
        outcome = "ok"
    except shmcoll.HeapExhaustedError as e:
        a, outcome = None, "HeapExhaustedError"
    print(f"RESULT cap={cap} {outcome}", flush=True)
    meet("filled", 20)
    del a
    comm.Free()
    """
)

#: Inside the namespace: mount the tmpfs, run the jobs at once, report each one's output
#: and exit status.
DRIVER = textwrap.dedent(
    """
    import subprocess, sys
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size={mib}m", "tmpfs", "/dev/shm"], check=True)
    rank, sync, jobs, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cmd = [sys.executable, "-m", "shmcoll.cli", "run", "-n", str(ranks), rank, sync, str(jobs * ranks)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(jobs)]
    for j, p in enumerate(procs):
        out, _ = p.communicate(timeout=90)
        print(f"=== job {{j}} exit {{p.returncode}}")
        print(out, flush=True)
    """
).format(mib=TMPFS_MIB)


def _namespace_reason() -> str | None:
    """Why the test cannot make a private /dev/shm here, if it cannot."""
    if os.geteuid() != 0:
        return "mounting a private tmpfs over /dev/shm needs root"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare and mount (util-linux)"
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=1m",
            "tmpfs",
            "/dev/shm",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a private mount namespace: {probe.stderr.strip()}"
    return None


@pytest.mark.timeout(150)
def test_concurrent_jobs_on_a_full_dev_shm_raise_instead_of_sigbus(tmp_path: Path) -> None:
    reason = _namespace_reason()
    if reason is not None:
        pytest.skip(reason)
    (tmp_path / "rank.py").write_text(RANK)
    (tmp_path / "driver.py").write_text(DRIVER)
    sync = tmp_path / "sync"
    sync.mkdir()
    env = subprocess_env({"SHMCOLL_TIMEOUT": "60", "PYTHONFAULTHANDLER": "1"})
    for v in ("SHMCOLL_HEAP_BYTES", "SHMCOLL_STAGING_BYTES", "SHMCOLL_INLINE_BYTES"):
        env.pop(v, None)  # the default sizing is what over-commits
    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            str(tmp_path / "driver.py"),
            str(tmp_path / "rank.py"),
            str(sync),
            str(JOBS),
            str(RANKS),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    report = f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert "Bus error" not in proc.stdout, report
    jobs = re.split(r"^=== job \d+ exit ", proc.stdout, flags=re.M)[1:]
    assert len(jobs) == JOBS, report
    caps, outcomes = [], []
    for job in jobs:
        status = int(job.split("\n", 1)[0])
        assert status == 0, f"a rank of this job failed (exit {status}, 128+7 is SIGBUS)\n{report}"
        results = re.findall(r"^RESULT cap=(\d+) (\w+)$", job, flags=re.M)
        assert len(results) == RANKS, report
        caps += [int(c) for c, _ in results]
        outcomes += [o for _, o in results]
    assert set(outcomes) <= {"ok", "HeapExhaustedError"}, report
    # The scenario must over-commit: the heaps together promise more than the tmpfs holds,
    # so some rank had to be refused, and the first job to fill found room.
    assert sum(caps) > TMPFS_MIB << 20, report
    assert "HeapExhaustedError" in outcomes and "ok" in outcomes, report
