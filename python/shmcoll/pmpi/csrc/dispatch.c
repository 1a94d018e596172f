/* What every wrapper asks first (does shmcoll serve this communicator?) and last (what to
 * do with the engine's verdict). */
#include "shim.h"

shim_comm *shim_serving(MPI_Comm comm, enum shim_reason *why)
{
    if (!shim_enabled()) {
        *why = R_DISABLED;
        return NULL;
    }
    shim_comm *s = shim_get(comm);
    if (!s) {
        *why = R_SETUP_FAILED;
        return NULL;
    }
    if (!s->engine) {
        *why = s->reason;
        return NULL;
    }
    return s;
}

shim_comm *shim_serving_types(MPI_Comm comm, int in_place, MPI_Datatype sendtype, MPI_Datatype recvtype,
                              size_t *ssize, size_t *rsize, enum shim_reason *why)
{
    shim_comm *s = shim_serving(comm, why);
    if (s && (!shim_contiguous(recvtype, rsize) || (!in_place && !shim_contiguous(sendtype, ssize)))) {
        *why = R_DATATYPE;
        return NULL;
    }
    return s;
}

int shim_settle(shim_comm *s, enum shim_op op, const char *name, int rc, const char *err)
{
    if (rc == SHMCOLL_OK)
        return 1;
    if (rc == SHMCOLL_FATAL)
        shim_fatal(s->comm, name, err);
    shim_warn_once(name, err);
    shim_count_passed(op, R_REJECTED);
    return 0;
}
