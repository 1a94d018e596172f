//! CMA: single copies between private buffers, done by the kernel. `cma` reads each block
//! out of the sender (process_vm_readv); `cma-push` writes each block into the receiver
//! (process_vm_writev), which copies from data still hot in the sender's cache. A done
//! round follows either way, so that no buffer is reused while a peer still copies.

use shmcoll_shm::cma::{read_from, write_to, Direction};

use super::Exchange;
use crate::comm::{Comm, Side};
use crate::error::Result;
use crate::transfer::Mover;

/// Copy our own block locally (the kernel is not needed for it).
fn own_block(c: &Comm, x: &Exchange, m: &mut Mover) {
    let me = c.rank;
    let (so, len) = x.send_blocks.block(me);
    let (ro, _) = x.recv_blocks.block(me);
    let store = x.choice.store.resolve(x.recv_total, x.choice.nt_threshold);
    // SAFETY: both blocks are ours and were bounds-checked (and found disjoint) by check_local.
    unsafe { m.copy(x.recv + ro, x.send + so, len, store) };
}

pub(super) fn run(c: &mut Comm, x: &Exchange) -> Result<()> {
    transfer(c, x, Direction::Read)
}

pub(super) fn run_push(c: &mut Comm, x: &Exchange) -> Result<()> {
    transfer(c, x, Direction::Write)
}

fn transfer(c: &mut Comm, x: &Exchange, dir: Direction) -> Result<()> {
    let mut m = Mover::default();
    let mut failure = None;
    // Reading, a rank walks its receive blocks; writing, its send blocks.
    let local = if dir == Direction::Read {
        &x.recv_blocks
    } else {
        &x.send_blocks
    };
    let pieces = x
        .choice
        .order
        .pieces(c.rank, c.size, x.choice.chunk_bytes, |j| local.block(j).1);
    for (j, off, len) in pieces {
        if j == c.rank {
            if off == 0 {
                own_block(c, x, &mut m);
            }
            continue;
        }
        let pid = c.pid_of(j);
        let peer = x.full(j);
        // The peer's range, checked against the buffer it registered (Comm::peer_range):
        // the kernel only checks it against the peer's whole address space.
        let (side, (poff, _)) = match dir {
            Direction::Read => (Side::Send, x.peer_send_block(c, j)),
            Direction::Write => (Side::Recv, x.peer_recv_block(c, j)),
        };
        let remote = match c.peer_range(j, &peer, side, poff.saturating_add(off), len) {
            Ok(r) => r.remote,
            Err(e) => {
                failure.get_or_insert(e);
                continue;
            }
        };
        let r = match dir {
            Direction::Read => {
                let (roff, _) = x.recv_blocks.block(j);
                // SAFETY: the local range is inside our receive block (check_local); the
                // remote one inside rank j's send buffer as it registered it (checked above),
                // and the kernel checks it against j's address space.
                unsafe { read_from(pid, remote, (x.recv + roff + off) as *mut u8, len) }
            }
            Direction::Write => {
                let (soff, _) = x.send_blocks.block(j);
                // SAFETY: the local range is inside our send block (check_local); the remote
                // one inside j's receive buffer as it registered it (checked above), and the
                // kernel checks it against j's address space.
                unsafe { write_to(pid, remote, (x.send + soff + off) as *const u8, len) }
            }
        };
        if let Err(e) = r {
            let call = if dir == Direction::Read {
                "process_vm_readv"
            } else {
                "process_vm_writev"
            };
            failure.get_or_insert(c.cma_error(call, j, e));
        }
    }
    m.fence();
    // Always finish the round, so that peers are not left waiting for us.
    c.done_round(x.seq, failure)
}
