/* MPICH's mpi_f08 module: its routines with choice buffers (MPI_Alltoall and the other
 * collectives we serve) call the C MPI_ functions, which the C wrappers serve; those
 * without (MPI_Init, MPI_Barrier, MPI_Type_free, MPI_Finalize) call PMPI_ directly.
 * Finalize is covered anyway (the MPI_COMM_SELF attribute of state.c); the others are
 * hooked here. MPI_Init and MPI_Type_free run MPICH's own entry point (found with
 * RTLD_NEXT; MPI_Init also sets up the module's MPI_IN_PLACE and friends) and add our part
 * (an MPI process for the arena; forgetting the pass-through verdicts of types.c).
 * MPI_Barrier is served as the C one is. An mpi_f08 handle (type(MPI_Comm) and so on) is
 * one default INTEGER, passed by reference like mpif.h's. Open MPI's mpi_f08 goes through
 * ompi_barrier_f and friends instead (fortran.c). */
#include "shim.h"

#if defined(MPICH) && !defined(OPEN_MPI)
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *next_entry(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "[shmcoll-pmpi] %s called but not found in the MPI library\n", name);
        abort();
    }
    return f;
}

static void after_init(void)
{
    int flag = 0;
    if (PMPI_Initialized(&flag) == MPI_SUCCESS && flag)
        shim_mpi_started();
}

/* The ierror arguments are optional in mpi_f08: NULL when the caller leaves them out. */
void mpi_init_f08_(MPI_Fint *ierror);
void mpi_init_f08_(MPI_Fint *ierror)
{
    void (*real)(MPI_Fint *) = (void (*)(MPI_Fint *))next_entry("mpi_init_f08_");
    real(ierror);
    after_init();
}

void mpi_init_thread_f08_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierror);
void mpi_init_thread_f08_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierror)
{
    void (*real)(MPI_Fint *, MPI_Fint *, MPI_Fint *) =
        (void (*)(MPI_Fint *, MPI_Fint *, MPI_Fint *))next_entry("mpi_init_thread_f08_");
    real(required, provided, ierror);
    after_init();
}

void mpi_barrier_f08_(MPI_Fint *comm, MPI_Fint *ierror);
void mpi_barrier_f08_(MPI_Fint *comm, MPI_Fint *ierror)
{
    int rc = MPI_Barrier(MPI_Comm_f2c(*comm));
    if (ierror)
        *ierror = (MPI_Fint)rc;
}

void mpi_type_free_f08_(MPI_Fint *type, MPI_Fint *ierror);
void mpi_type_free_f08_(MPI_Fint *type, MPI_Fint *ierror)
{
    void (*real)(MPI_Fint *, MPI_Fint *) = (void (*)(MPI_Fint *, MPI_Fint *))next_entry("mpi_type_free_f08_");
    real(type, ierror);
    shim_types_forget(); /* after the free, as MPI_Type_free in types.c */
}
#endif
