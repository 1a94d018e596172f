//! The model selection tables of the collectives other than Alltoall: per operation
//! family, ranges of bytes (the largest contribution of a rank) each with an ordered list
//! of algorithms, in the one table type of every collective (crate::select).

use shmcoll_kernels::hw::Machine;

use crate::desc::LINE_PAYLOAD;
use crate::op::CollOp;
use crate::registry::Algo;
use crate::select::{private_below, Candidate, Table};

/// The largest payload `inline` carries in the arrive line itself.
pub(crate) const TINY: usize = LINE_PAYLOAD;

/// A row of the model before it becomes a range: sizes up to `.0` try `.1` in order.
type Row = (usize, Vec<Algo>);

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
) -> Table {
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
    use Algo::{Cma, Direct, Inline, Staging};
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
    let mut rows: Vec<Row> = vec![(limit, vec![Inline, Direct, Cma, Staging])];
    // Empty when inline already reaches the end of private buffers' inline row (Scatter and Bcast, oversubscribed).
    if private_inline > limit {
        rows.push((private_inline, vec![Direct, Inline, Cma, Staging]));
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
            rows.push((to, vec![Direct, Staging, Cma]));
        }
    }
    rows.push((usize::MAX, vec![Direct, Cma, Staging]));
    let rows = rows
        .into_iter()
        .map(|(max, algos)| (max, algos.into_iter().map(Candidate::of).collect()))
        .collect();
    let t = Table::from_upper_bounds(family, rows);
    Table::new(private_below(t.ranges().to_vec(), cma_from))
        .expect("the model's ranges are disjoint and list candidates")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{CallFacts, Forced};
    use crate::select::{select, Selection};

    /// The algorithms a table lists for `bytes`.
    fn algos(t: &Table, bytes: usize) -> Vec<Algo> {
        t.find(bytes)
            .map_or(vec![], |r| r.candidates.iter().map(|c| c.algo).collect())
    }

    fn wants_inline(t: &Table, bytes: usize, in_heap: bool) -> bool {
        Selection::model(t.clone(), false).wants_inline(bytes, in_heap)
    }

    /// What the model gives private (`in_heap` false) and heap buffers of `bytes` at 2
    /// ranks on 2 CPUs with a 48 KiB L1.
    fn inline_for(family: CollOp, bytes: usize, in_heap: bool) -> bool {
        let t = model_coll_table(family, &machine_with(2), 2, 64 << 10, 4 << 20, 0);
        wants_inline(&t, bytes, in_heap)
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
        let t = model_coll_table(family, &machine_with(cpus), p, 64 << 10, 4 << 20, 0);
        wants_inline(&t, bytes, true)
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
    fn private_choice(family: CollOp, bytes: usize, p: usize, cpus: usize) -> Algo {
        let t = model_coll_table(family, &machine_with(cpus), p, 64 << 10, 4 << 20, 0);
        algos(&t, bytes)
            .into_iter()
            .find(|a| *a != Algo::Direct)
            .unwrap()
    }

    #[test]
    fn oversubscribed_private_buffers_take_the_pipeline_where_every_rank_reads() {
        use Algo::{Cma, Staging};
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
    fn select_takes_the_first_candidate_that_serves_then_the_last_resorts() {
        use Algo::{Cma, Direct, Inline, Staging};
        let c = |v: Vec<Algo>| v.into_iter().map(Candidate::of).collect();
        let t = Table::from_upper_bounds(
            CollOp::Allgather,
            vec![(100, c(vec![Direct, Inline])), (1000, c(vec![Cma]))],
        );
        let sel = Selection::model(t, false);
        let facts = |bytes, heap: bool, inline: bool, cma_ok| CallFacts {
            bytes,
            all_inline_written: inline,
            inline_capacity: 64,
            first_outside_heap: (!heap).then_some(0),
            cma_ok,
            ..CallFacts::default()
        };
        let choose = |f: CallFacts| {
            select(&sel, CollOp::Allgather, &f, Forced::default(), 0, 0)
                .unwrap()
                .algo
        };
        assert_eq!(choose(facts(10, true, true, true)), Direct);
        assert_eq!(choose(facts(10, false, true, true)), Inline);
        // inline not written: past the row, the last resorts direct, cma, staging
        assert_eq!(choose(facts(10, false, false, true)), Cma);
        assert_eq!(choose(facts(10, false, false, false)), Staging);
        assert_eq!(choose(facts(500, true, false, true)), Cma);
        assert_eq!(choose(facts(5000, true, false, true)), Direct);
    }

    #[test]
    fn no_model_row_is_empty() {
        for cpus in [1, 2, 4, 64] {
            let m = machine_with(cpus);
            for p in 1..=8 {
                for family in CollOp::ALL.into_iter().filter(|o| o.is_module_collective()) {
                    for cma_from in [0, 1, 512, 5000, 64 << 10, (64 << 10) + 1, 1 << 30] {
                        let t = model_coll_table(family, &m, p, 64 << 10, 4 << 20, cma_from);
                        let ends: Vec<usize> = t.ranges().iter().map(|r| r.max_bytes).collect();
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
        use Algo::{Cma, Inline, Staging};
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
        assert_eq!(algos(&t, past), [Algo::Direct, Cma, Staging]);
    }

    /// `private_choice` with private blocks taking CMA from `cma_from`.
    fn private_choice_from(family: CollOp, bytes: usize, p: usize, cma_from: usize) -> Algo {
        let t = model_coll_table(family, &machine_with(2), p, 64 << 10, 4 << 20, cma_from);
        algos(&t, bytes)
            .into_iter()
            .find(|a| *a != Algo::Direct && *a != Algo::Inline)
            .unwrap()
    }

    #[test]
    fn private_contributions_below_cma_from_take_staging() {
        use Algo::{Cma, Direct, Staging};
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
                let pos = |t: &Table, a| algos(t, bytes).iter().position(|x| *x == a);
                assert_eq!(
                    pos(&with, Direct),
                    pos(&without, Direct),
                    "{family:?} {bytes}"
                );
                for heap in [false, true] {
                    assert_eq!(
                        wants_inline(&with, bytes, heap),
                        wants_inline(&without, bytes, heap),
                        "{family:?} {bytes}"
                    );
                }
            }
        }
        // No crossover: the model's own order.
        assert_eq!(private_choice_from(CollOp::Allgather, 64 << 10, 2, 0), Cma);
    }
}
