"""The package as a wheel installs it, without building one: a copy of python/shmcoll outside
the checkout with the bundle the wheel build puts in it (shmcoll.bundle: the engine's static
archive and header, the CUDA sources, the PMPI benchmark), run with no cargo on PATH. There
the PMPI library is linked from the prebuilt archive with the MPICH wheel's mpicc, and with
Debian's MPICH and Open MPI where installed, and serves a C Alltoall program at 2 ranks;
the CUDA sources are found in the package. (scripts/wheel_smoke.sh does the same
with a real wheel, built and installed into a fresh environment.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from conftest import find_tool, subprocess_env
from pmpi_support import Mpi, openmpi_env, stats
from shmcoll import bundle
from shmcoll.pmpi.build import _static_engine

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]


def _installed_copy(site: Path, with_bundle: bool) -> Path:
    """python/shmcoll (with its built native module) copied to `site`, and the bundle a
    wheel carries written into it from the checkout, as the wheel build does."""
    pkg = site / "shmcoll"
    shutil.copytree(bundle.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__", "_bundled"))
    if with_bundle:
        into = pkg / bundle.BUNDLE_DIR.name
        for name, source in bundle.SHIPPED.items():
            src, dest = ROOT / source, into / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)
        shutil.copy2(_static_engine(ROOT, None), into / bundle.CAPI_ARCHIVE_IN_BUNDLE)
    return pkg


def _env(site: Path, tmp: Path, mpicc: str) -> dict[str, str]:
    """The copy first on the path; no cargo (PATH, ~/.cargo); a cache of its own."""
    path = os.pathsep.join(p for p in (str(Path(mpicc).parent), "/usr/bin", "/bin"))
    return subprocess_env({
        "PYTHONPATH": str(site), "PATH": path, "HOME": str(tmp),
        "SHMCOLL_PMPI_DIR": str(tmp / "pmpi-cache"), "CARGO_HOME": str(tmp / "no-cargo"),
    })  # fmt: skip


def _python(code: str, env: Mapping[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", code]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False)


@pytest.fixture(scope="module")
def mpich() -> tuple[str, str]:
    """The MPICH wheel's mpicc and mpiexec (the test extras install it)."""
    mpicc, mpiexec = find_tool("mpicc"), find_tool("mpiexec")
    if not mpicc or not mpiexec:
        pytest.skip("mpicc and mpiexec are needed (pip install mpich)")
    return mpicc, mpiexec


def _debian(flavour: str) -> tuple[str, str]:
    mpicc, mpiexec = shutil.which(f"mpicc.{flavour}"), shutil.which(f"mpiexec.{flavour}")
    if not mpicc or not mpiexec:
        pytest.skip(f"Debian's {flavour} is not installed (mpicc.{flavour}, mpiexec.{flavour})")
    return mpicc, mpiexec


@pytest.mark.parametrize("flavour", ["mpich-wheel", "mpich", "openmpi"])
def test_the_pmpi_library_links_the_prebuilt_engine_and_serves_alltoall(
    flavour: str, mpich: tuple[str, str], tmp_path: Path
) -> None:
    mpicc, mpiexec = mpich if flavour == "mpich-wheel" else _debian(flavour)
    site = tmp_path / "site"
    pkg = _installed_copy(site, with_bundle=True)
    env = _env(site, tmp_path, mpicc)
    if shutil.which("cargo", path=env["PATH"]):
        pytest.skip("cargo is installed system-wide")
    code = "import shmcoll, shmcoll.bundle as b; print(shmcoll.__file__); print(b.source_tree())"
    p = _python(code, env, tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(pkg / "__init__.py"), "None"], "the copy must run as an installation"

    cmd = [sys.executable, "-m", "shmcoll.cli", "pmpi", "--path", "--mpicc", mpicc]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    library = Path(p.stdout.strip())
    assert library.is_file() and library.is_relative_to(tmp_path / "pmpi-cache")

    mpi = Mpi(flavour, mpicc, mpiexec, library, tmp_path, openmpi_env() if flavour == "openmpi" else {})
    run = mpi.run(2, mpi.compile("alltoall_check"))
    assert ", 0 failures" in run.stdout, run.stdout + run.stderr
    s = stats(run.stderr)
    for rank in (0, 1):
        for op in ("MPI_Alltoall", "MPI_Alltoallv"):
            assert s[(rank, op)]["handled"] > 0 and s[(rank, op)]["passed"] == 0, run.stderr


def test_the_cuda_sources_and_the_pmpi_benchmark_are_found_in_the_package(
    mpich: tuple[str, str], tmp_path: Path
) -> None:
    site = tmp_path / "site"
    pkg = _installed_copy(site, with_bundle=True)
    code = (
        "from shmcoll.gpu import KERNEL_NAMES, kernel_source; from shmcoll.bundle import shipped\n"
        "print(' '.join(KERNEL_NAMES)); print(shipped('cuda')); print(shipped('bench/alltoall_bench.c'))\n"
        "assert all('__global__' in kernel_source(n) for n in KERNEL_NAMES)"
    )
    p = _python(code, _env(site, tmp_path, mpich[0]), tmp_path)
    assert p.returncode == 0, p.stderr
    names, cuda, bench = p.stdout.splitlines()
    assert names.split() == sorted(f.stem for f in (ROOT / "cuda").glob("*.cu")) and names
    assert Path(cuda) == pkg / "_bundled" / "cuda"
    assert Path(bench).is_file() and Path(bench).is_relative_to(pkg)


def test_an_installation_without_the_engine_says_what_is_missing(
    mpich: tuple[str, str], tmp_path: Path
) -> None:
    site = tmp_path / "site"
    _installed_copy(site, with_bundle=False)
    cmd = [sys.executable, "-m", "shmcoll.cli", "pmpi", "--path", "--mpicc", mpich[0]]
    env = _env(site, tmp_path, mpich[0])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert p.returncode != 0
    assert bundle.CAPI_ARCHIVE in p.stderr and "maturin build" in p.stderr, p.stderr
    p = _python("from shmcoll.gpu import unavailable; print(unavailable())", env, tmp_path)
    assert p.returncode == 0 and "no CUDA kernel sources" in p.stdout, p.stdout + p.stderr
