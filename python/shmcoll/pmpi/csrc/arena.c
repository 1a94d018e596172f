/* The program's large allocations in a shared arena.
 *
 * Why: the engine moves a collective's data between the processes of a node. A buffer in
 * ordinary heap memory is private to its process: a peer reaches it only through CMA
 * (process_vm_readv/writev, a syscall and page pinning per call) or by staging through the
 * shared segment (two copies). This file interposes the C allocator (malloc, free, calloc,
 * realloc and the aligned variants) so that the program's large blocks, the ones it hands
 * to MPI_Alltoall and the like, come from an arena: one memfd per process, mapped
 * MAP_SHARED, which peers can map too (the engine obtains the fd with pidfd_getfd, see
 * shim_arena), so that they copy straight into and out of the program's buffers.
 *
 * What goes where: once MPI_Init has returned (see mpi_process), requests of at least
 * SHMCOLL_PMPI_SHARED_MALLOC bytes (K/M/G suffixes;
 * default 256K; 0 or off: none, and none either under SHMCOLL_PMPI=0) with an alignment of
 * at most 4096 come from the arena; everything else is glibc's, through its __libc_* entry
 * points, and so is every large request when the arena is full or could not be created
 * (counted as fallbacks). An arena pointer is recognised by its address alone, so free()
 * of a glibc pointer costs one comparison more than glibc's own.
 *
 * The arena: created at the first large allocation (or by shim_arena_ensure), a memfd of
 * SHMCOLL_PMPI_ARENA_BYTES (default 64G), sparse: only the pages touched cost memory. Blocks
 * are whole 4 KiB pages (data page aligned), served first fit from a free list kept in
 * address order and coalesced on free. The never-used tail of the arena is the last entry
 * of that list, with no old data in it: taking its front is the bump allocation. (Rather
 * than a separate bump pointer: one code path, and a freed block that borders the tail
 * merges with it, so a request larger than either alone still fits there.)
 * Freed blocks of 32 MiB or more are punched out of the memfd (as glibc munmaps its largest
 * chunks); smaller ones stay resident, so that a buffer allocated and freed every iteration
 * does not page-fault every time. Each free block knows which of its pages may hold old
 * data (one range, see hull), so that calloc clears only those (never-used and punched
 * pages read as zero).
 *
 * fork(): fork gives a child a copy-on-write image of private memory, but a MAP_SHARED
 * mapping stays shared, so parent and child would write into each other's buffers. The
 * child gets a copy instead, made before the parent goes on (the same model as the Python
 * arena's, rust/shmcoll-shm/src/shared_arena/fork.rs): the prepare handler takes the lock
 * and opens a pipe; the child copies the data extents (SEEK_DATA) of every allocated block
 * into a new memfd, maps it over the arena at the same address and writes one byte into
 * the pipe; the parent waits for that byte (or end of file if the child died) and releases
 * the lock. The child's arena is then its own. If the copy fails, the child maps the
 * parent's memfd privately (copy on the child's writes) and allocates from glibc; free()
 * of the parent's blocks then does nothing. fork costs time proportional to the touched
 * bytes of the live large blocks; posix_spawn and vfork children run no handlers. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shim.h"

/* glibc's allocator under its own names (exported by libc.so for interposers like this). */
extern void *__libc_malloc(size_t n);
extern void __libc_free(void *p);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t alignment, size_t n);

#define PAGE 4096u                  /* the arena's granule (not necessarily the system's page) */
#define PUNCH_BYTES (32ull << 20)   /* freed blocks at least this large leave memory */
#define DEFAULT_THRESHOLD (256ull << 10)
#define DEFAULT_ARENA (64ull << 30)
#define USED 0x80000000u            /* in blk.pages: the first page of an allocated block */
#define MAX_PAGES (USED - 1)        /* so that page numbers and lengths fit in 31 bits */
#define NIL UINT32_MAX

/* One entry per arena page, in a private anonymous mapping beside the arena (a side table
 * rather than a header page before each block): only the entry at a block's first page
 * means anything. Kept out of the arena so that nothing a peer writes into it can corrupt
 * the allocator, so that no header page per block is touched, and so that a forked child,
 * which has no arena, still has the table (malloc_usable_size works there). 16 bytes per
 * 4 KiB page; sparse like the arena (a 4 KiB page of it covers 1 MiB of arena), though
 * under strict overcommit (vm.overcommit_memory=2) it counts against the commit limit,
 * and if that refuses it the arena is unavailable. */
struct blk {
    uint32_t pages; /* the block's length in pages, | USED while allocated */
    uint32_t next;  /* free block: first page of the next free block (address order) or NIL */
    uint32_t dlo, dhi; /* free block: pages [dlo, dhi) may hold old data; empty if dlo >= dhi */
};

enum { ARENA_NONE, ARENA_READY, ARENA_UNAVAILABLE };

/* Set once by the constructor; 0 (everything to glibc) before it and when off. */
static size_t threshold;
static size_t reserve = DEFAULT_ARENA;
static size_t (*libc_usable_size)(void *);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the free list and the table */
static int state = ARENA_NONE; /* written under the lock, read without it */
static int arena_fd = -1;
/* The arena is [arena_lo, arena_lo + arena_span): the span is stored before the base
 * (release) and the base loaded first (acquire), so whoever sees one sees both. They stay
 * set in a forked child, so that the parent's pointers are still recognised there. */
static uintptr_t arena_lo, arena_span;
static struct blk *table;
static uint32_t free_head = NIL;
static unsigned long long served, in_use, fallbacks; /* atomics: read by the stats */

/* -- environment ------------------------------------------------------------------------ */

static void warn(const char *name, const char *value, const char *what)
{
    char line[512];
    int n = snprintf(line, sizeof line, "[shmcoll-pmpi] ignoring %s=%s: %s\n", name, value, what);
    if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0)
        return; /* nothing better to do */
}

/* "1048576", "256K", "64G" (K/M/G/T, binary, optionally followed by B or iB); 0 for
 * anything else or a value that overflows (declared in shim.h). */
int shim_parse_bytes(const char *s, unsigned long long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return 0;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10, end++; break;
    case 'm': case 'M': shift = 20, end++; break;
    case 'g': case 'G': shift = 30, end++; break;
    case 't': case 'T': shift = 40, end++; break;
    }
    if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
        end += strlen(end);
    if (errno || *end || (shift && v > (~0ull >> shift)))
        return 0;
    *out = v << shift;
    return 1;
}

static void child_after_fork(void);
static int fork_pipe[2] = {-1, -1}; /* the child's "copied" signal, during a fork */

static void before_fork(void)
{
    pthread_mutex_lock(&lock);
    if (state != ARENA_READY || pipe2(fork_pipe, O_CLOEXEC) != 0)
        fork_pipe[0] = fork_pipe[1] = -1;
}

static void parent_after_fork(void)
{
    if (fork_pipe[0] >= 0) {
        char byte;
        close(fork_pipe[1]);
        while (read(fork_pipe[0], &byte, 1) < 0 && errno == EINTR)
            ;
        close(fork_pipe[0]);
        fork_pipe[0] = fork_pipe[1] = -1;
    }
    pthread_mutex_unlock(&lock);
}

/* Runs after libc's and MPI's constructors, which may have allocated already: until it
 * sets `threshold`, everything is glibc's. getenv and dlsym are safe here (dlsym may
 * allocate: it gets glibc's memory). */
__attribute__((constructor)) static void arena_init(void)
{
    libc_usable_size = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    unsigned long long v = DEFAULT_THRESHOLD, r;
    const char *s = getenv("SHMCOLL_PMPI_SHARED_MALLOC");
    if (s && strcasecmp(s, "off") == 0) {
        v = 0;
    } else if (s && *s && !shim_parse_bytes(s, &v)) {
        warn("SHMCOLL_PMPI_SHARED_MALLOC", s, "expected a size in bytes (e.g. 256K) or off");
        v = DEFAULT_THRESHOLD;
    }
    /* SHMCOLL_PMPI=0 steps the library aside entirely: its allocations too. */
    if (!shim_enabled())
        v = 0;
    s = getenv("SHMCOLL_PMPI_ARENA_BYTES");
    if (s && *s) {
        if (shim_parse_bytes(s, &r) && r >= PAGE && (r + PAGE - 1) / PAGE <= MAX_PAGES)
            reserve = (size_t)((r + PAGE - 1) / PAGE * PAGE);
        else
            warn("SHMCOLL_PMPI_ARENA_BYTES", s, "expected a size from 4K to 8T (e.g. 64G)");
    }
    if (v) {
        /* The table must stay consistent in a child, and the lock free (see the handlers). */
        pthread_atfork(before_fork, parent_after_fork, child_after_fork);
        threshold = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
    } else {
        state = ARENA_UNAVAILABLE;
    }
}

/* -- the arena ---------------------------------------------------------------------------- */

static int in_arena(const void *p)
{
    uintptr_t l = __atomic_load_n(&arena_lo, __ATOMIC_ACQUIRE);
    return (uintptr_t)p - l < __atomic_load_n(&arena_span, __ATOMIC_RELAXED);
}

/* Write the data extents of bytes [lo, hi) of the arena into `to`; 0 on success. */
static int copy_data(int to, off_t lo, off_t hi)
{
    while (lo < hi) {
        off_t data = lseek(arena_fd, lo, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? 0 : -1; /* only holes from here on */
        if (data >= hi)
            return 0;
        off_t hole = lseek(arena_fd, data, SEEK_HOLE);
        if (hole < 0)
            return -1;
        if (hole > hi)
            hole = hi;
        while (data < hole) {
            ssize_t n = pwrite(to, (char *)arena_lo + data, (size_t)(hole - data), data);
            if (n <= 0 && !(n < 0 && errno == EINTR))
                return -1;
            if (n > 0)
                data += n;
        }
        lo = hole;
    }
    return 0;
}

/* In the child, under the inherited lock: the allocated blocks, copied into a new memfd
 * mapped over the arena. The walk visits block starts only: every block's first table
 * entry holds its length, allocated (USED) or free. */
static int privatize(void)
{
    int fd = memfd_create("shmcoll-arena", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)reserve) != 0)
        goto fail;
    for (uint32_t s = 0, npages = (uint32_t)(reserve / PAGE); s < npages;) {
        uint32_t n = table[s].pages & ~USED;
        if (n == 0)
            goto fail; /* not a block start: the table is not what this walk assumes */
        if ((table[s].pages & USED) &&
            copy_data(fd, (off_t)s * PAGE, (off_t)(s + n) * PAGE) != 0)
            goto fail;
        s += n;
    }
    if (mmap((void *)arena_lo, reserve, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, 0) == MAP_FAILED)
        goto fail;
    close(arena_fd);
    arena_fd = fd;
    return 0;
fail:
    close(fd);
    return -1;
}

static void child_after_fork(void)
{
    if (state == ARENA_READY && privatize() != 0) {
        /* The fallback: the parent's memory, copy on write; no more allocations here. */
        mmap((void *)arena_lo, reserve, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE, arena_fd, 0);
        close(arena_fd);
        arena_fd = -1;
        state = ARENA_UNAVAILABLE;
    }
    if (fork_pipe[0] >= 0) {
        close(fork_pipe[0]);
        while (write(fork_pipe[1], "x", 1) < 0 && errno == EINTR)
            ;
        close(fork_pipe[1]);
        fork_pipe[0] = fork_pipe[1] = -1;
    }
    pthread_mutex_unlock(&lock);
}

/* Under the lock. Any failure makes the arena unavailable for good (no retry). */
static void create_locked(void)
{
    size_t npages = reserve / PAGE;
    void *base = MAP_FAILED, *t = MAP_FAILED;
    int fd = memfd_create("shmcoll-arena", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)reserve) != 0)
        goto fail;
    base = mmap(NULL, reserve, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (base == MAP_FAILED)
        goto fail;
    t = mmap(NULL, npages * sizeof(struct blk), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (t == MAP_FAILED)
        goto fail;
    table = t;
    table[0] = (struct blk){(uint32_t)npages, NIL, 0, 0}; /* all of it: never used, clean */
    free_head = 0;
    arena_fd = fd;
    __atomic_store_n(&arena_span, (uintptr_t)reserve, __ATOMIC_RELAXED);
    __atomic_store_n(&arena_lo, (uintptr_t)base, __ATOMIC_RELEASE);
    __atomic_store_n(&state, ARENA_READY, __ATOMIC_RELEASE);
    return;
fail:
    if (base != MAP_FAILED)
        munmap(base, reserve);
    if (fd >= 0)
        close(fd);
    __atomic_store_n(&state, ARENA_UNAVAILABLE, __ATOMIC_RELEASE);
}

static uint32_t umax(uint32_t a, uint32_t b) { return a > b ? a : b; }
static uint32_t umin(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* The smallest range holding both [*lo, *hi) and [l, h) (empty ranges ignored): a free
 * block made of dirty and clean parts is dirty over their hull (conservative). */
static void hull(uint32_t *lo, uint32_t *hi, uint32_t l, uint32_t h)
{
    if (l >= h)
        return;
    if (*lo >= *hi)
        *lo = l, *hi = h;
    else
        *lo = umin(*lo, l), *hi = umax(*hi, h);
}

/* Under the lock: `n` pages off the front of the first free block that has them, marked
 * allocated; its first page, or NIL. [*dlo, *dhi) gets the pages of it that may hold old
 * data. */
static uint32_t take(uint32_t n, uint32_t *dlo, uint32_t *dhi)
{
    uint32_t *link = &free_head;
    for (uint32_t s = free_head; s != NIL; link = &table[s].next, s = table[s].next) {
        struct blk b = table[s];
        if (b.pages < n)
            continue;
        *dlo = umax(b.dlo, s), *dhi = umin(b.dhi, s + n);
        if (b.pages == n) {
            *link = b.next;
        } else {
            uint32_t r = s + n;
            table[r] = (struct blk){b.pages - n, b.next, umax(b.dlo, r), b.dhi};
            *link = r;
        }
        table[s] = (struct blk){n | USED, NIL, 0, 0};
        return s;
    }
    return NIL;
}

/* Under the lock: pages [s, s + n) back into the free list, merged with free neighbours. */
static void give(uint32_t s, uint32_t n, int dirty)
{
    uint32_t dlo = dirty ? s : 0, dhi = dirty ? s + n : 0;
    uint32_t prev = NIL, next = free_head;
    while (next != NIL && next < s)
        prev = next, next = table[next].next;
    if (next != NIL && s + n == next) {
        struct blk b = table[next];
        hull(&dlo, &dhi, b.dlo, b.dhi);
        n += b.pages;
        table[next].pages = 0;
        next = b.next;
    }
    if (prev != NIL && prev + table[prev].pages == s) {
        table[prev].pages += n;
        table[prev].next = next;
        hull(&table[prev].dlo, &table[prev].dhi, dlo, dhi);
        table[s].pages = 0;
    } else {
        table[s] = (struct blk){n, next, dlo, dhi};
        if (prev == NIL)
            free_head = s;
        else
            table[prev].next = s;
    }
}

static int arena_ready(void)
{
    int st = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (st == ARENA_NONE) {
        pthread_mutex_lock(&lock);
        if (state == ARENA_NONE)
            create_locked();
        st = state;
        pthread_mutex_unlock(&lock);
    }
    return st == ARENA_READY;
}

/* A large block from the arena (zeroed if `zero`), or NULL: then the caller goes to glibc
 * (counted here). */
static void *arena_alloc(size_t n, int zero)
{
    uint32_t s = NIL, dlo = 0, dhi = 0;
    if (arena_ready() && n <= (size_t)MAX_PAGES * PAGE) {
        uint32_t pages = (uint32_t)((n + PAGE - 1) / PAGE);
        pthread_mutex_lock(&lock);
        s = take(pages ? pages : 1, &dlo, &dhi);
        if (s != NIL) {
            __atomic_fetch_add(&served, 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&in_use, (unsigned long long)(table[s].pages & ~USED) * PAGE, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&lock);
    }
    if (s == NIL) {
        __atomic_fetch_add(&fallbacks, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    char *p = (char *)arena_lo + (size_t)s * PAGE;
    if (zero && dlo < dhi)
        memset((char *)arena_lo + (size_t)dlo * PAGE, 0, (size_t)(dhi - dlo) * PAGE);
    return p;
}

static _Noreturn void invalid(const char *what)
{
    char line[128];
    int n = snprintf(line, sizeof line, "[shmcoll-pmpi] %s(): invalid pointer (shared arena)\n", what);
    if (write(2, line, (size_t)n) < 0)
        abort();
    abort();
}

/* The first page of the allocated arena block at `p` (or abort, as glibc on a bad free). */
static uint32_t block_of(const void *p, const char *what)
{
    uintptr_t off = (uintptr_t)p - arena_lo;
    if (off % PAGE || !(table[off / PAGE].pages & USED))
        invalid(what);
    return (uint32_t)(off / PAGE);
}

static size_t arena_usable(void *p)
{
    return (size_t)(table[block_of(p, "malloc_usable_size")].pages & ~USED) * PAGE;
}

static void arena_free(void *p)
{
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != ARENA_READY)
        return; /* a forked child whose copy failed: the parent's block is not its own */
    pthread_mutex_lock(&lock);
    uint32_t s = block_of(p, "free"), n = table[s].pages & ~USED;
    table[s].pages = n; /* no longer allocated: a second free of it aborts */
    __atomic_fetch_sub(&in_use, (unsigned long long)n * PAGE, __ATOMIC_RELAXED);
    int dirty = 1;
    if ((unsigned long long)n * PAGE >= PUNCH_BYTES) {
        /* The block is ours alone until give(): punch it without holding the lock. */
        pthread_mutex_unlock(&lock);
        dirty = fallocate(arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)s * PAGE,
                          (off_t)n * PAGE) != 0;
        pthread_mutex_lock(&lock);
    }
    give(s, n, dirty);
    pthread_mutex_unlock(&lock);
}

/* Shrinks the arena block at page `s` to `n` pages in place, its tail freed. */
static void arena_shrink(uint32_t s, uint32_t n)
{
    pthread_mutex_lock(&lock);
    uint32_t old = table[s].pages & ~USED;
    if (n < old) {
        table[s].pages = n | USED;
        __atomic_fetch_sub(&in_use, (unsigned long long)(old - n) * PAGE, __ATOMIC_RELAXED);
        give(s + n, old - n, 1);
    }
    pthread_mutex_unlock(&lock);
}

/* Set once the process is an MPI process (MPI_Init returned, or it set up a communicator):
 * until then every allocation is glibc's. The library is preloaded into the launcher too
 * (`LD_PRELOAD=... mpiexec ...`), and launchers fork and use their memory in the child
 * before exec: every fork would copy the arena's blocks (see fork() above) for a child that
 * execs at once. They never call MPI_Init. */
static int mpi_process;

void shim_arena_mpi_started(void)
{
    __atomic_store_n(&mpi_process, 1, __ATOMIC_RELEASE);
}

static int large(size_t n)
{
    return threshold && n >= threshold && __atomic_load_n(&mpi_process, __ATOMIC_ACQUIRE);
}

/* -- the interface of shim.h -------------------------------------------------------------- */

int shim_arena_ensure(void)
{
    shim_arena_mpi_started();
    return threshold && arena_ready();
}

int shim_arena(int *fd, void **base, size_t *size)
{
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != ARENA_READY)
        return 0;
    *fd = arena_fd;
    *base = (void *)arena_lo;
    *size = arena_span;
    return 1;
}

void shim_arena_counts(unsigned long long out[3])
{
    out[0] = __atomic_load_n(&served, __ATOMIC_RELAXED);
    out[1] = __atomic_load_n(&in_use, __ATOMIC_RELAXED);
    out[2] = __atomic_load_n(&fallbacks, __ATOMIC_RELAXED);
}

/* -- the interposed allocator (exported: see exports.map) --------------------------------- */

void *malloc(size_t n)
{
    void *p;
    if (large(n) && (p = arena_alloc(n, 0)))
        return p;
    return __libc_malloc(n);
}

void free(void *p)
{
    if (!p)
        return;
    if (in_arena(p))
        arena_free(p);
    else
        __libc_free(p);
}

void *calloc(size_t nmemb, size_t size)
{
    size_t n;
    void *p;
    if (__builtin_mul_overflow(nmemb, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    if (large(n) && (p = arena_alloc(n, 1)))
        return p;
    return __libc_calloc(nmemb, size);
}

void *realloc(void *p, size_t n)
{
    if (!p)
        return malloc(n);
    if (!in_arena(p))
        return __libc_realloc(p, n); /* glibc's block stays glibc's, whatever the new size */
    if (n == 0) {
        free(p); /* glibc frees and returns NULL */
        return NULL;
    }
    uint32_t s = block_of(p, "realloc");
    size_t old = (size_t)(table[s].pages & ~USED) * PAGE;
    if (large(n) && n <= old && __atomic_load_n(&state, __ATOMIC_ACQUIRE) == ARENA_READY) {
        /* Deviation from allocate-copy-free: a block still large after shrinking keeps its
         * place and returns its tail (no copy, the address kept, as glibc does). */
        arena_shrink(s, (uint32_t)((n + PAGE - 1) / PAGE));
        return p;
    }
    void *q = malloc(n);
    if (!q)
        return NULL; /* the old block is left as it was */
    memcpy(q, p, n < old ? n : old);
    free(p);
    return q;
}

void *memalign(size_t alignment, size_t n)
{
    void *p;
    /* Page-aligned blocks satisfy any alignment up to a page (glibc rounds others up to a
     * power of two, which stays within a page). */
    if (alignment <= PAGE && large(n) && (p = arena_alloc(n, 0)))
        return p;
    return __libc_memalign(alignment, n);
}

int posix_memalign(void **memptr, size_t alignment, size_t n)
{
    if (alignment == 0 || alignment % sizeof(void *) || (alignment & (alignment - 1)))
        return EINVAL;
    int saved = errno; /* posix_memalign reports through its result, not errno */
    void *p = memalign(alignment, n);
    errno = saved;
    if (!p)
        return ENOMEM;
    *memptr = p;
    return 0;
}

/* C17 and glibc >= 2.38: the alignment must be a power of two (size any multiple or not). */
void *aligned_alloc(size_t alignment, size_t n)
{
    if (alignment == 0 || (alignment & (alignment - 1))) {
        errno = EINVAL;
        return NULL;
    }
    return memalign(alignment, n);
}

void *valloc(size_t n)
{
    return memalign((size_t)getpagesize(), n);
}

void *pvalloc(size_t n)
{
    size_t page = (size_t)getpagesize(), rounded;
    if (__builtin_add_overflow(n, page - 1, &rounded)) {
        errno = ENOMEM;
        return NULL;
    }
    return memalign(page, rounded & ~(page - 1));
}

size_t malloc_usable_size(void *p)
{
    if (!p)
        return 0;
    if (in_arena(p))
        return arena_usable(p);
    if (!libc_usable_size) /* called before the constructor */
        libc_usable_size = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    return libc_usable_size ? libc_usable_size(p) : 0;
}
