//! Selection as data, one vocabulary for every collective: a table of size ranges, each
//! with an ordered list of candidates (an algorithm, and for Alltoall its copy order,
//! store policy, streaming threshold and chunk); the first candidate whose algorithm's
//! restrictions (crate::registry) allow the call wins, then the operation's last resorts.
//!
//! The table a communicator uses for an operation comes from a tuning file (measured by
//! `shmcoll tune`) or from the model (Alltoall's below, the other collectives' in
//! crate::collectives::select), bound when the communicator is created (its process
//! count). Ranges never overlap; Alltoall's sizes in a gap of a measured table fall back
//! to the model (the other collectives' tables cover every size from 0 up to their last
//! range). Candidate lists express buffer kinds without conditions in code: `push` first
//! serves calls whose receive buffers are in the heap, the next candidate the others.
//! Forced choices (keyword or environment) bypass the table but not the restrictions.

use shmcoll_kernels::hw::Machine;

use crate::error::{Error, Result};
use crate::op::CollOp;
use crate::order::Order;
use crate::registry::{Algo, CallFacts, Choice, Forced, Store};

/// One candidate: an algorithm with its parameters (None: the communicator's setting, or
/// for order and store the defaults, `shifted` and `hybrid`). Only Alltoall's algorithms
/// take parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub algo: Algo,
    pub order: Option<Order>,
    pub store: Option<Store>,
    pub nt_threshold: Option<usize>,
    pub chunk_bytes: Option<usize>,
}

impl Candidate {
    /// An algorithm without parameters.
    pub fn of(algo: Algo) -> Candidate {
        Candidate {
            algo,
            order: None,
            store: None,
            nt_threshold: None,
            chunk_bytes: None,
        }
    }

    /// An Alltoall algorithm with its copy order and store policy.
    pub fn new(algo: Algo, order: Order, store: Store) -> Candidate {
        Candidate {
            order: Some(order),
            store: Some(store),
            ..Candidate::of(algo)
        }
    }

    /// The copy order, `shifted` unless the candidate sets one.
    pub fn order(&self) -> Order {
        self.order.unwrap_or(Order::Shifted)
    }

    /// The store policy, `hybrid` unless the candidate sets one.
    pub fn store(&self) -> Store {
        self.store.unwrap_or(Store::Hybrid)
    }

    /// A candidate of `op` as tuning tables name it (the Python bindings' rows, the table
    /// file): an algorithm that serves `op`, with parameters only for Alltoall.
    pub fn from_names(
        op: CollOp,
        algo: &str,
        order: Option<&str>,
        store: Option<&str>,
        nt_threshold: Option<usize>,
        chunk_bytes: Option<usize>,
    ) -> Result<Candidate> {
        let bad = |what: &str, v: &str| Error::InvalidArgument(format!("unknown {what} {v:?}"));
        let a = Algo::parse_or_err(op, algo)?;
        let params =
            order.is_some() || store.is_some() || nt_threshold.is_some() || chunk_bytes.is_some();
        if params && op.family() != CollOp::Alltoall {
            return Err(Error::InvalidArgument(format!(
                "a choice of {} names only an algorithm ({algo:?} has parameters)",
                op.name()
            )));
        }
        Ok(Candidate {
            algo: a,
            order: order
                .map(|o| Order::parse(o).ok_or_else(|| bad("copy order", o)))
                .transpose()?,
            store: store
                .map(|s| Store::parse(s).ok_or_else(|| bad("store policy", s)))
                .transpose()?,
            nt_threshold,
            chunk_bytes,
        })
    }
}

/// Calls of `min_bytes..=max_bytes` bytes (`usize::MAX` = "inf"), the size being the
/// operation's (`CallFacts::bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub min_bytes: usize,
    pub max_bytes: usize,
    pub candidates: Vec<Candidate>,
}

/// Ranges sorted by size, without overlaps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    ranges: Vec<Range>,
}

impl Table {
    /// Check and sort: ranges must be non-empty, must not overlap and must name candidates.
    pub fn new(mut ranges: Vec<Range>) -> Result<Table> {
        for r in &ranges {
            if r.min_bytes > r.max_bytes {
                return Err(Error::InvalidArgument(format!(
                    "range {}..{} is empty",
                    r.min_bytes, r.max_bytes
                )));
            }
            if r.candidates.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "range {}..{} has no candidate",
                    r.min_bytes, r.max_bytes
                )));
            }
        }
        ranges.sort_by_key(|r| r.min_bytes);
        for w in ranges.windows(2) {
            if w[1].min_bytes <= w[0].max_bytes {
                return Err(Error::InvalidArgument(format!(
                    "ranges {}..{} and {}..{} overlap",
                    w[0].min_bytes, w[0].max_bytes, w[1].min_bytes, w[1].max_bytes
                )));
            }
        }
        Ok(Table { ranges })
    }

    /// A table from upper bounds, the other collectives' row format: each row covers the
    /// sizes above the previous row's bound up to its own (from 0). Rows are sorted by
    /// bound; a row that covers nothing (a bound repeated) is dropped, as no size can
    /// reach it, and one without candidates lists `op`'s last resorts, which selection
    /// tries there anyway.
    pub fn from_upper_bounds(op: CollOp, mut rows: Vec<(usize, Vec<Candidate>)>) -> Table {
        rows.sort_by_key(|r| r.0);
        let mut ranges: Vec<Range> = Vec::with_capacity(rows.len());
        let mut lo = Some(0usize);
        for (max_bytes, mut candidates) in rows {
            let Some(min_bytes) = lo.filter(|&l| l <= max_bytes) else {
                continue;
            };
            if candidates.is_empty() {
                candidates = Algo::last_resorts(op)
                    .iter()
                    .map(|&a| Candidate::of(a))
                    .collect();
            }
            ranges.push(Range {
                min_bytes,
                max_bytes,
                candidates,
            });
            lo = max_bytes.checked_add(1);
        }
        Table { ranges }
    }

    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// The range holding `bytes`, if any.
    pub fn find(&self, bytes: usize) -> Option<&Range> {
        let i = self.ranges.partition_point(|r| r.max_bytes < bytes);
        self.ranges.get(i).filter(|r| r.min_bytes <= bytes)
    }
}

/// The tables a communicator selects from for one operation family: the bound one (tuned
/// or model) and what fills its gaps (Alltoall: the model; the other collectives none,
/// their last resorts serve past a table's last range).
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub table: Table,
    pub fallback: Table,
    /// Where `table` came from ("model", or a file path), for `explain`.
    pub source: String,
}

impl Selection {
    /// A model table, which fills the gaps of a tuned one (`gaps`: Alltoall) or not.
    pub fn model(table: Table, gaps: bool) -> Selection {
        Selection {
            fallback: if gaps {
                table.clone()
            } else {
                Table::default()
            },
            table,
            source: "model".into(),
        }
    }

    /// Alltoall's model for `p` ranks with private blocks taking CMA from `cma_from` bytes.
    pub fn alltoall_model(m: &Machine, p: usize, cma_from: usize) -> Selection {
        Selection::model(model_table(m, p, cma_from), true)
    }

    fn range(&self, bytes: usize) -> Option<&Range> {
        self.table.find(bytes).or_else(|| self.fallback.find(bytes))
    }

    /// The candidates for a call of `bytes` (none in a gap of both tables).
    pub fn candidates(&self, bytes: usize) -> &[Candidate] {
        self.range(bytes).map_or(&[], |r| r.candidates.as_slice())
    }

    /// Whether a rank whose size is `bytes` should copy its payload inline before
    /// arriving: `inline` is a candidate that selection can reach for this rank's buffers.
    /// Decided from local facts only, so that every rank can decide before the arrive
    /// round; `in_heap` says whether every buffer of this rank that peers touch is in the
    /// heap, so that a `direct` ahead of `inline` (which then serves it, if the peers'
    /// are too) skips the copy. If the ranks decide differently, `inline` cannot serve
    /// and the next candidate does.
    pub fn wants_inline(&self, bytes: usize, in_heap: bool) -> bool {
        for c in self.candidates(bytes) {
            match c.algo {
                Algo::Inline => return true,
                Algo::Direct if in_heap => return false,
                _ => {}
            }
        }
        false
    }
}

/// The model table for `p` ranks, derived from the machine's caches.
///
/// * Tiny: while a rank's whole payload fits in a few lines (1 KiB, 16 cache lines), the
///   one synchronisation round of `inline` costs less than anything else.
/// * Small: up to a sixth of the L1 data cache per rank (8 KiB for 48 KiB), `inline`'s two
///   copies still run from L1 and cost less than the second round of the single-copy
///   algorithms, except into heap buffers, where `push` writes straight into the
///   receiver's buffer from the sender's hot cache.
/// * Beyond: single copies. `push` (heap receive buffers), `pull` (heap send buffers),
///   `cma-push` between private buffers (the kernel copies from the sender's cache), and
///   `staging` for what remains (in-place calls, no CMA).
/// * Private blocks below `cma_from` (measured on this machine, crate::cma_from): CMA's
///   system call and page pinning cost more than staging's second copy, so `cma-push`
///   leaves those ranges and `staging` serves them; heap buffers keep `push` and `pull`.
///
/// Orders: `shifted`, so that at every step the ranks hit distinct peers. Stores: `hybrid`,
/// streaming once a call writes more than the cache model's threshold (hw::nt_threshold).
/// Staging chunks: [`staging_chunk`].
pub fn model_table(m: &Machine, p: usize, cma_from: usize) -> Table {
    let p = p.max(1);
    let c = |algo| Candidate::new(algo, Order::Shifted, Store::Hybrid);
    let tiny = (1usize << 10) / p;
    let small = (m.l1d_bytes.max(6 << 10) / 6 / p).max(tiny + 1);
    let staging = Candidate {
        chunk_bytes: Some(staging_chunk(m)),
        ..c(Algo::Staging)
    };
    let ranges = vec![
        Range {
            min_bytes: 0,
            max_bytes: tiny,
            candidates: vec![c(Algo::Inline), staging],
        },
        Range {
            min_bytes: tiny + 1,
            max_bytes: small,
            candidates: vec![c(Algo::Push), c(Algo::Pull), c(Algo::Inline), staging],
        },
        Range {
            min_bytes: small + 1,
            max_bytes: usize::MAX,
            candidates: vec![c(Algo::Push), c(Algo::Pull), c(Algo::CmaPush), staging],
        },
    ];
    Table::new(private_below(ranges, cma_from)).expect("the model's ranges are disjoint")
}

/// Staging chunks: a 32nd of the L2, so that double-buffered rings stay cache resident.
pub fn staging_chunk(m: &Machine) -> usize {
    (m.l2_bytes / 32).clamp(16 << 10, 1 << 20)
}

/// `ranges` (sorted, covering every size) without the CMA algorithms for sizes below
/// `cma_from`: a range that holds `cma_from - 1` and lists one is split there. Every
/// model (Alltoall's and the other collectives') takes CMA out this way.
pub(crate) fn private_below(ranges: Vec<Range>, cma_from: usize) -> Vec<Range> {
    let Some(last) = cma_from.checked_sub(1) else {
        return ranges;
    };
    let below_cma = |mut cands: Vec<Candidate>| {
        cands.retain(|c| !matches!(c.algo, Algo::Cma | Algo::CmaPush));
        cands
    };
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges {
        let below = below_cma(r.candidates.clone());
        if r.max_bytes <= last {
            out.push(Range {
                candidates: below,
                ..r
            });
        } else if r.min_bytes <= last && below != r.candidates {
            out.push(Range {
                min_bytes: r.min_bytes,
                max_bytes: last,
                candidates: below,
            });
            // `last < r.max_bytes`, so `last + 1` fits.
            out.push(Range {
                min_bytes: last + 1,
                ..r
            });
        } else {
            out.push(r);
        }
    }
    out
}

/// The choice for a call of `op`, identical on every rank because `facts` and `forced`
/// are. `nt_threshold` and `chunk_bytes` are the communicator's settings, used where the
/// candidate does not set its own.
pub fn select(
    sel: &Selection,
    op: CollOp,
    facts: &CallFacts,
    forced: Forced,
    nt_threshold: usize,
    chunk_bytes: usize,
) -> Result<Choice> {
    let listed = sel.candidates(facts.bytes);
    let cand = match forced.algo {
        Some(a) => {
            if let Some(why) = a.restriction(op, facts) {
                return Err(Error::CannotServe {
                    algo: a.name(),
                    why,
                });
            }
            // Parameters of this algorithm's entry for this size, if the table has one.
            listed
                .iter()
                .find(|c| c.algo == a)
                .copied()
                .unwrap_or_else(|| Candidate::of(a))
        }
        None => listed
            .iter()
            .copied()
            .chain(Algo::last_resorts(op).iter().map(|&a| Candidate::of(a)))
            .find(|c| c.algo.restriction(op, facts).is_none())
            .ok_or_else(|| {
                Error::Unsupported(format!("no algorithm can serve this {} call", op.name()))
            })?,
    };
    Ok(Choice {
        op,
        algo: cand.algo,
        order: forced.order.unwrap_or(cand.order()),
        store: forced.store.unwrap_or(cand.store()),
        nt_threshold: cand.nt_threshold.unwrap_or(nt_threshold),
        chunk_bytes: cand.chunk_bytes.unwrap_or(chunk_bytes).max(64),
        forced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn range(lo: usize, hi: usize, a: Algo) -> Range {
        Range {
            min_bytes: lo,
            max_bytes: hi,
            candidates: vec![Candidate::new(a, Order::Shifted, Store::Hybrid)],
        }
    }

    #[test]
    fn overlaps_and_empty_ranges_are_rejected() {
        assert!(Table::new(vec![range(0, 10, Algo::Inline), range(10, 20, Algo::Push)]).is_err());
        assert!(Table::new(vec![range(5, 4, Algo::Inline)]).is_err());
        let empty = Range {
            min_bytes: 0,
            max_bytes: 1,
            candidates: vec![],
        };
        assert!(Table::new(vec![empty]).is_err());
    }

    #[test]
    fn upper_bounds_become_ranges_from_zero() {
        let c = |a| vec![Candidate::of(a)];
        let t = Table::from_upper_bounds(
            CollOp::Allreduce,
            vec![
                (usize::MAX, c(Algo::Staging)),
                (100, c(Algo::Inline)),
                (100, c(Algo::Direct)),
                (1000, vec![]),
            ],
        );
        let spans: Vec<(usize, usize)> = t
            .ranges()
            .iter()
            .map(|r| (r.min_bytes, r.max_bytes))
            .collect();
        // Sorted, contiguous, the repeated bound (which no size reaches) dropped.
        assert_eq!(spans, [(0, 100), (101, 1000), (1001, usize::MAX)]);
        assert_eq!(t.find(100).unwrap().candidates, c(Algo::Inline));
        // A row without candidates lists the operation's last resorts.
        let last: Vec<Algo> = t
            .find(500)
            .unwrap()
            .candidates
            .iter()
            .map(|c| c.algo)
            .collect();
        assert_eq!(last, Algo::last_resorts(CollOp::Allreduce));
    }

    #[test]
    fn boundaries_gaps_and_inf() {
        let t = Table::new(vec![
            range(100, usize::MAX, Algo::Push),
            range(0, 10, Algo::Inline),
        ])
        .unwrap();
        assert_eq!(t.find(0).unwrap().candidates[0].algo, Algo::Inline);
        assert_eq!(t.find(10).unwrap().candidates[0].algo, Algo::Inline);
        assert!(t.find(11).is_none() && t.find(99).is_none());
        assert_eq!(t.find(100).unwrap().candidates[0].algo, Algo::Push);
        assert_eq!(t.find(usize::MAX).unwrap().candidates[0].algo, Algo::Push);
    }

    proptest! {
        #[test]
        fn find_agrees_with_a_linear_scan(bounds in proptest::collection::btree_set(0usize..10_000, 1..20), probe in 0usize..12_000) {
            // Disjoint ranges from sorted bounds: [b0, b1-1], [b2, b3-1], ... (gaps between).
            let b: Vec<usize> = bounds.into_iter().collect();
            let ranges: Vec<Range> = b.chunks(2).filter(|w| w.len() == 2 && w[1] > w[0])
                .map(|w| range(w[0], w[1] - 1, Algo::Staging)).collect();
            let t = Table::new(ranges.clone()).unwrap();
            let expect = ranges.iter().find(|r| r.min_bytes <= probe && probe <= r.max_bytes);
            prop_assert_eq!(t.find(probe), expect);
        }
    }

    #[test]
    fn model_covers_every_size() {
        let m = shmcoll_kernels::hw::machine();
        for cma_from in [0, 1, 3000, 64 << 10, 1 << 30] {
            for p in 1..20 {
                let t = model_table(m, p, cma_from);
                let mut next = 0usize;
                for r in t.ranges() {
                    assert_eq!(r.min_bytes, next);
                    next = r.max_bytes.wrapping_add(1);
                    // Staging serves every call, so every range can serve every call.
                    assert_eq!(r.candidates.last().unwrap().algo, Algo::Staging);
                }
                assert_eq!(next, 0, "the last range reaches inf");
            }
        }
    }

    /// What the model serves a call of `block` bytes per peer at `p` ranks with, for
    /// private buffers (`heap` false) or heap ones.
    fn served(p: usize, cma_from: usize, block: usize, heap: bool) -> Algo {
        let sel = Selection::alltoall_model(shmcoll_kernels::hw::machine(), p, cma_from);
        let facts = CallFacts {
            nranks: p,
            bytes: block,
            all_inline_written: false,
            all_send_in_heap: heap,
            all_recv_in_heap: heap,
            cma_ok: true,
            ..CallFacts::default()
        };
        select(
            &sel,
            CollOp::Alltoall,
            &facts,
            Forced::default(),
            1 << 20,
            64 << 10,
        )
        .unwrap()
        .algo
    }

    #[test]
    fn private_blocks_take_staging_below_cma_from_and_cma_push_from_it() {
        let m = shmcoll_kernels::hw::machine();
        for p in [2, 4] {
            let small = (m.l1d_bytes.max(6 << 10) / 6 / p).max((1 << 10) / p + 1);
            let cma_from = 100_000;
            for block in [small + 1, 16 << 10, cma_from - 1] {
                assert_eq!(served(p, cma_from, block, false), Algo::Staging, "{block}");
                // Heap buffers keep their single copy.
                assert_eq!(served(p, cma_from, block, true), Algo::Push, "{block}");
            }
            for block in [cma_from, cma_from + 1, 1 << 20, 1 << 30] {
                assert_eq!(served(p, cma_from, block, false), Algo::CmaPush, "{block}");
                assert_eq!(served(p, cma_from, block, true), Algo::Push, "{block}");
            }
            // At or below the model's own start of CMA, the crossover changes nothing.
            for cma_from in [0, 1, small + 1] {
                assert_eq!(
                    model_table(m, p, cma_from),
                    model_table(m, p, 0),
                    "{cma_from}"
                );
                assert_eq!(served(p, cma_from, small + 1, false), Algo::CmaPush);
            }
        }
    }

    proptest! {
        #[test]
        fn the_crossover_only_takes_cma_out_of_private_ranges(cma_from in 0usize..4 << 20, block in 0usize..8 << 20, p in 1usize..9) {
            let m = shmcoll_kernels::hw::machine();
            let with = model_table(m, p, cma_from);
            let without = model_table(m, p, 0);
            let a = &with.find(block).unwrap().candidates;
            let b = &without.find(block).unwrap().candidates;
            let not_cma: Vec<Candidate> = b.iter().copied()
                .filter(|c| !matches!(c.algo, Algo::Cma | Algo::CmaPush)).collect();
            if block < cma_from {
                prop_assert_eq!(a, &not_cma);
            } else {
                prop_assert_eq!(a, b);
            }
            // Staging, which serves every call, ends every range.
            prop_assert_eq!(a.last().map(|c| c.algo), Some(Algo::Staging));
        }
    }
}
