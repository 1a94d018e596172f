#!/usr/bin/env bash
# Release artefacts from this checkout: the wheel (manylinux_2_28, so that it installs on
# glibc 2.28 and newer, not only on this machine's glibc) and the sdist, into OUTDIR
# (default dist/). The wheel goes through shmcoll's PEP 517 backend (build_backend/), which
# adds the PMPI library's prebuilt engine and the CUDA sources and strips the binaries;
# maturin links against glibc 2.28's symbols with zig (the ziglang wheel) as the linker.
# Needs Python >= 3.11, cargo and pip reaching PyPI; the build tools live in their own
# virtual environment ($SHMCOLL_BUILD_VENV, default .venv-build), reused between runs.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${1:-dist}"
VENV="${SHMCOLL_BUILD_VENV:-.venv-build}"
COMPATIBILITY="manylinux_2_28"

[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"  # maturin finds zig through this environment's Python
python -m pip install -q "maturin>=1.12.1,<2" "ziglang>=0.13,<0.18"

mkdir -p "$OUT"
MATURIN_PEP517_ARGS="--zig --compatibility $COMPATIBILITY" \
    python -m pip wheel -q --no-deps --no-build-isolation -w "$OUT" .
maturin sdist -o "$OUT"
ls -l "$OUT"
