/* Which datatypes the engine can move as plain bytes: contiguous ones (lower bound 0,
 * extent == size, true extent == size). The predefined C types are recognised by handle
 * from a table filled once (they are never freed, so a handle always means the same
 * type); any other type costs a few PMPI queries (35 ns each in MPICH 5), except the
 * last few non-contiguous ones each thread saw: a program passing a derived type keeps
 * passing it, and the library should cost such calls next to nothing. Only "pass it
 * through" verdicts are remembered: should a freed handle come back as a contiguous type,
 * the stale verdict sends its calls to PMPI (still right), and MPI_Type_free (wrapped
 * below) forgets them all anyway. */
#include <pthread.h>

#include "shim.h"

#define MAX_KNOWN 32
static struct {
    MPI_Datatype type;
    size_t size;
} known[MAX_KNOWN];
static int nknown;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int general(MPI_Datatype t, size_t *bytes)
{
    int size = 0;
    MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
    /* Size and extent first: they already reject strided types (extent > size). */
    if (PMPI_Type_size(t, &size) != MPI_SUCCESS || PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS)
        return 0;
    if (size < 0 || lb != 0 || extent != size)
        return 0;
    if (PMPI_Type_get_true_extent(t, &tlb, &textent) != MPI_SUCCESS || tlb != 0 || textent != size)
        return 0;
    *bytes = (size_t)size;
    return 1;
}

static void fill_known(void)
{
    /* C types only: Fortran types may be unusable handles in an MPI built without Fortran. */
    MPI_Datatype c_types[] = {
        MPI_BYTE, MPI_CHAR, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR, MPI_SHORT, MPI_UNSIGNED_SHORT,
        MPI_INT, MPI_UNSIGNED, MPI_LONG, MPI_UNSIGNED_LONG, MPI_LONG_LONG, MPI_UNSIGNED_LONG_LONG,
        MPI_FLOAT, MPI_DOUBLE, MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX, MPI_INT8_T, MPI_UINT8_T,
        MPI_INT16_T, MPI_UINT16_T, MPI_INT32_T, MPI_UINT32_T, MPI_INT64_T, MPI_UINT64_T,
    };
    for (size_t i = 0; i < sizeof c_types / sizeof *c_types && nknown < MAX_KNOWN; i++) {
        size_t size;
        if (c_types[i] != MPI_DATATYPE_NULL && general(c_types[i], &size)) {
            known[nknown].type = c_types[i];
            known[nknown].size = size;
            nknown++;
        }
    }
}

#define NEGATIVE 4
static unsigned long type_generation; /* bumped by MPI_Type_free */
static __thread SHIM_TLS struct {
    MPI_Datatype type[NEGATIVE];
    unsigned long generation;
    int n, next;
} negative;

int shim_contiguous(MPI_Datatype t, size_t *bytes)
{
    pthread_once(&once, fill_known);
    for (int i = 0; i < nknown; i++)
        if (known[i].type == t) {
            *bytes = known[i].size;
            return 1;
        }
    unsigned long gen = __atomic_load_n(&type_generation, __ATOMIC_ACQUIRE);
    if (negative.generation != gen) {
        negative.n = negative.next = 0;
        negative.generation = gen;
    }
    for (int i = 0; i < negative.n; i++)
        if (negative.type[i] == t)
            return 0;
    if (general(t, bytes))
        return 1;
    negative.type[negative.next] = t;
    negative.next = (negative.next + 1) % NEGATIVE;
    negative.n += negative.n < NEGATIVE;
    return 0;
}

int MPI_Type_free(MPI_Datatype *type)
{
    __atomic_fetch_add(&type_generation, 1, __ATOMIC_ACQ_REL);
    return PMPI_Type_free(type);
}
