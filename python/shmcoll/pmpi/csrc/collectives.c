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
    struct {
        MPI_Op mpi;
        int code;
    } ops[] = {
        {MPI_SUM, SHMCOLL_OP_SUM},   {MPI_PROD, SHMCOLL_OP_PROD}, {MPI_MIN, SHMCOLL_OP_MIN},
        {MPI_MAX, SHMCOLL_OP_MAX},   {MPI_BAND, SHMCOLL_OP_BAND}, {MPI_BOR, SHMCOLL_OP_BOR},
        {MPI_BXOR, SHMCOLL_OP_BXOR}, {MPI_LAND, SHMCOLL_OP_LAND}, {MPI_LOR, SHMCOLL_OP_LOR},
    };
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (ops[i].mpi == op)
            return ops[i].code;
    return -1;
}

/* One call through the engine: MPI_SUCCESS, an MPI error, or SHIM_PASS (the caller must
 * use PMPI). Never inlined: its error buffer would give every wrapper a frame too large
 * for the compiler to turn the calls to PMPI_ into jumps, and passing a call through
 * should cost nothing. */
__attribute__((noinline)) static int engine_call(shim_comm *s, enum shim_op op, const void *send,
                                                 void *recv, size_t bytes, int root, int dtype, int redop,
                                                 size_t moved)
{
    char err[SHIM_ERR_CAP];
    int rc = shmcoll_collective(s->engine, (int)op, send, recv, bytes, (size_t)root, dtype, redop, err, sizeof err);
    rc = shim_finish(s, op, rc, err);
    if (rc == MPI_SUCCESS)
        shim_count_handled(s, op, moved, 0);
    return rc;
}

/* Each wrapper asks a serve_ function, whose locals (their addresses escape) stay in its
 * own frame, so that the wrapper's call to PMPI_ becomes a jump. The order of the checks
 * matters, because every rank must take the same path (engine or PMPI_) for a call,
 * whatever its own arguments: first what sends a call to PMPI on data every rank of a
 * correct call shares (communicator, datatypes, operator); then the size and its window,
 * which every rank computes alike from the count and datatype, so that a rank whose other
 * arguments are wrong (root, buffers) goes where its peers go: to PMPI_, whose own checks
 * report the error as MPI does, or to the engine, which rejects the call on every rank.
 * A rank whose size itself is wrong (a negative count, a null datatype) cannot know its
 * peers' decision: shim_reject_unsized. */
static int serve_bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    enum shim_reason why = R_DATATYPE;
    size_t size = 0;
    shim_comm *s = shim_serving(comm, &why);
    if (!s)
        goto pass;
    int types = shim_types(1, MPI_DATATYPE_NULL, datatype, &size, &size);
    if (types < 0)
        return shim_reject_unsized(s, OP_BCAST, SHMCOLL_CLASS_TYPE, "the datatype is MPI_DATATYPE_NULL");
    if (!types)
        goto pass;
    if (count < 0)
        return shim_reject_unsized(s, OP_BCAST, SHMCOLL_CLASS_COUNT, "count %d is negative", count);
    size_t bytes = (size_t)count * size;
    if (shim_mpi_faster(OP_BCAST, bytes)) {
        why = R_MPI_FASTER;
        goto pass;
    }
    if (root < 0 || root >= s->size)
        return shim_reject(s, OP_BCAST, SHMCOLL_CLASS_ROOT, "root %d is not a rank of this %d-rank communicator",
                           root, s->size);
    if ((bytes > 0 && !buffer) || buffer == MPI_IN_PLACE)
        return shim_reject(s, OP_BCAST, SHMCOLL_CLASS_BUFFER, "the buffer is NULL or MPI_IN_PLACE");
    return engine_call(s, OP_BCAST, NULL, buffer, bytes, root, -1, -1, bytes);
pass:
    shim_count_passed(OP_BCAST, why);
    return SHIM_PASS;
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    int rc = serve_bcast(buffer, count, datatype, root, comm);
    if (rc != SHIM_PASS)
        return rc;
    return PMPI_Bcast(buffer, count, datatype, root, comm);
}

static int serve_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                           int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    enum shim_reason why = R_DATATYPE;
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t ssize = 0, rsize = 0;
    shim_comm *s = shim_serving(comm, &why);
    if (!s)
        goto pass;
    int types = shim_types(in_place, sendtype, recvtype, &ssize, &rsize);
    if (types < 0)
        return shim_reject_unsized(s, OP_ALLGATHER, SHMCOLL_CLASS_TYPE, "a datatype is MPI_DATATYPE_NULL");
    if (!types)
        goto pass;
    if (recvcount < 0)
        return shim_reject_unsized(s, OP_ALLGATHER, SHMCOLL_CLASS_COUNT, "recvcount %d is negative", recvcount);
    /* The window counts what each rank receives from each: the same on every rank. */
    size_t bytes = (size_t)recvcount * rsize;
    if (shim_mpi_faster(OP_ALLGATHER, bytes)) {
        why = R_MPI_FASTER;
        goto pass;
    }
    if (!in_place && sendcount < 0)
        return shim_reject(s, OP_ALLGATHER, SHMCOLL_CLASS_COUNT, "sendcount %d is negative", sendcount);
    if (!in_place && (size_t)sendcount * ssize != bytes)
        return shim_reject(s, OP_ALLGATHER, SHMCOLL_CLASS_COUNT, "sends %zu bytes but receives %zu from each rank",
                           (size_t)sendcount * ssize, bytes);
    if ((bytes > 0 && !recvbuf) || recvbuf == MPI_IN_PLACE)
        return shim_reject(s, OP_ALLGATHER, SHMCOLL_CLASS_BUFFER, "the receive buffer is NULL or MPI_IN_PLACE");
    if (bytes > 0 && !in_place && !sendbuf)
        return shim_reject(s, OP_ALLGATHER, SHMCOLL_CLASS_BUFFER, "the send buffer is NULL");
    return engine_call(s, OP_ALLGATHER, in_place ? NULL : shim_send_ptr(sendbuf), recvbuf,
                       bytes, 0, -1, -1, bytes * (size_t)s->size);
pass:
    shim_count_passed(OP_ALLGATHER, why);
    return SHIM_PASS;
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    int rc = serve_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    if (rc != SHIM_PASS)
        return rc;
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

/* Allreduce and Reduce_scatter_block: `count` elements of `t` per call (the vector, or a
 * rank's block), combined with `op`. As serve_bcast. */
static int serve_reduction(enum shim_op which, const void *sendbuf, void *recvbuf, int count,
                           MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    enum shim_reason why = R_REDUCTION;
    size_t size = 0;
    shim_comm *s = shim_serving(comm, &why);
    if (!s)
        goto pass;
    if (t == MPI_DATATYPE_NULL)
        return shim_reject_unsized(s, which, SHMCOLL_CLASS_TYPE, "the datatype is MPI_DATATYPE_NULL");
    /* A type the engine does not reduce passes whatever the operator, on every rank; a
     * null operator is this rank's mistake, judged after the window as a bad buffer is
     * (its peers, with an operator the engine reduces, decide by the size alone). */
    int dtype = shim_reduce_dtype(t, &size), redop = engine_op(op);
    if (dtype < 0 || (op != MPI_OP_NULL && (redop < 0 || !shmcoll_reduction_supported(dtype, redop))))
        goto pass;
    if (count < 0)
        return shim_reject_unsized(s, which, SHMCOLL_CLASS_COUNT, "count %d is negative", count);
    size_t bytes = (size_t)count * size;
    if (shim_mpi_faster(which, bytes)) {
        why = R_MPI_FASTER;
        goto pass;
    }
    if (op == MPI_OP_NULL)
        return shim_reject(s, which, SHMCOLL_CLASS_OP, "the operator is MPI_OP_NULL");
    /* Reduce_scatter_block sends a block for every rank. */
    size_t sent = which == OP_REDUCE_SCATTER_BLOCK ? bytes * (size_t)s->size : bytes;
    int in_place = sendbuf == MPI_IN_PLACE;
    if ((bytes > 0 && !recvbuf) || recvbuf == MPI_IN_PLACE)
        return shim_reject(s, which, SHMCOLL_CLASS_BUFFER, "the receive buffer is NULL or MPI_IN_PLACE");
    if (sent > 0 && !in_place && !sendbuf)
        return shim_reject(s, which, SHMCOLL_CLASS_BUFFER, "the send buffer is NULL");
    const void *send = in_place ? NULL : shim_send_ptr(sendbuf);
    return engine_call(s, which, send, recvbuf, bytes, 0, dtype, redop, bytes);
pass:
    shim_count_passed(which, why);
    return SHIM_PASS;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm)
{
    int rc = serve_reduction(OP_ALLREDUCE, sendbuf, recvbuf, count, datatype, op, comm);
    if (rc != SHIM_PASS)
        return rc;
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                             MPI_Op op, MPI_Comm comm)
{
    int rc = serve_reduction(OP_REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, recvcount,
                             datatype, op, comm);
    if (rc != SHIM_PASS)
        return rc;
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

/* As engine_call, for the barrier. */
__attribute__((noinline)) static int serve_barrier(MPI_Comm comm)
{
    enum shim_reason why = R_DISABLED;
    char err[SHIM_ERR_CAP];
    shim_comm *s = shim_serving(comm, &why);
    if (s && shim_mpi_faster(OP_BARRIER, 0))
        s = NULL, why = R_MPI_FASTER;
    if (!s) {
        shim_count_passed(OP_BARRIER, why);
        return SHIM_PASS;
    }
    int rc = shim_finish(s, OP_BARRIER, shmcoll_barrier(s->engine, err, sizeof err), err);
    if (rc == MPI_SUCCESS)
        shim_count_handled(s, OP_BARRIER, 0, 0);
    return rc;
}

int MPI_Barrier(MPI_Comm comm)
{
    int rc = serve_barrier(comm);
    if (rc != SHIM_PASS)
        return rc;
    return PMPI_Barrier(comm);
}
