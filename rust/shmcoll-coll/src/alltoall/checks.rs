//! The checks of an Alltoall(v) call: local ones (the caller's blocks against its own
//! buffers, before anything is published) and global ones (every rank's descriptor, the
//! same data on every rank, hence the same verdict everywhere), and the facts selection
//! needs.
//!
//! Every size here comes from a caller or from a peer's descriptor, so it is computed
//! with the checked helpers of crate::extent; the lint below keeps plain arithmetic out.
#![deny(clippy::arithmetic_side_effects)]

use super::{AlltoallCall, Blocks, RawBuf};
use crate::comm::Comm;
use crate::desc::{Arr, Desc, DescCore, F_INLINE, F_IN_PLACE, F_RECV_HEAP, F_SEND_HEAP, F_TINY};
use crate::error::{Error, Result};
use crate::extent;
use crate::registry::{CallFacts, Forced};

pub(crate) fn check_blocks(what: &str, blocks: &Blocks, buf: RawBuf, p: usize) -> Result<()> {
    if let Blocks::Vector { counts, displs } = blocks {
        if counts.len() != p || displs.len() != p {
            return Err(Error::InvalidArgument(format!(
                "{what} counts and displacements need {p} entries each (one per rank), got {} and {}",
                counts.len(),
                displs.len()
            )));
        }
    }
    for j in 0..p {
        let (off, len) = blocks.block(j);
        if !extent::within(off, len, buf.len) {
            return Err(Error::Buffer(format!(
                "{what} block for rank {j} ({len} bytes at byte offset {off}) ends beyond the {}-byte {what} buffer",
                buf.len
            )));
        }
    }
    Ok(())
}

/// Receive blocks must not overlap: two peers would write the same bytes (MPI calls such
/// a call erroneous). Every vector collective checks its receive blocks with this.
pub(crate) fn check_disjoint(blocks: &Blocks, p: usize) -> Result<()> {
    if let Blocks::Vector { .. } = blocks {
        if let Some((a, b)) = extent::first_overlap((0..p).map(|j| blocks.block(j))) {
            return Err(Error::Buffer(format!(
                "receive blocks of ranks {a} and {b} overlap (two ranks would write the same bytes)"
            )));
        }
    }
    Ok(())
}

/// The addresses `[lo, hi)` that the non-empty blocks of a buffer at `base` cover (after
/// `check_blocks`, so every end fits).
fn span(blocks: &Blocks, base: usize, p: usize) -> Option<(usize, usize)> {
    let mut lo = usize::MAX;
    let mut hi = 0;
    for j in 0..p {
        let (o, l) = blocks.block(j);
        if l > 0 {
            let start = extent::end(base, o).unwrap_or(usize::MAX);
            lo = lo.min(start);
            hi = hi.max(extent::end(start, l).unwrap_or(usize::MAX));
        }
    }
    (hi > lo).then_some((lo, hi))
}

impl Comm {
    pub(super) fn check_local(&self, c: &AlltoallCall) -> Result<()> {
        let p = self.size;
        check_blocks("receive", &c.recv_blocks, c.recv, p)?;
        check_disjoint(&c.recv_blocks, p)?;
        if let Some(s) = c.send {
            check_blocks("send", &c.send_blocks, s, p)?;
            if let (Some(a), Some(b)) = (
                span(&c.send_blocks, s.addr, p),
                span(&c.recv_blocks, c.recv.addr, p),
            ) {
                if a.0 < b.1 && b.0 < a.1 {
                    return Err(Error::Buffer(
                        "send and receive buffers overlap; pass shmcoll.IN_PLACE as the send buffer for an in-place exchange".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Check that every pair of ranks agrees on block sizes and that forced choices match,
    /// and that none started a persistent request instead (settled.rs: `extra` is its id,
    /// 0 in a plain call); gather what selection needs.
    pub(super) fn global_facts(
        &self,
        seq: u64,
        cores: &[DescCore],
        vector: bool,
        forced: Forced,
    ) -> Result<CallFacts> {
        let p = self.size;
        let parity = (seq & 1) as usize;
        let enc = forced.encode();
        let mine = cores[self.rank].extra;
        if let Some((j, c)) = cores.iter().enumerate().find(|(_, c)| c.extra != mine) {
            return Err(Error::Mismatch(format!(
                "rank {j} started persistent request {} where rank {} called {}",
                c.extra,
                self.rank,
                if mine == 0 {
                    "Alltoall(v)".to_string()
                } else {
                    format!("request {mine}")
                }
            )));
        }
        if let Some((j, c)) = cores.iter().enumerate().find(|(_, c)| c.forced != enc) {
            return Err(Error::Mismatch(format!(
                "ranks force different choices: rank {} has {}, rank {j} has {}",
                self.rank,
                forced.describe(),
                Forced::decode(c.forced).describe()
            )));
        }
        let mut max_block = 0usize;
        if vector {
            let desc = |j| Desc::slot(&self.seg, j, parity);
            for i in 0..p {
                let di = desc(i);
                for j in 0..p {
                    let s = di.get(Arr::SendCounts, j);
                    let r = desc(j).get(Arr::RecvCounts, i);
                    if s != r {
                        return Err(Error::Mismatch(format!(
                            "Alltoallv counts disagree: rank {i} sends {s} bytes to rank {j}, which expects {r} bytes from it"
                        )));
                    }
                    max_block = max_block.max(s);
                }
            }
        } else {
            let s0 = cores[0].send_bpp;
            for (j, c) in cores.iter().enumerate() {
                if c.send_bpp != s0 || c.recv_bpp != s0 {
                    return Err(Error::Mismatch(format!(
                        "Alltoall block sizes disagree: rank 0 sends {s0} bytes per rank, rank {j} sends {} and expects {}",
                        c.send_bpp, c.recv_bpp
                    )));
                }
            }
            max_block = s0 as usize;
        }
        let first = |flag: u32| cores.iter().position(|c| c.flags & flag == 0);
        Ok(CallFacts {
            nranks: p,
            bytes: max_block,
            all_inline_written: cores.iter().all(|c| c.flags & (F_INLINE | F_TINY) != 0),
            inline_capacity: self.seg.layout().sizes.inline_bytes,
            all_send_in_heap: first(F_SEND_HEAP).is_none(),
            all_recv_in_heap: first(F_RECV_HEAP).is_none(),
            first_send_outside_heap: first(F_SEND_HEAP),
            first_recv_outside_heap: first(F_RECV_HEAP),
            first_outside_heap: None,
            in_place: cores.iter().any(|c| c.flags & F_IN_PLACE != 0),
            cma_ok: self.cma_ok,
        })
    }
}
