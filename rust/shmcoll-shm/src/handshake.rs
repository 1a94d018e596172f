//! The first two rounds every rank runs after mapping a segment.
//!
//! Round 1: publish the pid and wait until every rank has mapped the segment; rank 0 then
//! unlinks the name, so that from here on a crash leaves nothing in /dev/shm.
//! Round 2: let the other ranks, and no more processes than Yama requires, trace this one
//! (crate::ptrace: it needs every rank's pid), and wait until every rank has, so that no
//! probe runs before its target allowed it.
//! Round 3: probe Cross Memory Attach (read the next rank's probe word) and agree on
//! whether every rank can use it.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cma;
use crate::error::Result;
use crate::ptrace;
use crate::segment::Segment;
use crate::wait::{wait_counter, Peers, WaitConfig};

/// Sequence numbers used by the handshake; collectives start after them.
pub const SEQ_ATTACHED: u64 = 1;
pub const SEQ_TRACEABLE: u64 = 2;
pub const SEQ_PROBED: u64 = 3;
pub const FIRST_CALL_SEQ: u64 = 4;

/// What the handshake learned.
#[derive(Debug)]
pub struct Attached {
    pub peers: Peers,
    /// Every rank can read every other rank's memory with process_vm_readv.
    pub cma_ok: bool,
    /// What this rank declared so that its peers may trace it.
    pub tracer: ptrace::Tracer,
}

/// What a rank announces of its process's shared-array arena (crate::shared_arena) in its
/// Info line: 1 + the arena's descriptor and its length, or (0, 0) when it has none. A
/// segment whose announcement is not this any more (the arena was created since) is not
/// taken again by a later communicator (shmcoll-coll's pool.rs).
pub fn arena_announcement() -> (u32, u64) {
    crate::shared_arena::get().map_or((0, 0), |a| (a.raw_fd() as u32 + 1, a.len() as u64))
}

pub fn handshake(seg: &Segment, rank: usize, cfg: &WaitConfig) -> Result<Attached> {
    let p = seg.layout().sizes.nranks;
    assert!(rank < p, "rank {rank} out of range for {p} ranks");
    seg.pid_of(rank)
        .store(std::process::id(), Ordering::Relaxed);
    let probe = cma::probe_word() as *const AtomicU64 as u64;
    seg.probe_addr_of(rank).store(probe, Ordering::Relaxed);
    // Announce this process's shared-array arena, if it has one, for peers to map (one
    // created later is announced when a buffer in it is first described), and whether this
    // process can map its peers' arenas.
    let (fd, len) = arena_announcement();
    seg.arena_fd_of(rank).store(fd, Ordering::Relaxed);
    seg.arena_len_of(rank).store(len, Ordering::Relaxed);
    let can_map = if crate::arena::can_map_peers() { 1 } else { 2 };
    seg.arena_ok_of(rank).store(can_map, Ordering::Relaxed);
    seg.publish(seg.arrive_seq(rank, SEQ_ATTACHED), SEQ_ATTACHED);
    for r in 0..p {
        wait_counter(
            seg,
            None,
            cfg,
            "attach",
            r,
            seg.arrive_seq(r, SEQ_ATTACHED),
            SEQ_ATTACHED,
        )?;
    }
    if rank == 0 {
        seg.unlink()?;
    }
    let peers = Peers::new(seg, rank);

    let pids: Vec<u32> = (0..p).map(|r| peers.pid(r)).collect();
    let tracer = ptrace::allow_ranks(&pids);
    seg.publish(seg.arrive_seq(rank, SEQ_TRACEABLE), SEQ_TRACEABLE);
    for r in 0..p {
        wait_counter(
            seg,
            Some(&peers),
            cfg,
            "attach",
            r,
            seg.arrive_seq(r, SEQ_TRACEABLE),
            SEQ_TRACEABLE,
        )?;
    }

    let next = (rank + 1) % p;
    let ok = next == rank || {
        let addr = seg.probe_addr_of(next).load(Ordering::Relaxed) as usize;
        cma::probe(peers.pid(next), addr)
    };
    seg.cma_ok_of(rank)
        .store(if ok { 1 } else { 2 }, Ordering::Relaxed);
    seg.publish(seg.arrive_seq(rank, SEQ_PROBED), SEQ_PROBED);
    let mut all_ok = true;
    for r in 0..p {
        wait_counter(
            seg,
            Some(&peers),
            cfg,
            "attach",
            r,
            seg.arrive_seq(r, SEQ_PROBED),
            SEQ_PROBED,
        )?;
        all_ok &= seg.cma_ok_of(r).load(Ordering::Relaxed) == 1;
    }
    Ok(Attached {
        peers,
        cma_ok: all_ok,
        tracer,
    })
}
