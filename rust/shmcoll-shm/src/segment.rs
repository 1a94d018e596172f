//! One mapped POSIX shared-memory object: creation (mode 0600, unguessable name), opening,
//! unlinking, and bounds-checked typed access to its bytes.
//!
//! All raw-pointer work on the mapping is confined to this module: everything above it gets
//! `&AtomicU64`/`&AtomicU32` references or raw pointers whose ranges were checked here.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use rustix::fs::Mode;
use rustix::shm;

use crate::error::{Result, ShmError};
use crate::layout::{Layout, Sizes, HEADER_BYTES, LAYOUT_VERSION, MAGIC};

/// Every segment name starts with this, so that `cleanup` can find leftovers.
pub const NAME_PREFIX: &str = "shmcoll-";

/// The header at offset 0. Plain integers: written once by the creator before the magic,
/// read by openers after they saw the magic.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Header {
    magic: u64,
    version: u32,
    creator_pid: u32,
    nranks: u64,
    inline_bytes: u64,
    staging_bytes: u64,
    heap_bytes: u64,
    total: u64,
}

/// Offset, inside the header page, of the shared count of sleeping waiters (own line).
const WAITERS_OFF: usize = 1024;

/// A mapped segment. Dropping it unmaps; the creator also unlinks if nobody did.
#[derive(Debug)]
pub struct Segment {
    map: memmap2::MmapRaw,
    fd: OwnedFd,
    name: String,
    layout: Layout,
    is_creator: bool,
    unlinked: AtomicBool,
}

impl Segment {
    /// Create a new segment sized for `sizes` under an unguessable name.
    pub fn create(sizes: Sizes) -> Result<Segment> {
        if sizes.nranks == 0 {
            return Err(ShmError::Config(
                "a communicator needs at least one rank".into(),
            ));
        }
        let layout = Layout::new(sizes);
        check_space(layout.total)?;
        let name = fresh_name()?;
        let fd = shm::open(
            name.as_str(),
            shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| ShmError::os(format!("shm_open({name})"), e))?;
        let seg = (|| {
            rustix::fs::ftruncate(&fd, layout.total as u64)
                .map_err(|e| ShmError::os(format!("ftruncate({name}, {})", layout.total), e))?;
            let map = map_fd(&fd, layout.total, &name)?;
            Ok(Segment {
                map,
                fd,
                name: name.clone(),
                layout,
                is_creator: true,
                unlinked: AtomicBool::new(false),
            })
        })();
        let seg = match seg {
            Ok(s) => s,
            Err(e) => {
                let _ = shm::unlink(name.as_str());
                return Err(e);
            }
        };
        let header = Header {
            magic: 0,
            version: LAYOUT_VERSION,
            creator_pid: std::process::id(),
            nranks: layout.sizes.nranks as u64,
            inline_bytes: layout.sizes.inline_bytes as u64,
            staging_bytes: layout.sizes.staging_bytes as u64,
            heap_bytes: layout.sizes.heap_bytes as u64,
            total: layout.total as u64,
        };
        // SAFETY: the mapping is at least HEADER_BYTES long and page aligned, so the header
        // fits and is aligned; nobody else has the name yet, so nobody reads concurrently.
        unsafe { std::ptr::write(seg.map.as_mut_ptr() as *mut Header, header) };
        // The magic goes last, with release order: an opener that sees it sees the sizes.
        seg.atomic_u64(0).store(MAGIC, Ordering::Release);
        seg.advise_heap();
        Ok(seg)
    }

    /// Open and map a segment another process created.
    pub fn open(name: &str) -> Result<Segment> {
        let fd = shm::open(name, shm::OFlags::RDWR, Mode::empty())
            .map_err(|e| ShmError::os(format!("shm_open({name})"), e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| ShmError::os(format!("fstat({name})"), e))?;
        let len = st.st_size as usize;
        let bad = |reason: String| ShmError::BadSegment {
            name: name.to_string(),
            reason,
        };
        if len < HEADER_BYTES {
            return Err(bad(format!("only {len} bytes long")));
        }
        let map = map_fd(&fd, len, name)?;
        // SAFETY: the mapping is at least HEADER_BYTES long and page aligned.
        let magic = unsafe { &*(map.as_mut_ptr() as *const AtomicU64) }.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(bad("not a shmcoll segment (bad magic)".into()));
        }
        // SAFETY: the magic was published with release order after the header was written,
        // and the header is never written again.
        let h: Header = unsafe { std::ptr::read(map.as_mut_ptr() as *const Header) };
        if h.version != LAYOUT_VERSION {
            return Err(bad(format!(
                "layout version {} but this shmcoll speaks {LAYOUT_VERSION}; mixed shmcoll versions in one job?",
                h.version
            )));
        }
        let layout = Layout::new(Sizes {
            nranks: h.nranks as usize,
            inline_bytes: h.inline_bytes as usize,
            staging_bytes: h.staging_bytes as usize,
            heap_bytes: h.heap_bytes as usize,
        });
        if layout.total as u64 != h.total || layout.total > len {
            return Err(bad(format!(
                "header says {} bytes, layout needs {}, file has {len}",
                h.total, layout.total
            )));
        }
        let seg = Segment {
            map,
            fd,
            name: name.to_string(),
            layout,
            is_creator: false,
            unlinked: AtomicBool::new(false),
        };
        seg.advise_heap();
        Ok(seg)
    }

    /// Remove the name from /dev/shm; the mappings stay valid. Idempotent.
    pub fn unlink(&self) -> Result<()> {
        if self.unlinked.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match shm::unlink(self.name.as_str()) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(ShmError::os(format!("shm_unlink({})", self.name), e)),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn len(&self) -> usize {
        self.layout.total
    }

    pub fn is_empty(&self) -> bool {
        self.layout.total == 0
    }

    /// Address of the first byte.
    pub fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Pointer to `off`, checked so that `off + len` stays inside the segment.
    pub fn ptr(&self, off: usize, len: usize) -> *mut u8 {
        assert!(
            off.checked_add(len)
                .is_some_and(|end| end <= self.layout.total),
            "segment access {off}+{len} beyond {}",
            self.layout.total
        );
        // SAFETY: in bounds of the mapping, checked above.
        unsafe { self.map.as_mut_ptr().add(off) }
    }

    /// If `[addr, addr+len)` lies inside this segment, its offset.
    pub fn offset_of(&self, addr: usize, len: usize) -> Option<usize> {
        let base = self.base() as usize;
        let off = addr.checked_sub(base)?;
        (off.checked_add(len)? <= self.layout.total).then_some(off)
    }

    /// The 64-bit atomic at `off` (8-byte aligned).
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8));
        let p = self.ptr(off, 8);
        // SAFETY: in bounds and aligned (checked); the mapping lives as long as `self`, and
        // shared memory is only ever accessed atomically at the offsets used as atomics.
        unsafe { &*(p as *const AtomicU64) }
    }

    /// The 32-bit atomic at `off` (4-byte aligned).
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4));
        let p = self.ptr(off, 4);
        // SAFETY: as for `atomic_u64`.
        unsafe { &*(p as *const AtomicU32) }
    }

    /// Count of processes sleeping on a futex in this segment (see `wait`).
    pub fn waiters(&self) -> &AtomicU32 {
        self.atomic_u32(WAITERS_OFF)
    }

    /// Give the pages of `[off, off+len)` back to tmpfs (used when large heap blocks are freed).
    pub fn release_pages(&self, off: usize, len: usize) {
        let page = 4096;
        let start = off.div_ceil(page) * page;
        let end = (off + len) / page * page;
        if end > start {
            // Punching a hole keeps the file size; later touches get fresh zero pages.
            let _ = rustix::fs::fallocate(
                &self.fd,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                start as u64,
                (end - start) as u64,
            );
        }
    }

    /// Back `[off, off+len)` with pages now, so that the first collectives do not pay a
    /// page fault per 4 KiB of staging ring (measured: a 64 KiB chunk into fresh pages
    /// costs ~35 µs instead of ~8).
    pub fn prefault(&self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        let p = self.ptr(off, len);
        // SAFETY: the range is inside the mapping (checked by `ptr`); MADV_POPULATE_WRITE
        // only allocates pages, it does not change their contents.
        let r =
            unsafe { rustix::mm::madvise(p.cast(), len, rustix::mm::Advice::LinuxPopulateWrite) };
        if r.is_err() {
            // Kernels before 5.14: touch one byte per page, atomically, without changing it.
            for page in (off..off + len).step_by(4096) {
                self.atomic_u32(page).fetch_add(0, Ordering::Relaxed);
            }
        }
    }

    fn advise_heap(&self) {
        let r = self.layout.heap_range();
        if r.end > r.start {
            // Best effort: tmpfs ignores it unless shmem THP is enabled.
            let _ = self
                .map
                .advise_range(memmap2::Advice::HugePage, r.start, r.end - r.start);
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.is_creator {
            let _ = self.unlink();
        }
    }
}

fn map_fd(fd: &OwnedFd, len: usize, name: &str) -> Result<memmap2::MmapRaw> {
    memmap2::MmapOptions::new()
        .len(len)
        .map_raw(fd.as_raw_fd())
        .map_err(|e| ShmError::os(format!("mmap({name}, {len})"), e))
}

/// `shmcoll-<uid>-<pid>-<128 random bits>`: the pid lets `cleanup` tell stale from live.
fn fresh_name() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| ShmError::Config(format!("getrandom: {e}")))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let uid = rustix::process::getuid().as_raw();
    Ok(format!("/{NAME_PREFIX}{uid}-{}-{hex}", std::process::id()))
}

/// Refuse segments larger than the free space of /dev/shm: a sparse file bigger than the
/// filesystem maps fine and then kills the process with SIGBUS when a page cannot be backed.
fn check_space(total: usize) -> Result<()> {
    if let Ok(st) = rustix::fs::statvfs("/dev/shm") {
        let free = st.f_bavail.saturating_mul(st.f_frsize);
        if total as u64 > free {
            return Err(ShmError::Config(format!(
                "the segment needs {total} bytes but /dev/shm has {free} free; lower SHMCOLL_HEAP_BYTES or SHMCOLL_STAGING_BYTES"
            )));
        }
    }
    Ok(())
}

/// Free bytes in /dev/shm, if it can be read.
pub fn shm_free_bytes() -> Option<u64> {
    rustix::fs::statvfs("/dev/shm")
        .ok()
        .map(|st| st.f_bavail.saturating_mul(st.f_frsize))
}
