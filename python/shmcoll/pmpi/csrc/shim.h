/* Internal declarations of the PMPI shim (libshmcoll_pmpi.so). Compiled against the
 * application's own mpi.h, so MPI handles have whatever representation that MPI uses. */
#ifndef SHMCOLL_SHIM_H
#define SHMCOLL_SHIM_H
#include <stddef.h>
#include <mpi.h>
#include "shmcoll_capi.h"

/* Why a call went to PMPI (stats keys; keep shim_reason_name in stats.c in step). */
enum shim_reason {
    R_DISABLED,      /* SHMCOLL_PMPI=0 */
    R_INTERCOMM,     /* inter-communicators */
    R_SPANS_NODES,   /* ranks on several nodes */
    R_SETUP_FAILED,  /* the segment could not be created, opened or joined */
    R_DATATYPE,      /* a derived, non-contiguous datatype */
    R_DECLINED,      /* every rank accepted it but no algorithm serves it (a forced one cannot) */
    R_REDUCTION,     /* an operator or datatype shmcoll does not reduce (user-defined ops) */
    R_MPI_FASTER,    /* a size at which MPI's own implementation was measured faster */
    R_COUNT
};

/* The collectives the shim intercepts, each with the engine's code (the header's
 * SHMCOLL_<OP>, checked against the engine by shmcoll-capi's header test), so that no
 * border renumbers. Tables indexed by them have a slot per engine code (OP_COUNT), empty
 * (a NULL name) for the collectives the shim does not intercept. */
enum shim_op {
    OP_BARRIER = SHMCOLL_BARRIER,
    OP_ALLTOALL = SHMCOLL_ALLTOALL,
    OP_ALLTOALLV = SHMCOLL_ALLTOALLV,
    OP_BCAST = SHMCOLL_BCAST,
    OP_ALLGATHER = SHMCOLL_ALLGATHER,
    OP_REDUCE_SCATTER_BLOCK = SHMCOLL_REDUCE_SCATTER_BLOCK,
    OP_ALLREDUCE = SHMCOLL_ALLREDUCE,
};
#define OP_COUNT SHMCOLL_COLLECTIVES

/* shmcoll's state for one communicator, cached as an attribute of it. */
typedef struct shim_comm {
    MPI_Comm comm;        /* the handle it is attached to (to delete it at MPI_Finalize) */
    ShmcollComm *engine;  /* NULL: every call on this communicator passes through */
    enum shim_reason reason; /* why, when engine is NULL */
    int size;
    int rank;
    /* 1 while an Alltoallv with equal counts may take the Alltoall path; cleared on every
     * rank at once when ranks disagreed about it (see alltoallv in alltoall.c). */
    int uniform_v;
    size_t *scratch; /* 4 * size byte counts and displacements for Alltoallv */
    struct shim_comm *prev, *next;
} shim_comm;

/* 1 unless SHMCOLL_PMPI=0. */
int shim_enabled(void);
/* The state of `comm`, created on first use (collective over `comm`, PMPI calls only).
 * Never NULL after MPI_Init, except for MPI_COMM_NULL. */
shim_comm *shim_get(MPI_Comm comm);
/* The state of `comm` if this rank has set it up already, else NULL; never collective.
 * Every rank of a communicator has its state from the same call on (the first that asked
 * shim_get, which every rank asks on its first call: see the Alltoall wrappers) until it
 * is freed, also on every rank (MPI_Comm_free, MPI_Finalize). */
shim_comm *shim_existing(MPI_Comm comm);
/* Delete every state still attached (at MPI_Finalize). */
void shim_release_all(void);

/* Counters (stats.c). */
const char *shim_op_name(enum shim_op op);
/* A call `s` served; its algorithm is the engine's last (none for Barrier). */
void shim_count_handled(shim_comm *s, enum shim_op op, size_t bytes, int as_alltoall);
void shim_count_passed(enum shim_op op, enum shim_reason why);
/* An Alltoallv on which ranks disagreed about the Alltoall path and retried (alltoall.c). */
void shim_count_mixed(enum shim_op op);
/* A call that returned an MPI error on every rank (rejected arguments, disagreeing ranks). */
void shim_count_error(enum shim_op op);
/* A communicator's engine was set up: on a pooled segment (`pooled`) or a new one. */
void shim_count_setup(int pooled);
void shim_print_stats(void);

/* MPI is initialised (whichever binding did it; state.c): marks an MPI process for the
 * arena and arranges for the stats and the states' release at MPI_Finalize, also when a
 * binding calls PMPI_Finalize directly. Idempotent. */
void shim_mpi_started(void);

/* The shared arena of large allocations (arena.c). Create this process's arena now if it
 * has none yet and shared allocation is enabled (idempotent, thread-safe). Returns 1 if an
 * arena exists afterwards. */
/* The process is an MPI process (MPI_Init returned): from now on large allocations may
 * come from the arena. Launchers, which the library is preloaded into as well, never are. */
void shim_arena_mpi_started(void);
int shim_arena_ensure(void);
/* The arena of this process: its memfd, base address and reserved size. 1 and fills them
 * if one exists, else 0. */
int shim_arena(int *fd, void **base, size_t *size);
/* Counters for the stats: [0] allocations served from the arena, [1] bytes in use now,
 * [2] large allocations that went to glibc because the arena was full or unavailable. */
void shim_arena_counts(unsigned long long out[3]);

/* Report an engine message once per process (stderr). */
void shim_warn_once(const char *op, const char *msg);
/* A fatal engine error: report and abort the job (the communicator is unusable). */
void shim_fatal(MPI_Comm comm, const char *op, const char *msg);

/* Contiguous datatypes only: count elements are the bytes [0, count * size) in type-map
 * order (types.c). Sets *bytes to the size. */
int shim_contiguous(MPI_Datatype t, size_t *bytes);
/* One of the last non-contiguous types this thread saw (cheap: a call that passes
 * through should cost next to nothing; types.c). A verdict every rank that passes the
 * type reaches alike, but this rank's memory of it is its own: ask it only on a
 * communicator whose state exists (shim_existing), never to skip the setup. */
int shim_remembered_derived(MPI_Datatype t);
/* A datatype was freed: forget the remembered verdicts (types.c). */
void shim_types_forget(void);
/* The engine's dtype code of a predefined C type it can reduce (size in *bytes), or -1. */
int shim_reduce_dtype(MPI_Datatype t, size_t *bytes);

/* The state that serves `comm`, or NULL with *why set when the call must pass through. */
shim_comm *shim_serving(MPI_Comm comm, enum shim_reason *why);
/* The datatypes of a call moving `recvtype` and (unless `in_place`) `sendtype`: 1 if both
 * are contiguous (sizes in *rsize and *ssize), 0 if one is not (the call passes through),
 * -1 if one is MPI_DATATYPE_NULL (the call is rejected). */
int shim_types(int in_place, MPI_Datatype sendtype, MPI_Datatype recvtype, size_t *ssize, size_t *rsize);
/* Whether `bytes` falls in the range where MPI was measured faster for `op` (window.c). */
int shim_mpi_faster(enum shim_op op, size_t bytes);
/* A byte count ("1048576", "256K", "64G": K/M/G/T binary, optionally followed by B or
 * iB) -> 1 and *out, else 0 (also on overflow): the shim's one parser, for its settings
 * and the windows file. It never allocates, since the malloc arena reads its settings
 * before allocating is safe; that is why it is not the engine's (hw::parse_bytes), whose
 * dialect it follows but for fractions ("1.5M"), which it refuses. */
int shim_parse_bytes(const char *s, unsigned long long *out);
/* Whether some size of `op` goes to PMPI (its window is not empty): then a rank that
 * cannot compute its call's size cannot know where its peers went either. */
int shim_window_open(enum shim_op op);
/* A rank's call of `op` is wrong in the very argument its size depends on (a negative
 * count, MPI_DATATYPE_NULL), so it cannot take the window decision its peers take. With
 * no window (every size served) its peers are in the engine: reject it there, as
 * shim_reject, and return the MPI error. Otherwise return SHIM_PASS, counted: PMPI_
 * reports the error on this rank as MPI does, and the call never starts there, so the
 * peers wait for this rank's next call (in PMPI_ or in the engine, which both match calls
 * in order, as MPI would without this library) or, in the engine, until SHMCOLL_TIMEOUT;
 * a rejection through the engine would instead wait that long whenever they are in PMPI_,
 * where MPI's own check aborts at once under MPI_ERRORS_ARE_FATAL. */
int shim_reject_unsized(shim_comm *s, enum shim_op op, int cls, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), cold, noinline));
/* A hash of the pass-through windows this process uses, for the setup agreement. */
unsigned long long shim_windows_digest(void);

/* What a serve_ function returns when the wrapper must hand the call to PMPI_ (MPI's
 * return codes are never negative). */
#define SHIM_PASS (-1)
/* After the engine's verdict `rc` on a call of `op` (dispatch.c): MPI_SUCCESS if it was
 * served; SHIM_PASS if every rank declined it alike (counted); else the MPI error code,
 * raised through the communicator's error handler on every rank (all ranks got the same
 * verdict). A fatal verdict aborts the job. */
int shim_finish(shim_comm *s, enum shim_op op, int rc, const char *err);
/* Reject this rank's part of a call of `op` with the engine's error class `cls`
 * (SHMCOLL_CLASS_*) and a printf-style reason: every peer fails the same call with that
 * class, so no rank waits for this one; returns the MPI error code (as shim_finish). */
int shim_reject(shim_comm *s, enum shim_op op, int cls, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), cold, noinline));
/* A non-NULL stand-in for a NULL send buffer of zero bytes: the engine takes NULL for
 * MPI_IN_PLACE. */
const void *shim_send_ptr(const void *sendbuf);

#define SHIM_ERR_CAP 512
/* The library is loaded at startup (LD_PRELOAD), so its thread-locals can live in the
 * static TLS block: no __tls_get_addr call on every access. */
#define SHIM_TLS __attribute__((tls_model("initial-exec")))
#endif
