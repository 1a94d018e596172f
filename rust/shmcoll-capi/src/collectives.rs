//! The other collectives for the C ABI: Bcast, Allgather, Reduce_scatter_block, Allreduce
//! and Barrier, on raw byte buffers, with reductions named by the engine's dtype and
//! operator codes. As in engine.rs, a call this layer cannot build is rejected through
//! the engine, so that the peers fail in the same call.
#![deny(clippy::arithmetic_side_effects)]

use shmcoll_coll::{Blocks, CollCall, CollOp, Comm, Error, RawBuf};
use shmcoll_kernels::{Dtype, Op};

use crate::engine::{rejection, Class, Outcome};

/// The collectives `shmcoll_collective` offers (include/shmcoll_capi.h names their codes).
pub const OFFERED: [CollOp; 4] = [
    CollOp::Bcast,
    CollOp::Allgather,
    CollOp::ReduceScatterBlock,
    CollOp::Allreduce,
];

/// The collective of a code (the engine's, `CollOp::code`, as `SHMCOLL_BCAST`.. spell
/// them), if `shmcoll_collective` offers it.
pub fn coll_op(code: i32) -> Option<CollOp> {
    u32::try_from(code)
        .ok()
        .and_then(CollOp::from_code)
        .filter(|o| OFFERED.contains(o))
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

fn reduction(codes: Option<(u8, u8)>, op: CollOp) -> Result<Option<(Dtype, Op)>, Error> {
    match (codes, op.reduces()) {
        (None, false) => Ok(None),
        (Some((d, o)), true) => match (Dtype::from_code(d), Op::from_code(o)) {
            (Some(d), Some(o)) => Ok(Some((d, o))),
            (None, _) => Err(rejection(Class::Datatype, &format!("unknown dtype {d}"))),
            (_, None) => Err(rejection(Class::Operator, &format!("unknown operator {o}"))),
        },
        (None, true) => Err(rejection(
            Class::Argument,
            &format!("{} needs a dtype and an operator", op.name()),
        )),
        (Some(_), false) => Err(rejection(
            Class::Argument,
            &format!("{} does not reduce", op.name()),
        )),
    }
}

/// Whether the engine reduces `dtype` with `redop` (codes of the C header): the shim
/// hands other pairs to PMPI, as all ranks of a correct call pass the same pair.
pub fn reduces(dtype: i32, redop: i32) -> bool {
    match (u8::try_from(dtype), u8::try_from(redop)) {
        (Ok(d), Ok(o)) => match (Dtype::from_code(d), Op::from_code(o)) {
            (Some(d), Some(o)) => o.supports(d),
            _ => false,
        },
        _ => false,
    }
}

fn build(c: Collective, p: usize) -> Result<CollCall<'static>, Error> {
    let total = c
        .bytes
        .checked_mul(p)
        .ok_or_else(|| rejection(Class::Count, "size times ranks overflows"))?;
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
            return Err(rejection(
                Class::Argument,
                &format!("{} is not offered here", other.name()),
            ))
        }
    };
    Ok(CollCall {
        op: c.op,
        send,
        recv,
        root: c.root,
        blocks,
        reduce: reduction(c.reduce, c.op)?,
        forced: None,
    })
}

/// Run one collective; the name of the algorithm that served it.
pub fn collective(comm: &mut Comm, c: Collective) -> Outcome<&'static str> {
    let call = build(c, comm.size());
    Ok(comm.collective(c.op, call)?.algo.name())
}

pub fn barrier(comm: &mut Comm) -> Outcome<()> {
    Ok(comm.barrier()?)
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
