//! Peers' arenas: memory a peer process allocated in a memfd of its own (the PMPI
//! library's shared allocator puts a C program's large buffers there), mapped into this
//! process so that a collective can copy straight into and out of the peer's buffers, as
//! it does with buffers in the shared heap, instead of going through CMA system calls.
//!
//! The peer's descriptor is fetched with pidfd_getfd (the permission check is the same as
//! for process_vm_readv: ptrace access), and each arena file is mapped once per process,
//! shared by every communicator that includes the peer. A process id, a descriptor
//! number and a length do not name a file for good: a worker that exits and a new one
//! that gets its pid (a driver whose workers come and go) announce the same triple for
//! different memfds. So each request (once per communicator and peer: shmcoll-coll's
//! `Arenas` keeps what it got) fetches the descriptor again, through the communicator's
//! pidfd of the peer where it has one (so that a pid reused since the peer attached fails
//! rather than names another process), and hands out the cached mapping only if it maps
//! the same file (st_dev, st_ino); otherwise the file is mapped anew and replaces the
//! stale entry. A mapping is unmapped only when nothing uses it any more (the last `Arc`
//! goes): a communicator freed early never pulls one from under another. Entries that
//! nothing uses and whose process is gone are dropped when a new arena is mapped, so that
//! a long-lived process does not keep its dead peers' memory.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use memmap2::{Advice, MmapOptions, MmapRaw};
use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};

use crate::error::{Result, ShmError};

/// A peer's arena mapped here.
#[derive(Debug)]
pub struct PeerArena {
    map: MmapRaw,
}

impl PeerArena {
    pub fn base(&self) -> usize {
        self.map.as_mut_ptr() as usize
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }
    /// Lay a peer's shared-array arena out as its owner does (crate::shared_arena): ask for
    /// huge pages on its large blocks, so that the pages this process touches first there
    /// (a receive buffer the owner has not written yet) are huge ones too.
    pub fn advise_as_shared_arrays(&self) {
        crate::shared_arena::advise_huge_pages(&self.map);
    }
}

/// Which file a mapping maps: (st_dev, st_ino). Unique among the files that exist, and the
/// cached mapping keeps its own file in existence, so another file cannot share it. (The
/// kernel's internal tmpfs may number inodes with 32 bits; a collision would take 2^32
/// files created in between, on the same pid, descriptor number and length.)
type FileId = (u64, u64);

/// What a peer announced: its pid, its descriptor number, the arena's length.
type Key = (u32, i32, usize);

#[derive(Debug)]
struct Cached {
    file: FileId,
    arena: Arc<PeerArena>,
}

static MAPPED: Mutex<Option<HashMap<Key, Cached>>> = Mutex::new(None);

fn failed(pid: u32, what: &str, e: impl Into<std::io::Error>) -> ShmError {
    ShmError::os(format!("mapping the arena of process {pid}: {what}"), e)
}

/// Process `pid`'s descriptor `fd`, fetched here (through `pidfd` if given, one opened now
/// if not), and which file it is, checked to hold at least `len` bytes.
fn fetch(
    pid: u32,
    pidfd: Option<BorrowedFd<'_>>,
    fd: i32,
    len: usize,
) -> Result<(OwnedFd, FileId)> {
    let opened;
    let pidfd = match pidfd {
        Some(p) => p,
        None => {
            let p = Pid::from_raw(pid as i32).ok_or_else(|| {
                failed(pid, "pid", std::io::Error::from_raw_os_error(libc::ESRCH))
            })?;
            opened =
                pidfd_open(p, PidfdFlags::empty()).map_err(|e| failed(pid, "pidfd_open", e))?;
            opened.as_fd()
        }
    };
    let theirs = pidfd_getfd(pidfd, fd, PidfdGetfdFlags::empty())
        .map_err(|e| failed(pid, "pidfd_getfd", e))?;
    // The length comes from shared memory, the size from the kernel: map no more than the
    // file holds, since touching a mapped page past its end is a SIGBUS, not an error.
    let st = rustix::fs::fstat(&theirs).map_err(|e| failed(pid, "fstat", e))?;
    check_arena_size(st.st_mode, st.st_size, len).map_err(|reason| {
        ShmError::os(
            format!("mapping the arena of process {pid}: {reason}"),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        )
    })?;
    // Both widen losslessly (their types differ between targets).
    #[allow(clippy::useless_conversion)]
    let id = (u64::from(st.st_dev), u64::from(st.st_ino));
    Ok((theirs, id))
}

/// Whether process `pid` no longer exists (a zombie still does; a pid we may not signal
/// does too).
fn gone(pid: u32) -> bool {
    Pid::from_raw(pid as i32)
        .is_none_or(|p| rustix::process::test_kill_process(p) == Err(rustix::io::Errno::SRCH))
}

/// The arena that process `pid` has open as descriptor `fd`, `len` bytes long, mapped in
/// this process; `pidfd`, if given, is one the caller holds for that process (a
/// communicator's, opened when the peer attached), else one is opened now. Later calls for
/// the same file return the same mapping; the descriptor is fetched and identified on
/// every call (two or three system calls, a few microseconds), so call it once per
/// communicator and peer, not per collective.
pub fn map_peer_arena(
    pid: u32,
    pidfd: Option<BorrowedFd<'_>>,
    fd: i32,
    len: usize,
) -> Result<Arc<PeerArena>> {
    let key = (pid, fd, len);
    let (theirs, file) = fetch(pid, pidfd, fd, len)?;
    let mut guard = MAPPED.lock().unwrap_or_else(|e| e.into_inner());
    let mapped = guard.get_or_insert_with(HashMap::new);
    if let Some(c) = mapped.get(&key).filter(|c| c.file == file) {
        return Ok(c.arena.clone());
    }
    let file_handle = std::fs::File::from(theirs);
    // MAP_NORESERVE: the arena is a large sparse reservation; only what the peer touched
    // exists. The descriptor can be closed once mapped (the mapping keeps the file).
    let map = MmapOptions::new()
        .len(len)
        .no_reserve_swap()
        .map_raw(&file_handle)
        .map_err(|e| failed(pid, "mmap", e))?;
    // A forked child must not keep a window on the peer's memory.
    map.advise(Advice::DontFork)
        .map_err(|e| failed(pid, "madvise(MADV_DONTFORK)", e))?;
    let arena = Arc::new(PeerArena { map });
    // A stale entry under this key (another file: the pid or the descriptor number was
    // reused) is replaced; communicators that hold its mapping keep it until they go.
    mapped.insert(
        key,
        Cached {
            file,
            arena: arena.clone(),
        },
    );
    // Under the lock, a count of 1 means only this table holds the mapping, and nothing
    // can take another reference but through the table.
    mapped.retain(|&(p, _, _), c| Arc::strong_count(&c.arena) > 1 || !gone(p));
    Ok(arena)
}

/// Whether this process can fetch its peers' descriptors (pidfd_getfd, Linux 5.6), tried
/// once on itself; the ptrace permission it needs for a peer is CMA's, probed separately.
pub fn can_map_peers() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| {
        let Some(me) = Pid::from_raw(std::process::id() as i32) else {
            return false;
        };
        let Ok(pidfd) = pidfd_open(me, PidfdFlags::empty()) else {
            return false;
        };
        use std::os::fd::AsRawFd;
        pidfd_getfd(&pidfd, pidfd.as_raw_fd(), PidfdGetfdFlags::empty()).is_ok()
    })
}

/// Why a peer's descriptor with this mode and size cannot back an arena of `len` bytes,
/// if so: it must be a regular file (a memfd) at least `len` bytes long, and `len` must be
/// a length mmap takes.
pub fn check_arena_size(mode: u32, size: i64, len: usize) -> std::result::Result<(), String> {
    if mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!(
            "its descriptor is not a memfd (file type {:#o})",
            mode & libc::S_IFMT
        ));
    }
    if len == 0 || isize::try_from(len).is_err() {
        return Err(format!("announced length {len} is not a mappable length"));
    }
    let size = u64::try_from(size).map_err(|_| format!("its file has a size of {size} bytes"))?;
    if u64::try_from(len).map_or(true, |l| l > size) {
        return Err(format!(
            "announced length {len} exceeds its file's {size} bytes"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const REG: u32 = libc::S_IFREG | 0o600;

    #[test]
    fn an_arena_must_fit_its_file() {
        assert!(check_arena_size(REG, 1 << 20, 1 << 20).is_ok());
        assert!(check_arena_size(REG, 2 << 20, 1 << 20).is_ok());
        let e = check_arena_size(REG, 1 << 20, (1 << 20) + 1).unwrap_err();
        assert!(e.contains("exceeds"), "{e}");
        assert!(check_arena_size(REG, -1, 4096).is_err());
        assert!(check_arena_size(REG, 1 << 20, 0).is_err());
        assert!(check_arena_size(REG, i64::MAX, usize::MAX).is_err());
        assert!(check_arena_size(libc::S_IFIFO | 0o600, 1 << 20, 4096).is_err());
        assert!(check_arena_size(libc::S_IFDIR | 0o700, 1 << 20, 4096).is_err());
    }

    /// A peer that announces more than its memfd holds is refused before anything is
    /// mapped (this process stands in for the peer: pidfd_getfd on oneself is allowed).
    #[test]
    fn an_overlong_announcement_is_refused() {
        use std::os::fd::AsRawFd;
        let fd = rustix::fs::memfd_create("shmcoll-test-arena", rustix::fs::MemfdFlags::CLOEXEC)
            .unwrap();
        rustix::fs::ftruncate(&fd, 1 << 16).unwrap();
        let me = std::process::id();
        let raw = fd.as_raw_fd();
        let err = map_peer_arena(me, None, raw, 1 << 20)
            .unwrap_err()
            .to_string();
        if err.contains("pidfd_") {
            // Kernels before 5.6 have no pidfd_getfd: nothing is mapped either way.
            return;
        }
        assert!(err.contains("exceeds"), "{err}");
        let a = match map_peer_arena(me, None, raw, 1 << 16) {
            Ok(a) => a,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(a.len(), 1 << 16);
    }

    /// The inode of the file mapped at `base` in this process, from /proc/self/maps.
    fn inode_mapped_at(base: usize) -> Option<u64> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let start = usize::from_str_radix(f.next()?.split('-').next()?, 16).ok()?;
            (start == base).then_some(())?;
            f.nth(3)?.parse().ok()
        })
    }

    /// A descriptor number that names another file now than when it was first mapped (a
    /// new process with a reused pid and the same descriptor and length, as a driver meets
    /// when its workers come and go) gets a mapping of that file, never the cached mapping
    /// of the old one; the same file again gets the same mapping. This process stands in
    /// for the peer, and dup2 puts a second memfd under the first one's number.
    #[test]
    fn a_descriptor_reused_for_another_file_is_mapped_anew() {
        use std::os::fd::AsRawFd;
        let len = 1usize << 16;
        let memfd = || {
            let fd =
                rustix::fs::memfd_create("shmcoll-test-reuse", rustix::fs::MemfdFlags::CLOEXEC)
                    .unwrap();
            rustix::fs::ftruncate(&fd, len as u64).unwrap();
            fd
        };
        let ino = |fd: &std::os::fd::OwnedFd| rustix::fs::fstat(fd).unwrap().st_ino as u64;
        let mut first_fd = memfd();
        let (me, raw) = (std::process::id(), first_fd.as_raw_fd());
        let first = match map_peer_arena(me, None, raw, len) {
            Ok(a) => a,
            Err(e) if e.to_string().contains("pidfd_") => return, // no pidfd_getfd
            Err(e) => panic!("{e}"),
        };
        assert_eq!(inode_mapped_at(first.base()), Some(ino(&first_fd)));
        let second_fd = memfd();
        let second_ino = ino(&second_fd);
        rustix::io::dup2(&second_fd, &mut first_fd).unwrap(); // `raw` names the second now
        drop(second_fd);
        let second = map_peer_arena(me, None, raw, len).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            inode_mapped_at(second.base()),
            Some(second_ino),
            "the mapping of the file that descriptor {raw} named before was handed out again"
        );
        assert!(!Arc::ptr_eq(&first, &second));
        // The same file again, fetched through a pidfd the caller holds (a communicator's).
        let pidfd = pidfd_open(Pid::from_raw(me as i32).unwrap(), PidfdFlags::empty()).unwrap();
        let again =
            map_peer_arena(me, Some(pidfd.as_fd()), raw, len).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            Arc::ptr_eq(&second, &again),
            "the same file was mapped twice"
        );
        // The first mapping stays valid for whoever holds it.
        assert_eq!(first.len(), len);
    }
}
