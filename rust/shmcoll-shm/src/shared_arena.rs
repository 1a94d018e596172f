//! This process's shared-array arena: a memfd, mapped shared, that the peers of its
//! communicators map too (crate::arena, through pidfd_getfd), so that a collective copies
//! straight into and out of buffers allocated there, as it does with the shared heap,
//! instead of going through CMA system calls. The Python bindings allocate large NumPy
//! arrays from it (`shmcoll.shared_arrays()`), as the PMPI library's allocator does for a
//! C program's large mallocs.
//!
//! One arena per process, created on first use and never unmapped: arrays allocated from it
//! may outlive every communicator. It is sparse (MAP_NORESERVE): only touched pages cost
//! memory. Blocks are whole pages, first fit (crate::heap::HeapAlloc), with freed blocks of
//! up to `CACHE_BLOCK_MAX` kept by length for reuse; freed blocks of `RELEASE_FROM` bytes
//! or more go back to the kernel. `fresh` is the high-water mark: pages
//! above it were never handed out and read as zero, so a zeroed allocation clears only what
//! lies below it.
//!
//! fork(): the mapping is MADV_DONTFORK, as the PMPI arena's: a MAP_SHARED mapping would be
//! shared with a forked child instead of copied, so parent and child would write into each
//! other's arrays. A child that touches the parent's arena arrays faults instead.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, Once};

use memmap2::{Advice, MmapOptions, MmapRaw};
use rustix::fs::{fallocate, ftruncate, memfd_create, FallocateFlags, MemfdFlags};

use crate::error::{Result, ShmError};
use crate::heap::HeapAlloc;

/// Arena size when SHMCOLL_ARENA_BYTES is not set (virtual: only touched pages are memory).
pub const DEFAULT_ARENA_BYTES: usize = 64 << 30;
/// Freed blocks at least this large leave memory (smaller ones stay resident, so that an
/// array allocated and freed every iteration does not page-fault every time).
pub const RELEASE_FROM: usize = 32 << 20;
/// Freed blocks up to this size wait in a cache by exact length, so that the temporaries
/// NumPy code allocates and frees in a loop take O(1) instead of a first-fit scan of the
/// free ranges (which a few hundred fragments made 1.2x slower than glibc at 8 KiB).
pub const CACHE_BLOCK_MAX: usize = 1 << 20;
/// At most this many bytes wait in that cache; beyond it, freed blocks go back to the ranges.
pub const CACHE_BYTES: usize = 64 << 20;
const PAGE: usize = 4096;

/// The arena: its memfd, its mapping and the allocator of its pages.
#[derive(Debug)]
pub struct SharedArena {
    fd: OwnedFd,
    map: MmapRaw,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    pages: HeapAlloc,
    /// Offset -> length of every block handed out.
    blocks: HashMap<usize, usize>,
    /// Length -> offsets of freed blocks kept for reuse (still counted in `pages`).
    cache: HashMap<usize, Vec<usize>>,
    cached: usize,
    /// Everything at or above this offset was never handed out (reads as zero).
    fresh: usize,
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
/// forked child, which does not have the mapping (see the module comment).
static CURRENT: AtomicPtr<SharedArena> = AtomicPtr::new(std::ptr::null_mut());
/// In a forked child: the parent's arena, whose range the child must not hand to the C
/// allocator when NumPy frees an inherited array (the pages are simply not there).
static INHERITED: AtomicPtr<SharedArena> = AtomicPtr::new(std::ptr::null_mut());
static CREATE: Mutex<()> = Mutex::new(());
static AT_FORK: Once = Once::new();

extern "C" fn forked_child() {
    let p = CURRENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        INHERITED.store(p, Ordering::Release);
    }
}

fn load(p: &AtomicPtr<SharedArena>) -> Option<&'static SharedArena> {
    // SAFETY: non-null pointers stored here come from Box::leak and are never freed.
    unsafe { p.load(Ordering::Acquire).as_ref() }
}

/// This process's arena, if it was created (in this process, not a parent).
pub fn get() -> Option<&'static SharedArena> {
    load(&CURRENT)
}

/// The parent's arena, in a forked child.
pub fn inherited() -> Option<&'static SharedArena> {
    load(&INHERITED)
}

/// This process's arena, created (`len` bytes, rounded up to pages) if it does not exist.
pub fn ensure(len: usize) -> Result<&'static SharedArena> {
    if let Some(a) = get() {
        return Ok(a);
    }
    let _guard = CREATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(a) = get() {
        return Ok(a);
    }
    AT_FORK.call_once(|| {
        // SAFETY: registering a child handler that only swaps two atomics (async-signal
        // safe, as a handler run after fork must be).
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    });
    let a: &'static SharedArena = Box::leak(Box::new(SharedArena::create(len)?));
    CURRENT.store(
        a as *const SharedArena as *mut SharedArena,
        Ordering::Release,
    );
    Ok(a)
}

fn os(what: &str, e: impl Into<std::io::Error>) -> ShmError {
    ShmError::os(format!("creating the shared-array arena: {what}"), e)
}

impl SharedArena {
    fn create(len: usize) -> Result<SharedArena> {
        let len = len.max(PAGE).div_ceil(PAGE) * PAGE;
        let fd = memfd_create("shmcoll-arrays", MemfdFlags::CLOEXEC)
            .map_err(|e| os("memfd_create", e))?;
        ftruncate(&fd, len as u64).map_err(|e| os("ftruncate", e))?;
        let map = MmapOptions::new()
            .len(len)
            .no_reserve_swap()
            .map_raw(&fd)
            .map_err(|e| os("mmap", e))?;
        map.advise(Advice::DontFork)
            .map_err(|e| os("madvise(MADV_DONTFORK)", e))?;
        Ok(SharedArena {
            fd,
            map,
            state: Mutex::new(State {
                pages: HeapAlloc::new(len),
                blocks: HashMap::new(),
                cache: HashMap::new(),
                cached: 0,
                fresh: 0,
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

    /// The descriptor peers fetch with pidfd_getfd.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base()) < self.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than losing the arena: keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of at least `len` bytes (page aligned), zeroed if `zeroed`; None when full.
    pub fn alloc(&self, len: usize, zeroed: bool) -> Option<usize> {
        let len = len.max(1).div_ceil(PAGE) * PAGE;
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
        s.blocks.insert(off, len);
        s.served += 1;
        let dirty = s.fresh.min(off + len).saturating_sub(off);
        s.fresh = s.fresh.max(off + len);
        drop(s);
        let addr = self.base() + off;
        if zeroed && dirty > 0 {
            // SAFETY: [addr, addr + dirty) lies inside the block just reserved for this
            // caller (off + len <= the mapping's length), which nobody else uses.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, dirty) };
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
        if len <= CACHE_BLOCK_MAX && s.cached + len <= CACHE_BYTES {
            s.cached += len;
            s.cache.entry(len).or_default().push(off);
            return true;
        }
        if len >= RELEASE_FROM {
            // Punching keeps the file size; the pages read as zero again, but `fresh` stays
            // (a later zeroed block there is cleared once more, which is only slower).
            let _ = fallocate(
                &self.fd,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                off as u64,
                len as u64,
            );
        }
        s.pages.free(off, len);
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
}

#[cfg(test)]
mod tests;
