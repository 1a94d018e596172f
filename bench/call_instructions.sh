#!/usr/bin/env bash
# Instructions per call of shmcoll's collectives on one rank, counted by callgrind (see
# bench/call_instructions.py). Needs valgrind (apt-get install valgrind).
set -euo pipefail
here="$(dirname "$0")"
N="${N:-20000}"
PY="${PYTHON:-python}"  # another build to compare: PYTHON=/path/to/venv/bin/python
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(noop barrier bcast allgather allreduce reduce_scatter alltoall alltoall_init allreduce_init)
count() {
    OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$PY" "$here/call_instructions.py" "$1" "$2" 2>&1 | awk '/Collected/ {gsub(",", "", $4); print $4}'
}
for op in "${ops[@]}"; do
    with=$(count "$op" "$N")
    without=$(count "$op" 0)
    echo "$op $(( (with - without) / N )) instructions/call"
done
