//! Selection tables of the collectives: per operation family, ranges of bytes (the
//! largest contribution of a rank) each with an ordered list of algorithms; the first that
//! can serve the call wins (selection as data, as for Alltoall in crate::select).

use shmcoll_kernels::hw::Machine;

use super::{CollAlgo, CollOp, TINY};

/// One row: contributions of up to `max_bytes` (inclusive) try `candidates` in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollRow {
    pub max_bytes: usize,
    pub candidates: Vec<CollAlgo>,
}

/// Rows sorted by `max_bytes`; the last should reach `usize::MAX`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollTable {
    rows: Vec<CollRow>,
}

impl CollTable {
    pub fn new(mut rows: Vec<CollRow>) -> CollTable {
        rows.sort_by_key(|r| r.max_bytes);
        CollTable { rows }
    }

    pub fn rows(&self) -> &[CollRow] {
        &self.rows
    }

    /// Candidates for a call whose largest contribution is `bytes` (none past the last row:
    /// the caller then falls back to direct, then staging).
    pub fn candidates(&self, bytes: usize) -> &[CollAlgo] {
        self.rows
            .iter()
            .find(|r| bytes <= r.max_bytes)
            .map_or(&[], |r| r.candidates.as_slice())
    }

    /// Whether a rank contributing `bytes` should copy them inline before arriving: when
    /// `inline` is a candidate that selection can reach for this rank's buffers (`direct`
    /// before it serves heap buffers, so those skip the copy). Decided per rank before the
    /// arrive; if the ranks decide differently, `inline` cannot serve and the next
    /// candidate does.
    pub fn wants_inline(&self, bytes: usize, in_heap: bool) -> bool {
        for a in self.candidates(bytes) {
            match a {
                CollAlgo::Inline => return true,
                CollAlgo::Direct if in_heap => return false,
                _ => {}
            }
        }
        false
    }
}

/// The model table of an operation family for `p` ranks.
///
/// `inline` costs two copies (into the segment, out of it) but a single synchronisation
/// round; `direct` one copy but a done round (two for in-place Reduce_scatter). While the
/// copies run from L1 the round dominates: inline up to a 32nd of the L1 data cache of
/// total traffic per rank. Reductions read every rank's contribution on every rank under
/// `inline` (p times the contribution), so their limit is divided by p. Beyond: `direct`
/// for heap buffers, `inline` for private ones while CMA's system calls cost more than
/// the second copy, then `cma`, and `staging` where peers' buffers cannot be reached.
pub fn model_coll_table(family: CollOp, m: &Machine, p: usize, inline_bytes: usize) -> CollTable {
    let p = p.max(1);
    let l1 = m.l1d_bytes.max(16 << 10);
    let reads_all = match family {
        CollOp::Allreduce | CollOp::Reduce | CollOp::ReduceScatterBlock => p,
        // Every rank receives every contribution.
        CollOp::Allgather | CollOp::Gather => p,
        _ => 1,
    };
    use CollAlgo::{Cma, Direct, Inline, Staging};
    let limit = (l1 / 32 / reads_all).max(TINY).min(inline_bytes);
    // A CMA transfer costs a system call (about a microsecond) per peer and piece, so
    // private buffers stay inline for longer: up to a sixth of L1 per rank.
    let cma_from = (l1 / 6).max(limit).min(inline_bytes);
    CollTable::new(vec![
        CollRow {
            max_bytes: limit,
            candidates: vec![Inline, Direct, Cma, Staging],
        },
        CollRow {
            max_bytes: cma_from,
            candidates: vec![Direct, Inline, Cma, Staging],
        },
        CollRow {
            max_bytes: usize::MAX,
            candidates: vec![Direct, Cma, Staging],
        },
    ])
}
