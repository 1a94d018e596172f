//! Peers' arenas: memory a peer process allocated in a memfd of its own (the PMPI
//! library's shared allocator puts a C program's large buffers there), mapped into this
//! process so that a collective can copy straight into and out of the peer's buffers, as
//! it does with buffers in the shared heap, instead of going through CMA system calls.
//!
//! The peer's descriptor is fetched with pidfd_getfd (the permission check is the same as
//! for process_vm_readv: ptrace access), and each arena is mapped once per process, shared
//! by every communicator that includes the peer. Mappings are never unmapped before the
//! process exits: the peer's arena lives as long as the peer, its size is fixed when it is
//! created, and a communicator freed early must not pull a mapping from under another.

use std::collections::HashMap;
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

type Key = (u32, i32, usize);
static MAPPED: Mutex<Option<HashMap<Key, Arc<PeerArena>>>> = Mutex::new(None);

fn failed(pid: u32, what: &str, e: impl Into<std::io::Error>) -> ShmError {
    ShmError::os(format!("mapping the arena of process {pid}: {what}"), e)
}

/// The arena that process `pid` has open as descriptor `fd`, `len` bytes long, mapped in
/// this process (once: later calls return the same mapping).
pub fn map_peer_arena(pid: u32, fd: i32, len: usize) -> Result<Arc<PeerArena>> {
    let key = (pid, fd, len);
    let mut guard = MAPPED.lock().unwrap_or_else(|e| e.into_inner());
    let mapped = guard.get_or_insert_with(HashMap::new);
    if let Some(a) = mapped.get(&key) {
        return Ok(a.clone());
    }
    let p = Pid::from_raw(pid as i32)
        .ok_or_else(|| failed(pid, "pid", std::io::Error::from_raw_os_error(libc::ESRCH)))?;
    let pidfd = pidfd_open(p, PidfdFlags::empty()).map_err(|e| failed(pid, "pidfd_open", e))?;
    let theirs = pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty())
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
    let file = std::fs::File::from(theirs);
    // MAP_NORESERVE: the arena is a large sparse reservation; only what the peer touched
    // exists. The descriptor can be closed once mapped (the mapping keeps the file).
    let map = MmapOptions::new()
        .len(len)
        .no_reserve_swap()
        .map_raw(&file)
        .map_err(|e| failed(pid, "mmap", e))?;
    // A forked child must not keep a window on the peer's memory.
    map.advise(Advice::DontFork)
        .map_err(|e| failed(pid, "madvise(MADV_DONTFORK)", e))?;
    let a = Arc::new(PeerArena { map });
    mapped.insert(key, a.clone());
    Ok(a)
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
        let err = map_peer_arena(me, raw, 1 << 20).unwrap_err().to_string();
        if err.contains("pidfd_") {
            // Kernels before 5.6 have no pidfd_getfd: nothing is mapped either way.
            return;
        }
        assert!(err.contains("exceeds"), "{err}");
        let a = match map_peer_arena(me, raw, 1 << 16) {
            Ok(a) => a,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(a.len(), 1 << 16);
    }
}
