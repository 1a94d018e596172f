/* The library's allocator (python/shmcoll/pmpi/csrc/arena.c), which serves the program's
 * large blocks from a shared arena: malloc/free of sizes around and above the threshold
 * with their contents checked, calloc over dirty and punched memory, realloc of arena and
 * glibc blocks, the aligned variants and their errors, malloc_usable_size, threads, fork
 * (the child must not get the arena). Where a block lies is read from /proc/self/maps: the
 * arena is the mapping named /memfd:shmcoll-arena, what of it is resident from
 * /proc/self/smaps. An MPI program only because the library is preloaded into MPI
 * programs: it calls MPI_Init and MPI_Finalize and nothing else.
 *
 * Usage: malloc_check [arena|glibc|any]: where large blocks must be (default arena; glibc
 * when SHMCOLL_PMPI_SHARED_MALLOC=0; any when the arena may be full). The threshold is read
 * from SHMCOLL_PMPI_SHARED_MALLOC as the library reads it (default 256K). Every rank prints
 * "malloc_check: N cases, F failures" and exits 1 on a failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define MiB (1u << 20)
#define ARENA_NAME "/memfd:shmcoll-arena (deleted)"

static int cases, failures;
static size_t threshold; /* 0: no arena expected */
static enum { EXPECT_ARENA, EXPECT_GLIBC, EXPECT_ANY } expect;

static void check(int ok, const char *what, size_t n)
{
    __atomic_fetch_add(&cases, 1, __ATOMIC_RELAXED);
    if (!ok) {
        __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "FAILED %s (size %zu)\n", what, n);
    }
}

/* -- where a block is ------------------------------------------------------------------- */

static uintptr_t arena_lo, arena_hi; /* the arena's mapping, once seen (it never moves) */

/* Re-reads /proc/self/maps; whether an arena mapping exists. */
static int find_arena(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char *name = strchr(line, '/');
        if (name && strncmp(name, ARENA_NAME, strlen(ARENA_NAME)) == 0 &&
            sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
            if (found && (lo != arena_hi)) /* one mapping, or adjacent pieces of one */
                fprintf(stderr, "more than one arena mapping: %s", line);
            if (!found)
                arena_lo = lo;
            arena_hi = hi, found = 1;
        }
    }
    if (f)
        fclose(f);
    return found;
}

static int in_arena(const void *p)
{
    if (!arena_hi)
        find_arena();
    return (uintptr_t)p >= arena_lo && (uintptr_t)p < arena_hi;
}

/* Whether a block of n bytes at p lies where it should: the arena for large blocks (when
 * one is expected), glibc's heap otherwise. */
static void check_place(const void *p, size_t n, int may_be_large, const char *what)
{
    char msg[160];
    int large = may_be_large && threshold && n >= threshold;
    if (expect == EXPECT_ANY && large)
        return;
    snprintf(msg, sizeof msg, "%s: %s the arena", what, large ? "in" : "not in");
    check(in_arena(p) == large, msg, n);
    if (large)
        check((uintptr_t)p % 4096 == 0, "arena blocks are page aligned", n);
}

/* Resident kB of the arena (its Rss in /proc/self/smaps), -1 without one. */
static long arena_rss_kb(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[4096];
    long kb = -1;
    int inside = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *name = strchr(line, '/');
        if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ') && line[0] != ' ')
            inside = name && strncmp(name, ARENA_NAME, strlen(ARENA_NAME)) == 0;
        long v;
        if (inside && sscanf(line, "Rss: %ld kB", &v) == 1)
            kb = (kb < 0 ? 0 : kb) + v;
    }
    if (f)
        fclose(f);
    return kb;
}

/* -- contents ----------------------------------------------------------------------------- */

/* Small blocks in full; large ones at the head, the tail and once per 4 KiB page (blocks
 * are whole pages, so overlapping ones would clobber each other's marks). */
static void fill(unsigned char *p, size_t n, int salt)
{
    if (n <= 65536) {
        for (size_t i = 0; i < n; i++)
            p[i] = pattern(0, 0, i, salt);
        return;
    }
    for (size_t i = 0; i < 256; i++)
        p[i] = pattern(0, 0, i, salt), p[n - 1 - i] = pattern(0, 0, n - 1 - i, salt);
    for (size_t i = 777; i < n; i += 4096)
        p[i] = pattern(0, 0, i, salt);
}

static int intact(const unsigned char *p, size_t n, int salt)
{
    if (n <= 65536) {
        for (size_t i = 0; i < n; i++)
            if (p[i] != pattern(0, 0, i, salt))
                return 0;
        return 1;
    }
    for (size_t i = 0; i < 256; i++)
        if (p[i] != pattern(0, 0, i, salt) || p[n - 1 - i] != pattern(0, 0, n - 1 - i, salt))
            return 0;
    for (size_t i = 777; i < n; i += 4096)
        if (p[i] != pattern(0, 0, i, salt))
            return 0;
    return 1;
}

/* An aligned allocation of n bytes: aligned, usable, in the arena when it may be, then freed. */
static void check_aligned(unsigned char *p, size_t al, size_t n, int salt, const char *what)
{
    char msg[96];
    snprintf(msg, sizeof msg, "%s aligns to %zu", what, al);
    check(p && (uintptr_t)p % al == 0, msg, n);
    if (!p)
        return;
    fill(p, n, salt);
    check_place(p, n, al <= 4096, what);
    check(intact(p, n, salt), "an aligned block keeps its contents", n);
    free(p);
}

/* The first n bytes unchanged after a move: every one for the fully filled, else marks. */
static int kept(const unsigned char *p, size_t filled, size_t n, int salt)
{
    if (filled <= 65536) {
        for (size_t i = 0; i < n && i < filled; i++)
            if (p[i] != pattern(0, 0, i, salt))
                return 0;
        return 1;
    }
    for (size_t i = 0; i < 256 && i < n; i++)
        if (p[i] != pattern(0, 0, i, salt))
            return 0;
    for (size_t i = 777; i < n && i < filled; i += 4096)
        if (p[i] != pattern(0, 0, i, salt))
            return 0;
    return 1;
}

/* memset that the compiler may not drop as a dead store before free(). */
static void dirty(void *p, int c, size_t n)
{
    memset(p, c, n);
    __asm__ volatile("" : : "r"(p) : "memory");
}

static int zeros(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static unsigned long long rng = 88172645463325252ull;
static unsigned long long next_random(unsigned long long *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* -- the cases ------------------------------------------------------------------------------ */

static void sizes_around_the_threshold(void)
{
    size_t t = threshold ? threshold : 256 << 10;
    size_t sizes[] = {1, 100, 4096, 65536, t - 4097, t - 1, t, t + 1, t + 4095, t + 4096, 2 * t,
                      MiB + 7, 5 * MiB, 33 * MiB, 64 * MiB + 1};
    size_t k = sizeof sizes / sizeof *sizes;
    unsigned char *p[sizeof sizes / sizeof *sizes];
    for (size_t i = 0; i < k; i++) {
        p[i] = xmalloc(sizes[i]);
        fill(p[i], sizes[i], (int)i);
        check_place(p[i], sizes[i], 1, "malloc");
        check(malloc_usable_size(p[i]) >= sizes[i], "malloc_usable_size >= the size asked", sizes[i]);
    }
    for (size_t i = 0; i < k; i++)
        check(intact(p[i], sizes[i], (int)i), "contents of live blocks", sizes[i]);
    for (size_t i = 0; i < k; i += 2) /* every other one freed, the rest still intact */
        free(p[i]);
    for (size_t i = 1; i < k; i += 2) {
        check(intact(p[i], sizes[i], (int)i), "contents after neighbours were freed", sizes[i]);
        free(p[i]);
    }
    free(NULL);
    check(1, "free(NULL)", 0);
}

static void reuse_and_calloc(void)
{
    size_t t = threshold ? threshold : 256 << 10;
    size_t sizes[] = {t, MiB, 3 * MiB + 5, 40 * MiB /* punched when freed */};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *a = xmalloc(n);
        dirty(a, 0xA5, n);
        free(a);
        unsigned char *b = xmalloc(n);
        /* First fit: the same size right after a free gets the same place back. */
        if (expect == EXPECT_ARENA && threshold)
            check(a == b, "a freed arena block is reused", n);
        dirty(b, 0x5A, n);
        free(b);
        unsigned char *c = calloc(1, n);
        check(c && zeros(c, n), "calloc over a freed dirty block gives zeros", n);
        check_place(c, n, 1, "calloc");
        free(c);
    }
    /* Two dirty neighbours and clean space after them, coalesced under one calloc. */
    unsigned char *x = xmalloc(2 * MiB), *y = xmalloc(2 * MiB);
    dirty(x, 1, 2 * MiB), dirty(y, 2, 2 * MiB);
    free(x), free(y);
    unsigned char *z = calloc(4, 2 * MiB);
    check(z && zeros(z, 8 * MiB), "calloc over coalesced dirty and clean blocks gives zeros", 8 * MiB);
    free(z);
    /* A dirty block left inside a larger free one, calloc of part of it. */
    unsigned char *u = xmalloc(6 * MiB);
    dirty(u, 3, 6 * MiB);
    free(u);
    unsigned char *v = calloc(1, MiB), *w = calloc(1, 4 * MiB);
    check(v && w && zeros(v, MiB) && zeros(w, 4 * MiB), "calloc of pieces of a dirty block gives zeros", 5 * MiB);
    free(v), free(w);
    /* Overflowing products fail. */
    volatile size_t huge = SIZE_MAX / 2;
    errno = 0;
    void *o = calloc(huge, 3);
    check(!o && errno == ENOMEM, "calloc with an overflowing product fails with ENOMEM", 0);
}

/* Freed blocks of 32 MiB or more leave memory; smaller ones stay resident for reuse. */
static void memory_returned(void)
{
    if (expect != EXPECT_ARENA || !threshold)
        return;
    unsigned char *big = xmalloc(40 * MiB), *small = xmalloc(4 * MiB);
    dirty(big, 1, 40 * MiB), dirty(small, 2, 4 * MiB);
    long before = arena_rss_kb();
    free(small);
    long after_small = arena_rss_kb();
    free(big);
    long after_big = arena_rss_kb();
    check(before >= 44 * 1024, "touched arena blocks are resident", (size_t)before);
    check(after_small >= before - 64, "a freed 4 MiB block stays resident", (size_t)after_small);
    check(after_big <= after_small - 40 * 1024 + 64, "a freed 40 MiB block is returned", (size_t)after_big);
}

static void reallocs(void)
{
    size_t t = threshold ? threshold : 256 << 10;
    /* Arena block: grow, shrink (still large), shrink below the threshold. */
    unsigned char *p = xmalloc(MiB);
    fill(p, MiB, 11);
    p = realloc(p, 3 * MiB);
    check(p && kept(p, MiB, MiB, 11), "realloc growing a large block keeps its contents", 3 * MiB);
    check_place(p, 3 * MiB, 1, "realloc grown");
    fill(p, 3 * MiB, 12);
    unsigned char *q = realloc(p, t + 100);
    check(q && kept(q, 3 * MiB, t + 100, 12), "realloc shrinking a large block keeps its contents", t + 100);
    check_place(q, t + 100, 1, "realloc shrunk");
    if (expect == EXPECT_ARENA && threshold)
        check(q == p, "a large block shrunk in the arena stays in place", t + 100);
    unsigned char *r = realloc(q, 1000);
    check(r && kept(r, 3 * MiB, 1000, 12), "realloc of a large block to a small one keeps its contents", 1000);
    check_place(r, 1000, 1, "realloc to small");
    free(r);
    /* glibc block: grow past the threshold, shrink. */
    unsigned char *g = xmalloc(1000);
    fill(g, 1000, 13);
    g = realloc(g, 2 * MiB);
    check(g && kept(g, 1000, 1000, 13), "realloc growing a small block keeps its contents", 2 * MiB);
    fill(g, 2 * MiB, 14);
    g = realloc(g, 5000);
    check(g && kept(g, 2 * MiB, 5000, 14), "realloc shrinking a glibc block keeps its contents", 5000);
    free(g);
    /* NULL and 0. */
    unsigned char *n = realloc(NULL, 2 * MiB);
    check(n != NULL, "realloc(NULL, n) allocates", 2 * MiB);
    check_place(n, 2 * MiB, 1, "realloc(NULL)");
    fill(n, 2 * MiB, 15);
    check(realloc(n, 0) == NULL, "realloc(p, 0) frees and returns NULL (as glibc)", 0);
    unsigned char *s = xmalloc(100);
    check(realloc(s, 0) == NULL, "realloc(small, 0) frees and returns NULL (as glibc)", 0);
    /* reallocarray is glibc's, calling realloc. */
    unsigned char *a = reallocarray(NULL, 4, MiB);
    fill(a, 4 * MiB, 16);
    check_place(a, 4 * MiB, 1, "reallocarray");
    a = reallocarray(a, 8, MiB);
    check(a && kept(a, 4 * MiB, 4 * MiB, 16), "reallocarray keeps the contents", 8 * MiB);
    free(a);
    /* Many steps of growth, as a vector does. */
    size_t len = 64;
    unsigned char *vec = xmalloc(len);
    fill(vec, len, 17);
    for (int i = 0; i < 14; i++) {
        size_t old = len;
        len = len * 2 + 1000;
        vec = realloc(vec, len);
        if (!vec || !kept(vec, old, old, 17)) {
            check(0, "realloc growth steps keep the contents", len);
            return;
        }
        fill(vec, len, 17);
    }
    check(intact(vec, len, 17), "realloc growth steps keep the contents", len);
    free(vec);
}

static void aligned(void)
{
    size_t t = threshold ? threshold : 256 << 10;
    volatile size_t aligns[] = {64, 4096, 8192};
    size_t sizes[] = {100, t, 3 * MiB};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++) {
            size_t al = aligns[i], n = sizes[j];
            void *p = (void *)0x1;
            int rc = posix_memalign(&p, al, n);
            check(rc == 0 && (uintptr_t)p % al == 0, "posix_memalign aligns", n);
            if (rc == 0) {
                fill(p, n, 20);
                check(malloc_usable_size(p) >= n, "malloc_usable_size of posix_memalign's", n);
                check_place(p, n, al <= 4096, "posix_memalign");
                check(intact(p, n, 20), "posix_memalign block keeps its contents", n);
                free(p);
            }
            check_aligned(aligned_alloc(al, n), al, n, 21, "aligned_alloc");
            check_aligned(memalign(al, n), al, n, 22, "memalign");
        }
    /* Errors: *memptr untouched. */
    volatile size_t bad[] = {0, 3, 4 /* < sizeof(void *) */, 24, 4097};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        void *p = (void *)0x1;
        check(posix_memalign(&p, bad[i], MiB) == EINVAL && p == (void *)0x1,
              "posix_memalign rejects a bad alignment with EINVAL", bad[i]);
    }
    void *p = (void *)0x1;
    volatile size_t huge = SIZE_MAX - 8192;
    check(posix_memalign(&p, 64, huge) == ENOMEM && p == (void *)0x1, "posix_memalign fails with ENOMEM", huge);
    check(posix_memalign(&p, 8192, huge) == ENOMEM && p == (void *)0x1, "posix_memalign fails with ENOMEM",
          huge);
    volatile size_t three = 3;
    errno = 0;
    check(aligned_alloc(three, MiB) == NULL && errno == EINVAL, "aligned_alloc rejects a non-power of two", MiB);
    errno = 0;
    check(malloc(huge) == NULL && errno == ENOMEM, "malloc of too much fails with ENOMEM", huge);
    /* Page-aligned variants. */
    size_t page = (size_t)getpagesize();
    unsigned char *v = valloc(2 * MiB), *w = valloc(100);
    check(v && w && (uintptr_t)v % page == 0 && (uintptr_t)w % page == 0, "valloc aligns to the page", 2 * MiB);
    if (v && w) {
        fill(v, 2 * MiB, 23), fill(w, 100, 24);
        check_place(v, 2 * MiB, page <= 4096, "valloc");
        check(intact(v, 2 * MiB, 23) && intact(w, 100, 24), "valloc blocks keep their contents", 2 * MiB);
    }
    free(v), free(w);
    unsigned char *pv = pvalloc(t + 5);
    check(pv && (uintptr_t)pv % page == 0 && malloc_usable_size(pv) >= (t + 5 + page - 1) / page * page,
          "pvalloc rounds up to whole pages", t + 5);
    if (pv)
        dirty(pv, 7, (t + 5 + page - 1) / page * page);
    free(pv);
    check(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) is 0", 0);
}

/* Random sizes across the threshold, some blocks held while others come and go. */
static void churn(unsigned long long seed, int salt, int rounds, size_t big, int *fails)
{
    enum { SLOTS = 12 };
    unsigned char *p[SLOTS] = {0};
    size_t n[SLOTS] = {0};
    int s[SLOTS] = {0};
    size_t t = threshold ? threshold : 256 << 10;
    for (int i = 0; i < rounds; i++) {
        unsigned long long r = next_random(&seed);
        int k = (int)(r % SLOTS);
        if (p[k]) {
            if (!intact(p[k], n[k], s[k]))
                (*fails)++;
            if (r >> 60 == 0) { /* now and then a realloc instead */
                size_t m = (size_t)(next_random(&seed) % (4 * t)) + 1;
                unsigned char *q = realloc(p[k], m);
                if (!q || !kept(q, n[k], m < n[k] ? m : n[k], s[k]))
                    (*fails)++;
                p[k] = q, n[k] = m, s[k] = salt + i;
                if (q)
                    fill(q, m, s[k]);
                continue;
            }
            free(p[k]);
            p[k] = NULL;
            continue;
        }
        size_t m;
        switch ((r >> 8) % 8) {
        case 0: m = (size_t)(r >> 20) % 4096 + 1; break;
        case 1: m = t - 1 - (size_t)(r >> 20) % 64; break;
        case 2: m = t + (size_t)(r >> 20) % 64; break;
        case 3: m = (size_t)(r >> 20) % big + 1; break; /* some punched when freed */
        default: m = (size_t)(r >> 20) % (4 * MiB) + 1; break;
        }
        int zeroed = (r >> 12) % 3 == 0;
        p[k] = zeroed ? calloc(1, m) : malloc(m);
        if (!p[k]) {
            (*fails)++;
            continue;
        }
        if (zeroed && !zeros(p[k], m < 65536 ? m : 65536))
            (*fails)++;
        if (zeroed && m > 65536 && !zeros(p[k] + m - 65536, 65536))
            (*fails)++;
        n[k] = m, s[k] = salt + i;
        fill(p[k], m, s[k]);
    }
    for (int k = 0; k < SLOTS; k++) {
        if (p[k] && !intact(p[k], n[k], s[k]))
            (*fails)++;
        free(p[k]);
    }
}

static void many_blocks(void)
{
    int fails = 0;
    churn(next_random(&rng), 1000, 3000, 40 * MiB, &fails);
    check(fails == 0, "random malloc/calloc/realloc/free keep every block's contents", 0);
}

struct worker {
    int index, fails;
};

static void *thread_main(void *arg)
{
    struct worker *w = arg;
    churn(0x9E3779B97F4A7C15ull * (unsigned long long)(w->index + 1), 5000 * (w->index + 1), 1000, 36 * MiB,
          &w->fails);
    return NULL;
}

static void threads(void)
{
    enum { T = 4 };
    pthread_t th[T];
    struct worker w[T];
    for (int i = 0; i < T; i++) {
        w[i] = (struct worker){i, 0};
        if (pthread_create(&th[i], NULL, thread_main, &w[i]) != 0)
            check(0, "pthread_create", 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        check(w[i].fails == 0, "4 threads allocating at once keep every block's contents", (size_t)i);
    }
}

static int wait_child(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void forks(void)
{
    size_t t = threshold ? threshold : 256 << 10;
    unsigned char *keep = xmalloc(2 * t);
    fill(keep, 2 * t, 30);
    check_place(keep, 2 * t, 1, "block held across fork");
    int had_arena = in_arena(keep);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    check(pid > 0 && wait_child(pid) == 0, "a forked child execs /bin/true", 0);
    pid = fork();
    if (pid == 0)
        _exit(0);
    check(pid > 0 && wait_child(pid) == 0, "a forked child _exits", 0);
    /* A child that goes on: a copy of the arena as it was at the fork (the parent rewrites
     * `keep` only after the child has checked it), its own from then on: its writes stay
     * its own, its large blocks come from its copy, freeing the parent's block is its own
     * business. */
    int go[2], done[2];
    check(pipe(go) == 0 && pipe(done) == 0, "pipes", 0);
    pid = fork();
    if (pid == 0) {
        int bad = 0;
        char byte;
        bad |= (!intact(keep, 2 * t, 30)) << 0;
        fill(keep, 2 * t, 32);
        if (write(go[1], "x", 1) != 1 || read(done[0], &byte, 1) != 1)
            bad |= 1 << 1;
        bad |= (!intact(keep, 2 * t, 32)) << 2; /* the parent's write is not seen */
        arena_lo = arena_hi = 0;
        unsigned char *c = malloc(3 * MiB);
        bad |= (!c) << 3;
        if (c) {
            fill(c, 3 * MiB, 31);
            bad |= (!intact(c, 3 * MiB, 31)) << 4;
            bad |= (had_arena && !in_arena(c)) << 5;
            free(c);
        }
        free(keep);
        _exit(bad);
    }
    char byte;
    check(pid > 0 && read(go[0], &byte, 1) == 1, "the child checked its copy", 0);
    check(intact(keep, 2 * t, 30), "the child's write is not seen by the parent", 2 * t);
    fill(keep, 2 * t, 33);
    check(write(done[1], "x", 1) == 1, "pipe", 0);
    int rc = pid > 0 ? wait_child(pid) : -1;
    check(rc == 0, "a forked child keeps its copy of the arena and allocates from it", (size_t)rc);
    check(intact(keep, 2 * t, 33), "the parent's block is intact after the children", 2 * t);
    close(go[0]), close(go[1]), close(done[0]), close(done[1]);
    check(system("true") == 0, "system() works", 0);
    if (had_arena) {
        find_arena();
        check(in_arena(keep), "the parent still has its arena", 0);
    }
    free(keep);
}

static size_t parse_threshold(const char *v)
{
    if (!v || !*v)
        return 256 << 10;
    if (strcasecmp(v, "off") == 0)
        return 0;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    switch (*end) {
    case 'k': case 'K': x <<= 10; break;
    case 'm': case 'M': x <<= 20; break;
    case 'g': case 'G': x <<= 30; break;
    }
    return (size_t)x;
}

int main(int argc, char **argv)
{
    /* Before MPI_Init the process may be anything (a launcher, say): glibc's memory. */
    size_t early_n = 1 << 20;
    unsigned char *early = malloc(early_n);
    MPI_Init(&argc, &argv);
    const char *pmpi = getenv("SHMCOLL_PMPI");
    threshold = pmpi && strcmp(pmpi, "0") == 0 ? 0 : parse_threshold(getenv("SHMCOLL_PMPI_SHARED_MALLOC"));
    const char *mode = argc > 1 ? argv[1] : "arena";
    expect = strcmp(mode, "glibc") == 0 ? EXPECT_GLIBC : strcmp(mode, "any") == 0 ? EXPECT_ANY : EXPECT_ARENA;
    if (expect == EXPECT_GLIBC)
        threshold = 0;

    check_place(early, early_n, 0, "an allocation before MPI_Init");
    free(early);
    sizes_around_the_threshold();
    reuse_and_calloc();
    memory_returned();
    reallocs();
    aligned();
    many_blocks();
    threads();
    forks();
    arena_lo = arena_hi = 0;
    int mapped = find_arena();
    check(expect == EXPECT_GLIBC ? !mapped : expect == EXPECT_ANY || mapped,
          expect == EXPECT_GLIBC ? "no arena without shared allocation" : "an arena exists", 0);

    printf("malloc_check: %d cases, %d failures\n", cases, failures);
    fflush(stdout);
    MPI_Finalize();
    return failures ? 1 : 0;
}
