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
use crate::desc::{
    Arr, ArriveLine, Desc, DescCore, LineHead, F_INLINE, F_TINY, F_VECTOR, OP_ALLTOALL,
    OP_ALLTOALLV,
};
use crate::error::{Error, Result};
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
        let seq = self.begin()?;
        let r = self
            .alltoall_inner(seq, call)
            .map(|choice| (choice, self.settled_after(seq, choice)));
        if r.is_err() {
            self.stats.rejected += 1;
        }
        self.poison(r)
    }

    /// Read back what call `seq` (just completed) established. Its lines are still intact:
    /// a peer can be at `seq + 1` at most, the other parity.
    fn settled_after(&mut self, seq: u64, choice: Choice) -> Settled {
        self.requests += 1;
        let id = self.requests;
        let mut core = Desc::slot(&self.seg, self.rank, (seq & 1) as usize).core();
        core.extra = id;
        let heads = (0..self.size)
            .map(|j| LineHead {
                extra: id,
                ..ArriveLine::of(&self.seg, j, seq).head()
            })
            .collect();
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
        let seq = self.begin()?;
        let r = self.settled_inner(seq, call, s);
        if r.is_err() {
            self.stats.rejected += 1;
        }
        self.poison(r)
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
            // Peers read the counts and displacements from this call's slot.
            let d = Desc::slot(&self.seg, self.rank, parity);
            for j in 0..self.size {
                let (so, sl) = send_blocks.block(j);
                let (ro, rl) = recv_blocks.block(j);
                d.set(Arr::SendCounts, j, sl);
                d.set(Arr::SendDispls, j, so);
                d.set(Arr::RecvCounts, j, rl);
                d.set(Arr::RecvDispls, j, ro);
            }
        }
        self.publish_arrive(seq, &s.core, None);
        self.wait_arrivals(seq)?;
        if let Some(j) = (0..self.size).find(|&j| {
            self.seg
                .arrive_seq(j, seq)
                .load(std::sync::atomic::Ordering::Acquire)
                != seq
                || ArriveLine::of(&self.seg, j, seq).head() != s.heads[j]
        }) {
            return Err(self.why_unsettled(seq, j, s));
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

    /// The error of a Start whose rank `j` published another head than the kept one: its
    /// own rejection or another call if the descriptors say so, else another request.
    fn why_unsettled(&mut self, seq: u64, j: usize, s: &Settled) -> Error {
        let mut cores = std::mem::take(&mut self.scratch);
        let op = if s.core.flags & F_VECTOR != 0 {
            OP_ALLTOALLV
        } else {
            OP_ALLTOALL
        };
        let r = self.read_descs(seq, op, &mut cores);
        self.scratch = cores;
        match r {
            Err(e) => e,
            Ok(()) => Error::Mismatch(format!(
                "rank {j} did not start persistent request {} with this rank ({}): ranks \
                 must start persistent collectives in the same order",
                s.id, self.rank
            )),
        }
    }
}
