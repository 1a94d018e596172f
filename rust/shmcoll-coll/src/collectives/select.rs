//! Selection tables of the collectives: per operation family, ranges of bytes (the
//! largest contribution of a rank) each with an ordered list of algorithms; the first that
//! can serve the call wins (selection as data, as for Alltoall in crate::select).

use shmcoll_kernels::hw::Machine;

use super::vocab::{CollAlgo, CollFacts, CollOp};
use crate::desc::LINE_PAYLOAD;

/// The largest payload `inline` carries in the arrive line itself.
pub(crate) const TINY: usize = LINE_PAYLOAD;

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

    /// The algorithm selection takes for a call with these facts: the first of the row's
    /// candidates, then `direct`, `cma` and `staging`, that can serve it.
    pub fn choose(&self, f: &CollFacts) -> Option<CollAlgo> {
        self.candidates(f.bytes)
            .iter()
            .chain(&[CollAlgo::Direct, CollAlgo::Cma, CollAlgo::Staging])
            .copied()
            .find(|a| a.restriction(f).is_none())
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
/// total traffic per rank (half of it with more ranks than CPUs). Allreduce, Reduce,
/// Allgather and Gather read every peer's contribution on a rank under `inline` (p - 1
/// times the contribution), so their limit is divided by p - 1; Reduce_scatter reads a
/// block of each, one contribution's worth. Beyond: `direct` for heap buffers, `inline`
/// for private ones while CMA's system calls cost more than the second copy, then `cma`,
/// and `staging` where peers' buffers cannot be reached.
/// With more ranks than CPUs, private buffers of Bcast and of the reductions take the
/// pipelined `staging` before `cma` up to a share of the L2 (see below). And below
/// `cma_from` (measured on this machine, crate::cma_from) CMA's system calls and page
/// pinning cost more than staging's second copy: `cma` leaves those rows.
pub fn model_coll_table(
    family: CollOp,
    m: &Machine,
    p: usize,
    inline_bytes: usize,
    staging_bytes: usize,
    cma_from: usize,
) -> CollTable {
    let p = p.max(1);
    let l1 = m.l1d_bytes.max(16 << 10);
    // Counted in contributions read from peers: a rank's own inline copy is still in its
    // cache, so counting it would stop inline before it stops paying (the inline and
    // direct figures are in docs/results-collectives.md).
    let reads_all = match family {
        CollOp::Allreduce | CollOp::Reduce => p - 1,
        // Every rank receives every peer's contribution.
        CollOp::Allgather | CollOp::Gather => p - 1,
        // A rank reads only its own block of each contribution: one contribution's worth.
        _ => 1,
    }
    .max(1);
    use CollAlgo::{Cma, Direct, Inline, Staging};
    let oversubscribed = p > m.logical_cpus.max(1);
    // With more ranks than CPUs a round is a context switch on each CPU (with the caches
    // it leaves cold), not a cache line's trip, so inline pays for 16 times more copying.
    let share = if oversubscribed { 2 } else { 32 };
    let limit = match family {
        // One-sided and streamed (crate::one_sided): the root leaves once its payload is
        // out, where direct's round costs a context switch on each CPU, so with more
        // ranks than CPUs heap buffers too stay inline to the whole inline area, and
        // private ones too, ahead of CMA and the staging pipeline. With a CPU each,
        // direct's single copy wins once the payload outgrows a share of L1.
        CollOp::Bcast if oversubscribed => inline_bytes,
        _ => (l1 / share / reads_all).max(TINY).min(inline_bytes),
    };
    // A CMA transfer costs a system call (about a microsecond) per peer and piece, so
    // private buffers stay inline for longer: up to a sixth of L1 per rank. A Bcast's
    // inline payload is one-sided and, above 8 KiB, streamed (crate::one_sided): its two
    // copies overlap, which matches the split CMA copy (direct::bcast) up to a third of
    // L1 and loses beyond it, where the two copies no longer stay in cache. (With more
    // ranks than CPUs, `limit` is already the whole inline area.)
    let private_inline = match family {
        CollOp::Bcast => (l1 / 3).max(limit).min(inline_bytes),
        _ => (l1 / 6).max(limit).min(inline_bytes),
    };
    let mut rows = vec![CollRow {
        max_bytes: limit,
        candidates: vec![Inline, Direct, Cma, Staging],
    }];
    // Empty when inline already reaches the end of private buffers' inline row (Scatter and Bcast, oversubscribed).
    if private_inline > limit {
        rows.push(CollRow {
            max_bytes: private_inline,
            candidates: vec![Direct, Inline, Cma, Staging],
        });
    }
    // With more ranks than CPUs, private buffers go through the staging pipeline (each
    // contributor copies chunks into its area while the readers copy them out) before
    // CMA, up to a share of the L2 and within the staging area (so that a writer never
    // waits for a slot): a writer and a reader that share a core then meet each chunk in
    // its cache, where CMA pins and copies pages from a peer that may not be running.
    // The share per family is where the pipeline stopped winning when measured: half the
    // L2 for Bcast, Allreduce and Reduce_scatter, an eighth for Reduce; none for Gather
    // and Scatter (only the root copies, and CMA is ahead) nor for Allgather (each rank
    // pushes its block, hot in its cache, with CMA). With a CPU each, CMA wins at every
    // size. The figures: docs/results-collectives.md, "The measurements behind the
    // model's choices".
    let staging_share = match family {
        CollOp::Bcast | CollOp::Allreduce | CollOp::ReduceScatterBlock => 2,
        CollOp::Reduce => 8,
        _ => 0,
    };
    if staging_share > 0 && oversubscribed {
        let to = (m.l2_bytes / staging_share)
            .min(staging_bytes)
            .max(private_inline);
        if to > private_inline {
            rows.push(CollRow {
                max_bytes: to,
                candidates: vec![Direct, Staging, Cma],
            });
        }
    }
    rows.push(CollRow {
        max_bytes: usize::MAX,
        candidates: vec![Direct, Cma, Staging],
    });
    CollTable::new(private_below(rows, cma_from))
}

/// `rows` (sorted, the last reaching inf) without `cma` for contributions below
/// `cma_from`: a row that holds `cma_from - 1` and lists it is split there.
fn private_below(rows: Vec<CollRow>, cma_from: usize) -> Vec<CollRow> {
    let Some(last) = cma_from.checked_sub(1) else {
        return rows;
    };
    let below_cma =
        |cands: Vec<CollAlgo>| crate::select::without_cma(cands, |a| *a == CollAlgo::Cma);
    let mut out = Vec::with_capacity(rows.len() + 1);
    let mut lo = 0usize;
    for r in rows {
        let below = below_cma(r.candidates.clone());
        let next_lo = r.max_bytes.saturating_add(1);
        if r.max_bytes <= last {
            out.push(CollRow {
                max_bytes: r.max_bytes,
                candidates: below,
            });
        } else if lo <= last && below != r.candidates {
            out.push(CollRow {
                max_bytes: last,
                candidates: below,
            });
            out.push(r);
        } else {
            out.push(r);
        }
        lo = next_lo;
    }
    out
}

/// Selection tables of every family, bound at creation (model, or a tuned file).
#[derive(Clone, Debug)]
pub struct CollTables {
    tables: Vec<CollTable>,
}

impl CollTables {
    pub fn model(
        m: &shmcoll_kernels::hw::Machine,
        p: usize,
        inline_bytes: usize,
        staging_bytes: usize,
        cma_from: usize,
    ) -> CollTables {
        CollTables {
            tables: (0..CollOp::COUNT as u32)
                .map(
                    |c| match CollOp::from_code(c).filter(|o| o.is_module_collective()) {
                        Some(o) => model_coll_table(
                            o.family(),
                            m,
                            p,
                            inline_bytes,
                            staging_bytes,
                            cma_from,
                        ),
                        None => CollTable::new(vec![]),
                    },
                )
                .collect(),
        }
    }

    pub fn get(&self, family: CollOp) -> &CollTable {
        &self.tables[family as usize]
    }

    pub fn set(&mut self, family: CollOp, t: CollTable) {
        for o in CollOp::ALL {
            if o.family() == family {
                self.tables[o as usize] = t.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the model gives private (`in_heap` false) and heap buffers of `bytes` at 2
    /// ranks on 2 CPUs with a 48 KiB L1.
    fn inline_for(family: CollOp, bytes: usize, in_heap: bool) -> bool {
        let t = model_coll_table(family, &machine_with(2), 2, 64 << 10, 4 << 20, 0);
        t.wants_inline(bytes, in_heap)
    }

    #[test]
    fn bcast_keeps_private_buffers_inline_up_to_a_third_of_l1() {
        // One-sided and streamed (crate::one_sided): inline to a third of L1, for private
        // buffers only; heap buffers go direct from the first row's end.
        let third = 16 << 10;
        for n in [8 << 10, third] {
            assert!(inline_for(CollOp::Bcast, n, false), "{n}");
            assert!(!inline_for(CollOp::Bcast, n, true), "{n}");
        }
        assert!(!inline_for(CollOp::Bcast, third + 1, false));
        // The other families still hand private buffers to CMA well before that.
        assert!(!inline_for(CollOp::Allgather, 64 << 10, false));
        assert!(!inline_for(CollOp::Allreduce, 64 << 10, false));
    }

    /// This machine with `cpus` CPUs, a 48 KiB L1 and a 2 MiB L2.
    fn machine_with(cpus: usize) -> Machine {
        let mut m = shmcoll_kernels::hw::machine().clone();
        m.logical_cpus = cpus;
        m.l1d_bytes = 48 << 10;
        m.l2_bytes = 2 << 20;
        m
    }

    /// Whether a heap buffer of `bytes` goes inline at `p` ranks on `cpus` CPUs with a
    /// 48 KiB L1.
    fn heap_inline(family: CollOp, bytes: usize, p: usize, cpus: usize) -> bool {
        model_coll_table(family, &machine_with(cpus), p, 64 << 10, 4 << 20, 0)
            .wants_inline(bytes, true)
    }

    #[test]
    fn oversubscribed_ranks_stay_inline_longer() {
        // A core each: a 32nd of L1 of traffic per rank, read from 3 peers at 4 ranks
        // (512 B per rank), from 1 at 2 ranks (1.5 KiB).
        assert!(heap_inline(CollOp::Allgather, 512, 4, 4));
        assert!(!heap_inline(CollOp::Allgather, 513, 4, 4));
        assert!(heap_inline(CollOp::Allreduce, 3 << 9, 2, 2));
        assert!(!heap_inline(CollOp::Allreduce, (3 << 9) + 1, 2, 2));
        // Two ranks a core: half of L1 (8 KiB per rank from 3 peers at 4 ranks; 24 KiB
        // for a Reduce_scatter, whose ranks read one contribution's worth).
        for family in [CollOp::Allgather, CollOp::Allreduce] {
            assert!(heap_inline(family, 8 << 10, 4, 2), "{family:?}");
            assert!(!heap_inline(family, (8 << 10) + 1, 4, 2), "{family:?}");
        }
        assert!(heap_inline(CollOp::ReduceScatterBlock, 24 << 10, 4, 2));
        assert!(!heap_inline(
            CollOp::ReduceScatterBlock,
            (24 << 10) + 1,
            4,
            2
        ));
        // A Bcast is one-sided: inline to the whole inline area (64 KiB here).
        assert!(heap_inline(CollOp::Bcast, 64 << 10, 4, 2));
        assert!(!heap_inline(CollOp::Bcast, (64 << 10) + 1, 4, 2));
        assert!(!heap_inline(CollOp::Bcast, (3 << 9) + 1, 4, 4)); // a CPU each: 48 KiB / 32
    }

    /// The first algorithm other than `direct` (which serves heap buffers only) for
    /// private buffers of `bytes` in `family`, at `p` ranks on `cpus` CPUs.
    fn private_choice(family: CollOp, bytes: usize, p: usize, cpus: usize) -> CollAlgo {
        let t = model_coll_table(family, &machine_with(cpus), p, 64 << 10, 4 << 20, 0);
        *t.candidates(bytes)
            .iter()
            .find(|a| **a != CollAlgo::Direct)
            .unwrap()
    }

    #[test]
    fn oversubscribed_private_buffers_take_the_pipeline_where_every_rank_reads() {
        use CollAlgo::{Cma, Staging};
        for family in [CollOp::Allreduce, CollOp::ReduceScatterBlock] {
            // (From 32 KiB: a Reduce_scatter stays inline to 24 KiB.)
            assert_eq!(
                private_choice(family, 32 << 10, 4, 2),
                Staging,
                "{family:?}"
            );
            assert_eq!(private_choice(family, 1 << 20, 4, 2), Staging, "{family:?}");
            assert_eq!(
                private_choice(family, (1 << 20) + 1, 4, 2),
                Cma,
                "{family:?}"
            );
            // A core each: CMA.
            assert_eq!(private_choice(family, 16 << 10, 2, 2), Cma, "{family:?}");
        }
        assert_eq!(private_choice(CollOp::Reduce, 256 << 10, 4, 2), Staging);
        assert_eq!(private_choice(CollOp::Reduce, (256 << 10) + 1, 4, 2), Cma);
        // Only the root copies in Gather and Scatter, and Allgather pushes hot blocks: CMA.
        for family in [CollOp::Gather, CollOp::Scatter, CollOp::Allgather] {
            assert_eq!(private_choice(family, 64 << 10, 4, 2), Cma, "{family:?}");
        }
    }

    #[test]
    fn choose_takes_the_first_candidate_that_serves_then_the_fallbacks() {
        use CollAlgo::{Cma, Direct, Inline, Staging};
        let t = CollTable::new(vec![
            CollRow {
                max_bytes: 100,
                candidates: vec![Direct, Inline],
            },
            CollRow {
                max_bytes: 1000,
                candidates: vec![Cma],
            },
        ]);
        let facts = |bytes, heap: bool, inline: bool, cma_ok| CollFacts {
            bytes,
            all_inline_written: inline,
            inline_capacity: 64,
            first_outside_heap: (!heap).then_some(0),
            cma_ok,
        };
        assert_eq!(t.choose(&facts(10, true, true, true)), Some(Direct));
        assert_eq!(t.choose(&facts(10, false, true, true)), Some(Inline));
        // inline not written: past the row, the fallbacks direct, cma, staging
        assert_eq!(t.choose(&facts(10, false, false, true)), Some(Cma));
        assert_eq!(t.choose(&facts(10, false, false, false)), Some(Staging));
        assert_eq!(t.choose(&facts(500, true, false, true)), Some(Cma));
        assert_eq!(t.choose(&facts(5000, true, false, true)), Some(Direct));
    }

    #[test]
    fn no_model_row_is_empty() {
        for cpus in [1, 2, 4, 64] {
            let m = machine_with(cpus);
            for p in 1..=8 {
                for family in CollOp::ALL.into_iter().filter(|o| o.is_module_collective()) {
                    for cma_from in [0, 1, 512, 5000, 64 << 10, (64 << 10) + 1, 1 << 30] {
                        let t = model_coll_table(family, &m, p, 64 << 10, 4 << 20, cma_from);
                        let ends: Vec<usize> = t.rows().iter().map(|r| r.max_bytes).collect();
                        assert!(
                            ends.windows(2).all(|w| w[0] < w[1]),
                            "{family:?} p={p} cma_from={cma_from}: {ends:?}"
                        );
                        assert_eq!(ends.last(), Some(&usize::MAX));
                    }
                }
            }
        }
    }

    #[test]
    fn private_bcasts_take_the_pipeline_only_with_more_ranks_than_cpus() {
        use CollAlgo::{Cma, Inline, Staging};
        assert_eq!(private_choice(CollOp::Bcast, 16 << 10, 2, 2), Inline);
        assert_eq!(private_choice(CollOp::Bcast, (16 << 10) + 1, 2, 2), Cma);
        // More ranks than CPUs: inline up to the inline area.
        assert_eq!(private_choice(CollOp::Bcast, 64 << 10, 4, 2), Inline);
        assert_eq!(private_choice(CollOp::Bcast, 64 << 20, 2, 2), Cma);
        // More ranks than CPUs: the pipeline from the inline area to half the L2.
        assert_eq!(private_choice(CollOp::Bcast, (64 << 10) + 1, 4, 2), Staging);
        assert_eq!(private_choice(CollOp::Bcast, 1 << 20, 4, 2), Staging);
        assert_eq!(private_choice(CollOp::Bcast, (1 << 20) + 1, 4, 2), Cma);
        // Beyond the pipeline's share: CMA for large private buffers.
        let m = shmcoll_kernels::hw::machine();
        let t = model_coll_table(CollOp::Allgather, m, 4, 64 << 10, 4 << 20, 0);
        let past = (m.l2_bytes / 2).clamp(64 << 10, 4 << 20) + 1;
        assert_eq!(t.candidates(past), &[CollAlgo::Direct, Cma, Staging]);
    }

    /// `private_choice` with private blocks taking CMA from `cma_from`.
    fn private_choice_from(family: CollOp, bytes: usize, p: usize, cma_from: usize) -> CollAlgo {
        let t = model_coll_table(family, &machine_with(2), p, 64 << 10, 4 << 20, cma_from);
        *t.candidates(bytes)
            .iter()
            .find(|a| **a != CollAlgo::Direct && **a != CollAlgo::Inline)
            .unwrap()
    }

    #[test]
    fn private_contributions_below_cma_from_take_staging() {
        use CollAlgo::{Cma, Direct, Staging};
        let cma_from = 200_000;
        for family in CollOp::ALL.into_iter().filter(|o| o.is_module_collective()) {
            for bytes in [1, 4 << 10, 64 << 10, cma_from - 1] {
                assert_eq!(
                    private_choice_from(family, bytes, 2, cma_from),
                    Staging,
                    "{family:?} {bytes}"
                );
            }
            for bytes in [cma_from, 1 << 20] {
                assert_eq!(
                    private_choice_from(family, bytes, 2, cma_from),
                    Cma,
                    "{family:?} {bytes}"
                );
            }
            // Heap buffers keep `direct` (and inline keeps its rows) wherever it was.
            let with = model_coll_table(family, &machine_with(2), 2, 64 << 10, 4 << 20, cma_from);
            let without = model_coll_table(family, &machine_with(2), 2, 64 << 10, 4 << 20, 0);
            for bytes in [
                1,
                3 << 9,
                8 << 10,
                64 << 10,
                cma_from - 1,
                cma_from,
                1 << 30,
            ] {
                let pos = |t: &CollTable, a| t.candidates(bytes).iter().position(|x| *x == a);
                assert_eq!(
                    pos(&with, Direct),
                    pos(&without, Direct),
                    "{family:?} {bytes}"
                );
                for heap in [false, true] {
                    assert_eq!(
                        with.wants_inline(bytes, heap),
                        without.wants_inline(bytes, heap),
                        "{family:?} {bytes}"
                    );
                }
            }
        }
        // No crossover: the model's own order.
        assert_eq!(private_choice_from(CollOp::Allgather, 64 << 10, 2, 0), Cma);
    }
}
