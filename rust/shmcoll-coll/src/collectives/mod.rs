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

mod direct;
mod inline;
mod reach;
pub mod select;
mod staging;

pub use select::{model_coll_table, CollTable};

use shmcoll_kernels::reduce::{Dtype, Op};

use crate::alltoall::{Blocks, RawBuf};
use crate::comm::Comm;
use crate::desc::{
    pack_extra, unpack_extra, Arr, Desc, DescCore, F_FULL, F_INLINE, F_IN_PLACE, F_RECV_HEAP,
    F_SEND_HEAP, F_TINY, F_VECTOR, LINE_PAYLOAD, NO_OFFSET,
};
use crate::error::{Error, Result};

/// The collectives of this module, with mpi4py's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CollOp {
    Bcast = 0,
    Allgather = 1,
    Allgatherv = 2,
    Gather = 3,
    Gatherv = 4,
    Scatter = 5,
    Scatterv = 6,
    ReduceScatterBlock = 7,
    ReduceScatter = 8,
    Allreduce = 9,
    Reduce = 10,
}

/// Descriptor op codes of this module start here (below: Barrier, Alltoall, Alltoallv).
const OP_BASE: u32 = 16;

impl CollOp {
    pub const ALL: [CollOp; 11] = [
        CollOp::Bcast,
        CollOp::Allgather,
        CollOp::Allgatherv,
        CollOp::Gather,
        CollOp::Gatherv,
        CollOp::Scatter,
        CollOp::Scatterv,
        CollOp::ReduceScatterBlock,
        CollOp::ReduceScatter,
        CollOp::Allreduce,
        CollOp::Reduce,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CollOp::Bcast => "Bcast",
            CollOp::Allgather => "Allgather",
            CollOp::Allgatherv => "Allgatherv",
            CollOp::Gather => "Gather",
            CollOp::Gatherv => "Gatherv",
            CollOp::Scatter => "Scatter",
            CollOp::Scatterv => "Scatterv",
            CollOp::ReduceScatterBlock => "Reduce_scatter_block",
            CollOp::ReduceScatter => "Reduce_scatter",
            CollOp::Allreduce => "Allreduce",
            CollOp::Reduce => "Reduce",
        }
    }

    pub fn parse(s: &str) -> Option<CollOp> {
        CollOp::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(s.trim()))
    }

    pub fn code(self) -> u32 {
        OP_BASE + self as u32
    }

    pub fn from_code(c: u32) -> Option<CollOp> {
        CollOp::ALL.into_iter().find(|o| o.code() == c)
    }

    pub fn rooted(self) -> bool {
        matches!(
            self,
            CollOp::Bcast
                | CollOp::Gather
                | CollOp::Gatherv
                | CollOp::Scatter
                | CollOp::Scatterv
                | CollOp::Reduce
        )
    }

    pub fn reduces(self) -> bool {
        matches!(
            self,
            CollOp::ReduceScatterBlock | CollOp::ReduceScatter | CollOp::Allreduce | CollOp::Reduce
        )
    }

    /// The family that shares a selection table (the vector variant with its uniform one).
    pub fn family(self) -> CollOp {
        match self {
            CollOp::Allgatherv => CollOp::Allgather,
            CollOp::Gatherv => CollOp::Gather,
            CollOp::Scatterv => CollOp::Scatter,
            CollOp::ReduceScatter => CollOp::ReduceScatterBlock,
            o => o,
        }
    }
}

/// Algorithms of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CollAlgo {
    Inline = 0,
    Direct = 1,
    Staging = 2,
}

impl CollAlgo {
    pub const ALL: [CollAlgo; 3] = [CollAlgo::Inline, CollAlgo::Direct, CollAlgo::Staging];

    pub fn name(self) -> &'static str {
        match self {
            CollAlgo::Inline => "inline",
            CollAlgo::Direct => "direct",
            CollAlgo::Staging => "staging",
        }
    }

    pub fn parse(s: &str) -> Option<CollAlgo> {
        CollAlgo::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
    }

    pub fn describe(self) -> &'static str {
        match self {
            CollAlgo::Inline => "contributions inline in the segment, one synchronisation round (small messages)",
            CollAlgo::Direct => "single copies from/into peers' buffers (shared heap or CMA); reductions as reduce-scatter, each rank writing its slice",
            CollAlgo::Staging => "chunked rounds through the staging areas (any buffers, no CMA)",
        }
    }

    /// Why this algorithm cannot serve a call with these facts, if it cannot.
    pub fn restriction(self, f: &CollFacts) -> Option<String> {
        match self {
            CollAlgo::Inline if !f.all_inline_written => Some(format!(
                "a contribution is larger than the {} bytes of the inline area (SHMCOLL_INLINE_BYTES)",
                f.inline_capacity
            )),
            CollAlgo::Direct if !f.reachable => Some(format!(
                "rank {}'s buffer is neither in the shared heap (Comm.empty) nor reachable with CMA",
                f.first_unreachable.unwrap_or(0)
            )),
            _ => None,
        }
    }

    /// Encoded in descriptors (0: not forced).
    fn encode(a: Option<CollAlgo>) -> u64 {
        a.map_or(0, |a| a as u64 + 1)
    }
}

/// What is known identically on every rank after the arrive round.
#[derive(Clone, Copy, Debug, Default)]
pub struct CollFacts {
    /// The size that selection looks up: the largest contribution of a rank, in bytes.
    pub bytes: usize,
    pub all_inline_written: bool,
    pub inline_capacity: usize,
    /// Every buffer the direct algorithm touches in a peer is in the heap or CMA works.
    pub reachable: bool,
    pub first_unreachable: Option<usize>,
}

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
    pub forced: Option<CollAlgo>,
}

/// What served a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollChoice {
    pub op: CollOp,
    pub algo: CollAlgo,
    pub forced: bool,
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
    /// Every rank's full descriptor (index = rank).
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

fn bad(msg: String) -> Error {
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
    a.len > 0 && b.len > 0 && a.addr < b.addr + b.len && b.addr < a.addr + a.len
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
        if o.checked_add(l).is_none_or(|e| e > len) {
            return Err(Error::Buffer(format!(
                "{what} block of rank {j} ({l} bytes at byte offset {o}) ends beyond the {len}-byte buffer"
            )));
        }
    }
    Ok(())
}

impl Comm {
    /// Run one collective of this module. `call` is `Err` when the bindings already
    /// rejected the arguments: the error is then announced to the peers (which raise too).
    pub fn collective(&mut self, op: CollOp, call: Result<CollCall>) -> Result<CollChoice> {
        let seq = self.begin()?;
        let r = self.collective_inner(seq, op, call);
        if r.is_err() {
            self.stats.rejected += 1;
        }
        self.poison(r)
    }

    fn collective_inner(
        &mut self,
        seq: u64,
        op: CollOp,
        call: Result<CollCall>,
    ) -> Result<CollChoice> {
        let parity = (seq & 1) as usize;
        let prepared = call.and_then(|c| {
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
                let core = DescCore {
                    op: op.code(),
                    ..DescCore::default()
                };
                self.publish_arrive(seq, &core, Some(&e));
                self.wait_arrivals(seq)?;
                return Err(e);
            }
        };
        // Small contributions travel inline; decided from this rank's size alone.
        let contrib_len = core.send_bpp as usize;
        let wants_inline = match call.forced {
            Some(a) => a == CollAlgo::Inline,
            None => self.coll_tables.get(op.family()).wants_inline(contrib_len),
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
        self.publish_arrive(seq, &core, None);
        self.wait_arrivals(seq)?;

        let mut cores = std::mem::take(&mut self.scratch);
        let checked = self
            .read_descs(seq, op.code(), &mut cores)
            .and_then(|_| {
                // Algorithms read buffer offsets: take every full descriptor.
                let peers: Vec<DescCore> = (0..self.size)
                    .map(|j| Desc::slot(&self.seg, j, parity).core())
                    .collect();
                self.coll_facts(seq, op, &core, &peers)
                    .map(|facts| (facts, peers))
            })
            .and_then(|(facts, peers)| {
                self.select_coll(op, &facts, call.forced)
                    .map(|a| (a, peers))
            });
        self.scratch = cores;
        let (algo, peers) = checked?;
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
            peers,
        };
        match algo {
            CollAlgo::Inline => inline::run(self, &x),
            CollAlgo::Direct => direct::run(self, &x),
            CollAlgo::Staging => staging::run(self, &x),
        }?;
        let choice = CollChoice {
            op,
            algo,
            forced: call.forced.is_some(),
        };
        self.record_coll(choice);
        Ok(choice)
    }

    /// Local checks, and this rank's descriptor.
    fn prepare(&self, c: &CollCall) -> Result<DescCore> {
        let p = self.size;
        let me = self.rank;
        let op = c.op;
        if op.rooted() && c.root >= p {
            return Err(bad(format!(
                "root {} out of range for a communicator of {p} ranks",
                c.root
            )));
        }
        let is_root = me == c.root;
        let mut core = DescCore {
            op: op.code(),
            forced: CollAlgo::encode(c.forced),
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
            CollOp::Bcast => {
                let b = need(c.recv, "buffer", op)?;
                (contrib, clen) = (b.addr, b.len);
                core.recv_bpp = b.len as u64;
            }
            CollOp::Allgather | CollOp::Allgatherv => {
                let r = need(c.recv, "receive buffer", op)?;
                let bl = blocks.ok_or_else(|| bad("Allgather needs receive blocks".into()))?;
                check_blocks("receive", &bl, r.len, p)?;
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
                    None => (contrib, clen) = (r.addr + o, l),
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
                    if let Blocks::Uniform(n) = bl {
                        core.recv_bpp = n as u64;
                    }
                    let (o, l) = bl.block(me);
                    match c.send {
                        Some(s) => {
                            if overlaps(s, r) {
                                return Err(Error::Buffer("send and receive buffers overlap; pass IN_PLACE as the send buffer at the root".into()));
                            }
                            (contrib, clen) = (s.addr, s.len);
                        }
                        None => (contrib, clen) = (r.addr + o, l),
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
                let total = (0..p).map(|j| bl.block(j).1).sum::<usize>();
                for j in 0..p {
                    if bl.block(j).1 % elem != 0 {
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
                if s.len % elem != 0 {
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
            if let Some(off) = self.heap_offset(r.addr, r.len.max(1)) {
                core.flags |= F_RECV_HEAP;
                core.recv_off = off as u64;
            }
        }
        Ok(core)
    }

    /// Global checks (the same verdict on every rank) and the facts selection needs.
    fn coll_facts(
        &self,
        seq: u64,
        op: CollOp,
        mine: &DescCore,
        peers: &[DescCore],
    ) -> Result<CollFacts> {
        let p = self.size;
        let parity = (seq & 1) as usize;
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
        let counts_of = |j: usize| -> Vec<usize> {
            let c = &peers[j];
            if c.flags & F_VECTOR != 0 {
                let d = Desc::slot(&self.seg, j, parity);
                (0..p).map(|k| d.get(Arr::RecvCounts, k)).collect()
            } else {
                vec![c.recv_bpp as usize; p]
            }
        };
        let len = |j: usize| peers[j].send_bpp as usize;
        let mismatch = |m: String| Err(Error::Mismatch(m));
        match op {
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
                let c0 = counts_of(0);
                for j in 0..p {
                    if counts_of(j) != c0 {
                        return mismatch(format!(
                            "{} counts disagree between ranks 0 and {j}",
                            op.name()
                        ));
                    }
                }
                let reduce = matches!(op, CollOp::ReduceScatterBlock | CollOp::ReduceScatter);
                let total: usize = c0.iter().sum();
                for j in 0..p {
                    let want = if reduce { total } else { c0[j] };
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
                let rc = counts_of(root);
                for j in 0..p {
                    // The root's own block: in place it is already where it belongs.
                    if j == root {
                        continue;
                    }
                    if len(j) != rc[j] {
                        let (what, verb) = if matches!(op, CollOp::Gather | CollOp::Gatherv) {
                            ("sends", "expects")
                        } else {
                            ("expects", "sends")
                        };
                        return mismatch(format!(
                            "{}: rank {j} {what} {} bytes but the root {verb} {}",
                            op.name(),
                            len(j),
                            rc[j]
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
        Ok(CollFacts {
            bytes,
            all_inline_written: (0..p)
                .filter(|&j| contributes(j))
                .all(|j| peers[j].flags & (F_INLINE | F_TINY) != 0),
            inline_capacity: self.seg.layout().sizes.inline_bytes,
            reachable: self.cma_ok || p == 1 || unreachable.is_none(),
            first_unreachable: unreachable,
        })
    }

    fn select_coll(&self, op: CollOp, f: &CollFacts, forced: Option<CollAlgo>) -> Result<CollAlgo> {
        if let Some(a) = forced {
            return match a.restriction(f) {
                None => Ok(a),
                Some(why) => Err(Error::CannotServe {
                    algo: a.name(),
                    why,
                }),
            };
        }
        let t = self.coll_tables.get(op.family());
        t.candidates(f.bytes)
            .iter()
            .chain(&[CollAlgo::Direct, CollAlgo::Staging])
            .copied()
            .find(|a| a.restriction(f).is_none())
            .ok_or_else(|| {
                Error::Unsupported(format!("no algorithm can serve this {} call", op.name()))
            })
    }
}

/// The largest payload `inline` carries in the arrive line itself.
pub(crate) const TINY: usize = LINE_PAYLOAD;

/// Selection tables of every family, bound at creation (model, or a tuned file).
#[derive(Clone, Debug)]
pub struct CollTables {
    tables: Vec<CollTable>,
}

impl CollTables {
    pub fn model(m: &shmcoll_kernels::hw::Machine, p: usize, inline_bytes: usize) -> CollTables {
        CollTables {
            tables: CollOp::ALL
                .iter()
                .map(|&o| model_coll_table(o.family(), m, p, inline_bytes))
                .collect(),
        }
    }

    pub fn get(&self, family: CollOp) -> &CollTable {
        &self.tables[family as usize]
    }

    pub fn set(&mut self, family: CollOp, t: CollTable) {
        for o in CollOp::ALL {
            if o.family() == family {
                self.tables[o as usize] = t.clone();
            }
        }
    }
}

const _: () = assert!(F_RECV_HEAP != F_SEND_HEAP);
