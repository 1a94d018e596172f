//! Selection as data: a table of block-size ranges, each with an ordered list of
//! candidates; the first candidate whose restrictions allow the call wins.
//!
//! The table a communicator uses comes from a tuning file (measured by `shmcoll tune`) or
//! from the model below, bound when the communicator is created (its process count).
//! Ranges never overlap; a block size in a gap of a measured table falls back to the model.
//! Candidate lists express buffer kinds without conditions in code: `push` first serves
//! calls whose receive buffers are in the heap, the next candidate the others. Forced
//! choices (keyword or environment) bypass the table but not the restrictions.

use shmcoll_kernels::hw::Machine;

use crate::error::{Error, Result};
use crate::order::Order;
use crate::registry::{Algo, CallFacts, Choice, Forced, Store};

/// One candidate: an algorithm with its parameters (None: the communicator's setting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub algo: Algo,
    pub order: Order,
    pub store: Store,
    pub nt_threshold: Option<usize>,
    pub chunk_bytes: Option<usize>,
}

impl Candidate {
    pub fn new(algo: Algo, order: Order, store: Store) -> Candidate {
        Candidate {
            algo,
            order,
            store,
            nt_threshold: None,
            chunk_bytes: None,
        }
    }

    /// A candidate as tuning tables name it (the Python bindings' rows, the table file).
    pub fn from_names(
        algo: &str,
        order: &str,
        store: &str,
        nt_threshold: Option<usize>,
        chunk_bytes: Option<usize>,
    ) -> Result<Candidate> {
        let bad = |what: &str, v: &str| Error::InvalidArgument(format!("unknown {what} {v:?}"));
        Ok(Candidate {
            algo: Algo::parse(algo).ok_or_else(|| bad("algorithm", algo))?,
            order: Order::parse(order).ok_or_else(|| bad("copy order", order))?,
            store: Store::parse(store).ok_or_else(|| bad("store policy", store))?,
            nt_threshold,
            chunk_bytes,
        })
    }
}

/// Blocks of `min_block..=max_block` bytes per peer (`usize::MAX` = "inf").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub min_block: usize,
    pub max_block: usize,
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
            if r.min_block > r.max_block {
                return Err(Error::InvalidArgument(format!(
                    "range {}..{} is empty",
                    r.min_block, r.max_block
                )));
            }
            if r.candidates.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "range {}..{} has no candidate",
                    r.min_block, r.max_block
                )));
            }
        }
        ranges.sort_by_key(|r| r.min_block);
        for w in ranges.windows(2) {
            if w[1].min_block <= w[0].max_block {
                return Err(Error::InvalidArgument(format!(
                    "ranges {}..{} and {}..{} overlap",
                    w[0].min_block, w[0].max_block, w[1].min_block, w[1].max_block
                )));
            }
        }
        Ok(Table { ranges })
    }

    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// The range holding `block`, if any.
    pub fn find(&self, block: usize) -> Option<&Range> {
        let i = self.ranges.partition_point(|r| r.max_block < block);
        self.ranges.get(i).filter(|r| r.min_block <= block)
    }
}

/// The tables a communicator selects from: the bound one (tuned or model) and the model
/// for the gaps of a tuned one.
#[derive(Clone, Debug)]
pub struct Selection {
    pub table: Table,
    pub fallback: Table,
    /// Where `table` came from ("model", or a file path), for `explain`.
    pub source: String,
}

impl Selection {
    /// The model for `p` ranks with private blocks taking CMA from `cma_from` bytes.
    pub fn model(m: &Machine, p: usize, cma_from: usize) -> Selection {
        let t = model_table(m, p, cma_from);
        Selection {
            table: t.clone(),
            fallback: t,
            source: "model".into(),
        }
    }

    fn range(&self, block: usize) -> Option<&Range> {
        self.table.find(block).or_else(|| self.fallback.find(block))
    }

    /// Whether a rank whose largest block is `block` should write its inline payload before
    /// arriving: the range it falls in lists `inline` (decided from local sizes only, so
    /// that every rank can decide before the arrive round).
    pub fn wants_inline(&self, block: usize) -> bool {
        self.range(block)
            .is_some_and(|r| r.candidates.iter().any(|c| c.algo == Algo::Inline))
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
            min_block: 0,
            max_block: tiny,
            candidates: vec![c(Algo::Inline), staging],
        },
        Range {
            min_block: tiny + 1,
            max_block: small,
            candidates: vec![c(Algo::Push), c(Algo::Pull), c(Algo::Inline), staging],
        },
        Range {
            min_block: small + 1,
            max_block: usize::MAX,
            candidates: vec![c(Algo::Push), c(Algo::Pull), c(Algo::CmaPush), staging],
        },
    ];
    Table::new(private_below(ranges, cma_from)).expect("the model's ranges are disjoint")
}

/// Staging chunks: a 32nd of the L2, so that double-buffered rings stay cache resident.
pub fn staging_chunk(m: &Machine) -> usize {
    (m.l2_bytes / 32).clamp(16 << 10, 1 << 20)
}

/// `ranges` (sorted, covering every size) without the CMA algorithms for blocks below
/// `cma_from`: a range that holds `cma_from - 1` and lists one is split there.
fn private_below(ranges: Vec<Range>, cma_from: usize) -> Vec<Range> {
    let Some(last) = cma_from.checked_sub(1) else {
        return ranges;
    };
    let below_cma =
        |cands: Vec<Candidate>| without_cma(cands, |c| matches!(c.algo, Algo::Cma | Algo::CmaPush));
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges {
        let below = below_cma(r.candidates.clone());
        if r.max_block <= last {
            out.push(Range {
                candidates: below,
                ..r
            });
        } else if r.min_block <= last && below != r.candidates {
            out.push(Range {
                min_block: r.min_block,
                max_block: last,
                candidates: below,
            });
            // `last < r.max_block`, so `last + 1` fits.
            out.push(Range {
                min_block: last + 1,
                ..r
            });
        } else {
            out.push(r);
        }
    }
    out
}

/// The choice for a call, identical on every rank because `facts` and `forced` are.
/// `nt_threshold` and `chunk_bytes` are the communicator's settings, used where the
/// candidate does not set its own.
pub fn select(
    sel: &Selection,
    facts: &CallFacts,
    forced: Forced,
    nt_threshold: usize,
    chunk_bytes: usize,
) -> Result<Choice> {
    let range = sel.range(facts.max_block);
    let cand = match forced.algo {
        Some(a) => {
            if let Some(why) = a.restriction(facts) {
                return Err(Error::CannotServe {
                    algo: a.name(),
                    why,
                });
            }
            // Parameters of this algorithm's entry for this size, if the table has one.
            range
                .and_then(|r| r.candidates.iter().find(|c| c.algo == a))
                .copied()
                .unwrap_or_else(|| Candidate::new(a, Order::Shifted, Store::Hybrid))
        }
        None => range
            .and_then(|r| {
                r.candidates
                    .iter()
                    .find(|c| c.algo.restriction(facts).is_none())
            })
            .copied()
            .unwrap_or_else(|| Candidate::new(Algo::Staging, Order::Shifted, Store::Hybrid)),
    };
    Ok(Choice {
        algo: cand.algo,
        order: forced.order.unwrap_or(cand.order),
        store: forced.store.unwrap_or(cand.store),
        nt_threshold: cand.nt_threshold.unwrap_or(nt_threshold),
        chunk_bytes: cand.chunk_bytes.unwrap_or(chunk_bytes).max(64),
        forced,
    })
}

/// The candidates of a range of blocks below `cma_from`: `cands` without the CMA
/// algorithms. Staging, which serves every call, stays (every model range lists it), and
/// heap buffers' single copies (push, pull, direct) keep their places.
pub(crate) fn without_cma<T>(mut cands: Vec<T>, is_cma: impl Fn(&T) -> bool) -> Vec<T> {
    cands.retain(|c| !is_cma(c));
    cands
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn range(lo: usize, hi: usize, a: Algo) -> Range {
        Range {
            min_block: lo,
            max_block: hi,
            candidates: vec![Candidate::new(a, Order::Shifted, Store::Hybrid)],
        }
    }

    #[test]
    fn overlaps_and_empty_ranges_are_rejected() {
        assert!(Table::new(vec![range(0, 10, Algo::Inline), range(10, 20, Algo::Push)]).is_err());
        assert!(Table::new(vec![range(5, 4, Algo::Inline)]).is_err());
        let empty = Range {
            min_block: 0,
            max_block: 1,
            candidates: vec![],
        };
        assert!(Table::new(vec![empty]).is_err());
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
            let expect = ranges.iter().find(|r| r.min_block <= probe && probe <= r.max_block);
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
                    assert_eq!(r.min_block, next);
                    next = r.max_block.wrapping_add(1);
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
        let sel = Selection::model(shmcoll_kernels::hw::machine(), p, cma_from);
        let facts = CallFacts {
            nranks: p,
            max_block: block,
            all_inline_written: false,
            all_send_in_heap: heap,
            all_recv_in_heap: heap,
            cma_ok: true,
            ..CallFacts::default()
        };
        select(&sel, &facts, Forced::default(), 1 << 20, 64 << 10)
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
