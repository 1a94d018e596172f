//! Buffers outside the segment that every rank can still reach: those in a rank's arena,
//! a memfd its peers map (shmcoll_shm::arena). A rank's buffer in its own arena is
//! described to its peers like a heap buffer (F_SEND_HEAP / F_RECV_HEAP), with an offset
//! tagged by ARENA_TAG that each peer resolves against its mapping of that rank's arena,
//! so every single-copy algorithm serves it unchanged.
//!
//! Two sources of arenas:
//! * The process's shared-array arena (shmcoll_shm::shared_arena, NumPy's arrays), which may
//!   appear after the communicator was created. Its owner announces it in its segment slot
//!   (descriptor and length) before it first describes a buffer in it; a peer maps it on
//!   first sight of a tagged offset and keeps it for the communicator. The mapping is
//!   shared by the process's communicators (shmcoll_shm::arena caches it), but each
//!   communicator asks for it once: the cache then checks that the announced descriptor
//!   is still the file it mapped, since a pid, a descriptor number and a length are
//!   reused by a new process (a driver's next worker) for another memfd. The per-call
//!   path only reads the communicator's slot. Tagging is allowed when every rank said at
//!   the handshake that it can map peers' arenas (pidfd_getfd works) and CMA works between
//!   them (the same ptrace permission), so a tagged offset always resolves.
//! * The PMPI library's arenas, exchanged over PMPI (`attach`), enabled once every rank
//!   mapped every peer's (`enable`).

use std::os::fd::BorrowedFd;
use std::sync::{Arc, OnceLock};

use shmcoll_shm::arena::{map_peer_arena, PeerArena};

use crate::error::Result;

/// Marks an offset as "in the describing rank's arena" (segments are far smaller).
pub(crate) const ARENA_TAG: usize = 1 << 62;

/// Which arena is this rank's.
#[derive(Clone, Copy, Debug, Default)]
enum Own {
    /// None (tagging off).
    #[default]
    Nothing,
    /// The process's shared-array arena, whenever it exists.
    SharedArrays,
    /// Given by the PMPI library: (base address, length).
    Given(usize, usize),
}

/// This rank's arena and its peers', as mapped here.
#[derive(Debug, Default)]
pub struct Arenas {
    me: usize,
    own: Own,
    /// The PMPI library's arena, tagged once `enable`d.
    attached_own: Option<(usize, usize)>,
    peers: Vec<OnceLock<Arc<PeerArena>>>,
}

/// Where a rank's arena is: its process, its descriptor there, its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaRef {
    pub pid: u32,
    pub fd: i32,
    pub len: usize,
}

impl Arenas {
    /// The process's shared-array arena for a communicator of `size` ranks, if every rank
    /// can map its peers' (`reachable`, agreed at the handshake); else no arena.
    pub fn shared_arrays(me: usize, size: usize, reachable: bool) -> Arenas {
        Arenas {
            me,
            own: if reachable {
                Own::SharedArrays
            } else {
                Own::Nothing
            },
            attached_own: None,
            peers: (0..size).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Map the peers' arenas now (`peers[j]`, None where rank j has none; this rank's
    /// entry is ignored); `own` is this rank's arena (base address, length) if it has one;
    /// `pidfd(j, pid)` is the communicator's pidfd of rank j if its process is `pid`.
    /// Tagging starts with `enable`, once every rank attached.
    pub fn attach<'p>(
        me: usize,
        own: Option<(usize, usize)>,
        peers: &[Option<ArenaRef>],
        pidfd: impl Fn(usize, u32) -> Option<BorrowedFd<'p>>,
    ) -> Result<Arenas> {
        let mapped: Vec<OnceLock<Arc<PeerArena>>> = peers.iter().map(|_| OnceLock::new()).collect();
        for (j, p) in peers.iter().enumerate() {
            if let Some(r) = p.filter(|r| j != me && r.len > 0) {
                let _ = mapped[j].set(map_peer_arena(r.pid, pidfd(j, r.pid), r.fd, r.len)?);
            }
        }
        Ok(Arenas {
            me,
            own: Own::Nothing,
            attached_own: own,
            peers: mapped,
        })
    }

    /// Tag buffers in the attached arena from now on (after every rank attached).
    pub fn enable(&mut self) {
        self.own = self
            .attached_own
            .map_or(Own::Nothing, |(b, l)| Own::Given(b, l));
    }

    /// This rank's arena now (base, length), if tagging is on and it has one.
    fn own_range(&self) -> Option<(usize, usize)> {
        match self.own {
            Own::Nothing => None,
            Own::SharedArrays => shmcoll_shm::shared_arena::get().map(|a| (a.base(), a.len())),
            Own::Given(b, l) => Some((b, l)),
        }
    }

    /// Whether this rank's own arena is the process's shared-array arena (which it must
    /// announce before tagging, `Comm::heap_offset`).
    pub fn announces(&self) -> bool {
        matches!(self.own, Own::SharedArrays)
    }

    /// The tagged offset of `[addr, addr+len)` if it lies in this rank's arena.
    pub fn offset(&self, addr: usize, len: usize) -> Option<usize> {
        let (base, size) = self.own_range()?;
        let off = addr.checked_sub(base)?;
        (off.checked_add(len)? <= size).then_some(off | ARENA_TAG)
    }

    /// This process's address of `off..off+len` (untagged) in rank j's arena, if the range
    /// lies inside it (checked arithmetic); rank j's arena is mapped on first use from
    /// `announced()` (its announcement, with the communicator's pidfd of rank j if it has
    /// one), Ok(None) if it announced none. Only that first use asks the process-wide
    /// cache (a few system calls to check the file); later ones read this slot.
    pub fn resolve<'p>(
        &self,
        j: usize,
        off: usize,
        len: usize,
        announced: impl FnOnce() -> Option<(ArenaRef, Option<BorrowedFd<'p>>)>,
    ) -> Result<Option<usize>> {
        let (base, size) = if j == self.me {
            match self.own_range() {
                Some(r) => r,
                None => return Ok(None),
            }
        } else {
            let Some(slot) = self.peers.get(j) else {
                return Ok(None);
            };
            let a = match slot.get() {
                Some(a) => a,
                None => {
                    let Some((r, pidfd)) = announced().filter(|(r, _)| r.len > 0) else {
                        return Ok(None);
                    };
                    let mapped = map_peer_arena(r.pid, pidfd, r.fd, r.len)?;
                    mapped.advise_as_shared_arrays();
                    slot.get_or_init(|| mapped)
                }
            };
            (a.base(), a.len())
        };
        Ok(crate::extent::within(off, len, size).then(|| base.saturating_add(off)))
    }
}
