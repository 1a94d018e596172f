/* MPI_Alltoall and MPI_Alltoallv: served by shmcoll's engine when the communicator is an
 * intra-communicator of one node and the datatypes are contiguous, else by PMPI. Every
 * decision to pass a call through is one all ranks make alike (communicator properties
 * are agreed at setup; datatypes are assumed alike on all ranks, as in every code we know;
 * a program that mixes derived and contiguous types across ranks for one call times out
 * in the engine with a clear message instead of hanging). */
#include "shim.h"

static int serve_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                          int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    enum shim_reason why = R_ARGUMENTS;
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t ssize = 0, rsize = 0;
    char err[SHIM_ERR_CAP];
    shim_comm *s = shim_serving_types(comm, in_place, sendtype, recvtype, &ssize, &rsize, &why);
    if (!s)
        goto pass;
    if (recvcount < 0 || (!in_place && (sendcount < 0 || (size_t)sendcount * ssize != (size_t)recvcount * rsize)))
        goto pass; /* erroneous: let MPI report it */
    size_t bpp = (size_t)recvcount * rsize;
    if (shim_mpi_faster(OP_ALLTOALL, bpp)) {
        why = R_MPI_FASTER;
        goto pass;
    }
    int rc = shmcoll_alltoall(s->engine, in_place ? NULL : sendbuf, recvbuf, bpp, err, sizeof err);
    if (shim_settle(s, OP_ALLTOALL, "MPI_Alltoall", rc, err)) {
        shim_count_handled(s, OP_ALLTOALL, bpp * (size_t)s->size, 0);
        return MPI_SUCCESS;
    }
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
pass:
    shim_count_passed(OP_ALLTOALL, why);
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

/* A program passing a derived type keeps passing it: that case first, in a frame small
 * enough for the compiler to jump to PMPI_Alltoall (the engine's path has a large one). */
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (shim_remembered_derived(sendtype) || shim_remembered_derived(recvtype)) {
        shim_count_passed(OP_ALLTOALL, R_DATATYPE);
        return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    return serve_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

/* counts/displacements in elements -> bytes; 0 if one is negative. */
static int to_bytes(int p, const int *counts, const int *displs, size_t elem, size_t *c, size_t *d)
{
    for (int j = 0; j < p; j++) {
        if (counts[j] < 0 || displs[j] < 0)
            return 0;
        c[j] = (size_t)counts[j] * elem;
        d[j] = (size_t)displs[j] * elem;
    }
    return 1;
}

/* Whether block j is [j*c[0], (j+1)*c[0]) for every j: an Alltoall in disguise. */
static int uniform(int p, const size_t *c, const size_t *d)
{
    for (int j = 0; j < p; j++)
        if (c[j] != c[0] || d[j] != (size_t)j * c[0])
            return 0;
    return 1;
}

static int serve_alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                           MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                           const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
    enum shim_reason why = R_ARGUMENTS;
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t ssize = 0, rsize = 0;
    char err[SHIM_ERR_CAP];
    shim_comm *s = shim_serving_types(comm, in_place, sendtype, recvtype, &ssize, &rsize, &why);
    if (!s)
        goto pass;
    int p = s->size;
    size_t *sc = s->scratch, *sd = sc + p, *rc = sd + p, *rd = rc + p;
    if (!to_bytes(p, recvcounts, rdispls, rsize, rc, rd))
        goto pass;
    if (in_place) {
        sc = rc, sd = rd;
    } else if (!to_bytes(p, sendcounts, sdispls, ssize, sc, sd)) {
        goto pass;
    }
    size_t total = 0;
    for (int j = 0; j < p; j++)
        total += rc[j];
    const void *send = in_place ? NULL : sendbuf;
    int code;
    int as_alltoall = 0;
    if (s->uniform_v && uniform(p, sc, sd) && uniform(p, rc, rd) && sc[0] == rc[0]) {
        /* Equal counts: the Alltoall path (no count arrays to publish and cross-check).
         * A peer with ragged counts calls Alltoallv meanwhile, and the engine rejects the
         * mixed call on every rank; then every rank retries as Alltoallv and stops trying
         * the shortcut on this communicator (all ranks saw the same rejection). */
        code = shmcoll_alltoall(s->engine, send, recvbuf, rc[0], err, sizeof err);
        as_alltoall = code == SHMCOLL_OK;
        if (code == SHMCOLL_REJECTED) {
            s->uniform_v = 0;
            shim_count_mixed(OP_ALLTOALLV);
            code = shmcoll_alltoallv(s->engine, send, sc, sd, recvbuf, rc, rd, err, sizeof err);
        }
    } else {
        code = shmcoll_alltoallv(s->engine, send, sc, sd, recvbuf, rc, rd, err, sizeof err);
        if (code == SHMCOLL_REJECTED && s->uniform_v) {
            /* The peers that took the Alltoall path retry now: meet them there. */
            s->uniform_v = 0;
            shim_count_mixed(OP_ALLTOALLV);
            code = shmcoll_alltoallv(s->engine, send, sc, sd, recvbuf, rc, rd, err, sizeof err);
        }
    }
    if (shim_settle(s, OP_ALLTOALLV, "MPI_Alltoallv", code, err)) {
        shim_count_handled(s, OP_ALLTOALLV, total, as_alltoall);
        return MPI_SUCCESS;
    }
    return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                          recvtype, comm);
pass:
    shim_count_passed(OP_ALLTOALLV, why);
    return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                          recvtype, comm);
}

/* As MPI_Alltoall. */
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
    if (shim_remembered_derived(sendtype) || shim_remembered_derived(recvtype)) {
        shim_count_passed(OP_ALLTOALLV, R_DATATYPE);
        return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                              recvtype, comm);
    }
    return serve_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                           recvtype, comm);
}
