#!/usr/bin/env bash
# The wheel as a new user meets it: build it from this checkout (scripts/build_wheel.sh);
# check what it is (platform tag manylinux_2_28 or older, at most 4 MB, the bundle inside, no
# path of this checkout in its binaries, the sdist holding what a build needs); install it
# into a fresh virtual environment with the MPICH wheel; run the installed entry points there
# with no cargo on PATH, HOME and caches of their own and the working directory outside the
# checkout: info, explain, a short Alltoall benchmark, a quick tune, the PMPI library (built
# from the wheel's engine with mpicc) preloaded under a C Alltoall program at 2 ranks and
# its --tune, an FFT, codec round trips, the CUDA sources; then the GPU check of a node
# without network (scripts/wheelhouse.sh, scripts/gpu_check.sh beside that environment, which
# must stay as it was). Fails at the first step that fails.
# scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
START=$SECONDS

step() { printf '\n==> wheel smoke (%d s): %s\n' "$((SECONDS - START))" "$*"; }
fail() { echo "wheel smoke FAILED: $*" >&2; exit 1; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/shmcoll-wheel-smoke.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

step "build the wheel and the sdist"
./scripts/build_wheel.sh "$TMP/dist" >"$TMP/build.log" 2>&1 || { tail -40 "$TMP/build.log"; fail "build"; }
WHEEL="$(ls "$TMP"/dist/shmcoll-*.whl)"
ls "$TMP"/dist/shmcoll-*.tar.gz >/dev/null || fail "no sdist"
echo "$(basename "$WHEEL"): $(stat -c %s "$WHEEL") bytes"

step "what the wheel is"
"${SHMCOLL_BUILD_VENV:-.venv-build}/bin/python" - "$WHEEL" "$ROOT" <<'EOF' || fail "wheel or sdist contents"
import importlib.util, re, sys, tarfile, zipfile
from pathlib import Path

wheel, root = Path(sys.argv[1]), Path(sys.argv[2])
m = re.search(r"-manylinux_2_(\d+)_x86_64\.whl$", wheel.name) or re.search(r"-manylinux(2014)_x86_64\.whl$", wheel.name)
assert m and (m[1] == "2014" or int(m[1]) <= 28), f"{wheel.name}: not manylinux_2_28 or older"
assert wheel.stat().st_size <= 4_000_000, f"{wheel.stat().st_size} bytes: over 4 MB"

# What shmcoll.bundle says a wheel carries, and the sources the sdist needs to build one
# (pyproject's sdist include lists them a second time).
spec = importlib.util.spec_from_file_location("layout", root / "python/shmcoll/bundle.py")
layout = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layout)
in_wheel = {f"shmcoll/_bundled/{layout.CAPI_ARCHIVE_IN_BUNDLE}"}
in_sdist = {"build_backend/shmcoll_build.py", "rust/shmcoll-capi/Cargo.toml"}
for name, source in layout.SHIPPED.items():
    p = root / source
    for f in p.rglob("*") if p.is_dir() else [p]:
        if f.is_file():
            in_wheel.add(f"shmcoll/_bundled/{name}/{f.relative_to(p)}" if p.is_dir() else f"shmcoll/_bundled/{name}")
            in_sdist.add(str(f.relative_to(root)))
assert any(n.endswith(".cu") for n in in_wheel), "no CUDA sources to ship"

with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    assert in_wheel <= names, f"missing from the wheel: {sorted(in_wheel - names)}"
    for name in names:
        if name.endswith((".so", ".a")):
            assert str(root).encode() not in z.read(name), f"{name} holds the build path {root}"
with tarfile.open(next(wheel.parent.glob("shmcoll-*.tar.gz"))) as t:
    files = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
assert in_sdist <= files, f"missing from the sdist: {sorted(in_sdist - files)}"
print("tag, size, bundle, paths and sdist: ok")
EOF

step "a fresh virtual environment with the wheel and the MPICH wheel"
"${PYTHON:-python3}" -m venv "$TMP/venv"
"$TMP/venv/bin/python" -m pip install -q "$WHEEL" mpich mpi4py numpy

RUN="$TMP/run"
mkdir -p "$RUN/home"
cd "$RUN"
# The installed environment alone: no ~/.cargo/bin, no checkout on the path, caches here.
SMOKE_PATH="$TMP/venv/bin:/usr/local/bin:/usr/bin:/bin"
in_venv() {
    env -i PATH="$SMOKE_PATH" HOME="$RUN/home" XDG_CACHE_HOME="$RUN/cache" XDG_CONFIG_HOME="$RUN/config" \
        TMPDIR="$RUN" LANG=C.UTF-8 "$@"
}
if in_venv sh -c 'command -v cargo' >/dev/null; then
    echo "note: cargo is installed system-wide; the wheel does not call it (no source tree here)"
fi
in_venv python -c 'import shmcoll, sys; sys.exit(shmcoll.__file__.startswith(sys.argv[1]))' "$ROOT" \
    || fail "shmcoll imported from the checkout"

step "shmcoll --help, info, explain"
in_venv shmcoll --help >/dev/null
in_venv shmcoll info
in_venv shmcoll explain -n 2 >/dev/null

step "shmcoll bench alltoall -n 2 (short)"
in_venv shmcoll bench alltoall -n 2 -m 1K:4K -i 50 -x 5 --rounds 1 --no-floors --no-ceiling

step "shmcoll tune --effort quick (tiny sweep)"
in_venv shmcoll tune -n 2 --effort quick --sizes 1K:4K -i 10 --out "$RUN/table.json"
[ -s "$RUN/table.json" ] || fail "tune wrote no table"

step "shmcoll pmpi --path, and a C Alltoall program preloaded at 2 ranks"
LIB="$(in_venv shmcoll pmpi --path)"
case "$LIB" in "$RUN"/cache/*) ;; *) fail "pmpi --path printed $LIB" ;; esac
in_venv mpicc -O2 -o alltoall_check "$ROOT/tests/pmpi/alltoall_check.c"
in_venv env SHMCOLL_PMPI_STATS=1 LD_PRELOAD="$LIB" mpiexec -n 2 ./alltoall_check >out.txt 2>err.txt \
    || { cat out.txt err.txt; fail "alltoall_check"; }
cat out.txt
grep -q "cases, 0 failures" out.txt || fail "results differ from PMPI's"
for rank in 0 1; do
    for op in MPI_Alltoall MPI_Alltoallv; do
        grep -Eq "^\[shmcoll-pmpi\] rank=$rank op=$op handled=[1-9][0-9]* bytes=[0-9]+ passed=0( |$)" err.txt \
            || { cat err.txt; fail "rank $rank: $op not served by shmcoll"; }
    done
done
echo "MPI_Alltoall and MPI_Alltoallv served by shmcoll on both ranks"
# --tune builds the PMPI benchmark from the wheel's copy of its source (a few iterations)
in_venv shmcoll pmpi --tune --iters 20 --max-bytes 1K --rounds 1 | tail -1

step "an FFT at 2 ranks"
cat >fft_smoke.py <<'EOF'
import numpy as np
import shmcoll
import shmcoll.bundle
from shmcoll.fft import PFFT, newDistArray

shape = (16, 12, 10)
g = np.random.default_rng(7).standard_normal(shape)
with shmcoll.Comm() as comm, PFFT(comm, shape, dtype=np.float64) as fft:
    u = newDistArray(fft, forward_output=False)
    u[...] = g[fft.local_slice(False)]
    u_hat = fft.forward(u)
    # mpi4py-fft's convention: forward divides by the grid size, backward does not.
    assert np.allclose(u_hat, (np.fft.rfftn(g) / g.size)[fft.local_slice(True)]), "forward differs from numpy"
    assert np.allclose(fft.backward(u_hat), g[fft.local_slice(False)]), "backward is not the inverse"
    print(f"rank {comm.rank}: FFT of {shape} ok")
EOF
in_venv shmcoll run -n 2 fft_smoke.py

step "codec round trips, the CUDA sources"
in_venv python - "$ROOT" <<'EOF'
import sys
from pathlib import Path

import numpy as np
import shmcoll
import shmcoll.bundle
from shmcoll.codecs import Mpc, Zfp
from shmcoll.gpu import KERNEL_NAMES, kernel_source

x = np.random.default_rng(3).standard_normal(4096)
assert np.array_equal(np.frombuffer(Mpc().decode(Mpc().encode(x)), x.dtype), x), "mpc is lossless"
z = np.frombuffer(Zfp(rate=16).decode(Zfp(rate=16).encode(x)), x.dtype)
assert z.shape == x.shape and np.max(np.abs(z - x)) < 1e-2, "zfp rate 16 round trip"
want = sorted(p.stem for p in Path(sys.argv[1], "cuda").glob("*.cu"))
assert list(KERNEL_NAMES) == want, f"CUDA sources {KERNEL_NAMES}, expected {want}"
assert all("__global__" in kernel_source(n) for n in KERNEL_NAMES)
assert shmcoll.bundle.source_tree() is None, "the installed package took a source tree for its own"
print("mpc and zfp round trips ok; CUDA sources in", Path(shmcoll.__file__).parent / "_bundled" / "cuda")
EOF

step "the GPU check offline: a wheelhouse for this Python, gpu_check.sh from it beside the environment"
cd "$ROOT"
PYVER="$("$TMP/venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
./scripts/wheelhouse.sh "$TMP/wheelhouse" "$PYVER" >"$TMP/wheelhouse.log" 2>&1 || { tail -20 "$TMP/wheelhouse.log"; fail "wheelhouse"; }
BEFORE="$("$TMP/venv/bin/python" -m pip freeze)"
# No GPU here: every step runs and only the environment report fails (the GPU path is not ready).
PYTHON="$TMP/venv/bin/python" SHMCOLL_CHECK_OUT="$TMP/gpu-check" SHMCOLL_CHECK_QUICK=1 \
    ./scripts/gpu_check.sh "$TMP/wheelhouse" >"$TMP/gpu-check.log" 2>&1 && fail "gpu_check passed without a GPU"
tail -1 "$TMP/gpu-check.log"
grep -q "gpu_check: FAILED: env (exit 1);" "$TMP/gpu-check.log" || { cat "$TMP/gpu-check.log"; fail "gpu_check"; }
grep -q "installed from $TMP/wheelhouse" "$TMP/gpu-check.log" || fail "gpu_check did not install from the wheelhouse"
grep -q "same as checkout yes" "$TMP/gpu-check/env.txt" || { cat "$TMP/gpu-check/env.txt"; fail "the wheelhouse's shmcoll is not this checkout's"; }
[ "$("$TMP/venv/bin/python" -m pip freeze)" = "$BEFORE" ] || fail "gpu_check changed the environment it ran beside"
echo "installed from the wheelhouse, every step ran, the environment untouched"

echo
echo "wheel smoke passed in $((SECONDS - START)) s"
