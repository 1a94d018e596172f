//! Persistent Alltoall(v) after its first Start: validation and selection happen once.
//!
//! The first Start of a persistent request is a whole call (`alltoall_settle`): local and
//! global checks, selection, the exchange. What it established is kept in a `Settled`:
//! this rank's descriptor, every rank's arrive head and descriptor, and the choice. Each
//! later Start (`alltoall_settled`) writes its payload and publishes the same head, now
//! carrying the request's id in `extra`; once every rank arrived it only compares the
//! heads with the kept ones (one line per peer, which it reads anyway) and runs the kept
//! choice. Equal heads mean every rank started this same request on the same buffers:
//! the id is assigned by first Starts, which MPI makes happen in the same order on every
//! rank, and the sizes, flags and forced choices are in the head. A rank that calls
//! anything else at that point (a plain Alltoall, another request, another collective)
//! publishes a different head, so every rank raises: the settled ones here, the others
//! in their global checks (a plain call's `extra` is 0, see `global_facts`).

use super::{inline, AlltoallCall, Exchange};
use crate::comm::Comm;
use crate::desc::{Desc, DescCore, LineHead, F_INLINE, F_TINY, F_VECTOR};
use crate::error::Result;
use crate::op::CollOp;
use crate::registry::Choice;

/// What a persistent request's first Start established (see the module comment).
#[derive(Clone, Debug)]
pub struct Settled {
    id: u32,
    /// This rank's descriptor, `extra` = id.
    core: DescCore,
    /// Every rank's arrive head as a later Start must find it (`extra` = id).
    heads: Vec<LineHead>,
    /// Every rank's descriptor as the exchange reads it.
    cores: Vec<DescCore>,
    choice: Choice,
}

impl Settled {
    /// The choice every later Start runs.
    pub fn choice(&self) -> Choice {
        self.choice
    }
}

impl Comm {
    /// The first Start of a persistent Alltoall(v): the whole call, and what later Starts
    /// reuse (`alltoall_settled`).
    pub fn alltoall_settle(&mut self, call: Result<AlltoallCall>) -> Result<(Choice, Settled)> {
        self.run_call(|c, seq| {
            c.alltoall_inner(seq, call)
                .map(|choice| (choice, c.settled_after(seq, choice)))
        })
    }

    /// Read back what call `seq` (just completed) established (`Comm::kept_heads`).
    fn settled_after(&mut self, seq: u64, choice: Choice) -> Settled {
        self.requests += 1;
        let id = self.requests;
        let mut core = Desc::slot(&self.seg, self.rank, (seq & 1) as usize).core();
        core.extra = id;
        let heads = self.kept_heads(seq, |h| LineHead { extra: id, ..h });
        Settled {
            id,
            core,
            heads,
            cores: self.scratch.clone(),
            choice,
        }
    }

    /// A later Start of a persistent Alltoall(v): `call` must be the request's own (the
    /// bindings keep it with `s`).
    pub fn alltoall_settled(&mut self, call: &AlltoallCall, s: &Settled) -> Result<Choice> {
        self.run_call(|c, seq| c.settled_inner(seq, call, s))
    }

    fn settled_inner(&mut self, seq: u64, call: &AlltoallCall, s: &Settled) -> Result<Choice> {
        let parity = (seq & 1) as usize;
        let send = call.send.unwrap_or(call.recv);
        let send_blocks = call.send_blocks();
        let recv_blocks = call.recv_blocks;
        if s.core.flags & F_TINY != 0 {
            inline::write_line_payload(self, seq, send, &send_blocks);
        } else if s.core.flags & F_INLINE != 0 {
            inline::write_payload(self, parity, send, &send_blocks);
        }
        if s.core.flags & F_VECTOR != 0 {
            self.write_vector_arrays(parity, &send_blocks, &recv_blocks);
        }
        self.publish_arrive(seq, &s.core, None);
        self.wait_arrivals(seq)?;
        if let Some(j) = self.first_unlike(seq, &s.heads) {
            let op = if s.core.flags & F_VECTOR != 0 {
                CollOp::Alltoallv.code()
            } else {
                CollOp::Alltoall.code()
            };
            return Err(self.unsettled(seq, op, j, &s.id.to_string()));
        }
        let mut cores = std::mem::take(&mut self.scratch);
        cores.clone_from(&s.cores);
        let x = Exchange {
            seq,
            send: send.addr,
            recv: call.recv.addr,
            send_blocks,
            recv_blocks,
            in_place: call.send.is_none(),
            choice: s.choice,
            cores,
            recv_total: (0..self.size).map(|j| recv_blocks.block(j).1).sum(),
        };
        let r = super::run_choice(self, &x);
        self.scratch = x.cores;
        r?;
        self.record(s.choice);
        Ok(s.choice)
    }
}
