/* Erroneous calls through the library: a call one rank gets wrong (a negative count, a
 * bad root, a NULL buffer, sizes that differ from its peers') must fail on every rank,
 * within that call, with an MPI error of the right class, leaving every receive buffer as
 * it was; the next correct call must work. Run under mpiexec with the library preloaded.
 *
 *   errors_check return   MPI_ERRORS_RETURN on MPI_COMM_WORLD: every case, checked; prints
 *                         "errors_check: N cases, F failures" on rank 0, exits 1 on a failure.
 *   errors_check window   MPI_ERRORS_RETURN, under the default pass-through windows: small
 *                         calls wrong on one rank (a bad root, a NULL buffer, a negative
 *                         count) go to PMPI_ on every rank, so the wrong rank gets MPI's
 *                         own error at once and its peers wait for its next, correct call,
 *                         as without the library; prints every rank's outcome, to compare
 *                         with a run without the library ("nonull" as a second argument
 *                         leaves out the NULL buffers, which not every MPI checks).
 *   errors_check fatal-alltoall | fatal-alltoallv
 *                         the default MPI_ERRORS_ARE_FATAL: rank 0's negative Alltoall count
 *                         (or Alltoallv counts that disagree) must abort the job; a rank that
 *                         returns from the call prints "returned from the erroneous call".
 *   errors_check fatal-small-bcast
 *                         the same for a small Bcast with a bad root on the last rank, under
 *                         the default windows: MPI's own check (in PMPI_) aborts the job.
 *
 * Each erroneous call must return within MAX_SECONDS: a rank left waiting for a peer would
 * sit in the engine until its deadline (the test sets SHMCOLL_TIMEOUT far above it). */
#include <string.h>

#include "common.h"

#define MAX_SECONDS 5.0
#define SENTINEL 0x5a
#define N 1024 /* ints per block: above every pass-through window the test leaves open */

static int cases, failures, rank, size;

static void fail(const char *what, const char *fmt, int a, int b)
{
    failures++;
    fprintf(stderr, "rank %d: %s: ", rank, what);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
}

static int untouched(const void *buf, size_t n)
{
    const unsigned char *b = buf;
    for (size_t i = 0; i < n; i++)
        if (b[i] != SENTINEL)
            return 0;
    return 1;
}

/* The erroneous call returned `rc` after `seconds`: it must have failed with `want`
 * (an MPI error class) and left the `n` bytes of `recv` as they were. */
static void expect_error(const char *what, int rc, double seconds, int want, const void *recv, size_t n)
{
    int cls = MPI_SUCCESS;
    cases++;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    if (rc == MPI_SUCCESS || cls != want)
        fail(what, "returned error class %d, expected %d", cls, want);
    if (seconds > MAX_SECONDS)
        fail(what, "took %d s (limit %d s): a rank waited for its peers", (int)seconds, (int)MAX_SECONDS);
    if (recv && !untouched(recv, n))
        fail(what, "the receive buffer was written (%d of %d bytes checked)", (int)n, (int)n);
}

static void expect_success(const char *what, int rc, int ok)
{
    cases++;
    if (rc != MPI_SUCCESS || !ok)
        fail(what, "correct call after the error: rc %d, data right %d", rc, ok);
}

static int *ints(size_t n)
{
    int *v = xmalloc(sizeof(int) * n);
    memset(v, SENTINEL, sizeof(int) * n);
    return v;
}

/* A correct Alltoall: block j of rank r holds r * 1000 + j. */
static int alltoall_works(void)
{
    int *s = ints((size_t)N * size), *r = ints((size_t)N * size), ok = 1;
    for (int j = 0; j < size; j++)
        for (int i = 0; i < N; i++)
            s[j * N + i] = rank * 1000 + j;
    int rc = MPI_Alltoall(s, N, MPI_INT, r, N, MPI_INT, MPI_COMM_WORLD);
    for (int j = 0; j < size && rc == MPI_SUCCESS; j++)
        ok &= r[j * N] == j * 1000 + rank && r[j * N + N - 1] == j * 1000 + rank;
    free(s), free(r);
    return rc == MPI_SUCCESS && ok;
}

static void alltoall_cases(void)
{
    size_t n = (size_t)N * size;
    int *s = ints(n), *r = ints(n);
    double t = MPI_Wtime();
    /* A negative count on rank 0 only. */
    int rc = MPI_Alltoall(s, rank == 0 ? -1 : N, MPI_INT, r, rank == 0 ? -1 : N, MPI_INT, MPI_COMM_WORLD);
    expect_error("Alltoall, negative count on rank 0", rc, MPI_Wtime() - t, MPI_ERR_COUNT, r, sizeof(int) * n);
    expect_success("Alltoall after it", MPI_SUCCESS, alltoall_works());

    /* Rank 0 sends more than it receives. */
    memset(r, SENTINEL, sizeof(int) * n);
    t = MPI_Wtime();
    rc = MPI_Alltoall(s, rank == 0 ? N / 2 : N, MPI_INT, r, N, MPI_INT, MPI_COMM_WORLD);
    expect_error("Alltoall, send and receive sizes differ on rank 0", rc, MPI_Wtime() - t, MPI_ERR_COUNT, r,
                 sizeof(int) * n);

    /* Sizes that agree on each rank but differ between ranks: the engine's verdict. */
    t = MPI_Wtime();
    rc = MPI_Alltoall(s, rank == size - 1 ? N / 2 : N, MPI_INT, r, rank == size - 1 ? N / 2 : N, MPI_INT,
                      MPI_COMM_WORLD);
    expect_error("Alltoall, sizes differ between ranks", rc, MPI_Wtime() - t, MPI_ERR_COUNT, r, sizeof(int) * n);

    /* A NULL receive buffer on rank 0. */
    t = MPI_Wtime();
    rc = MPI_Alltoall(s, N, MPI_INT, rank == 0 ? NULL : r, N, MPI_INT, MPI_COMM_WORLD);
    expect_error("Alltoall, NULL receive buffer on rank 0", rc, MPI_Wtime() - t, MPI_ERR_BUFFER, rank ? r : NULL,
                 sizeof(int) * n);
    expect_success("Alltoall after them", MPI_SUCCESS, alltoall_works());
    free(s), free(r);
}

/* Alltoallv with every block `count` ints, at displacement j * N (plus `shift`). */
static int alltoallv(int *s, int *r, int scount, int rcount, int shift)
{
    int sc[64], sd[64], rc[64], rd[64];
    for (int j = 0; j < size; j++) {
        sc[j] = scount, rc[j] = rcount;
        sd[j] = j * N + shift, rd[j] = j * N + shift;
    }
    return MPI_Alltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, MPI_COMM_WORLD);
}

static void alltoallv_cases(void)
{
    size_t n = (size_t)N * size;
    int *s = ints(n), *r = ints(n);
    double t = MPI_Wtime();
    /* The last rank expects one int more from each rank than they send it. */
    int rc = alltoallv(s, r, N - 1, rank == size - 1 ? N : N - 1, 0);
    expect_error("Alltoallv, counts disagree between ranks", rc, MPI_Wtime() - t, MPI_ERR_COUNT, r,
                 sizeof(int) * n);

    /* A negative count on rank 0, while the others' equal counts take the Alltoall path. */
    t = MPI_Wtime();
    rc = alltoallv(s, r, rank == 0 ? -1 : N, N, 0);
    expect_error("Alltoallv, negative count on rank 0", rc, MPI_Wtime() - t, MPI_ERR_COUNT, r, sizeof(int) * n);

    /* Negative displacements are MPI's too: the buffer arguments point at block 1. */
    for (int j = 0; j < size; j++)
        for (int i = 0; i < N; i++)
            s[j * N + i] = rank * 1000 + j;
    rc = alltoallv(s + N, r + N, N, N, -N);
    int ok = 1;
    for (int j = 0; j < size && rc == MPI_SUCCESS; j++)
        ok &= r[j * N] == j * 1000 + rank && r[j * N + N - 1] == j * 1000 + rank;
    expect_success("Alltoallv with negative displacements", rc, ok);
    free(s), free(r);
}

static void allreduce_cases(void)
{
    double *s = xmalloc(sizeof(double) * N), *r = xmalloc(sizeof(double) * N);
    for (int i = 0; i < N; i++)
        s[i] = rank + i;
    memset(r, SENTINEL, sizeof(double) * N);
    double t = MPI_Wtime();
    int rc = MPI_Allreduce(s, r, rank == 0 ? -1 : N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    expect_error("Allreduce, negative count on rank 0", rc, MPI_Wtime() - t, MPI_ERR_COUNT, r, sizeof(double) * N);
    t = MPI_Wtime();
    rc = MPI_Allreduce(s, r, rank == size - 1 ? N / 2 : N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    expect_error("Allreduce, counts differ between ranks", rc, MPI_Wtime() - t, MPI_ERR_COUNT, r,
                 sizeof(double) * N);
    /* MPI_IN_PLACE where the receive buffer goes, on rank 0. */
    t = MPI_Wtime();
    rc = MPI_Allreduce(s, rank == 0 ? MPI_IN_PLACE : r, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    expect_error("Allreduce, MPI_IN_PLACE as the receive buffer on rank 0", rc, MPI_Wtime() - t, MPI_ERR_BUFFER,
                 rank ? r : NULL, sizeof(double) * N);
    rc = MPI_Allreduce(s, r, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double want = (double)size * (size - 1) / 2;
    expect_success("Allreduce after them", rc, r[0] == want && r[N - 1] == want + (double)size * (N - 1));
    free(s), free(r);
}

static void bcast_cases(void)
{
    size_t bytes = sizeof(int) * N;
    int *b = ints(N);
    /* Rank 0, the root the others name, passes a root out of range. */
    double t = MPI_Wtime();
    int rc = MPI_Bcast(b, N, MPI_INT, rank == 0 ? size : 0, MPI_COMM_WORLD);
    expect_error("Bcast, bad root on the root", rc, MPI_Wtime() - t, MPI_ERR_ROOT, b, bytes);

    /* A non-root passes a bad root. The root of a Bcast the engine serves one-sided has
     * left by the time the rejection is published: it and the other ranks may complete
     * it, and then every rank fails its next call on the communicator instead (the
     * notice of the rejection, with its class). What a rank sees of the first call: the
     * rejecting rank fails, a rank that fails kept its buffer, a rank that succeeds got
     * the root's data; and no rank waits. */
    for (int i = 0; i < N; i++)
        b[i] = rank == 0 ? 7 : (int)0x5a5a5a5a;
    t = MPI_Wtime();
    rc = MPI_Bcast(b, N, MPI_INT, rank == size - 1 ? -1 : 0, MPI_COMM_WORLD);
    double took = MPI_Wtime() - t;
    int completed = rc == MPI_SUCCESS;
    if (rank == size - 1 || rc != MPI_SUCCESS) {
        expect_error("Bcast, bad root on a non-root", rc, took, MPI_ERR_ROOT, rank == 0 ? NULL : b, bytes);
    } else {
        expect_success("Bcast, a peer's bad root (served before it was published)", rc,
                       b[0] == 7 && b[N - 1] == 7 && took < MAX_SECONDS);
    }

    /* The next Bcast: the notice on every rank if some rank completed the first one. */
    memset(b, SENTINEL, bytes);
    for (int i = 0; rank == 0 && i < N; i++)
        b[i] = 11;
    t = MPI_Wtime();
    rc = MPI_Bcast(b, N, MPI_INT, 0, MPI_COMM_WORLD);
    took = MPI_Wtime() - t;
    int noticed = rc != MPI_SUCCESS;
    if (noticed)
        expect_error("Bcast after a one-sided Bcast a rank rejected", rc, took, MPI_ERR_ROOT, rank == 0 ? NULL : b,
                     bytes);
    else
        expect_success("Bcast after them", rc, b[0] == 11 && b[N - 1] == 11);

    /* Every rank agrees: some rank completed the first Bcast exactly when every rank got
     * the notice; and the communicator works afterwards. */
    int mine[2] = {completed, noticed}, all[2] = {0, 0}, every[2] = {1, 1};
    rc = MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    expect_success("Allreduce after the notice", rc, 1);
    rc = MPI_Allreduce(mine, every, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    expect_success("Allreduce after the notice", rc, 1);
    cases++;
    if (all[0] != every[1] || all[1] != every[1])
        fail("the notice of a rejected one-sided Bcast", "some rank completed: %d, every rank noticed: %d", all[0],
             every[1]);
    for (int i = 0; i < N; i++)
        b[i] = rank == 0 ? 13 : 0;
    rc = MPI_Bcast(b, N, MPI_INT, 0, MPI_COMM_WORLD);
    expect_success("Bcast after the notice", rc, b[0] == 13 && b[N - 1] == 13);
    free(b);
}

static void allgather_cases(void)
{
    size_t n = (size_t)N * size;
    int *s = ints(N), *r = ints(n);
    double t = MPI_Wtime();
    int rc = MPI_Allgather(s, rank == 0 ? N - 1 : N, MPI_INT, r, N, MPI_INT, MPI_COMM_WORLD);
    expect_error("Allgather, send and receive sizes differ on rank 0", rc, MPI_Wtime() - t, MPI_ERR_COUNT, r,
                 sizeof(int) * n);
    t = MPI_Wtime();
    rc = MPI_Allgather(s, N, rank == 0 ? MPI_DATATYPE_NULL : MPI_INT, r, N, MPI_INT, MPI_COMM_WORLD);
    expect_error("Allgather, null datatype on rank 0", rc, MPI_Wtime() - t, MPI_ERR_TYPE, r, sizeof(int) * n);
    free(s), free(r);
}

/* Small sizes: inside the default windows of Bcast (below 16 KiB) and Allreduce (below
 * 8 KiB), so MPI's own implementation serves them. */
#define SMALL 16

/* A rank's outcome of a call, printed for the comparison with a run without the library;
 * no rank may wait for long (the wrong rank's peers wait only for its next call). */
static void outcome(const char *what, int rc, double seconds, int bad)
{
    int cls = MPI_SUCCESS;
    cases++;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    printf("rank %d: %s: class %d\n", rank, what, cls);
    if ((rank == bad) != (rc != MPI_SUCCESS))
        fail(what, "error class %d on rank %d: expected an error on the wrong rank only", cls, rank);
    if (seconds > MAX_SECONDS)
        fail(what, "took %d s (limit %d s): a rank waited for the engine's deadline", (int)seconds,
             (int)MAX_SECONDS);
}

/* A small Bcast from rank 0 that rank `bad` gets wrong: a root out of range (`bad_root`),
 * a NULL buffer, or a negative count. Then `bad` makes the call right, which completes
 * its peers' call, and every rank must hold the root's data. */
static void window_bcast(const char *what, int bad, int n, int bad_root, int null_buffer, int negative)
{
    int *b = xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        b[i] = rank == 0 ? 100 + i : (int)0x5a5a5a5a;
    double t = MPI_Wtime();
    int rc = rank != bad ? MPI_Bcast(b, n, MPI_INT, 0, MPI_COMM_WORLD)
                         : MPI_Bcast(null_buffer ? NULL : b, negative ? -1 : n, MPI_INT, bad_root ? size : 0,
                                     MPI_COMM_WORLD);
    outcome(what, rc, MPI_Wtime() - t, bad);
    if (rank == bad)
        rc = MPI_Bcast(b, n, MPI_INT, 0, MPI_COMM_WORLD);
    expect_success(what, rc, b[0] == 100 && b[n - 1] == 100 + n - 1);
    free(b);
}

/* An Allreduce of `n` doubles that rank `bad` gets wrong (a NULL receive buffer or a
 * negative count), then makes right: every rank must hold the sum. */
static void window_allreduce(const char *what, int bad, int n, int null_recv, int negative)
{
    double *s = xmalloc(sizeof(double) * (size_t)n), *r = xmalloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++)
        s[i] = rank + i;
    memset(r, SENTINEL, sizeof(double) * (size_t)n);
    double t = MPI_Wtime();
    int rc = rank != bad ? MPI_Allreduce(s, r, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD)
                         : MPI_Allreduce(s, null_recv ? NULL : r, negative ? -1 : n, MPI_DOUBLE, MPI_SUM,
                                         MPI_COMM_WORLD);
    outcome(what, rc, MPI_Wtime() - t, bad);
    if (rank == bad)
        rc = MPI_Allreduce(s, r, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double want = (double)size * (size - 1) / 2;
    expect_success(what, rc, r[0] == want && r[n - 1] == want + (double)size * (n - 1));
    free(s), free(r);
}

static void window_cases(int nulls)
{
    int last = size - 1;
    window_bcast("small Bcast, bad root on a non-root", last, SMALL, 1, 0, 0);
    window_bcast("small Bcast, bad root on the root", 0, SMALL, 1, 0, 0);
    window_bcast("small Bcast, negative count on a non-root", last, SMALL, 0, 0, 1);
    if (nulls) {
        window_bcast("small Bcast, NULL buffer on a non-root", last, SMALL, 0, 1, 0);
        window_allreduce("small Allreduce, NULL receive buffer on the last rank", last, SMALL, 1, 0);
    }
    /* The peers' size is above the window (the engine serves it): the wrong rank, which
     * cannot know that from a negative count, goes to PMPI_ all the same, and its peers
     * in the engine take its next call, as MPI's would. (Not with Allreduce: MPICH
     * itself mishandles a negative count there, so there is no behaviour of MPI's to
     * compare with.) */
    window_bcast("16 KiB Bcast, negative count on a non-root", last, 4 * N, 0, 0, 1);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "return";
    if (size > 64) {
        fprintf(stderr, "at most 64 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (strcmp(mode, "return") == 0) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        alltoall_cases();
        alltoallv_cases();
        allreduce_cases();
        bcast_cases();
        allgather_cases();
    } else if (strcmp(mode, "window") == 0) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        window_cases(!(argc > 2 && strcmp(argv[2], "nonull") == 0));
    }
    if (strcmp(mode, "return") == 0 || strcmp(mode, "window") == 0) {
        fflush(stdout);
        int all = 0;
        PMPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            printf("errors_check: %d cases, %d failures\n", cases, all);
        MPI_Finalize();
        return all ? 1 : 0;
    }
    size_t n = (size_t)N * size;
    int *s = ints(n), *r = ints(n);
    if (strcmp(mode, "fatal-alltoall") == 0)
        MPI_Alltoall(s, rank == 0 ? -1 : N, MPI_INT, r, rank == 0 ? -1 : N, MPI_INT, MPI_COMM_WORLD);
    else if (strcmp(mode, "fatal-alltoallv") == 0)
        alltoallv(s, r, N - 1, rank == size - 1 ? N : N - 1, 0);
    else if (strcmp(mode, "fatal-small-bcast") == 0)
        MPI_Bcast(r, SMALL, MPI_INT, rank == size - 1 ? -1 : 0, MPI_COMM_WORLD);
    else
        fprintf(stderr, "unknown mode %s\n", mode);
    printf("rank %d returned from the erroneous call\n", rank);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
