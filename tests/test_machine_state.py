"""`shmcoll bench machine`: the probes of the machine's floors, and the floors computed
from them (closed forms)."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys

import numpy as np
import pytest

from shmcoll import _core
from shmcoll.bench import machine_state as ms
from shmcoll.errors import ArgumentError, BadBufferError, ShmcollTimeoutError

pytestmark = pytest.mark.timeout(120)

STATE = ms.MachineState(
    cpus=2, handoff_us=2.0, line_ns=50.0, write_1cpu_gbs=25.0, write_all_gbs=50.0, when="now",
    cache_bytes=32 << 20,
)  # fmt: skip


def test_ping_pongs_measure_a_positive_handoff_on_one_cpu_and_between_two() -> None:
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    one = ms.ping_pong(cpu, cpu, 500, True)
    assert 0 < one < 1e-3  # a yield handoff takes microseconds, not a millisecond
    assert os.sched_getaffinity(0) == before  # the probe gives the affinity back
    cpus = sorted(before)
    if len(cpus) > 1:
        assert 0 < ms.ping_pong(cpus[0], cpus[1], 2000, False) < 1e-3


def test_measure_fills_every_field_and_round_trips_through_json() -> None:
    st = ms.measure(tries=1, handoff_rounds=500, line_rounds=2000)
    assert st.cpus == len(os.sched_getaffinity(0))
    assert st.handoff_us > 0 and st.write_1cpu_gbs > 0 and st.write_all_gbs > 0
    assert st.cache_bytes > 0
    assert (st.line_ns is None) == (st.cpus == 1)
    assert ms.MachineState.from_dict(json.loads(st.to_json())) == st


def test_a_lone_side_times_out_and_bad_arguments_are_refused() -> None:
    word = np.frombuffer(mmap.mmap(-1, 4096), np.uint64, 1)
    with pytest.raises(ShmcollTimeoutError, match="timed out"):
        _core.ping_pong(word, 1, 0, 10, False, 0.05)  # nobody plays side 0
    with pytest.raises(ArgumentError, match="0 or 1"):
        _core.ping_pong(word, 2, 0, 10, False)
    with pytest.raises(ArgumentError, match="8 writable"):
        _core.ping_pong(np.zeros(4, np.uint8), 0, 0, 10, False)
    with pytest.raises(ArgumentError, match="8 writable"):
        _core.ping_pong(np.zeros(16, np.uint8)[1:9], 0, 0, 10, False)  # misaligned
    with pytest.raises(ArgumentError, match="positive"):
        _core.ping_pong(word, 0, 0, 10, False, 0.0)
    ro = np.zeros(1, np.uint64)
    ro.flags.writeable = False
    with pytest.raises(BadBufferError):
        _core.ping_pong(ro, 0, 0, 10, False)


@pytest.mark.parametrize(
    ("op", "size", "p", "written"),
    [
        ("allgather", 1024, 4, 4 * 4 * 1024),  # every rank receives p blocks
        ("allreduce", 1024, 4, 4 * 1024),  # every rank receives the vector
        ("bcast", 1024, 4, 3 * 1024),  # the root's buffer is not written
        ("reduce_scatter", 1024, 4, 1024),  # the vector, shared out
        ("reduce", 1024, 3, 1024),  # the root alone
        ("gather", 1024, 3, 3 * 1024),  # the root's p blocks
        ("scatter", 1024, 3, 3 * 1024),  # a block each, the root's own included
        ("barrier", 0, 4, 0),
        ("allgather", 1024, 1, 1024),
    ],
)
def test_bytes_written_are_the_receive_buffers(op: str, size: int, p: int, written: int) -> None:
    assert ms.bytes_written(op, size, p) == written


def test_the_floor_is_the_larger_of_synchronising_and_writing() -> None:
    # 4 ranks on 2 CPUs: two ranks per CPU, two handoffs of 2 µs per call.
    assert ms.sync_floor_us(4, STATE) == pytest.approx(4.0)
    assert ms.sync_floor_us(3, STATE) == pytest.approx(4.0)
    # 2 ranks on 2 CPUs: an arrival and a release, two trips of 50 ns.
    assert ms.sync_floor_us(2, STATE) == pytest.approx(0.1)
    assert ms.sync_floor_us(1, STATE) == 0.0
    assert ms.floor_us("allreduce", 8, 4, STATE) == pytest.approx(4.0)
    # 16 MiB per rank at 4 ranks: 256 MiB written, of which the caches hold 32 MiB.
    assert ms.floor_us("allgather", 16 << 20, 4, STATE) == pytest.approx((224 << 20) / 50e9 * 1e6)
    # 1 MiB per rank: 16 MiB, all of which the caches can hold: synchronising is the floor.
    assert ms.floor_us("allgather", 1 << 20, 4, STATE) == pytest.approx(4.0)


def test_the_cli_prints_and_writes_the_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "m.json"
    proc = subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", "bench", "machine", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "handoff between two processes on one CPU" in proc.stdout
    st = ms.load(str(out))
    assert st.handoff_us > 0 and st.write_all_gbs > 0
