//! Alltoall and Alltoallv as the native methods run them: each side read natively (a plain
//! buffer, a specification such as `[buf, MPI.DOUBLE]`, a vector specification with counts
//! as lists or integer arrays) or else by the resolver (resolver.rs), then the buffers
//! borrowed for the call and the exchange run, with the GIL released up front for large
//! calls and otherwise once the call blocks (gil.rs).

use pyo3::prelude::*;

use shmcoll_coll::{AlltoallCall, Blocks, Comm, Error, Forced};

use crate::buffer::{hold_for_call, Borrowed, CallBuf};
use crate::errors::to_py;
use crate::gil::{run_releasing_on_block, DETACH_BYTES};
use crate::given::Scalars;
use crate::pyobj::{is_buffer, means_in_place, Vector};
use crate::resolver::{self, Declined};
use crate::vector_spec::vector_spec;

/// One side of an Alltoall: the buffer and its bytes per rank (None: its length divided
/// among the ranks, `uniform_bpp`).
type Uniform<'py> = (Bound<'py, PyAny>, Option<usize>);

fn uniform_side<'py>(obj: &Bound<'py, PyAny>, p: usize) -> Result<Uniform<'py>, Declined> {
    if is_buffer(obj) {
        return Ok((obj.clone(), None));
    }
    let (buf, bpp) = match crate::buffer_spec::per_rank(obj, p) {
        Some(side) => side,
        None => resolver::per_rank(obj, p)?,
    };
    Ok((buf, Some(bpp)))
}

fn vector_side<'py>(obj: &Bound<'py, PyAny>, p: usize) -> Result<Vector<'py>, Declined> {
    match vector_spec(obj, p) {
        Some(v) => Ok(v),
        None => resolver::vector(obj, p),
    }
}

/// Alltoall of `sendbuf` (IN_PLACE allowed) and `recvbuf`, mpi4py's reading: a count in a
/// specification is per rank.
pub(crate) fn alltoall(
    py: Python<'_>,
    comm: &mut Comm,
    sendbuf: &Bound<'_, PyAny>,
    recvbuf: &Bound<'_, PyAny>,
    a: &Scalars,
) -> Result<PyResult<()>, Declined> {
    let p = comm.size();
    let (recv, rbpp) = uniform_side(recvbuf, p)?;
    let (send, sbpp) = if means_in_place(sendbuf) {
        (None, None)
    } else {
        let (b, n) = uniform_side(sendbuf, p)?;
        (Some(b), n)
    };
    let forced = forced(py, a);
    let (held, bufs) = Held::acquire(send.as_ref(), &recv, forced);
    let call = bufs.and_then(|CallBufs { send, recv, forced }| {
        let rb = uniform_bpp(&recv, p, rbpp, "receive")?;
        let sb = match &send {
            Some(s) => uniform_bpp(s, p, sbpp, "send")?,
            None => rb,
        };
        Ok(AlltoallCall {
            send: send.map(|s| s.raw),
            recv: recv.raw,
            send_blocks: Blocks::Uniform(sb),
            recv_blocks: Blocks::Uniform(rb),
            forced,
        })
    });
    Ok(held.execute(py, comm, call, &[Some(&recv), send.as_ref()]))
}

/// Alltoallv of vector specifications (`sendbuf` IN_PLACE: the receive counts and
/// displacements serve both sides).
pub(crate) fn alltoallv(
    py: Python<'_>,
    comm: &mut Comm,
    sendbuf: &Bound<'_, PyAny>,
    recvbuf: &Bound<'_, PyAny>,
    a: &Scalars,
) -> Result<PyResult<()>, Declined> {
    let p = comm.size();
    let (recv, rc, rd) = vector_side(recvbuf, p)?;
    let (send, sc, sd) = if means_in_place(sendbuf) {
        (None, rc.clone(), rd.clone())
    } else {
        let (b, c, d) = vector_side(sendbuf, p)?;
        (Some(b), c, d)
    };
    let forced = forced(py, a);
    let (held, bufs) = Held::acquire(send.as_ref(), &recv, forced);
    let call = bufs.map(|CallBufs { send, recv, forced }| AlltoallCall {
        send: send.map(|s| s.raw),
        recv: recv.raw,
        send_blocks: Blocks::Vector {
            counts: &sc,
            displs: &sd,
        },
        recv_blocks: Blocks::Vector {
            counts: &rc,
            displs: &rd,
        },
        forced,
    });
    Ok(held.execute(py, comm, call, &[Some(&recv), send.as_ref()]))
}

/// The forced algorithm, order and store of the call (a bad name rejects the call on
/// every rank: it becomes the call's error, and its Python exception is raised).
fn forced(py: Python<'_>, a: &Scalars) -> Result<Forced, PyErr> {
    Forced::parse(
        a.algorithm.as_deref(),
        a.order.as_deref(),
        a.store.as_deref(),
    )
    .map_err(|e| to_py(py, e))
}

/// Keep a Python exception to raise after the peers were told about the rejection.
fn stash(slot: &mut Option<PyErr>, e: PyErr) -> Error {
    let msg = e.to_string();
    *slot = Some(e);
    Error::InvalidArgument(msg)
}

/// What one call borrowed for its duration, and the Python exception of an argument it
/// rejected (re-raised after the call told the peers, which raise too).
struct Held {
    held: Vec<Borrowed>,
    pyerr: Option<PyErr>,
}

/// The raw buffers and forced choices of one call, once every argument was accepted.
struct CallBufs {
    send: Option<CallBuf>,
    recv: CallBuf,
    forced: Forced,
}

impl Held {
    fn acquire(
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        forced: Result<Forced, PyErr>,
    ) -> (Held, Result<CallBufs, Error>) {
        // Empty until a buffer needs the buffer protocol (NumPy arrays do not).
        let mut held = Vec::new();
        let mut pyerr = None;
        let bufs = (|| {
            let forced = forced.map_err(|e| stash(&mut pyerr, e))?;
            let recv = hold_for_call(&mut held, &mut pyerr, recvbuf, true, "receive buffer")?;
            let send = match sendbuf {
                Some(s) => Some(hold_for_call(
                    &mut held,
                    &mut pyerr,
                    s,
                    false,
                    "send buffer",
                )?),
                None => None,
            };
            Ok(CallBufs { send, recv, forced })
        })();
        (Held { held, pyerr }, bufs)
    }

    /// Run the call (GIL released up front for large ones, else once it blocks), then
    /// release the buffers (or, after a fatal failure, keep them and `objs`, the buffer
    /// objects: crate::quarantine) and raise what there is to raise.
    fn execute(
        self,
        py: Python<'_>,
        comm: &mut Comm,
        call: Result<AlltoallCall<'_>, Error>,
        objs: &[Option<&Bound<'_, PyAny>>],
    ) -> PyResult<()> {
        let big = call.as_ref().is_ok_and(|c| c.recv.len >= DETACH_BYTES);
        let r = if big {
            py.detach(|| comm.alltoall(call))
        } else {
            run_releasing_on_block(py, || comm.alltoall(call))
        };
        match &r {
            Err(e) if crate::quarantine::exposed(e) => {
                crate::quarantine::keep_forever(objs, self.held)
            }
            _ => drop(self.held),
        }
        finish(py, r.map(|_| ()), self.pyerr)
    }
}

/// Bytes per rank of a uniform block: given, or (as mpi4py) the buffer's whole elements
/// divided evenly among the ranks.
fn uniform_bpp(buf: &CallBuf, p: usize, given: Option<usize>, what: &str) -> Result<usize, Error> {
    let len = buf.raw.len;
    let item = buf.itemsize.max(1);
    match given {
        Some(b) => Ok(b),
        None if len.is_multiple_of(item) && (len / item).is_multiple_of(p) => Ok(len / p),
        None => Err(Error::InvalidArgument(format!(
            "cannot split the {what} buffer ({} elements of {item} bytes) into {p} equal blocks; pass an explicit count",
            len / item
        ))),
    }
}

/// Raise the exporter's own exception when there is one (after the peers were told),
/// else the engine's error.
fn finish(py: Python<'_>, r: Result<(), Error>, pyerr: Option<PyErr>) -> PyResult<()> {
    match (r, pyerr) {
        (Ok(()), _) => Ok(()),
        (Err(e), Some(pe)) => Err(crate::collectives::outcome(
            py,
            Err(e),
            crate::errors::as_shmcoll(py, pe),
        )),
        (Err(e), None) => Err(to_py(py, e)),
    }
}
