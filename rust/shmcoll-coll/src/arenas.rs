//! Buffers outside the segment that every rank can still reach: those in the arenas of
//! the PMPI library's shared allocator (shmcoll_shm::arena). A rank's buffer in its own
//! arena is described to its peers like a heap buffer (F_SEND_HEAP / F_RECV_HEAP), with
//! an offset tagged by ARENA_TAG that each peer resolves against its mapping of that
//! rank's arena, so every single-copy algorithm serves it unchanged. Tagging is enabled
//! only once every rank has mapped every peer's arena (the library agrees on it over
//! PMPI), so a tagged offset always resolves.

use std::sync::Arc;

use shmcoll_shm::arena::{map_peer_arena, PeerArena};

use crate::error::Result;

/// Marks an offset as "in the describing rank's arena" (segments are far smaller).
pub(crate) const ARENA_TAG: usize = 1 << 62;

/// This rank's arena and its peers', as mapped here.
#[derive(Debug, Default)]
pub struct Arenas {
    me: usize,
    own: Option<(usize, usize)>,
    peers: Vec<Option<Arc<PeerArena>>>,
    enabled: bool,
}

/// Where a rank's arena is: its process, its descriptor there, its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaRef {
    pub pid: u32,
    pub fd: i32,
    pub len: usize,
}

impl Arenas {
    /// Map the peers' arenas (`peers[j]`, None where rank j has none; this rank's entry is
    /// ignored); `own` is this rank's arena (base address, length) if it has one.
    pub fn attach(
        me: usize,
        own: Option<(usize, usize)>,
        peers: &[Option<ArenaRef>],
    ) -> Result<Arenas> {
        let mut mapped = Vec::with_capacity(peers.len());
        for (j, p) in peers.iter().enumerate() {
            mapped.push(match p {
                Some(r) if j != me && r.len > 0 => Some(map_peer_arena(r.pid, r.fd, r.len)?),
                _ => None,
            });
        }
        Ok(Arenas {
            me,
            own,
            peers: mapped,
            enabled: false,
        })
    }

    pub fn enable(&mut self) {
        self.enabled = true;
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The tagged offset of `[addr, addr+len)` if it lies in this rank's arena.
    pub fn offset(&self, addr: usize, len: usize) -> Option<usize> {
        let (base, size) = self.own.filter(|_| self.enabled)?;
        let off = addr.checked_sub(base)?;
        (off.checked_add(len)? <= size).then_some(off | ARENA_TAG)
    }

    /// This process's address of `off..off+len` (untagged) in rank j's arena, if rank j
    /// has an arena mapped here and the range lies inside it (checked arithmetic).
    pub fn try_resolve(&self, j: usize, off: usize, len: usize) -> Option<usize> {
        let (base, size) = if j == self.me {
            self.own?
        } else {
            let a = self.peers.get(j)?.as_ref()?;
            (a.base(), a.len())
        };
        crate::extent::within(off, len, size).then(|| base.saturating_add(off))
    }
}
