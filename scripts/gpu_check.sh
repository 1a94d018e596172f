#!/usr/bin/env bash
# Every GPU check of shmcoll in one command: what we run on the first GPU machine we get,
# and what a user runs to see the GPU path work on theirs. In order, each step's output in
# its own file, and a summary that names the steps that failed:
#   env.txt       the GPU, the driver, Python, numpy, CuPy, NVRTC, torch, mpi4py's MPI, why
#                 the GPU path could not run if it cannot (shmcoll.gpu.unavailable()), and
#                 whether the installed shmcoll is this checkout's (a stale wheelhouse fails)
#   selftest.txt  shmcoll selftest --gpu: every codec's GPU bytes against Rust's on a fixed
#                 corpus, encode/decode GB/s on 256 MiB, a compressed Allreduce of 256 MiB
#                 between two processes against the uncompressed one (selftest.json: the
#                 rows and the Allreduce's measurements, for machines)
#   pytest.txt    the tests marked gpu, one line each as they finish: the kernels against
#                 Rust (1-D and N-D zfp too), the compressed collectives on CuPy arrays and
#                 torch CUDA tensors and the DDP hook, bitwise the host path (pytest.xml)
#   ranks.txt     shmcoll selftest --ranks 8,16: the Alltoall and Allreduce tables against
#                 MPI at 8 and 16 ranks with the launch's floors (CPU work, after the GPU's)
#   ddp.txt       examples/ddp_training.py --device cuda, when torch sees the GPU
#   sanitizer.txt the selftest's quick GPU checks under compute-sanitizer's memcheck, where
#                 the machine has it (at the granularity of CuPy's pooled allocations)
# Steps run in that order, the most telling first: a run cut short keeps what matters.
# The exit status is non-zero when any step failed.
#
#   bash scripts/gpu_check.sh [WHEELHOUSE]
#
# With WHEELHOUSE (made by scripts/wheelhouse.sh where there is network): installs shmcoll,
# mpi4py and MPICH from it with no network, into a prefix of their own beside this
# machine's packages (its CuPy, torch, numpy). Without: runs with $PYTHON (default
# python3) as it is, which must have shmcoll (pip install ".[mpi,gpu]").
# SHMCOLL_CHECK_OUT: where the files go (default gpu-check/). SHMCOLL_CHECK_QUICK=1: the
# selftest's quick sizes. SHMCOLL_CHECK_SECONDS: the whole run's limit, the install
# included (default 540): each step runs under its own limit or what is left of that,
# whichever is less, and a step with under 20 s left is not started (and counts as failed).
set -uo pipefail
START=$SECONDS
DEADLINE=$((START + ${SHMCOLL_CHECK_SECONDS:-540}))
# Paths the caller gave are the caller's: made absolute before moving to the checkout.
OUTDIR="${SHMCOLL_CHECK_OUT:-gpu-check}"
mkdir -p "$OUTDIR" && OUTDIR="$(cd "$OUTDIR" && pwd)" || exit 1
WHEELS=""
if [ $# -ge 1 ]; then
    WHEELS="$(cd "$1" && pwd)" || { echo "no wheelhouse at $1"; exit 1; }
fi
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
FAILED=()

if [ -n "$WHEELS" ]; then
    # Into a prefix of its own, put first on the interpreter's paths: the interpreter and
    # its environment stay the machine's (CuPy finds NVRTC through that environment's
    # site-packages, which a virtual environment made here would hide), and ours shadow
    # any mpi4py the machine has (built against some other MPI). MPICH's mpiexec joins
    # PATH, its libmpi mpi4py's search (MPI4PY_LIBMPI).
    PREFIX="$(mktemp -d "${TMPDIR:-/tmp}/shmcoll-gpu-check.XXXXXX")"
    trap 'rm -rf "$PREFIX"' EXIT
    SITE="$("$PY" -c 'import sys, sysconfig
print(sysconfig.get_path("purelib", "posix_prefix", {"base": sys.argv[1], "platbase": sys.argv[1]}))' "$PREFIX")" || exit 1
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$PREFIX/bin:$PATH" MPI4PY_LIBMPI="$PREFIX/lib"
    # Every wheel as it is (--no-deps --ignore-installed: pip neither resolves against nor
    # uninstalls anything of the machine's); numpy, which the wheelhouse leaves out, is the
    # machine's; pytest and its plugin from the wheelhouse only where the machine has none.
    PIP=("$PY" -m pip install -q --no-index --no-deps --ignore-installed --prefix "$PREFIX")
    RUNTIME=() TESTING=()
    for w in "$WHEELS"/*.whl; do
        case "$(basename "$w")" in
        pytest-* | pytest_timeout-* | pluggy-* | iniconfig-* | packaging-*) TESTING+=("$w") ;;
        *) RUNTIME+=("$w") ;;
        esac
    done
    "${PIP[@]}" "${RUNTIME[@]}" &&
        { "$PY" -c 'import pytest, pytest_timeout' 2>/dev/null || "${PIP[@]}" "${TESTING[@]}"; } ||
        { echo "installing from $WHEELS failed"; exit 1; }
    echo "installed from $WHEELS into $PREFIX in $((SECONDS - START)) s"
fi

# An interrupt (Ctrl-C) or termination of this script ends the running step's process
# group too, which the terminal's signal does not reach.
CHILD=""
trap 'trap - INT TERM; [ -n "$CHILD" ] && kill -TERM -- "-$CHILD" 2>/dev/null; exit 130' INT TERM

# step NAME SECONDS COMMAND...: run it with a time limit (SECONDS, or what is left of the
# whole run's), its output on screen and in NAME.txt; remember the failure.
step() {
    local name="$1" limit="$2"
    shift 2
    # The step's own limit, within what is left of the run's after the 10 s that timeout
    # may wait before it kills a step that ignored its signal.
    local left=$((DEADLINE - SECONDS - 10))
    if [ "$left" -lt 20 ]; then
        echo "== $name: not started, ${left} s left of the run's limit" | tee "$OUTDIR/$name.txt"
        FAILED+=("$name (no time left)")
        return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    echo "== $name (limit ${limit} s): $*"
    local t0=$SECONDS
    # timeout leads a process group of its own (so that its limit ends the step's whole
    # tree: ranks, launchers) and stops it with SIGINT (pytest then still prints its
    # failures and writes its report; the rest get SIGKILL 10 s later). It runs in the
    # background so that the trap above can pass an interrupt on to that group at once.
    # Its input is the step's (a here-document); its output goes through a tee that this
    # shell opened, so that the tee can be waited for before the exit line is appended.
    local out tee_pid
    exec {out}> >(tee "$OUTDIR/$name.txt")
    tee_pid=$!
    timeout -s INT --kill-after=10 "$limit" "$@" <&0 >&"$out" 2>&1 &
    CHILD=$!
    wait "$CHILD"
    local rc=$?
    CHILD=""
    exec {out}>&-
    for _ in $(seq 50); do kill -0 "$tee_pid" 2>/dev/null || break; sleep 0.1; done
    echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUTDIR/$name.txt"
    [ "$rc" -eq 0 ] || FAILED+=("$name (exit $rc)")
}

step env 60 "$PY" - <<'EOF'
import os, platform, subprocess, sys
def show(label, fn):
    try:
        print(f"{label:14s} {fn()}")
    except Exception as e:  # a missing package is a finding, not a failure of this step
        print(f"{label:14s} - ({type(e).__name__}: {e})")
smi = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"]
show("GPU", lambda: subprocess.run(smi, capture_output=True, text=True, timeout=30).stdout.strip())
show("CPUs", lambda: len(os.sched_getaffinity(0)))
show("Python", lambda: f"{platform.python_version()} ({sys.executable})")
import numpy, shmcoll
show("numpy", lambda: numpy.__version__)
show("shmcoll", lambda: f"{shmcoll.__version__} ({os.path.dirname(shmcoll.__file__)})")
show("CuPy", lambda: __import__("cupy").__version__)
show("NVRTC", lambda: __import__("cupy").cuda.nvrtc.getVersion())
show("CUDA runtime", lambda: __import__("cupy").cuda.runtime.runtimeGetVersion())
show("torch", lambda: (lambda t: f"{t.__version__}, CUDA {t.version.cuda}, sees GPU: {t.cuda.is_available()}")(__import__("torch")))
from pathlib import Path
from shmcoll import gpu
why = gpu.unavailable()
print("GPU path      ", "ready (a device, and every kernel compiles)" if why is None else f"NOT ready: {why}")
# The package that runs must be this checkout's (a wheelhouse built before the last change
# would test old code under the new tests).
here, source = Path(shmcoll.__file__).resolve().parent, Path("python/shmcoll")
pairs = [(p, here / p.relative_to(source)) for p in source.rglob("*.py")]
pairs += [(p, here / "_bundled" / "cuda" / p.name) for p in Path("cuda").glob("*.cu")]
stale = [] if here == source.resolve() else [
    str(a) for a, b in pairs if not b.exists() or a.read_bytes() != b.read_bytes()
]
print("same as checkout", "yes" if not stale else f"NO, {len(stale)} files differ: {', '.join(stale[:8])}")
def mpi():
    import mpi4py
    mpi4py.rc.initialize = False  # the library's name only: no MPI_Init here
    from mpi4py import MPI
    return f"{mpi4py.__version__}: {MPI.Get_library_version().splitlines()[0]}"
show("mpi4py", mpi)
sys.exit(0 if why is None and not stale else 1)
EOF

QUICK=""
[ "${SHMCOLL_CHECK_QUICK:-0}" = 1 ] && QUICK="--quick"
# shellcheck disable=SC2086  # $QUICK: no word, or one
step selftest 150 "$PY" -m shmcoll.cli selftest --gpu $QUICK --json "$OUTDIR/selftest.json"

step pytest 240 "$PY" -m pytest -v -m gpu --junitxml="$OUTDIR/pytest.xml" \
    tests/test_gpu_codecs.py tests/test_gpu_zfp.py tests/test_compress_on_device.py

# shellcheck disable=SC2086
step ranks 120 "$PY" -m shmcoll.cli selftest --ranks 8,16 $QUICK

if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step ddp 60 "$PY" -m shmcoll.cli run -n 2 examples/ddp_training.py --device cuda --steps 100
else
    echo "== ddp: skipped, torch does not see a GPU here" | tee "$OUTDIR/ddp.txt"
fi

# Memory errors of the kernels (out-of-bounds or misaligned accesses, which the CPU
# emulation cannot see) under NVIDIA's compute-sanitizer, where the machine has it: every
# codec's kernels on the selftest's quick corpus, the Allreduce's ranks included.
SANITIZER="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)"
if [ -n "$SANITIZER" ]; then
    step sanitizer 90 "$SANITIZER" --tool memcheck --error-exitcode 1 --target-processes all \
        "$PY" -m shmcoll.cli selftest --gpu --quick
    # Some container runtimes keep the device from the sanitizer: not shmcoll's failure.
    if grep -q "Device not supported" "$OUTDIR/sanitizer.txt" && [[ "${FAILED[-1]:-}" == sanitizer* ]]; then
        unset 'FAILED[-1]'
        echo "== sanitizer: compute-sanitizer cannot use this device here; not counted" | tee -a "$OUTDIR/sanitizer.txt"
    fi
else
    echo "== sanitizer: skipped, no compute-sanitizer here" | tee "$OUTDIR/sanitizer.txt"
fi

echo
if [ ${#FAILED[@]} -eq 0 ]; then
    echo "gpu_check: every step passed; the files are in $OUTDIR"
    exit 0
fi
echo "gpu_check: FAILED: ${FAILED[*]}; the files are in $OUTDIR"
exit 1
