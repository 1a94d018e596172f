//! Running the collectives other than Alltoall(v) on resolved buffers and byte counts
//! (`run`, which the routes of one_buffer.rs and vector_spec.rs end in), and what every
//! collective call of a rank may have to do instead: take part as a rejection (`reject`)
//! or agree with every rank that MPI serves it (`agree_fallback`).

use pyo3::prelude::*;

use shmcoll_coll::{Algo, Blocks, CollCall, CollOp, Comm, Error, RawBuf};
use shmcoll_kernels::{Dtype, Op};

use crate::buffer::{hold_for_call, Borrowed};
use crate::errors::to_py;
use crate::gil::{run_releasing_on_block, DETACH_BYTES};

/// The arguments of one collective call.
pub struct CollArgs<'a, 'py> {
    pub op: CollOp,
    pub sendbuf: Option<&'a Bound<'py, PyAny>>,
    pub recvbuf: Option<&'a Bound<'py, PyAny>>,
    /// The (offset, length) in bytes of each buffer that the call uses (a specification
    /// such as `[buf, count, datatype]`); None for all of it.
    pub send_window: Option<(usize, usize)>,
    pub recv_window: Option<(usize, usize)>,
    pub root: usize,
    pub block: Option<usize>,
    pub counts: Option<Vec<usize>>,
    pub displs: Option<Vec<usize>>,
    pub dtype: Option<Dtype>,
    pub reduce_op: Option<Op>,
    pub algorithm: Option<&'a str>,
}

pub fn parse<T>(
    what: &str,
    s: Option<&str>,
    f: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, Error> {
    match s {
        None => Ok(None),
        Some(s) if s.eq_ignore_ascii_case("auto") && what == "algorithm" => Ok(None),
        Some(s) => f(s)
            .map(Some)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown {what} {s:?}"))),
    }
}

fn borrow(
    held: &mut Vec<Borrowed>,
    pyerr: &mut Option<PyErr>,
    obj: Option<&Bound<'_, PyAny>>,
    window: Option<(usize, usize)>,
    writable: bool,
    what: &str,
) -> Result<Option<RawBuf>, Error> {
    let Some(o) = obj else { return Ok(None) };
    let raw = hold_for_call(held, pyerr, o, writable, what)?.raw;
    match window {
        None => Ok(Some(raw)),
        Some((off, len)) if off.checked_add(len).is_some_and(|end| end <= raw.len) => {
            Ok(Some(RawBuf {
                addr: raw.addr + off,
                len,
            }))
        }
        Some((off, len)) => Err(Error::Buffer(format!(
            "the {what} specification asks for {len} bytes from byte {off} of a {}-byte buffer",
            raw.len
        ))),
    }
}

/// Run one collective; every rank takes part even when its own arguments are rejected
/// (the peers then raise too).
pub fn run(py: Python<'_>, comm: &mut Comm, a: CollArgs<'_, '_>) -> PyResult<()> {
    let op = a.op;
    // Empty until a buffer needs the buffer protocol (NumPy arrays do not).
    let mut held = Vec::new();
    let mut pyerr = None;
    let root_reads_only = comm.rank() == a.root && op == CollOp::Bcast;
    let call = (|| {
        let algo = parse("algorithm", a.algorithm, |s| Algo::parse(op, s))?;
        let send = borrow(
            &mut held,
            &mut pyerr,
            a.sendbuf,
            a.send_window,
            false,
            "send buffer",
        )?;
        let recv = borrow(
            &mut held,
            &mut pyerr,
            a.recvbuf,
            a.recv_window,
            !root_reads_only,
            "receive buffer",
        )?;
        Ok((algo, send, recv))
    })();
    let blocks = match (&a.counts, &a.displs, a.block) {
        (Some(c), Some(d), _) => Some(Blocks::Vector {
            counts: c.as_slice(),
            displs: d.as_slice(),
        }),
        (None, None, Some(n)) => Some(Blocks::Uniform(n)),
        _ => None,
    };
    let call = call.map(|(algo, send, recv)| CollCall {
        op,
        send,
        recv,
        root: a.root,
        blocks,
        reduce: a.dtype.zip(a.reduce_op),
        forced: algo,
    });
    let big = call.as_ref().is_ok_and(|c| {
        c.send.map_or(0, |b| b.len).max(c.recv.map_or(0, |b| b.len)) >= DETACH_BYTES
    });
    let r = if big {
        py.detach(|| comm.collective(op, call))
    } else {
        run_releasing_on_block(py, || comm.collective(op, call))
    };
    match &r {
        Err(e) if crate::quarantine::exposed(e) => {
            crate::quarantine::keep_forever(&[a.sendbuf, a.recvbuf], held)
        }
        _ => drop(held),
    }
    match (r, pyerr) {
        (Ok(_), _) => Ok(()),
        (Err(e), Some(pe)) => Err(outcome(py, Err(e), crate::errors::as_shmcoll(py, pe))),
        (Err(e), None) => Err(to_py(py, e)),
    }
}

/// Take part in call `op` ("Alltoall", "Alltoallv" or a collective of this module) as
/// this rank's rejection `err`: the peers raise too. Returns what the call returned (the
/// rejection, a peer's, or a failure of the communicator).
pub fn reject(comm: &mut Comm, op: &str, err: Error) -> Result<(), Error> {
    match op {
        "Alltoall" | "Alltoallv" => comm.alltoall(Err(err)).map(|_| ()),
        _ => match CollOp::parse_collective(op) {
            Some(o) => comm.collective(o, Err(err)).map(|_| ()),
            None => Err(Error::InvalidArgument(format!("unknown operation {op:?}"))),
        },
    }
}

/// This rank hands collective `op` to MPI (`why`: the operator, datatype or buffer shmcoll
/// does not serve): agree on it with every rank first (an error unless every rank does
/// the same, see shmcoll_coll's `Comm::agree_fallback`).
pub fn agree_fallback(py: Python<'_>, comm: &mut Comm, op: &str, why: &str) -> PyResult<()> {
    let Some(code) = CollOp::parse(op)
        .filter(|&o| o != CollOp::Barrier)
        .map(CollOp::code)
    else {
        return Err(to_py(
            py,
            Error::InvalidArgument(format!("unknown collective {op:?}")),
        ));
    };
    py.detach(|| comm.agree_fallback(code, why))
        .map_err(|e| to_py(py, e))
}

/// What a call whose arguments this rank rejected raises: this rank's own error (`own`),
/// unless the call failed for a reason that outweighs it (the communicator broke, a peer
/// died, the wait was interrupted by a signal), which `engine` then carries.
pub fn outcome(py: Python<'_>, engine: Result<(), Error>, own: PyErr) -> PyErr {
    match engine {
        Err(e) if e.is_fatal() => to_py(py, e),
        _ => own,
    }
}

/// Whether the reduction kernels combine `dtype` (a NumPy name) with `op` ("sum", ...).
#[pyfunction]
pub fn reduction_supported(op: &str, dtype: &str) -> bool {
    Op::parse(op)
        .zip(Dtype::parse(dtype))
        .is_some_and(|(o, d)| o.supports(d))
}
