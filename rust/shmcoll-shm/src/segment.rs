//! One mapped POSIX shared-memory object: creation (mode 0600, unguessable name), opening,
//! unlinking, and bounds-checked typed access to its bytes.
//!
//! All raw-pointer work on the mapping is confined to this module: everything above it gets
//! `&AtomicU64`/`&AtomicU32` references or raw pointers whose ranges were checked here.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};
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
/// Offset, inside the header page, of the crossover the creator publishes (own line).
const CMA_FROM_OFF: usize = 2048;

/// A mapped segment. Dropping it unmaps; the creator also unlinks if nobody did.
#[derive(Debug)]
pub struct Segment {
    map: memmap2::MmapRaw,
    fd: OwnedFd,
    name: String,
    layout: Layout,
    is_creator: bool,
    unlinked: AtomicBool,
    /// The process that created or opened it: a child of fork inherits the mapping, but
    /// what this process does to the shared object (unlink it, punch out pages) is the
    /// parent's to do (`in_owner_process`).
    owner_pid: u32,
}

impl Segment {
    /// Create a new segment sized for `sizes` under an unguessable name.
    pub fn create(sizes: Sizes) -> Result<Segment> {
        if sizes.nranks == 0 {
            return Err(ShmError::Config(
                "a communicator needs at least one rank".into(),
            ));
        }
        let layout = Layout::new(sizes).ok_or_else(|| {
            ShmError::Config(format!(
                "a segment for {sizes:?} would not fit the address space; lower SHMCOLL_HEAP_BYTES or SHMCOLL_STAGING_BYTES"
            ))
        })?;
        check_space(layout.total)?;
        let name = fresh_name()?;
        let fd = shm::open(
            name.as_str(),
            shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| ShmError::os(format!("shm_open({name})"), e))?;
        let seg = (|| {
            // Exactly 0600 whatever the umask: openers refuse anything else.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))
                .map_err(|e| ShmError::os(format!("fchmod({name}, 0600)"), e))?;
            rustix::fs::ftruncate(&fd, layout.total as u64)
                .map_err(|e| ShmError::os(format!("ftruncate({name}, {})", layout.total), e))?;
            // The small shared regions (header, control lines, descriptors, inline areas,
            // ring counters) exist before anyone maps them, whatever other jobs take from
            // /dev/shm later (check_space saw the free space, not what concurrent jobs will
            // use). Each rank backs its own staging rings when it joins, from its own CPU so
            // that their pages lie on its NUMA node (Comm::join), and the heap is backed
            // block by block as it is handed out (`back`).
            back(&fd, 0, layout.staging(0)).map_err(|e| {
                ShmError::os(
                    format!(
                        "backing the {} bytes of control and inline regions of {name} in /dev/shm; free space there",
                        layout.staging(0)
                    ),
                    e,
                )
            })?;
            let map = map_fd(&fd, layout.total, &name)?;
            Ok(Segment {
                map,
                fd,
                name: name.clone(),
                layout,
                is_creator: true,
                owner_pid: std::process::id(),
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
    ///
    /// The name is opened without following a symlink, and the file must be a regular
    /// file of this user that nobody else may read or write (`create` makes it 0600):
    /// anything else was not made by a rank of this job, and mapping it would hand our
    /// control lines to whoever made it.
    pub fn open(name: &str) -> Result<Segment> {
        let bad = |reason: String| ShmError::BadSegment {
            name: name.to_string(),
            reason,
        };
        let path = shm_path(name).ok_or_else(|| {
            bad(format!(
                "not a segment name (expected /{NAME_PREFIX}... without other slashes)"
            ))
        })?;
        let fd = rustix::fs::open(
            path.as_str(),
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| match e {
            // O_NOFOLLOW on a symlink.
            rustix::io::Errno::LOOP => bad("is a symbolic link; refusing to follow it".into()),
            e => ShmError::os(format!("open({path})"), e),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| ShmError::os(format!("fstat({path})"), e))?;
        check_owner_and_mode(st.st_mode, st.st_uid, rustix::process::geteuid().as_raw())
            .map_err(bad)?;
        let len = usize::try_from(st.st_size)
            .map_err(|_| bad(format!("has a size of {} bytes", st.st_size)))?;
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
        let field = |v: u64| usize::try_from(v).ok();
        let sizes = (|| {
            Some(Sizes {
                nranks: field(h.nranks).filter(|&n| n > 0)?,
                inline_bytes: field(h.inline_bytes)?,
                staging_bytes: field(h.staging_bytes)?,
                heap_bytes: field(h.heap_bytes)?,
            })
        })();
        let layout = sizes.and_then(Layout::new).ok_or_else(|| {
            bad(format!(
                "the header's sizes (nranks {}, inline {}, staging {}, heap {}) give no valid layout",
                h.nranks, h.inline_bytes, h.staging_bytes, h.heap_bytes
            ))
        })?;
        // The whole layout must lie inside the file: an access past its end is a SIGBUS.
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
            owner_pid: std::process::id(),
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

    /// Publish the block size from which private buffers take CMA (shmcoll-coll's
    /// cma_from), for every rank to select from the same value. Only the creator calls
    /// this, before it shares the segment's name; stored + 1, so that 0 is "none".
    pub fn publish_cma_from(&self, bytes: u64) {
        debug_assert!(self.is_creator);
        let v = bytes.checked_add(1).unwrap_or(0);
        self.atomic_u64(CMA_FROM_OFF).store(v, Ordering::Release);
    }

    /// What the creator published with `publish_cma_from`, if anything.
    pub fn cma_from(&self) -> Option<u64> {
        self.atomic_u64(CMA_FROM_OFF)
            .load(Ordering::Acquire)
            .checked_sub(1)
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

    /// Whether this is the process that created or opened the segment (not a child of
    /// fork, which shares the object with its parent and must leave it as it is).
    pub fn in_owner_process(&self) -> bool {
        std::process::id() == self.owner_pid
    }

    /// Give `[off, off+len)` pages of /dev/shm now (fallocate), or fail: a page of the
    /// sparse segment that tmpfs cannot back when it is first touched kills the process with
    /// SIGBUS, where a refused allocation can still be reported. Pages that already exist
    /// are kept as they are (contents included). Where the filesystem cannot reserve
    /// (EOPNOTSUPP), pages are left to be backed on first touch, as before.
    pub fn back(&self, off: usize, len: usize) -> std::io::Result<()> {
        let inside = off
            .checked_add(len)
            .is_some_and(|end| end <= self.layout.total);
        if !inside {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        back(&self.fd, off, len)
    }

    /// Back `[off, off+len)` with pages now, so that the first collectives do not pay a
    /// page fault per 4 KiB of staging ring (a chunk into fresh pages costs several times
    /// one into backed pages).
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
        // A child of fork drops its inherited copy of the parent's segment: the name and
        // the object stay the parent's.
        if self.is_creator && self.in_owner_process() {
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

/// Where the kernel keeps POSIX shared-memory objects (what shm_open opens).
const SHM_DIR: &str = "/dev/shm";

/// The path of segment `name` ("/shmcoll-..."), or None if the name could reach outside
/// /dev/shm or is not one of ours.
fn shm_path(name: &str) -> Option<String> {
    let base = name.strip_prefix('/').unwrap_or(name);
    let ok = base.starts_with(NAME_PREFIX) && !base.contains(['/', '\0']);
    ok.then(|| format!("{SHM_DIR}/{base}"))
}

/// Why a file with this mode and owner cannot be a segment of this user's job, if so:
/// a segment is a regular file owned by `euid` with no access for group or others.
pub fn check_owner_and_mode(mode: u32, uid: u32, euid: u32) -> std::result::Result<(), String> {
    let kind = mode & libc::S_IFMT;
    if kind != libc::S_IFREG {
        return Err(format!("is not a regular file (file type {kind:#o})"));
    }
    if uid != euid {
        return Err(format!(
            "is owned by uid {uid}, not by this process's uid {euid}; refusing to map it"
        ));
    }
    let perm = mode & 0o7777;
    if perm & 0o077 != 0 {
        return Err(format!(
            "has mode {perm:04o}, which lets group or others access it (segments are created 0600); refusing to map it"
        ));
    }
    Ok(())
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
/// Other jobs may take the space after this check, so it is not the guarantee: the fixed
/// regions are backed at creation and heap blocks when they are handed out (`back`).
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

/// fallocate `[off, off+len)` of `fd` (no flags: allocate, keep contents and size); see
/// `Segment::back`. On an error, the pages of the range may be partly allocated.
fn back(fd: &OwnedFd, off: usize, len: usize) -> std::io::Result<()> {
    // tmpfs gives up (EINTR) when a signal arrives and undoes what that call allocated;
    // chunks keep what earlier ones did, so that a periodic signal (a profiler's timer)
    // cannot keep a large block from ever being backed. The handler has run by the time
    // the call returns, so a retry starts afresh.
    const CHUNK: usize = 64 << 20;
    let end = off
        .checked_add(len)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut at = off;
    while at < end {
        let n = (end - at).min(CHUNK);
        let mut tries = 0;
        loop {
            match rustix::fs::fallocate(
                fd,
                rustix::fs::FallocateFlags::empty(),
                at as u64,
                n as u64,
            ) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) if tries < 100 => tries += 1,
                // A filesystem that cannot reserve: pages are backed on first touch.
                Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        at += n;
    }
    Ok(())
}

/// Free bytes in /dev/shm, if it can be read.
pub fn shm_free_bytes() -> Option<u64> {
    rustix::fs::statvfs("/dev/shm")
        .ok()
        .map(|st| st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_regular_files_of_this_user_pass() {
        let reg = libc::S_IFREG;
        assert!(check_owner_and_mode(reg | 0o600, 1000, 1000).is_ok());
        assert!(check_owner_and_mode(reg | 0o400, 1000, 1000).is_ok());
        let e = check_owner_and_mode(reg | 0o600, 1001, 1000).unwrap_err();
        assert!(e.contains("owned by uid 1001"), "{e}");
        for mode in [0o640, 0o604, 0o660, 0o666, 0o610, 0o601] {
            let e = check_owner_and_mode(reg | mode, 1000, 1000).unwrap_err();
            assert!(e.contains(&format!("{mode:04o}")), "{e}");
        }
        for kind in [libc::S_IFDIR, libc::S_IFLNK, libc::S_IFIFO, libc::S_IFSOCK] {
            let e = check_owner_and_mode(kind | 0o600, 1000, 1000).unwrap_err();
            assert!(e.contains("not a regular file"), "{e}");
        }
    }

    /// The fixed regions have their pages from creation (a job that starts has what its
    /// calls need), and `back` gives a heap range its pages, inside the segment only.
    #[test]
    fn fixed_regions_are_backed_at_creation_and_heap_ranges_on_request() {
        let seg = Segment::create(Sizes {
            nranks: 2,
            inline_bytes: 4096,
            staging_bytes: 256 << 10,
            heap_bytes: 4 << 20,
        })
        .unwrap();
        let resident = || rustix::fs::fstat(&seg.fd).unwrap().st_blocks as usize * 512;
        let l = *seg.layout();
        assert!(
            resident() >= l.staging(0),
            "{} < {}",
            resident(),
            l.staging(0)
        );
        seg.back(l.staging(1), l.sizes.staging_bytes).unwrap();
        let before = resident();
        seg.back(l.heap(1), 1 << 20).unwrap();
        assert!(resident() >= before + (1 << 20));
        seg.back(l.heap(1), 1 << 20).unwrap(); // backed pages stay as they are
        for (off, len) in [(l.total - 4096, 8192), (usize::MAX, 2), (l.total + 4096, 0)] {
            let e = seg.back(off, len).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        }
        seg.unlink().unwrap();
    }

    #[test]
    fn names_stay_inside_dev_shm() {
        assert_eq!(
            shm_path("/shmcoll-0-1-ab").as_deref(),
            Some("/dev/shm/shmcoll-0-1-ab")
        );
        assert_eq!(
            shm_path("shmcoll-0-1-ab").as_deref(),
            Some("/dev/shm/shmcoll-0-1-ab")
        );
        for bad in [
            "/shmcoll-0/../../etc/passwd",
            "/../shmcoll-0",
            "/other",
            "",
            "/",
            "/shmcoll-\0x",
        ] {
            assert_eq!(shm_path(bad), None, "{bad:?}");
        }
    }
}
