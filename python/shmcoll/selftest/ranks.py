"""The selftest's tables at given rank counts: ``shmcoll bench alltoall`` and ``shmcoll bench
allreduce`` (shmcoll against MPI in the same launch), each in its own process, after one
measurement of the machine's floors (``shmcoll bench machine``) that every launch's table
shows. A count above the CPUs this process may run on is skipped, with a line that says so:
ranks that share CPUs measure the scheduler, not the collectives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

#: The collectives whose tables the selftest prints.
OPS = ("alltoall", "allreduce")


@dataclass(frozen=True)
class Plan:
    """What each table measures: OSU-style sizes and repetitions (``shmcoll bench``'s)."""

    sizes: str
    iters: int
    warmup: int
    rounds: int


FULL = Plan(sizes="4K:1M", iters=100, warmup=10, rounds=3)
QUICK = Plan(sizes="4K", iters=10, warmup=2, rounds=1)


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


def _shmcoll(*args: str) -> list[str]:
    return [sys.executable, "-m", "shmcoll.cli", *args]


def run(counts: list[int], plan: Plan, echo: Callable[[str], None]) -> int:
    """Print the tables at each of `counts`; 0, or 1 when a launch failed."""
    cpus = usable_cpus()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="shmcoll-selftest-") as tmp:
        floors = os.path.join(tmp, "machine.json")
        echo("the machine's floors (shmcoll bench machine):")
        sys.stdout.flush()
        if subprocess.call(_shmcoll("bench", "machine", "--json", floors)) != 0:
            echo("measuring the floors failed")
            return 1
        env = {**os.environ, "SHMCOLL_BENCH_MACHINE": floors}
        for n in counts:
            if n > cpus:
                echo(f"{n} ranks: skipped, this process may use {cpus} CPUs")
                continue
            for op in OPS:
                echo(f"\n{op} at {n} ranks (shmcoll bench {op} -n {n} -m {plan.sizes}):")
                sys.stdout.flush()
                cmd = _shmcoll(
                    "bench", op, "-n", str(n), "-m", plan.sizes,
                    "-i", str(plan.iters), "-x", str(plan.warmup), "--rounds", str(plan.rounds),
                )  # fmt: skip
                rc = subprocess.call(cmd, env=env)
                if rc != 0:
                    echo(f"{op} at {n} ranks: the launch failed (exit {rc})")
                    failed = 1
    return failed
