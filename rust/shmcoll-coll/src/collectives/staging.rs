//! `staging`: chunked rounds through each rank's staging area, for buffers that peers
//! cannot reach (no shared heap, no CMA) and for any size with a bounded segment.
//!
//! A round: contributing ranks copy their next chunk into their own staging area; step;
//! consumers copy (or combine) out of their peers' areas; step. Every rank takes the same
//! rounds (their number follows from sizes the global checks made equal). Bcast, with a
//! single producer, is a pipeline instead (`bcast_pipelined`), but it too leaves every
//! rank's step count equal. Writing into a staging area only starts after the call's
//! arrive round, when every peer has finished the previous call and so no longer reads it.

use shmcoll_kernels::reduce::{reduce3_raw, reduce_into_raw, Dtype, Op};
use shmcoll_kernels::Store;

use super::direct::slice;
use super::{Call, CollOp};
use crate::comm::Comm;
use crate::error::Result;
use crate::transfer::Mover;

/// Round sizes are multiples of a cache line (and so of every element size).
const ALIGN: usize = 64;

struct Areas {
    base: Vec<usize>,
    len: usize,
}

impl Areas {
    fn of(c: &Comm) -> Areas {
        let l = c.seg.layout();
        let len = l.sizes.staging_bytes;
        Areas {
            base: (0..c.size)
                .map(|j| c.seg.ptr(l.staging(j), len) as usize)
                .collect(),
            len,
        }
    }
}

/// Copy `len` bytes; all callers pass ranges inside their own buffers (checked by prepare)
/// or inside staging areas (sized by the round computation), and the round protocol keeps
/// other writers away.
fn copy(m: &mut Mover, dst: usize, src: usize, len: usize) {
    // SAFETY: see the function comment.
    unsafe { m.copy(dst, src, len, Store::Temporal) };
}

/// `dst = src(0) op ... op src(p-1)` over `len` bytes.
fn combine(
    red: (Dtype, Op),
    p: usize,
    src: impl Fn(usize) -> usize,
    dst: usize,
    len: usize,
    m: &mut Mover,
) {
    let (dt, op) = red;
    let n = len / dt.size();
    if len == 0 {
        return;
    }
    if p == 1 {
        copy(m, dst, src(0), len);
        return;
    }
    // SAFETY: sources are `len` bytes inside staging areas (round sizes), dst `len` bytes of
    // this rank's buffer or staging area, overlapping no source.
    unsafe {
        reduce3_raw(
            dt,
            op,
            dst as *mut u8,
            src(0) as *const u8,
            src(1) as *const u8,
            n,
        )
    };
    for j in 2..p {
        // SAFETY: as above.
        unsafe { reduce_into_raw(dt, op, dst as *mut u8, src(j) as *const u8, n) };
    }
}

fn rounds(total: usize, per_round: usize) -> usize {
    total.div_ceil(per_round.max(1))
}

/// The part of `[0, len)` that round r of `per` bytes covers: (offset, length).
fn part(len: usize, per: usize, r: usize) -> (usize, usize) {
    let o = (r * per).min(len);
    (o, (len - o).min(per))
}

/// The chunk of a pipelined Bcast of `n` bytes through an area of `area` bytes: an eighth
/// of the payload, so that the readers start early, between 16 and 256 KiB, so that a
/// chunk is still in the writer's L2 when it is read and the publishes stay few; and at
/// most half the area, so that the ring has two slots at least.
fn bcast_chunk(n: usize, area: usize) -> usize {
    (n / 8)
        .next_multiple_of(ALIGN)
        .clamp(16 << 10, 256 << 10)
        .min(area / 2 / ALIGN * ALIGN)
        .max(ALIGN)
}

/// Bcast as a pipeline: the root copies chunk i into slot i mod S of its staging area and
/// publishes i + 1 on its Step line; each reader waits for that, copies the chunk out and
/// publishes i + 1 on its own; before reusing a slot the root waits until every reader
/// has published that it consumed the slot's previous chunk. So the root's copy in and
/// the readers' copies out overlap (two cores copy at once, where lockstep rounds let only
/// one side work at a time), and a root whose payload fits the ring leaves without waiting
/// for anyone. Every rank ends at the same step count, so the Step lines stay in lockstep
/// for the algorithms that call `step_all`.
fn bcast_pipelined(c: &mut Comm, x: &Call, a: &Areas, m: &mut Mover) -> Result<()> {
    let n = x.contrib_len;
    let chunk = bcast_chunk(n, a.len);
    let slots = a.len / chunk;
    let start = c.steps_taken();
    let root = x.root;
    for i in 0..n.div_ceil(chunk) {
        let (o, l) = part(n, chunk, i);
        let slot = a.base[root] + (i % slots) * chunk;
        if c.rank == root {
            if i >= slots {
                // Slot i mod S last held chunk i - S.
                for j in (0..c.size).filter(|&j| j != root) {
                    c.wait_step(j, start + (i - slots) as u64 + 1, "a reader")?;
                }
            }
            copy(m, slot, x.contrib + o, l);
            m.fence();
        } else {
            c.wait_step(root, start + i as u64 + 1, "the root's chunk")?;
            copy(m, x.recv + o, slot, l);
        }
        c.step_to(start + i as u64 + 1);
    }
    Ok(())
}

pub(super) fn run(c: &mut Comm, x: &Call) -> Result<()> {
    let a = Areas::of(c);
    let me = c.rank;
    let p = c.size;
    let mut m = Mover::default();
    match x.op {
        CollOp::Barrier | CollOp::Alltoall | CollOp::Alltoallv => {
            return Err(super::checks::elsewhere(x.op))
        }
        CollOp::Bcast => bcast_pipelined(c, x, &a, &mut m)?,
        CollOp::Allgather | CollOp::Allgatherv | CollOp::Gather | CollOp::Gatherv => {
            let w = a.len;
            let consumes = !matches!(x.op, CollOp::Gather | CollOp::Gatherv) || me == x.root;
            let max = (0..p).map(|j| x.contrib_len_of(j)).max().unwrap_or(0);
            if consumes && !x.in_place {
                let (o, l) = x.my_block(me);
                copy(&mut m, x.recv + o, x.contrib, l);
            }
            for r in 0..rounds(max, w) {
                let (o, l) = part(x.contrib_len, w, r);
                copy(&mut m, a.base[me], x.contrib + o, l);
                c.step_all()?;
                if consumes {
                    for j in (0..p).filter(|&j| j != me) {
                        let (bo, bl) = x.my_block(j);
                        let (o, l) = part(bl, w, r);
                        copy(&mut m, x.recv + bo + o, a.base[j], l);
                    }
                }
                c.step_all()?;
            }
        }
        CollOp::Scatter | CollOp::Scatterv => {
            let region = (a.len / p) / ALIGN * ALIGN;
            let rb = x.blocks_of(c, x.root);
            let max = rb.iter().map(|b| b.1).max().unwrap_or(0);
            for r in 0..rounds(max, region) {
                if me == x.root {
                    for (j, &(bo, bl)) in rb.iter().enumerate().filter(|(j, _)| *j != me) {
                        let (o, l) = part(bl, region, r);
                        copy(&mut m, a.base[me] + j * region, x.contrib + bo + o, l);
                    }
                }
                c.step_all()?;
                if me != x.root {
                    let (o, l) = part(rb[me].1, region, r);
                    copy(&mut m, x.recv + o, a.base[x.root] + me * region, l);
                }
                c.step_all()?;
            }
            if me == x.root && x.recv != 0 {
                let (bo, bl) = rb[me];
                copy(&mut m, x.recv, x.contrib + bo, bl);
            }
        }
        CollOp::ReduceScatterBlock | CollOp::ReduceScatter => {
            let Some(red) = x.reduce else { return Ok(()) };
            let region = (a.len / p) / ALIGN * ALIGN;
            let counts: Vec<usize> = (0..p).map(|k| x.my_block(k).1).collect();
            let starts: Vec<usize> = counts
                .iter()
                .scan(0, |s, &n| {
                    let o = *s;
                    *s += n;
                    Some(o)
                })
                .collect();
            let max = counts.iter().copied().max().unwrap_or(0);
            for r in 0..rounds(max, region) {
                for k in 0..p {
                    let (o, l) = part(counts[k], region, r);
                    copy(
                        &mut m,
                        a.base[me] + k * region,
                        x.contrib + starts[k] + o,
                        l,
                    );
                }
                c.step_all()?;
                let (o, l) = part(counts[me], region, r);
                combine(red, p, |j| a.base[j] + me * region, x.recv + o, l, &mut m);
                c.step_all()?;
            }
        }
        CollOp::Allreduce | CollOp::Reduce => {
            let Some(red) = x.reduce else { return Ok(()) };
            let es = red.0.size();
            let half = (a.len / 2) / ALIGN * ALIGN;
            let out = |j: usize| a.base[j] + half;
            let gets = x.op == CollOp::Allreduce || me == x.root;
            for r in 0..rounds(x.contrib_len, half) {
                let (o, l) = part(x.contrib_len, half, r);
                copy(&mut m, a.base[me], x.contrib + o, l);
                c.step_all()?;
                let n = l / es;
                let (f, k) = slice(n, p, me);
                combine(
                    red,
                    p,
                    |j| a.base[j] + f * es,
                    out(me) + f * es,
                    k * es,
                    &mut m,
                );
                c.step_all()?;
                if gets {
                    for j in 0..p {
                        let (f, k) = slice(n, p, j);
                        copy(&mut m, x.recv + o + f * es, out(j) + f * es, k * es);
                    }
                }
            }
        }
    }
    m.fence();
    Ok(())
}
