#!/usr/bin/env bash
# A wheelhouse for a machine without network (a GPU node behind a firewall, a lent test
# machine): shmcoll's wheel built from this checkout, every wheel that `shmcoll[mpi]`
# needs (mpi4py, MPICH, click, rich, ...) and pytest with pytest-timeout (for the checks'
# tests), for the target's Python version, x86-64 Linux. numpy is left out: any machine
# where CuPy runs has it. scripts/gpu_check.sh installs from the result with no network.
# DIR is emptied first, and must hold nothing but wheels (an earlier wheelhouse).
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

if [ -d "$DIR" ] && [ -n "$(find "$DIR" -mindepth 1 ! -name '*.whl' -print -quit)" ]; then
    echo "$DIR holds more than wheels: not emptying it" >&2
    exit 1
fi
mkdir -p "$DIR"
rm -f "$DIR"/*.whl
BUILT="$(mktemp -d)"
trap 'rm -rf "$BUILT"' EXIT
bash scripts/build_wheel.sh "$BUILT" >/dev/null
WHEEL="$(ls "$BUILT"/shmcoll-*.whl)"
cp "$WHEEL" "$DIR/"

# The requirements of shmcoll[mpi] as the wheel states them (numpy excepted), markers
# kept (pip evaluates them for the target's Python version), resolved by pip for the
# target's interpreter and the manylinux tags of x86-64 Linux.
REQS="$("$PYTHON" - "$WHEEL" <<'EOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist: "):
        continue
    req, _, marker = line[len("Requires-Dist: "):].partition(";")
    marker = marker.replace("'", '"').strip()
    if "extra ==" in marker:
        if 'extra == "mpi"' not in marker:
            continue
        marker = re.sub(r'\s*(and\s+)?extra == "mpi"(\s+and)?\s*', "", marker).strip()
    if re.match(r"numpy\b", req.strip()):
        continue
    print(req.strip() + (f"; {marker}" if marker else ""))
EOF
)"
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
    manylinux_2_5_x86_64 manylinux1_x86_64; do
    PLATFORMS+=(--platform "$p")
done
mapfile -t REQS_ARRAY <<<"$REQS"
"$PYTHON" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${PLATFORMS[@]}" -d "$DIR" "${REQS_ARRAY[@]}" pytest pytest-timeout
ls -l "$DIR"
du -sh "$DIR"
