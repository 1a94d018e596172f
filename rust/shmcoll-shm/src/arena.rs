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
