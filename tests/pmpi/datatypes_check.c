/* Derived datatypes whose size, extent and bounds look contiguous: the library may move
 * them as bytes only if their elements lie back to back in type-map order. Each type
 * (ints only, so that a peer may name the same data as plain MPI_INTs: the type
 * signatures match) is sent by MPI_Alltoall, MPI_Alltoallv and MPI_Allgather to peers
 * receiving MPI_INTs, received by MPI_Alltoall from peers sending MPI_INTs, and
 * broadcast with the same type on every rank (not the overlapping one, which no receive
 * may use). Results are checked against MPI_Pack/MPI_Unpack of the same data on this rank
 * (the type-map order, by MPI's own definition, and no collective). Half the types are
 * one run and should be served (struct, vector, indexed, hindexed, dup, resized,
 * contiguous of a predefined pair, nested), half are not and must go to MPI: ints in
 * another order (a struct of ints at {4, 0}, the reported case; reversed indexed blocks;
 * contiguous copies of the struct) or overlapping with a gap ({0, 0, 8}). Rank 0 prints
 * how many calls of each operation used a run type ("expect OP served=S derived=D", for
 * the pytest to compare with the library's stats) and "datatypes_check: N cases, F
 * failures"; exits 1 on a failure. */
#include <string.h>

#include "common.h"

#define PER_PEER 3 /* elements of the type per peer */

static int cases, failures;

struct type_case {
    const char *name;
    MPI_Datatype type;
    int run;     /* its elements are one increasing, gap-free run: served */
    int overlap; /* it names some int twice: never a receive type */
};

enum { ALLTOALL, ALLTOALL_RECV, ALLTOALLV, ALLGATHER, BCAST, NOPS };
static const char *op_names[NOPS] = {"MPI_Alltoall", "MPI_Alltoall", "MPI_Alltoallv", "MPI_Allgather",
                                     "MPI_Bcast"};
static int served[NOPS], derived[NOPS];

static void count_call(int op, const struct type_case *c)
{
    if (c->run)
        served[op]++;
    else
        derived[op]++;
}

/* The ints of rank `from`'s send buffer: distinct for every rank and position. */
static void fill(int *buf, size_t n, int from)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = from * 1000000 + (int)i;
}

static MPI_Aint extent_of(MPI_Datatype t)
{
    MPI_Aint lb, extent;
    MPI_Type_get_extent(t, &lb, &extent);
    return extent;
}

static int ints_of(MPI_Datatype t)
{
    int size;
    MPI_Type_size(t, &size);
    return size / (int)sizeof(int);
}

/* The ints `count` elements of `t` at `buf` send, in order: MPI_Pack's bytes. */
static void packed(const void *buf, int count, MPI_Datatype t, int *out, int nints)
{
    int pos = 0;
    MPI_Pack(buf, count, t, out, nints * (int)sizeof(int), &pos, MPI_COMM_SELF);
}

static void compare(const char *op, const struct type_case *c, const int *got, const int *want, size_t n, int rank)
{
    cases++;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "MISMATCH %s %s: rank %d int %zu is %d, expected %d\n", op, c->name, rank, i, got[i],
                    want[i]);
            failures++;
            return;
        }
}

/* `c` on the send side, MPI_INTs on the receive side (Alltoall, Alltoallv, Allgather). */
static void send_side(const struct type_case *c, int rank, int p)
{
    int k = ints_of(c->type) * PER_PEER; /* ints per peer */
    size_t span = (size_t)extent_of(c->type) * PER_PEER / sizeof(int); /* ints per peer's block */
    int *send = xmalloc(sizeof(int) * span * p), *peer = xmalloc(sizeof(int) * span * p);
    int *got = xmalloc(sizeof(int) * (size_t)k * p), *want = xmalloc(sizeof(int) * (size_t)k * p);
    fill(send, span * p, rank);
    for (int j = 0; j < p; j++) { /* what rank j sends here */
        fill(peer, span * p, j);
        packed(peer + (size_t)rank * span, PER_PEER, c->type, want + (size_t)j * k, k);
    }
    MPI_Alltoall(send, PER_PEER, c->type, got, k, MPI_INT, MPI_COMM_WORLD);
    compare("alltoall", c, got, want, (size_t)k * p, rank);
    count_call(ALLTOALL, c);

    int *sc = xmalloc(sizeof(int) * p), *sd = xmalloc(sizeof(int) * p);
    int *rc = xmalloc(sizeof(int) * p), *rd = xmalloc(sizeof(int) * p);
    for (int j = 0; j < p; j++) /* in reverse order of the peers, to be an Alltoallv */
        sc[j] = PER_PEER, sd[j] = j * PER_PEER, rc[j] = k, rd[j] = (p - 1 - j) * k;
    MPI_Alltoallv(send, sc, sd, c->type, got, rc, rd, MPI_INT, MPI_COMM_WORLD);
    for (int j = 0; j < p; j++)
        compare("alltoallv", c, got + (size_t)(p - 1 - j) * k, want + (size_t)j * k, (size_t)k, rank);
    count_call(ALLTOALLV, c);
    free(sc), free(sd), free(rc), free(rd);

    for (int j = 0; j < p; j++) { /* rank j's first block */
        fill(peer, span * p, j);
        packed(peer, PER_PEER, c->type, want + (size_t)j * k, k);
    }
    MPI_Allgather(send, PER_PEER, c->type, got, k, MPI_INT, MPI_COMM_WORLD);
    compare("allgather", c, got, want, (size_t)k * p, rank);
    count_call(ALLGATHER, c);
    free(send), free(peer), free(got), free(want);
}

/* MPI_INTs on the send side, `c` on the receive side (Alltoall), and `c` on every rank
 * of a Bcast from the last rank. */
static void receive_side(const struct type_case *c, int rank, int p)
{
    int k = ints_of(c->type) * PER_PEER;
    size_t span = (size_t)extent_of(c->type) * PER_PEER / sizeof(int);
    int *send = xmalloc(sizeof(int) * (size_t)k * p), *peer = xmalloc(sizeof(int) * (size_t)k * p);
    int *got = xmalloc(sizeof(int) * span * p), *want = xmalloc(sizeof(int) * span * p);
    fill(send, (size_t)k * p, rank);
    for (size_t i = 0; i < span * p; i++)
        got[i] = want[i] = -1;
    for (int j = 0; j < p; j++) {
        int pos = 0;
        fill(peer, (size_t)k * p, j);
        MPI_Unpack(peer + (size_t)rank * k, k * (int)sizeof(int), &pos, want + (size_t)j * span, PER_PEER, c->type,
                   MPI_COMM_SELF);
    }
    MPI_Alltoall(send, k, MPI_INT, got, PER_PEER, c->type, MPI_COMM_WORLD);
    compare("alltoall (received)", c, got, want, span * p, rank);
    count_call(ALLTOALL_RECV, c);

    int root = p - 1;
    int *packed_root = xmalloc(sizeof(int) * (size_t)k);
    fill(want, span, root);
    packed(want, PER_PEER, c->type, packed_root, k);
    fill(got, span, rank); /* the root's data is its own; the others' is overwritten */
    for (size_t i = 0; i < span; i++)
        want[i] = got[i];
    int pos = 0;
    MPI_Unpack(packed_root, k * (int)sizeof(int), &pos, want, PER_PEER, c->type, MPI_COMM_SELF);
    MPI_Bcast(got, PER_PEER, c->type, root, MPI_COMM_WORLD);
    compare("bcast", c, got, want, span, rank);
    count_call(BCAST, c);
    free(send), free(peer), free(got), free(want), free(packed_root);
}

static MPI_Datatype commit(MPI_Datatype t)
{
    MPI_Type_commit(&t);
    return t;
}

static MPI_Datatype ints_struct(int n, const int *blocks, const MPI_Aint *displs)
{
    MPI_Datatype t, types[4] = {MPI_INT, MPI_INT, MPI_INT, MPI_INT};
    MPI_Type_create_struct(n, blocks, displs, types, &t);
    return commit(t);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);

    MPI_Datatype t, contig4, swapped, in_order;
    MPI_Type_contiguous(4, MPI_INT, &contig4);
    contig4 = commit(contig4);
    swapped = ints_struct(2, (int[]){1, 1}, (MPI_Aint[]){4, 0});
    in_order = ints_struct(2, (int[]){2, 1}, (MPI_Aint[]){0, 8});
    struct type_case cases_[16];
    int n = 0;
    cases_[n++] = (struct type_case){"contiguous", contig4, 1, 0};
    cases_[n++] = (struct type_case){"struct {2 at 0, 1 at 8}", in_order, 1, 0};
    MPI_Type_vector(3, 2, 2, MPI_INT, &t);
    cases_[n++] = (struct type_case){"vector stride = blocklength", commit(t), 1, 0};
    MPI_Type_create_hindexed(2, (int[]){1, 2}, (MPI_Aint[]){0, 4}, MPI_INT, &t);
    cases_[n++] = (struct type_case){"hindexed in order", commit(t), 1, 0};
    MPI_Type_create_indexed_block(3, 1, (int[]){0, 1, 2}, MPI_INT, &t);
    cases_[n++] = (struct type_case){"indexed_block in order", commit(t), 1, 0};
    MPI_Type_dup(contig4, &t);
    cases_[n++] = (struct type_case){"dup", commit(t), 1, 0};
    MPI_Type_create_resized(contig4, 0, 16, &t);
    cases_[n++] = (struct type_case){"resized to its size", commit(t), 1, 0};
    MPI_Type_contiguous(3, MPI_2INT, &t);
    cases_[n++] = (struct type_case){"contiguous MPI_2INT", commit(t), 1, 0};
    MPI_Type_contiguous(2, in_order, &t);
    cases_[n++] = (struct type_case){"contiguous of a struct in order", commit(t), 1, 0};
    cases_[n++] = (struct type_case){"struct {4, 0}", swapped, 0, 0};
    MPI_Type_indexed(2, (int[]){2, 2}, (int[]){2, 0}, MPI_INT, &t);
    cases_[n++] = (struct type_case){"indexed reversed", commit(t), 0, 0};
    MPI_Type_contiguous(2, swapped, &t);
    cases_[n++] = (struct type_case){"contiguous of struct {4, 0}", commit(t), 0, 0};
    MPI_Type_create_hindexed(3, (int[]){1, 1, 1}, (MPI_Aint[]){0, 0, 8}, MPI_INT, &t);
    cases_[n++] = (struct type_case){"hindexed {0, 0, 8}", commit(t), 0, 1};
    MPI_Type_create_resized(swapped, 0, 8, &t);
    cases_[n++] = (struct type_case){"resized struct {4, 0}", commit(t), 0, 0};

    for (int i = 0; i < n; i++) {
        send_side(&cases_[i], rank, p);
        if (!cases_[i].overlap)
            receive_side(&cases_[i], rank, p);
    }
    for (int i = 0; i < n; i++)
        MPI_Type_free(&cases_[i].type);
    int bad = total_failures(failures);
    if (rank == 0) {
        /* Alltoall counts both directions. */
        printf("expect %s served=%d derived=%d\n", op_names[ALLTOALL], served[ALLTOALL] + served[ALLTOALL_RECV],
               derived[ALLTOALL] + derived[ALLTOALL_RECV]);
        for (int op = ALLTOALLV; op < NOPS; op++)
            printf("expect %s served=%d derived=%d\n", op_names[op], served[op], derived[op]);
        printf("datatypes_check: %d cases, %d failures\n", cases, bad);
    }
    MPI_Finalize();
    return bad ? 1 : 0;
}
