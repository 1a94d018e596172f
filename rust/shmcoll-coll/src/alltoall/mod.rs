//! Alltoall and Alltoallv: the call, its checks, and the dispatch to an algorithm.
//!
//! Every call runs the same front: local checks, descriptor, arrive round, global checks
//! (identical on every rank, so that all ranks accept or all reject), selection, then the
//! algorithm. Nothing is written into a receive buffer before the global checks passed.

mod checks;
mod cma;
mod inline;
mod pull;
mod push;
mod settled;
mod staging;

pub(crate) use checks::check_disjoint;
pub use settled::Settled;

use crate::comm::{Comm, Side};
use crate::desc::{
    Arr, Desc, DescCore, F_FULL, F_INLINE, F_IN_PLACE, F_RECV_HEAP, F_SEND_HEAP, F_TINY, F_VECTOR,
    LINE_PAYLOAD, NO_OFFSET,
};
use crate::error::{Error, Result};
use crate::extent;
use crate::op::CollOp;
use crate::registry::{Algo, Choice, Forced};
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
            // Saturating: an offset past the address space fails every bounds check
            // (extent.rs) instead of wrapping to one that passes.
            Blocks::Uniform(n) => (
                crate::extent::uniform_offset(j, *n).unwrap_or(usize::MAX),
                *n,
            ),
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
    /// Rank j's full descriptor (buffer offsets, addresses and registered lengths), as
    /// checked when the algorithm was chosen (`Comm::verified_cores`).
    pub fn full(&self, j: usize) -> DescCore {
        self.cores[j]
    }

    /// Where, in rank j's send buffer, the block for this rank starts (offset, length), as
    /// rank j's descriptor says; saturated where it does not fit, so that `Comm::peer_range`
    /// rejects it.
    pub fn peer_send_block(&self, comm: &Comm, j: usize) -> (usize, usize) {
        self.peer_block(
            comm,
            j,
            Arr::SendDispls,
            Arr::SendCounts,
            self.cores[j].send_bpp,
        )
    }

    /// Where, in rank j's receive buffer, the block from this rank goes (offset, length).
    pub fn peer_recv_block(&self, comm: &Comm, j: usize) -> (usize, usize) {
        self.peer_block(
            comm,
            j,
            Arr::RecvDispls,
            Arr::RecvCounts,
            self.cores[j].recv_bpp,
        )
    }

    fn peer_block(
        &self,
        comm: &Comm,
        j: usize,
        displs: Arr,
        counts: Arr,
        bpp: u64,
    ) -> (usize, usize) {
        let big = |v: u64| extent::from_shared(v).unwrap_or(usize::MAX);
        if self.cores[j].flags & F_VECTOR != 0 {
            let d = Desc::slot(&comm.seg, j, (self.seq & 1) as usize);
            (d.get(displs, comm.rank), d.get(counts, comm.rank))
        } else {
            let n = big(bpp);
            (
                extent::uniform_offset(comm.rank, n).unwrap_or(usize::MAX),
                n,
            )
        }
    }

    /// This rank's address of `len` bytes at `off` of rank j's `side` buffer, mapped here
    /// (heap or arena), after `Comm::peer_range` checked it.
    pub fn peer_local(
        &self,
        comm: &Comm,
        j: usize,
        side: Side,
        off: usize,
        len: usize,
    ) -> Result<usize> {
        comm.peer_range(j, &self.full(j), side, off, len)?
            .local
            .ok_or_else(|| {
                Error::Corrupt(format!(
                    "rank {j}'s {side:?} buffer is not in the shared heap"
                ))
            })
    }
}

impl Comm {
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
        let coll_op = if vector {
            CollOp::Alltoallv
        } else {
            CollOp::Alltoall
        };
        let op = coll_op.code();
        let call = call.and_then(|c| self.check_local(&c).map(|_| c));
        let call = match call {
            Ok(c) => c,
            Err(e) => {
                self.publish_rejection(seq, op, &e)?;
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
            send_len: send.len as u64,
            recv_len: call.recv.len as u64,
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
        // The blocks lie in the send buffer (check_local), but may overlap: saturate.
        let send_total = extent::sum((0..p).map(|j| send_blocks.block(j).1)).unwrap_or(usize::MAX);
        let max_send = (0..p).map(|j| send_blocks.block(j).1).max().unwrap_or(0);
        let want_inline = match forced.algo {
            Some(a) => a == Algo::Inline,
            None => self.tables.get(coll_op).wants_inline(
                max_send,
                core.flags & F_SEND_HEAP != 0 && core.flags & F_RECV_HEAP != 0,
            ),
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
                    self.tables.get(coll_op),
                    coll_op,
                    &facts,
                    forced,
                    self.cfg.nt_threshold,
                    self.cfg.chunk_bytes,
                )
            });
        // Algorithms that reach peers' buffers use the full descriptors: checked once here,
        // on every rank alike, before anything moves.
        let checked = checked.and_then(|choice| {
            if matches!(
                choice.algo,
                Algo::Pull | Algo::Push | Algo::Cma | Algo::CmaPush
            ) {
                self.verified_cores(seq, &mut cores)?;
            }
            Ok(choice)
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
            // Disjoint blocks of the receive buffer (check_local): the sum fits.
            recv_total: extent::sum((0..p).map(|j| recv_blocks.block(j).1)).unwrap_or(usize::MAX),
        };
        let r = run_choice(self, &x);
        self.scratch = x.cores;
        r?;
        self.record(choice);
        Ok(choice)
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
        // Selection and forcing give only algorithms that serve Alltoall.
        Algo::Direct => Err(Error::Internal(format!(
            "{} does not serve Alltoall",
            x.choice.algo.name()
        ))),
    }
}
