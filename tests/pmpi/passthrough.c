/* Calls the library must leave to MPI, checked against values computed here: an
 * MPI_Alltoall and an MPI_Alltoallv with a derived datatype (MPI_Type_vector), and an
 * MPI_Alltoall on an inter-communicator (two halves of the world). One plain Alltoall on
 * MPI_COMM_WORLD shows the library is there at all. The pytest reads the library's
 * SHMCOLL_PMPI_STATS lines to see which path each call took. Needs 2+ ranks. */
#include "common.h"

#define N 6 /* doubles per block */

static int failures;

static double value(int from, int to, int i)
{
    return from * 1000.0 + to * 10.0 + i;
}

/* Every other double of a strided buffer: the vector type's elements. */
static void derived(MPI_Comm comm, int rank, int p, int vector_call)
{
    MPI_Datatype strided;
    MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &strided);
    MPI_Type_commit(&strided);
    MPI_Aint lb, extent;
    MPI_Type_get_extent(strided, &lb, &extent);
    size_t stride = (size_t)extent / sizeof(double); /* doubles per element of the type */
    /* +1: the gap after the last element is written too (-1, never sent). */
    double *send = xmalloc(sizeof(double) * (stride * p + 1)), *recv = xmalloc(sizeof(double) * N * p);
    for (int j = 0; j < p; j++)
        for (int i = 0; i < N; i++)
            send[j * stride + 2 * i] = value(rank, j, i), send[j * stride + 2 * i + 1] = -1;
    if (vector_call) {
        int *ones = xmalloc(sizeof(int) * p), *sd = xmalloc(sizeof(int) * p);
        int *rc = xmalloc(sizeof(int) * p), *rd = xmalloc(sizeof(int) * p);
        for (int j = 0; j < p; j++)
            ones[j] = 1, sd[j] = j, rc[j] = N, rd[j] = j * N;
        MPI_Alltoallv(send, ones, sd, strided, recv, rc, rd, MPI_DOUBLE, comm);
        free(ones), free(sd), free(rc), free(rd);
    } else {
        MPI_Alltoall(send, 1, strided, recv, N, MPI_DOUBLE, comm);
    }
    for (int j = 0; j < p; j++)
        for (int i = 0; i < N; i++)
            if (recv[j * N + i] != value(j, rank, i)) {
                fprintf(stderr, "derived %s: rank %d got %g from %d at %d\n",
                        vector_call ? "alltoallv" : "alltoall", rank, recv[j * N + i], j, i);
                failures++;
            }
    MPI_Type_free(&strided);
    free(send), free(recv);
}

static void intercomm(int rank, int size)
{
    MPI_Comm half, inter;
    int color = rank < size / 2;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &half);
    /* Leaders: world rank 0 (color 1) and size / 2 (color 0). */
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color ? size / 2 : 0, 7, &inter);
    int me, remote;
    MPI_Comm_rank(inter, &me);
    MPI_Comm_remote_size(inter, &remote);
    double *send = xmalloc(sizeof(double) * N * remote), *recv = xmalloc(sizeof(double) * N * remote);
    for (int j = 0; j < remote; j++)
        for (int i = 0; i < N; i++)
            send[j * N + i] = value(rank, j, i);
    MPI_Alltoall(send, N, MPI_DOUBLE, recv, N, MPI_DOUBLE, inter);
    int remote_base = color ? size / 2 : 0; /* world rank of the remote group's rank 0 */
    for (int j = 0; j < remote; j++)
        for (int i = 0; i < N; i++)
            if (recv[j * N + i] != value(remote_base + j, me, i)) {
                fprintf(stderr, "intercomm: rank %d got %g from %d at %d\n", rank, recv[j * N + i], j, i);
                failures++;
            }
    free(send), free(recv);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "passthrough needs 2 or more ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double *mine = xmalloc(sizeof(double) * size), *theirs = xmalloc(sizeof(double) * size);
    for (int j = 0; j < size; j++)
        mine[j] = value(rank, j, 0);
    MPI_Alltoall(mine, 1, MPI_DOUBLE, theirs, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    for (int j = 0; j < size; j++)
        failures += theirs[j] != value(j, rank, 0);
    free(mine), free(theirs);
    derived(MPI_COMM_WORLD, rank, size, 0);
    derived(MPI_COMM_WORLD, rank, size, 1);
    intercomm(rank, size);
    int bad = total_failures(failures);
    if (rank == 0)
        printf("passthrough: %d failures\n", bad);
    MPI_Finalize();
    return bad ? 1 : 0;
}
