/* MPI_Type_free is local: a rank may free a type its peers never had. The library
 * remembers the derived types each rank passed (types.c) and forgets them all when a type
 * is freed, so after such a free the ranks remember different things; whatever they
 * remember, every rank must still run a new communicator's setup (collective) on its
 * first call there, or the ranks wait in different collectives for ever. Here every rank
 * passes a strided type (every other double) on MPI_COMM_WORLD, then rank 0 alone makes
 * and frees a type, then every rank calls on a new duplicate: MPI_Alltoall with the
 * strided type, then with MPI_DOUBLE (served); the same again for MPI_Alltoallv, and for
 * MPI_Allgather and MPI_Bcast. Results are checked against values computed here. Prints
 * "type_free_check: N cases, F failures" on rank 0; exits 1 on a failure. A hang is the
 * failure this program exists for: the pytest runs it under a short timeout. */
#include "common.h"

#define N 64 /* doubles sent to each peer */

static int cases, failures;

static double value(int from, int to, int i)
{
    return from * 1e6 + to * 1e3 + i;
}

static void expect(const char *what, double got, double want, int rank, int at)
{
    if (got != want && failures++ < 10)
        fprintf(stderr, "MISMATCH %s: rank %d got %g at %d, expected %g\n", what, rank, got, at, want);
}

/* Rank 0 alone makes and frees a type (one for a file view or a halo exchange, say). */
static void local_free(int rank)
{
    if (rank == 0) {
        MPI_Datatype tmp;
        MPI_Type_contiguous(3, MPI_INT, &tmp);
        MPI_Type_commit(&tmp);
        MPI_Type_free(&tmp);
    }
}

/* An Alltoall (or an Alltoallv with equal counts) with `strided` on both sides on `comm`,
 * then one of plain doubles. */
static void alltoalls(MPI_Comm comm, MPI_Datatype strided, int vector_call)
{
    int rank, p;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &p);
    const char *name = vector_call ? "alltoallv" : "alltoall";
    double *send = xmalloc(sizeof(double) * 2 * N * p), *recv = xmalloc(sizeof(double) * 2 * N * p);
    int *ones = xmalloc(sizeof(int) * p), *displs = xmalloc(sizeof(int) * p);
    for (int j = 0; j < p; j++)
        for (int i = 0; i < 2 * N; i++)
            send[2 * N * j + i] = i % 2 ? -1 : value(rank, j, i / 2), recv[2 * N * j + i] = -2;
    for (int j = 0; j < p; j++)
        ones[j] = 1, displs[j] = j;
    if (vector_call)
        MPI_Alltoallv(send, ones, displs, strided, recv, ones, displs, strided, comm);
    else
        MPI_Alltoall(send, 1, strided, recv, 1, strided, comm);
    cases++;
    for (int j = 0; j < p; j++)
        for (int i = 0; i < 2 * N; i++)
            expect(name, recv[2 * N * j + i], i % 2 ? -2 : value(j, rank, i / 2), rank, 2 * N * j + i);

    for (int j = 0; j < p; j++)
        for (int i = 0; i < N; i++)
            send[N * j + i] = value(rank, j, i);
    for (int j = 0; j < p; j++)
        ones[j] = N, displs[j] = j * N;
    if (vector_call)
        MPI_Alltoallv(send, ones, displs, MPI_DOUBLE, recv, ones, displs, MPI_DOUBLE, comm);
    else
        MPI_Alltoall(send, N, MPI_DOUBLE, recv, N, MPI_DOUBLE, comm);
    cases++;
    for (int j = 0; j < p; j++)
        for (int i = 0; i < N; i++)
            expect(name, recv[N * j + i], value(j, rank, i), rank, N * j + i);
    free(send), free(recv), free(ones), free(displs);
}

/* An Allgather and a Bcast with `strided` on `comm`. */
static void others(MPI_Comm comm, MPI_Datatype strided)
{
    int rank, p;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &p);
    double *send = xmalloc(sizeof(double) * 2 * N), *recv = xmalloc(sizeof(double) * 2 * N * p);
    for (int i = 0; i < 2 * N; i++)
        send[i] = i % 2 ? -1 : value(rank, 0, i / 2);
    MPI_Allgather(send, 1, strided, recv, N, MPI_DOUBLE, comm);
    cases++;
    for (int j = 0; j < p; j++)
        for (int i = 0; i < N; i++)
            expect("allgather", recv[N * j + i], value(j, 0, i), rank, N * j + i);
    MPI_Bcast(send, 1, strided, 0, comm);
    cases++;
    for (int i = 0; i < 2 * N; i++)
        expect("bcast", send[i], i % 2 ? -1 : value(0, 0, i / 2), rank, i);
    free(send), free(recv);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* Every other double of a peer's block of 2 N. */
    MPI_Datatype vector, strided;
    MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &vector);
    MPI_Type_create_resized(vector, 0, (MPI_Aint)(2 * N * sizeof(double)), &strided);
    MPI_Type_commit(&strided);
    MPI_Type_free(&vector);
    for (int vector_call = 0; vector_call < 2; vector_call++) {
        alltoalls(MPI_COMM_WORLD, strided, vector_call); /* every rank remembers `strided` */
        local_free(rank);                                /* rank 0 forgets it */
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        alltoalls(dup, strided, vector_call);
        MPI_Comm_free(&dup);
    }
    others(MPI_COMM_WORLD, strided);
    local_free(rank);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    others(dup, strided);
    MPI_Comm_free(&dup);
    MPI_Type_free(&strided);
    int bad = total_failures(failures);
    if (rank == 0)
        printf("type_free_check: %d cases, %d failures\n", cases, bad);
    MPI_Finalize();
    return bad ? 1 : 0;
}
