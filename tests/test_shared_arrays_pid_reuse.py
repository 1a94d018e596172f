"""A long-lived process whose peers come and go (a driver with workers it starts, elastic
workers) maps each peer's shared-array arena once and keeps the mapping for later
communicators. When a later worker gets the pid of a dead one (and so the same arena
descriptor and length), the driver must reach the new worker's arena, not its cached
mapping of the dead worker's: there a `direct` Allgather wrote into the dead worker's
memfd, left the new worker's receive buffer unwritten, and both ranks returned success.

The pid is reused on purpose through /proc/sys/kernel/ns_last_pid, which needs root (or
CAP_SYS_ADMIN in the pid namespace); without it, or when other processes keep taking the
pid first, the test skips. The cache's check itself is tested without pid reuse in
rust/shmcoll-shm/src/arena.rs (a_descriptor_reused_for_another_file_is_mapped_anew)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import subprocess_env

pytestmark = pytest.mark.timeout(120)

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"

# One rank of a 2-rank communicator with the driver: Allgather its value over arena
# arrays, report what it received from the driver.
WORKER = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import shmcoll

    c = shmcoll.Comm()
    v = float(os.environ["VAL"])
    s = np.full(4096, v)                  # 32 KiB: in the shared-array arena
    out = np.full(2 * 4096, -7.0)
    c.Allgather(s, out, algorithm="direct")
    print(json.dumps({"pid": os.getpid(), "arena": bool(shmcoll.in_shared_arena(out)),
                      "got": [float(out[0]), float(out[4096])]}), flush=True)
    c.Free()
    """
)

# The driver: rounds of a communicator with a fresh worker; from the second round on it
# asks for the first worker's pid again, until a worker got it (or it gives up).
DRIVER = textwrap.dedent(
    """
    import json, os, subprocess, sys
    import numpy as np
    import shmcoll
    from shmcoll import _core

    worker, tries = sys.argv[1], int(sys.argv[2])
    first_pid, rounds = None, []
    for rnd in range(tries + 1):
        if first_pid is not None:
            try:
                with open("NS_LAST_PID", "w") as f:
                    f.write(str(first_pid - 1))
            except OSError as e:
                print(json.dumps({"skip": f"cannot write NS_LAST_PID: {e}"}), flush=True)
                sys.exit(0)
        h = _core.SegmentHandle(2)
        val = 10.0 + rnd
        env = dict(os.environ, SHMCOLL_SEGMENT=h.name, SHMCOLL_RANK="1", SHMCOLL_SIZE="2",
                   VAL=str(val))
        child = subprocess.Popen([sys.executable, "-c", worker], env=env,
                                 stdout=subprocess.PIPE, text=True)
        first_pid = first_pid or child.pid
        os.environ.update(SHMCOLL_SEGMENT=h.name, SHMCOLL_RANK="0", SHMCOLL_SIZE="2")
        c = shmcoll.Comm()
        s = np.full(4096, -1.0 - rnd)
        out = np.full(2 * 4096, -7.0)
        c.Allgather(s, out, algorithm="direct")
        c.Free()
        theirs = json.loads(child.communicate(timeout=60)[0])
        h.unlink()
        rounds.append({"pid": child.pid, "sent": val, "driver_sent": -1.0 - rnd,
                       "driver_got": float(out[4096]), "driver_arena":
                       bool(shmcoll.in_shared_arena(out)), "worker": theirs,
                       "exit": child.returncode})
        if rnd > 0 and child.pid == first_pid:
            break
    print(json.dumps({"rounds": rounds, "reused": rounds[-1]["pid"] == first_pid
                      and len(rounds) > 1}), flush=True)
    """
).replace("NS_LAST_PID", NS_LAST_PID)


def test_a_worker_with_a_reused_pid_gets_its_own_arena() -> None:
    try:
        with open(NS_LAST_PID, "w"):
            pass
    except OSError as e:
        pytest.skip(f"forcing pid reuse needs write access to {NS_LAST_PID}: {e}")
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, WORKER, "20"],
        env=subprocess_env({"SHMCOLL_TIMEOUT": "30"}),
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, f"driver exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in res:
        pytest.skip(res["skip"])
    if not res["reused"]:
        pytest.skip("other processes took the pid first every time (a busy machine)")
    bad = []
    for r in res["rounds"]:
        w = r["worker"]
        if not (r["driver_arena"] and w["arena"]):
            bad.append(f"round {r}: a receive buffer outside the arena (the test is void)")
        if r["exit"] != 0 or w["got"] != [r["driver_sent"], r["sent"]]:
            bad.append(f"worker pid {r['pid']} received {w['got']}, expected {[r['driver_sent'], r['sent']]}")
        if r["driver_got"] != r["sent"]:
            bad.append(f"driver received {r['driver_got']} from pid {r['pid']}, expected {r['sent']}")
    assert not bad, "\n".join(bad)
