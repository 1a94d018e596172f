"""Who may trace a rank (CMA and pidfd_getfd need ptrace access): the ranks of a job reach
each other as far as Yama allows, and ranks that share no launcher are not opened to every
process of the user. The expectations follow this machine's kernel.yama.ptrace_scope.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import shmcoll
from conftest import subprocess_env
from shmcoll import _core

pytestmark = pytest.mark.timeout(90)


def yama_scope() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return None


def can_ptrace_anyone() -> bool:
    """Whether this process has CAP_SYS_PTRACE (which Yama's scopes 1 and 2 let through)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 19 & 1)
    return False


def _cma_ok() -> bool:
    return bool(shmcoll.Comm().cma_ok)


def test_ranks_of_one_launcher_reach_each_other_as_far_as_yama_allows() -> None:
    scope = yama_scope()
    expected = scope in (None, 0, 1) or (scope == 2 and can_ptrace_anyone())
    assert shmcoll.spawn(2, _cma_ok, timeout=60, start_method="fork") == [expected] * 2


# A rank started as an orphan: its launcher exits at once, so that its parent becomes init
# (or the nearest subreaper) before it joins; it reports its ancestry and the outcome.
ORPHAN = textwrap.dedent(
    """
    import json, os, sys, time
    launcher = os.getpid()
    if os.fork():
        os._exit(0)
    while os.getppid() == launcher:
        time.sleep(0.01)
    with open(sys.argv[1] + ".pid", "w") as f:
        f.write(str(os.getpid()))
    import numpy as np
    import shmcoll

    def chain(pid):
        out = [pid]
        while pid > 1:
            stat = open(f"/proc/{pid}/stat").read()
            pid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if pid == 0:
                break
            out.append(pid)
        return out

    comm = shmcoll.Comm()
    x = np.full(1 << 18, comm.rank + 1.0)
    total = comm.allreduce(x)
    res = {"chain": chain(os.getpid()), "cma_ok": comm.cma_ok, "sum_ok": bool((total == 3.0).all())}
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump(res, f)
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    """
)


def test_ranks_without_a_common_launcher_are_not_opened_to_everyone(tmp_path: Path) -> None:
    seg = _core.SegmentHandle(2)
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    try:
        for r, out in enumerate(outs):
            env = {
                "SHMCOLL_SEGMENT": seg.name,
                "SHMCOLL_RANK": str(r),
                "SHMCOLL_SIZE": "2",
                "SHMCOLL_TIMEOUT": "30",
            }
            subprocess.run(
                [sys.executable, "-c", ORPHAN, str(out)],
                env=subprocess_env(env),
                timeout=30,
                check=True,
            )
        deadline = time.monotonic() + 60
        while not all(o.exists() for o in outs):
            assert time.monotonic() < deadline, "the orphaned ranks did not finish"
            time.sleep(0.05)
    finally:
        seg.unlink()
        for o in outs:
            # An orphan that did not finish is nobody's child: end it here.
            pid_file = Path(f"{o}.pid")
            if not o.exists() and pid_file.exists():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    res = [json.loads(o.read_text()) for o in outs]
    # CMA or not, the collective is served.
    assert all(r["sum_ok"] for r in res), res
    assert res[0]["cma_ok"] == res[1]["cma_ok"], res
    a, b = res[0]["chain"], res[1]["chain"]
    common = next((p for p in a if p in b), 0)
    scope = yama_scope()
    if scope in (None, 0):
        expected = True
    elif scope == 1:
        # Only a shared ancestor other than init is declared (a subreaper, if one adopted
        # both orphans); otherwise only a privileged peer gets through.
        expected = common > 1 or can_ptrace_anyone()
    elif scope == 2:
        expected = can_ptrace_anyone()
    else:
        expected = False
    assert res[0]["cma_ok"] == expected, (scope, res)
