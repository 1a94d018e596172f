//! Native entry points of the collectives with one buffer per side (Allreduce, Reduce,
//! Bcast, Allgather, Reduce_scatter_block, Gather, Scatter) for plain arrays: a call with two NumPy arrays and a
//! predefined operator goes from Python straight into the engine, as Alltoall does. Any
//! other form (mpi4py buffer specifications, datatypes, user operators) returns `None`
//! here and the caller hands it to the Python implementation (`Comm._py_<Name>`).

use pyo3::prelude::*;

use shmcoll_coll::{CollOp, Comm};

use crate::buffer_spec::{arg, Arg};
use crate::collectives::{run, CollArgs, Named};
use crate::pyobj::{in_bytes, operator, prefix_sums};
use crate::vector_spec::ints;

/// Reduce_scatter with plain arrays or specifications, a predefined operator and
/// `recvcounts` given as a list or tuple of ints or a NumPy integer array (without them,
/// the counts must first be gathered: the Python implementation does that); None sends
/// the call there.
pub fn try_reduce_scatter(
    py: Python<'_>,
    comm: &mut Comm,
    sendbuf: &Bound<'_, PyAny>,
    recvbuf: &Bound<'_, PyAny>,
    recvcounts: Option<&Bound<'_, PyAny>>,
    red: Option<&Bound<'_, PyAny>>,
    algorithm: Option<&str>,
) -> Option<PyResult<()>> {
    let p = comm.size();
    let counts = ints(recvcounts?, p)?;
    let recv = arg(recvbuf, 1)??;
    let send = arg(sendbuf, 1)?;
    // The receive buffer's element type first, as the Python implementation reads it.
    let d = recv.elem().or_else(|| send.as_ref().and_then(Arg::elem))?;
    let o = operator(py, red)?;
    if !o.supports(d) {
        return None;
    }
    let bytes = in_bytes(&counts, d.size())?;
    let displs = prefix_sums(&bytes)?;
    Some(run(
        py,
        comm,
        CollArgs {
            op: CollOp::ReduceScatter,
            sendbuf: send.as_ref().map(Arg::obj),
            recvbuf: Some(recv.obj()),
            send_window: send.as_ref().and_then(Arg::window),
            recv_window: recv.window(),
            root: 0,
            block: None,
            counts: Some(bytes),
            displs: Some(displs),
            dtype: Some(Named::Value(d)),
            reduce_op: Some(Named::Value(o)),
            algorithm,
        },
    ))
}

/// One call on the fast path, or None when the arguments need the Python implementation.
#[allow(clippy::too_many_arguments)]
pub fn try_fast(
    py: Python<'_>,
    comm: &mut Comm,
    op: CollOp,
    sendbuf: Option<&Bound<'_, PyAny>>,
    recvbuf: &Bound<'_, PyAny>,
    root: usize,
    red: Option<&Bound<'_, PyAny>>,
    algorithm: Option<&str>,
) -> Option<PyResult<()>> {
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
    let send = match sendbuf {
        None => None,
        Some(s) => arg(s, send_blocks)?,
    };
    let in_place = sendbuf.is_some() && send.is_none();
    let recv_blocks = match op {
        CollOp::Allgather | CollOp::Gather => p,
        CollOp::ReduceScatterBlock if in_place => p,
        _ => 1,
    };
    // IN_PLACE as a receive buffer (Scatter's root) is the Python implementation's.
    let recv = if needs_recv {
        Some(arg(recvbuf, recv_blocks)??)
    } else {
        None
    };
    let (mut block, mut dt, mut rop) = (None, None, None);
    if op.reduces() {
        // The receive buffer's element type first, as the Python implementation reads it.
        let d = recv
            .as_ref()
            .and_then(Arg::elem)
            .or_else(|| send.as_ref().and_then(Arg::elem))?;
        let o = operator(py, red)?;
        if !o.supports(d) {
            return None; // the Python path falls back to MPI or raises
        }
        (dt, rop) = (Some(Named::Value(d)), Some(Named::Value(o)));
    }
    let whole_blocks = |a: Option<&Arg<'_, '_>>| -> Option<usize> {
        let n = a?.nbytes()?;
        n.is_multiple_of(p).then_some(n / p)
    };
    match op {
        CollOp::Allgather => block = Some(whole_blocks(recv.as_ref())?),
        CollOp::ReduceScatterBlock => {
            block = Some(if in_place {
                whole_blocks(recv.as_ref())?
            } else {
                recv.as_ref()?.nbytes()?
            });
        }
        // The root's buffer of p blocks sets the block; the others' size comes from their
        // own buffer, and the engine checks that all agree.
        CollOp::Gather if at_root => block = Some(whole_blocks(recv.as_ref())?),
        CollOp::Scatter if at_root => block = Some(whole_blocks(send.as_ref())?),
        _ => {}
    }
    let (send, recv) = if op == CollOp::Bcast {
        (None, recv)
    } else {
        (send, recv)
    };
    Some(run(
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
            dtype: dt,
            reduce_op: rop,
            algorithm,
        },
    ))
}
