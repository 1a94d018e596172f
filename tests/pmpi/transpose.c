/* A pencil-decomposed 3-D DFT, as spectral codes (P3DFFT) do it: an N0 x N1 x N2 complex
 * array on a P0 x P1 process grid (MPI_Cart_create), 1-D DFTs along the axis each rank
 * holds whole, and two transposes, each an MPI_Alltoall on an MPI_Cart_sub communicator
 * (MPI_Alltoallv when the sizes do not divide evenly). Every rank also computes the whole
 * transform alone, with the same 1-D routine in the same order, so its pencil must match
 * bit for bit. Prints the number of mismatches and a checksum (for runs with and without
 * the library to compare).   usage: transpose N0 N1 N2 */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "common.h"

typedef double complex cplx;

static int lo(int n, int p, int i) { return i * (n / p) + (i < n % p ? i : n % p); }
static int len(int n, int p, int i) { return n / p + (i < n % p); }

static cplx input(int x, int y, int z)
{
    return sin(1.3 * x + 0.7 * y) + I * cos(0.9 * z + 0.1 * x * y);
}

/* Naive DFT of n points (every rank and the serial reference use this one routine). */
static void dft(cplx *v, int n, cplx *tmp)
{
    for (int k = 0; k < n; k++) {
        cplx s = 0;
        for (int j = 0; j < n; j++)
            s += v[j] * cexp(-2.0 * M_PI * I * (double)((long)j * k % n) / n);
        tmp[k] = s;
    }
    memcpy(v, tmp, sizeof(cplx) * n);
}

/* Exchange on `comm` (q ranks): block for rank d is scount(d) elements of `send` in order;
 * one MPI_Alltoall when every block has the same size, else MPI_Alltoallv. */
static void exchange(const cplx *send, const int *sc, cplx *recv, const int *rc, int q, MPI_Comm comm)
{
    int *sd = xmalloc(sizeof(int) * q), *rd = xmalloc(sizeof(int) * q);
    int equal = 1;
    for (int d = 0, s = 0, r = 0; d < q; d++) {
        sd[d] = s, rd[d] = r;
        s += sc[d], r += rc[d];
        equal &= sc[d] == sc[0] && rc[d] == sc[0];
    }
    if (equal)
        MPI_Alltoall(send, sc[0], MPI_C_DOUBLE_COMPLEX, recv, rc[0], MPI_C_DOUBLE_COMPLEX, comm);
    else
        MPI_Alltoallv(send, sc, sd, MPI_C_DOUBLE_COMPLEX, recv, rc, rd, MPI_C_DOUBLE_COMPLEX, comm);
    free(sd), free(rd);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n0 = argc > 3 ? atoi(argv[1]) : 8, n1 = argc > 3 ? atoi(argv[2]) : 8, n2 = argc > 3 ? atoi(argv[3]) : 8;
    int size, rank, dims[2] = {0, 0}, periods[2] = {0, 0}, c[2];
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart, col, row; /* col: ranks that differ in c0; row: ranks that differ in c1 */
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 2, c);
    int keep0[2] = {1, 0}, keep1[2] = {0, 1};
    MPI_Cart_sub(cart, keep0, &col);
    MPI_Cart_sub(cart, keep1, &row);
    int p0 = dims[0], p1 = dims[1];
    int nmax = n0 > n1 ? (n0 > n2 ? n0 : n2) : (n1 > n2 ? n1 : n2);
    cplx *tmp = xmalloc(sizeof(cplx) * nmax), *line = xmalloc(sizeof(cplx) * nmax);

    /* Stage x: a[y][z][x], y in Y(c0) (N1 over P0), z in Z(c1) (N2 over P1), x whole. */
    int ny = len(n1, p0, c[0]), y0 = lo(n1, p0, c[0]);
    int nz = len(n2, p1, c[1]), z0 = lo(n2, p1, c[1]);
    size_t cap = (size_t)(n0 > n1 ? n0 : n1) * (n1 > n2 ? n1 : n2) * nmax + 1;
    cplx *a = xmalloc(sizeof(cplx) * cap), *buf = xmalloc(sizeof(cplx) * cap), *b = xmalloc(sizeof(cplx) * cap);
    for (int y = 0; y < ny; y++)
        for (int z = 0; z < nz; z++)
            for (int x = 0; x < n0; x++)
                a[((size_t)y * nz + z) * n0 + x] = input(x, y0 + y, z0 + z);
    for (int yz = 0; yz < ny * nz; yz++)
        dft(a + (size_t)yz * n0, n0, tmp);

    /* Transpose x -> y on `col`: to rank d go the x in X(d) (N0 over P0). */
    int *sc = xmalloc(sizeof(int) * (p0 > p1 ? p0 : p1)), *rc = xmalloc(sizeof(int) * (p0 > p1 ? p0 : p1));
    size_t k = 0;
    for (int d = 0; d < p0; d++) {
        for (int y = 0; y < ny; y++)
            for (int z = 0; z < nz; z++)
                for (int x = lo(n0, p0, d); x < lo(n0, p0, d) + len(n0, p0, d); x++)
                    buf[k++] = a[((size_t)y * nz + z) * n0 + x];
        sc[d] = ny * nz * len(n0, p0, d);
        rc[d] = len(n1, p0, d) * nz * len(n0, p0, c[0]);
    }
    exchange(buf, sc, a, rc, p0, col);
    /* Unpack into b[x][z][y], x in X(c0), y whole: block from s is (y in Y(s), z, x). */
    int nx = len(n0, p0, c[0]);
    k = 0;
    for (int s = 0; s < p0; s++)
        for (int y = lo(n1, p0, s); y < lo(n1, p0, s) + len(n1, p0, s); y++)
            for (int z = 0; z < nz; z++)
                for (int x = 0; x < nx; x++)
                    b[((size_t)x * nz + z) * n1 + y] = a[k++];
    for (int xz = 0; xz < nx * nz; xz++)
        dft(b + (size_t)xz * n1, n1, tmp);

    /* Transpose y -> z on `row`: to rank d go the y in Y'(d) (N1 over P1). */
    k = 0;
    for (int d = 0; d < p1; d++) {
        for (int x = 0; x < nx; x++)
            for (int z = 0; z < nz; z++)
                for (int y = lo(n1, p1, d); y < lo(n1, p1, d) + len(n1, p1, d); y++)
                    buf[k++] = b[((size_t)x * nz + z) * n1 + y];
        sc[d] = nx * nz * len(n1, p1, d);
        rc[d] = nx * len(n2, p1, d) * len(n1, p1, c[1]);
    }
    exchange(buf, sc, a, rc, p1, row);
    /* Unpack into f[x][y][z], y in Y'(c1), z whole: block from s is (x, z in Z(s), y). */
    int nyy = len(n1, p1, c[1]), yy0 = lo(n1, p1, c[1]);
    cplx *f = b;
    k = 0;
    for (int s = 0; s < p1; s++)
        for (int x = 0; x < nx; x++)
            for (int z = lo(n2, p1, s); z < lo(n2, p1, s) + len(n2, p1, s); z++)
                for (int y = 0; y < nyy; y++)
                    f[((size_t)x * nyy + y) * n2 + z] = a[k++];
    for (int xy = 0; xy < nx * nyy; xy++)
        dft(f + (size_t)xy * n2, n2, tmp);

    /* The reference: the whole array on this rank, the same DFTs in the same order. */
    cplx *full = xmalloc(sizeof(cplx) * n0 * n1 * n2);
#define AT(x, y, z) full[((size_t)(x) * n1 + (y)) * n2 + (z)]
    for (int x = 0; x < n0; x++)
        for (int y = 0; y < n1; y++)
            for (int z = 0; z < n2; z++)
                AT(x, y, z) = input(x, y, z);
    for (int y = 0; y < n1; y++)
        for (int z = 0; z < n2; z++) {
            for (int x = 0; x < n0; x++) line[x] = AT(x, y, z);
            dft(line, n0, tmp);
            for (int x = 0; x < n0; x++) AT(x, y, z) = line[x];
        }
    for (int x = 0; x < n0; x++)
        for (int z = 0; z < n2; z++) {
            for (int y = 0; y < n1; y++) line[y] = AT(x, y, z);
            dft(line, n1, tmp);
            for (int y = 0; y < n1; y++) AT(x, y, z) = line[y];
        }
    for (int x = 0; x < n0; x++)
        for (int y = 0; y < n1; y++)
            dft(&AT(x, y, 0), n2, tmp);

    int x0 = lo(n0, p0, c[0]), bad = 0;
    double sum[2] = {0, 0}, total[2];
    for (int x = 0; x < nx; x++)
        for (int y = 0; y < nyy; y++)
            for (int z = 0; z < n2; z++) {
                cplx v = f[((size_t)x * nyy + y) * n2 + z];
                bad += v != AT(x0 + x, yy0 + y, z);
                sum[0] += creal(v) * (1 + x0 + x), sum[1] += cimag(v) * (1 + z);
            }
    /* MPI_Reduce, which the library leaves to MPI: its summation order, hence the checksum's
     * last bits, are the same with and without the library. */
    MPI_Reduce(sum, total, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    int all = total_failures(bad);
    if (rank == 0)
        printf("transpose %dx%dx%d on %dx%d: %d mismatches, checksum %.17g %.17g\n", n0, n1, n2, p0, p1, all,
               total[0], total[1]);
    MPI_Comm_free(&row);
    MPI_Comm_free(&col);
    MPI_Comm_free(&cart);
    free(a), free(b), free(buf), free(full), free(tmp), free(line), free(sc), free(rc);
    MPI_Finalize();
    return all ? 1 : 0;
}
