//! One-sided calls: a small Bcast completes on the root as soon as its payload is published,
//! and on each non-root as soon as it has copied it, without the arrive round of all ranks.
//!
//! Why: a Bcast has one producer. Waiting for every rank before anyone may leave costs a
//! full synchronisation (with more ranks than cores, every other rank's turn on a core),
//! where MPI's eager Bcast lets the root go at once. Here the root copies its payload into
//! its arrive line or inline area (which it does for `inline` anyway), marks the line
//! F_ROOT_ONLY and returns; non-roots publish their arrival as usual, wait for the root's
//! alone, check its head against their own call, and copy.
//!
//! What the skipped round protected, the next call restores. A rank reuses its parity
//! areas (descriptor slot, arrive line, inline area) of call `s` at call `s + 2`; the
//! arrive round of `s + 1` normally proves that every peer finished `s` by then. A rank
//! that left call `s` early owes that round: at the start of its next call (`settle`, run
//! by `Comm::begin` before anything is written) it waits for every rank's arrival at `s`,
//! which proves they finished `s - 1`, the last user of the areas it is about to write.
//! A rank can therefore run ahead of the others by one call and no more.
//!
//! Payloads above `STREAM_FROM` are streamed (F_STREAMED): the root arrives first, then
//! copies the payload into its inline area chunk by chunk, publishing after each chunk the
//! bytes copied on its Progress line (a counter over the communicator's life; the line's
//! payload carries its value at the start of the call), and non-roots copy each chunk out
//! as soon as it is there. The two copies then overlap instead of following each other;
//! both cross cores (the root's stores take lines the non-roots read last time), so that
//! overlap is most of the time of a 16 to 64 KiB Bcast.
//!
//! Checking: a non-root compares the root's head with its call and raises at once; every
//! rank that left early compares all heads of the call while settling. A disagreement
//! means some ranks completed a call that others saw differently, so it is fatal
//! (`Error::Diverged`): the communicator is poisoned and peers fail fast.
//!
//! A rank that rejected its own arguments (status set) waited for everyone and raised,
//! while the ranks that left early returned success. They learn it while settling, and
//! their next call is the notice: each publishes, instead of that call, a rejection of
//! kind `ErrorKind::Notice` naming the rank and its reason, so that every rank of the next
//! call (the rejecting one included) raises `Error::Peer` there. The rejecting rank knows
//! the notice is coming (a root of its call left early) and does not leave that next call
//! early itself, even as a Bcast's root, so that it reads the notice too. The communicator
//! stays usable. A notice is never answered with a notice (settling skips them), so it
//! ends after one call.

use std::sync::atomic::Ordering;
use std::time::Duration;

use shmcoll_kernels::Store;
use shmcoll_shm::{bound_apart, wait_counter, Line, WaitConfig};

use crate::comm::{Comm, Unwaited};
use crate::desc::{
    unpack_extra, ArriveLine, Desc, DescCore, LineHead, F_INLINE, F_ROOT_ONLY, F_STREAMED, F_TINY,
};
use crate::error::{Error, ErrorKind, Result};
use crate::op::CollOp;
use crate::transfer::Mover;

/// Payloads larger than this are streamed (module comment); below it the chunks would be
/// too few to overlap, and one copy before arriving costs less than the Progress line.
pub(crate) const STREAM_FROM: usize = 2 * STREAM_CHUNK;

/// The smallest chunk. Each publish costs a fence and a cache-line transfer to every
/// reader; a page of copying keeps that to a small fraction.
const STREAM_CHUNK: usize = 4 << 10;

/// The chunk of an `n`-byte payload: an eighth of it (whole cache lines), at least a page,
/// so that the readers start early and the publishes stay few.
fn chunk_of(n: usize) -> usize {
    (n / 8).next_multiple_of(64).max(STREAM_CHUNK)
}

/// How long a non-root spins for a root bound to another CPU before it yields (when ranks
/// outnumber CPUs; otherwise the longer spin of `WaitConfig` applies). The root waits for
/// nobody, so it is running on its CPU or about to (its CPU-mate yields to it at once); a
/// yield here hands our CPU to our own mate instead and costs a context switch each way,
/// several times the few microseconds the root needs (figures in
/// docs/results-collectives.md, "A barrier releases CPU-mates in rank order").
const ROOT_SPIN: Duration = Duration::from_micros(5);

/// The waiting of a non-root for its root's payload: `wait`, with at least `ROOT_SPIN` of
/// spinning when the two are bound to different CPUs.
fn waiting_for_root(wait: &WaitConfig, apart: bool) -> WaitConfig {
    let mut w = *wait;
    if apart {
        w.spin = w.spin.max(ROOT_SPIN);
    }
    w
}

/// The fields every rank's head of a one-sided call must share.
fn same_call(a: &LineHead, b: &LineHead) -> bool {
    a.op == b.op && a.extra == b.extra && a.send_bpp == b.send_bpp && a.forced == b.forced
}

fn describe(h: &LineHead) -> String {
    let (root, _, _) = unpack_extra(h.extra);
    let rooted = CollOp::from_code(h.op).is_some_and(|o| o.rooted());
    format!(
        "{} of {} bytes{}{}",
        CollOp::name_of_code(h.op),
        h.send_bpp,
        if rooted {
            format!(" from root {root}")
        } else {
            String::new()
        },
        if h.forced != 0 {
            " (forced algorithm)"
        } else {
            ""
        }
    )
}

impl Comm {
    /// Whether the root of `op` may leave once it has published: a Bcast whose payload it
    /// copied inline (`core.flags`), so that its buffer is free again at once.
    /// Not when the ranks owe this rank a notice in this call (`notice_due_at`): it would
    /// leave before reading it.
    pub(crate) fn root_may_leave(
        &self,
        seq: u64,
        op: CollOp,
        root: usize,
        core: &DescCore,
    ) -> bool {
        op == CollOp::Bcast
            && self.rank == root
            && core.flags & (F_TINY | F_INLINE) != 0
            && self.notice_due_at != Some(seq)
    }

    /// Record that this rank leaves call `seq` without the arrive round of all ranks.
    pub(crate) fn leave_early(&mut self, seq: u64, core: &DescCore) {
        self.unwaited = Some(Unwaited {
            seq,
            head: LineHead::of(core),
        });
    }

    /// A non-root of a Bcast, after publishing its arrival: wait for the root alone. When
    /// the root went one-sided, check its head, copy its payload into `recv` and return
    /// true; else return false (the caller goes on with the arrive round of all ranks).
    pub(crate) fn follow_root(
        &mut self,
        seq: u64,
        root: usize,
        core: &DescCore,
        recv: usize,
    ) -> Result<bool> {
        let line = self.seg.arrive_seq(root, seq);
        let wait = waiting_for_root(&self.cfg.wait, bound_apart(&self.seg, self.rank, root));
        wait_counter(
            &self.seg,
            Some(&self.peers),
            &wait,
            "arrival",
            root,
            line,
            seq,
        )?;
        let h = ArriveLine::of(&self.seg, root, seq).head();
        if line.load(Ordering::Acquire) != seq || h.flags & F_ROOT_ONLY == 0 {
            return Ok(false); // the full round reports or serves it
        }
        self.leave_early(seq, core);
        let mine = LineHead::of(core);
        if !same_call(&h, &mine) {
            return Err(Error::Diverged(format!(
                "call {seq}: the root (rank {root}) completed a {} while rank {} called a {}",
                describe(&h),
                self.rank,
                describe(&mine)
            )));
        }
        let n = core.send_bpp as usize;
        let line = ArriveLine::of(&self.seg, root, seq);
        // The root's head says where its payload is; it must fit there (the root checked,
        // but the head is shared memory).
        let l = self.seg.layout();
        let cap = if h.flags & F_TINY != 0 {
            crate::desc::LINE_PAYLOAD
        } else {
            l.sizes.inline_bytes
        };
        if n > cap {
            return Err(Error::Corrupt(format!(
                "the root's one-sided payload of {n} bytes does not fit its area of {cap}"
            )));
        }
        let src = if h.flags & F_TINY != 0 {
            line.payload()
        } else {
            self.seg.ptr(l.inline(root, (seq & 1) as usize), n) as usize
        };
        // A streamed payload is copied chunk by chunk as the root publishes it; any other
        // is all there already: one chunk, nothing to wait for.
        let streamed = (h.flags & F_STREAMED != 0).then(|| {
            // SAFETY: the root wrote the base into its line's payload before publishing the
            // arrival we acquired; 8-byte aligned (LINE_PAYLOAD_OFF is a multiple of 8).
            let base = unsafe { std::ptr::read(line.payload() as *const u64) };
            (base, self.seg.seq(root, Line::Progress))
        });
        let chunk = if streamed.is_some() { chunk_of(n) } else { n };
        let mut m = Mover::default();
        let mut done = 0;
        while done < n {
            let k = chunk.min(n - done);
            if let Some((base, progress)) = streamed {
                let target = base.checked_add((done + k) as u64).ok_or_else(|| {
                    Error::Corrupt(format!("the root's stream base {base} overflows"))
                })?;
                wait_counter(
                    &self.seg,
                    Some(&self.peers),
                    &wait,
                    "payload",
                    root,
                    progress,
                    target,
                )?;
            }
            // SAFETY: the root's payload is n bytes (its head says so and matches ours) in
            // its arrive line (n <= LINE_PAYLOAD under F_TINY) or its inline area of this
            // parity (n <= inline_bytes, Segment::ptr checks the range), published up to
            // done + k (streamed: acquired above); the root rewrites neither before we
            // arrive at the next call (settle). recv is our buffer of n bytes (prepare),
            // which is not in the segment's control areas.
            unsafe { m.copy(recv + done, src + done, k, Store::Temporal) };
            done += k;
        }
        m.fence();
        Ok(true)
    }

    /// The root of a streamed Bcast, after arriving: copy the payload (`n` bytes at `src`,
    /// its buffer) into its inline area chunk by chunk, publishing each.
    pub(crate) fn stream_payload(&mut self, seq: u64, src: usize, n: usize) {
        let l = self.seg.layout();
        let area = self.seg.ptr(l.inline(self.rank, (seq & 1) as usize), n) as usize;
        let progress = self.seg.seq(self.rank, Line::Progress);
        let mut m = Mover::default();
        let mut done = 0;
        let chunk = chunk_of(n);
        while done < n {
            let k = chunk.min(n - done);
            // SAFETY: src is our buffer of n bytes (prepare); area is n bytes of our inline
            // area of this parity (Segment::ptr checks), which readers touch only up to what
            // we published, and which nobody reads for call seq - 2 any more (settle).
            unsafe { m.copy(area + done, src + done, k, Store::Temporal) };
            done += k;
            self.streamed += k as u64;
            self.seg.publish(progress, self.streamed);
        }
    }

    /// Pay the round a one-sided call skipped (see the module comment): wait for every
    /// rank's arrival at it and check that they all made the same call. Returns the notice
    /// this rank owes when a rank rejected that call (which this rank completed).
    pub(crate) fn settle(&mut self) -> Result<Option<Error>> {
        let Some(u) = self.unwaited.take() else {
            return Ok(None);
        };
        self.wait_arrivals(u.seq)?;
        let mut owed = None;
        for j in 0..self.size {
            let at = self.seg.arrive_seq(j, u.seq).load(Ordering::Acquire);
            let h = ArriveLine::of(&self.seg, j, u.seq).head();
            if at == u.seq && h.status != 0 {
                if h.status != ErrorKind::Notice as u32 && owed.is_none() {
                    let msg = Desc::slot(&self.seg, j, (u.seq & 1) as usize).msg();
                    owed = Some(Error::Peer {
                        rank: j,
                        kind: ErrorKind::Notice,
                        // Its message first, so that what classifies it (the C
                        // ABI's class tags) still leads.
                        msg: format!(
                            "{msg} (in call {}, a {} that rank {} completed without waiting for it)",
                            u.seq,
                            describe(&u.head),
                            self.rank
                        ),
                    });
                }
                continue;
            }
            if at == u.seq && same_call(&h, &u.head) {
                continue;
            }
            return Err(Error::Diverged(format!(
                "call {}: rank {} completed a {} while rank {j} {}",
                u.seq,
                self.rank,
                describe(&u.head),
                if at == u.seq {
                    format!("called a {}", describe(&h))
                } else {
                    format!("is at call {at}")
                }
            )));
        }
        Ok(owed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_on_another_cpu_is_spun_for_before_yielding() {
        let oversubscribed = WaitConfig::defaults(4, 2);
        assert_eq!(waiting_for_root(&oversubscribed, true).spin, ROOT_SPIN);
        // A root that may share our CPU gets it back at once.
        assert_eq!(
            waiting_for_root(&oversubscribed, false).spin,
            Duration::ZERO
        );
        // With a CPU per rank the longer default spin stays.
        let own = WaitConfig::defaults(2, 2);
        assert_eq!(waiting_for_root(&own, true).spin, own.spin);
        assert!(own.spin > ROOT_SPIN);
    }
}
