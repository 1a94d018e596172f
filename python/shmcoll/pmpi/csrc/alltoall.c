/* MPI_Alltoall and MPI_Alltoallv: served by shmcoll's engine when the communicator is an
 * intra-communicator of one node and the datatypes are contiguous, else by PMPI. Every
 * decision to pass a call through is one all ranks make alike, never one that depends on
 * what a rank did before (communicator properties are agreed at setup, which every rank
 * runs on its first call on a communicator; a datatype's verdict depends on the type
 * alone; datatypes are assumed alike on all ranks, as in every code we know: a program
 * that mixes derived and contiguous types across ranks for one call times out in the
 * engine with a clear message instead of hanging). Arguments a rank finds wrong
 * (negative counts, send and receive sizes that differ, NULL buffers or count arrays, a
 * null datatype) are rejected through the engine after those decisions and the size
 * window, so that every rank fails the call with the same MPI error (dispatch.c); at a
 * size the window sends to PMPI_, every rank goes there, the wrong one included. */
#include "shim.h"

/* MPI_SUCCESS, an MPI error, or SHIM_PASS (the caller hands the call to PMPI). */
static int serve_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                          int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    enum shim_reason why = R_DATATYPE;
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t ssize = 0, rsize = 0;
    char err[SHIM_ERR_CAP];
    shim_comm *s = shim_serving(comm, &why);
    if (!s)
        goto pass;
    int types = shim_types(in_place, sendtype, recvtype, &ssize, &rsize);
    if (types < 0)
        return shim_reject_unsized(s, OP_ALLTOALL, SHMCOLL_CLASS_TYPE, "a datatype is MPI_DATATYPE_NULL");
    if (!types)
        goto pass;
    if (recvcount < 0)
        return shim_reject_unsized(s, OP_ALLTOALL, SHMCOLL_CLASS_COUNT, "recvcount %d is negative", recvcount);
    /* The window counts what each rank receives from each: the same on every rank, so a
     * rank whose other arguments are wrong still goes where its peers go (collectives.c). */
    size_t bpp = (size_t)recvcount * rsize;
    if (shim_mpi_faster(OP_ALLTOALL, bpp)) {
        why = R_MPI_FASTER;
        goto pass;
    }
    if (!in_place && sendcount < 0)
        return shim_reject(s, OP_ALLTOALL, SHMCOLL_CLASS_COUNT, "sendcount %d is negative", sendcount);
    if (!in_place && (size_t)sendcount * ssize != bpp)
        return shim_reject(s, OP_ALLTOALL, SHMCOLL_CLASS_COUNT,
                           "sends %zu bytes to each rank but receives %zu from each",
                           (size_t)sendcount * ssize, bpp);
    if ((bpp > 0 && !recvbuf) || recvbuf == MPI_IN_PLACE)
        return shim_reject(s, OP_ALLTOALL, SHMCOLL_CLASS_BUFFER, "the receive buffer is NULL or MPI_IN_PLACE");
    if (bpp > 0 && !in_place && !sendbuf)
        return shim_reject(s, OP_ALLTOALL, SHMCOLL_CLASS_BUFFER, "the send buffer is NULL");
    int rc = shmcoll_alltoall(s->engine, in_place ? NULL : shim_send_ptr(sendbuf), recvbuf, bpp, err, sizeof err);
    rc = shim_finish(s, OP_ALLTOALL, rc, err);
    if (rc == MPI_SUCCESS)
        shim_count_handled(s, OP_ALLTOALL, bpp * (size_t)s->size, 0);
    return rc;
pass:
    shim_count_passed(OP_ALLTOALL, why);
    return SHIM_PASS;
}

/* A program passing a derived type keeps passing it: that case first, in a frame small
 * enough for the compiler to jump to PMPI_Alltoall (the engine's path has a large one).
 * Only on a communicator this rank has set up: the first call on a communicator sets it
 * up on every rank (collective PMPI calls in state.c), and whether this rank remembers
 * the type is its own history (a local MPI_Type_free clears it), so a shortcut taken there
 * would leave its peers alone in the setup. Once set up, every rank reaches the same
 * verdict on the type, remembered or not. */
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    if ((shim_remembered_derived(sendtype) || shim_remembered_derived(recvtype)) && shim_existing(comm)) {
        shim_count_passed(OP_ALLTOALL, R_DATATYPE);
        return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    int rc = serve_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    if (rc != SHIM_PASS)
        return rc;
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

/* counts/displacements in elements -> bytes: the index of a negative count, or -1. MPI
 * lets displacements be negative (the buffer argument then points into the data): the
 * buffer's base moves down to the lowest one, *base_shift bytes, and the displacements
 * are counted from there. */
static int to_bytes(int p, const int *counts, const int *displs, size_t elem, size_t *c, size_t *d,
                    size_t *base_shift)
{
    int lowest = 0;
    for (int j = 0; j < p; j++) {
        if (counts[j] < 0)
            return j;
        lowest = displs[j] < lowest ? displs[j] : lowest;
        c[j] = (size_t)counts[j] * elem;
    }
    *base_shift = (size_t)(-(long long)lowest) * elem;
    for (int j = 0; j < p; j++)
        d[j] = (size_t)((long long)displs[j] - lowest) * elem;
    return -1;
}

/* Whether block j is [j*c[0], (j+1)*c[0]) for every j: an Alltoall in disguise. */
static int uniform(int p, const size_t *c, const size_t *d)
{
    for (int j = 0; j < p; j++)
        if (c[j] != c[0] || d[j] != (size_t)j * c[0])
            return 0;
    return 1;
}

/* Whether the engine found the ranks' calls disagree: a verdict every rank reached alike,
 * unlike a rank's rejection of its own arguments, which that rank reports as its own. */
static int mismatch(shim_comm *s, int code)
{
    return code == SHMCOLL_REJECTED && shmcoll_comm_last_error_class(s->engine) == SHMCOLL_CLASS_MISMATCH;
}

/* As serve_alltoall. */
static int serve_alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                           MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                           const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
    enum shim_reason why = R_DATATYPE;
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t ssize = 0, rsize = 0;
    char err[SHIM_ERR_CAP];
    shim_comm *s = shim_serving(comm, &why);
    if (!s)
        goto pass;
    int types = shim_types(in_place, sendtype, recvtype, &ssize, &rsize);
    if (types < 0)
        return shim_reject(s, OP_ALLTOALLV, SHMCOLL_CLASS_TYPE, "a datatype is MPI_DATATYPE_NULL");
    if (!types)
        goto pass;
    if (!recvcounts || !rdispls || (!in_place && (!sendcounts || !sdispls)))
        return shim_reject(s, OP_ALLTOALLV, SHMCOLL_CLASS_ARG, "a count or displacement array is NULL");
    int p = s->size, bad;
    size_t *sc = s->scratch, *sd = sc + p, *rc = sd + p, *rd = rc + p, rshift = 0, sshift = 0;
    if ((bad = to_bytes(p, recvcounts, rdispls, rsize, rc, rd, &rshift)) >= 0)
        return shim_reject(s, OP_ALLTOALLV, SHMCOLL_CLASS_COUNT, "receive count %d for rank %d is negative",
                           recvcounts[bad], bad);
    if (in_place) {
        sc = rc, sd = rd;
    } else if ((bad = to_bytes(p, sendcounts, sdispls, ssize, sc, sd, &sshift)) >= 0) {
        return shim_reject(s, OP_ALLTOALLV, SHMCOLL_CLASS_COUNT, "send count %d for rank %d is negative",
                           sendcounts[bad], bad);
    }
    size_t total = 0, sent = 0;
    for (int j = 0; j < p; j++)
        total += rc[j], sent += sc[j];
    if ((total > 0 && !recvbuf) || recvbuf == MPI_IN_PLACE)
        return shim_reject(s, OP_ALLTOALLV, SHMCOLL_CLASS_BUFFER, "the receive buffer is NULL or MPI_IN_PLACE");
    if (sent > 0 && !in_place && !sendbuf)
        return shim_reject(s, OP_ALLTOALLV, SHMCOLL_CLASS_BUFFER, "the send buffer is NULL");
    const void *send = in_place ? NULL : shim_send_ptr(sshift ? (const char *)sendbuf - sshift : sendbuf);
    if (rshift)
        recvbuf = (char *)recvbuf - rshift;
    int code;
    int as_alltoall = 0;
    if (s->uniform_v && uniform(p, sc, sd) && uniform(p, rc, rd) && sc[0] == rc[0]) {
        /* Equal counts: the Alltoall path (no count arrays to publish and cross-check).
         * A peer with ragged counts calls Alltoallv meanwhile, and the engine finds the
         * calls differ, on every rank; then every rank retries as Alltoallv and stops
         * trying the shortcut on this communicator. Only that verdict, which all ranks
         * share, is retried: a rank's rejection of its own arguments fails the call. */
        code = shmcoll_alltoall(s->engine, send, recvbuf, rc[0], err, sizeof err);
        as_alltoall = code == SHMCOLL_OK;
        if (mismatch(s, code)) {
            s->uniform_v = 0;
            shim_count_mixed(OP_ALLTOALLV);
            code = shmcoll_alltoallv(s->engine, send, sc, sd, recvbuf, rc, rd, err, sizeof err);
        }
    } else {
        code = shmcoll_alltoallv(s->engine, send, sc, sd, recvbuf, rc, rd, err, sizeof err);
        if (s->uniform_v && mismatch(s, code)) {
            /* The peers that took the Alltoall path retry now: meet them there. */
            s->uniform_v = 0;
            shim_count_mixed(OP_ALLTOALLV);
            code = shmcoll_alltoallv(s->engine, send, sc, sd, recvbuf, rc, rd, err, sizeof err);
        }
    }
    code = shim_finish(s, OP_ALLTOALLV, code, err);
    if (code == MPI_SUCCESS)
        shim_count_handled(s, OP_ALLTOALLV, total, as_alltoall);
    return code;
pass:
    shim_count_passed(OP_ALLTOALLV, why);
    return SHIM_PASS;
}

/* As MPI_Alltoall. */
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
    if ((shim_remembered_derived(sendtype) || shim_remembered_derived(recvtype)) && shim_existing(comm)) {
        shim_count_passed(OP_ALLTOALLV, R_DATATYPE);
        return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                              recvtype, comm);
    }
    int rc = serve_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                             comm);
    if (rc != SHIM_PASS)
        return rc;
    return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
}
