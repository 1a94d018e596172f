//! Alltoall and Alltoallv: the call, its checks, and the dispatch to an algorithm.
//!
//! Every call runs the same front: local checks, descriptor, arrive round, global checks
//! (identical on every rank, so that all ranks accept or all reject), selection, then the
//! algorithm. Nothing is written into a receive buffer before the global checks passed.

mod cma;
mod inline;
mod pull;
mod push;
mod settled;
mod staging;

pub use settled::Settled;

use crate::comm::Comm;
use crate::desc::{
    Arr, Desc, DescCore, F_FULL, F_INLINE, F_IN_PLACE, F_RECV_HEAP, F_SEND_HEAP, F_TINY, F_VECTOR,
    LINE_PAYLOAD, NO_OFFSET, OP_ALLTOALL, OP_ALLTOALLV,
};
use crate::error::{Error, Result};
use crate::registry::{Algo, CallFacts, Choice, Forced};
use crate::select::select;

/// A buffer as (address, length in bytes), resolved by the bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawBuf {
    pub addr: usize,
    pub len: usize,
}

/// How a buffer is cut into one block per rank, in bytes.
#[derive(Clone, Copy, Debug)]
pub enum Blocks<'a> {
    /// Block j is `[j*n, (j+1)*n)`.
    Uniform(usize),
    /// Block j is `[displs[j], displs[j]+counts[j])`.
    Vector {
        counts: &'a [usize],
        displs: &'a [usize],
    },
}

impl Blocks<'_> {
    #[inline]
    pub fn block(&self, j: usize) -> (usize, usize) {
        match self {
            Blocks::Uniform(n) => (j * n, *n),
            Blocks::Vector { counts, displs } => (displs[j], counts[j]),
        }
    }
}

/// One Alltoall(v) call as the bindings describe it.
#[derive(Clone, Copy, Debug)]
pub struct AlltoallCall<'a> {
    /// `None` for `IN_PLACE`: the data to send is taken from the receive buffer.
    pub send: Option<RawBuf>,
    pub recv: RawBuf,
    pub send_blocks: Blocks<'a>,
    pub recv_blocks: Blocks<'a>,
    pub forced: Forced,
}

impl<'a> AlltoallCall<'a> {
    fn is_vector(&self) -> bool {
        matches!(self.send_blocks, Blocks::Vector { .. })
            || matches!(self.recv_blocks, Blocks::Vector { .. })
    }
    fn send_blocks(&self) -> Blocks<'a> {
        if self.send.is_some() {
            self.send_blocks
        } else {
            self.recv_blocks
        }
    }
}

/// A validated call, ready for an algorithm.
pub(crate) struct Exchange<'a> {
    pub seq: u64,
    pub send: usize,
    pub recv: usize,
    pub send_blocks: Blocks<'a>,
    pub recv_blocks: Blocks<'a>,
    pub in_place: bool,
    pub choice: Choice,
    /// Descriptors of every rank for this call.
    pub cores: Vec<DescCore>,
    /// Bytes this rank receives in total (what it writes).
    pub recv_total: usize,
}

impl Exchange<'_> {
    /// Rank j's full descriptor (buffer offsets and addresses), from its slot.
    pub fn full(&self, comm: &Comm, j: usize) -> DescCore {
        Desc::slot(&comm.seg, j, (self.seq & 1) as usize).core()
    }

    /// Where, in rank j's send buffer, the block for this rank starts (offset, length).
    pub fn peer_send_block(&self, comm: &Comm, j: usize) -> (usize, usize) {
        let c = &self.cores[j];
        if c.flags & F_VECTOR != 0 {
            let d = Desc::slot(&comm.seg, j, (self.seq & 1) as usize);
            (
                d.get(Arr::SendDispls, comm.rank),
                d.get(Arr::SendCounts, comm.rank),
            )
        } else {
            (comm.rank * c.send_bpp as usize, c.send_bpp as usize)
        }
    }

    /// Where, in rank j's receive buffer, the block from this rank goes (offset, length).
    pub fn peer_recv_block(&self, comm: &Comm, j: usize) -> (usize, usize) {
        let c = &self.cores[j];
        if c.flags & F_VECTOR != 0 {
            let d = Desc::slot(&comm.seg, j, (self.seq & 1) as usize);
            (
                d.get(Arr::RecvDispls, comm.rank),
                d.get(Arr::RecvCounts, comm.rank),
            )
        } else {
            (comm.rank * c.recv_bpp as usize, c.recv_bpp as usize)
        }
    }
}

fn check_blocks(what: &str, blocks: &Blocks, buf: RawBuf, p: usize) -> Result<()> {
    if let Blocks::Vector { counts, displs } = blocks {
        if counts.len() != p || displs.len() != p {
            return Err(Error::InvalidArgument(format!(
                "{what} counts and displacements need {p} entries each (one per rank), got {} and {}",
                counts.len(),
                displs.len()
            )));
        }
    }
    for j in 0..p {
        let (off, len) = blocks.block(j);
        let end = off.checked_add(len);
        if end.is_none_or(|e| e > buf.len) {
            return Err(Error::Buffer(format!(
                "{what} block for rank {j} ({len} bytes at byte offset {off}) ends beyond the {}-byte {what} buffer",
                buf.len
            )));
        }
    }
    Ok(())
}

/// Receive blocks must not overlap: two peers would write the same bytes.
fn check_disjoint(blocks: &Blocks, p: usize) -> Result<()> {
    if let Blocks::Vector { .. } = blocks {
        let mut spans: Vec<(usize, usize, usize)> = (0..p)
            .map(|j| {
                let (o, l) = blocks.block(j);
                (o, o + l, j)
            })
            .filter(|s| s.1 > s.0)
            .collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(Error::Buffer(format!(
                    "receive blocks of ranks {} and {} overlap",
                    w[0].2, w[1].2
                )));
            }
        }
    }
    Ok(())
}

fn span(blocks: &Blocks, base: usize, p: usize) -> Option<(usize, usize)> {
    let mut lo = usize::MAX;
    let mut hi = 0;
    for j in 0..p {
        let (o, l) = blocks.block(j);
        if l > 0 {
            lo = lo.min(base + o);
            hi = hi.max(base + o + l);
        }
    }
    (hi > lo).then_some((lo, hi))
}

impl Comm {
    fn check_local(&self, c: &AlltoallCall) -> Result<()> {
        let p = self.size;
        check_blocks("receive", &c.recv_blocks, c.recv, p)?;
        check_disjoint(&c.recv_blocks, p)?;
        if let Some(s) = c.send {
            check_blocks("send", &c.send_blocks, s, p)?;
            if let (Some(a), Some(b)) = (
                span(&c.send_blocks, s.addr, p),
                span(&c.recv_blocks, c.recv.addr, p),
            ) {
                if a.0 < b.1 && b.0 < a.1 {
                    return Err(Error::Buffer(
                        "send and receive buffers overlap; pass shmcoll.IN_PLACE as the send buffer for an in-place exchange".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Alltoall or Alltoallv. `call` is `Err` when the bindings already rejected the
    /// arguments: the error is then announced to the peers (which raise too) and returned.
    pub fn alltoall(&mut self, call: Result<AlltoallCall>) -> Result<Choice> {
        self.run_call(|c, seq| c.alltoall_inner(seq, call))
    }

    /// Write this rank's counts and displacements into its slot for call parity `parity`
    /// (peers read them there), entry by entry, straight from the blocks: no temporary
    /// vectors on this path.
    fn write_vector_arrays(&self, parity: usize, send: &Blocks, recv: &Blocks) {
        let d = Desc::slot(&self.seg, self.rank, parity);
        for j in 0..self.size {
            let (so, sl) = send.block(j);
            let (ro, rl) = recv.block(j);
            d.set(Arr::SendCounts, j, sl);
            d.set(Arr::SendDispls, j, so);
            d.set(Arr::RecvCounts, j, rl);
            d.set(Arr::RecvDispls, j, ro);
        }
    }

    fn alltoall_inner(&mut self, seq: u64, call: Result<AlltoallCall>) -> Result<Choice> {
        let p = self.size;
        let parity = (seq & 1) as usize;
        let vector = call.as_ref().is_ok_and(|c| c.is_vector());
        let op = if vector { OP_ALLTOALLV } else { OP_ALLTOALL };
        let call = call.and_then(|c| self.check_local(&c).map(|_| c));
        let call = match call {
            Ok(c) => c,
            Err(e) => {
                let core = DescCore {
                    op,
                    ..DescCore::default()
                };
                self.publish_arrive(seq, &core, Some(&e));
                self.wait_arrivals(seq)?;
                return Err(e);
            }
        };
        let forced = call.forced.or(self.cfg.alltoall_forced);
        let in_place = call.send.is_none();
        let send = call.send.unwrap_or(call.recv);
        let send_blocks = call.send_blocks();
        let recv_blocks = call.recv_blocks;

        // Describe this rank's part.
        let mut core = DescCore {
            op,
            forced: forced.encode(),
            send_off: NO_OFFSET,
            recv_off: NO_OFFSET,
            send_addr: send.addr as u64,
            recv_addr: call.recv.addr as u64,
            ..DescCore::default()
        };
        if vector {
            core.flags |= F_VECTOR;
        } else {
            core.send_bpp = send_blocks.block(0).1 as u64;
            core.recv_bpp = recv_blocks.block(0).1 as u64;
            if p == 0 {
                core.send_bpp = 0;
            }
        }
        if in_place {
            core.flags |= F_IN_PLACE;
        }
        if let Some(off) = self.heap_offset(send.addr, send.len) {
            core.flags |= F_SEND_HEAP;
            core.send_off = off as u64;
        }
        if let Some(off) = self.heap_offset(call.recv.addr, call.recv.len) {
            core.flags |= F_RECV_HEAP;
            core.recv_off = off as u64;
        }
        // Small payloads travel inline; decided from this rank's sizes alone (see select).
        let send_total: usize = (0..p).map(|j| send_blocks.block(j).1).sum();
        let max_send = (0..p).map(|j| send_blocks.block(j).1).max().unwrap_or(0);
        let want_inline = match forced.algo {
            Some(a) => a == Algo::Inline,
            None => self.sel.wants_inline(max_send),
        };
        if want_inline && !vector && send_total <= LINE_PAYLOAD {
            // Tiny: the payload rides in the arrive line, with the head.
            inline::write_line_payload(self, seq, send, &send_blocks);
            core.flags |= F_TINY;
        } else if want_inline && send_total <= self.seg.layout().sizes.inline_bytes {
            inline::write_payload(self, parity, send, &send_blocks);
            core.flags |= F_INLINE;
        }
        // The full descriptor is always written (into this rank's own, cache-hot slot):
        // whatever the payload path, selection may still pick an algorithm that reads
        // buffer offsets from it. Peers only fetch it when they need it.
        core.flags |= F_FULL;
        if vector {
            self.write_vector_arrays(parity, &send_blocks, &recv_blocks);
        }
        self.publish_arrive(seq, &core, None);
        self.wait_arrivals(seq)?;

        // Global checks: the same data on every rank, hence the same verdict.
        let mut cores = std::mem::take(&mut self.scratch);
        let checked = self
            .read_descs(seq, op, &mut cores)
            .and_then(|_| self.global_facts(seq, &cores, vector, forced))
            .and_then(|facts| {
                select(
                    &self.sel,
                    &facts,
                    forced,
                    self.cfg.nt_threshold,
                    self.cfg.chunk_bytes,
                )
            });
        let choice = match checked {
            Ok(c) => c,
            Err(e) => {
                self.scratch = cores;
                return Err(e);
            }
        };
        let x = Exchange {
            seq,
            send: send.addr,
            recv: call.recv.addr,
            send_blocks,
            recv_blocks,
            in_place,
            choice,
            cores,
            recv_total: (0..p).map(|j| recv_blocks.block(j).1).sum(),
        };
        let r = run_choice(self, &x);
        self.scratch = x.cores;
        r?;
        self.record(choice);
        Ok(choice)
    }

    /// Check that every pair of ranks agrees on block sizes and that forced choices match,
    /// and that none started a persistent request instead (settled.rs: `extra` is its id,
    /// 0 in a plain call); gather what selection needs.
    fn global_facts(
        &self,
        seq: u64,
        cores: &[DescCore],
        vector: bool,
        forced: Forced,
    ) -> Result<CallFacts> {
        let p = self.size;
        let parity = (seq & 1) as usize;
        let enc = forced.encode();
        let mine = cores[self.rank].extra;
        if let Some((j, c)) = cores.iter().enumerate().find(|(_, c)| c.extra != mine) {
            return Err(Error::Mismatch(format!(
                "rank {j} started persistent request {} where rank {} called {}",
                c.extra,
                self.rank,
                if mine == 0 {
                    "Alltoall(v)".to_string()
                } else {
                    format!("request {mine}")
                }
            )));
        }
        if let Some((j, c)) = cores.iter().enumerate().find(|(_, c)| c.forced != enc) {
            return Err(Error::Mismatch(format!(
                "ranks force different choices: rank {} has {}, rank {j} has {}",
                self.rank,
                forced.describe(),
                Forced::decode(c.forced).describe()
            )));
        }
        let mut max_block = 0usize;
        if vector {
            let desc = |j| Desc::slot(&self.seg, j, parity);
            for i in 0..p {
                let di = desc(i);
                for j in 0..p {
                    let s = di.get(Arr::SendCounts, j);
                    let r = desc(j).get(Arr::RecvCounts, i);
                    if s != r {
                        return Err(Error::Mismatch(format!(
                            "Alltoallv counts disagree: rank {i} sends {s} bytes to rank {j}, which expects {r} bytes from it"
                        )));
                    }
                    max_block = max_block.max(s);
                }
            }
        } else {
            let s0 = cores[0].send_bpp;
            for (j, c) in cores.iter().enumerate() {
                if c.send_bpp != s0 || c.recv_bpp != s0 {
                    return Err(Error::Mismatch(format!(
                        "Alltoall block sizes disagree: rank 0 sends {s0} bytes per rank, rank {j} sends {} and expects {}",
                        c.send_bpp, c.recv_bpp
                    )));
                }
            }
            max_block = s0 as usize;
        }
        let first = |flag: u32| cores.iter().position(|c| c.flags & flag == 0);
        Ok(CallFacts {
            nranks: p,
            max_block,
            all_inline_written: cores.iter().all(|c| c.flags & (F_INLINE | F_TINY) != 0),
            inline_capacity: self.seg.layout().sizes.inline_bytes,
            all_send_in_heap: first(F_SEND_HEAP).is_none(),
            all_recv_in_heap: first(F_RECV_HEAP).is_none(),
            first_send_outside_heap: first(F_SEND_HEAP),
            first_recv_outside_heap: first(F_RECV_HEAP),
            in_place: cores.iter().any(|c| c.flags & F_IN_PLACE != 0),
            cma_ok: self.cma_ok,
        })
    }
}

/// Run the chosen algorithm on a prepared exchange.
fn run_choice(c: &mut Comm, x: &Exchange) -> Result<()> {
    match x.choice.algo {
        Algo::Inline => inline::run(c, x),
        Algo::Staging => staging::run(c, x),
        Algo::Pull => pull::run(c, x),
        Algo::Push => push::run(c, x),
        Algo::Cma => cma::run(c, x),
        Algo::CmaPush => cma::run_push(c, x),
    }
}
