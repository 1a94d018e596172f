//! Inline: each rank copies its whole send buffer into its inline area before arriving;
//! after the arrive round every rank copies its blocks out of its peers' inline areas.
//! One synchronisation round and no done round (see desc.rs for why parity slots suffice).

use super::{Blocks, Exchange, RawBuf};
use crate::comm::Comm;
use crate::desc::{Arr, ArriveLine, Desc, F_TINY, F_VECTOR, LINE_PAYLOAD};
use crate::error::Result;
use crate::extent;
use crate::transfer::Mover;
use shmcoll_kernels::Store;

/// Pack the send blocks back to back, in rank order, into this rank's inline area.
pub(super) fn write_payload(c: &Comm, parity: usize, send: RawBuf, blocks: &Blocks) {
    let l = c.seg.layout();
    let area = c.seg.ptr(l.inline(c.rank, parity), l.sizes.inline_bytes) as usize;
    pack(c, area, send, blocks);
}

/// Pack the send blocks (uniform, tiny) into this rank's arrive line for `seq`.
pub(super) fn write_line_payload(c: &Comm, seq: u64, send: RawBuf, blocks: &Blocks) {
    pack(
        c,
        ArriveLine::of(&c.seg, c.rank, seq).payload(),
        send,
        blocks,
    );
}

/// Copy the send blocks back to back, in rank order, to `area`: this rank's own inline
/// area or arrive line, whose capacity the caller checked against the packed total. The
/// block for this rank itself keeps its place but is not copied: `run` takes it straight
/// from the send buffer, which saves a copy in and out (a fifth of a 2-rank 4 KiB call).
fn pack(c: &Comm, area: usize, send: RawBuf, blocks: &Blocks) {
    let mut m = Mover::default();
    let mut at = 0;
    for j in 0..c.size {
        let (off, len) = blocks.block(j);
        if j == c.rank {
            at += len;
            continue;
        }
        // SAFETY: the block lies inside the send buffer (check_local); the packed total fits
        // `area` (checked by the caller); only this rank writes its own areas.
        unsafe { m.copy(area + at, send.addr + off, len, Store::Temporal) };
        at += len;
    }
}

/// Where rank j packed its block for this rank, as rank j's descriptor says (saturated
/// where it does not fit, so that the bounds check of `run` refuses it).
fn packed_offset(c: &Comm, x: &Exchange, j: usize) -> usize {
    let core = &x.cores[j];
    if core.flags & F_VECTOR != 0 {
        let d = Desc::slot(&c.seg, j, (x.seq & 1) as usize);
        extent::sum((0..c.rank).map(|k| d.get(Arr::SendCounts, k))).unwrap_or(usize::MAX)
    } else {
        let bpp = extent::from_shared(core.send_bpp).unwrap_or(usize::MAX);
        extent::uniform_offset(c.rank, bpp).unwrap_or(usize::MAX)
    }
}

pub(super) fn run(c: &mut Comm, x: &Exchange) -> Result<()> {
    let l = *c.seg.layout();
    let parity = (x.seq & 1) as usize;
    let store = x.choice.store.resolve(x.recv_total, x.choice.nt_threshold);
    let mut m = Mover::default();
    let mut err = None;
    x.choice.order.for_each_peer(c.rank, c.size, |j| {
        if err.is_some() {
            return;
        }
        let (roff, len) = x.recv_blocks.block(j);
        if j == c.rank {
            if !x.in_place {
                let (soff, _) = x.send_blocks.block(j);
                // SAFETY: both blocks lie inside this rank's buffers (check_local), which
                // do not overlap when the call is not in place.
                unsafe { m.copy(x.recv + roff, x.send + soff, len, store) };
            }
            // In place, this rank's block already is where it belongs.
            return;
        }
        let at = packed_offset(c, x, j);
        let (area, cap) = if x.cores[j].flags & F_TINY != 0 {
            (ArriveLine::of(&c.seg, j, x.seq).payload(), LINE_PAYLOAD)
        } else {
            let a = c.seg.ptr(l.inline(j, parity), l.sizes.inline_bytes) as usize;
            (a, l.sizes.inline_bytes)
        };
        if !extent::within(at, len, cap) {
            err = Some(crate::error::Error::Corrupt(format!(
                "rank {j}'s inline payload ({len} bytes at {at}) does not fit its area of {cap}"
            )));
            return;
        }
        let src = area + at;
        // SAFETY: src..src+len is inside rank j's inline area or arrive line (bounds checked
        // just above against the area's size), which j does not rewrite before call seq+2;
        // dst is block j of the receive buffer (checked by check_local).
        unsafe { m.copy(x.recv + roff, src, len, store) };
    });
    m.fence();
    err.map_or(Ok(()), Err)
}
