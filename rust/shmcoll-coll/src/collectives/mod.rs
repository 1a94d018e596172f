//! The collectives other than Alltoall(v): Bcast, Allgather(v), Gather(v), Scatter(v),
//! Reduce_scatter(_block), Allreduce and Reduce.
//!
//! Every call runs the same front as Alltoall: local checks, a descriptor, the arrive
//! round, global checks that every rank evaluates on the same data (so that all ranks
//! accept or all reject), selection, then one of three algorithms (registry.rs style):
//!
//! * `inline`: contributions are copied into the segment before the arrive; one round.
//! * `direct`: single copies out of / into peers' buffers, reached in the shared heap or
//!   with CMA; reductions are split into one slice per rank (reduce-scatter), each rank
//!   writing its reduced slice wherever it is needed; a done round ends the call.
//! * `staging`: chunked rounds through the staging areas; any buffers, no CMA needed.
//!
//! Reductions combine contributions in rank order (0, 1, ..., p-1) whatever the
//! algorithm, so results are bitwise identical on every rank, from run to run and
//! between algorithms.

mod checks;
mod direct;
mod inline;
mod reach;
pub mod select;
mod settled;
mod staging;

pub(crate) use select::TINY;
pub use settled::CollSettled;

use shmcoll_kernels::reduce::{Dtype, Op};

use crate::alltoall::{Blocks, RawBuf};
use crate::comm::Comm;
use crate::desc::{
    unpack_extra, Arr, Desc, DescCore, F_FULL, F_IN_PLACE, F_RECV_HEAP, F_ROOT_ONLY, F_SEND_HEAP,
    F_STREAMED, F_VECTOR,
};
use crate::error::{Error, ErrorKind, Result};
use crate::op::CollOp;
use crate::registry::{Algo, Choice, Forced};
use checks::bad;

/// One call as the bindings describe it (all sizes in bytes).
///
/// | op | send | recv | blocks |
/// |---|---|---|---|
/// | Bcast | - | the buffer (every rank) | - |
/// | Allgather(v) | this rank's block, None: in place | every block | recv blocks |
/// | Gather(v) | this rank's block, None: in place (root) | root: every block; others None | root's recv blocks |
/// | Scatter(v) | root: every block | this rank's block; None: in place (root) | root's send blocks |
/// | Reduce_scatter(_block) | every block, None: in place | this rank's block (in place: every block, result first) | the blocks (same on every rank) |
/// | Allreduce | the vector, None: in place | the vector | - |
/// | Reduce | the vector, None: in place (root) | root: the vector; others None | - |
#[derive(Clone, Copy, Debug)]
pub struct CollCall<'a> {
    pub op: CollOp,
    pub send: Option<RawBuf>,
    pub recv: Option<RawBuf>,
    pub root: usize,
    pub blocks: Option<Blocks<'a>>,
    pub reduce: Option<(Dtype, Op)>,
    pub forced: Option<Algo>,
}

/// A validated call, ready for an algorithm.
pub(crate) struct Call<'a> {
    pub seq: u64,
    pub op: CollOp,
    pub root: usize,
    /// Where this rank's contribution starts (its send block, or inside recv in place),
    /// and its length.
    pub contrib: usize,
    pub contrib_len: usize,
    /// This rank's receive buffer (address 0 if none).
    pub recv: usize,
    pub recv_len: usize,
    pub in_place: bool,
    pub blocks: Option<Blocks<'a>>,
    pub reduce: Option<(Dtype, Op)>,
    /// Every rank's descriptor (index = rank): the full one for direct and cma, else what
    /// its arrive line carries (sizes, flags, extras; no buffer addresses).
    pub peers: Vec<DescCore>,
}

impl Call<'_> {
    /// Rank j's blocks as its descriptor states them: (offset, length) per rank.
    pub fn blocks_of(&self, c: &Comm, j: usize) -> Vec<(usize, usize)> {
        let core = &self.peers[j];
        if core.flags & F_VECTOR != 0 {
            let d = Desc::slot(&c.seg, j, (self.seq & 1) as usize);
            (0..c.size)
                .map(|k| (d.get(Arr::RecvDispls, k), d.get(Arr::RecvCounts, k)))
                .collect()
        } else {
            let n = core.recv_bpp as usize;
            (0..c.size).map(|k| (k * n, n)).collect()
        }
    }

    /// This rank's own blocks (as given by the caller).
    pub fn my_block(&self, k: usize) -> (usize, usize) {
        self.blocks.map_or((0, 0), |b| b.block(k))
    }

    /// Bytes of rank j's contribution.
    pub fn contrib_len_of(&self, j: usize) -> usize {
        self.peers[j].send_bpp as usize
    }
}

impl Comm {
    /// Run one collective of this module. `call` is `Err` when the bindings already
    /// rejected the arguments: the error is then announced to the peers (which raise too).
    pub fn collective(&mut self, op: CollOp, call: Result<CollCall>) -> Result<Choice> {
        self.run_call(|c, seq| c.collective_inner(seq, op, call))
    }

    fn collective_inner(&mut self, seq: u64, op: CollOp, call: Result<CollCall>) -> Result<Choice> {
        let parity = (seq & 1) as usize;
        let env_forced = self.cfg.coll_forced[op as usize];
        let prepared = call.map(|mut c| {
            c.forced = c.forced.or(env_forced);
            c
        });
        let prepared = prepared.and_then(|c| {
            if c.op != op {
                return Err(bad(format!(
                    "call for {} run as {}",
                    c.op.name(),
                    op.name()
                )));
            }
            self.prepare(&c).map(|core| (c, core))
        });
        let (call, mut core) = match prepared {
            Ok(x) => x,
            Err(e) => {
                self.publish_rejection(seq, op.code(), &e)?;
                return Err(e);
            }
        };
        // Small contributions travel inline; decided from this rank's size and buffers.
        let contrib_len = core.send_bpp as usize;
        let in_heap =
            core.flags & F_SEND_HEAP != 0 && (call.recv.is_none() || core.flags & F_RECV_HEAP != 0);
        let wants_inline = match call.forced {
            Some(a) => a == Algo::Inline,
            None => self.tables.get(op).wants_inline(contrib_len, in_heap),
        };
        if wants_inline {
            inline::write_payload(self, seq, &call, &mut core);
        }
        core.flags |= F_FULL;
        if let Some(Blocks::Vector { counts, displs }) = call.blocks {
            let d = Desc::slot(&self.seg, self.rank, parity);
            d.set_array(Arr::RecvCounts, counts);
            d.set_array(Arr::RecvDispls, displs);
        }
        // A small Bcast is one-sided (crate::one_sided): the root leaves once published,
        // non-roots once they copied from it.
        let root_leaves = self.root_may_leave(seq, op, call.root, &core);
        if root_leaves {
            core.flags |= F_ROOT_ONLY;
        }
        self.publish_arrive(seq, &core, None);
        let one_sided = if root_leaves {
            self.leave_early(seq, &core);
            if core.flags & F_STREAMED != 0 {
                self.stream_payload(seq, core.send_addr as usize, core.send_bpp as usize);
            }
            true
        } else if op == CollOp::Bcast && self.rank != call.root {
            let recv = call.recv.map_or(0, |r| r.addr);
            self.follow_root(seq, call.root, &core, recv)?
        } else {
            false
        };
        if one_sided {
            let choice = Choice::plain(op, Algo::Inline, Forced::algo(call.forced));
            self.record(choice);
            return Ok(choice);
        }
        self.wait_arrivals(seq)?;

        let mut cores = std::mem::take(&mut self.scratch);
        let checked = self
            .read_descs(seq, op.code(), &mut cores)
            .and_then(|_| self.coll_facts(seq, op, &core, &cores))
            .and_then(|facts| {
                crate::select::select(
                    self.tables.get(op),
                    op,
                    &facts,
                    Forced::algo(call.forced),
                    self.cfg.nt_threshold,
                    self.cfg.chunk_bytes,
                )
            });
        // The heads carry what the checks, inline and staging need; direct and cma read
        // peers' buffer addresses, so for them the full descriptors replace the heads
        // (every rank wrote its slot, F_FULL), checked on every rank alike before anything
        // moves. Small calls skip the extra cache line per peer, which with more ranks
        // than cores is a miss after every switch.
        let checked = checked.and_then(|choice| {
            if matches!(choice.algo, Algo::Direct | Algo::Cma) {
                self.verified_cores(seq, &mut cores)?;
            }
            Ok(choice)
        });
        let choice = match checked {
            Ok(a) => a,
            Err(e) => {
                self.scratch = cores;
                return Err(e);
            }
        };
        let (root, dt, rop) = unpack_extra(core.extra);
        let in_place = core.flags & F_IN_PLACE != 0;
        let x = Call {
            seq,
            op,
            root,
            contrib: core.send_addr as usize,
            contrib_len,
            recv: call.recv.map_or(0, |r| r.addr),
            recv_len: call.recv.map_or(0, |r| r.len),
            in_place,
            blocks: call.blocks,
            reduce: Dtype::from_code(dt)
                .zip(Op::from_code(rop))
                .filter(|_| op.reduces()),
            peers: cores,
        };
        let r = run_algo(self, choice.algo, &x);
        self.scratch = x.peers;
        r?;
        self.record(choice);
        Ok(choice)
    }

    /// This rank hands call `op` (an operation code, `CollOp::code`: Alltoall(v) or one
    /// of this module's) to MPI (an operator, a datatype or a buffer shmcoll does not
    /// serve; `why` says which). A call served by MPI on some ranks and by shmcoll on
    /// others would leave both waiting (MPI's forever), so the ranks agree first: each one
    /// that falls back takes part in this call, publishing the fallback where a rejection
    /// would go. When every rank falls back, it returns Ok and MPI serves the call; when
    /// some rank runs `op` on shmcoll instead, that rank sees this one's fallback as a
    /// rejection (`Error::Peer`) and this one sees a `Mismatch`: every rank raises.
    pub fn agree_fallback(&mut self, op: u32, why: &str) -> Result<()> {
        self.run_call(|c, seq| {
            c.publish_rejection(seq, op, &Error::FallsBack(why.to_string()))?;
            for j in 0..c.size {
                let at = c.seg.arrive_seq(j, seq).load(std::sync::atomic::Ordering::Acquire);
                let h = crate::desc::ArriveLine::of(&c.seg, j, seq).head();
                if at == seq && h.op == op && h.status == ErrorKind::Fallback as u32 {
                    continue;
                }
                if at == seq && h.status != 0 {
                    return Err(Error::Peer {
                        rank: j,
                        kind: ErrorKind::from_code(h.status),
                        msg: Desc::slot(&c.seg, j, (seq & 1) as usize).msg(),
                    });
                }
                return Err(Error::Mismatch(format!(
                    "rank {j} runs this {} on shmcoll while rank {} hands it to MPI ({why}); ranks must call it alike",
                    CollOp::name_of_code(op),
                    c.rank
                )));
            }
            Ok(())
        })
    }
}

/// Run the selected algorithm on a validated call.
pub(super) fn run_algo(c: &mut Comm, algo: Algo, x: &Call) -> Result<()> {
    match algo {
        Algo::Inline => inline::run(c, x),
        Algo::Direct | Algo::Cma => direct::run(c, x),
        Algo::Staging => staging::run(c, x),
        // Selection and forcing give only algorithms that serve the operation.
        Algo::Pull | Algo::Push | Algo::CmaPush => Err(Error::Internal(format!(
            "{} does not serve {}",
            algo.name(),
            x.op.name()
        ))),
    }
}

const _: () = assert!(F_RECV_HEAP != F_SEND_HEAP);
