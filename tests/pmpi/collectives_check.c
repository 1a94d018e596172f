/* MPI_Bcast, MPI_Allgather, MPI_Allreduce, MPI_Reduce_scatter_block and MPI_Barrier
 * through whatever serves them (shmcoll when preloaded), each result compared with PMPI's
 * on the same data, on MPI_COMM_WORLD, a duplicate and a Cartesian sub-communicator, in
 * place and not. Reductions use integers and integer-valued doubles, whose sums do not
 * depend on the order of the ranks. Then calls the library must pass through: an
 * Allreduce with a user-defined operator, one with MPI_MAXLOC. Prints
 * "collectives_check: N cases, F failures" on rank 0; exits 1 on a failure. */
#include <string.h>
#include <unistd.h>

#include "common.h"

static int cases, failures;

static void expect_same(const void *got, const void *want, size_t n, const char *what, const char *comm, int count)
{
    cases++;
    if (memcmp(got, want, n) != 0) {
        failures++;
        fprintf(stderr, "MISMATCH comm=%s op=%s count=%d\n", comm, what, count);
    }
}

static void fill_doubles(double *v, size_t n, int rank, int salt)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (double)((pattern(rank, 1, i, salt) % 200) - 100);
}

static void check_comm(MPI_Comm comm, const char *name)
{
    int p, r;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    /* 70000 doubles (547 KiB): a private Bcast that large takes the staging pipeline. */
    int counts[] = {0, 1, 7, 1000, 30000, 70000};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        int n = counts[ci];
        size_t nb = (size_t)n * p;
        double *a = xmalloc(sizeof(double) * (nb + 1)), *b = xmalloc(sizeof(double) * (nb + 1));
        double *src = xmalloc(sizeof(double) * (nb + 1));

        /* Bcast from the last rank. */
        fill_doubles(a, (size_t)n, r == p - 1 ? 7 : r + 100, n);
        memcpy(b, a, sizeof(double) * n);
        MPI_Bcast(a, n, MPI_DOUBLE, p - 1, comm);
        PMPI_Bcast(b, n, MPI_DOUBLE, p - 1, comm);
        expect_same(a, b, sizeof(double) * n, "bcast", name, n);

        /* Allgather, then in place. */
        fill_doubles(src, (size_t)n, r, n + 1);
        MPI_Allgather(src, n, MPI_DOUBLE, a, n, MPI_DOUBLE, comm);
        PMPI_Allgather(src, n, MPI_DOUBLE, b, n, MPI_DOUBLE, comm);
        expect_same(a, b, sizeof(double) * nb, "allgather", name, n);
        memset(a, 0, sizeof(double) * nb);
        memset(b, 0, sizeof(double) * nb);
        memcpy(a + (size_t)r * n, src, sizeof(double) * n);
        memcpy(b + (size_t)r * n, src, sizeof(double) * n);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a, n, MPI_DOUBLE, comm);
        PMPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, n, MPI_DOUBLE, comm);
        expect_same(a, b, sizeof(double) * nb, "allgather-in-place", name, n);

        /* Allreduce: doubles (sum, max), ints (sum, bxor), complex (sum); in place. */
        MPI_Op dops[] = {MPI_SUM, MPI_MAX};
        for (int k = 0; k < 2; k++) {
            fill_doubles(src, (size_t)n, r, n + 2 + k);
            MPI_Allreduce(src, a, n, MPI_DOUBLE, dops[k], comm);
            PMPI_Allreduce(src, b, n, MPI_DOUBLE, dops[k], comm);
            expect_same(a, b, sizeof(double) * n, k ? "allreduce-max" : "allreduce-sum", name, n);
        }
        int *ia = (int *)a, *ib = (int *)b, *isrc = (int *)src;
        MPI_Op iops[] = {MPI_SUM, MPI_BXOR};
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < n; i++)
                isrc[i] = (int)pattern(r, 2, (size_t)i, k) * (i + 1);
            MPI_Allreduce(isrc, ia, n, MPI_INT, iops[k], comm);
            PMPI_Allreduce(isrc, ib, n, MPI_INT, iops[k], comm);
            expect_same(ia, ib, sizeof(int) * n, k ? "allreduce-int-bxor" : "allreduce-int-sum", name, n);
        }
        if (n > 0) { /* complex: n / 2 values in the doubles */
            fill_doubles(src, (size_t)n, r, n + 5);
            MPI_Allreduce(src, a, n / 2, MPI_C_DOUBLE_COMPLEX, MPI_SUM, comm);
            PMPI_Allreduce(src, b, n / 2, MPI_C_DOUBLE_COMPLEX, MPI_SUM, comm);
            expect_same(a, b, sizeof(double) * (n / 2 * 2), "allreduce-complex", name, n);
        }
        fill_doubles(a, (size_t)n, r, n + 6);
        memcpy(b, a, sizeof(double) * n);
        MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_DOUBLE, MPI_SUM, comm);
        PMPI_Allreduce(MPI_IN_PLACE, b, n, MPI_DOUBLE, MPI_SUM, comm);
        expect_same(a, b, sizeof(double) * n, "allreduce-in-place", name, n);

        /* Reduce_scatter_block: n results per rank; then in place. */
        fill_doubles(src, nb, r, n + 7);
        MPI_Reduce_scatter_block(src, a, n, MPI_DOUBLE, MPI_SUM, comm);
        PMPI_Reduce_scatter_block(src, b, n, MPI_DOUBLE, MPI_SUM, comm);
        expect_same(a, b, sizeof(double) * n, "reduce-scatter-block", name, n);
        memcpy(a, src, sizeof(double) * nb);
        memcpy(b, src, sizeof(double) * nb);
        MPI_Reduce_scatter_block(MPI_IN_PLACE, a, n, MPI_DOUBLE, MPI_MIN, comm);
        PMPI_Reduce_scatter_block(MPI_IN_PLACE, b, n, MPI_DOUBLE, MPI_MIN, comm);
        expect_same(a, b, sizeof(double) * n, "reduce-scatter-block-in-place", name, n);

        MPI_Barrier(comm);
        free(a), free(b), free(src);
    }
}

/* Back-to-back Bcasts from changing roots, with no other call in between and some ranks
 * late: a small Bcast's root may leave before its peers arrive (the library's one-sided
 * Bcast), so each must still get every payload, in order. Checked against closed-form
 * values (a PMPI_Bcast between them would synchronise the ranks). */
static void bcast_run_ahead(MPI_Comm comm, const char *name)
{
    int p, r;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    const int sizes[] = {1, 10, 100, 3000};
    int v[3000];
    for (int k = 0; k < 60; k++) {
        int root = (k / 3) % p, n = sizes[k % 4];
        if ((k + r) % 7 == 0)
            usleep(200 + 100 * r);
        for (int i = 0; i < n; i++)
            v[i] = r == root ? k * 10007 + root * 101 + i : -1;
        MPI_Bcast(v, n, MPI_INT, root, comm);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad |= v[i] != k * 10007 + root * 101 + i;
        cases++;
        if (bad) {
            failures++;
            fprintf(stderr, "MISMATCH comm=%s op=bcast-run-ahead call=%d count=%d\n", name, k, n);
        }
    }
}

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    for (int i = 0; i < *len; i++)
        ((double *)inout)[i] += ((double *)in)[i];
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_comm(MPI_COMM_WORLD, "world");
    MPI_Comm dup, cart, rows;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    check_comm(dup, "dup");
    int dims[2] = {0, 0}, periods[2] = {0, 0}, keep[2] = {0, 1};
    MPI_Dims_create(size, 2, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Cart_sub(cart, keep, &rows);
    check_comm(rows, "cart-rows");
    bcast_run_ahead(MPI_COMM_WORLD, "world");
    bcast_run_ahead(rows, "cart-rows");

    /* Pass-through: a user-defined operator and MPI_MAXLOC (a pair type). */
    MPI_Op mine;
    MPI_Op_create(user_sum, 1, &mine);
    double x[4] = {rank, 1, 2, 3}, y[4];
    MPI_Allreduce(x, y, 4, MPI_DOUBLE, mine, MPI_COMM_WORLD);
    cases++;
    failures += y[0] != size * (size - 1) / 2.0 || y[1] != size;
    MPI_Op_free(&mine);
    struct { double v; int i; } in = {(double)(rank % 3), rank}, out;
    MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    cases++;
    failures += out.v != (size > 2 ? 2.0 : (double)(size - 1)) || out.i != (size > 2 ? 2 : size - 1);

    MPI_Comm_free(&rows);
    MPI_Comm_free(&cart);
    MPI_Comm_free(&dup);
    int all = total_failures(failures);
    if (rank == 0)
        printf("collectives_check: %d cases, %d failures\n", cases, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
