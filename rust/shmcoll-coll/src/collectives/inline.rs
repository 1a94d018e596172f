//! `inline`: every contributing rank copies its contribution into the segment before it
//! arrives (into the arrive line itself when it fits, else its inline area); after the
//! arrive round each rank builds its result from its peers' copies. One synchronisation
//! round and no done round: the areas are parity slots (see desc.rs).

use shmcoll_kernels::reduce::{reduce3_raw, reduce_into_raw};
use shmcoll_kernels::Store;

use super::{Call, CollCall, CollOp, TINY};
use crate::comm::Comm;
use crate::desc::{ArriveLine, DescCore, F_INLINE, F_STREAMED, F_TINY};
use crate::error::{Error, Result};
use crate::extent;
use crate::transfer::Mover;

/// Copy this rank's contribution into the segment, if it has one and it fits; sets
/// F_TINY or F_INLINE in `core`.
pub(super) fn write_payload(c: &Comm, seq: u64, call: &CollCall, core: &mut DescCore) {
    let contributes = match call.op {
        CollOp::Bcast | CollOp::Scatter | CollOp::Scatterv => c.rank == call.root,
        _ => true,
    };
    if !contributes {
        return;
    }
    let scatter = matches!(call.op, CollOp::Scatter | CollOp::Scatterv);
    let len = if scatter {
        // The root packs its blocks back to back, in rank order.
        call.blocks
            .map_or(0, |b| (0..c.size).map(|j| b.block(j).1).sum())
    } else {
        core.send_bpp as usize
    };
    let l = c.seg.layout();
    if call.op == CollOp::Bcast
        && len > crate::one_sided::STREAM_FROM
        && len <= l.sizes.inline_bytes
    {
        // One-sided and streamed: the root copies it after arriving (one_sided.rs); the
        // line's payload tells readers where this call's bytes start on the Progress line.
        let base = ArriveLine::of(&c.seg, c.rank, seq).payload() as *mut u64;
        // SAFETY: the payload area of our own line (LINE_PAYLOAD >= 8 bytes, 8-aligned),
        // written before the arrival is published, read by peers only after it.
        unsafe { std::ptr::write(base, c.streamed) };
        core.flags |= F_INLINE | F_STREAMED;
        return;
    }
    let (area, flag) = if len <= TINY {
        (ArriveLine::of(&c.seg, c.rank, seq).payload(), F_TINY)
    } else if len <= l.sizes.inline_bytes {
        let parity = (seq & 1) as usize;
        (
            c.seg.ptr(l.inline(c.rank, parity), l.sizes.inline_bytes) as usize,
            F_INLINE,
        )
    } else {
        return;
    };
    let mut m = Mover::default();
    let src = core.send_addr as usize;
    if scatter {
        let b = call
            .blocks
            .expect("the root of Scatter has blocks (prepare)");
        let mut at = 0;
        for j in 0..c.size {
            let (o, n) = b.block(j);
            // SAFETY: block j is inside the send buffer (prepare checked); the packed total
            // `len` fits the area (checked above); only this rank writes its areas.
            unsafe { m.copy(area + at, src + o, n, Store::Temporal) };
            at += n;
        }
    } else {
        // SAFETY: the contribution is `len` readable bytes (prepare); it fits the area.
        unsafe { m.copy(area, src, len, Store::Temporal) };
    }
    core.flags |= flag;
}

/// Address of rank j's inline copy, and its capacity.
fn payload_of(c: &Comm, x: &Call, j: usize) -> (usize, usize) {
    if x.peers[j].flags & F_TINY != 0 {
        (ArriveLine::of(&c.seg, j, x.seq).payload(), TINY)
    } else {
        let l = c.seg.layout();
        let parity = (x.seq & 1) as usize;
        (
            c.seg.ptr(l.inline(j, parity), l.sizes.inline_bytes) as usize,
            l.sizes.inline_bytes,
        )
    }
}

/// `off..off+len` of rank j's inline copy, bounds-checked (with checked arithmetic: the
/// sizes come from descriptors in shared memory).
fn src(c: &Comm, x: &Call, j: usize, off: usize, len: usize) -> Result<usize> {
    let (a, cap) = payload_of(c, x, j);
    if !extent::within(off, len, cap) {
        return Err(Error::Corrupt(format!(
            "rank {j}'s inline payload ({len} bytes at {off}) does not fit its area of {cap}"
        )));
    }
    Ok(a.saturating_add(off))
}

pub(super) fn run(c: &mut Comm, x: &Call) -> Result<()> {
    let me = c.rank;
    let p = c.size;
    let mut m = Mover::default();
    let t = Store::Temporal;
    match x.op {
        CollOp::Barrier | CollOp::Alltoall | CollOp::Alltoallv => {
            return Err(super::checks::elsewhere(x.op))
        }
        CollOp::Bcast => {
            if me != x.root {
                let s = src(c, x, x.root, 0, x.contrib_len)?;
                // SAFETY: s is inside the root's area (src checked); recv is our buffer of
                // contrib_len bytes (prepare).
                unsafe { m.copy(x.recv, s, x.contrib_len, t) };
            }
        }
        CollOp::Allgather | CollOp::Allgatherv | CollOp::Gather | CollOp::Gatherv => {
            let gather = matches!(x.op, CollOp::Gather | CollOp::Gatherv);
            if !gather || me == x.root {
                for j in 0..p {
                    if j == me && x.in_place {
                        continue;
                    }
                    let (o, l) = x.my_block(j);
                    let s = src(c, x, j, 0, l)?;
                    // SAFETY: block j of our receive buffer (prepare checked the blocks).
                    unsafe { m.copy(x.recv + o, s, l, t) };
                }
            }
        }
        CollOp::Scatter | CollOp::Scatterv => {
            let rb = x.blocks_of(c, x.root);
            let at = extent::sum(rb[..me].iter().map(|b| b.1)).unwrap_or(usize::MAX);
            let l = rb[me].1;
            if x.recv != 0 {
                let s = src(c, x, x.root, at, l)?;
                // SAFETY: our receive buffer holds l bytes (checked against the root's count).
                unsafe { m.copy(x.recv, s, l, t) };
            }
        }
        CollOp::ReduceScatterBlock | CollOp::ReduceScatter => {
            let off = extent::sum((0..me).map(|k| x.my_block(k).1)).unwrap_or(usize::MAX);
            let len = x.my_block(me).1;
            combine(c, x, off, len, x.recv)?;
        }
        CollOp::Allreduce | CollOp::Reduce => {
            if x.op == CollOp::Allreduce || me == x.root {
                combine(c, x, 0, x.contrib_len, x.recv)?;
            }
        }
    }
    m.fence();
    Ok(())
}

/// `dst = payload_0 op ... op payload_{p-1}` over `off..off+len`, in rank order.
fn combine(c: &Comm, x: &Call, off: usize, len: usize, dst: usize) -> Result<()> {
    let Some((dt, op)) = x.reduce else {
        return Err(Error::InvalidArgument(
            "a reduction without an operator".into(),
        ));
    };
    let n = len / dt.size();
    if len == 0 {
        return Ok(());
    }
    let s0 = src(c, x, 0, off, len)?;
    if c.size == 1 {
        // SAFETY: s0 is in our inline copy, dst our receive buffer (len bytes each).
        unsafe { Mover::default().copy(dst, s0, len, Store::Temporal) };
        return Ok(());
    }
    let s1 = src(c, x, 1, off, len)?;
    // SAFETY: s0, s1 are inside inline copies (checked by src); dst is our receive buffer
    // of at least len bytes (prepare), which overlaps neither.
    unsafe { reduce3_raw(dt, op, dst as *mut u8, s0 as *const u8, s1 as *const u8, n) };
    for j in 2..c.size {
        let s = src(c, x, j, off, len)?;
        // SAFETY: as above.
        unsafe { reduce_into_raw(dt, op, dst as *mut u8, s as *const u8, n) };
    }
    Ok(())
}
