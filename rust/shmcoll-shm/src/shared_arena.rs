//! This process's shared-array arena: a memfd, mapped shared, that the peers of its
//! communicators map too (crate::arena, through pidfd_getfd), so that a collective copies
//! straight into and out of buffers allocated there, as it does with the shared heap,
//! instead of going through CMA system calls. The Python bindings allocate NumPy arrays
//! from it by default (`shmcoll.shared_arrays`), as the PMPI library's allocator does for a
//! C program's large mallocs.
//!
//! One arena per process, created on first use and never unmapped: arrays allocated from it
//! may outlive every communicator. It is sparse (MAP_NORESERVE): only touched pages cost
//! memory. Its size is what the process's limits allow (sizing.rs: a share of RLIMIT_AS,
//! no more than RLIMIT_FSIZE, halved while mmap refuses), or nothing, with the reason kept
//! for the bindings to announce. Blocks are whole pages, first fit (crate::heap::HeapAlloc);
//! blocks of 4 MiB or more are whole huge pages in the upper half (pages.rs), which asks the
//! kernel for huge pages where it gives shared memory any (crate::huge_pages), so that large
//! arrays cost NumPy code no more than its own huge-page arrays.
//!
//! Memory: a freed block below `RELEASE_FROM` waits in a cache by exact length, so that the
//! temporaries NumPy code allocates and frees in a loop are reused warm and in O(1); the
//! cache holds at most `CACHE_BYTES`, oldest out first. Every block that leaves the cache,
//! and every freed block of `RELEASE_FROM` bytes or more (as glibc unmaps its largest
//! chunks), is punched out of the memfd before it goes back to the free ranges. So resident
//! memory is the live blocks plus at most `CACHE_BYTES`, and the free ranges hold only
//! pages that read as zero: a zeroed block clears memory only when it comes from the cache. Under strict overcommit
//! (vm.overcommit_memory=2) a block's pages are reserved (fallocate) before it is handed
//! out: the kernel would otherwise answer a page it cannot commit with SIGBUS on first
//! touch, where an allocation can still be refused (and served by the C allocator).
//!
//! fork(): fork.rs gives the child a private copy of the arena, as fork gives one of
//! anonymous memory: the live blocks are copied into a new memfd mapped at the same address
//! before the parent returns from fork, so the child sees the parent's values at the fork
//! and neither sees the other's writes afterwards.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{fallocate, ftruncate, memfd_create, FallocateFlags, MemfdFlags};

use crate::error::{Result, ShmError};
use crate::huge_pages::{self, ShmemHuge};

mod fork;
mod pages;
mod sizing;

pub use pages::{large_part, HUGE_FROM, HUGE_PAGE};
pub use sizing::Sizing;

/// Arena size when SHMCOLL_ARENA_BYTES is not set (virtual: only touched pages are memory).
pub const DEFAULT_ARENA_BYTES: usize = 64 << 30;
/// Freed blocks at least this large leave memory at once: glibc's largest mmap threshold,
/// the size from which it always returns freed chunks to the kernel.
pub const RELEASE_FROM: usize = 32 << 20;
/// Resident bytes of freed blocks kept for reuse (the cache): enough for the temporaries
/// of a loop over arrays of the bindings' default largest size (4 MiB), little beside a
/// process's arrays (glibc keeps up to 64 MiB free at the top of its heap before it trims).
pub const CACHE_BYTES: usize = 32 << 20;
const PAGE: usize = 4096;

/// The arena: its mapping and the allocator of its pages.
#[derive(Debug)]
pub struct SharedArena {
    map: MmapRaw,
    state: Mutex<State>,
    /// Why the arena is smaller than asked (the process's limits), if it is.
    sizing: Sizing,
    /// Reserve each block's pages before handing it out (strict overcommit).
    reserve: bool,
    /// Whether the large blocks get huge pages (the kernel allows it for shared memory and
    /// the mapping is huge-page aligned).
    huge: bool,
}

#[derive(Debug)]
struct State {
    /// The memfd behind the mapping (a forked child gets a new one, fork.rs).
    fd: OwnedFd,
    pages: pages::Pages,
    /// Offset -> length of every block handed out.
    blocks: HashMap<usize, usize>,
    /// Length -> offsets of freed blocks kept for reuse (still counted in `pages`).
    cache: HashMap<usize, Vec<usize>>,
    /// (offset, length) of cached blocks, oldest first; entries whose block was reused
    /// since are skipped when they come out.
    cache_order: VecDeque<(usize, usize)>,
    cached: usize,
    served: u64,
    refused: u64,
}

/// Counters of the arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArenaStats {
    pub capacity: usize,
    /// Bytes of the blocks handed out and not freed.
    pub in_use: usize,
    /// Bytes of freed blocks kept for reuse.
    pub cached: usize,
    /// Allocations served from the arena since it was created.
    pub served: u64,
    /// Requests the arena could not serve (full), left to the system allocator.
    pub refused: u64,
}

/// This process's arena (leaked: it is never unmapped), null before it exists and in a
/// forked child whose copy of it failed (fork.rs).
static CURRENT: AtomicPtr<SharedArena> = AtomicPtr::new(std::ptr::null_mut());
/// In a forked child whose copy failed: the parent's arena, mapped copy-on-write, whose
/// blocks the child must not hand to the C allocator when NumPy frees an inherited array.
static INHERITED: AtomicPtr<SharedArena> = AtomicPtr::new(std::ptr::null_mut());
static CREATE: Mutex<()> = Mutex::new(());

fn load(p: &AtomicPtr<SharedArena>) -> Option<&'static SharedArena> {
    // SAFETY: non-null pointers stored here come from Box::leak and are never freed.
    unsafe { p.load(Ordering::Acquire).as_ref() }
}

/// This process's arena, if it was created (in this process or, copied, in a parent).
pub fn get() -> Option<&'static SharedArena> {
    load(&CURRENT)
}

/// The parent's arena, in a forked child that could not copy it (fork.rs).
pub fn inherited() -> Option<&'static SharedArena> {
    load(&INHERITED)
}

/// This process's arena, created if it does not exist: `len` bytes (rounded up to pages),
/// or less where the process's limits do not allow it (the arena's `sizing` says why).
/// Fails when the limits leave no room for a useful arena.
pub fn ensure(len: usize) -> Result<&'static SharedArena> {
    if let Some(a) = get() {
        return Ok(a);
    }
    let _guard = CREATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(a) = get() {
        return Ok(a);
    }
    fork::register();
    let a: &'static SharedArena = Box::leak(Box::new(SharedArena::create(len)?));
    CURRENT.store(
        a as *const SharedArena as *mut SharedArena,
        Ordering::Release,
    );
    Ok(a)
}

/// Ask for huge pages on the upper part of `map` (a mapping of an arena, this process's or a
/// peer's) where the kernel wants to be asked; whether its large blocks get huge pages.
/// The mapping must be huge-page aligned for that: the kernel aligns shared mappings when
/// it gives shared memory huge pages.
pub fn advise_huge_pages(map: &MmapRaw) -> bool {
    let (start, end) = large_part(map.len());
    let aligned = (map.as_mut_ptr() as usize).is_multiple_of(HUGE_PAGE) && end > start;
    match huge_pages::shared_memory().mode {
        ShmemHuge::Never => false,
        ShmemHuge::Always => aligned,
        ShmemHuge::OnAdvice => {
            aligned
                && map
                    .advise_range(memmap2::Advice::HugePage, start, end - start)
                    .is_ok()
        }
    }
}

fn os(what: &str, e: impl Into<std::io::Error>) -> ShmError {
    ShmError::os(format!("creating the shared-array arena: {what}"), e)
}

impl SharedArena {
    fn create(requested: usize) -> Result<SharedArena> {
        SharedArena::create_under(requested, &sizing::Limits::of_process())
    }

    /// The arena for `requested` bytes under the process limits `limits`.
    fn create_under(requested: usize, limits: &sizing::Limits) -> Result<SharedArena> {
        // Whole pages; a request too large to round up is as large as can be (the limits
        // and mmap bring it down below), not a wrapped 0.
        let requested = requested
            .max(PAGE)
            .checked_next_multiple_of(PAGE)
            .unwrap_or(usize::MAX / PAGE * PAGE);
        let fd = memfd_create("shmcoll-arrays", MemfdFlags::CLOEXEC)
            .map_err(|e| os("memfd_create", e))?;
        let mut sizing = sizing::plan(requested, limits).map_err(|why| {
            ShmError::os(
                format!("creating the shared-array arena: {why}"),
                std::io::Error::from_raw_os_error(libc::ENOMEM),
            )
        })?;
        // mmap may still refuse what the limits seemed to allow (other mappings count
        // against RLIMIT_AS too): halve until it maps or becomes too small to matter.
        let map = loop {
            let attempt = ftruncate(&fd, sizing.len as u64)
                .map_err(std::io::Error::from)
                .and_then(|()| {
                    MmapOptions::new()
                        .len(sizing.len)
                        .no_reserve_swap()
                        .map_raw(&fd)
                });
            match attempt {
                Ok(map) => break map,
                Err(e) => {
                    sizing = sizing::halve(sizing, &e).ok_or_else(|| os("mmap", e))?;
                }
            }
        };
        let huge = advise_huge_pages(&map);
        Ok(SharedArena {
            map,
            sizing,
            reserve: limits.strict_overcommit,
            huge,
            state: Mutex::new(State {
                fd,
                pages: pages::Pages::new(sizing.len),
                blocks: HashMap::new(),
                cache: HashMap::new(),
                cache_order: VecDeque::new(),
                cached: 0,
                served: 0,
                refused: 0,
            }),
        })
    }

    pub fn base(&self) -> usize {
        self.map.as_mut_ptr() as usize
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Whether arrays of `HUGE_FROM` bytes or more get huge pages here (else they stay
    /// NumPy's by default: shmcoll-py's bounds).
    pub fn huge_pages(&self) -> bool {
        self.huge
    }

    /// How the arena was sized (and why it is smaller than asked, if it is).
    pub fn sizing(&self) -> &Sizing {
        &self.sizing
    }

    /// The descriptor peers fetch with pidfd_getfd.
    pub fn raw_fd(&self) -> i32 {
        self.lock().fd.as_raw_fd()
    }

    pub fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base()) < self.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than losing the arena: keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of at least `len` bytes (page aligned), zeroed if `zeroed`; None when full
    /// (or, under strict overcommit, when the kernel cannot commit its pages).
    pub fn alloc(&self, len: usize, zeroed: bool) -> Option<usize> {
        let len = pages::block_len(len)?;
        let mut s = self.lock();
        let cached = s.cache.get_mut(&len).and_then(Vec::pop);
        let off = match cached {
            Some(off) => {
                s.cached -= len;
                off
            }
            None => match s.pages.alloc(len) {
                Ok(off) => off,
                Err(_) => {
                    s.refused += 1;
                    return None;
                }
            },
        };
        if self.reserve
            && fallocate(&s.fd, FallocateFlags::empty(), off as u64, len as u64).is_err()
        {
            s.release(off, len);
            s.refused += 1;
            return None;
        }
        s.blocks.insert(off, len);
        s.served += 1;
        drop(s);
        let addr = self.base() + off;
        // Only a cached block holds old data: the free ranges hold punched pages.
        if zeroed && cached.is_some() {
            // SAFETY: [addr, addr + len) is the block just reserved for this caller
            // (off + len <= the mapping's length), which nobody else uses.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
        }
        Some(addr)
    }

    /// The length of the block at `addr` (as handed out), if it is one.
    pub fn block_len(&self, addr: usize) -> Option<usize> {
        let off = addr.checked_sub(self.base())?;
        self.lock().blocks.get(&off).copied()
    }

    /// Free the block at `addr`; false if `addr` is not a block of this arena.
    pub fn free(&self, addr: usize) -> bool {
        let Some(off) = addr.checked_sub(self.base()) else {
            return false;
        };
        let mut s = self.lock();
        let Some(len) = s.blocks.remove(&off) else {
            return false;
        };
        if len >= RELEASE_FROM || len > CACHE_BYTES {
            s.release(off, len);
            return true;
        }
        s.cached += len;
        s.cache.entry(len).or_default().push(off);
        s.cache_order.push_back((off, len));
        while s.cached > CACHE_BYTES {
            let Some((o, l)) = s.cache_order.pop_front() else {
                break;
            };
            let Some(v) = s.cache.get_mut(&l) else {
                continue;
            };
            let Some(i) = v.iter().position(|&x| x == o) else {
                continue; // reused since it was cached
            };
            v.swap_remove(i);
            s.cached -= l;
            s.release(o, l);
        }
        s.compact_order();
        true
    }

    pub fn stats(&self) -> ArenaStats {
        let s = self.lock();
        ArenaStats {
            capacity: self.len(),
            in_use: s.pages.in_use() - s.cached,
            cached: s.cached,
            served: s.served,
            refused: s.refused,
        }
    }

    /// Resident bytes of the memfd (pages that exist), for the bindings' statistics.
    pub fn resident(&self) -> Option<u64> {
        let s = self.lock();
        rustix::fs::fstat(s.fd.as_fd())
            .ok()
            .map(|st| (st.st_blocks as u64).saturating_mul(512))
    }
}

impl State {
    /// Drop the order's stale entries (blocks reused since they were cached, and repeats)
    /// once they outnumber the cached blocks, so that the order stays as small as the cache.
    fn compact_order(&mut self) {
        let blocks: usize = self.cache.values().map(Vec::len).sum();
        if self.cache_order.len() <= 2 * blocks + 64 {
            return;
        }
        let mut seen = std::collections::HashSet::new();
        let cache = &self.cache;
        // Keep the newest entry of each block: walk from the back.
        let kept: VecDeque<(usize, usize)> = self
            .cache_order
            .iter()
            .rev()
            .filter(|&&(o, l)| cache.get(&l).is_some_and(|v| v.contains(&o)) && seen.insert(o))
            .copied()
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        self.cache_order = kept;
    }

    /// Punch `[off, off + len)` out of the memfd and give it back to the free ranges. The
    /// punch keeps the file size; the pages read as zero again.
    fn release(&mut self, off: usize, len: usize) {
        let _ = fallocate(
            &self.fd,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            off as u64,
            len as u64,
        );
        self.pages.free(off, len);
    }
}

#[cfg(test)]
mod tests;
