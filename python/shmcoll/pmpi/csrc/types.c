/* Which datatypes the engine can move as plain bytes: those whose elements, in the order
 * MPI sends them (the type map), lie back to back from the buffer's start, so that count
 * of them are the bytes [0, count * size) in order, whatever type the peer names for
 * them. Size, extent and true extent cannot tell: a struct of two ints at displacements
 * {4, 0} has lb 0 and size = extent = true extent = 8 but sends the second int first, and
 * a peer receiving two MPI_INTs must see them swapped; blocks that overlap and leave a gap
 * of the same size pass those tests too. So, past those tests, a derived type counts only
 * once its constructor (MPI_Type_get_envelope/get_contents) proves one increasing,
 * gap-free run of its parts, recursively: DUP, RESIZED, CONTIGUOUS, (H)VECTOR,
 * (H)INDEXED(_BLOCK) and STRUCT whose blocks each start where the previous ended and
 * repeat an element whose extent is its size. Everything else (subarrays, darrays, large
 * counts, deep nesting) goes to PMPI, which is always right.
 *
 * The predefined C types are recognised by handle from a table filled once (they are
 * never freed, so a handle always means the same type). A derived type costs PMPI queries
 * (35 ns each in MPICH 5, a few per constructor), except the last few each thread saw,
 * whose verdicts (served or not) are remembered: a program passing a derived type keeps
 * passing it, and the library should cost such calls next to nothing. A handle means one
 * type until it is freed, so a verdict is a function of the type, the same on every rank
 * that passes it; MPI_Type_free (wrapped below, and its Fortran forms) forgets every
 * verdict once the handle is released, before MPI may reuse it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

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

/* Size and extent: lb 0, extent == size, true lb 0, true extent == size. Enough for a
 * predefined type (one element, or a pair whose parts these bounds pin down); for a
 * derived type only the first, cheap test (it rejects strided types: extent > size). */
static int general(MPI_Datatype t, size_t *bytes)
{
    int size = 0;
    MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
    if (PMPI_Type_size(t, &size) != MPI_SUCCESS || PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS)
        return 0;
    if (size < 0 || lb != 0 || extent != size)
        return 0;
    if (PMPI_Type_get_true_extent(t, &tlb, &textent) != MPI_SUCCESS || tlb != 0 || textent != size)
        return 0;
    *bytes = (size_t)size;
    return 1;
}

/* -- Proving a derived type is one run ------------------------------------------------ */

/* Nesting deeper than this is not looked into (passed to PMPI). */
#define MAX_DEPTH 16

/* What is known of a part of a constructor: whether its type map is one increasing,
 * gap-free run from displacement 0 (`run`), its size and its extent (the step between
 * repeated copies of it). */
struct part {
    int run;
    MPI_Aint size, extent;
};

/* The blocks of a constructor, walked in type-map order: each must begin where the one
 * before it ended (`pos`) and repeat its part back to back. */
struct walk {
    MPI_Aint pos;
    int ok;
};

/* `n` copies of `p` at byte displacement `disp`, `p.extent` apart. */
static void block(struct walk *w, const struct part *p, MPI_Aint disp, MPI_Aint n)
{
    if (!w->ok || n == 0 || p->size == 0)
        return; /* nothing in the type map */
    if (n < 0 || !p->run || disp != w->pos || (n > 1 && p->extent != p->size) ||
        n > (PTRDIFF_MAX - w->pos) / p->size) {
        w->ok = 0;
        return;
    }
    w->pos += n * p->size;
}

static int is_run(MPI_Datatype t, int depth);

static void describe(MPI_Datatype t, int depth, struct part *p)
{
    int size = 0;
    MPI_Aint lb = 0;
    p->run = 0;
    if (PMPI_Type_size(t, &size) != MPI_SUCCESS || PMPI_Type_get_extent(t, &lb, &p->extent) != MPI_SUCCESS)
        return;
    p->size = size;
    p->run = size == 0 || is_run(t, depth);
}

/* The combiner of `t` and how many integers, addresses and datatypes describe it; -1 for
 * what is not looked into (an error, large counts). */
static int envelope(MPI_Datatype t, int *ni, int *na, int *nd)
{
    int combiner = -1;
#if MPI_VERSION >= 4
    /* The int form fails for types made with large counts (MPI_Type_contiguous_c). */
    MPI_Count ci = 0, ca = 0, cc = 0, cd = 0;
    if (PMPI_Type_get_envelope_c(t, &ci, &ca, &cc, &cd, &combiner) != MPI_SUCCESS || cc != 0 || ci > INT32_MAX ||
        ca > INT32_MAX || cd > INT32_MAX)
        return -1;
    *ni = (int)ci, *na = (int)ca, *nd = (int)cd;
#else
    if (PMPI_Type_get_envelope(t, ni, na, nd, &combiner) != MPI_SUCCESS)
        return -1;
#endif
    return combiner;
}

/* Whether the blocks of constructor `combiner` (its integers, addresses and datatypes as
 * MPI_Type_get_contents gives them) form one run. */
static int blocks_run(int combiner, const int *ints, const MPI_Aint *aints, const MPI_Datatype *types,
                      int depth)
{
    struct walk w = {0, 1};
    struct part p;
    switch (combiner) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED: /* the same type map; the bounds were tested at the top */
        return is_run(types[0], depth + 1);
    case MPI_COMBINER_STRUCT:
        for (int i = 0; i < ints[0] && w.ok; i++) {
            describe(types[i], depth + 1, &p);
            block(&w, &p, aints[i], ints[1 + i]);
        }
        return w.ok;
    default:
        break;
    }
    describe(types[0], depth + 1, &p);
    switch (combiner) {
    case MPI_COMBINER_CONTIGUOUS:
        block(&w, &p, 0, ints[0]);
        break;
    case MPI_COMBINER_VECTOR: /* count, blocklength, stride in extents */
    case MPI_COMBINER_HVECTOR: { /* count, blocklength; stride in bytes */
        MPI_Aint stride = combiner == MPI_COMBINER_VECTOR ? (MPI_Aint)ints[2] * p.extent : aints[0];
        /* Two blocks: the rest follow at the same step. */
        for (int i = 0; i < ints[0] && i < 2; i++)
            block(&w, &p, i * stride, ints[1]);
        break;
    }
    case MPI_COMBINER_INDEXED: /* count, blocklengths, displacements in extents */
        for (int i = 0; i < ints[0] && w.ok; i++)
            block(&w, &p, (MPI_Aint)ints[1 + ints[0] + i] * p.extent, ints[1 + i]);
        break;
    case MPI_COMBINER_HINDEXED: /* count, blocklengths; displacements in bytes */
        for (int i = 0; i < ints[0] && w.ok; i++)
            block(&w, &p, aints[i], ints[1 + i]);
        break;
    case MPI_COMBINER_INDEXED_BLOCK: /* count, blocklength, displacements in extents */
        for (int i = 0; i < ints[0] && w.ok; i++)
            block(&w, &p, (MPI_Aint)ints[2 + i] * p.extent, ints[1]);
        break;
    case MPI_COMBINER_HINDEXED_BLOCK: /* count, blocklength; displacements in bytes */
        for (int i = 0; i < ints[0] && w.ok; i++)
            block(&w, &p, aints[i], ints[1]);
        break;
    default:
        return 0;
    }
    return w.ok;
}

/* Whether the type map of `t` is one increasing, gap-free run from displacement 0. */
static int is_run(MPI_Datatype t, int depth)
{
    int ni = 0, na = 0, nd = 0, combiner = envelope(t, &ni, &na, &nd);
    if (combiner == MPI_COMBINER_NAMED) {
        /* One element, or a predefined pair (MPI_2INT, MPI_SHORT_INT, ...): value then
         * index, a run unless padding lies between them. */
        MPI_Aint tlb = 0, textent = 0;
        int size = 0;
        return PMPI_Type_size(t, &size) == MPI_SUCCESS && PMPI_Type_get_true_extent(t, &tlb, &textent) == MPI_SUCCESS &&
               tlb == 0 && textent == size;
    }
    switch (combiner) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED:
    case MPI_COMBINER_CONTIGUOUS:
    case MPI_COMBINER_VECTOR:
    case MPI_COMBINER_HVECTOR:
    case MPI_COMBINER_INDEXED:
    case MPI_COMBINER_HINDEXED:
    case MPI_COMBINER_INDEXED_BLOCK:
    case MPI_COMBINER_HINDEXED_BLOCK:
    case MPI_COMBINER_STRUCT:
        break;
    default: /* subarrays, darrays, Fortran's parameterised types, errors */
        return 0;
    }
    if (depth >= MAX_DEPTH || nd < 1)
        return 0;
    int *ints = malloc(sizeof *ints * (size_t)(ni ? ni : 1));
    MPI_Aint *aints = malloc(sizeof *aints * (size_t)(na ? na : 1));
    MPI_Datatype *types = malloc(sizeof *types * (size_t)nd);
    if (!ints || !aints || !types)
        /* A verdict that differed between ranks would send them to different paths. */
        shim_fatal(MPI_COMM_WORLD, "datatype check", "out of memory");
    int ok = PMPI_Type_get_contents(t, ni, na, nd, ints, aints, types) == MPI_SUCCESS;
    if (ok) {
        ok = blocks_run(combiner, ints, aints, types, depth);
        /* The derived types get_contents returned are new references, which the caller
         * must free (MPI-4.1 section 5.1.13); predefined ones must not be. */
        for (int i = 0; i < nd; i++) {
            int xi, xa, xd;
            if (envelope(types[i], &xi, &xa, &xd) != MPI_COMBINER_NAMED)
                PMPI_Type_free(&types[i]);
        }
    }
    free(ints), free(aints), free(types);
    return ok;
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

/* The verdicts each thread remembers: the last few types it asked about, contiguous
 * (with their size) or not. */
#define REMEMBERED 8
static unsigned long type_generation; /* bumped by MPI_Type_free */
static __thread SHIM_TLS struct {
    MPI_Datatype type[REMEMBERED];
    size_t bytes[REMEMBERED];
    signed char contiguous[REMEMBERED];
    unsigned long generation;
    int n, next;
} remembered;

/* The index of t's verdict, or -1. */
static int remembered_index(MPI_Datatype t)
{
    unsigned long gen = __atomic_load_n(&type_generation, __ATOMIC_ACQUIRE);
    if (remembered.generation != gen) {
        remembered.n = remembered.next = 0;
        remembered.generation = gen;
    }
    for (int i = 0; i < remembered.n; i++)
        if (remembered.type[i] == t)
            return i;
    return -1;
}

int shim_remembered_derived(MPI_Datatype t)
{
    int i = remembered_index(t);
    return i >= 0 && !remembered.contiguous[i];
}

int shim_contiguous(MPI_Datatype t, size_t *bytes)
{
    /* The Alltoall(v) wrappers may have asked shim_remembered_derived before; the others
     * find a remembered type after the short scan of the predefined ones. */
    pthread_once(&once, fill_known);
    int i = known_index(t);
    if (i >= 0) {
        *bytes = known[i].size;
        return 1;
    }
    i = remembered_index(t);
    if (i >= 0) {
        *bytes = remembered.bytes[i];
        return remembered.contiguous[i];
    }
    unsigned long gen = remembered.generation;
    size_t size = 0;
    int contiguous = general(t, &size) && is_run(t, 0);
    if (__atomic_load_n(&type_generation, __ATOMIC_ACQUIRE) != gen)
        return contiguous; /* a type was freed meanwhile (another thread): keep nothing */
    i = remembered.next;
    remembered.type[i] = t;
    remembered.bytes[i] = size;
    remembered.contiguous[i] = (signed char)contiguous;
    remembered.next = (i + 1) % REMEMBERED;
    remembered.n += remembered.n < REMEMBERED;
    *bytes = size;
    return contiguous;
}

void shim_types_forget(void)
{
    __atomic_fetch_add(&type_generation, 1, __ATOMIC_ACQ_REL);
}

/* Forget after the free, not before: a verdict another thread reached on the handle
 * meanwhile is then dropped too, before MPI can give the handle to a new type. */
int MPI_Type_free(MPI_Datatype *type)
{
    int rc = PMPI_Type_free(type);
    shim_types_forget();
    return rc;
}
