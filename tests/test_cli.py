"""The ``shmcoll`` command line, through the real entry point (subprocesses)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import conftest
import shmcoll
from conftest import SHM_DIR, dead_pid, find_tool, mpi_available, subprocess_env

SHMCOLL = find_tool("shmcoll")


def cli(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``shmcoll ARGS`` (the installed script, or ``python -m shmcoll.cli`` without it)."""
    cmd = [SHMCOLL] if SHMCOLL else [sys.executable, "-m", "shmcoll.cli"]
    full_env = {"COLUMNS": "250", **(env or {})}  # wide enough that rich wraps no cell
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(full_env),
        check=False,
    )


pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["run"],
        ["bench"],
        ["bench", "alltoall"],
        ["info"],
        ["cleanup"],
    ],
    ids=lambda a: " ".join(a) or "shmcoll",
)
def test_help(args: list[str]) -> None:
    for flag in ("--help", "-h"):
        p = cli(*args, flag)
        assert p.returncode == 0, p.stderr
        assert "Usage:" in p.stdout


def test_module_entry_point() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
        check=False,
    )
    assert p.returncode == 0 and "bench" in p.stdout


def test_version() -> None:
    p = cli("--version")
    assert p.returncode == 0
    assert shmcoll.__version__ in p.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],
        ["run"],
        ["run", "-n", "0", "x.py"],
        ["run", "-n", "two", "x.py"],
        ["run", "-n", "2"],
        ["bench", "alltoall", "-m", "foo"],
        ["bench", "alltoall", "-m", "16:8"],
        ["bench", "alltoall", "-n", "0"],
        ["bench", "alltoall", "-i", "0"],
        ["bench", "alltoall", "--launcher", "bogus"],
        ["bench", "alltoall", "--no-such-flag"],
        ["cleanup", "--bogus"],
        ["info", "extra"],
    ],
    ids=" ".join,
)
def test_bad_arguments_exit_2(args: list[str]) -> None:
    p = cli(*args)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Error" in p.stderr or "Usage" in p.stderr


def test_info() -> None:
    p = cli("info")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for word in (
        "machine",
        "SHMCOLL_TIMEOUT",
        "SHMCOLL_ALLTOALL_ALGORITHM",
        "staging",
        "pull",
        "nt_threshold",
    ):
        assert word in out, word
    assert shmcoll.__version__ in out


# -- bench ----------------------------------------------------------------------------
BENCH = ["bench", "alltoall", "-n", "2", "-m", "8:4K", "-i", "20", "-x", "2", "-c", "--no-ceiling"]
SIZES = ["8", "16", "32", "64", "128", "256", "512", "1K", "2K", "4K"]


def _table_rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("│")]


@pytest.mark.mpi
def test_bench_with_mpi(tmp_path: Path) -> None:
    if not mpi_available():
        pytest.skip("mpiexec and mpi4py are needed")
    csv_path = tmp_path / "bench.csv"
    p = cli(*BENCH, "--csv", str(csv_path), timeout=50)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "MPICH" in out, out
    assert "ratio" in out
    assert "VALIDATION FAILED" not in out
    rows = _table_rows(out)
    assert [r.split("│")[1].strip() for r in rows] == SIZES, out
    for r in rows:
        cells = [c.strip() for c in r.split("│")[1:-1]]
        ratios = [c for c in cells if c.endswith("x")]
        assert len(ratios) >= 2, r  # shmcoll and shmcoll heap against MPI
        assert all(float(c[:-1]) > 0 for c in ratios)
        assert "✗" not in r and "error" not in r
    with csv_path.open() as f:
        recs = list(csv.DictReader(f))
    assert recs, "empty CSV"
    assert list(recs[0]) == [
        "nranks",
        "bytes",
        "variant",
        "median_us",
        "p50_us",
        "p90_us",
        "p99_us",
        "iterations",
        "valid",
        "choice",
        "error",
    ]
    variants = {r["variant"] for r in recs}
    assert "shmcoll" in variants and "shmcoll heap" in variants
    assert any(v.startswith("MPICH") for v in variants), variants
    assert sorted({int(r["bytes"]) for r in recs}) == [8 << k for k in range(10)]
    for r in recs:
        assert r["nranks"] == "2"
        assert r["valid"] == "True", r
        assert float(r["median_us"]) > 0
        assert int(r["iterations"]) >= 20


@pytest.mark.mpi
def test_create_bench_with_mpi(tmp_path: Path) -> None:
    """`shmcoll bench create`: every variant against MPI's Dup+Free, and the phases of
    Comm+Free pooled and not (no timing is asserted: the machine is shared)."""
    if not mpi_available():
        pytest.skip("mpiexec and mpi4py are needed")
    csv_path = tmp_path / "create.csv"
    p = cli(
        "bench",
        "create",
        "-n",
        "2",
        "-i",
        "6",
        "-x",
        "1",
        "--rounds",
        "2",
        "--phases",
        "--csv",
        str(csv_path),
        timeout=90,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    with csv_path.open() as f:
        recs = list(csv.DictReader(f))
    variants = [r["variant"] for r in recs]
    assert variants[0].startswith("MPICH") and variants[1:] == [
        "Comm+Free",
        "Comm.Dup+Free",
        "Comm+Free, no pool",
    ]
    assert all(r["nranks"] == "2" and float(r["median_us"]) > 0 and not r["error"] for r in recs), recs
    phases = [r.split("│")[1].strip() for r in _table_rows(p.stdout) if r.count("│") == 4]
    assert phases == ["exchange", "segment", "join", "tables", "constructor rest", "Free"], p.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("op", ["allreduce", "barrier"])
def test_collective_bench_with_mpi(tmp_path: Path, op: str) -> None:
    """`shmcoll bench <collective>` against MPI, validated; Barrier has one row of 0 bytes
    and no heap variant (no buffers), and refuses the options about data."""
    if not mpi_available():
        pytest.skip("mpiexec and mpi4py are needed")
    csv_path = tmp_path / f"{op}.csv"
    p = cli(
        "bench", op, "-n", "2", "-m", "8:64", "-i", "20", "-x", "2", "-c", "--csv", str(csv_path), timeout=60
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "VALIDATION FAILED" not in p.stdout
    with csv_path.open() as f:
        recs = list(csv.DictReader(f))
    sizes = sorted({int(r["bytes"]) for r in recs})
    variants = {r["variant"] for r in recs}
    assert all(r["valid"] == "True" and float(r["median_us"]) > 0 for r in recs), recs
    assert any(v.startswith("MPICH") for v in variants) and "shmcoll" in variants, variants
    if op == "barrier":
        assert sizes == [0] and "shmcoll heap" not in variants, recs
    else:
        assert sizes == [8, 16, 32, 64] and "shmcoll heap" in variants, recs
    if op == "barrier":
        p = cli("bench", "barrier", "-n", "2", "--persistent", timeout=60)
        assert p.returncode != 0 and "barrier moves no data" in p.stderr, p.stdout + p.stderr


def test_bench_standalone(tmp_path: Path) -> None:
    csv_path = tmp_path / "standalone.csv"
    p = cli(*BENCH, "--launcher", "standalone", "--csv", str(csv_path), timeout=50)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _table_rows(p.stdout)
    assert [r.split("│")[1].strip() for r in rows] == SIZES, p.stdout
    assert "shmcoll" in p.stdout and "heap" in p.stdout
    assert "VALIDATION FAILED" not in p.stdout
    # without an MPI launch there is no MPI column, and a note says so
    assert "MPICH" not in p.stdout
    assert "note:" in p.stderr
    with csv_path.open() as f:
        recs = list(csv.DictReader(f))
    assert {r["variant"] for r in recs} == {"shmcoll", "shmcoll heap"}
    assert all(r["valid"] == "True" for r in recs)


def test_bench_forced_variants(tmp_path: Path) -> None:
    json_path = tmp_path / "b.json"
    p = cli(
        "bench", "alltoall", "-n", "2", "-m", "1K", "-i", "10", "-x", "1", "-c", "--no-ceiling", "--no-mpi",
        "--launcher", "standalone", "--variants", "staging/xor/nt,push", "--json", str(json_path),
        timeout=50,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert "heap staging/xor/nt=" in p.stderr and "heap push=" in p.stderr  # progress lines
    doc = json.loads(json_path.read_text())
    assert doc["nranks"] == 2
    variants = {r["variant"]: r for r in doc["rows"]}
    assert set(variants) == {"shmcoll", "shmcoll heap", "heap staging/xor/nt", "heap push"}, variants
    assert all(r["valid"] is True and r["median_us"] > 0 for r in variants.values()), variants


@pytest.mark.parametrize("op", ["alltoall", "allreduce"])
def test_bench_prints_each_sizes_floor_and_the_ratio_to_it(op: str) -> None:
    """The floors come from the machine state (conftest's, through SHMCOLL_BENCH_MACHINE):
    at 8 B the synchronisation (two line trips, 0.20 µs), at 1 MiB the writes beyond the
    caches at the write ceiling; `--no-floors` leaves them out."""
    args = [
        "bench",
        op,
        "-n",
        "2",
        "-m",
        "8:1M",
        "-i",
        "5",
        "-x",
        "1",
        "--no-mpi",
        "--launcher",
        "standalone",
    ]
    extra = ["--no-ceiling"] if op == "alltoall" else []
    p = cli(*args, *extra, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "shmcoll/floor" in p.stdout and "floors from `shmcoll bench machine`" in p.stdout, p.stdout
    rows = {ln.split("│")[1].strip(): ln for ln in p.stdout.splitlines() if ln.count("│") > 3}
    assert "0.20" in rows["8"], rows
    from shmcoll.bench.machine_state import MachineState, floor_us

    st = MachineState.from_dict(conftest.BENCH_MACHINE)
    assert f"{floor_us(op, 1 << 20, 2, st):.2f}" in rows["1M"], rows
    q = cli(*args, *extra, "--no-floors", timeout=90)
    assert q.returncode == 0 and "floor" not in q.stdout, q.stdout + q.stderr


@pytest.mark.parametrize("op", ["alltoall", "allgather"])
def test_bench_private_arrays_and_arrays_older_than_the_comm(tmp_path: Path, op: str) -> None:
    """`--private` adds NumPy arrays outside the shared-array arena, `--before` arrays
    allocated before the communicator, validated like the others."""
    csv_path = tmp_path / "private.csv"
    extra = ["--no-ceiling"] if op == "alltoall" else []
    p = cli(
        "bench", op, "-n", "2", "-m", "64K:128K", "-i", "10", "-x", "1", "-c", "--no-mpi",
        "--launcher", "standalone", "--private", "--before", "--csv", str(csv_path), *extra, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    with csv_path.open() as f:
        recs = list(csv.DictReader(f))
    assert {r["variant"] for r in recs} == {"shmcoll", "shmcoll heap", "shmcoll private", "shmcoll before"}, (
        recs
    )
    assert all(r["valid"] == "True" and float(r["median_us"]) > 0 for r in recs), recs


# -- run ------------------------------------------------------------------------------
RANK_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import shmcoll

    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    assert p == int(sys.argv[1]), (p, sys.argv)
    from shmcoll import _core
    algos = [a for a, _ in _core.algorithms()[0]]
    for n in (0, 1, 7, 1000, 70_000):
        for algo in [None, *algos]:
            s = comm.empty(p * n, np.int64)
            s[...] = [1000003 * me + 7919 * j + k for j in range(p) for k in range(n)]
            r = comm.zeros(p * n, np.int64)
            if algo == "inline" and s.nbytes > comm.config()["inline_bytes"]:
                continue
            comm.Alltoall(s, r, **({"algorithm": algo} if algo else {}))
            want = [1000003 * i + 7919 * me + k for i in range(p) for k in range(n)]
            assert r.tolist() == want, (algo, n)
            if algo:
                assert comm.last_choice().algorithm == algo
    comm.Barrier()
    print(f"rank {me} of {p} ok")
    """
)


def test_run_script(tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    p = cli("run", "-n", "3", str(script), "3", timeout=50)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(3):
        assert f"rank {r} of 3 ok" in p.stdout


def test_run_module(tmp_path: Path) -> None:
    (tmp_path / "rankmod.py").write_text(RANK_SCRIPT)
    # -m MODULE runs a module, as python -m does
    p = cli("run", "-n", "2", "-m", "rankmod", "2", timeout=50, env={"PYTHONPATH": str(tmp_path)})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 1 of 2 ok" in p.stdout


FAILING = textwrap.dedent(
    """
    import sys
    import numpy as np
    import shmcoll

    comm = shmcoll.Comm()
    if comm.rank == 1:
        sys.exit(3)
    try:
        comm.Alltoall(np.ones(comm.size), np.zeros(comm.size))
    except shmcoll.PeerFailedError:
        print(f"rank {comm.rank}: peer failure seen", flush=True)
        sys.exit(5)
    """
)


def test_run_failing_rank(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(FAILING)
    p = cli("run", "-n", "3", str(script), timeout=60, env={"SHMCOLL_TIMEOUT": "10"})
    assert p.returncode != 0
    assert p.returncode in (3, 5), p.returncode
    assert "rank 0: peer failure seen" in p.stdout
    assert "rank 2: peer failure seen" in p.stdout


def test_run_exception_in_rank(tmp_path: Path) -> None:
    script = tmp_path / "raises.py"
    script.write_text("import shmcoll\nc = shmcoll.Comm()\nraise SystemExit('bad' if c.rank == 0 else 0)\n")
    p = cli("run", "-n", "2", str(script), timeout=60)
    assert p.returncode != 0


def test_run_timeout(tmp_path: Path) -> None:
    script = tmp_path / "sleeps.py"
    script.write_text("import time, shmcoll\nshmcoll.Comm()\ntime.sleep(60)\n")
    p = cli("run", "-n", "2", "--timeout", "1", str(script), timeout=60)
    assert p.returncode == 124


@pytest.mark.parametrize("bad", ["nan", "0", "-1"])
def test_run_timeout_must_be_a_positive_number(tmp_path: Path, bad: str) -> None:
    # nan passed click's range (every comparison with it is false) and meant no limit;
    # 0 and -1 killed the ranks at once with no message.
    script = tmp_path / "ok.py"
    script.write_text("print('ran')\n")
    p = cli("run", "-n", "1", "--timeout", bad, str(script), timeout=60)
    assert p.returncode == 2 and "ran" not in p.stdout, p.stdout + p.stderr
    assert "--timeout" in p.stderr, p.stderr


# -- cleanup --------------------------------------------------------------------------
def test_cleanup_removes_stale_and_keeps_live() -> None:
    uid = os.getuid()
    stale = SHM_DIR / f"shmcoll-{uid}-{dead_pid()}-0123456789abcdef"
    live = SHM_DIR / f"shmcoll-{uid}-{os.getpid()}-fedcba9876543210"
    try:
        stale.write_bytes(b"\0" * 4096)
        live.write_bytes(b"\0" * 100)
        p = cli("cleanup", "--dry-run")
        assert p.returncode == 0, p.stderr
        assert f"would remove {stale}" in p.stdout
        assert stale.exists()
        p = cli("cleanup")
        assert p.returncode == 0, p.stderr
        assert f"removed {stale}" in p.stdout
        assert f"kept {live}" in p.stdout
        assert not stale.exists()
        assert live.exists()
        p = cli("cleanup")
        assert "nothing to remove" in p.stdout
    finally:
        for f in (stale, live):
            f.unlink(missing_ok=True)


def test_cleanup_ignores_foreign_names() -> None:
    odd = SHM_DIR / "shmcoll-not-a-segment"
    other = SHM_DIR / f"shmcollx-{os.getuid()}-{dead_pid()}-00"
    try:
        odd.write_bytes(b"x")
        other.write_bytes(b"x")
        p = cli("cleanup")
        assert p.returncode == 0, p.stderr
        assert odd.exists() and other.exists()
    finally:
        odd.unlink(missing_ok=True)
        other.unlink(missing_ok=True)
