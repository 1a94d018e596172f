#!/usr/bin/env bash
# A C program's MPI_Alltoall(v) with and without the PMPI library (LD_PRELOAD), in
# alternating launches of bench/pmpi/alltoall_bench.c, then a table of the medians with
# ratios and the bars of docs/results-pmpi.md (bench/pmpi_table.py).
#   bench/pmpi_bench.sh [alltoall_bench options: -m MIN:MAX -i ITERS -x WARMUP -o OPS]
# Add copy-floor to -o OPS for the machine's one-copy floor beside the alltoall rows.
#   NP=4 ROUNDS=3 SIDE=1 MPICC=/path/to/mpicc MPIEXEC=/path/to/mpiexec bench/pmpi_bench.sh
# ROUNDS launches of each kind alternate; a row shows the lowest median of each kind, so
# that a burst of load from elsewhere on a shared machine hits neither side alone.
# SIDE=1 adds a launch that times the library and MPI's own PMPI_ calls alternately in the
# same processes (the "same launch" columns: immune to load that comes and goes between
# launches, but each side then runs with the other's data in the caches).
# OUT=DIR keeps the launches' outputs there (plain.R, shmcoll.R, stats.R, side, and mpi: the
# MPI they ran under) instead of a temporary directory, replacing any earlier ones, so that
# bench/results.py can draw the table again (python bench/results.py --run 'pmpi ...').
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bindir=$(dirname "$(command -v "$PY")")
MPICC=${MPICC:-$bindir/mpicc}
MPIEXEC=${MPIEXEC:-$bindir/mpiexec}
NP=${NP:-2}
ROUNDS=${ROUNDS:-2}
SIDE=${SIDE:-0}
flags=()
if "$MPIEXEC" --version 2>/dev/null | grep -q -E "Open MPI|OpenRTE|PRRTE"; then
    flags=(--oversubscribe)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
lib=$("$PY" -m shmcoll.cli pmpi --path --mpicc "$MPICC")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$MPICC" -O2 -o "$work/alltoall_bench" bench/pmpi/alltoall_bench.c
out=$work
if [ -n "${OUT:-}" ]; then
    out=$OUT
    mkdir -p "$out"
    rm -f "$out"/plain.* "$out"/shmcoll.* "$out"/stats.* "$out/side" "$out/mpi"
fi
mpi=$("$PY" -m shmcoll.cli pmpi --mpicc "$MPICC" | sed -n 1p)  # sed reads it all: no SIGPIPE under pipefail
echo "$mpi" >"$out/mpi"
echo "library: $lib" >&2
for r in $(seq "$ROUNDS"); do
    echo "round $r/$ROUNDS: plain MPI" >&2
    "$MPIEXEC" "${flags[@]}" -n "$NP" "$work/alltoall_bench" "$@" >"$out/plain.$r"
    echo "round $r/$ROUNDS: with LD_PRELOAD=$(basename "$lib")" >&2
    LD_PRELOAD=$lib SHMCOLL_PMPI_STATS=1 "$MPIEXEC" "${flags[@]}" -n "$NP" "$work/alltoall_bench" "$@" \
        >"$out/shmcoll.$r" 2>"$out/stats.$r"
done
if [ "$SIDE" = 1 ]; then
    echo "side by side: the library and PMPI_ calls alternating in one launch" >&2
    LD_PRELOAD=$lib "$MPIEXEC" "${flags[@]}" -n "$NP" "$work/alltoall_bench" "$@" -s 1 >"$out/side"
fi
grep -h "rank=0" "$out/stats.1" >&2 || true
echo "command: NP=$NP ROUNDS=$ROUNDS SIDE=$SIDE bench/pmpi_bench.sh $*  ($mpi)"
side=()
[ "$SIDE" = 1 ] && side=(--side "$out/side")
"$PY" bench/pmpi_table.py --plain "$out"/plain.* --shmcoll "$out"/shmcoll.* "${side[@]}"
