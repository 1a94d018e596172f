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
/* The handles in an array of their own, what is known of them in another: a lookup scans
 * only the short array of handles (a call that passes through scans all of it). */
static MPI_Datatype known_type[MAX_KNOWN];
static struct {
    size_t size;
    int reduce_code; /* the engine's dtype code, -1: no reductions by shmcoll */
} known[MAX_KNOWN];
static int nknown;

static int known_index(MPI_Datatype t)
{
    for (int i = 0; i < nknown; i++)
        if (known_type[i] == t)
            return i;
    return -1;
}
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

/* The engine's dtype code for a kind ('i' signed, 'u' unsigned, 'f' real, 'c' complex)
 * and size; -1 if it has none. */
static int engine_code(char kind, size_t size)
{
    switch (kind) {
    case 'i':
        return size == 1 ? SHMCOLL_DTYPE_INT8 : size == 2 ? SHMCOLL_DTYPE_INT16
             : size == 4 ? SHMCOLL_DTYPE_INT32 : size == 8 ? SHMCOLL_DTYPE_INT64 : -1;
    case 'u':
        return size == 1 ? SHMCOLL_DTYPE_UINT8 : size == 2 ? SHMCOLL_DTYPE_UINT16
             : size == 4 ? SHMCOLL_DTYPE_UINT32 : size == 8 ? SHMCOLL_DTYPE_UINT64 : -1;
    case 'f': return size == 4 ? SHMCOLL_DTYPE_FLOAT32 : size == 8 ? SHMCOLL_DTYPE_FLOAT64 : -1;
    case 'c': return size == 8 ? SHMCOLL_DTYPE_COMPLEX64 : size == 16 ? SHMCOLL_DTYPE_COMPLEX128 : -1;
    default: return -1;
    }
}

static void fill_known(void)
{
    /* C types only: Fortran types may be unusable handles in an MPI built without Fortran.
     * MPI_BYTE and MPI_CHAR move data but take no arithmetic ('-'). */
    struct {
        MPI_Datatype type;
        char kind;
    } c_types[] = {
        /* The most used first: a lookup scans in this order. */
        {MPI_DOUBLE, 'f'}, {MPI_BYTE, '-'}, {MPI_C_DOUBLE_COMPLEX, 'c'}, {MPI_FLOAT, 'f'},
        {MPI_INT, 'i'}, {MPI_C_FLOAT_COMPLEX, 'c'}, {MPI_CHAR, '-'}, {MPI_LONG, 'i'},
        {MPI_SIGNED_CHAR, 'i'}, {MPI_UNSIGNED_CHAR, 'u'}, {MPI_SHORT, 'i'}, {MPI_UNSIGNED_SHORT, 'u'},
        {MPI_UNSIGNED, 'u'}, {MPI_UNSIGNED_LONG, 'u'}, {MPI_LONG_LONG, 'i'}, {MPI_UNSIGNED_LONG_LONG, 'u'},
        {MPI_INT8_T, 'i'}, {MPI_UINT8_T, 'u'}, {MPI_INT16_T, 'i'}, {MPI_UINT16_T, 'u'},
        {MPI_INT32_T, 'i'}, {MPI_UINT32_T, 'u'}, {MPI_INT64_T, 'i'}, {MPI_UINT64_T, 'u'},
    };
    for (size_t i = 0; i < sizeof c_types / sizeof *c_types && nknown < MAX_KNOWN; i++) {
        size_t size;
        if (c_types[i].type != MPI_DATATYPE_NULL && general(c_types[i].type, &size)) {
            known_type[nknown] = c_types[i].type;
            known[nknown].size = size;
            known[nknown].reduce_code = engine_code(c_types[i].kind, size);
            nknown++;
        }
    }
}

/* Fortran's predefined types, asked about only once a call passes one: then the program
 * uses Fortran and the handle is a working type. */
static int fortran_code(MPI_Datatype t, size_t *bytes)
{
    struct {
        MPI_Datatype type;
        char kind;
    } f_types[] = {
        {MPI_INTEGER, 'i'}, {MPI_REAL, 'f'}, {MPI_DOUBLE_PRECISION, 'f'},
        {MPI_COMPLEX, 'c'}, {MPI_DOUBLE_COMPLEX, 'c'},
    };
    for (size_t i = 0; i < sizeof f_types / sizeof *f_types; i++)
        if (f_types[i].type == t && t != MPI_DATATYPE_NULL && general(t, bytes))
            return engine_code(f_types[i].kind, *bytes);
    return -1;
}

int shim_reduce_dtype(MPI_Datatype t, size_t *bytes)
{
    pthread_once(&once, fill_known);
    int i = known_index(t);
    if (i >= 0) {
        *bytes = known[i].size;
        return known[i].reduce_code;
    }
    return fortran_code(t, bytes);
}

#define NEGATIVE 4
static unsigned long type_generation; /* bumped by MPI_Type_free */
static __thread SHIM_TLS struct {
    MPI_Datatype type[NEGATIVE];
    unsigned long generation;
    int n, next;
} negative;

int shim_remembered_derived(MPI_Datatype t)
{
    unsigned long gen = __atomic_load_n(&type_generation, __ATOMIC_ACQUIRE);
    if (negative.generation != gen) {
        negative.n = negative.next = 0;
        negative.generation = gen;
    }
    for (int i = 0; i < negative.n; i++)
        if (negative.type[i] == t)
            return 1;
    return 0;
}

int shim_contiguous(MPI_Datatype t, size_t *bytes)
{
    /* The Alltoall(v) wrappers asked shim_remembered_derived before; the others pass a
     * remembered type on after the short scan of the predefined ones. */
    pthread_once(&once, fill_known);
    int i = known_index(t);
    if (i >= 0) {
        *bytes = known[i].size;
        return 1;
    }
    if (shim_remembered_derived(t))
        return 0;
    if (general(t, bytes))
        return 1;
    negative.type[negative.next] = t;
    negative.next = (negative.next + 1) % NEGATIVE;
    negative.n += negative.n < NEGATIVE;
    return 0;
}

void shim_types_forget(void)
{
    __atomic_fetch_add(&type_generation, 1, __ATOMIC_ACQ_REL);
}

int MPI_Type_free(MPI_Datatype *type)
{
    shim_types_forget();
    return PMPI_Type_free(type);
}
