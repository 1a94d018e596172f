#!/usr/bin/env bash
# A wheelhouse for a machine without network (a GPU node behind a firewall, a lent test
# machine): shmcoll's wheel built from this checkout and every wheel that `shmcoll[mpi]`
# needs (mpi4py, MPICH, click, rich, ...), for the target's Python version, x86-64 Linux.
# numpy is left out: any machine where CuPy runs has it. scripts/gpu_check.sh installs from
# the result with no network.
#
#   bash scripts/wheelhouse.sh [DIR] [PYTHON_VERSION]      # default .wheelhouse 3.12
#
# Needs what scripts/build_wheel.sh needs (Python, cargo, pip reaching PyPI). The wheels
# come from PyPI for the target's tags, whatever this machine runs.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${1:-.wheelhouse}"
PYVER="${2:-3.12}"
PYTHON="${PYTHON:-python3}"

rm -rf "$DIR"
mkdir -p "$DIR"
BUILT="$(mktemp -d)"
trap 'rm -rf "$BUILT"' EXIT
bash scripts/build_wheel.sh "$BUILT" >/dev/null
WHEEL="$(ls "$BUILT"/shmcoll-*.whl)"
cp "$WHEEL" "$DIR/"

# The requirements of shmcoll[mpi] as the wheel states them (numpy excepted), resolved by
# pip for the target's interpreter and the manylinux tags of x86-64 Linux.
REQS="$("$PYTHON" - "$WHEEL" <<'EOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist: "):
        continue
    req, _, marker = line[len("Requires-Dist: "):].partition(";")
    if marker.strip() and "extra == \"mpi\"" not in marker.replace("'", '"'):
        continue
    if re.match(r"numpy\b", req.strip()):
        continue
    print(req.strip())
EOF
)"
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
    manylinux_2_5_x86_64 manylinux1_x86_64; do
    PLATFORMS+=(--platform "$p")
done
# shellcheck disable=SC2086
"$PYTHON" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${PLATFORMS[@]}" -d "$DIR" $REQS
ls -l "$DIR"
du -sh "$DIR"
