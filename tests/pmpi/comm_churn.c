/* Communicators created and freed per phase, as libraries do: MPI_Comm_dup of
 * MPI_COMM_WORLD, an Alltoall and an Allgather on it (served by shmcoll when preloaded,
 * each compared with PMPI's on the same data), MPI_Comm_free; ROUNDS times, then the same
 * with two duplicates freed in opposite orders on even and odd ranks. The library's
 * setup line (SHMCOLL_PMPI_STATS=1) says how many engines took a pooled segment. Prints
 * "comm_churn: N cases, F failures" on rank 0; exits 1 on a failure. */
#include <string.h>

#include "common.h"

#define ROUNDS 12
#define COUNT 64

static int cases, failures;

static void check(MPI_Comm comm, int salt)
{
    int p, r;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    size_t n = (size_t)COUNT * p;
    unsigned char *send = xmalloc(n), *got = xmalloc(n), *want = xmalloc(n);
    for (int j = 0; j < p; j++)
        for (size_t i = 0; i < COUNT; i++)
            send[(size_t)j * COUNT + i] = pattern(r, j, i, salt);
    MPI_Alltoall(send, COUNT, MPI_BYTE, got, COUNT, MPI_BYTE, comm);
    PMPI_Alltoall(send, COUNT, MPI_BYTE, want, COUNT, MPI_BYTE, comm);
    cases++;
    if (memcmp(got, want, n) != 0) {
        failures++;
        fprintf(stderr, "MISMATCH alltoall salt=%d\n", salt);
    }
    MPI_Allgather(send, COUNT, MPI_BYTE, got, COUNT, MPI_BYTE, comm);
    PMPI_Allgather(send, COUNT, MPI_BYTE, want, COUNT, MPI_BYTE, comm);
    cases++;
    if (memcmp(got, want, n) != 0) {
        failures++;
        fprintf(stderr, "MISMATCH allgather salt=%d\n", salt);
    }
    free(send), free(got), free(want);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 0; i < ROUNDS; i++) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        check(dup, i);
        MPI_Comm_free(&dup);
    }
    MPI_Comm a, b;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    check(a, 100);
    check(b, 101);
    if (rank % 2 == 0) {
        MPI_Comm_free(&a);
        MPI_Comm_free(&b);
    } else {
        MPI_Comm_free(&b);
        MPI_Comm_free(&a);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    check(b, 102);
    check(a, 103);
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
    int all = total_failures(failures);
    if (rank == 0)
        printf("comm_churn: %d cases, %d failures\n", cases, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
