/* MPI_Alltoall and MPI_Alltoallv through whatever serves them (shmcoll when preloaded),
 * each result compared byte for byte with PMPI's on the same data: on MPI_COMM_WORLD, a
 * duplicate, a split and both Cartesian sub-communicators (MPI_Cart_sub); MPI_BYTE,
 * MPI_DOUBLE and MPI_C_DOUBLE_COMPLEX; zero, small, large, equal and ragged counts; in
 * place. Prints "alltoall_check: N cases, F failures" on rank 0; exits 1 on a failure. */
#include <string.h>

#include "common.h"

static int cases, failures;

typedef struct {
    const char *name;
    MPI_Datatype type;
    size_t size;
} dtype;

static void report(const char *comm, const char *what, const char *type, int count, int rank)
{
    failures++;
    fprintf(stderr, "MISMATCH comm=%s op=%s type=%s count=%d rank=%d\n", comm, what, type, count, rank);
}

static void fill(unsigned char *buf, size_t n, int rank, int salt)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = pattern(rank, 0, i, salt);
}

static void check_alltoall(MPI_Comm comm, const char *cname, dtype t, int count, int in_place)
{
    int p, r;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    size_t n = (size_t)p * (size_t)count * t.size;
    unsigned char *send = xmalloc(n), *got = xmalloc(n), *want = xmalloc(n);
    fill(send, n, r, count + in_place);
    memset(got, 0xEE, n);
    memset(want, 0xEE, n);
    if (in_place) {
        memcpy(got, send, n);
        memcpy(want, send, n);
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, got, count, t.type, comm);
        PMPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, want, count, t.type, comm);
    } else {
        MPI_Alltoall(send, count, t.type, got, count, t.type, comm);
        PMPI_Alltoall(send, count, t.type, want, count, t.type, comm);
    }
    cases++;
    if (memcmp(got, want, n) != 0)
        report(cname, in_place ? "alltoall-in-place" : "alltoall", t.name, count, r);
    free(send), free(got), free(want);
}

/* Rank i sends count(i, j) elements to rank j; `ragged` 0 makes every count `base`;
 * `ragged` 2 makes rank 0's counts all `base` (it may take the Alltoall path) while the
 * others' differ (they cannot): the library must bring both kinds of rank together. */
static int vcount(int i, int j, int base, int ragged)
{
    if (ragged == 2)
        return i == 0 || j == 0 ? base : base + i + j;
    return ragged ? ((i * 3 + j * 5 + base) % 7) * (base / 7 + 1) : base;
}

static void check_alltoallv(MPI_Comm comm, const char *cname, dtype t, int base, int ragged, int in_place)
{
    int p, r;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    int *sc = xmalloc(sizeof(int) * p), *sd = xmalloc(sizeof(int) * p);
    int *rc = xmalloc(sizeof(int) * p), *rd = xmalloc(sizeof(int) * p);
    int stotal = 0, rtotal = 0;
    for (int j = 0; j < p; j++) {
        /* In place, MPI takes both directions from the receive arrays: counts symmetric. */
        sc[j] = in_place ? vcount(r + j, r + j, base, ragged) : vcount(r, j, base, ragged);
        rc[j] = in_place ? sc[j] : vcount(j, r, base, ragged);
    }
    for (int j = 0; j < p; j++) { /* send blocks in order, receive blocks reversed with gaps */
        sd[j] = stotal;
        stotal += sc[j];
    }
    for (int j = p - 1; j >= 0; j--) {
        rd[j] = rtotal;
        rtotal += rc[j] + (ragged ? 2 : 0);
    }
    if (in_place || ragged != 1) { /* dense, in order: equal counts may take the Alltoall path */
        rtotal = 0;
        for (int j = 0; j < p; j++) {
            rd[j] = rtotal;
            rtotal += rc[j];
        }
    }
    size_t sn = (size_t)stotal * t.size, rn = (size_t)rtotal * t.size;
    unsigned char *send = xmalloc(sn), *got = xmalloc(rn), *want = xmalloc(rn);
    fill(send, sn, r, base + 100 * ragged);
    memset(got, 0xEE, rn);
    memset(want, 0xEE, rn);
    if (in_place) {
        fill(got, rn, r, base);
        memcpy(want, got, rn);
        MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, got, rc, rd, t.type, comm);
        PMPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, want, rc, rd, t.type, comm);
    } else {
        MPI_Alltoallv(send, sc, sd, t.type, got, rc, rd, t.type, comm);
        PMPI_Alltoallv(send, sc, sd, t.type, want, rc, rd, t.type, comm);
    }
    cases++;
    if (memcmp(got, want, rn) != 0)
        report(cname,
               in_place      ? "alltoallv-in-place"
               : ragged == 2 ? "alltoallv-mixed"
               : ragged      ? "alltoallv-ragged"
                             : "alltoallv-equal",
               t.name, base, r);
    free(sc), free(sd), free(rc), free(rd), free(send), free(got), free(want);
}

static void check_comm(MPI_Comm comm, const char *cname)
{
    dtype types[] = {
        {"MPI_BYTE", MPI_BYTE, 1},
        {"MPI_DOUBLE", MPI_DOUBLE, sizeof(double)},
        {"MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, 2 * sizeof(double)},
    };
    int counts[] = {0, 1, 3, 100, 1000, 20000};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
            check_alltoall(comm, cname, types[ti], counts[ci], 0);
            check_alltoallv(comm, cname, types[ti], counts[ci], 0, 0);
            check_alltoallv(comm, cname, types[ti], counts[ci], 1, 0);
        }
        check_alltoall(comm, cname, types[ti], 50, 1);
        check_alltoall(comm, cname, types[ti], 5000, 1);
        check_alltoallv(comm, cname, types[ti], 40, 1, 1);
        check_alltoallv(comm, cname, types[ti], 4000, 1, 1);
    }
    /* Last: after it, equal-count calls on this communicator no longer try the shortcut. */
    check_alltoallv(comm, cname, types[0], 30, 2, 0);
    check_alltoallv(comm, cname, types[1], 3000, 2, 0);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    check_comm(MPI_COMM_WORLD, "world");

    MPI_Comm dup, split, cart, rows, cols;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    check_comm(dup, "dup");
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &split); /* reversed rank order */
    check_comm(split, "split");

    int dims[2] = {0, 0}, periods[2] = {0, 0};
    MPI_Dims_create(size, 2, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    int keep_rows[2] = {0, 1}, keep_cols[2] = {1, 0};
    MPI_Cart_sub(cart, keep_rows, &rows);
    MPI_Cart_sub(cart, keep_cols, &cols);
    check_comm(rows, "cart-rows");
    check_comm(cols, "cart-cols");

    MPI_Comm_free(&rows);
    MPI_Comm_free(&cols);
    MPI_Comm_free(&cart);
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);

    int all = total_failures(failures);
    if (rank == 0)
        printf("alltoall_check: %d cases, %d failures\n", cases, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
