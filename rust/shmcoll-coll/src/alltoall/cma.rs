//! CMA: every rank reads its blocks out of its peers' private send buffers with
//! process_vm_readv (one copy, done by the kernel), then a done round.

use super::Exchange;
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::transfer::{resolve_store, Mover};

pub(super) fn run(c: &mut Comm, x: &Exchange) -> Result<()> {
    let store = resolve_store(x.choice.store, x.recv_total, c.cfg.nt_threshold);
    let mut m = Mover::default();
    let mut failure = None;
    for (j, off, len) in x
        .choice
        .order
        .pieces(c.rank, c.size, c.cfg.chunk_bytes, |j| {
            x.recv_blocks.block(j).1
        })
    {
        let (roff, _) = x.recv_blocks.block(j);
        let dst = x.recv + roff + off;
        if j == c.rank {
            // SAFETY: both blocks are ours and were bounds-checked by check_local.
            unsafe { m.copy(dst, x.send + x.send_blocks.block(j).0 + off, len, store) };
            continue;
        }
        let (soff, _) = x.peer_send_block(c, j);
        let remote = x.cores[j].send_addr as usize + soff + off;
        let pid = c.pid_of(j);
        // SAFETY: dst..dst+len is our receive block (check_local); the kernel checks the
        // remote range against rank j's address space.
        let r = unsafe { shmcoll_shm::cma::read_from(pid, remote, dst as *mut u8, len) };
        if let Err(e) = r {
            failure.get_or_insert(Error::Shm(shmcoll_shm::ShmError::Os {
                context: format!("process_vm_readv from rank {j}"),
                source: e,
            }));
        }
    }
    m.fence();
    // Always finish the round, so that peers are not left waiting for us.
    c.done_round(x.seq)?;
    failure.map_or(Ok(()), Err)
}
