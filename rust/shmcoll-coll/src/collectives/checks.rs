//! The checks of a collective call: local ones (arguments against this rank's buffers,
//! before anything is published) and global ones (every rank's descriptor, the same data
//! on every rank, hence the same verdict everywhere), and the facts selection needs.
//!
//! Every size here comes from a caller or from a peer's descriptor, so it is computed
//! with the checked helpers of crate::extent; the lint below keeps plain arithmetic out.
#![deny(clippy::arithmetic_side_effects)]

use shmcoll_kernels::reduce::{Dtype, Op};

use super::CollCall;
use crate::alltoall::{Blocks, RawBuf};
use crate::comm::Comm;
use crate::desc::{
    pack_extra, unpack_extra, Arr, Desc, DescCore, F_INLINE, F_IN_PLACE, F_RECV_HEAP, F_SEND_HEAP,
    F_TINY, F_VECTOR, NO_OFFSET,
};
use crate::error::{Error, Result};
use crate::extent;
use crate::op::CollOp;
use crate::registry::{CallFacts, Forced};

/// A Barrier or an Alltoall(v) handed to the collectives' entry, which serves neither
/// (they have their own entries, Comm::barrier and Comm::alltoall).
pub(super) fn elsewhere(op: CollOp) -> Error {
    Error::InvalidArgument(format!("{} is not served by Comm::collective", op.name()))
}

pub(super) fn bad(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

fn need(buf: Option<RawBuf>, what: &str, op: CollOp) -> Result<RawBuf> {
    buf.ok_or_else(|| bad(format!("{} needs a {what}", op.name())))
}

fn check_len(what: &str, have: usize, want: usize) -> Result<()> {
    if have < want {
        return Err(Error::Buffer(format!(
            "the {what} holds {have} bytes but the call needs {want}"
        )));
    }
    Ok(())
}

fn overlaps(a: RawBuf, b: RawBuf) -> bool {
    extent::overlap((a.addr, a.len), (b.addr, b.len))
}

/// The address `off` bytes into a buffer at `addr`, for an offset the bounds checks
/// already placed inside it (saturating, so that a mistake cannot wrap to a low address).
fn at(addr: usize, off: usize) -> usize {
    addr.saturating_add(off)
}

/// Blocks as a vector of (offset, len), checked against `buf`.
fn check_blocks(what: &str, blocks: &Blocks, len: usize, p: usize) -> Result<()> {
    if let Blocks::Vector { counts, displs } = blocks {
        if counts.len() != p || displs.len() != p {
            return Err(bad(format!(
                "{what} counts and displacements need {p} entries each, got {} and {}",
                counts.len(),
                displs.len()
            )));
        }
    }
    for j in 0..p {
        let (o, l) = blocks.block(j);
        if !extent::within(o, l, len) {
            return Err(Error::Buffer(format!(
                "{what} block of rank {j} ({l} bytes at byte offset {o}) ends beyond the {len}-byte buffer"
            )));
        }
    }
    Ok(())
}

impl Comm {
    /// Local checks, and this rank's descriptor.
    pub(super) fn prepare(&self, c: &CollCall) -> Result<DescCore> {
        let p = self.size;
        let me = self.rank;
        let op = c.op;
        if !op.is_module_collective() {
            return Err(elsewhere(op));
        }
        if op.rooted() && c.root >= p {
            return Err(bad(format!(
                "root {} out of range for a communicator of {p} ranks",
                c.root
            )));
        }
        let is_root = me == c.root;
        let mut core = DescCore {
            op: op.code(),
            forced: Forced::algo(c.forced).encode(),
            send_off: NO_OFFSET,
            recv_off: NO_OFFSET,
            ..DescCore::default()
        };
        let (mut dt, mut rop) = (0u8, 0u8);
        if op.reduces() {
            let (d, o) = c
                .reduce
                .ok_or_else(|| bad(format!("{} needs a datatype and an operator", op.name())))?;
            if !o.supports(d) {
                return Err(Error::Unsupported(format!(
                    "{} is not defined for {}",
                    o.name(),
                    d.name()
                )));
            }
            (dt, rop) = (d.code(), o.code());
        }
        core.extra = pack_extra(c.root, dt, rop);
        let elem = c.reduce.map_or(1, |(d, _)| d.size());
        let blocks = c.blocks;
        let vector = matches!(blocks, Some(Blocks::Vector { .. }));
        if vector {
            core.flags |= F_VECTOR;
        }
        let in_place = c.send.is_none();
        // (contribution address, its length, the receive buffer)
        let (contrib, clen): (usize, usize);
        match op {
            CollOp::Barrier | CollOp::Alltoall | CollOp::Alltoallv => return Err(elsewhere(op)),
            CollOp::Bcast => {
                let b = need(c.recv, "buffer", op)?;
                (contrib, clen) = (b.addr, b.len);
                core.recv_bpp = b.len as u64;
            }
            CollOp::Allgather | CollOp::Allgatherv => {
                let r = need(c.recv, "receive buffer", op)?;
                let bl = blocks.ok_or_else(|| bad("Allgather needs receive blocks".into()))?;
                check_blocks("receive", &bl, r.len, p)?;
                crate::alltoall::check_disjoint(&bl, p)?;
                let (o, l) = bl.block(me);
                match c.send {
                    Some(s) => {
                        if s.len != l {
                            return Err(Error::Buffer(format!(
                                "the send buffer holds {} bytes but this rank's receive block holds {l}",
                                s.len
                            )));
                        }
                        if overlaps(s, r) {
                            return Err(Error::Buffer("send and receive buffers overlap; pass IN_PLACE as the send buffer".into()));
                        }
                        (contrib, clen) = (s.addr, s.len);
                    }
                    None => (contrib, clen) = (at(r.addr, o), l),
                }
                if let Blocks::Uniform(n) = bl {
                    core.recv_bpp = n as u64;
                }
            }
            CollOp::Gather | CollOp::Gatherv => {
                let bl = blocks;
                if is_root {
                    let r = need(c.recv, "receive buffer at the root", op)?;
                    let bl =
                        bl.ok_or_else(|| bad("the root of Gather needs receive blocks".into()))?;
                    check_blocks("receive", &bl, r.len, p)?;
                    crate::alltoall::check_disjoint(&bl, p)?;
                    if let Blocks::Uniform(n) = bl {
                        core.recv_bpp = n as u64;
                    }
                    let (o, l) = bl.block(me);
                    match c.send {
                        Some(s) => {
                            if overlaps(s, r) {
                                return Err(Error::Buffer("send and receive buffers overlap; pass IN_PLACE as the send buffer at the root".into()));
                            }
                            if s.len != l {
                                return Err(Error::Buffer(format!(
                                    "the root's send buffer holds {} bytes but its receive block holds {l}",
                                    s.len
                                )));
                            }
                            (contrib, clen) = (s.addr, s.len);
                        }
                        None => (contrib, clen) = (at(r.addr, o), l),
                    }
                } else {
                    let s = need(c.send, "send buffer", op)?;
                    (contrib, clen) = (s.addr, s.len);
                }
            }
            CollOp::Scatter | CollOp::Scatterv => {
                if is_root {
                    let s = need(c.send, "send buffer at the root", op)?;
                    let bl = blocks
                        .ok_or_else(|| bad("the root of Scatter needs send blocks".into()))?;
                    check_blocks("send", &bl, s.len, p)?;
                    if let Blocks::Uniform(n) = bl {
                        core.recv_bpp = n as u64;
                    }
                    if let Some(r) = c.recv {
                        if overlaps(s, r) {
                            return Err(Error::Buffer("send and receive buffers overlap; pass IN_PLACE as the receive buffer at the root".into()));
                        }
                        let l = bl.block(me).1;
                        if r.len != l {
                            return Err(Error::Buffer(format!(
                                "the root's receive buffer holds {} bytes but its send block holds {l}",
                                r.len
                            )));
                        }
                    }
                    // The root's contribution is its whole send buffer.
                    (contrib, clen) = (s.addr, s.len);
                    // What the root receives itself (its own block).
                    core.recv_addr = c.recv.map_or(0, |r| r.addr) as u64;
                } else {
                    let r = need(c.recv, "receive buffer", op)?;
                    (contrib, clen) = (0, 0);
                    core.recv_addr = r.addr as u64;
                    // Scatter's send_bpp is what this rank expects (checked against the root).
                    core.send_bpp = r.len as u64;
                }
            }
            CollOp::ReduceScatterBlock | CollOp::ReduceScatter => {
                let r = need(c.recv, "receive buffer", op)?;
                let bl = blocks.ok_or_else(|| bad("Reduce_scatter needs counts".into()))?;
                let total = extent::sum((0..p).map(|j| bl.block(j).1)).ok_or_else(|| {
                    bad(format!(
                        "{} counts add up to more bytes than the address space holds",
                        op.name()
                    ))
                })?;
                for j in 0..p {
                    if bl.block(j).1.checked_rem(elem) != Some(0) {
                        return Err(Error::Buffer(format!(
                            "block {j} is not a whole number of {elem}-byte elements"
                        )));
                    }
                }
                match c.send {
                    Some(s) => {
                        check_len("send buffer", s.len, total)?;
                        check_len("receive buffer", r.len, bl.block(me).1)?;
                        if overlaps(s, r) {
                            return Err(Error::Buffer("send and receive buffers overlap; pass IN_PLACE as the send buffer".into()));
                        }
                        (contrib, clen) = (s.addr, total);
                    }
                    None => {
                        check_len(
                            "receive buffer (in place, it holds the input)",
                            r.len,
                            total,
                        )?;
                        (contrib, clen) = (r.addr, total);
                    }
                }
                if let Blocks::Uniform(n) = bl {
                    core.recv_bpp = n as u64;
                }
            }
            CollOp::Allreduce | CollOp::Reduce => {
                let needs_recv = op == CollOp::Allreduce || is_root;
                let r = if needs_recv {
                    Some(need(c.recv, "receive buffer", op)?)
                } else {
                    None
                };
                let s = match c.send {
                    Some(s) => s,
                    None => r.ok_or_else(|| {
                        bad("IN_PLACE is only allowed at the root of Reduce".into())
                    })?,
                };
                if s.len.checked_rem(elem) != Some(0) {
                    return Err(Error::Buffer(format!(
                        "the buffer holds {} bytes, not a whole number of {elem}-byte elements",
                        s.len
                    )));
                }
                if let (Some(r), Some(sb)) = (r, c.send) {
                    check_len("receive buffer", r.len, sb.len)?;
                    if overlaps(sb, r) {
                        return Err(Error::Buffer(
                            "send and receive buffers overlap; pass IN_PLACE as the send buffer"
                                .into(),
                        ));
                    }
                }
                (contrib, clen) = (s.addr, s.len);
            }
        }
        if !matches!(op, CollOp::Scatter | CollOp::Scatterv) || is_root {
            core.send_bpp = clen as u64;
        }
        if in_place && !matches!(op, CollOp::Bcast) {
            core.flags |= F_IN_PLACE;
        }
        core.send_addr = contrib as u64;
        core.send_len = clen as u64;
        if clen > 0 {
            if let Some(off) = self.heap_offset(contrib, clen) {
                core.flags |= F_SEND_HEAP;
                core.send_off = off as u64;
            }
        }
        if let Some(r) = c.recv {
            if !matches!(op, CollOp::Scatter | CollOp::Scatterv) {
                core.recv_addr = r.addr as u64;
            }
            core.recv_len = r.len as u64;
            if let Some(off) = self.heap_offset(r.addr, r.len.max(1)) {
                core.flags |= F_RECV_HEAP;
                core.recv_off = off as u64;
            }
        }
        Ok(core)
    }

    /// Global checks (the same verdict on every rank) and the facts selection needs.
    pub(super) fn coll_facts(
        &self,
        seq: u64,
        op: CollOp,
        mine: &DescCore,
        peers: &[DescCore],
    ) -> Result<CallFacts> {
        let p = self.size;
        let parity = (seq & 1) as usize;
        let request = |c: &DescCore| c.forced >> super::settled::ID_SHIFT;
        if let Some(j) = peers.iter().position(|c| request(c) != request(mine)) {
            // A settled persistent request carries its id there (settled.rs).
            return Err(Error::Mismatch(format!(
                "rank {j} started persistent request {} where rank {} called {} (request {})",
                request(&peers[j]),
                self.rank,
                op.name(),
                request(mine)
            )));
        }
        if let Some(j) = peers.iter().position(|c| c.forced != mine.forced) {
            return Err(Error::Mismatch(format!(
                "ranks force different algorithms for {}: rank {j} differs from rank {}",
                op.name(),
                self.rank
            )));
        }
        let (root, _, _) = unpack_extra(mine.extra);
        if let Some((j, c)) = peers
            .iter()
            .enumerate()
            .find(|(_, c)| c.extra != mine.extra)
        {
            let (r, d, o) = unpack_extra(c.extra);
            return Err(Error::Mismatch(format!(
                "{} arguments disagree: rank {j} has root {r}, datatype {}, operator {}, rank {} has root {root}, datatype {}, operator {}",
                op.name(),
                Dtype::from_code(d).map_or("-", |d| d.name()),
                Op::from_code(o).map_or("-", |o| o.name()),
                self.rank,
                Dtype::from_code(unpack_extra(mine.extra).1).map_or("-", |d| d.name()),
                Op::from_code(unpack_extra(mine.extra).2).map_or("-", |o| o.name()),
            )));
        }
        // Rank j's count for block k, read in place: these checks run on every call, and
        // a vector per rank was most of a small call's allocations.
        let count = |j: usize, k: usize| -> usize {
            let c = &peers[j];
            if c.flags & F_VECTOR != 0 {
                Desc::slot(&self.seg, j, parity).get(Arr::RecvCounts, k)
            } else {
                c.recv_bpp as usize
            }
        };
        let len = |j: usize| peers[j].send_bpp as usize;
        let mismatch = |m: String| Err(Error::Mismatch(m));
        match op {
            CollOp::Barrier | CollOp::Alltoall | CollOp::Alltoallv => return Err(elsewhere(op)),
            CollOp::Bcast | CollOp::Allreduce => {
                if let Some(j) = (0..p).find(|&j| len(j) != len(0)) {
                    return mismatch(format!(
                        "{} sizes disagree: rank 0 has {} bytes, rank {j} has {}",
                        op.name(),
                        len(0),
                        len(j)
                    ));
                }
            }
            CollOp::Reduce => {
                if let Some(j) = (0..p).find(|&j| len(j) != len(root)) {
                    return mismatch(format!(
                        "Reduce sizes disagree: the root has {} bytes, rank {j} has {}",
                        len(root),
                        len(j)
                    ));
                }
            }
            CollOp::Allgather
            | CollOp::Allgatherv
            | CollOp::ReduceScatterBlock
            | CollOp::ReduceScatter => {
                let uniform = |j: usize| peers[j].flags & F_VECTOR == 0;
                for j in 1..p {
                    let same = if uniform(0) && uniform(j) {
                        peers[j].recv_bpp == peers[0].recv_bpp
                    } else {
                        (0..p).all(|k| count(j, k) == count(0, k))
                    };
                    if !same {
                        return mismatch(format!(
                            "{} counts disagree between ranks 0 and {j}",
                            op.name()
                        ));
                    }
                }
                let reduce = matches!(op, CollOp::ReduceScatterBlock | CollOp::ReduceScatter);
                // MPI's in-place Reduce_scatter is IN_PLACE on every rank; the algorithms
                // take different steps for the two forms, so a mix would leave ranks
                // waiting for each other.
                let in_place = |j: usize| peers[j].flags & F_IN_PLACE != 0;
                if let Some(j) = (0..p).find(|&j| reduce && in_place(j) != in_place(0)) {
                    return mismatch(format!(
                        "{}: rank {j} passes IN_PLACE and rank 0 does not, or the other way round; pass it on every rank or on none",
                        op.name()
                    ));
                }
                let total = if reduce {
                    // Rank 0 summed its counts with checks before publishing them; a sum
                    // that does not fit means its descriptor was changed since.
                    extent::sum((0..p).map(|k| count(0, k))).ok_or_else(|| {
                        Error::Mismatch(format!("{} counts of rank 0 overflow", op.name()))
                    })?
                } else {
                    0
                };
                for j in 0..p {
                    let want = if reduce { total } else { count(0, j) };
                    if len(j) != want {
                        return mismatch(format!(
                            "{}: rank {j} contributes {} bytes but the counts say {want}",
                            op.name(),
                            len(j)
                        ));
                    }
                }
            }
            CollOp::Gather | CollOp::Gatherv | CollOp::Scatter | CollOp::Scatterv => {
                // The root's own block was checked locally (prepare).
                for j in (0..p).filter(|&j| j != root) {
                    let cj = count(root, j);
                    if len(j) != cj {
                        let (what, verb) = if matches!(op, CollOp::Gather | CollOp::Gatherv) {
                            ("sends", "expects")
                        } else {
                            ("expects", "sends")
                        };
                        return mismatch(format!(
                            "{}: rank {j} {what} {} bytes but the root {verb} {}",
                            op.name(),
                            len(j),
                            cj
                        ));
                    }
                }
            }
        }
        let bytes = peers.iter().map(|c| c.send_bpp as usize).max().unwrap_or(0);
        // Which ranks' buffers does `direct` touch from another rank?
        let remote_send = |j: usize| match op {
            CollOp::Bcast | CollOp::Scatter | CollOp::Scatterv => j == root,
            CollOp::Gather | CollOp::Gatherv => false,
            _ => true,
        };
        let remote_recv = |j: usize| match op {
            CollOp::Gather | CollOp::Gatherv | CollOp::Reduce => j == root,
            CollOp::Allreduce => true,
            _ => false,
        };
        let unreachable = (0..p).find(|&j| {
            let c = &peers[j];
            (remote_send(j) && c.send_bpp > 0 && c.flags & F_SEND_HEAP == 0)
                || (remote_recv(j) && c.flags & F_RECV_HEAP == 0)
        });
        let contributes = |j: usize| match op {
            CollOp::Bcast | CollOp::Scatter | CollOp::Scatterv => j == root,
            _ => true,
        };
        Ok(CallFacts {
            nranks: p,
            bytes,
            all_inline_written: (0..p)
                .filter(|&j| contributes(j))
                .all(|j| peers[j].flags & (F_INLINE | F_TINY) != 0),
            inline_capacity: self.seg.layout().sizes.inline_bytes,
            first_outside_heap: unreachable.filter(|_| p > 1),
            cma_ok: self.cma_ok,
            ..CallFacts::default()
        })
    }
}
