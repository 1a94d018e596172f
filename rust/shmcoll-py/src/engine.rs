//! `CommBase`: one rank of a node communicator. `shmcoll.Comm` (Python) derives from it:
//! the hot methods (`Alltoall`, `Barrier`) are implemented here so that a call goes from
//! Python straight into Rust; bootstrap, heap arrays and the rarer collectives live in the
//! Python subclass. The GIL is held for calls that complete within microseconds and
//! released as soon as a call blocks or copies a lot (see gil.rs).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use shmcoll_coll::{AlltoallCall, Blocks, CollOp, Comm, Config, Error, Forced};
use shmcoll_shm::Segment;

use crate::buffer::{hold_for_call, BorrowError, Borrowed, CallBuf};
use crate::errors::{to_py, IntoPyResult};
use crate::fastpath::{try_fast, try_reduce_scatter};
use crate::gil::{run_releasing_on_block, DETACH_BYTES};
use crate::given::Objects;
use crate::heap::{HeapBuffer, PeerView};
use crate::pool::PooledSegment;
use crate::pyobj::{is_buffer, is_in_place};
use crate::table::{from_rows, to_rows, RangeRow};
use crate::vector_spec::{vector_collective, vector_spec};

/// A segment created by this process (the launcher or rank 0); keeps it alive and, once
/// dropped, unlinks it if the handshake has not already.
#[derive(Debug)]
#[pyclass(module = "shmcoll._core", frozen)]
pub struct SegmentHandle {
    pub seg: Arc<Segment>,
}

#[pymethods]
impl SegmentHandle {
    #[new]
    fn new(py: Python<'_>, nranks: usize) -> PyResult<SegmentHandle> {
        if nranks == 0 {
            return Err(to_py(
                py,
                Error::InvalidArgument("nranks must be at least 1".into()),
            ));
        }
        let cfg = Config::from_env(nranks).py_err(py)?;
        let seg = Comm::create_segment(nranks, &cfg).py_err(py)?;
        Ok(SegmentHandle { seg })
    }

    /// Map a segment another process created (by name).
    #[staticmethod]
    fn open(py: Python<'_>, name: &str) -> PyResult<SegmentHandle> {
        let seg = Comm::open_segment(name).py_err(py)?;
        Ok(SegmentHandle { seg })
    }

    #[getter]
    fn name(&self) -> String {
        self.seg.name().to_string()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.seg.len()
    }

    /// Remove the name from /dev/shm now (idempotent).
    fn unlink(&self, py: Python<'_>) -> PyResult<()> {
        self.seg.unlink().map_err(Error::from).py_err(py)
    }
}

#[derive(Debug)]
#[pyclass(module = "shmcoll._core", subclass)]
pub struct CommBase {
    comm: Option<Comm>,
}

fn forced(
    py: Python<'_>,
    algorithm: Option<&str>,
    order: Option<&str>,
    store: Option<&str>,
) -> PyResult<Forced> {
    Forced::parse(algorithm, order, store).py_err(py)
}

impl CommBase {
    pub(crate) fn comm(&mut self, py: Python<'_>) -> PyResult<&mut Comm> {
        self.comm.as_mut().ok_or_else(|| {
            to_py(
                py,
                Error::InvalidArgument("the communicator was freed".into()),
            )
        })
    }
}

/// Keep a Python exception to raise after the peers were told about the rejection.
fn stash(slot: &mut Option<PyErr>, e: PyErr) -> Error {
    let msg = e.to_string();
    *slot = Some(e);
    Error::InvalidArgument(msg)
}

/// The buffers and keywords of one call, borrowed for its duration. A rejected argument
/// becomes an engine error (announced to the peers by the call) and, when Python raised it,
/// the Python exception that is re-raised afterwards.
struct Args {
    held: Vec<Borrowed>,
    pyerr: Option<PyErr>,
    bufs: Option<Result<CallBufs, Error>>,
}

/// The raw buffers and forced choices of one call, once every argument was accepted.
struct CallBufs {
    send: Option<CallBuf>,
    recv: CallBuf,
    forced: Forced,
}

impl Args {
    fn acquire(
        py: Python<'_>,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        algorithm: Option<&str>,
        order: Option<&str>,
        store: Option<&str>,
    ) -> Args {
        // Empty until a buffer needs the buffer protocol (NumPy arrays do not).
        let mut held = Vec::new();
        let mut pyerr = None;
        let bufs = (|| {
            let forced = forced(py, algorithm, order, store).map_err(|e| stash(&mut pyerr, e))?;
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
        Args {
            held,
            pyerr,
            bufs: Some(bufs),
        }
    }

    /// Run the call (GIL released up front for large ones, else once it blocks), then
    /// release the buffers and raise what there is to raise.
    fn execute(
        self,
        py: Python<'_>,
        comm: &mut Comm,
        call: Result<AlltoallCall<'_>, Error>,
    ) -> PyResult<()> {
        let big = call.as_ref().is_ok_and(|c| c.recv.len >= DETACH_BYTES);
        let r = if big {
            py.detach(|| comm.alltoall(call))
        } else {
            run_releasing_on_block(py, || comm.alltoall(call))
        };
        drop(self.held);
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

#[pymethods]
impl CommBase {
    /// An unjoined communicator; `Comm.__init__` joins it with `_join`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> CommBase {
        CommBase { comm: None }
    }

    /// Join the communicator of `segment` (a SegmentHandle or a segment name) as `rank`,
    /// or start the next communicator on a PooledSegment (its rank is the one it had).
    fn _join(&mut self, py: Python<'_>, segment: &Bound<'_, PyAny>, rank: usize) -> PyResult<()> {
        if self.comm.is_some() {
            return Err(to_py(py, Error::InvalidArgument("already joined".into())));
        }
        if let Ok(p) = segment.cast::<PooledSegment>() {
            self.comm = Some(p.get().resume(py, rank)?);
            return Ok(());
        }
        let seg = if let Ok(h) = segment.cast::<SegmentHandle>() {
            h.get().seg.clone()
        } else {
            let name: String = segment.extract()?;
            py.detach(|| Comm::open_segment(&name)).py_err(py)?
        };
        let cfg = Config::from_env(seg.layout().sizes.nranks).py_err(py)?;
        let comm = py.detach(move || Comm::join(seg, rank, cfg)).py_err(py)?;
        self.comm = Some(comm);
        Ok(())
    }

    /// Send block j of `sendbuf` to rank j and receive block i of `recvbuf` from rank i
    /// (mpi4py's signature and buffer specifications; `sendbuf` may be IN_PLACE). The
    /// keywords force the algorithm, copy order and store policy.
    /// `compress=` (a codec or its configuration) or `traffic=` (a class of the active
    /// compression policy) send compressed blocks (`shmcoll.compress`).
    #[pyo3(name = "Alltoall", signature = (sendbuf, recvbuf, *, algorithm=None, order=None, store=None, compress=None, traffic=None))]
    #[allow(clippy::too_many_arguments)]
    fn alltoall_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        algorithm: Option<&Bound<'_, PyAny>>,
        order: Option<&Bound<'_, PyAny>>,
        store: Option<&Bound<'_, PyAny>>,
        compress: Option<&Bound<'_, PyAny>>,
        traffic: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let a = scalars(
            slf,
            "Alltoall",
            Objects {
                algorithm,
                order,
                store,
                traffic,
                ..Objects::default()
            },
        )?;
        if compress.is_some() || a.traffic.is_some() {
            return compressed(slf, "Alltoall", (sendbuf, recvbuf), compress, a.traffic);
        }
        let (algorithm, order, store) = (
            a.algorithm.as_deref(),
            a.order.as_deref(),
            a.store.as_deref(),
        );
        let native = slf
            .borrow_mut()
            .alltoall_native(py, sendbuf, recvbuf, algorithm, order, store)?;
        if let Some(r) = native {
            return r;
        }
        let kw = PyDict::new(py);
        kw.set_item("algorithm", algorithm)?;
        kw.set_item("order", order)?;
        kw.set_item("store", store)?;
        slf.call_method("_py_Alltoall", (sendbuf, recvbuf), Some(&kw))
            .map(|_| ())
    }

    /// Combine every rank's `sendbuf` element-wise with `op` (default SUM) into every
    /// `recvbuf` (mpi4py's signature; `sendbuf` may be IN_PLACE).
    #[pyo3(name = "Allreduce", signature = (sendbuf, recvbuf, op=None, *, algorithm=None, compress=None, traffic=None))]
    fn allreduce_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
        compress: Option<&Bound<'_, PyAny>>,
        traffic: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Allreduce",
            Objects {
                algorithm,
                traffic,
                ..Objects::default()
            },
        )?;
        if compress.is_some() || a.traffic.is_some() {
            return compressed(
                slf,
                "Allreduce",
                (sendbuf, recvbuf, op),
                compress,
                a.traffic,
            );
        }
        let fast = Fast {
            op: CollOp::Allreduce,
            send: Some(sendbuf),
            recv: recvbuf,
            root: 0,
            red: op,
            algorithm: a.algorithm.as_deref(),
        };
        dispatch(slf, fast, "_py_Allreduce", (sendbuf, recvbuf, op))
    }

    /// Combine every rank's `sendbuf` element-wise with `op` into the root's `recvbuf`.
    #[pyo3(name = "Reduce", signature = (sendbuf, recvbuf, op=None, root=None, *, algorithm=None))]
    #[pyo3(text_signature = "($self, sendbuf, recvbuf, op=None, root=0, *, algorithm=None)")]
    fn reduce_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, PyAny>>,
        root: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Reduce",
            Objects {
                root,
                algorithm,
                ..Objects::default()
            },
        )?;
        let fast = Fast {
            op: CollOp::Reduce,
            send: Some(sendbuf),
            recv: recvbuf,
            root: a.root,
            red: op,
            algorithm: a.algorithm.as_deref(),
        };
        dispatch(slf, fast, "_py_Reduce", (sendbuf, recvbuf, op, a.root))
    }

    /// Broadcast the root's `buf` to every rank's `buf`.
    #[pyo3(name = "Bcast", signature = (buf, root=None, *, algorithm=None, compress=None, traffic=None))]
    #[pyo3(text_signature = "($self, buf, root=0, *, algorithm=None, compress=None, traffic=None)")]
    fn bcast_py(
        slf: &Bound<'_, Self>,
        buf: &Bound<'_, PyAny>,
        root: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
        compress: Option<&Bound<'_, PyAny>>,
        traffic: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Bcast",
            Objects {
                root,
                algorithm,
                traffic,
                ..Objects::default()
            },
        )?;
        if compress.is_some() || a.traffic.is_some() {
            return compressed(slf, "Bcast", (buf, a.root), compress, a.traffic);
        }
        let fast = Fast {
            op: CollOp::Bcast,
            send: None,
            recv: buf,
            root: a.root,
            red: None,
            algorithm: a.algorithm.as_deref(),
        };
        dispatch(slf, fast, "_py_Bcast", (buf, a.root))
    }

    /// Gather every rank's `sendbuf` into every rank's `recvbuf`, in rank order.
    #[pyo3(name = "Allgather", signature = (sendbuf, recvbuf, *, algorithm=None, compress=None, traffic=None))]
    fn allgather_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        algorithm: Option<&Bound<'_, PyAny>>,
        compress: Option<&Bound<'_, PyAny>>,
        traffic: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Allgather",
            Objects {
                algorithm,
                traffic,
                ..Objects::default()
            },
        )?;
        if compress.is_some() || a.traffic.is_some() {
            return compressed(slf, "Allgather", (sendbuf, recvbuf), compress, a.traffic);
        }
        let fast = Fast {
            op: CollOp::Allgather,
            send: Some(sendbuf),
            recv: recvbuf,
            root: 0,
            red: None,
            algorithm: a.algorithm.as_deref(),
        };
        dispatch(slf, fast, "_py_Allgather", (sendbuf, recvbuf))
    }

    /// Gather every rank's `sendbuf` into the root's `recvbuf` (rank order).
    #[pyo3(name = "Gather", signature = (sendbuf, recvbuf, root=None, *, algorithm=None))]
    #[pyo3(text_signature = "($self, sendbuf, recvbuf, root=0, *, algorithm=None)")]
    fn gather_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        root: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Gather",
            Objects {
                root,
                algorithm,
                ..Objects::default()
            },
        )?;
        let fast = Fast {
            op: CollOp::Gather,
            send: Some(sendbuf),
            recv: recvbuf,
            root: a.root,
            red: None,
            algorithm: a.algorithm.as_deref(),
        };
        dispatch(slf, fast, "_py_Gather", (sendbuf, recvbuf, a.root))
    }

    /// Send block j of the root's `sendbuf` to rank j's `recvbuf`.
    #[pyo3(name = "Scatter", signature = (sendbuf, recvbuf, root=None, *, algorithm=None))]
    #[pyo3(text_signature = "($self, sendbuf, recvbuf, root=0, *, algorithm=None)")]
    fn scatter_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        root: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Scatter",
            Objects {
                root,
                algorithm,
                ..Objects::default()
            },
        )?;
        let fast = Fast {
            op: CollOp::Scatter,
            send: Some(sendbuf),
            recv: recvbuf,
            root: a.root,
            red: None,
            algorithm: a.algorithm.as_deref(),
        };
        dispatch(slf, fast, "_py_Scatter", (sendbuf, recvbuf, a.root))
    }

    /// Combine every rank's `sendbuf` with `op`; rank i gets the `recvcounts[i]` elements
    /// after those of ranks 0..i-1.
    #[pyo3(name = "Reduce_scatter", signature = (sendbuf, recvbuf, recvcounts=None, op=None, *, algorithm=None))]
    fn reduce_scatter_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        recvcounts: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let a = scalars(
            slf,
            "Reduce_scatter",
            Objects {
                algorithm,
                ..Objects::default()
            },
        )?;
        let algorithm = a.algorithm.as_deref();
        {
            let mut me = slf.borrow_mut();
            let comm = me.comm(py)?;
            if let Some(r) =
                try_reduce_scatter(py, comm, sendbuf, recvbuf, recvcounts, op, algorithm)
            {
                return r;
            }
        }
        call_python(
            slf,
            "_py_Reduce_scatter",
            (sendbuf, recvbuf, recvcounts, op),
            algorithm,
        )
    }

    /// Allgather with per-rank counts and displacements in `recvbuf`'s specification.
    #[pyo3(name = "Allgatherv", signature = (sendbuf, recvbuf, *, algorithm=None))]
    fn allgatherv_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        algorithm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Allgatherv",
            Objects {
                algorithm,
                ..Objects::default()
            },
        )?;
        vector_dispatch(
            slf,
            CollOp::Allgatherv,
            sendbuf,
            recvbuf,
            0,
            a.algorithm.as_deref(),
            "_py_Allgatherv",
        )
    }

    /// Gather with per-rank counts and displacements (the root's `recvbuf` specification).
    #[pyo3(name = "Gatherv", signature = (sendbuf, recvbuf, root=None, *, algorithm=None))]
    #[pyo3(text_signature = "($self, sendbuf, recvbuf, root=0, *, algorithm=None)")]
    fn gatherv_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        root: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Gatherv",
            Objects {
                root,
                algorithm,
                ..Objects::default()
            },
        )?;
        vector_dispatch(
            slf,
            CollOp::Gatherv,
            sendbuf,
            recvbuf,
            a.root,
            a.algorithm.as_deref(),
            "_py_Gatherv",
        )
    }

    /// Scatter with per-rank counts and displacements (the root's `sendbuf` specification).
    #[pyo3(name = "Scatterv", signature = (sendbuf, recvbuf, root=None, *, algorithm=None))]
    #[pyo3(text_signature = "($self, sendbuf, recvbuf, root=0, *, algorithm=None)")]
    fn scatterv_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        root: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Scatterv",
            Objects {
                root,
                algorithm,
                ..Objects::default()
            },
        )?;
        vector_dispatch(
            slf,
            CollOp::Scatterv,
            sendbuf,
            recvbuf,
            a.root,
            a.algorithm.as_deref(),
            "_py_Scatterv",
        )
    }

    /// Combine every rank's `sendbuf` (p equal blocks) with `op`; rank i gets block i.
    #[pyo3(name = "Reduce_scatter_block", signature = (sendbuf, recvbuf, op=None, *, algorithm=None, compress=None, traffic=None))]
    fn reduce_scatter_block_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, PyAny>>,
        algorithm: Option<&Bound<'_, PyAny>>,
        compress: Option<&Bound<'_, PyAny>>,
        traffic: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = scalars(
            slf,
            "Reduce_scatter_block",
            Objects {
                algorithm,
                traffic,
                ..Objects::default()
            },
        )?;
        if compress.is_some() || a.traffic.is_some() {
            return compressed(
                slf,
                "Reduce_scatter_block",
                (sendbuf, recvbuf, op),
                compress,
                a.traffic,
            );
        }
        let fast = Fast {
            op: CollOp::ReduceScatterBlock,
            send: Some(sendbuf),
            recv: recvbuf,
            root: 0,
            red: op,
            algorithm: a.algorithm.as_deref(),
        };
        dispatch(
            slf,
            fast,
            "_py_Reduce_scatter_block",
            (sendbuf, recvbuf, op),
        )
    }

    /// Block until every rank has called Barrier.
    #[pyo3(name = "Barrier")]
    fn barrier_py(&mut self, py: Python<'_>) -> PyResult<()> {
        self.barrier(py)
    }

    /// Alias of Barrier (mpi4py has both).
    #[pyo3(name = "barrier")]
    fn barrier_lower(&mut self, py: Python<'_>) -> PyResult<()> {
        self.barrier(py)
    }

    #[pyo3(name = "Get_rank")]
    fn get_rank(&mut self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.comm(py)?.rank())
    }

    #[pyo3(name = "Get_size")]
    fn get_size(&mut self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.comm(py)?.size())
    }

    #[getter]
    fn rank(&mut self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.comm(py)?.rank())
    }

    #[getter]
    fn size(&mut self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.comm(py)?.size())
    }

    #[getter]
    fn cma_ok(&mut self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.comm(py)?.cma_ok())
    }

    /// Block size from which this communicator's model sends private buffers through
    /// CMA: what the segment's creator published (the same on every rank).
    #[pyo3(name = "_cma_from")]
    fn cma_from(&mut self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.comm(py)?.cma_from())
    }

    #[getter]
    fn freed(&self) -> bool {
        self.comm.is_none()
    }

    /// Alltoall of `send_bpp`/`recv_bpp` bytes per rank (None: the buffer length / size).
    /// `sendbuf=None` means in place.
    #[pyo3(name = "_alltoall", signature = (sendbuf, recvbuf, send_bpp=None, recv_bpp=None, algorithm=None, order=None, store=None))]
    #[allow(clippy::too_many_arguments)]
    fn alltoall(
        &mut self,
        py: Python<'_>,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        send_bpp: Option<usize>,
        recv_bpp: Option<usize>,
        algorithm: Option<&str>,
        order: Option<&str>,
        store: Option<&str>,
    ) -> PyResult<()> {
        let comm = self.comm(py)?;
        let p = comm.size();
        let mut a = Args::acquire(py, sendbuf, recvbuf, algorithm, order, store);
        let call = a
            .bufs
            .take()
            .unwrap_or_else(|| Err(Error::InvalidArgument(String::new())));
        let call = call.and_then(|CallBufs { send, recv, forced }| {
            let rb = uniform_bpp(&recv, p, recv_bpp, "receive")?;
            let sb = match &send {
                Some(s) => uniform_bpp(s, p, send_bpp, "send")?,
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
        a.execute(py, comm, call)
    }

    /// Alltoallv with counts and displacements in bytes. `sendbuf=None` means in place
    /// (then the send side uses the receive counts and displacements).
    /// Alltoall with per-rank counts and displacements (mpi4py's vector specifications;
    /// `sendbuf` may be IN_PLACE). Lists of ints with a predefined datatype resolve here;
    /// any other form goes to the Python parser (`Comm._py_Alltoallv`).
    #[pyo3(name = "Alltoallv", signature = (sendbuf, recvbuf, *, algorithm=None, order=None, store=None))]
    fn alltoallv_py(
        slf: &Bound<'_, Self>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        algorithm: Option<&Bound<'_, PyAny>>,
        order: Option<&Bound<'_, PyAny>>,
        store: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let a = scalars(
            slf,
            "Alltoallv",
            Objects {
                algorithm,
                order,
                store,
                ..Objects::default()
            },
        )?;
        let (algorithm, order, store) = (
            a.algorithm.as_deref(),
            a.order.as_deref(),
            a.store.as_deref(),
        );
        let size = slf.borrow_mut().comm(py)?.size();
        let send = if is_in_place(sendbuf) {
            Some(None)
        } else {
            vector_spec(sendbuf, size).map(Some)
        };
        if let (Some((rbuf, rc, rd)), Some(send)) = (vector_spec(recvbuf, size), send) {
            let (sbuf, sc, sd) = match send {
                Some((b, c, d)) => (Some(b), c, d),
                None => (None, rc.clone(), rd.clone()),
            };
            return slf.borrow_mut().alltoallv(
                py,
                sbuf.as_ref(),
                &rbuf,
                sc,
                sd,
                rc,
                rd,
                algorithm,
                order,
                store,
            );
        }
        let kw = PyDict::new(py);
        kw.set_item("algorithm", algorithm)?;
        kw.set_item("order", order)?;
        kw.set_item("store", store)?;
        slf.call_method("_py_Alltoallv", (sendbuf, recvbuf), Some(&kw))
            .map(|_| ())
    }

    #[pyo3(name = "_alltoallv", signature = (sendbuf, recvbuf, sendcounts, sdispls, recvcounts, rdispls, algorithm=None, order=None, store=None))]
    #[allow(clippy::too_many_arguments)]
    fn alltoallv(
        &mut self,
        py: Python<'_>,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        sendcounts: Vec<usize>,
        sdispls: Vec<usize>,
        recvcounts: Vec<usize>,
        rdispls: Vec<usize>,
        algorithm: Option<&str>,
        order: Option<&str>,
        store: Option<&str>,
    ) -> PyResult<()> {
        let comm = self.comm(py)?;
        let mut a = Args::acquire(py, sendbuf, recvbuf, algorithm, order, store);
        let call = a
            .bufs
            .take()
            .unwrap_or_else(|| Err(Error::InvalidArgument(String::new())));
        let call = call.map(|CallBufs { send, recv, forced }| AlltoallCall {
            send: send.map(|s| s.raw),
            recv: recv.raw,
            send_blocks: Blocks::Vector {
                counts: &sendcounts,
                displs: &sdispls,
            },
            recv_blocks: Blocks::Vector {
                counts: &recvcounts,
                displs: &rdispls,
            },
            forced,
        });
        a.execute(py, comm, call)
    }

    /// Take part in a collective this rank cannot call correctly (its arguments were
    /// rejected in Python): the peers raise too, and `message` comes back as the error.
    #[pyo3(name = "_reject", signature = (op, message, kind="argument"))]
    fn reject(&mut self, py: Python<'_>, op: &str, message: &str, kind: &str) -> PyResult<()> {
        let comm = self.comm(py)?;
        let err = match kind {
            "buffer" => Error::Buffer(message.to_string()),
            "unsupported" => Error::Unsupported(message.to_string()),
            _ => Error::InvalidArgument(message.to_string()),
        };
        py.detach(|| crate::collectives::reject(comm, op, err))
            .py_err(py)
    }

    /// This rank hands the collective `op` to MPI (`why`: the operator, datatype or buffer
    /// shmcoll does not serve): agree on it with every rank first (raises unless every rank does
    /// the same, see shmcoll_coll's `Comm::agree_fallback`).
    #[pyo3(name = "_fallback_agree")]
    fn fallback_agree(&mut self, py: Python<'_>, op: &str, why: &str) -> PyResult<()> {
        let Some(code) = shmcoll_coll::CollOp::parse(op)
            .filter(|&o| o != shmcoll_coll::CollOp::Barrier)
            .map(shmcoll_coll::CollOp::code)
        else {
            return Err(to_py(
                py,
                Error::InvalidArgument(format!("unknown collective {op:?}")),
            ));
        };
        let comm = self.comm(py)?;
        py.detach(|| comm.agree_fallback(code, why)).py_err(py)
    }

    /// One of the other collectives (Bcast, Allgather(v), Gather(v), Scatter(v),
    /// Reduce_scatter(_block), Allreduce, Reduce) on resolved buffers; sizes in bytes.
    /// `block` gives uniform blocks, `counts` and `displs` vector ones.
    #[pyo3(name = "_coll", signature = (op, sendbuf, recvbuf, root=0, block=None, counts=None, displs=None, dtype=None, reduce_op=None, algorithm=None))]
    #[allow(clippy::too_many_arguments)]
    fn coll(
        &mut self,
        py: Python<'_>,
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
    ) -> PyResult<()> {
        use crate::collectives::Named;
        let Some(op) = CollOp::parse_collective(op) else {
            return Err(to_py(
                py,
                Error::InvalidArgument(format!("unknown collective {op:?}")),
            ));
        };
        let comm = self.comm(py)?;
        crate::collectives::run(
            py,
            comm,
            crate::collectives::CollArgs {
                op,
                sendbuf,
                recvbuf,
                send_window: None,
                recv_window: None,
                root,
                block,
                counts,
                displs,
                dtype: dtype.map(Named::Name),
                reduce_op: reduce_op.map(Named::Name),
                algorithm,
            },
        )
    }

    /// The exchange under the gathering object calls (`kind`: allgather, gather, ...;
    /// `root` for gather and reduce): every rank's pickle, at the root if given (an empty
    /// list elsewhere), and whether some pickle was long (then only `long_root` gets them,
    /// if given, and with `keep_own` not its own: None in its place); see objects.rs.
    #[pyo3(name = "_objects_gather", signature = (data, kind, root=None, long_root=None, keep_own=false))]
    fn objects_gather<'py>(
        &mut self,
        py: Python<'py>,
        data: &[u8],
        kind: &str,
        root: Option<usize>,
        long_root: Option<usize>,
        keep_own: bool,
    ) -> PyResult<(Vec<Option<Bound<'py, PyAny>>>, bool)> {
        crate::objects::gather(py, self.comm(py)?, data, kind, root, long_root, keep_own)
    }

    /// The exchange under bcast of an object: the root's pickle (None on the root) and
    /// the root's `aux` (1 when out-of-band buffers follow, their sizes leading the pickle).
    #[pyo3(name = "_objects_bcast", signature = (data, root, aux=0))]
    fn objects_bcast<'py>(
        &mut self,
        py: Python<'py>,
        data: Option<&[u8]>,
        root: usize,
        aux: u64,
    ) -> PyResult<(Option<Bound<'py, PyBytes>>, u64)> {
        crate::objects::bcast(py, self.comm(py)?, data, root, aux)
    }

    /// The exchange under scatter of objects: this rank's pickle of the root's `items`.
    #[pyo3(name = "_objects_scatter")]
    fn objects_scatter<'py>(
        &mut self,
        py: Python<'py>,
        items: Option<Vec<Bound<'py, PyBytes>>>,
        root: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let views: Option<Vec<&[u8]>> = items
            .as_ref()
            .map(|v| v.iter().map(|b| b.as_bytes()).collect());
        crate::objects::scatter(py, self.comm(py)?, views, root)
    }

    /// The exchange under alltoall of objects: item j of `items` to rank j, this rank's
    /// pickles from every rank.
    #[pyo3(name = "_objects_alltoall")]
    fn objects_alltoall<'py>(
        &mut self,
        py: Python<'py>,
        items: Vec<Bound<'py, PyBytes>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let views: Vec<&[u8]> = items.iter().map(|b| b.as_bytes()).collect();
        crate::objects::alltoall(py, self.comm(py)?, views)
    }

    #[pyo3(name = "_barrier")]
    fn barrier(&mut self, py: Python<'_>) -> PyResult<()> {
        let comm = self.comm(py)?;
        run_releasing_on_block(py, || comm.barrier()).py_err(py)
    }

    /// A block of `nbytes` of this rank's shared heap.
    #[pyo3(name = "_heap_alloc")]
    fn heap_alloc(&mut self, py: Python<'_>, nbytes: usize) -> PyResult<HeapBuffer> {
        let comm = self.comm(py)?;
        let block = comm.heap_alloc(nbytes).py_err(py)?;
        Ok(HeapBuffer::new(block, nbytes))
    }

    /// (bytes in use, capacity) of this rank's heap.
    #[pyo3(name = "_heap_usage")]
    fn heap_usage(&mut self, py: Python<'_>) -> PyResult<(usize, usize)> {
        Ok(self.comm(py)?.heap_usage())
    }

    /// Whether `buf`'s memory lies in the shared heap.
    #[pyo3(name = "_in_heap")]
    fn in_heap(&mut self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<bool> {
        let b = match Borrowed::new(buf, false, "buffer") {
            Ok(b) => b,
            // A non-contiguous view cannot serve a single-copy path anyway.
            Err(BorrowError::Shm(_)) => return Ok(false),
            Err(BorrowError::Python(pe)) => return Err(pe),
        };
        let r = b.raw();
        Ok(self.comm(py)?.heap_offset(r.addr, r.len.max(1)).is_some())
    }

    /// The segment offset of `buf` when it lies in the shared heap, else None.
    #[pyo3(name = "_heap_offset")]
    fn heap_offset(&mut self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        let b = match Borrowed::new(buf, false, "buffer") {
            Ok(b) => b,
            Err(BorrowError::Shm(_)) => return Ok(None),
            Err(BorrowError::Python(pe)) => return Err(pe),
        };
        let r = b.raw();
        Ok(self.comm(py)?.heap_offset(r.addr, r.len.max(1)))
    }

    /// A read-only view of `nbytes` of the shared heap at segment offset `offset` (any
    /// rank's part): the caller's protocol must keep the owner from rewriting it meanwhile.
    #[pyo3(name = "_peer_view")]
    fn peer_view(&mut self, py: Python<'_>, offset: usize, nbytes: usize) -> PyResult<PeerView> {
        let comm = self.comm(py)?;
        let heap = comm.segment().layout().heap_range();
        if offset < heap.start || offset.checked_add(nbytes).is_none_or(|e| e > heap.end) {
            return Err(to_py(
                py,
                Error::InvalidArgument(format!(
                    "{nbytes} bytes at offset {offset} are not in the shared heap"
                )),
            ));
        }
        Ok(PeerView::new(comm.segment().clone(), offset, nbytes))
    }

    /// (algorithm, order, store, forced?) of the last successful collective, or None.
    #[pyo3(name = "_last_choice")]
    fn last_choice(&mut self, py: Python<'_>) -> PyResult<Option<(String, String, String, bool)>> {
        let comm = self.comm(py)?;
        Ok(comm.last_choice().map(|c| {
            // Only Alltoall's algorithms take an order and a store.
            let alltoall = c.op.family() == shmcoll_coll::CollOp::Alltoall;
            let param = |name: &str| if alltoall { name } else { "-" }.to_string();
            (
                c.algo.name().to_string(),
                param(c.order.name()),
                param(c.store.name()),
                c.forced.algo.is_some(),
            )
        }))
    }

    /// Counters: calls, calls per algorithm, rejected calls, yields spent leaving calls
    /// after CPU-mates.
    #[pyo3(name = "_stats")]
    fn stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let comm = self.comm(py)?;
        let d = PyDict::new(py);
        d.set_item("calls", comm.stats().calls)?;
        d.set_item("rejected", comm.stats().rejected)?;
        d.set_item("leave_yields", comm.stats().leave_yields)?;
        for a in shmcoll_coll::Algo::ALL {
            d.set_item(a.name(), comm.calls_with(a))?;
        }
        Ok(d)
    }

    /// The table in force: (source, ranges), see table.rs for the row format.
    #[pyo3(name = "_table")]
    fn table(&mut self, py: Python<'_>) -> PyResult<(String, Vec<RangeRow>)> {
        let sel = self.comm(py)?.selection(shmcoll_coll::CollOp::Alltoall);
        Ok((sel.source.clone(), to_rows(&sel.table)))
    }

    /// Bind a table (every rank must bind the same one); `source` names it for explain.
    #[pyo3(name = "_set_table")]
    fn set_table(&mut self, py: Python<'_>, rows: Vec<RangeRow>, source: String) -> PyResult<()> {
        let t = from_rows(rows).py_err(py)?;
        self.comm(py)?
            .set_table(shmcoll_coll::CollOp::Alltoall, t, source);
        Ok(())
    }

    /// The selection table of a collective family: rows (max bytes or None, [algorithms]).
    #[pyo3(name = "_coll_table")]
    fn coll_table(
        &mut self,
        py: Python<'_>,
        op: &str,
    ) -> PyResult<Vec<crate::coll_table::CollRowPy>> {
        let fam = crate::coll_table::family(py, op)?;
        Ok(crate::coll_table::to_rows(
            &self.comm(py)?.selection(fam).table,
        ))
    }

    /// Bind a table for a collective family (every rank must bind the same one).
    #[pyo3(name = "_set_coll_table")]
    fn set_coll_table(
        &mut self,
        py: Python<'_>,
        op: &str,
        rows: Vec<crate::coll_table::CollRowPy>,
    ) -> PyResult<()> {
        let fam = crate::coll_table::family(py, op)?;
        let t = crate::coll_table::from_rows(py, fam, rows)?;
        self.comm(py)?.set_table(fam, t, "tuning table".into());
        Ok(())
    }

    /// Settings as this communicator resolved them.
    #[pyo3(name = "_config")]
    fn config<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let comm = self.comm(py)?;
        let c = comm.config();
        let l = comm.segment().layout().sizes;
        let d = PyDict::new(py);
        d.set_item("inline_bytes", l.inline_bytes)?;
        d.set_item("staging_bytes", l.staging_bytes)?;
        d.set_item("heap_bytes", l.heap_bytes)?;
        d.set_item("chunk_bytes", c.chunk_bytes)?;
        d.set_item("nt_threshold", c.nt_threshold)?;
        d.set_item("timeout_s", c.wait.timeout.as_secs_f64())?;
        d.set_item("spin_us", c.wait.spin.as_secs_f64() * 1e6)?;
        d.set_item("yield_us", c.wait.yield_until.as_secs_f64() * 1e6)?;
        d.set_item("leave_yields", c.wait.leave_yields)?;
        d.set_item("forced", c.alltoall_forced.describe())?;
        d.set_item("segment_bytes", comm.segment().len())?;
        // The segment's name identifies it, also once pooled and serving again.
        d.set_item("segment", comm.segment().name())?;
        d.set_item("pool_segments", c.pool_segments)?;
        Ok(d)
    }

    /// Pids of every rank (index = rank).
    #[pyo3(name = "_pids")]
    fn pids(&mut self, py: Python<'_>) -> PyResult<Vec<u32>> {
        let comm = self.comm(py)?;
        Ok((0..comm.size()).map(|r| comm.pid_of(r)).collect())
    }

    /// Break the communicator and tell the peers, which fail their calls at once (this
    /// process is ending with an error; see `shmcoll.comm`).
    #[pyo3(name = "_abort")]
    fn abort(&mut self, why: &str) {
        if let Some(c) = self.comm.as_mut() {
            c.abort(why);
        }
    }

    /// Leave the communicator (no collective; the segment goes once nobody maps it).
    /// Heap arrays stay valid while referenced.
    #[pyo3(name = "Free")]
    fn free(&mut self) {
        self.comm = None;
    }
}

impl CommBase {
    /// Alltoall natively when both buffers are plain or specifications such as
    /// `[buf, MPI.DOUBLE]` (`Ok(Some(result))`); `Ok(None)` sends the call to the Python
    /// implementation (`Comm._py_Alltoall`: the other forms, and what runs on MPI).
    fn alltoall_native(
        &mut self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        algorithm: Option<&str>,
        order: Option<&str>,
        store: Option<&str>,
    ) -> PyResult<Option<PyResult<()>>> {
        if is_buffer(recvbuf) && is_buffer(sendbuf) {
            return Ok(Some(self.alltoall(
                py,
                Some(sendbuf),
                recvbuf,
                None,
                None,
                algorithm,
                order,
                store,
            )));
        }
        let p = self.comm(py)?.size();
        let Some((recv, rbpp)) = crate::buffer_spec::per_rank(recvbuf, p) else {
            return Ok(None);
        };
        let send = if is_in_place(sendbuf) {
            Some(None)
        } else if is_buffer(sendbuf) {
            Some(Some((sendbuf.clone(), None)))
        } else {
            crate::buffer_spec::per_rank(sendbuf, p).map(|(b, n)| Some((b, Some(n))))
        };
        let Some(send) = send else { return Ok(None) };
        let (sbuf, sbpp) = send.map_or((None, None), |(b, n)| (Some(b), n));
        Ok(Some(self.alltoall(
            py,
            sbuf.as_ref(),
            &recv,
            sbpp,
            Some(rbpp),
            algorithm,
            order,
            store,
        )))
    }
}

/// Hand a call with `compress=` or `traffic=` to the Python implementation
/// (`Comm._compressed`, shmcoll.compress), which picks the codec and runs the exchange.
fn compressed<'py, A: pyo3::call::PyCallArgs<'py> + pyo3::IntoPyObject<'py>>(
    slf: &Bound<'py, CommBase>,
    name: &str,
    args: A,
    compress: Option<&Bound<'py, PyAny>>,
    traffic: Option<String>,
) -> PyResult<()> {
    slf.call_method1("_compressed", (name, args, compress, traffic))
        .map(|_| ())
}

/// The arguments of a call that may take the native fast path.
struct Fast<'a, 'py> {
    op: CollOp,
    send: Option<&'a Bound<'py, PyAny>>,
    recv: &'a Bound<'py, PyAny>,
    root: usize,
    red: Option<&'a Bound<'py, PyAny>>,
    algorithm: Option<&'a str>,
}

/// Run `f` natively when its arguments allow, else call the Python implementation
/// `method(*args, algorithm=...)` of the subclass (buffer specifications, datatypes, MPI
/// fallbacks).
fn dispatch<'py, A: pyo3::call::PyCallArgs<'py>>(
    slf: &Bound<'py, CommBase>,
    f: Fast<'_, 'py>,
    method: &str,
    args: A,
) -> PyResult<()> {
    let py = slf.py();
    {
        let mut me = slf.borrow_mut();
        let comm = me.comm(py)?;
        if let Some(r) = try_fast(py, comm, f.op, f.send, f.recv, f.root, f.red, f.algorithm) {
            return r;
        }
    }
    call_python(slf, method, args, f.algorithm)
}

/// The Python implementation `method(*args, algorithm=algorithm)` of the subclass.
fn call_python<'py, A: pyo3::call::PyCallArgs<'py>>(
    slf: &Bound<'py, CommBase>,
    method: &str,
    args: A,
    algorithm: Option<&str>,
) -> PyResult<()> {
    let kw = PyDict::new(slf.py());
    kw.set_item("algorithm", algorithm)?;
    slf.call_method(method, args, Some(&kw)).map(|_| ())
}

/// A vector collective natively (`vector_collective`), else through the Python
/// implementation `method(sendbuf, recvbuf[, root], algorithm=...)`.
fn vector_dispatch(
    slf: &Bound<'_, CommBase>,
    op: CollOp,
    sendbuf: &Bound<'_, PyAny>,
    recvbuf: &Bound<'_, PyAny>,
    root: usize,
    algorithm: Option<&str>,
    method: &str,
) -> PyResult<()> {
    let py = slf.py();
    {
        let mut me = slf.borrow_mut();
        let comm = me.comm(py)?;
        if let Some(r) = vector_collective(py, comm, op, sendbuf, recvbuf, root, algorithm) {
            return r;
        }
    }
    if op == CollOp::Allgatherv {
        call_python(slf, method, (sendbuf, recvbuf), algorithm)
    } else {
        call_python(slf, method, (sendbuf, recvbuf, root), algorithm)
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

/// The scalar arguments of call `op`, converted; a bad one rejects the call on every rank
/// (given.rs).
fn scalars(
    slf: &Bound<'_, CommBase>,
    op: &str,
    given: Objects<'_, '_>,
) -> PyResult<crate::given::Scalars> {
    given.convert().or_else(|bad| {
        let py = slf.py();
        let mut me = slf.borrow_mut();
        Err(crate::given::reject(py, me.comm(py)?, op, &bad))
    })
}
