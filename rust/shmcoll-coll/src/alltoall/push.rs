//! Push: every rank copies its blocks straight into its peers' receive buffers, which live
//! in the shared heap. The fence makes streamed data visible before the done round tells
//! the owner its buffer is complete.

use super::Exchange;
use crate::comm::{Comm, Side};
use crate::error::Result;
use crate::transfer::Mover;

pub(super) fn run(c: &mut Comm, x: &Exchange) -> Result<()> {
    let send_total: usize = (0..c.size).map(|j| x.send_blocks.block(j).1).sum();
    let store = x.choice.store.resolve(send_total, x.choice.nt_threshold);
    let mut m = Mover::default();
    let pieces = x
        .choice
        .order
        .pieces(c.rank, c.size, x.choice.chunk_bytes, |j| {
            x.send_blocks.block(j).1
        });
    let mut failure = None;
    for (j, off, len) in pieces {
        let (soff, _) = x.send_blocks.block(j);
        let dst = if j == c.rank {
            x.recv + x.recv_blocks.block(j).0 + off
        } else {
            let (roff, _) = x.peer_recv_block(c, j);
            match x.peer_local(c, j, Side::Recv, roff.saturating_add(off), len) {
                Ok(a) => a,
                Err(e) => {
                    failure.get_or_insert(e);
                    continue;
                }
            }
        };
        // SAFETY: dst is the block of rank j's heap receive buffer reserved for us (checked
        // by Comm::peer_range against the buffer j registered and the heap; blocks of
        // different senders are disjoint, checked by j), src our own send block (check_local).
        unsafe { m.copy(dst, x.send + soff + off, len, store) };
    }
    m.fence();
    c.done_round(x.seq, failure)
}
