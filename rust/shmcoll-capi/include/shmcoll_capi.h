/* C ABI of shmcoll's engine (rust/shmcoll-capi, linked statically into the PMPI library).
 * Every call that can fail returns one of the SHMCOLL_* codes and, unless `err` is NULL,
 * writes a NUL-terminated message into err[0..cap). */
#ifndef SHMCOLL_CAPI_H
#define SHMCOLL_CAPI_H
#include <stddef.h>
#include <stdint.h>

#define SHMCOLL_OK 0
/* The call failed on every rank before any byte moved: a rank rejected its arguments or
 * the ranks' calls disagree. The caller reports an error of the class
 * shmcoll_comm_last_error_class gives, on every rank; the call must not go to PMPI (its
 * arguments are known to be wrong). Also every failure of the setup functions (create,
 * open, join), after which the communicator's calls go to PMPI. */
#define SHMCOLL_REJECTED 1
/* The communicator is unusable (peer died, timeout). */
#define SHMCOLL_FATAL 2
/* A null pointer or similar breach of this header's contract. */
#define SHMCOLL_BAD_ARGUMENT 3
/* Every rank accepted the call but no algorithm serves it (a forced one cannot), decided
 * alike on every rank: the same call may go to PMPI on every rank. */
#define SHMCOLL_DECLINED 4

/* The class of a failure (shmcoll_comm_last_error_class; shmcoll_reject's `cls`). A
 * rank's rejection reaches its peers with its class: every rank reports the same one. */
#define SHMCOLL_CLASS_NONE 0
#define SHMCOLL_CLASS_OTHER 1
#define SHMCOLL_CLASS_ARG 2
#define SHMCOLL_CLASS_COUNT 3
#define SHMCOLL_CLASS_BUFFER 4
#define SHMCOLL_CLASS_ROOT 5
#define SHMCOLL_CLASS_OP 6
#define SHMCOLL_CLASS_TYPE 7
/* The engine found the ranks' calls disagree (sizes, counts, collective, root, operator):
 * the same verdict on every rank (a peer's rejection is never reported as this class). */
#define SHMCOLL_CLASS_MISMATCH 8

typedef struct ShmcollSegment ShmcollSegment;
typedef struct ShmcollComm ShmcollComm;
typedef struct ShmcollOffer ShmcollOffer;

/* The creation exchange: each rank makes an offer (its settings and the segments of freed
 * communicators it keeps), sends its record (shmcoll_offer_record_bytes() bytes) to every
 * rank, and settles from all records in rank order, which consumes the offer. *out is
 * then the communicator on a segment every rank offered, its tuning tables bound, or
 * NULL: make a segment (create, open, join). *one_node is 1 when every rank's record
 * names this node. A failure (a rank's settings are not valid) is the same on every rank. */
size_t shmcoll_offer_record_bytes(void);
int shmcoll_offer_create(size_t nranks, ShmcollOffer **out, uint8_t *record, size_t record_cap, char *err,
                         size_t cap);
int shmcoll_offer_settle(ShmcollOffer *offer, const uint8_t *records, size_t len, size_t rank, int *one_node,
                         ShmcollComm **out, char *err, size_t cap);
void shmcoll_offer_free(ShmcollOffer *offer);

int shmcoll_segment_create(size_t nranks, ShmcollSegment **out, char *err, size_t cap);
int shmcoll_segment_open(const char *name, ShmcollSegment **out, char *err, size_t cap);
int shmcoll_segment_name(const ShmcollSegment *seg, char *buf, size_t cap);
void shmcoll_segment_free(ShmcollSegment *seg);
/* Collective over the segment's ranks; consumes `seg` whatever the outcome. */
int shmcoll_comm_join(ShmcollSegment *seg, size_t rank, ShmcollComm **out, char *err, size_t cap);
void shmcoll_comm_free(ShmcollComm *comm);
size_t shmcoll_comm_size(const ShmcollComm *comm);
const char *shmcoll_comm_last_algorithm(const ShmcollComm *comm);
/* Map the peers' arenas (one entry per rank, fds[j] < 0: none); enable once all ranks
 * succeeded. Buffers in this rank's arena are then reached by peers directly. */
int shmcoll_comm_attach_arenas(ShmcollComm *comm, const void *own_base, size_t own_len, const uint32_t *pids,
                               const int *fds, const size_t *lens, size_t n, char *err, size_t cap);
void shmcoll_comm_enable_arenas(ShmcollComm *comm);
/* Equal on ranks that bound the same selection tables (model or tuning file). */
uint64_t shmcoll_comm_tables_digest(const ShmcollComm *comm);
/* send == NULL: in place. Sizes and displacements in bytes. */
int shmcoll_alltoall(ShmcollComm *comm, const void *send, void *recv, size_t bytes_per_rank,
                     char *err, size_t cap);
int shmcoll_alltoallv(ShmcollComm *comm, const void *send, const size_t *send_counts,
                      const size_t *send_displs, void *recv, const size_t *recv_counts,
                      const size_t *recv_displs, char *err, size_t cap);
/* The engine's element types and operators (`dtype`/`redop` below; reductions only, else
 * -1). They are the engine's own codes (shmcoll_kernels::Dtype::code, Op::code): a test of
 * the engine (rust/shmcoll-capi/src/header.rs) checks every constant of this header. */
#define SHMCOLL_DTYPE_INT8 0
#define SHMCOLL_DTYPE_INT16 1
#define SHMCOLL_DTYPE_INT32 2
#define SHMCOLL_DTYPE_INT64 3
#define SHMCOLL_DTYPE_UINT8 4
#define SHMCOLL_DTYPE_UINT16 5
#define SHMCOLL_DTYPE_UINT32 6
#define SHMCOLL_DTYPE_UINT64 7
#define SHMCOLL_DTYPE_FLOAT32 8
#define SHMCOLL_DTYPE_FLOAT64 9
#define SHMCOLL_DTYPE_COMPLEX64 10
#define SHMCOLL_DTYPE_COMPLEX128 11
#define SHMCOLL_OP_SUM 0
#define SHMCOLL_OP_PROD 1
#define SHMCOLL_OP_MIN 2
#define SHMCOLL_OP_MAX 3
#define SHMCOLL_OP_BAND 4
#define SHMCOLL_OP_BOR 5
#define SHMCOLL_OP_BXOR 6
#define SHMCOLL_OP_LAND 7
#define SHMCOLL_OP_LOR 8
/* Collective codes: the engine's own numbering of its operations (the codes in its call
 * descriptors), one for every border, so nothing renumbers between the shim and the
 * engine. SHMCOLL_COLLECTIVES is one more than the largest code (a table indexed by code).
 * shmcoll_collective's `op` is one of Bcast, Allgather, Reduce_scatter_block, Allreduce.
 * Sizes in bytes: the broadcast buffer, each rank's Allgather block, each rank's
 * Reduce_scatter_block result, the Allreduce vector. `dtype`/`redop`: SHMCOLL_DTYPE_* /
 * SHMCOLL_OP_*, or -1. */
#define SHMCOLL_BARRIER 1
#define SHMCOLL_ALLTOALL 2
#define SHMCOLL_ALLTOALLV 3
#define SHMCOLL_BCAST 4
#define SHMCOLL_ALLGATHER 5
#define SHMCOLL_REDUCE_SCATTER_BLOCK 11
#define SHMCOLL_ALLREDUCE 13
#define SHMCOLL_COLLECTIVES 15
int shmcoll_collective(ShmcollComm *comm, int op, const void *send, void *recv, size_t bytes,
                       size_t root, int dtype, int redop, char *err, size_t cap);
int shmcoll_barrier(ShmcollComm *comm, char *err, size_t cap);
/* Reject this rank's part of a call with class `cls` and message `why`, through the
 * engine: every peer fails the same call (SHMCOLL_REJECTED with that class) without
 * waiting for a deadline, and nothing moves. `op`: SHMCOLL_ALLTOALL, SHMCOLL_ALLTOALLV
 * or one of shmcoll_collective's. */
int shmcoll_reject(ShmcollComm *comm, int op, int cls, const char *why, char *err, size_t cap);
/* SHMCOLL_CLASS_* of the last call's failure on `comm` (NONE after a success). */
int shmcoll_comm_last_error_class(const ShmcollComm *comm);
/* 1 if the engine reduces `dtype` with `redop` (the codes above), else 0. */
int shmcoll_reduction_supported(int dtype, int redop);
#endif
