//! The collectives with one buffer per side (Allreduce, Reduce, Bcast, Allgather,
//! Reduce_scatter_block, Gather, Scatter, Reduce_scatter) as the native methods run them.
//! Each argument is read natively where it can be (a plain buffer, IN_PLACE, a
//! specification such as `[buf, MPI.DOUBLE]`, a predefined operator on an element type
//! the kernels combine: the common calls, which so pay for no Python code) and else by the
//! resolver (resolver.rs); then the call runs (collectives.rs). What the resolver declines
//! comes back as `Declined` for calls.rs to settle (MPI serves the call, or every rank
//! rejects it).

use pyo3::prelude::*;

use shmcoll_coll::{Blocks, CollCall, CollOp, Comm, RawBuf};
use shmcoll_kernels::{Dtype, Op};

use crate::buffer_spec::{side, Arg};
use crate::collectives::{run, CollArgs};
use crate::errors::{argument_error, to_py};
use crate::gil::run_releasing_on_block;
use crate::pyobj::{in_bytes, operator, prefix_sums};
use crate::resolver::{self, Declined};
use crate::vector_spec::ints;

/// The element type and operator of a reduction: natively when every buffer was read
/// natively as an element type the kernels know and the kernels combine the operator on
/// it, else as the resolver reads them. The send and receive buffers must agree on the
/// element type where both are given (mpi4py: "mismatch in send and receive MPI
/// datatypes"); the bytes of one are never combined as the other's.
fn reduction(
    py: Python<'_>,
    op: CollOp,
    (send, recv): (Option<&Arg<'_, '_>>, Option<&Arg<'_, '_>>),
    given: (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
    red: Option<&Bound<'_, PyAny>>,
    blocks: (usize, usize),
) -> Result<(Dtype, Op), Declined> {
    // Per side: None (no buffer here: in place, or Reduce's receive side off the root),
    // Some(None) (a type the kernels do not know, or not read natively), Some(Some(d)).
    let elem = |a: Option<&Arg<'_, '_>>| a.map(|a| a.elem());
    let (s, r) = (elem(send), elem(recv));
    if let (Some(Some(sd)), Some(Some(rd))) = (s, r) {
        if sd != rd {
            let msg = format!(
                "{}: the send buffer holds {} and the receive buffer {}: mismatch in send and receive datatypes",
                op.name(),
                sd.name(),
                rd.name()
            );
            return Err(Declined(argument_error(py, &msg, false)));
        }
    }
    if s != Some(None) && r != Some(None) {
        let d = r.flatten().or(s.flatten());
        if let Some((d, o)) = d.zip(operator(py, red)).filter(|(d, o)| o.supports(*d)) {
            return Ok((d, o));
        }
    }
    resolver::reduction(py, op.name(), given.0, given.1, red, blocks)
}

/// The bytes of each of `p` equal blocks of `a`, each a whole number of its elements
/// (ArgumentError when they do not split so).
fn split(py: Python<'_>, a: Option<&Arg<'_, '_>>, p: usize, what: &str) -> Result<usize, Declined> {
    let n = a.and_then(Arg::nbytes).unwrap_or(0);
    let item = a.and_then(Arg::item_size).unwrap_or(1);
    if p == 0 || !n.is_multiple_of(p) || !(n / p).is_multiple_of(item) {
        let msg = format!("the {what} ({n} bytes) does not split into {p} equal blocks of whole {item}-byte elements");
        return Err(Declined(argument_error(py, &msg, false)));
    }
    Ok(n / p)
}

/// One call of a collective with one buffer per side (`sendbuf` None for Bcast).
#[allow(clippy::too_many_arguments)]
pub(crate) fn collective(
    py: Python<'_>,
    comm: &mut Comm,
    op: CollOp,
    sendbuf: Option<&Bound<'_, PyAny>>,
    recvbuf: &Bound<'_, PyAny>,
    root: usize,
    red: Option<&Bound<'_, PyAny>>,
    algorithm: Option<&str>,
) -> Result<PyResult<()>, Declined> {
    let p = comm.size();
    // Reduce and Gather: only the root has a receive buffer; Scatter: only the root a send
    // buffer (mpi4py ignores the others').
    let at_root = comm.rank() == root;
    let needs_recv = at_root || !matches!(op, CollOp::Reduce | CollOp::Gather);
    let sendbuf = if op == CollOp::Scatter && !at_root {
        None
    } else {
        sendbuf
    };
    // As mpi4py reads them, a count is per block in Gather's and Allgather's receive
    // specification, Scatter's send one, and Reduce_scatter_block's send one (its receive
    // one in place).
    let send_blocks = match op {
        CollOp::Scatter | CollOp::ReduceScatterBlock => p,
        _ => 1,
    };
    // IN_PLACE is a send buffer, except for Scatter, whose root takes it as its receive
    // buffer.
    let send = match sendbuf {
        None => None,
        Some(s) => side(s, send_blocks, op != CollOp::Scatter, op == CollOp::Scatter)?,
    };
    let in_place = sendbuf.is_some() && send.is_none();
    let recv_blocks = match op {
        CollOp::Allgather | CollOp::Gather => p,
        CollOp::ReduceScatterBlock if in_place => p,
        _ => 1,
    };
    let recv_len = matches!(
        op,
        CollOp::Allgather | CollOp::Gather | CollOp::ReduceScatterBlock
    );
    let recv = if needs_recv {
        side(recvbuf, recv_blocks, op == CollOp::Scatter, recv_len)?
    } else {
        None
    };
    let (mut dtype, mut reduce_op) = (None, None);
    if op.reduces() {
        let given_recv = needs_recv.then_some(recvbuf);
        let (d, o) = reduction(
            py,
            op,
            (send.as_ref(), recv.as_ref()),
            (sendbuf, given_recv),
            red,
            (send_blocks, recv_blocks),
        )?;
        (dtype, reduce_op) = (Some(d), Some(o));
    }
    let block = match op {
        CollOp::Allgather => Some(split(py, recv.as_ref(), p, "receive buffer")?),
        CollOp::ReduceScatterBlock if in_place => {
            Some(split(py, recv.as_ref(), p, "receive buffer")?)
        }
        CollOp::ReduceScatterBlock => recv.as_ref().and_then(Arg::nbytes),
        // The root's buffer of p blocks sets the block; the others' size comes from their
        // own buffer, and the engine checks that all agree.
        CollOp::Gather if at_root => Some(split(py, recv.as_ref(), p, "receive buffer")?),
        CollOp::Scatter if at_root => Some(split(py, send.as_ref(), p, "send buffer")?),
        _ => None,
    };
    Ok(run(
        py,
        comm,
        CollArgs {
            op,
            sendbuf: send.as_ref().map(Arg::obj),
            recvbuf: recv.as_ref().map(Arg::obj),
            send_window: send.as_ref().and_then(Arg::window),
            recv_window: recv.as_ref().and_then(Arg::window),
            root,
            block,
            counts: None,
            displs: None,
            dtype,
            reduce_op,
            algorithm,
        },
    ))
}

/// Reduce_scatter: rank i gets the `recvcounts[i]` elements after those of ranks 0..i-1;
/// without `recvcounts`, each rank's receive buffer holds its count, gathered from every
/// rank first (in the same native call).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    py: Python<'_>,
    comm: &mut Comm,
    sendbuf: &Bound<'_, PyAny>,
    recvbuf: &Bound<'_, PyAny>,
    recvcounts: Option<&Bound<'_, PyAny>>,
    red: Option<&Bound<'_, PyAny>>,
    algorithm: Option<&str>,
) -> Result<PyResult<()>, Declined> {
    let p = comm.size();
    let send = side(sendbuf, 1, true, false)?;
    let recv = side(recvbuf, 1, false, recvcounts.is_none())?;
    let (d, o) = reduction(
        py,
        CollOp::ReduceScatter,
        (send.as_ref(), recv.as_ref()),
        (Some(sendbuf), Some(recvbuf)),
        red,
        (1, 1),
    )?;
    let isz = d.size();
    let counts = match recvcounts {
        Some(rc) => match ints(rc, p).filter(|c| in_bytes(c, isz).is_some()) {
            Some(c) => c,
            None => resolver::counts(rc, p, isz)?,
        },
        None if send.is_none() => {
            let msg = "Reduce_scatter with IN_PLACE needs recvcounts";
            return Err(Declined(argument_error(py, msg, false)));
        }
        None => {
            let have = recv.as_ref().and_then(Arg::nbytes).unwrap_or(0);
            if !have.is_multiple_of(isz.max(1)) {
                let msg = format!("Reduce_scatter: the receive buffer ({have} bytes) is not a whole number of {isz}-byte elements");
                return Err(Declined(argument_error(py, &msg, false)));
            }
            let mine = have / isz.max(1);
            match gather_counts(py, comm, mine) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            }
        }
    };
    let Some(bytes) = in_bytes(&counts, isz) else {
        let msg = "Reduce_scatter: the counts are more bytes than any buffer can hold";
        return Err(Declined(argument_error(py, msg, false)));
    };
    let Some(displs) = prefix_sums(&bytes) else {
        let msg = "Reduce_scatter: the counts add up to more bytes than any buffer can hold";
        return Err(Declined(argument_error(py, msg, false)));
    };
    Ok(run(
        py,
        comm,
        CollArgs {
            op: CollOp::ReduceScatter,
            sendbuf: send.as_ref().map(Arg::obj),
            recvbuf: recv.as_ref().map(Arg::obj),
            send_window: send.as_ref().and_then(Arg::window),
            recv_window: recv.as_ref().and_then(Arg::window),
            root: 0,
            block: None,
            counts: Some(bytes),
            displs: Some(displs),
            dtype: Some(d),
            reduce_op: Some(o),
            algorithm,
        },
    ))
}

/// Every rank's `mine` (an Allgather of one 8-byte count per rank).
fn gather_counts(py: Python<'_>, comm: &mut Comm, mine: usize) -> PyResult<Vec<usize>> {
    let p = comm.size();
    let send = [mine as u64];
    let mut every = vec![0u64; p];
    // The engine reads and writes these two arrays, which live until it returns.
    let call = CollCall {
        op: CollOp::Allgather,
        send: Some(RawBuf {
            addr: send.as_ptr() as usize,
            len: 8,
        }),
        recv: Some(RawBuf {
            addr: every.as_mut_ptr() as usize,
            len: p.saturating_mul(8),
        }),
        root: 0,
        blocks: Some(Blocks::Uniform(8)),
        reduce: None,
        forced: None,
    };
    run_releasing_on_block(py, || comm.collective(CollOp::Allgather, Ok(call)))
        .map_err(|e| to_py(py, e))?;
    Ok(every.into_iter().map(|c| c as usize).collect())
}
