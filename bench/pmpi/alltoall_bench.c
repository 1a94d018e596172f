/* OSU-style latency of MPI_Alltoall(v) and the other collectives as the program sees
 * them: run once plainly and once with LD_PRELOAD=libshmcoll_pmpi.so to compare
 * (bench/pmpi_bench.sh does both). With -s 1 every iteration also times the same call
 * through its PMPI_ name (MPI's own implementation whatever is preloaded), alternating
 * with the MPI_ one: under the preload, the library and plain MPI side by side.
 *   alltoall_bench [-m MIN:MAX] [-i ITERS] [-x WARMUP] [-o OP,OP,...] [-s 0|1]
 * Sizes are bytes per peer, powers of 2 from MIN to MAX (suffixes K, M). Ops:
 *   alltoall           MPI_Alltoall, MPI_BYTE
 *   alltoallv          MPI_Alltoallv, every count equal (the library's Alltoall path)
 *   alltoallv-ragged   MPI_Alltoallv, counts 2/3, 1 and 4/3 of the size, by rank pair
 *   alltoall-derived   MPI_Alltoall with an MPI_Type_vector send type (passed to MPI)
 *   allgather          MPI_Allgather, MPI_BYTE
 *   allreduce          MPI_Allreduce, MPI_SUM on MPI_DOUBLE (size / 8 of them)
 *   reduce-scatter     MPI_Reduce_scatter_block, MPI_SUM on MPI_DOUBLE (size / 8 per rank)
 *   bcast              MPI_Bcast from rank 0, MPI_BYTE
 *   barrier            MPI_Barrier (one line, size 0)
 *   copy-floor         not a collective: the bytes of an Alltoall moved with memcpy into
 *                      the peers' receive buffers in an MPI-3 shared-memory window, then a
 *                      PMPI_Barrier (timed). One copy per byte is what any shared-memory
 *                      Alltoall must do, so this is the machine's floor for the alltoall rows.
 * Every iteration rewrites the send buffer and starts after an untimed barrier; the time
 * of an iteration is the slowest rank's; printed is the median over iterations (us), one
 * line per op and size: "op bytes median_us". Above 64 KiB a tenth of the iterations.
 * With -s 1 the two sides swap turns every iteration, so that neither always runs second
 * (on the caches the first one left). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k') v *= 1024;
    if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    return (size_t)v;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int rank, size, side_by_side;

/* Ragged counts: c(i, j) in {2/3, 1, 4/3} x n, by (i + 2j) mod 3. */
static int ragged(int i, int j, size_t n)
{
    return (int)(n * (size_t)(2 + (i + 2 * j) % 3) / 3);
}

typedef int (*alltoall_fn)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
typedef int (*alltoallv_fn)(const void *, const int *, const int *, MPI_Datatype, void *, const int *,
                            const int *, MPI_Datatype, MPI_Comm);
typedef alltoall_fn allgather_fn; /* the same signature */
typedef int (*allreduce_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
typedef int (*rsb_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
typedef int (*bcast_fn)(void *, int, MPI_Datatype, int, MPI_Comm);
typedef int (*barrier_fn)(MPI_Comm);

static double median(double *times, int iters)
{
    MPI_Reduce(rank ? times : MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    qsort(times, iters, sizeof *times, cmp);
    return times[iters / 2] * 1e6;
}

/* The copy-floor op: median of one push of every block with memcpy, plus the barrier. */
static double copy_floor(size_t n, int iters, int warmup, unsigned char *send, double *times)
{
    unsigned char *mine = NULL;
    MPI_Win win;
    MPI_Win_allocate_shared((MPI_Aint)(n * (size_t)size), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mine, &win);
    unsigned char **recv = malloc(sizeof(*recv) * (size_t)size);
    for (int j = 0; j < size; j++) {
        MPI_Aint bytes;
        int unit;
        MPI_Win_shared_query(win, j, &bytes, &unit, &recv[j]);
    }
    memset(mine, 0, n * (size_t)size);
    for (int it = 0; it < warmup + iters; it++) {
        memset(send, it & 0xff, n * (size_t)size);
        PMPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int k = 0; k < size; k++) {
            int j = (rank + k) % size;
            memcpy(recv[j] + (size_t)rank * n, send + (size_t)j * n, n);
        }
        PMPI_Barrier(MPI_COMM_WORLD);
        if (it >= warmup)
            times[it - warmup] = MPI_Wtime() - t0;
    }
    free(recv);
    MPI_Win_free(&win);
    return median(times, iters);
}

/* Medians of `op` through its MPI_ name (out[0]) and its PMPI_ name (out[1]). */
static void run(const char *op, size_t n, int iters, int warmup, unsigned char *send,
                unsigned char *recv, double *times, double *ptimes, double out[2])
{
    int *sc = malloc(sizeof(int) * size), *sd = malloc(sizeof(int) * size);
    int *rc = malloc(sizeof(int) * size), *rd = malloc(sizeof(int) * size);
    int derived = strcmp(op, "alltoall-derived") == 0, rag = strcmp(op, "alltoallv-ragged") == 0;
    MPI_Datatype vec = MPI_DATATYPE_NULL;
    size_t send_bytes = n * size;
    if (derived) { /* n bytes of doubles per peer, every other double of the send buffer */
        MPI_Type_vector((int)(n / 8), 1, 2, MPI_DOUBLE, &vec);
        MPI_Type_commit(&vec);
        send_bytes = 2 * n * size;
    }
    for (int j = 0, s = 0, r = 0; j < size; j++) {
        sc[j] = rag ? ragged(rank, j, n) : (int)n;
        rc[j] = rag ? ragged(j, rank, n) : (int)n;
        sd[j] = s, rd[j] = r;
        s += sc[j], r += rc[j];
    }
    alltoall_fn a2a[2] = {MPI_Alltoall, PMPI_Alltoall};
    alltoallv_fn a2av[2] = {MPI_Alltoallv, PMPI_Alltoallv};
    allgather_fn ag[2] = {MPI_Allgather, PMPI_Allgather};
    allreduce_fn ar[2] = {MPI_Allreduce, PMPI_Allreduce};
    rsb_fn rsb[2] = {MPI_Reduce_scatter_block, PMPI_Reduce_scatter_block};
    bcast_fn bc[2] = {MPI_Bcast, PMPI_Bcast};
    barrier_fn ba[2] = {MPI_Barrier, PMPI_Barrier};
    for (int it = 0; it < warmup + iters; it++) {
        for (int turn = 0; turn < 1 + side_by_side; turn++) {
            int k = side_by_side ? (turn + it) & 1 : 0; /* k = 0: MPI_ name, 1: PMPI_ name */
            /* Repeated bytes: for allreduce, doubles that are normal, zero or NaN, never
             * denormal (no slow arithmetic on either side). */
            memset(send, (it * 2 + k) & 0xff, send_bytes);
            PMPI_Barrier(MPI_COMM_WORLD); /* MPI's own in both launches: the library serves MPI_Barrier */
            double t0 = MPI_Wtime();
            if (strcmp(op, "alltoall") == 0)
                a2a[k](send, (int)n, MPI_BYTE, recv, (int)n, MPI_BYTE, MPI_COMM_WORLD);
            else if (strcmp(op, "alltoallv") == 0 || rag)
                a2av[k](send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
            else if (derived)
                a2a[k](send, 1, vec, recv, (int)(n / 8), MPI_DOUBLE, MPI_COMM_WORLD);
            else if (strcmp(op, "allreduce") == 0)
                ar[k](send, recv, (int)(n / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            else if (strcmp(op, "reduce-scatter") == 0)
                rsb[k](send, recv, (int)(n / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            else if (strcmp(op, "bcast") == 0)
                bc[k](send, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
            else if (strcmp(op, "barrier") == 0)
                ba[k](MPI_COMM_WORLD);
            else
                ag[k](send, (int)n, MPI_BYTE, recv, (int)n, MPI_BYTE, MPI_COMM_WORLD);
            double t = MPI_Wtime() - t0;
            if (it >= warmup)
                (k ? ptimes : times)[it - warmup] = t;
        }
    }
    out[0] = median(times, iters);
    out[1] = side_by_side ? median(ptimes, iters) : 0;
    if (derived)
        MPI_Type_free(&vec);
    free(sc), free(sd), free(rc), free(rd);
}

int main(int argc, char **argv)
{
    size_t lo = 8, hi = 16 << 20;
    int iters = 1000, warmup = 100;
    char ops[256] = "alltoall,alltoallv,alltoallv-ragged,alltoall-derived,allgather,allreduce";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int a = 1; a + 1 < argc; a += 2) {
        if (strcmp(argv[a], "-m") == 0) {
            char *colon = strchr(argv[a + 1], ':');
            lo = parse_size(argv[a + 1]);
            hi = colon ? parse_size(colon + 1) : lo;
        } else if (strcmp(argv[a], "-i") == 0) {
            iters = atoi(argv[a + 1]);
        } else if (strcmp(argv[a], "-x") == 0) {
            warmup = atoi(argv[a + 1]);
        } else if (strcmp(argv[a], "-s") == 0) {
            side_by_side = atoi(argv[a + 1]) != 0;
        } else if (strcmp(argv[a], "-o") == 0) {
            snprintf(ops, sizeof ops, "%s", argv[a + 1]);
        } else {
            if (rank == 0)
                fprintf(stderr, "unknown option %s\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (iters < 1 || lo < 1 || hi < lo) {
        if (rank == 0)
            fprintf(stderr, "need -i >= 1 and 1 <= MIN <= MAX\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* 4/3 of the largest size per peer covers the ragged counts; 2x the derived type. */
    size_t cap = 2 * hi * (size_t)size + 64;
    unsigned char *send = malloc(cap), *recv = malloc(cap);
    double *times = malloc(sizeof(double) * (size_t)iters), *ptimes = malloc(sizeof(double) * (size_t)iters);
    memset(recv, 0, cap);
    for (char *op = strtok(ops, ","); op; op = strtok(NULL, ",")) {
        for (size_t n = lo; n <= hi; n *= 2) {
            if ((strcmp(op, "alltoall-derived") == 0 || strcmp(op, "allreduce") == 0 ||
                 strcmp(op, "reduce-scatter") == 0) && n < 8)
                continue; /* whole doubles */
            if (strcmp(op, "barrier") == 0 && n != lo)
                break; /* one size is enough */
            int it = n > (64 << 10) ? (iters + 9) / 10 : iters;
            double us[2] = {0, 0};
            if (strcmp(op, "copy-floor") == 0)
                us[0] = copy_floor(n, it, n > (64 << 10) ? (warmup + 9) / 10 : warmup, send, times);
            else
                run(op, n, it, n > (64 << 10) ? (warmup + 9) / 10 : warmup, send, recv, times, ptimes, us);
            if (rank == 0)
                printf("%s %zu %.3f %.3f\n", op, n, us[0], us[1]);
            fflush(stdout);
        }
    }
    free(send), free(recv), free(times), free(ptimes);
    MPI_Finalize();
    return 0;
}
