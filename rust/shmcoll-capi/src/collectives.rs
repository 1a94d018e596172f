//! The other collectives for the C ABI: Bcast, Allgather, Reduce_scatter_block, Allreduce
//! and Barrier, on raw byte buffers, with reductions named by the engine's dtype and
//! operator codes.

use shmcoll_coll::{Blocks, CollCall, CollOp, Comm, RawBuf};
use shmcoll_kernels::{Dtype, Op};

use crate::engine::{Failure, Outcome};

/// The collective codes of include/shmcoll_capi.h (`SHMCOLL_BCAST`..).
pub fn coll_op(code: i32) -> Option<CollOp> {
    match code {
        0 => Some(CollOp::Bcast),
        1 => Some(CollOp::Allgather),
        2 => Some(CollOp::ReduceScatterBlock),
        3 => Some(CollOp::Allreduce),
        _ => None,
    }
}

/// One call in bytes. `send` None: in place. `bytes` is the broadcast length, each rank's
/// Allgather block, each rank's Reduce_scatter_block result, or the Allreduce vector.
#[derive(Clone, Copy, Debug)]
pub struct Collective {
    pub op: CollOp,
    pub send: Option<usize>,
    pub recv: usize,
    pub bytes: usize,
    pub root: usize,
    /// (dtype code, operator code) of a reduction.
    pub reduce: Option<(u8, u8)>,
}

fn reduction(codes: Option<(u8, u8)>, op: CollOp) -> Outcome<Option<(Dtype, Op)>> {
    match (codes, op.reduces()) {
        (None, false) => Ok(None),
        (Some((d, o)), true) => match (Dtype::from_code(d), Op::from_code(o)) {
            (Some(d), Some(o)) => Ok(Some((d, o))),
            _ => Err(Failure::bad_argument(format!(
                "unknown dtype {d} or operator {o}"
            ))),
        },
        (None, true) => Err(Failure::bad_argument(format!(
            "{} needs a dtype and an operator",
            op.name()
        ))),
        (Some(_), false) => Err(Failure::bad_argument(format!(
            "{} does not reduce",
            op.name()
        ))),
    }
}

/// Run one collective; the name of the algorithm that served it.
pub fn collective(comm: &mut Comm, c: Collective) -> Outcome<&'static str> {
    let p = comm.size();
    let total = c
        .bytes
        .checked_mul(p)
        .ok_or_else(|| Failure::bad_argument("size times ranks overflows"))?;
    let buf = |addr: usize, len: usize| RawBuf { addr, len };
    let (send, recv, blocks) = match c.op {
        CollOp::Bcast => (None, Some(buf(c.recv, c.bytes)), None),
        CollOp::Allgather => (
            c.send.map(|a| buf(a, c.bytes)),
            Some(buf(c.recv, total)),
            Some(Blocks::Uniform(c.bytes)),
        ),
        CollOp::ReduceScatterBlock => match c.send {
            Some(a) => (
                Some(buf(a, total)),
                Some(buf(c.recv, c.bytes)),
                Some(Blocks::Uniform(c.bytes)),
            ),
            None => (
                None,
                Some(buf(c.recv, total)),
                Some(Blocks::Uniform(c.bytes)),
            ),
        },
        CollOp::Allreduce => (
            c.send.map(|a| buf(a, c.bytes)),
            Some(buf(c.recv, c.bytes)),
            None,
        ),
        other => {
            return Err(Failure::bad_argument(format!(
                "{} is not offered here",
                other.name()
            )))
        }
    };
    let call = CollCall {
        op: c.op,
        send,
        recv,
        root: c.root,
        blocks,
        reduce: reduction(c.reduce, c.op)?,
        forced: None,
    };
    Ok(comm.collective(c.op, Ok(call))?.algo.name())
}

pub fn barrier(comm: &mut Comm) -> Outcome<()> {
    Ok(comm.barrier()?)
}

#[cfg(test)]
mod tests;
