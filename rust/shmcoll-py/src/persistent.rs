//! Persistent collectives (MPI-4's `MPI_Alltoall_init` and friends, mpi4py's `Prequest`).
//!
//! Creating a request resolves the buffer specifications, borrows the buffers (held until
//! `Free`, which also keeps them from being resized), parses the operator, datatype and
//! forced choices, and checks the arguments. `Start` then goes straight to the engine.
//! The engine's calls are blocking, so `Start` runs the collective to completion; `Wait`
//! and `Test` return at once (MPI allows an implementation to complete the operation in
//! `Start`).

use pyo3::prelude::*;
use pyo3::types::PyList;

use shmcoll_coll::{
    Algo, AlltoallCall, Blocks, CollCall, CollOp, CollSettled, Comm, Error, Forced, RawBuf, Settled,
};
use shmcoll_kernels::{Dtype, Op};

use crate::buffer::{hold, Borrowed};
use crate::engine::CommBase;
use crate::errors::{to_py, IntoPyResult};
use crate::gil::{run_releasing_on_block, DETACH_BYTES};

/// What a started request runs, with every argument resolved.
enum Plan {
    Alltoall {
        send: Option<RawBuf>,
        recv: RawBuf,
        send_bpp: usize,
        recv_bpp: usize,
        forced: Forced,
        /// What the first Start established (None before it): later Starts skip the
        /// checks and the selection (shmcoll_coll's alltoall/settled.rs).
        settled: Option<Settled>,
    },
    Alltoallv {
        send: Option<RawBuf>,
        recv: RawBuf,
        /// send counts, send displacements, receive counts, receive displacements (bytes)
        arrays: [Vec<usize>; 4],
        forced: Forced,
        settled: Option<Settled>,
    },
    Coll {
        op: CollOp,
        send: Option<RawBuf>,
        recv: Option<RawBuf>,
        root: usize,
        block: Option<usize>,
        vector: Option<(Vec<usize>, Vec<usize>)>,
        reduce: Option<(Dtype, Op)>,
        forced: Option<Algo>,
        settled: Option<CollSettled>,
    },
}

/// A persistent collective request: `Start()`, `Wait()`, `Test()`, `Free()`.
#[pyclass(module = "shmcoll._core", unsendable)]
pub struct Prequest {
    comm: Py<CommBase>,
    plan: Plan,
    /// The borrowed buffers (released by Free or when the request goes away).
    held: Vec<Borrowed>,
    freed: bool,
}

impl std::fmt::Debug for Prequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.plan {
            Plan::Alltoall { .. } => "Alltoall",
            Plan::Alltoallv { .. } => "Alltoallv",
            Plan::Coll { op, .. } => op.name(),
        };
        write!(f, "Prequest({what}, freed={})", self.freed)
    }
}

fn borrow(
    held: &mut Vec<Borrowed>,
    obj: Option<&Bound<'_, PyAny>>,
    writable: bool,
    what: &str,
) -> PyResult<Option<RawBuf>> {
    let Some(obj) = obj else { return Ok(None) };
    let mut pyerr = None;
    match hold(held, &mut pyerr, obj, writable, what) {
        Ok(raw) => Ok(Some(raw)),
        Err(e) => Err(pyerr.unwrap_or_else(|| to_py(obj.py(), e))),
    }
}

fn parse<T>(
    py: Python<'_>,
    what: &str,
    s: Option<&str>,
    f: impl Fn(&str) -> Option<T>,
) -> PyResult<Option<T>> {
    crate::collectives::parse(what, s, f).map_err(|e| to_py(py, e))
}

impl Prequest {
    fn run(&mut self, py: Python<'_>, comm: &mut Comm) -> Result<(), Error> {
        match &mut self.plan {
            Plan::Alltoall {
                send,
                recv,
                send_bpp,
                recv_bpp,
                forced,
                settled,
            } => {
                let call = AlltoallCall {
                    send: *send,
                    recv: *recv,
                    send_blocks: Blocks::Uniform(*send_bpp),
                    recv_blocks: Blocks::Uniform(*recv_bpp),
                    forced: *forced,
                };
                if recv.len >= DETACH_BYTES {
                    py.detach(|| start_alltoall(comm, call, settled))
                } else {
                    run_releasing_on_block(py, || start_alltoall(comm, call, settled))
                }
            }
            Plan::Alltoallv {
                send,
                recv,
                arrays: [sc, sd, rc, rd],
                forced,
                settled,
            } => {
                let call = AlltoallCall {
                    send: *send,
                    recv: *recv,
                    send_blocks: Blocks::Vector {
                        counts: sc,
                        displs: sd,
                    },
                    recv_blocks: Blocks::Vector {
                        counts: rc,
                        displs: rd,
                    },
                    forced: *forced,
                };
                py.detach(|| start_alltoall(comm, call, settled))
            }
            Plan::Coll {
                op,
                send,
                recv,
                root,
                block,
                vector,
                reduce,
                forced,
                settled,
            } => {
                let blocks = match (vector, block) {
                    (Some((c, d)), _) => Some(Blocks::Vector {
                        counts: c,
                        displs: d,
                    }),
                    (None, Some(n)) => Some(Blocks::Uniform(*n)),
                    _ => None,
                };
                let call = CollCall {
                    op: *op,
                    send: *send,
                    recv: *recv,
                    root: *root,
                    blocks,
                    reduce: *reduce,
                    forced: *forced,
                };
                let big = send.map_or(0, |b| b.len).max(recv.map_or(0, |b| b.len)) >= DETACH_BYTES;
                if big {
                    py.detach(|| start_coll(comm, call, settled))
                } else {
                    run_releasing_on_block(py, || start_coll(comm, call, settled))
                }
            }
        }
    }
}

/// Start a persistent Alltoall(v): the whole call the first time, keeping what it
/// established, the settled Start afterwards.
fn start_alltoall(
    comm: &mut Comm,
    call: AlltoallCall<'_>,
    settled: &mut Option<Settled>,
) -> Result<(), Error> {
    match settled {
        Some(s) => comm.alltoall_settled(&call, s).map(|_| ()),
        None => {
            *settled = Some(comm.alltoall_settle(Ok(call))?.1);
            Ok(())
        }
    }
}

/// Start a persistent collective: the whole call the first time, keeping what it
/// established (not for Bcast), the settled Start afterwards.
fn start_coll(
    comm: &mut Comm,
    call: CollCall<'_>,
    settled: &mut Option<CollSettled>,
) -> Result<(), Error> {
    match settled {
        Some(s) => comm.collective_settled(&call, s).map(|_| ()),
        None => {
            *settled = comm.collective_settle(call.op, Ok(call))?.1;
            Ok(())
        }
    }
}

#[pymethods]
impl Prequest {
    /// A persistent Alltoall of `comm` (uniform `bpp`: send and receive bytes per rank) or
    /// Alltoallv (`arrays`: send counts, send displacements, receive counts, receive
    /// displacements) on resolved buffers (sizes in bytes); `sendbuf=None` means in place.
    #[staticmethod]
    #[pyo3(name = "_alltoall_init", signature = (comm, sendbuf, recvbuf, bpp=None, arrays=None, algorithm=None, order=None, store=None))]
    #[allow(clippy::too_many_arguments)]
    fn alltoall(
        comm: &Bound<'_, CommBase>,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        bpp: Option<(usize, usize)>,
        arrays: Option<[Vec<usize>; 4]>,
        algorithm: Option<&str>,
        order: Option<&str>,
        store: Option<&str>,
    ) -> PyResult<Prequest> {
        let py = comm.py();
        let forced = Forced::parse(algorithm, order, store).py_err(py)?;
        let mut held = Vec::with_capacity(2);
        let recv = borrow(&mut held, Some(recvbuf), true, "receive buffer")?.expect("given");
        let send = borrow(&mut held, sendbuf, false, "send buffer")?;
        let plan = match (bpp, arrays) {
            (Some((send_bpp, recv_bpp)), None) => Plan::Alltoall {
                send,
                recv,
                send_bpp,
                recv_bpp,
                forced,
                settled: None,
            },
            (None, Some(arrays)) => Plan::Alltoallv {
                send,
                recv,
                arrays,
                forced,
                settled: None,
            },
            _ => {
                return Err(to_py(
                    py,
                    Error::InvalidArgument("give block sizes or counts and displacements".into()),
                ))
            }
        };
        Ok(Prequest {
            comm: comm.clone().unbind(),
            plan,
            held,
            freed: false,
        })
    }

    /// A persistent collective of the others on `comm` (arguments as `CommBase._coll`).
    #[staticmethod]
    #[pyo3(name = "_coll_init", signature = (comm, op, sendbuf, recvbuf, root=0, block=None, counts=None, displs=None, dtype=None, reduce_op=None, algorithm=None))]
    #[allow(clippy::too_many_arguments)]
    fn coll(
        comm: &Bound<'_, CommBase>,
        op: &str,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        root: usize,
        block: Option<usize>,
        counts: Option<Vec<usize>>,
        displs: Option<Vec<usize>>,
        dtype: Option<&str>,
        reduce_op: Option<&str>,
        algorithm: Option<&str>,
    ) -> PyResult<Prequest> {
        let py = comm.py();
        let vector = counts.zip(displs);
        let op = parse(py, "collective", Some(op), CollOp::parse_collective)?.expect("given");
        let forced = parse(py, "algorithm", algorithm, |s| Algo::parse(op, s))?;
        let dt = parse(py, "datatype", dtype, Dtype::parse)?;
        let rop = parse(py, "reduction operator", reduce_op, Op::parse)?;
        let mut held = Vec::with_capacity(2);
        let root_reads_only = op == CollOp::Bcast && comm.borrow_mut().comm(py)?.rank() == root;
        let send = borrow(&mut held, sendbuf, false, "send buffer")?;
        let recv = borrow(&mut held, recvbuf, !root_reads_only, "receive buffer")?;
        Ok(Prequest {
            comm: comm.clone().unbind(),
            plan: Plan::Coll {
                op,
                send,
                recv,
                root,
                block,
                vector,
                reduce: dt.zip(rop),
                forced,
                settled: None,
            },
            held,
            freed: false,
        })
    }

    /// Run the collective (every rank of the communicator starts its request).
    #[pyo3(name = "Start")]
    fn start(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.freed {
            return Err(to_py(
                py,
                Error::InvalidArgument("the request was freed".into()),
            ));
        }
        let cb = self.comm.bind(py);
        let mut base = cb.borrow_mut();
        let comm = base.comm(py)?;
        let r = self.run(py, comm);
        if let Err(e) = &r {
            if crate::quarantine::exposed(e) {
                // The exports hold the buffer objects (crate::quarantine).
                crate::quarantine::keep_forever(&[], std::mem::take(&mut self.held));
            }
        }
        r.py_err(py)
    }

    /// Complete the started operation (it already is: Start runs it to completion).
    #[pyo3(name = "Wait", signature = (status=None))]
    fn wait(&self, status: Option<&Bound<'_, PyAny>>) {
        let _ = status;
    }

    /// Whether the started operation completed (always, see Wait).
    #[pyo3(name = "Test", signature = (status=None))]
    fn test(&self, status: Option<&Bound<'_, PyAny>>) -> bool {
        let _ = status;
        true
    }

    /// Release the buffers; the request cannot be started again.
    #[pyo3(name = "Free")]
    fn free(&mut self) {
        self.freed = true;
        self.held.clear();
    }

    /// Start every request of `requests`, in order.
    #[staticmethod]
    #[pyo3(name = "Startall")]
    fn startall(py: Python<'_>, requests: &Bound<'_, PyList>) -> PyResult<()> {
        for r in requests.iter() {
            r.cast::<Prequest>()?.borrow_mut().start(py)?;
        }
        Ok(())
    }

    /// Complete every request of `requests` (see Wait).
    #[staticmethod]
    #[pyo3(name = "Waitall", signature = (requests, statuses=None))]
    fn waitall(requests: &Bound<'_, PyList>, statuses: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let _ = statuses;
        for r in requests.iter() {
            r.cast::<Prequest>()?;
        }
        Ok(())
    }

    #[getter]
    fn freed(&self) -> bool {
        self.freed
    }
}
