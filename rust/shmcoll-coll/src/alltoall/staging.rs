//! Staging: two copies through one ring per (sender, receiver) pair, chunked and pipelined.
//!
//! The ring for j -> r lives in j's staging area. j writes chunks and publishes the running
//! total it produced for r; r copies out what is there and publishes the running total it
//! consumed from j. Totals run over the communicator's whole life, so rings need no reset
//! and a call may leave data in flight that the next one continues. Every rank serves all
//! its peers in one loop (in the chosen order) without blocking on any single one, so any
//! message size works with bounded rings and no deadlock. In-place calls only overwrite a
//! part of block j after that part was sent to j.

use std::sync::atomic::{AtomicU64, Ordering};

use shmcoll_kernels::Store;
use shmcoll_shm::{wait_until, Layout, Segment};

use super::Exchange;
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::transfer::Mover;

/// Bytes of each pair's ring.
pub(crate) fn ring_capacity(l: &Layout) -> usize {
    (l.sizes.staging_bytes / l.sizes.nranks.max(1)) / 64 * 64
}

fn ring(seg: &Segment, owner: usize, dest: usize, cap: usize) -> usize {
    seg.ptr(seg.layout().staging(owner) + dest * cap, cap) as usize
}

/// Copy `n` bytes into the ring at running position `pos`, wrapping at `cap`.
fn ring_write(m: &mut Mover, ring: usize, cap: usize, pos: u64, src: usize, n: usize) {
    let at = (pos % cap as u64) as usize;
    let first = n.min(cap - at);
    // SAFETY: ring..ring+cap is this pair's ring (bounds checked by Segment::ptr) and the
    // range is free (the consumer has released it: produced - consumed + n <= cap); src is
    // inside our send block (check_local).
    unsafe {
        m.copy(ring + at, src, first, Store::Temporal);
        m.copy(ring, src + first, n - first, Store::Temporal);
    }
}

/// Copy `n` bytes out of the ring at running position `pos`, wrapping at `cap`.
fn ring_read(m: &mut Mover, ring: usize, cap: usize, pos: u64, dst: usize, n: usize, store: Store) {
    let at = (pos % cap as u64) as usize;
    let first = n.min(cap - at);
    // SAFETY: the range was published by the producer (pos + n <= produced) and is not
    // rewritten before we publish our consumption; dst is inside our receive block.
    unsafe {
        m.copy(dst, ring + at, first, store);
        m.copy(dst + first, ring, n - first, store);
    }
}

/// Bytes in the ring between the running totals `produced` and `consumed` of the pair
/// with rank j. One of the two is a peer's counter in shared memory: one behind the other,
/// or ahead by more than the ring holds, is corrupt (and would otherwise make a copy run
/// past the ring).
fn in_ring(produced: u64, consumed: u64, cap: usize, j: usize) -> Result<usize> {
    produced
        .checked_sub(consumed)
        .and_then(crate::extent::from_shared)
        .filter(|&n| n <= cap)
        .ok_or_else(|| {
            Error::Corrupt(format!(
                "the ring with rank {j} holds {produced} - {consumed} bytes, not 0 to {cap}"
            ))
        })
}

pub(super) fn run(c: &mut Comm, x: &Exchange) -> Result<()> {
    let (p, me) = (c.size, c.rank);
    let seg = c.seg.clone();
    let cap = ring_capacity(seg.layout());
    // Half a ring per chunk, so that the producer fills one half while the consumer drains
    // the other.
    let chunk = (x.choice.chunk_bytes.min(cap / 2) / 64 * 64).max(64);
    let store = x.choice.store.resolve(x.recv_total, x.choice.nt_threshold);
    let mut m = Mover::default();
    if !x.in_place {
        let (so, len) = x.send_blocks.block(me);
        let (ro, _) = x.recv_blocks.block(me);
        // SAFETY: our own send and receive blocks, bounds-checked and disjoint (check_local).
        unsafe { m.copy(x.recv + ro, x.send + so, len, store) };
    }
    let order: Vec<usize> = x
        .choice
        .order
        .peers(me, p)
        .into_iter()
        .filter(|&j| j != me)
        .collect();
    let mut sdone = vec![0usize; p];
    let mut rdone = vec![0usize; p];
    let mut blocked: Vec<(&AtomicU64, u64)> = Vec::new();
    loop {
        let mut progress = false;
        let mut finished = true;
        blocked.clear();
        for &j in &order {
            let (soff, slen) = x.send_blocks.block(j);
            if sdone[j] < slen {
                let consumed_ctr = seg.consumed(j, me);
                let consumed = consumed_ctr.load(Ordering::Acquire);
                let space = cap - in_ring(c.sent[j], consumed, cap, j)?;
                let want = (slen - sdone[j]).min(chunk);
                if space >= want {
                    ring_write(
                        &mut m,
                        ring(&seg, me, j, cap),
                        cap,
                        c.sent[j],
                        x.send + soff + sdone[j],
                        want,
                    );
                    c.sent[j] += want as u64;
                    sdone[j] += want;
                    seg.publish(seg.produced(me, j), c.sent[j]);
                    progress = true;
                } else {
                    blocked.push((consumed_ctr, consumed));
                }
                finished &= sdone[j] == slen;
            }
            let (roff, rlen) = x.recv_blocks.block(j);
            if rdone[j] < rlen {
                let produced_ctr = seg.produced(j, me);
                let produced = produced_ctr.load(Ordering::Acquire);
                let mut n = in_ring(produced, c.recvd[j], cap, j)?.min(rlen - rdone[j]);
                if x.in_place {
                    n = n.min(sdone[j] - rdone[j]);
                }
                if n > 0 {
                    ring_read(
                        &mut m,
                        ring(&seg, j, me, cap),
                        cap,
                        c.recvd[j],
                        x.recv + roff + rdone[j],
                        n,
                        store,
                    );
                    c.recvd[j] += n as u64;
                    rdone[j] += n;
                    seg.publish(seg.consumed(me, j), c.recvd[j]);
                    progress = true;
                } else {
                    blocked.push((produced_ctr, produced));
                }
                finished &= rdone[j] == rlen;
            }
        }
        if finished {
            break;
        }
        if !progress {
            let (ctr, _) = blocked[0];
            let peer = order
                .iter()
                .copied()
                .find(|&j| {
                    std::ptr::eq(ctr, seg.consumed(j, me)) || std::ptr::eq(ctr, seg.produced(j, me))
                })
                .unwrap_or(me);
            wait_until(
                &seg,
                Some(&c.peers),
                &c.cfg.wait,
                "staging transfer",
                peer,
                ctr,
                || blocked.iter().any(|(a, v)| a.load(Ordering::Acquire) != *v),
            )?;
        }
    }
    m.fence();
    Ok(())
}
