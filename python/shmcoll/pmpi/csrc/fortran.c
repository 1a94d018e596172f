/* Fortran entry points (mpif.h and `use mpi`), for MPIs whose Fortran layer does not go
 * through the C MPI_ functions.
 *
 * MPICH's Fortran bindings call MPI_Alltoall and friends, so the C wrappers already serve
 * Fortran programs there (tests/test_pmpi.py proves it) and nothing here is compiled for
 * it. Open MPI's call PMPI_Alltoall directly: a Fortran program would never reach the C
 * wrappers. So, for Open MPI, each served operation gets its Fortran symbol in the four
 * name forms Fortran compilers produce (mpi_alltoall_, mpi_alltoall__, mpi_alltoall,
 * MPI_ALLTOALL). A wrapper converts the handles with MPI_*_f2c and Fortran's MPI_IN_PLACE
 * and MPI_BOTTOM (addresses of Open MPI's common blocks) to C's, then calls the C wrapper,
 * which serves the call or passes it to PMPI exactly as for a C caller (and counts it).
 * Open MPI's mpi_f08 module converts its handles and calls ompi_alltoall_f and friends,
 * which get the same wrappers (its MPI_IN_PLACE is the same common block). MPICH's mpi_f08
 * calls the C functions for collectives (fortran_f08.c covers its MPI_Init). */
#include "shim.h"

#ifdef OPEN_MPI
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

/* Open MPI exports each sentinel under the name forms of its Fortran compiler. */
#define SENTINEL_FORMS 4
static void *in_place_addr[SENTINEL_FORMS], *bottom_addr[SENTINEL_FORMS];
static pthread_once_t sentinels_once = PTHREAD_ONCE_INIT;

static void find_sentinels(void)
{
    static const char *in_place[SENTINEL_FORMS] = {"mpi_fortran_in_place_", "mpi_fortran_in_place__",
                                                   "mpi_fortran_in_place", "MPI_FORTRAN_IN_PLACE"};
    static const char *bottom[SENTINEL_FORMS] = {"mpi_fortran_bottom_", "mpi_fortran_bottom__",
                                                 "mpi_fortran_bottom", "MPI_FORTRAN_BOTTOM"};
    for (int i = 0; i < SENTINEL_FORMS; i++) {
        in_place_addr[i] = dlsym(RTLD_DEFAULT, in_place[i]);
        bottom_addr[i] = dlsym(RTLD_DEFAULT, bottom[i]);
    }
}

static int is_one_of(const void *p, void *const *addrs)
{
    for (int i = 0; i < SENTINEL_FORMS; i++)
        if (addrs[i] && p == addrs[i])
            return 1;
    return 0;
}

/* A Fortran buffer argument as C sees it. */
static void *c_buf(void *p)
{
    pthread_once(&sentinels_once, find_sentinels);
    if (is_one_of(p, in_place_addr))
        return MPI_IN_PLACE;
    if (is_one_of(p, bottom_addr))
        return MPI_BOTTOM;
    return p;
}

static void set_ierr(MPI_Fint *ierr, int rc)
{
    if (ierr)
        *ierr = (MPI_Fint)rc;
}

/* Fortran INTEGER arrays as C int arrays: the same memory when the kinds agree, else a
 * converted copy (an Open MPI built with 8-byte default integers); free with free_ints. */
static int *c_ints(const MPI_Fint *f, int n)
{
    if (sizeof(MPI_Fint) == sizeof(int))
        return (int *)(void *)f;
    int *c = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (c)
        for (int i = 0; i < n; i++)
            c[i] = (int)f[i];
    return c;
}

static void free_ints(int *c, const MPI_Fint *f)
{
    if ((void *)c != (const void *)f)
        free(c);
}

/* The symbols of one entry point, all calling `impl`: the four name forms of mpif.h and
 * `use mpi`, and ompi_<name>_f, which Open MPI's mpi_f08 module calls (its
 * MPI_Alltoall_f08 unwraps the handles' MPI_VAL and passes the same arguments). */
#define FORTRAN_NAMES(stem, upper, impl, params, args)                                                    \
    void mpi_##stem##_ params;                                                                            \
    void mpi_##stem##__ params;                                                                           \
    void mpi_##stem params;                                                                               \
    void MPI_##upper params;                                                                              \
    void ompi_##stem##_f params;                                                                          \
    void mpi_##stem##_ params { impl args; }                                                              \
    void mpi_##stem##__ params { impl args; }                                                             \
    void mpi_##stem params { impl args; }                                                                 \
    void MPI_##upper params { impl args; }                                                                \
    void ompi_##stem##_f params { impl args; }

static void f_alltoall(void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *comm,
                       MPI_Fint *ierr)
{
    set_ierr(ierr, MPI_Alltoall(c_buf(sb), (int)*sc, MPI_Type_f2c(*st), c_buf(rb), (int)*rc, MPI_Type_f2c(*rt),
                                MPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(alltoall, ALLTOALL, f_alltoall,
              (void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *comm,
               MPI_Fint *ierr),
              (sb, sc, st, rb, rc, rt, comm, ierr))

static void f_alltoallv(void *sb, MPI_Fint *sc, MPI_Fint *sd, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rd,
                        MPI_Fint *rt, MPI_Fint *comm, MPI_Fint *ierr)
{
    MPI_Comm c = MPI_Comm_f2c(*comm);
    int p = 0;
    if (PMPI_Comm_size(c, &p) != MPI_SUCCESS) {
        set_ierr(ierr, MPI_ERR_COMM);
        return;
    }
    int *csc = c_ints(sc, p), *csd = c_ints(sd, p), *crc = c_ints(rc, p), *crd = c_ints(rd, p);
    int rv = MPI_ERR_NO_MEM;
    if (csc && csd && crc && crd)
        rv = MPI_Alltoallv(c_buf(sb), csc, csd, MPI_Type_f2c(*st), c_buf(rb), crc, crd, MPI_Type_f2c(*rt), c);
    free_ints(csc, sc), free_ints(csd, sd), free_ints(crc, rc), free_ints(crd, rd);
    set_ierr(ierr, rv);
}
FORTRAN_NAMES(alltoallv, ALLTOALLV, f_alltoallv,
              (void *sb, MPI_Fint *sc, MPI_Fint *sd, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rd,
               MPI_Fint *rt, MPI_Fint *comm, MPI_Fint *ierr),
              (sb, sc, sd, st, rb, rc, rd, rt, comm, ierr))

static void f_allgather(void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *comm,
                        MPI_Fint *ierr)
{
    set_ierr(ierr, MPI_Allgather(c_buf(sb), (int)*sc, MPI_Type_f2c(*st), c_buf(rb), (int)*rc, MPI_Type_f2c(*rt),
                                 MPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(allgather, ALLGATHER, f_allgather,
              (void *sb, MPI_Fint *sc, MPI_Fint *st, void *rb, MPI_Fint *rc, MPI_Fint *rt, MPI_Fint *comm,
               MPI_Fint *ierr),
              (sb, sc, st, rb, rc, rt, comm, ierr))

static void f_allreduce(void *sb, void *rb, MPI_Fint *n, MPI_Fint *t, MPI_Fint *op, MPI_Fint *comm, MPI_Fint *ierr)
{
    set_ierr(ierr, MPI_Allreduce(c_buf(sb), c_buf(rb), (int)*n, MPI_Type_f2c(*t), MPI_Op_f2c(*op),
                                 MPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(allreduce, ALLREDUCE, f_allreduce,
              (void *sb, void *rb, MPI_Fint *n, MPI_Fint *t, MPI_Fint *op, MPI_Fint *comm, MPI_Fint *ierr),
              (sb, rb, n, t, op, comm, ierr))

static void f_reduce_scatter_block(void *sb, void *rb, MPI_Fint *n, MPI_Fint *t, MPI_Fint *op, MPI_Fint *comm,
                                   MPI_Fint *ierr)
{
    set_ierr(ierr, MPI_Reduce_scatter_block(c_buf(sb), c_buf(rb), (int)*n, MPI_Type_f2c(*t), MPI_Op_f2c(*op),
                                            MPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(reduce_scatter_block, REDUCE_SCATTER_BLOCK, f_reduce_scatter_block,
              (void *sb, void *rb, MPI_Fint *n, MPI_Fint *t, MPI_Fint *op, MPI_Fint *comm, MPI_Fint *ierr),
              (sb, rb, n, t, op, comm, ierr))

static void f_bcast(void *b, MPI_Fint *n, MPI_Fint *t, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr)
{
    set_ierr(ierr, MPI_Bcast(c_buf(b), (int)*n, MPI_Type_f2c(*t), (int)*root, MPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(bcast, BCAST, f_bcast,
              (void *b, MPI_Fint *n, MPI_Fint *t, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr),
              (b, n, t, root, comm, ierr))

static void f_barrier(MPI_Fint *comm, MPI_Fint *ierr)
{
    set_ierr(ierr, MPI_Barrier(MPI_Comm_f2c(*comm)));
}
FORTRAN_NAMES(barrier, BARRIER, f_barrier, (MPI_Fint * comm, MPI_Fint *ierr), (comm, ierr))

/* Not collectives, but the C wrappers do work in them: MPI_Init marks an MPI process
 * (arena.c), MPI_Finalize prints the stats and frees the states, MPI_Type_free forgets the
 * pass-through verdicts (types.c). Fortran's MPI_INIT passes no command line. */
static void f_init(MPI_Fint *ierr)
{
    set_ierr(ierr, MPI_Init(NULL, NULL));
}
FORTRAN_NAMES(init, INIT, f_init, (MPI_Fint * ierr), (ierr))

static void f_init_thread(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
    int got = 0;
    int rc = MPI_Init_thread(NULL, NULL, (int)*required, &got);
    *provided = (MPI_Fint)got;
    set_ierr(ierr, rc);
}
FORTRAN_NAMES(init_thread, INIT_THREAD, f_init_thread,
              (MPI_Fint * required, MPI_Fint *provided, MPI_Fint *ierr), (required, provided, ierr))

static void f_finalize(MPI_Fint *ierr)
{
    set_ierr(ierr, MPI_Finalize());
}
FORTRAN_NAMES(finalize, FINALIZE, f_finalize, (MPI_Fint * ierr), (ierr))

static void f_type_free(MPI_Fint *type, MPI_Fint *ierr)
{
    MPI_Datatype t = MPI_Type_f2c(*type);
    int rc = MPI_Type_free(&t);
    if (rc == MPI_SUCCESS)
        *type = MPI_Type_c2f(t);
    set_ierr(ierr, rc);
}
FORTRAN_NAMES(type_free, TYPE_FREE, f_type_free, (MPI_Fint * type, MPI_Fint *ierr), (type, ierr))
#endif
