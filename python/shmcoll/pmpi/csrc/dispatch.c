/* What every wrapper asks first (does shmcoll serve this communicator?) and last (what to
 * do with the engine's verdict), and how a call is rejected. Once a communicator is
 * served, a call the engine or this library finds wrong at a size the engine serves fails
 * on every rank within the call, through the engine, and returns an MPI error there; it
 * never returns early on one rank, which would leave the peers waiting in the engine until
 * its deadline. A wrong call at a size its pass-through window sends to PMPI_ goes there
 * on every rank, the wrong one included: its peers are in PMPI_ too, and PMPI_'s own
 * checks report the error as MPI does (see shim_reject_unsized for a size a rank cannot
 * compute). */
#include <stdarg.h>
#include <stdio.h>

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

int shim_types(int in_place, MPI_Datatype sendtype, MPI_Datatype recvtype, size_t *ssize, size_t *rsize)
{
    if (recvtype == MPI_DATATYPE_NULL || (!in_place && sendtype == MPI_DATATYPE_NULL))
        return -1;
    return shim_contiguous(recvtype, rsize) && (in_place || shim_contiguous(sendtype, ssize));
}

/* The MPI error class of an engine class (SHMCOLL_CLASS_*). A disagreement between ranks
 * is one of sizes or counts in every case MPI defines an error for. */
static int mpi_error_class(int cls)
{
    switch (cls) {
    case SHMCOLL_CLASS_ARG: return MPI_ERR_ARG;
    case SHMCOLL_CLASS_COUNT: return MPI_ERR_COUNT;
    case SHMCOLL_CLASS_MISMATCH: return MPI_ERR_COUNT;
    case SHMCOLL_CLASS_BUFFER: return MPI_ERR_BUFFER;
    case SHMCOLL_CLASS_ROOT: return MPI_ERR_ROOT;
    case SHMCOLL_CLASS_OP: return MPI_ERR_OP;
    case SHMCOLL_CLASS_TYPE: return MPI_ERR_TYPE;
    default: return MPI_ERR_OTHER;
    }
}

/* The call failed, on every rank (but for a small Bcast whose root left before a non-root
 * rejected it: see docs/pmpi.md, "Errors"): report it (once per process, so that a program that aborts
 * on it says why), then hand the code to the communicator's error handler, which
 * aborts under MPI_ERRORS_ARE_FATAL as MPI's own check would, and returns under
 * MPI_ERRORS_RETURN. */
static int fail(shim_comm *s, enum shim_op op, const char *err)
{
    static int reported;
    int code = mpi_error_class(shmcoll_comm_last_error_class(s->engine));
    shim_count_error(op);
    if (!__atomic_exchange_n(&reported, 1, __ATOMIC_RELAXED)) {
        fprintf(stderr, "[shmcoll-pmpi] %s failed, no data moved: %s (first error reported)\n",
                shim_op_name(op), err);
        fflush(stderr);
    }
    PMPI_Comm_call_errhandler(s->comm, code);
    return code;
}

int shim_finish(shim_comm *s, enum shim_op op, int rc, const char *err)
{
    switch (rc) {
    case SHMCOLL_OK:
        return MPI_SUCCESS;
    case SHMCOLL_DECLINED:
        shim_warn_once(shim_op_name(op), err);
        shim_count_passed(op, R_DECLINED);
        return SHIM_PASS;
    case SHMCOLL_REJECTED:
        return fail(s, op, err);
    default: /* fatal, or a breach of the C ABI's contract: on one rank only, possibly */
        shim_fatal(s->comm, shim_op_name(op), err);
        return MPI_ERR_OTHER;
    }
}

/* shim_reject's body, on a va_list. */
static int vreject(shim_comm *s, enum shim_op op, int cls, const char *fmt, va_list ap)
{
    char why[256], err[SHIM_ERR_CAP];
    vsnprintf(why, sizeof why, fmt, ap);
    int rc = shmcoll_reject(s->engine, (int)op, cls, why, err, sizeof err);
    if (rc != SHMCOLL_REJECTED)
        rc = SHMCOLL_FATAL; /* a rejection that did not reach the peers leaves them waiting */
    return shim_finish(s, op, rc, err);
}

int shim_reject(shim_comm *s, enum shim_op op, int cls, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vreject(s, op, cls, fmt, ap);
    va_end(ap);
    return rc;
}

int shim_reject_unsized(shim_comm *s, enum shim_op op, int cls, const char *fmt, ...)
{
    if (shim_window_open(op)) {
        shim_count_passed(op, R_MPI_FASTER);
        return SHIM_PASS;
    }
    va_list ap;
    va_start(ap, fmt);
    int rc = vreject(s, op, cls, fmt, ap);
    va_end(ap);
    return rc;
}

const void *shim_send_ptr(const void *sendbuf)
{
    static const char nothing;
    return sendbuf ? sendbuf : &nothing;
}
