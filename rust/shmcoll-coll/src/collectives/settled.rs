//! Persistent collectives (Allreduce_init, Allgather_init, ...) after their first Start:
//! validation and selection happen once, as for Alltoall (alltoall/settled.rs, whose
//! comment explains the scheme). Here the request's id rides in the high half of the
//! head's `forced` word (`extra` holds the root, datatype and operator), so a plain call
//! meeting a settled Start fails its `coll_facts` check.
//!
//! Bcast is not settled: a small one is one-sided (the root does not wait for the others'
//! heads, which the comparison needs), and a large one's own checks are a small part of it.

use super::{inline, run_algo, Call, CollCall};
use crate::alltoall::Blocks;
use crate::comm::Comm;
use crate::desc::{unpack_extra, Arr, Desc, DescCore, LineHead, F_INLINE, F_IN_PLACE, F_TINY};
use crate::error::Result;
use crate::op::CollOp;
use crate::registry::Choice;
use shmcoll_kernels::reduce::{Dtype, Op};

/// The bits of `forced` that carry a settled request's id.
pub(super) const ID_SHIFT: u32 = 32;

/// What a persistent collective's first Start established.
#[derive(Clone, Debug)]
pub struct CollSettled {
    id: u32,
    op: CollOp,
    /// This rank's descriptor, with the id in `forced`.
    core: DescCore,
    /// Every rank's arrive head as a later Start must find it.
    heads: Vec<LineHead>,
    /// Every rank's descriptor as the algorithm reads it.
    cores: Vec<DescCore>,
    choice: Choice,
}

impl Comm {
    /// The first Start of a persistent collective: the whole call, and (but for Bcast)
    /// what later Starts reuse (`collective_settled`).
    pub fn collective_settle(
        &mut self,
        op: CollOp,
        call: Result<CollCall>,
    ) -> Result<(Choice, Option<CollSettled>)> {
        self.run_call(|c, seq| {
            c.collective_inner(seq, op, call).map(|choice| {
                let s = (op != CollOp::Bcast).then(|| c.coll_settled_after(seq, op, choice));
                (choice, s)
            })
        })
    }

    /// Read back what call `seq` (just completed) established (`Comm::kept_heads`).
    fn coll_settled_after(&mut self, seq: u64, op: CollOp, choice: Choice) -> CollSettled {
        self.requests += 1;
        let id = self.requests;
        let tag = u64::from(id) << ID_SHIFT;
        let mut core = Desc::slot(&self.seg, self.rank, (seq & 1) as usize).core();
        core.forced |= tag;
        let heads = self.kept_heads(seq, |h| LineHead {
            forced: h.forced | tag,
            ..h
        });
        CollSettled {
            id,
            op,
            core,
            heads,
            cores: self.scratch.clone(),
            choice,
        }
    }

    /// A later Start of a persistent collective: `call` must be the request's own.
    pub fn collective_settled(&mut self, call: &CollCall, s: &CollSettled) -> Result<Choice> {
        self.run_call(|c, seq| c.coll_settled_inner(seq, call, s))
    }

    fn coll_settled_inner(&mut self, seq: u64, call: &CollCall, s: &CollSettled) -> Result<Choice> {
        let mut core = s.core;
        if core.flags & (F_TINY | F_INLINE) != 0 {
            inline::write_payload(self, seq, call, &mut core);
        }
        if let Some(Blocks::Vector { counts, displs }) = call.blocks {
            let d = Desc::slot(&self.seg, self.rank, (seq & 1) as usize);
            d.set_array(Arr::RecvCounts, counts);
            d.set_array(Arr::RecvDispls, displs);
        }
        self.publish_arrive(seq, &core, None);
        self.wait_arrivals(seq)?;
        if let Some(j) = self.first_unlike(seq, &s.heads) {
            let request = format!("{} ({})", s.id, s.op.name());
            return Err(self.unsettled(seq, s.op.code(), j, &request));
        }
        let mut cores = std::mem::take(&mut self.scratch);
        cores.clone_from(&s.cores);
        let (root, dt, rop) = unpack_extra(core.extra);
        let x = Call {
            seq,
            op: s.op,
            root,
            contrib: core.send_addr as usize,
            contrib_len: core.send_bpp as usize,
            recv: call.recv.map_or(0, |r| r.addr),
            recv_len: call.recv.map_or(0, |r| r.len),
            in_place: core.flags & F_IN_PLACE != 0,
            blocks: call.blocks,
            reduce: Dtype::from_code(dt)
                .zip(Op::from_code(rop))
                .filter(|_| s.op.reduces()),
            peers: cores,
        };
        let r = run_algo(self, s.choice.algo, &x);
        self.scratch = x.peers;
        r?;
        self.record(s.choice);
        Ok(s.choice)
    }
}
