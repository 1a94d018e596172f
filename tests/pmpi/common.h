/* Helpers of the PMPI test programs: deterministic data and failure reporting. */
#ifndef PMPI_TEST_COMMON_H
#define PMPI_TEST_COMMON_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* A byte that depends on everything that identifies it, so that misplaced data shows. */
static inline unsigned char pattern(int from, int to, size_t i, int salt)
{
    unsigned long long h = (unsigned long long)from * 1000003u + (unsigned long long)to * 10007u +
                           (unsigned long long)i * 31u + (unsigned long long)salt * 7919u;
    h ^= h >> 13;
    h *= 0x9E3779B97F4A7C15ull;
    return (unsigned char)(h >> 56);
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* Sum of failures over all ranks (through MPI_Allreduce, which the library leaves to MPI). */
static inline int total_failures(int local)
{
    int all = 0;
    MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return all;
}
#endif
