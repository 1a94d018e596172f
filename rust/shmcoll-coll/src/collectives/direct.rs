//! `direct`: single copies between this rank's buffers and its peers' (heap or CMA).
//!
//! Data movement: a rank pushes what it sends while the data is hot in its cache and
//! every rank still copies at once (Allgather, Gather, a small Scatter's root), and pulls
//! what it receives where a single writer would serialise the copies (Bcast, a large
//! Scatter). Reductions: the vector is cut
//! into one slice per rank; rank i combines slice i of every contribution in rank order,
//! in pieces small enough to stay in cache, and writes the result wherever it is needed
//! (every receive buffer for Allreduce, the root's for Reduce). Only rank i touches slice
//! i of any buffer, which is what makes in-place calls safe. A done round ends every call,
//! so that no buffer is reused while a peer still reads or writes it.

use shmcoll_kernels::Store;

use super::reach::{at, Reach, Side};
use super::{Call, CollOp};
use crate::comm::Comm;
use crate::desc::{F_RECV_HEAP, F_SEND_HEAP};
use crate::error::Result;

/// Reductions work in pieces of this many bytes: the combined piece is still in cache
/// when it is written to the peers.
const PIECE: usize = 64 << 10;

/// Slice i of `n` elements split into `p` nearly equal parts: (first element, count).
pub(super) fn slice(n: usize, p: usize, i: usize) -> (usize, usize) {
    let lo = n * i / p;
    let hi = n * (i + 1) / p;
    (lo, hi - lo)
}

pub(super) fn run(c: &mut Comm, x: &Call) -> Result<()> {
    let failure = {
        let mut r = Reach::new(c);
        match x.op {
            CollOp::Barrier | CollOp::Alltoall | CollOp::Alltoallv => {
                return Err(super::checks::elsewhere(x.op))
            }
            CollOp::Bcast => bcast(&mut r, x),
            CollOp::Allgather | CollOp::Allgatherv => allgather(&mut r, x),
            CollOp::Gather | CollOp::Gatherv => gather(&mut r, x),
            CollOp::Scatter | CollOp::Scatterv => scatter(&mut r, x),
            CollOp::Allreduce | CollOp::Reduce => allreduce(&mut r, x),
            CollOp::ReduceScatterBlock | CollOp::ReduceScatter => {
                // In place, the result overwrites block 0 of this rank's input, which rank 0
                // reads: reduce into a temporary, wait for every reader, then copy.
                let tmp = reduce_scatter(&mut r, x);
                let f = r.finish();
                if let Some(tmp) = tmp {
                    c.step_all()?;
                    // SAFETY: recv holds at least tmp.len() bytes (checked by prepare) and
                    // nobody reads this rank's buffer after the step.
                    unsafe {
                        crate::transfer::Mover::default().copy(
                            x.recv,
                            tmp.as_ptr() as usize,
                            tmp.len(),
                            Store::Temporal,
                        )
                    };
                }
                return c.done_round(x.seq, f);
            }
        }
        r.finish()
    };
    c.done_round(x.seq, failure)
}

/// Bcast. When every rank can read the root's buffer (it is in the heap, or CMA works)
/// and write every destination, the copies are shared out: rank k copies part k of the
/// root's buffer into every non-root buffer, and all cores copy at once (a single reader
/// is bound by one core's copy rate). A non-root reads its part of a private root buffer
/// with CMA once, into its own buffer, and forwards it from there. Else each non-root
/// reads the whole buffer from the root.
fn bcast(r: &mut Reach, x: &Call) {
    let (me, p, root, n) = (r.c.rank, r.c.size, x.root, x.contrib_len);
    let root_in_heap = x.peers[root].flags & F_SEND_HEAP != 0;
    let dests_reachable = r.c.cma_ok || all_in_heap(x, root, F_RECV_HEAP);
    let split = n >= SPLIT_MIN && dests_reachable && (root_in_heap || r.c.cma_ok);
    if !split {
        if me != root {
            let store = Store::Hybrid.resolve(n, r.c.cfg.nt_threshold);
            r.read(x, at(root, Side::Send, 0), x.recv, n, store);
        }
        return;
    }
    let (off, len) = part(n, p, me);
    // Streaming pays once what this rank writes no longer fits its cache share.
    let store = Store::Hybrid.resolve(len * (p - 1), r.c.cfg.nt_threshold);
    let forwards = !root_in_heap && me != root;
    let src = if root_in_heap {
        match r.local(x, root, Side::Send, off, len) {
            Some(a) => a,
            None => return, // refused: reported in the done round
        }
    } else if me == root {
        x.contrib + off
    } else {
        r.read(x, at(root, Side::Send, off), x.recv + off, len, store);
        x.recv + off
    };
    // Chunk by chunk to every destination: the part is read from memory once, not once per
    // destination (at 4 ranks that is a third of the traffic).
    let to: Vec<_> = (0..p)
        .filter(|&j| j != root && !(forwards && j == me))
        .map(|j| at(j, Side::Recv, off))
        .collect();
    r.write_all(x, &to, src, len, store);
}

/// Below this, one reader beats splitting the copy (the split costs a line of every
/// part on two cores). From it the split wins, since the root's own part is pushed from
/// its cache and every core copies at once (figures in docs/results-collectives.md).
const SPLIT_MIN: usize = 8 << 10;

/// Part k of `n` bytes cut into `p` cache-line aligned parts: (offset, length).
fn part(n: usize, p: usize, k: usize) -> (usize, usize) {
    let per = n.div_ceil(p).div_ceil(64) * 64;
    let lo = (k * per).min(n);
    (lo, (n - lo).min(per))
}

/// Allgather. When every rank can write every receive buffer (it is in the heap, or CMA
/// works) each rank pushes its own block to every peer: it reads data hot in its own cache
/// and (above the NT threshold, in the heap) streams it to memory, where pulling would
/// fetch every line from the writer's cache, a slow path between cores. Through CMA the
/// same holds: process_vm_writev of the hot block beats process_vm_readv of the peers'
/// (docs/results-collectives.md, "The measurements behind the model's choices"). Else each
/// rank pulls, from the heap or with CMA.
fn allgather(r: &mut Reach, x: &Call) {
    let me = r.c.rank;
    let p = r.c.size;
    let store = Store::Hybrid.resolve(x.recv_len, r.c.cfg.nt_threshold);
    let push = pushes(
        r,
        all_in_heap(x, me, F_RECV_HEAP),
        all_in_heap(x, me, F_SEND_HEAP),
    );
    if push {
        let mut to = Vec::with_capacity(p);
        for k in 0..p {
            let j = (me + k) % p;
            if j == me && x.in_place {
                continue; // already in place
            }
            let (o, _) = if j == me {
                x.my_block(me)
            } else {
                x.blocks_of(r.c, j)[me]
            };
            to.push(at(j, Side::Recv, o));
        }
        r.write_all(x, &to, x.contrib, x.contrib_len, store);
        return;
    }
    for k in 0..p {
        let j = (me + k) % p;
        let (o, l) = x.my_block(j);
        if j == me && x.in_place {
            continue;
        }
        r.read(x, at(j, Side::Send, 0), x.recv + o, l, store);
    }
}

fn gather(r: &mut Reach, x: &Call) {
    let me = r.c.rank;
    if me == x.root {
        if !x.in_place {
            let (o, l) = x.my_block(me);
            r.read(x, at(me, Side::Send, 0), x.recv + o, l, Store::Temporal);
        }
        return;
    }
    let (o, l) = x.blocks_of(r.c, x.root)[me];
    r.write(x, at(x.root, Side::Recv, o), x.contrib, l, Store::Temporal);
}

/// Scatter. While the blocks the root sends fit in a quarter of its L2 (they are hot
/// there: it has just written them) and it can write every receive buffer, the root
/// pushes them; pulling would fetch every line from the root's cache. Larger, each
/// non-root pulls its block, so that all cores copy at once (where each wins, measured:
/// docs/results-collectives.md, "The measurements behind the model's choices").
fn scatter(r: &mut Reach, x: &Call) {
    let (me, p, root) = (r.c.rank, r.c.size, x.root);
    let blocks = x.blocks_of(r.c, root);
    let pushed: usize = (0..p).filter(|&j| j != root).map(|j| blocks[j].1).sum();
    let push = pushed <= scatter_push_limit()
        && pushes(
            r,
            all_in_heap(x, root, F_RECV_HEAP),
            x.peers[root].flags & F_SEND_HEAP != 0,
        );
    if me == root {
        if x.recv != 0 {
            let (o, l) = x.my_block(me);
            r.read(x, at(me, Side::Send, o), x.recv, l, Store::Temporal);
        }
        if push {
            for j in (1..p).map(|k| (me + k) % p) {
                let (o, l) = blocks[j];
                r.write(x, at(j, Side::Recv, 0), x.contrib + o, l, Store::Temporal);
            }
        }
        return;
    }
    if push {
        return;
    }
    let (o, l) = blocks[me];
    let store = Store::Hybrid.resolve(l, r.c.cfg.nt_threshold);
    r.read(x, at(root, Side::Send, o), x.recv, l, store);
}

/// Whether the senders can push: every destination is in the heap (a memcpy), or CMA
/// works and some source is private. With every source in the heap but a destination
/// private, pulling is a memcpy where pushing is a system call per peer.
fn pushes(r: &Reach, dests_in_heap: bool, sources_in_heap: bool) -> bool {
    dests_in_heap || (r.c.cma_ok && !sources_in_heap)
}

/// Whether every rank but `skip` has `flag` (F_SEND_HEAP, F_RECV_HEAP) set.
fn all_in_heap(x: &Call, skip: usize, flag: u32) -> bool {
    x.peers
        .iter()
        .enumerate()
        .all(|(j, d)| j == skip || d.flags & flag != 0)
}

/// The most a root pushes in a Scatter: a quarter of the L2 (128 KiB if unknown).
fn scatter_push_limit() -> usize {
    (shmcoll_kernels::hw::machine().l2_bytes / 4).max(128 << 10)
}

/// Allreduce and Reduce: this rank's slice, piece by piece.
fn allreduce(r: &mut Reach, x: &Call) {
    let Some(red) = x.reduce else { return };
    let es = red.0.size();
    let me = r.c.rank;
    let p = r.c.size;
    let (first, count) = slice(x.contrib_len / es, p, me);
    let mut tmps = [Vec::new(), Vec::new()];
    let mut acc: Vec<u8> = Vec::new();
    let store = Store::Hybrid.resolve(x.contrib_len, r.c.cfg.nt_threshold);
    let all = x.op == CollOp::Allreduce;
    // Where this rank's result lands in its own buffer (it has one: Allreduce, or root).
    let own_out = all || me == x.root;
    let piece_elems = (PIECE / es).max(1);
    let mut e = first;
    while e < first + count {
        let n = piece_elems.min(first + count - e);
        let (off, len) = (e * es, n * es);
        // Combine into our own receive buffer when it is not one of the sources (or is
        // rank 0's or rank 1's exactly, which the kernels allow), else into a temporary.
        let dst = if own_out && (!x.in_place || me < 2) {
            x.recv + off
        } else {
            if acc.len() < len {
                acc.resize(len, 0);
            }
            acc.as_mut_ptr() as usize
        };
        r.reduce_all(x, red, off, dst, len, &mut tmps);
        if own_out && dst != x.recv + off {
            // SAFETY: both ranges are len bytes: our receive buffer (checked) and acc.
            unsafe { r.m.copy(x.recv + off, dst, len, Store::Temporal) };
        }
        for k in 1..p {
            let j = (me + k) % p;
            if all || j == x.root {
                r.write(x, at(j, Side::Recv, off), dst, len, store);
            }
        }
        e += n;
    }
}

/// Reduce_scatter: this rank's block of every contribution, combined. Returns the result
/// when it must wait (in place) before landing in the receive buffer.
fn reduce_scatter(r: &mut Reach, x: &Call) -> Option<Vec<u8>> {
    let red = x.reduce?;
    let me = r.c.rank;
    let off: usize = (0..me).map(|k| x.my_block(k).1).sum();
    let len = x.my_block(me).1;
    let mut tmps = [Vec::new(), Vec::new()];
    let mut out = vec![0u8; if x.in_place { len } else { 0 }];
    let dst = if x.in_place {
        out.as_mut_ptr() as usize
    } else {
        x.recv
    };
    // Piece by piece, so that the partial result stays in cache across the p - 1 passes
    // (whole-block passes would stream it through memory p - 1 times).
    let piece = (PIECE / red.0.size()).max(1) * red.0.size();
    let mut done = 0;
    while done < len {
        let n = piece.min(len - done);
        r.reduce_all(x, red, off + done, dst + done, n, &mut tmps);
        done += n;
    }
    x.in_place.then_some(out)
}
