//! Pull: every rank copies its blocks straight out of its peers' send buffers, which live
//! in the shared heap. One copy per byte; a done round keeps send buffers untouched until
//! every reader has finished.

use super::Exchange;
use crate::comm::{Comm, Side};
use crate::error::Result;
use crate::transfer::Mover;

pub(super) fn run(c: &mut Comm, x: &Exchange) -> Result<()> {
    let store = x.choice.store.resolve(x.recv_total, x.choice.nt_threshold);
    let mut m = Mover::default();
    let pieces = x
        .choice
        .order
        .pieces(c.rank, c.size, x.choice.chunk_bytes, |j| {
            x.recv_blocks.block(j).1
        });
    let mut failure = None;
    for (j, off, len) in pieces {
        let (roff, _) = x.recv_blocks.block(j);
        let src = if j == c.rank {
            x.send + x.send_blocks.block(j).0 + off
        } else {
            let (soff, _) = x.peer_send_block(c, j);
            let at = soff.saturating_add(off);
            match x.peer_local(c, j, Side::Send, at, len) {
                Ok(a) => a,
                Err(e) => {
                    failure.get_or_insert(e);
                    continue;
                }
            }
        };
        // SAFETY: src is in rank j's heap send buffer (checked by Comm::peer_range against
        // the buffer j registered and the heap) or in our own send buffer; j does not write
        // it before the done round; dst is our own receive block (check_local).
        unsafe { m.copy(x.recv + roff + off, src, len, store) };
    }
    m.fence();
    c.done_round(x.seq, failure)
}
