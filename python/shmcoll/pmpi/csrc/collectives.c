/* MPI_Bcast, MPI_Allgather, MPI_Allreduce, MPI_Reduce_scatter_block and MPI_Barrier on
 * shmcoll's engine, under the same rules as Alltoall(v) (alltoall.c): contiguous types on
 * intra-communicators of one node; reductions only for MPI's predefined operators on the
 * predefined C types the engine knows; anything else goes to PMPI. The engine combines
 * contributions in rank order, so every rank gets bitwise the same reduction result
 * (MPI's order may differ: floating-point sums can differ from PMPI's in the last bits). */
#include "shim.h"

/* The engine's operator code, or -1 (user-defined operators, MINLOC, REPLACE, ...). */
static int engine_op(MPI_Op op)
{
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR};
    for (int i = 0; i < (int)(sizeof ops / sizeof *ops); i++)
        if (ops[i] == op)
            return i;
    return -1;
}

/* One call through the engine: 1 if it served it, 0 if the caller must use PMPI. Never
 * inlined: its error buffer would give every wrapper a frame too large for the compiler to
 * turn the calls to PMPI_ into jumps, and passing a call through should cost nothing. */
__attribute__((noinline)) static int engine_call(shim_comm *s, enum shim_op op, const char *name, int code, const void *send,
                       void *recv, size_t bytes, int root, int dtype, int redop, size_t moved)
{
    char err[SHIM_ERR_CAP];
    int rc = shmcoll_collective(s->engine, code, send, recv, bytes, (size_t)root, dtype, redop, err, sizeof err);
    if (!shim_settle(s, op, name, rc, err))
        return 0;
    shim_count_handled(s, op, moved, 0);
    return 1;
}

/* Each wrapper asks a serve_ function, whose locals (their addresses escape) stay in its
 * own frame, so that the wrapper's call to PMPI_ becomes a jump. 1: served. */
static int serve_bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    enum shim_reason why = R_ARGUMENTS;
    size_t size = 0;
    shim_comm *s = shim_serving(comm, &why);
    if (s && !shim_contiguous(datatype, &size))
        s = NULL, why = R_DATATYPE;
    if (s && (count < 0 || root < 0 || root >= s->size))
        s = NULL, why = R_ARGUMENTS;
    if (s && shim_mpi_faster(OP_BCAST, (size_t)count * size))
        s = NULL, why = R_MPI_FASTER;
    if (!s) {
        shim_count_passed(OP_BCAST, why);
        return 0;
    }
    size_t bytes = (size_t)count * size;
    return engine_call(s, OP_BCAST, "MPI_Bcast", SHMCOLL_BCAST, NULL, buffer, bytes, root, -1, -1, bytes);
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    if (serve_bcast(buffer, count, datatype, root, comm))
        return MPI_SUCCESS;
    return PMPI_Bcast(buffer, count, datatype, root, comm);
}

static int serve_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                           int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    enum shim_reason why = R_ARGUMENTS;
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t ssize = 0, rsize = 0;
    shim_comm *s = shim_serving_types(comm, in_place, sendtype, recvtype, &ssize, &rsize, &why);
    if (s && (recvcount < 0 || (!in_place && (sendcount < 0 || (size_t)sendcount * ssize != (size_t)recvcount * rsize))))
        s = NULL, why = R_ARGUMENTS;
    if (s && shim_mpi_faster(OP_ALLGATHER, (size_t)recvcount * rsize))
        s = NULL, why = R_MPI_FASTER;
    if (!s) {
        shim_count_passed(OP_ALLGATHER, why);
        return 0;
    }
    size_t bytes = (size_t)recvcount * rsize;
    return engine_call(s, OP_ALLGATHER, "MPI_Allgather", SHMCOLL_ALLGATHER, in_place ? NULL : sendbuf, recvbuf,
                       bytes, 0, -1, -1, bytes * (size_t)s->size);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (serve_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
        return MPI_SUCCESS;
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

/* Allreduce and Reduce_scatter_block: `count` elements of `t` per call (the vector, or a
 * rank's block), combined with `op`. 1 if the engine served the call, 0 if the caller must
 * hand it to PMPI (counted). */
static int serve_reduction(enum shim_op which, const char *name, int code, const void *sendbuf, void *recvbuf,
                           int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    enum shim_reason why = R_ARGUMENTS;
    size_t size = 0;
    shim_comm *s = shim_serving(comm, &why);
    int dtype = s ? shim_reduce_dtype(t, &size) : -1, redop = s ? engine_op(op) : -1;
    if (s && (dtype < 0 || redop < 0))
        s = NULL, why = R_REDUCTION;
    else if (s && count < 0)
        s = NULL, why = R_ARGUMENTS;
    size_t bytes = (size_t)(count > 0 ? count : 0) * size;
    if (s && shim_mpi_faster(which, bytes))
        s = NULL, why = R_MPI_FASTER;
    if (!s) {
        shim_count_passed(which, why);
        return 0;
    }
    const void *send = sendbuf == MPI_IN_PLACE ? NULL : sendbuf;
    return engine_call(s, which, name, code, send, recvbuf, bytes, 0, dtype, redop, bytes);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm)
{
    if (serve_reduction(OP_ALLREDUCE, "MPI_Allreduce", SHMCOLL_ALLREDUCE, sendbuf, recvbuf, count, datatype, op,
                        comm))
        return MPI_SUCCESS;
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                             MPI_Op op, MPI_Comm comm)
{
    if (serve_reduction(OP_REDUCE_SCATTER_BLOCK, "MPI_Reduce_scatter_block", SHMCOLL_REDUCE_SCATTER_BLOCK, sendbuf,
                        recvbuf, recvcount, datatype, op, comm))
        return MPI_SUCCESS;
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

/* As engine_call, for the barrier. */
__attribute__((noinline)) static int serve_barrier(MPI_Comm comm)
{
    enum shim_reason why = R_ARGUMENTS;
    char err[SHIM_ERR_CAP];
    shim_comm *s = shim_serving(comm, &why);
    if (s && shim_mpi_faster(OP_BARRIER, 0))
        s = NULL, why = R_MPI_FASTER;
    if (!s) {
        shim_count_passed(OP_BARRIER, why);
        return 0;
    }
    if (!shim_settle(s, OP_BARRIER, "MPI_Barrier", shmcoll_barrier(s->engine, err, sizeof err), err))
        return 0;
    shim_count_handled(s, OP_BARRIER, 0, 0);
    return 1;
}

int MPI_Barrier(MPI_Comm comm)
{
    if (serve_barrier(comm))
        return MPI_SUCCESS;
    return PMPI_Barrier(comm);
}
