/* Per-operation counters and their report at MPI_Finalize (SHMCOLL_PMPI_STATS=1): calls
 * handled, bytes they received, the algorithms that served them (via-<name>=calls: the
 * selection, model or tuning table, made visible), calls passed to PMPI by reason. One
 * key=value line per operation and rank, on stderr, so that tests and users can parse them;
 * then one line of the shared arena's counters (arena.c) and one of the communicators set
 * up (state.c), on pooled segments and on new ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static const char *const op_names[OP_COUNT] = {
    [OP_ALLTOALL] = "MPI_Alltoall", [OP_ALLTOALLV] = "MPI_Alltoallv", [OP_ALLGATHER] = "MPI_Allgather",
    [OP_BCAST] = "MPI_Bcast", [OP_ALLREDUCE] = "MPI_Allreduce",
    [OP_REDUCE_SCATTER_BLOCK] = "MPI_Reduce_scatter_block", [OP_BARRIER] = "MPI_Barrier",
};

static const char *const reason_names[R_COUNT] = {
    "disabled", "inter-communicator", "spans-nodes", "setup-failed",
    "derived-datatype", "declined", "reduction", "mpi-faster",
};

/* Collectives on one communicator are never concurrent (MPI forbids it), but calls on
 * different communicators may be, from different threads: hence atomic counters. */
#define MAX_ALGOS 8
static struct {
    unsigned long long handled, as_alltoall, mixed, errors, bytes, passed[R_COUNT];
    /* The engine's algorithm names are static strings: a slot is claimed by its pointer. */
    const char *algo[MAX_ALGOS];
    unsigned long long via[MAX_ALGOS];
} counts[OP_COUNT];

static void count_algorithm(enum shim_op op, const char *name)
{
    for (int i = 0; name && i < MAX_ALGOS; i++) {
        const char *seen = __atomic_load_n(&counts[op].algo[i], __ATOMIC_ACQUIRE);
        if (!seen && __atomic_compare_exchange_n(&counts[op].algo[i], &seen, name, 0, __ATOMIC_ACQ_REL,
                                                 __ATOMIC_ACQUIRE))
            seen = name;
        if (seen == name) {
            __atomic_fetch_add(&counts[op].via[i], 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

void shim_count_handled(shim_comm *s, enum shim_op op, size_t bytes, int as_alltoall)
{
    if (op != OP_BARRIER)
        count_algorithm(op, shmcoll_comm_last_algorithm(s->engine));
    __atomic_fetch_add(&counts[op].handled, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counts[op].bytes, (unsigned long long)bytes, __ATOMIC_RELAXED);
    if (as_alltoall)
        __atomic_fetch_add(&counts[op].as_alltoall, 1, __ATOMIC_RELAXED);
}

void shim_count_mixed(enum shim_op op)
{
    __atomic_fetch_add(&counts[op].mixed, 1, __ATOMIC_RELAXED);
}

void shim_count_error(enum shim_op op)
{
    __atomic_fetch_add(&counts[op].errors, 1, __ATOMIC_RELAXED);
}

static unsigned long long setups[2]; /* [0] on new segments, [1] on pooled ones */

void shim_count_setup(int pooled)
{
    __atomic_fetch_add(&setups[pooled != 0], 1, __ATOMIC_RELAXED);
}

const char *shim_op_name(enum shim_op op)
{
    return op_names[op];
}

void shim_count_passed(enum shim_op op, enum shim_reason why)
{
    __atomic_fetch_add(&counts[op].passed[why], 1, __ATOMIC_RELAXED);
}

void shim_print_stats(void)
{
    const char *v = getenv("SHMCOLL_PMPI_STATS");
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int op = 0; op < OP_COUNT; op++) {
        char line[1024];
        unsigned long long passed = 0;
        if (!op_names[op])
            continue; /* a collective the shim does not intercept */
        for (int r = 0; r < R_COUNT; r++)
            passed += counts[op].passed[r];
        if (op != OP_ALLTOALL && op != OP_ALLTOALLV && !counts[op].handled && !passed && !counts[op].errors)
            continue; /* the other collectives only when the program called them */
        int n = snprintf(line, sizeof line,
                         "[shmcoll-pmpi] rank=%d op=%s handled=%llu bytes=%llu passed=%llu", rank,
                         op_names[op], counts[op].handled, counts[op].bytes, passed);
        if (op == OP_ALLTOALLV)
            n += snprintf(line + n, sizeof line - (size_t)n, " as-alltoall=%llu mixed-paths=%llu",
                          counts[op].as_alltoall, counts[op].mixed);
        if (counts[op].errors)
            n += snprintf(line + n, sizeof line - (size_t)n, " errors=%llu", counts[op].errors);
        for (int i = 0; i < MAX_ALGOS && counts[op].algo[i]; i++)
            n += snprintf(line + n, sizeof line - (size_t)n, " via-%s=%llu", counts[op].algo[i], counts[op].via[i]);
        for (int r = 0; r < R_COUNT; r++)
            if (counts[op].passed[r])
                n += snprintf(line + n, sizeof line - (size_t)n, " %s=%llu", reason_names[r],
                              counts[op].passed[r]);
        fprintf(stderr, "%s\n", line);
    }
    /* No op= key: parsers of the per-operation lines skip it. */
    unsigned long long a[3];
    shim_arena_counts(a);
    fprintf(stderr, "[shmcoll-pmpi] rank=%d shared-malloc served=%llu in-use-bytes=%llu fallbacks=%llu\n",
            rank, a[0], a[1], a[2]);
    fprintf(stderr, "[shmcoll-pmpi] rank=%d communicators new-segment=%llu pooled-segment=%llu\n", rank,
            setups[0], setups[1]);
    fflush(stderr);
}

void shim_warn_once(const char *op, const char *msg)
{
    static int warned;
    if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        return;
    fprintf(stderr, "[shmcoll-pmpi] %s passed to MPI: %s (reported once)\n", op, msg);
}

void shim_fatal(MPI_Comm comm, const char *op, const char *msg)
{
    fprintf(stderr, "[shmcoll-pmpi] %s failed, aborting: %s\n", op, msg);
    fflush(stderr);
    PMPI_Abort(comm, 1);
}
