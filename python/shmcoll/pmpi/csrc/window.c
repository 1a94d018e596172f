/* Sizes at which MPI's own implementation beats the engine: calls in those ranges go to
 * PMPI, counted as "mpi-faster", so that preloading the library does not make a program
 * slower where that is known. Where MPI wins depends on the machine and on the MPI, so the
 * ranges are data, found in this order (the later replaces the earlier, op by op):
 *   1. built in: measured on the project's development VM (2 ranks, MPICH 5.0.2) with
 *      buffers below the shared allocator's threshold (private memory, the slower case);
 *   2. the windows file that `shmcoll pmpi --tune` writes for this MPI after measuring the
 *      library against PMPI_ on this machine (FFTW's wisdom, for the pass-through
 *      decision): $SHMCOLL_PMPI_WINDOWS, else <mpi key>.windows in the directory above
 *      this library's own (the cache of `shmcoll pmpi`, shared by its rebuilds);
 *   3. SHMCOLL_PMPI_<OP>_PASS=LO:HI (bytes, K/M suffixes).
 * A range [LO, HI) counts bytes per peer for Alltoall, per rank for Allgather and
 * Reduce_scatter_block, the buffer for Bcast and Allreduce; Barrier: 0:1 passes it
 * through; 0:0 serves every size. The byte count is the same on every rank of a correct
 * call, and every rank reads the same file, so all ranks decide alike (setup checks it:
 * shim_windows_digest is part of the agreement in state.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#ifndef SHMCOLL_MPI_KEY
#define SHMCOLL_MPI_KEY "unknown"
#endif

static struct {
    const char *name; /* in the windows file */
    const char *env;
    size_t lo, hi; /* pass [lo, hi) */
} windows[OP_COUNT] = {
    [OP_ALLTOALL] = {"alltoall", "SHMCOLL_PMPI_ALLTOALL_PASS", 0, 0},
    [OP_ALLTOALLV] = {NULL, NULL, 0, 0}, /* counts differ between ranks: no common size to test */
    /* The built-in windows pass to MPI only the sizes where MPI's own path is at least as
     * fast on private buffers (the measurements are in docs/results-pmpi.md, "The other
     * collectives"; `shmcoll pmpi --tune` measures this machine's). Allgather: the library
     * is never clearly behind, so it serves every size. */
    [OP_ALLGATHER] = {"allgather", "SHMCOLL_PMPI_ALLGATHER_PASS", 0, 0},
    /* Bcast: MPICH's eager cells win at small sizes; the one-sided, streamed Bcast wins once
     * the payload outgrows an eager cell. */
    [OP_BCAST] = {"bcast", "SHMCOLL_PMPI_BCAST_PASS", 0, 16 << 10},
    /* Allreduce: MPICH's small-message reduction wins below a few KiB on private buffers,
     * where the library's copies to and from the segment cost more than the reduction. */
    [OP_ALLREDUCE] = {"allreduce", "SHMCOLL_PMPI_ALLREDUCE_PASS", 0, 8 << 10},
    [OP_REDUCE_SCATTER_BLOCK] = {"reduce_scatter_block", "SHMCOLL_PMPI_REDUCE_SCATTER_BLOCK_PASS", 0, 0},
    [OP_BARRIER] = {"barrier", "SHMCOLL_PMPI_BARRIER_PASS", 0, 0},
};
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* "LO:HI" -> 1 and the range (each side a byte count as shim_parse_bytes reads one),
 * else 0. */
static int parse_range(const char *v, size_t *lo, size_t *hi)
{
    char buf[64];
    const char *colon = strchr(v, ':');
    size_t n = colon ? (size_t)(colon - v) : 0;
    unsigned long long a, b;
    if (!colon || n >= sizeof buf)
        return 0;
    memcpy(buf, v, n);
    buf[n] = '\0';
    if (!shim_parse_bytes(buf, &a) || !shim_parse_bytes(colon + 1, &b) || a > SIZE_MAX || b > SIZE_MAX)
        return 0;
    *lo = (size_t)a, *hi = (size_t)b;
    return *lo <= *hi;
}

static int op_named(const char *name)
{
    for (int op = 0; op < OP_COUNT; op++)
        if (windows[op].name && strcmp(windows[op].name, name) == 0)
            return op;
    return -1;
}

/* The windows file's path: $SHMCOLL_PMPI_WINDOWS, else beside this library's directory. */
static int windows_path(char *out, size_t cap)
{
    const char *env = getenv("SHMCOLL_PMPI_WINDOWS");
    if (env && *env)
        return snprintf(out, cap, "%s", env) < (int)cap;
    Dl_info info;
    if (!dladdr((void *)windows_path, &info) || !info.dli_fname)
        return 0;
    char lib[4096];
    if (snprintf(lib, sizeof lib, "%s", info.dli_fname) >= (int)sizeof lib)
        return 0;
    char *dir = dirname(lib); /* the library's directory, in `lib` */
    char *parent = dirname(dir);
    return snprintf(out, cap, "%s/%s.windows", parent, SHMCOLL_MPI_KEY) < (int)cap;
}

/* Lines "op LO:HI" ('#' starts a comment). A line that does not parse is reported and
 * skipped; the file as a whole still applies. */
static void read_file(void)
{
    char path[4096], line[256];
    if (!windows_path(path, sizeof path))
        return;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (getenv("SHMCOLL_PMPI_WINDOWS"))
            fprintf(stderr, "[shmcoll-pmpi] cannot read SHMCOLL_PMPI_WINDOWS=%s: built-in windows used\n", path);
        return;
    }
    for (int n = 1; fgets(line, sizeof line, f); n++) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char name[64], range[64], extra[2];
        int got = sscanf(line, "%63s %63s %1s", name, range, extra);
        if (got <= 0)
            continue;
        size_t lo, hi;
        int op = got == 2 ? op_named(name) : -1;
        if (op < 0 || !parse_range(range, &lo, &hi)) {
            fprintf(stderr, "[shmcoll-pmpi] %s:%d: ignored (expected \"OP LO:HI\", OP one of alltoall, allgather, "
                            "bcast, allreduce, reduce_scatter_block, barrier)\n", path, n);
            continue;
        }
        windows[op].lo = lo, windows[op].hi = hi;
    }
    fclose(f);
}

static void read_env(void)
{
    for (int op = 0; op < OP_COUNT; op++) {
        const char *v = windows[op].env ? getenv(windows[op].env) : NULL;
        size_t lo, hi;
        if (!v || !*v)
            continue;
        if (parse_range(v, &lo, &hi))
            windows[op].lo = lo, windows[op].hi = hi;
        else
            fprintf(stderr, "[shmcoll-pmpi] ignoring %s=%s: expected LO:HI, e.g. 0:16K\n", windows[op].env, v);
    }
}

static void load(void)
{
    read_file();
    read_env();
}

int shim_mpi_faster(enum shim_op op, size_t bytes)
{
    pthread_once(&once, load);
    return bytes >= windows[op].lo && bytes < windows[op].hi;
}

int shim_window_open(enum shim_op op)
{
    pthread_once(&once, load);
    return windows[op].lo < windows[op].hi;
}

unsigned long long shim_windows_digest(void)
{
    pthread_once(&once, load);
    unsigned long long h = 1469598103934665603ull; /* FNV-1a over the bounds */
    for (int op = 0; op < OP_COUNT; op++) {
        unsigned long long v[2] = {windows[op].lo, windows[op].hi};
        const unsigned char *b = (const unsigned char *)v;
        for (size_t i = 0; i < sizeof v; i++)
            h = (h ^ b[i]) * 1099511628211ull;
    }
    return h;
}
