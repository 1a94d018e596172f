"""Shared fixtures and helpers of the shmcoll test suite.

* Every test, and the session as a whole, must leave no ``shmcoll-*`` segment in /dev/shm.
* :func:`run_ranks` runs a module-level function on N ranks through ``shmcoll.spawn`` with
  the ``fork`` start method (milliseconds per launch instead of the ~0.3 s of ``spawn``).
* :func:`run_mpiexec` runs a script under ``mpiexec -n N`` (skipping without MPI).
* :func:`patterns` gives closed-form buffer contents: element k of the block rank i sends
  to rank j is a function of (i, j, k) alone.
* ``emu_lib`` / ``emulated``: the GPU path without a GPU, every kernel of cuda/ built for
  the CPU once per session and served by the CuPy stand-in (tests/cuda_emu/emulation.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shmcoll

SHM_DIR = Path("/dev/shm")
PREFIX = "shmcoll-"
TESTS_DIR = Path(__file__).resolve().parent
MPI_SCRIPTS = TESTS_DIR / "mpi_scripts"

#: Variables the standalone launcher or MPI sets; never leak them from the test process
#: into the ranks or subprocesses.
_LAUNCH_VARS = ("SHMCOLL_SEGMENT", "SHMCOLL_RANK", "SHMCOLL_SIZE")

#: A deadline short enough that a hang in a collective fails a test quickly, long enough
#: for 4 oversubscribed ranks moving 16 MiB on 2 busy cores. Tests may lower it.
DEFAULT_TEST_TIMEOUT_S = "20"

#: The private-buffer crossover the suite runs with (SHMCOLL_CMA_FROM): private blocks
#: below it take staging, from it CMA.
CMA_FROM = "64K"

#: The registry, as the native module lists it (the restrictions of each are modelled in
#: :func:`cannot_serve`, which fails loudly on a name it does not know).
ALGORITHMS = tuple(name for name, _ in shmcoll._core.algorithms()[0])
ORDERS = tuple(shmcoll._core.algorithms()[1])
STORES = tuple(shmcoll._core.algorithms()[2])


def shm_segments() -> set[str]:
    """Names of every shmcoll segment in /dev/shm now."""
    try:
        return {p.name for p in SHM_DIR.iterdir() if p.name.startswith(PREFIX)}
    except FileNotFoundError:
        return set()


def pytest_configure(config: pytest.Config) -> None:
    for v in _LAUNCH_VARS:
        os.environ.pop(v, None)
    os.environ.setdefault("SHMCOLL_TIMEOUT", DEFAULT_TEST_TIMEOUT_S)
    # The model, not a table this machine's `shmcoll tune` wrote into the user or system
    # file (tests of the lookup order and of tables set or remove it themselves).
    os.environ.setdefault("SHMCOLL_TUNING_FILE", "none")
    # A fixed private-buffer crossover, not what this machine's probe measured at the
    # moment (tests of the probe remove it): every process of the suite then computes the
    # same model tables, and the choices tests expect do not move with the machine's load.
    os.environ.setdefault("SHMCOLL_CMA_FROM", CMA_FROM)
    config.addinivalue_line(
        "markers",
        "parent_comm: creates a shmcoll.Comm in the pytest process itself (run after all others)",
    )


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Run the tests that create a communicator in the pytest process last.

    Package bug (rust/shmcoll-shm/src/cma.rs, probe_word): the CMA probe word is cached in
    a process-wide OnceLock with the pid of the process that first joined a communicator,
    and forked children inherit it, so ranks forked from a process that ever created a
    Comm fail the probe and run with cma_ok=False (the cma algorithms then cannot serve).
    Until that is fixed, forked ranks only get CMA while the pytest process has created no
    communicator; test_alltoall.py::test_cma_in_ranks_forked_after_a_comm pins the bug."""
    items.sort(key=lambda item: item.get_closest_marker("parent_comm") is not None)


def _cma_probe() -> bool:
    return bool(shmcoll.Comm().cma_ok)


#: Whether process_vm_readv works between sibling processes here (probed once, in forked
#: ranks, before any test ran).
CMA_WORKS: list[bool] = []


@pytest.fixture(scope="session", autouse=True)
def cma_works() -> bool:
    if not CMA_WORKS:
        CMA_WORKS.append(all(shmcoll.spawn(2, _cma_probe, start_method="fork", timeout=30)))
    return CMA_WORKS[0]


#: A machine state for the benchmarks' floor columns, instead of probing the machine (five
#: seconds, with the CPUs to itself) before every benchmark a test launches.
BENCH_MACHINE = {
    "cpus": 2,
    "handoff_us": 2.0,
    "line_ns": 100.0,
    "write_1cpu_gbs": 20.0,
    "write_all_gbs": 30.0,
    "when": "2026-01-01T00:00:00Z",
    "cache_bytes": 32 << 20,
}


@pytest.fixture(scope="session", autouse=True)
def bench_machine_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    path = tmp_path_factory.mktemp("machine") / "machine.json"
    path.write_text(json.dumps(BENCH_MACHINE))
    with environ({"SHMCOLL_BENCH_MACHINE": str(path)}):
        yield


@pytest.fixture(scope="session", autouse=True)
def fftw_wisdom_in_a_temporary_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """pyFFTW plans save wisdom for later runs: keep the tests' out of the user's cache."""
    old = os.environ.get("SHMCOLL_FFTW_WISDOM")
    os.environ["SHMCOLL_FFTW_WISDOM"] = str(tmp_path_factory.mktemp("fftw") / "wisdom.pickle")
    yield
    if old is None:
        os.environ.pop("SHMCOLL_FFTW_WISDOM", None)
    else:
        os.environ["SHMCOLL_FFTW_WISDOM"] = old


@pytest.fixture(scope="session", autouse=True)
def no_segment_left_after_session() -> Iterator[None]:
    """Fail the session if any shmcoll segment that was not there at the start remains
    (another test run's live segments are not this run's: see `created_elsewhere`)."""
    before = shm_segments()
    yield
    left = {s for s in shm_segments() - before if not created_elsewhere(s)}
    assert not left, f"shmcoll segments left in /dev/shm after the test session: {sorted(left)}"


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def created_elsewhere(name: str) -> bool:
    """Whether segment `name` (shmcoll-<rank>-<creator pid>-<random>) belongs to a live
    process outside this test run's process tree: another test run on the machine, whose
    segments are not this run's leftovers."""
    try:
        pid = int(name.split("-")[2])
    except (IndexError, ValueError):
        return False
    me, seen = os.getpid(), 0
    while pid > 1 and seen < 64:
        if pid == me:
            return False
        nxt = _parent(pid)
        if nxt is None:
            return seen > 0  # the creator is gone (seen == 0): a leftover
        pid, seen = nxt, seen + 1
    return True


@pytest.fixture(autouse=True)
def no_segment_left_after_test() -> Iterator[None]:
    """Fail the test that leaves a segment behind (pinpoints the culprit)."""
    before = shm_segments()
    yield
    left = {s for s in shm_segments() - before if not created_elsewhere(s)}
    assert not left, f"this test left shmcoll segments in /dev/shm: {sorted(left)}"


@pytest.fixture(scope="session")
def emu_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernels of cuda/ built for the CPU (tests/cuda_emu/driver.cpp), once per session;
    skips the test without g++."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the CPU emulation of the kernels")
    from cuda_emu.emulation import build

    return build(tmp_path_factory.mktemp("emu"))


@pytest.fixture(scope="session")
def emu_lib_ubsan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same emulation instrumented by UBSan where the compiler has it: a kernel's
    undefined behaviour (a misaligned 16-byte access, which x86 forgives and a GPU does
    not; an out-of-range shift) prints "runtime error:"; see `sanitized_kernels`."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the CPU emulation of the kernels")
    from cuda_emu.emulation import build

    return build(tmp_path_factory.mktemp("emu_ubsan"), sanitize=True)


@pytest.fixture
def sanitized_kernels(emu_lib_ubsan: Path, capfd: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """The stand-in over `emu_lib_ubsan` as this process's cupy; fails the test when the
    kernels reported undefined behaviour."""
    from cuda_emu.emulation import installed

    with installed(emu_lib_ubsan) as cupy:
        yield cupy
    err = capfd.readouterr().err
    assert "runtime error" not in err, f"undefined behaviour in the kernels:\n{err}"


@pytest.fixture
def emulated(emu_lib: Path) -> Iterator[Any]:
    """The CuPy stand-in over `emu_lib` as this process's (and its forked ranks') cupy for
    the test; yields the module."""
    from cuda_emu.emulation import installed

    with installed(emu_lib) as cupy:
        yield cupy


@dataclass(frozen=True)
class Device:
    """A CUDA device the GPU path of shmcoll runs on in a test: `kind` "emulated" or "gpu",
    its `cupy` module, and how ranks must start on it (`start_method`)."""

    kind: str
    cupy: Any
    start_method: str


@pytest.fixture(params=["emulated", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request: pytest.FixtureRequest) -> Iterator[Device]:
    """Each device the test runs on: the emulated one everywhere (the kernels of cuda/ on
    the CPU behind the CuPy stand-in; ranks are forked, so that they inherit it), and a real
    GPU where CuPy sees one and the kernels compile (ranks start as fresh processes: a CUDA
    context does not survive fork). Skips the GPU one without a GPU."""
    if request.param == "emulated":
        yield Device("emulated", request.getfixturevalue("emulated"), "fork")
        return
    from shmcoll import gpu

    if not gpu.available():
        pytest.skip(f"needs a GPU: {gpu.unavailable()}")
    import cupy  # type: ignore[import-not-found]

    yield Device("gpu", cupy, "spawn")


@contextlib.contextmanager
def environ(env: Mapping[str, str | None] | None) -> Iterator[None]:
    """Set (or, with None, remove) environment variables for the duration."""
    if not env:
        yield
        return
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_ranks(
    n: int,
    fn: Callable[..., Any],
    *args: Any,
    timeout: float = 60,
    env: Mapping[str, str | None] | None = None,
    start_method: str = "fork",
    **kwargs: Any,
) -> list[Any]:
    """``fn(*args, **kwargs)`` on `n` ranks sharing a communicator, forked unless
    `start_method` says otherwise; every rank's result in rank order. `env` is set in the
    parent before the ranks start (so they, and the segment the launcher creates, see it)
    and restored afterwards."""
    with environ(env):
        return shmcoll.spawn(n, fn, *args, start_method=start_method, timeout=timeout, **kwargs)


def check_all(results: list[Any]) -> None:
    """Ranks return a list of failure descriptions; all must be empty."""
    bad = {r: res for r, res in enumerate(results) if res}
    if bad:
        lines = []
        for r, res in bad.items():
            lines.append(f"rank {r}: {len(res)} failures")
            lines += [f"  {x}" for x in res[:15]]
        pytest.fail("\n".join(lines), pytrace=False)


# -- closed-form data -----------------------------------------------------------------
DTYPES = (np.uint8, np.int32, np.float64, np.complex128)


def block(i: int, j: int, count: int, dtype: Any, salt: int = 0) -> np.ndarray:
    """The `count` elements rank i sends to rank j: a function of (i, j, k, salt) only."""
    dt = np.dtype(dtype)
    k = np.arange(count, dtype=np.int64)
    v = i * 7919 + j * 104729 + k * 31 + salt * 613 + 1
    if dt.kind == "c":
        return (v.astype(np.float64) - 1j * (v % 977).astype(np.float64)).astype(dt)
    if dt.kind == "f":
        return v.astype(dt)
    if dt.kind in "iu":
        bits = 8 * dt.itemsize
        return (v % 251 if bits == 8 else v % (1 << (bits - 1))).astype(dt)
    raise AssertionError(f"no pattern for {dt}")


def send_data(rank: int, size: int, count: int, dtype: Any, salt: int = 0) -> np.ndarray:
    """Rank `rank`'s whole Alltoall send buffer (blocks for ranks 0..size-1)."""
    if size == 0:
        return np.empty(0, dtype)
    return np.concatenate([block(rank, j, count, dtype, salt) for j in range(size)])


def recv_expected(rank: int, size: int, count: int, dtype: Any, salt: int = 0) -> np.ndarray:
    """What rank `rank` must hold after the Alltoall (block i from rank i)."""
    return np.concatenate([block(i, rank, count, dtype, salt) for i in range(size)])


def first_difference(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    idx = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    if idx.size == 0:
        return "equal"
    k = int(idx[0])
    return (
        f"{idx.size} elements differ, first at {k}: got {got.reshape(-1)[k]!r}, want {want.reshape(-1)[k]!r}"
    )


# -- MPI ------------------------------------------------------------------------------
def find_tool(name: str) -> str | None:
    """`name` beside this Python (the venv's, e.g. the mpich wheel's mpiexec), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def mpi_available() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return find_tool("mpiexec") is not None


def subprocess_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for ranks started as subprocesses (no launcher variables)."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env.pop("PYTEST_CURRENT_TEST", None)
    if extra:
        env.update(extra)
    return env


def run_mpiexec(
    n: int,
    script: str | Path,
    *args: str,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n N python script args`` (MPICH); skips when mpiexec or mpi4py is missing.
    With `check`, fails the test (showing its output) on a non-zero exit."""
    if not mpi_available():
        pytest.skip("mpiexec and mpi4py are needed (pip install mpich mpi4py)")
    mpiexec = find_tool("mpiexec")
    assert mpiexec is not None
    cmd = [mpiexec, "-n", str(n), sys.executable, str(script), *args]
    try:
        proc = subprocess.run(
            cmd, env=subprocess_env(env), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s\n{e.stdout}\n{e.stderr}")
    if check and proc.returncode != 0:
        out = f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        pytest.fail(f"{' '.join(cmd)} exited with {proc.returncode}\n{out}", pytrace=False)
    return proc


def dead_pid() -> int:
    """A pid that no process has now."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(pid_max - 1, 1, -1):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            continue
    raise AssertionError("no free pid")


# -- rank-side helpers for forced-algorithm matrices ------------------------------------
#: Errors after which a communicator is unusable: stop the rank's case loop.
FATAL = (shmcoll.PeerFailedError, shmcoll.ShmcollTimeoutError, shmcoll.CommBrokenError)


def sentinel(dtype: Any) -> Any:
    """A value that no pattern of :func:`block` contains (-1 wrapped to the dtype)."""
    return np.array(-1).astype(dtype)


def new_buffer(comm: shmcoll.Comm, kind: str, n: int, dtype: Any) -> np.ndarray:
    """`n` elements in the shared heap (`kind` "heap") or an ordinary NumPy array private
    to this process (outside the shared-array arena, which test_shared_arrays.py covers):
    the buffers that only the private-buffer paths (CMA, staging, inline) can serve."""
    if kind == "heap":
        return comm.empty(n, dtype)
    assert kind == "ordinary", kind
    return private_empty(n, dtype)


def private_empty(n: Any, dtype: Any = float) -> np.ndarray:
    """``np.empty`` outside the shared-array arena."""
    with shmcoll.private_arrays():
        return np.empty(n, dtype)


def cannot_serve(
    algorithm: str,
    *,
    in_place: bool,
    all_send_heap: bool,
    all_recv_heap: bool,
    all_inline_fit: bool,
    cma_ok: bool,
) -> bool:
    """Whether a forced `algorithm` must raise AlgorithmError (the registry's restrictions)."""
    if algorithm == "inline":
        return not all_inline_fit
    if algorithm == "pull":
        return in_place or not all_send_heap
    if algorithm == "push":
        return in_place or not all_recv_heap
    if algorithm in ("cma", "cma-push"):
        return in_place or not cma_ok
    assert algorithm == "staging", f"no model of the restrictions of algorithm {algorithm!r}"
    return False
