/* Sizes at which MPI's own implementation beat the engine when measured (bench/
 * pmpi_bench.sh and alltoall_bench -s 1, 2 ranks, MPICH 5.0.2, the project's development
 * VM): calls in those ranges go to PMPI, counted as "mpi-faster", so that preloading the
 * library does not make a program slower where that is known. The ranges are where
 * small, private buffers (below the shared allocator's threshold) lose; buffers in the
 * arena lose only in narrower ranges (Bcast below 8 KiB, Allreduce below 2 KiB, Allgather
 * nowhere), but the decision has to be the same on every rank, hence on the size alone.
 * SHMCOLL_PMPI_<OP>_PASS=LO:HI (bytes, K/M suffixes: bytes per peer for Alltoall, per
 * rank for Allgather and Reduce_scatter_block, the buffer for Bcast and Allreduce;
 * Barrier: 0:1 passes it through) replaces the range; 0:0 serves every size. The byte
 * count is the same on every rank of a correct call, so all ranks decide alike. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim.h"

static struct {
    const char *env;
    size_t lo, hi; /* pass [lo, hi) */
} windows[OP_COUNT] = {
    [OP_ALLTOALL] = {"SHMCOLL_PMPI_ALLTOALL_PASS", 0, 0},
    [OP_ALLTOALLV] = {NULL, 0, 0}, /* counts differ between ranks: no common size to test */
    [OP_ALLGATHER] = {"SHMCOLL_PMPI_ALLGATHER_PASS", 4 << 10, 64 << 10},
    [OP_BCAST] = {"SHMCOLL_PMPI_BCAST_PASS", 0, 64 << 10},
    [OP_ALLREDUCE] = {"SHMCOLL_PMPI_ALLREDUCE_PASS", 0, 4 << 10},
    [OP_REDUCE_SCATTER_BLOCK] = {"SHMCOLL_PMPI_REDUCE_SCATTER_BLOCK_PASS", 0, 0},
    [OP_BARRIER] = {"SHMCOLL_PMPI_BARRIER_PASS", 0, 0},
};
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int parse_size(const char *s, size_t *out, char **end)
{
    unsigned long long v = strtoull(s, end, 10);
    if (*end == s)
        return 0;
    if (**end == 'K' || **end == 'k')
        v <<= 10, (*end)++;
    else if (**end == 'M' || **end == 'm')
        v <<= 20, (*end)++;
    *out = (size_t)v;
    return 1;
}

static void read_env(void)
{
    for (int op = 0; op < OP_COUNT; op++) {
        const char *v = windows[op].env ? getenv(windows[op].env) : NULL;
        size_t lo, hi;
        char *end;
        if (!v || !*v)
            continue;
        if (parse_size(v, &lo, &end) && *end == ':' && parse_size(end + 1, &hi, &end) && !*end && lo <= hi) {
            windows[op].lo = lo, windows[op].hi = hi;
        } else {
            fprintf(stderr, "[shmcoll-pmpi] ignoring %s=%s: expected LO:HI, e.g. 0:16K\n", windows[op].env, v);
        }
    }
}

int shim_mpi_faster(enum shim_op op, size_t bytes)
{
    pthread_once(&once, read_env);
    return bytes >= windows[op].lo && bytes < windows[op].hi;
}
