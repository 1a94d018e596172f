//! Ranks that share a CPU leave a call in the order they arrived at it.
//!
//! With more ranks than CPUs, two ranks bound to one CPU take turns: the one that arrived
//! first yields to its CPU-mate, which arrives and yields back, and so on until the last
//! rank (on another CPU) arrives. Whichever of the two happens to be running then sees the
//! call complete and leaves; if that is the later arrival, the earlier one waits until its
//! mate has returned to the application and given the CPU up again (typically inside the
//! next MPI or shmcoll call). The earlier arrival has been in the call longest, so that
//! wait lands on the call's slowest rank.
//!
//! So a rank that is about to leave yields, a bounded number of times, while a mate that
//! had arrived before it has not left yet. The mate was waiting, runs, sees the call
//! complete and leaves; the later arrival follows one switch later (figures in
//! docs/results-collectives.md, "Ranks that share a CPU leave in arrival order").
//!
//! A barrier is the exception: its CPU-mates leave in rank order. Nobody times a barrier
//! alone; what it decides is the order in which the next call starts, and arrival order
//! made that order feed on itself. A barrier's arrival order is the previous call's leave
//! order, so whichever mate went first kept going first for whole launches. When that was
//! the root's mate, a small Bcast after the barrier cost the mate two context switches
//! inside its call (it yields to the root for the payload and gets its CPU back after the
//! root). Rank order is the same at every barrier, and it puts rank 0, the usual root,
//! first on its CPU.
//!
//! Nothing here is needed for correctness: a rank leaves after at most
//! `WaitConfig::leave_yields` yields (`SHMCOLL_LEAVE_YIELDS`, default 4: a mate that has
//! not left after that many turns is not waiting in the call, it is descheduled or failed)
//! whatever its mates do, and ranks that have a CPU to themselves skip it all.

use std::sync::atomic::{AtomicU64, Ordering};

use shmcoll_shm::{shares_cpu, Line, Segment};

/// The ranks bound to this rank's CPU, and which of them were ahead of it in this call.
#[derive(Debug, Default)]
pub(crate) struct CpuMates {
    /// Empty unless this rank is bound to a CPU that other ranks are bound to.
    mates: Vec<usize>,
    /// Bit i: `mates[i]` has a lower rank than this one (a barrier's leave order).
    below: u64,
    /// Bit i: `mates[i]` is to leave the current call before this rank: it had arrived
    /// before it (or, in a barrier, it has a lower rank).
    ahead: AtomicU64,
}

impl CpuMates {
    /// The mates of `me`; every rank's CPU must be published (it is after the handshake).
    pub(crate) fn of(seg: &Segment, me: usize) -> CpuMates {
        let mates: Vec<usize> = (0..seg.layout().sizes.nranks)
            .filter(|&r| shares_cpu(seg, me, r))
            .take(64) // the width of `ahead`
            .collect();
        let below = mates
            .iter()
            .enumerate()
            .filter(|&(_, &j)| j < me)
            .fold(0, |bits, (i, _)| bits | 1 << i);
        CpuMates {
            mates,
            below,
            ahead: AtomicU64::new(0),
        }
    }

    /// In place of the arrival snapshot: leave the current call after the mates with lower
    /// ranks (a barrier; see the module comment).
    #[inline]
    pub(crate) fn in_rank_order(&self) {
        self.ahead.store(self.below, Ordering::Relaxed);
    }

    /// Before this rank publishes its arrival at `seq`: note the mates already there.
    #[inline]
    pub(crate) fn arriving(&self, seg: &Segment, seq: u64) {
        if self.mates.is_empty() {
            return;
        }
        let mut ahead = 0;
        for (i, &j) in self.mates.iter().enumerate() {
            if seg.arrive_seq(j, seq).load(Ordering::Acquire) >= seq {
                ahead |= 1 << i;
            }
        }
        self.ahead.store(ahead, Ordering::Relaxed);
    }

    /// This rank `me` is done with call `seq`: say so, and let the mates that arrived
    /// before it leave first, yielding at most `max_yields` times. Returns the yields.
    #[inline]
    pub(crate) fn leave(&self, seg: &Segment, me: usize, seq: u64, max_yields: u32) -> u32 {
        if self.mates.is_empty() {
            return 0;
        }
        // Nobody sleeps on this counter (mates only look at it between yields), so a store
        // suffices where `publish` would also wake sleepers.
        seg.seq(me, Line::Left).store(seq, Ordering::Release);
        let mut ahead = self.ahead.swap(0, Ordering::Relaxed);
        let mut yields = 0;
        while ahead != 0 && yields < max_yields {
            for (i, &j) in self.mates.iter().enumerate() {
                if ahead & (1 << i) != 0 && seg.seq(j, Line::Left).load(Ordering::Acquire) >= seq {
                    ahead &= !(1 << i);
                }
            }
            if ahead != 0 {
                std::thread::yield_now();
                yields += 1;
            }
        }
        yields
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmcoll_shm::Sizes;

    /// A segment of 4 ranks bound to CPUs `cpus` (as `cpu_of` stores them: CPU + 1, 0 for
    /// unbound).
    fn segment(cpus: [u32; 4]) -> Segment {
        let seg = Segment::create(Sizes {
            nranks: 4,
            inline_bytes: 4096,
            staging_bytes: 4 * 4096,
            heap_bytes: 0,
        })
        .unwrap();
        for (r, c) in cpus.into_iter().enumerate() {
            seg.cpu_of(r).store(c, Ordering::Relaxed);
        }
        seg
    }

    #[test]
    fn mates_are_the_ranks_bound_to_the_same_cpu() {
        let seg = segment([1, 2, 1, 2]);
        assert_eq!(CpuMates::of(&seg, 0).mates, [2]);
        assert_eq!(CpuMates::of(&seg, 3).mates, [1]);
        let unbound = segment([0, 0, 0, 0]);
        assert!(CpuMates::of(&unbound, 0).mates.is_empty());
        let own_cpus = segment([1, 2, 3, 4]);
        assert!(CpuMates::of(&own_cpus, 2).mates.is_empty());
    }

    #[test]
    fn a_rank_with_no_mate_ahead_leaves_at_once() {
        let seg = segment([1, 2, 1, 2]);
        let m = CpuMates::of(&seg, 0);
        m.arriving(&seg, 5); // rank 2 has not arrived at call 5
        assert_eq!(m.leave(&seg, 0, 5, 4), 0);
        assert_eq!(seg.seq(0, Line::Left).load(Ordering::Relaxed), 5);
    }

    #[test]
    fn a_rank_yields_while_a_mate_that_arrived_first_is_still_in_the_call() {
        let seg = segment([1, 2, 1, 2]);
        let m = CpuMates::of(&seg, 0);
        seg.arrive_seq(2, 5).store(5, Ordering::Release);
        // Rank 2 left call 3 but not call 5: rank 0 gives it every turn it may.
        seg.seq(2, Line::Left).store(3, Ordering::Release);
        m.arriving(&seg, 5);
        assert_eq!(m.leave(&seg, 0, 5, 4), 4);
        // Not again for the same arrival, and not at all when turned off.
        assert_eq!(m.leave(&seg, 0, 5, 4), 0);
        m.arriving(&seg, 5);
        assert_eq!(m.leave(&seg, 0, 5, 0), 0);
    }

    #[test]
    fn a_rank_stops_yielding_once_the_mate_ahead_left() {
        let seg = segment([1, 2, 1, 2]);
        let m = CpuMates::of(&seg, 0);
        seg.arrive_seq(2, 5).store(5, Ordering::Release);
        m.arriving(&seg, 5);
        seg.seq(2, Line::Left).store(5, Ordering::Release);
        assert_eq!(m.leave(&seg, 0, 5, 4), 0);
        // A mate on another CPU (rank 1) is never waited for.
        let other = CpuMates::of(&seg, 1);
        seg.arrive_seq(3, 7).store(7, Ordering::Release);
        seg.arrive_seq(0, 7).store(7, Ordering::Release);
        other.arriving(&seg, 7);
        seg.seq(3, Line::Left).store(7, Ordering::Release);
        assert_eq!(other.leave(&seg, 1, 7, 4), 0);
    }

    #[test]
    fn in_rank_order_a_rank_waits_for_lower_mates_only() {
        let seg = segment([1, 1, 1, 2]);
        // Rank 2 waits for its lower mates, 0 and 1, whether they arrived before it (1) or
        // not (0); 1 has left, 0 has not.
        seg.arrive_seq(1, 5).store(5, Ordering::Release);
        let m2 = CpuMates::of(&seg, 2);
        m2.arriving(&seg, 5);
        m2.in_rank_order();
        seg.seq(1, Line::Left).store(5, Ordering::Release);
        assert_eq!(m2.leave(&seg, 2, 5, 3), 3); // rank 0 has not left
        m2.in_rank_order();
        seg.seq(0, Line::Left).store(5, Ordering::Release);
        assert_eq!(m2.leave(&seg, 2, 5, 3), 0);
        // Rank 0 has no lower mate: it leaves at once although ranks 1 and 2 arrived first.
        seg.arrive_seq(2, 7).store(7, Ordering::Release);
        seg.arrive_seq(1, 7).store(7, Ordering::Release);
        let m0 = CpuMates::of(&seg, 0);
        m0.arriving(&seg, 7);
        m0.in_rank_order();
        assert_eq!(m0.leave(&seg, 0, 7, 3), 0);
    }
}
