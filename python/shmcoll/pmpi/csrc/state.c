/* Per-communicator state: created on a communicator's first handled collective (a
 * collective step over it, PMPI calls only), cached as an attribute so that MPI frees it
 * through the delete callback at MPI_Comm_free, and freed for the survivors at
 * MPI_Finalize. MPI_Comm_dup does not copy it (MPI_COMM_NULL_COPY_FN): a duplicate gets
 * its own segment, as its calls must not mix with the parent's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#include "shim.h"

static int keyval = MPI_KEYVAL_INVALID;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* keyval creation and the list */
static shim_comm *live; /* states still attached, for MPI_Finalize */

/* The last lookup of each thread, so that a run of calls on one communicator skips the
 * attribute lookup. Any deleted state bumps `generation`, which invalidates every cached
 * entry: a freed communicator's handle may be reused by a new one. */
static unsigned long generation;
static __thread SHIM_TLS struct {
    MPI_Comm comm;
    shim_comm *state;
    unsigned long generation;
    int valid;
} last;

int shim_enabled(void)
{
    static int enabled = -1;
    if (enabled < 0) {
        const char *v = getenv("SHMCOLL_PMPI");
        enabled = !(v && strcmp(v, "0") == 0);
    }
    return enabled;
}

static void destroy(shim_comm *s)
{
    pthread_mutex_lock(&lock);
    if (s->prev)
        s->prev->next = s->next;
    else if (live == s)
        live = s->next;
    if (s->next)
        s->next->prev = s->prev;
    pthread_mutex_unlock(&lock);
    shmcoll_comm_free(s->engine);
    free(s->scratch);
    free(s);
}

static int delete_fn(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm, (void)kv, (void)extra;
    __atomic_fetch_add(&generation, 1, __ATOMIC_ACQ_REL);
    destroy(value);
    return MPI_SUCCESS;
}

/* The fake node of this rank when SHMCOLL_NODE_SPLIT=k groups the ranks of MPI_COMM_WORLD
 * into nodes of k (to try and test the multi-node rules on one machine), else -1. */
static int fake_node(void)
{
    const char *v = getenv("SHMCOLL_NODE_SPLIT");
    char *end;
    if (!v || !*v)
        return -1;
    long k = strtol(v, &end, 10);
    if (*end || k < 1) {
        shim_warn_once("setup", "SHMCOLL_NODE_SPLIT is not a positive number of ranks per node; ignored");
        return -1;
    }
    int world_rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    return (int)(world_rank / k);
}

/* Whether every rank of `comm` is on this node: its shared-memory split is all of it (and,
 * with SHMCOLL_NODE_SPLIT, all of it is in one fake node). */
static int on_one_node(MPI_Comm comm, int size)
{
    MPI_Comm node;
    int node_size = 0, spans, any, fake = fake_node(), lo = fake, hi = fake;
    if (PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return 0; /* the same verdict on every rank: the split is collective */
    PMPI_Comm_size(node, &node_size);
    PMPI_Comm_free(&node);
    if (fake >= 0) {
        PMPI_Allreduce(&fake, &lo, 1, MPI_INT, MPI_MIN, comm);
        PMPI_Allreduce(&fake, &hi, 1, MPI_INT, MPI_MAX, comm);
    }
    spans = node_size != size || lo != hi;
    PMPI_Allreduce(&spans, &any, 1, MPI_INT, MPI_MAX, comm);
    return !any;
}

/* All ranks agree whether `ok` holds everywhere. */
static int all_ok(int ok, MPI_Comm comm)
{
    int all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    return all;
}

/* Let the peers reach this communicator's buffers in the ranks' arenas (arena.c: the
 * program's large allocations live there): every rank publishes its arena (pid, memfd
 * number, size), maps its peers', and buffers in arenas are described as shared only if
 * every rank succeeded. A failure (no pidfd_getfd, say) costs nothing but the speed-up:
 * the calls are still served, through CMA. */
static int arena_warned;

static void attach_arenas(MPI_Comm comm, ShmcollComm *engine, int size)
{
    struct published {
        uint64_t len;
        uint32_t pid;
        int32_t fd;
    } mine = {0, (uint32_t)getpid(), -1};
    void *base = NULL;
    int fd = -1;
    size_t len = 0;
    if (shim_arena_ensure() && shim_arena(&fd, &base, &len))
        mine.fd = fd, mine.len = len;
    struct published *all = malloc(sizeof *all * (size_t)size);
    uint32_t *pids = malloc(sizeof *pids * (size_t)size);
    int *fds = malloc(sizeof *fds * (size_t)size);
    size_t *lens = malloc(sizeof *lens * (size_t)size);
    int ok = all && pids && fds && lens;
    char err[SHIM_ERR_CAP] = "out of memory";
    if (all_ok(ok, comm)) {
        PMPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, comm);
        for (int j = 0; j < size; j++)
            pids[j] = all[j].pid, fds[j] = all[j].fd, lens[j] = (size_t)all[j].len;
        ok = shmcoll_comm_attach_arenas(engine, mine.fd >= 0 ? base : NULL, mine.fd >= 0 ? len : 0, pids, fds,
                                        lens, (size_t)size, err, sizeof err) == SHMCOLL_OK;
        if (all_ok(ok, comm))
            shmcoll_comm_enable_arenas(engine);
        else if (!ok && !__atomic_exchange_n(&arena_warned, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "[shmcoll-pmpi] peers cannot reach the program's buffers directly: %s "
                            "(calls are served through CMA instead; reported once)\n", err);
    }
    free(all), free(pids), free(fds), free(lens);
}

/* The creation exchange (the engine's pool of freed communicators' segments): every rank's
 * record by one Allgather, settled alike on every rank. Returns 0 with *pooled the engine
 * on a segment every rank offered (or NULL: make one) and *one_node whether every record
 * names this node; -1 when a rank's settings are not valid (the same on every rank). */
static int exchange(MPI_Comm comm, int rank, int size, ShmcollComm **pooled, int *one_node)
{
    char err[SHIM_ERR_CAP] = "";
    size_t n = shmcoll_offer_record_bytes();
    unsigned char *mine = malloc(n), *all = malloc(n * (size_t)size);
    ShmcollOffer *offer = NULL;
    /* A rank leaving the exchange would leave the others waiting in it. */
    if (!mine || !all)
        shim_fatal(comm, "setup", "out of memory");
    if (shmcoll_offer_create((size_t)size, &offer, mine, n, err, sizeof err) != SHMCOLL_OK)
        shim_fatal(comm, "setup", err);
    PMPI_Allgather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, comm);
    int rc = shmcoll_offer_settle(offer, all, n * (size_t)size, (size_t)rank, one_node, pooled, err, sizeof err);
    free(mine), free(all);
    if (rc != SHMCOLL_OK) {
        shim_warn_once("setup", err);
        return -1;
    }
    return 0;
}

/* Rank 0 creates the segment and broadcasts its name (or its error); the others map it;
 * all join. Every failure is agreed on, so that all ranks pass through together. */
static ShmcollComm *new_segment(MPI_Comm comm, int rank)
{
    char msg[SHIM_ERR_CAP];
    char err[SHIM_ERR_CAP] = "";
    ShmcollSegment *seg = NULL;
    ShmcollComm *engine = NULL;
    int size = 0;
    PMPI_Comm_size(comm, &size);
    memset(msg, 0, sizeof msg);
    if (rank == 0) {
        int rc = shmcoll_segment_create((size_t)size, &seg, err, sizeof err);
        if (rc == SHMCOLL_OK && shmcoll_segment_name(seg, msg + 1, sizeof msg - 1) == SHMCOLL_OK) {
            msg[0] = 1;
        } else {
            snprintf(msg + 1, sizeof msg - 1, "%s", err);
        }
    }
    PMPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, 0, comm);
    if (!msg[0]) {
        if (rank == 0)
            shim_warn_once("setup", msg + 1);
        return NULL;
    }
    if (rank != 0 && shmcoll_segment_open(msg + 1, &seg, err, sizeof err) != SHMCOLL_OK)
        seg = NULL;
    if (!all_ok(seg != NULL, comm)) {
        if (!seg)
            shim_warn_once("setup", err);
        shmcoll_segment_free(seg); /* rank 0's drop unlinks the name */
        return NULL;
    }
    if (shmcoll_comm_join(seg, (size_t)rank, &engine, err, sizeof err) != SHMCOLL_OK) {
        engine = NULL;
        shim_warn_once("setup", err);
    }
    if (!all_ok(engine != NULL, comm)) {
        shmcoll_comm_free(engine);
        return NULL;
    }
    return engine;
}

/* The engine on `pooled` (a segment every rank offered) or on a new segment; then the
 * agreement on tables and the arenas, as for every engine. */
static ShmcollComm *bootstrap(MPI_Comm comm, int rank, int size, ShmcollComm *pooled)
{
    ShmcollComm *engine = pooled ? pooled : new_segment(comm, rank);
    if (!engine)
        return NULL;
    shim_count_setup(pooled != NULL);
    /* Selection must be identical on every rank: a rank that found another tuning file or
     * windows file (a different HOME, say) would pick other algorithms than its peers, or
     * pass a call to MPI that they serve. */
    unsigned long long digest = shmcoll_comm_tables_digest(engine) ^ shim_windows_digest(), lo = 0, hi = 0;
    PMPI_Allreduce(&digest, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
    PMPI_Allreduce(&digest, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
    if (lo != hi) {
        shim_warn_once("setup", "ranks bound different tuning tables or pass-through windows (check "
                                "SHMCOLL_TUNING_FILE, SHMCOLL_PMPI_WINDOWS and those files on every rank)");
        shmcoll_comm_free(engine);
        return NULL;
    }
    attach_arenas(comm, engine, size);
    return engine;
}

static shim_comm *create(MPI_Comm comm)
{
    shim_comm *s = calloc(1, sizeof *s);
    int inter = 0, one_node = 0;
    ShmcollComm *pooled = NULL;
    if (!s) { /* a rank leaving the setup would leave the others waiting in it */
        shim_fatal(comm, "setup", "out of memory");
        return NULL;
    }
    s->comm = comm;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &s->size);
    PMPI_Comm_rank(comm, &s->rank);
    if (inter) {
        s->reason = R_INTERCOMM;
        return s;
    }
    /* Fake nodes (SHMCOLL_NODE_SPLIT) are the communicator's own business: the records
     * name the real node, so the check stays MPI's. */
    if (fake_node() < 0 && exchange(comm, s->rank, s->size, &pooled, &one_node) != 0) {
        s->reason = R_SETUP_FAILED;
        return s;
    }
    if (!one_node && !on_one_node(comm, s->size)) {
        s->reason = R_SPANS_NODES;
        return s;
    }
    s->scratch = malloc(4 * sizeof(size_t) * (size_t)s->size);
    if (!s->scratch) /* a rank leaving the bootstrap would leave the others waiting */
        shim_fatal(comm, "setup", "out of memory");
    s->engine = bootstrap(comm, s->rank, s->size, pooled);
    s->reason = R_SETUP_FAILED;
    s->uniform_v = 1;
    return s;
}

shim_comm *shim_existing(MPI_Comm comm)
{
    void *value = NULL;
    int flag = 0;
    if (comm == MPI_COMM_NULL)
        return NULL;
    unsigned long gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (last.valid && last.comm == comm && last.generation == gen)
        return last.state;
    if (__atomic_load_n(&keyval, __ATOMIC_ACQUIRE) == MPI_KEYVAL_INVALID)
        return NULL;
    if (PMPI_Comm_get_attr(comm, keyval, &value, &flag) == MPI_SUCCESS && flag) {
        last.comm = comm, last.state = value, last.generation = gen, last.valid = 1;
        return value;
    }
    return NULL;
}

shim_comm *shim_get(MPI_Comm comm)
{
    if (comm == MPI_COMM_NULL)
        return NULL;
    shim_comm *s = shim_existing(comm);
    if (s)
        return s;
    if (keyval == MPI_KEYVAL_INVALID) {
        pthread_mutex_lock(&lock);
        if (keyval == MPI_KEYVAL_INVALID)
            PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &keyval, NULL);
        pthread_mutex_unlock(&lock);
    }
    shim_mpi_started(); /* in case MPI_Init bypassed our wrapper */
    s = create(comm);
    if (!s)
        return NULL;
    pthread_mutex_lock(&lock);
    s->next = live;
    if (live)
        live->prev = s;
    live = s;
    pthread_mutex_unlock(&lock);
    PMPI_Comm_set_attr(comm, keyval, s);
    return s;
}

void shim_release_all(void)
{
    if (keyval == MPI_KEYVAL_INVALID)
        return;
    /* Deleting the attribute runs delete_fn, which unlinks the state from the list. */
    while (live) {
        shim_comm *s = live;
        if (PMPI_Comm_delete_attr(s->comm, keyval) != MPI_SUCCESS || live == s)
            destroy(s); /* never loop on a state MPI would not delete */
    }
    PMPI_Comm_free_keyval(&keyval);
}

/* What MPI_Finalize must do first, once: print the stats and free the states while MPI
 * still works. Our MPI_Finalize does it; so does the delete callback of an attribute on
 * MPI_COMM_SELF, which MPI_Finalize deletes before anything else (MPI-4.1 section 11.2.4),
 * for bindings that call PMPI_Finalize themselves (MPICH's mpi_f08 does). */
static void finalize_work(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    shim_print_stats();
    shim_release_all();
}

static int self_delete_fn(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm, (void)kv, (void)value, (void)extra;
    finalize_work();
    return MPI_SUCCESS;
}

void shim_mpi_started(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    shim_arena_mpi_started();
    int kv = MPI_KEYVAL_INVALID;
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete_fn, &kv, NULL) == MPI_SUCCESS)
        PMPI_Comm_set_attr(MPI_COMM_SELF, kv, NULL);
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS)
        shim_mpi_started();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS)
        shim_mpi_started();
    return rc;
}

int MPI_Finalize(void)
{
    finalize_work();
    return PMPI_Finalize();
}
