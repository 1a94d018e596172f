"""``shmcoll bench machine``: what this machine allows a collective right now, the floors
the collective tables are judged against.

Three probes, each the best of three tries (a shared machine only ever slows a try down):

* the handoff: two processes on one CPU take turns through ``sched_yield``; one handoff
  is what every call costs each rank when ranks outnumber CPUs (every rank must run to
  enter the call, so a CPU with k ranks switches at least k times per call);
* the line: two processes on two CPUs bounce a cache line, spinning; a call needs at
  least an arrival and a release, two one-way trips, when every rank has its CPU;
* the write ceiling: every CPU streams a hot source to memory at once
  (:func:`shmcoll.bench.copy.node_write_ceilings`); a call that writes B bytes in all
  cannot take less than what of B outgrows the caches (L2s and L3: written lines can
  stay there until after the call) over it. Without that allowance a 2-rank Allgather of
  1 MiB per rank (4 MiB written) ran in a third of its "floor".

On a shared VM all three move within minutes, and not together: on the 2-vCPU Zen 4 VM
of this project the handoff took 1.9 µs in one hour and 2.9 µs in the next, and the
write ceiling of its two CPUs at once 54 GB/s in one minute and 27-28 GB/s in others
(as if the host had moved the vCPUs from two cores onto the two threads of one).
``bench/mpi_tables.sh`` records this before every launch, next to its CSV, and
``bench/tables_md.py`` turns it into each launch's floor.

Run alone, not inside a launch: the probes need the CPUs to themselves.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import _core
from .shapes import call_shape

#: Warm-up rounds of each ping-pong (untimed): both sides are running when the clock starts.
WARMUP_ROUNDS = 200


@dataclass(frozen=True)
class MachineState:
    """The probes' results at one moment (see the module docstring)."""

    cpus: int
    #: µs per handoff between two processes sharing one CPU.
    handoff_us: float
    #: ns for a cache line's one-way trip between two CPUs (None with a single CPU).
    line_ns: float | None
    #: GB/s written by one CPU streaming, and by every CPU at once.
    write_1cpu_gbs: float
    write_all_gbs: float
    #: When it was measured (UTC, ISO 8601).
    when: str
    #: Bytes the caches can hold of a call's writes: every CPU's L2 and the L3.
    cache_bytes: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MachineState:
        # Records from before cache_bytes existed read as 0: their floors count every byte.
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _play(word: np.ndarray, me: int, rounds: int, yield_cpu: bool) -> float:
    """One side: the untimed warm-up, then `rounds` timed rounds (seconds)."""
    _core.ping_pong(word, me, 0, WARMUP_ROUNDS, yield_cpu)
    return _core.ping_pong(word, me, WARMUP_ROUNDS, rounds, yield_cpu)


def ping_pong(cpu0: int, cpu1: int, rounds: int, yield_cpu: bool) -> float:
    """Seconds per one-way handoff between this process on `cpu0` and a forked child on
    `cpu1` (the same CPU for a yield handoff), over `rounds` round trips."""
    word_map = mmap.mmap(-1, 4096)  # anonymous and shared: the child sees the same page
    word = np.frombuffer(word_map, np.uint64, 1)
    with warnings.catch_warnings():
        # The child only runs native code and _exit()s: no lock of this process is taken.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child process
        code = 1
        try:
            os.sched_setaffinity(0, {cpu1})
            _play(word, 1, rounds, yield_cpu)
            code = 0
        finally:
            os._exit(code)
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu0})
        took = _play(word, 0, rounds, yield_cpu)
    finally:
        os.sched_setaffinity(0, before)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("the probe's child process failed")
    return took / (2 * rounds)


def measure(tries: int = 3, handoff_rounds: int = 20_000, line_rounds: int = 100_000) -> MachineState:
    """Probe this machine now (about a second)."""
    from .copy import node_write_ceilings

    cpus = sorted(os.sched_getaffinity(0))
    handoff = min(ping_pong(cpus[0], cpus[0], handoff_rounds, True) for _ in range(tries))
    line = None
    if len(cpus) > 1:
        line = min(ping_pong(cpus[0], cpus[1], line_rounds, False) for _ in range(tries))
    n, one, every = node_write_ceilings()
    hw = _core.machine()
    return MachineState(
        cache_bytes=hw["l2_bytes"] * hw["logical_cpus"] + hw["l3_bytes"],
        cpus=n,
        handoff_us=handoff * 1e6,
        line_ns=None if line is None else line * 1e9,
        write_1cpu_gbs=one,
        write_all_gbs=every,
        when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def sync_floor_us(nranks: int, state: MachineState) -> float:
    """The least time a call of `nranks` ranks spends synchronising: with more ranks than
    CPUs, a CPU holding k ranks switches k times (each must run to enter the call);
    otherwise an arrival and a release, two one-way trips of a line."""
    if nranks <= 1:
        return 0.0
    per_cpu = math.ceil(nranks / max(state.cpus, 1))
    if per_cpu > 1:
        return per_cpu * state.handoff_us
    return 2 * (state.line_ns or 0.0) / 1000


def bytes_written(op: str, size: int, nranks: int) -> int:
    """Bytes that every receive buffer together must take in one call of `shmcoll bench
    <op>` at `size` (its sizes: see bench.collective), out of place: what no algorithm
    can avoid writing."""
    if op == "barrier":
        return 0
    if op == "alltoall":  # every rank receives a block of `size` from every rank
        return nranks * nranks * size
    _, nrecv, dt = call_shape(op, size, nranks)
    per_rank = nrecv * dt.itemsize
    receivers = {"bcast": nranks - 1, "reduce": 1, "gather": 1}.get(op, nranks)
    return receivers * per_rank


def floor_us(op: str, size: int, nranks: int, state: MachineState) -> float:
    """A lower bound on one call's time on this machine in `state`: its synchronisation or
    the writes that outgrow the caches at the node's write ceiling, whichever is larger."""
    spill = max(0, bytes_written(op, size, nranks) - state.cache_bytes)
    write = spill / (state.write_all_gbs * 1e9) * 1e6
    return max(sync_floor_us(nranks, state), write)


def floor_and_ratio(
    op: str, size: int, nranks: int, state: MachineState | None, us: float | None
) -> tuple[str, str]:
    """Table cells: the floor in µs, and `us` over it (1.00x: at the floor), or blanks."""
    if state is None:
        return "", ""
    f = floor_us(op, size, nranks, state)
    return f"{f:.2f}", ("" if us is None or f <= 0 else f"{us / f:.2f}x")


def describe(state: MachineState) -> str:
    """One line: the probes behind a table's floors."""
    line = "one CPU" if state.line_ns is None else f"line {state.line_ns:.0f} ns"
    return (
        f"floors from `shmcoll bench machine` before the launch ({state.when}): handoff "
        f"{state.handoff_us:.2f} µs, {line}, write ceiling {state.write_all_gbs:.1f} GB/s on "
        f"{state.cpus} CPUs, caches {state.cache_bytes >> 20} MiB"
    )


def load(path: str) -> MachineState:
    with open(path) as f:
        return MachineState.from_dict(json.load(f))
