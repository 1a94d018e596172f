//! `CommBase`: one rank of a node communicator. `shmcoll.Comm` (Python) derives from it:
//! the collectives with mpi4py's names (one row each in the table below, see calls.rs)
//! and `Barrier` are implemented here so that a call goes from Python straight into Rust
//! and stays there; bootstrap, heap arrays and the object collectives live in the Python
//! subclass. The GIL is held for calls that complete within microseconds and released as
//! soon as a call blocks or copies a lot (see gil.rs).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use shmcoll_coll::{CollOp, Comm, Config, Error};
use shmcoll_shm::Segment;

use crate::buffer::{BorrowError, Borrowed};
use crate::calls::{Engine, Route};
use crate::errors::{to_py, IntoPyResult};
use crate::gil::run_releasing_on_block;
use crate::heap::{HeapBuffer, PeerView};
use crate::pool::PooledSegment;
use crate::table::{from_rows, to_rows, RangeRow};

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
    /// Inherited through fork: the communicator is the parent's (see `_abandon_after_fork`).
    forked: bool,
}

impl CommBase {
    pub(crate) fn comm(&mut self, py: Python<'_>) -> PyResult<&mut Comm> {
        let forked = self.forked;
        self.comm.as_mut().ok_or_else(|| {
            let why = if forked {
                "the communicator belongs to the process this one was forked from; make a new one here"
            } else {
                "the communicator was freed"
            };
            to_py(py, Error::InvalidArgument(why.into()))
        })
    }
}

impl<'py> Engine<'py> for Bound<'py, CommBase> {
    fn obj(&self) -> &Bound<'py, PyAny> {
        self.as_any()
    }

    fn with_comm<R>(&self, f: impl FnOnce(&mut Comm) -> R) -> PyResult<R> {
        let mut me = self.borrow_mut();
        Ok(f(me.comm(self.py())?))
    }
}

crate::calls::comm_methods! {
collectives {
    /// Send block j of `sendbuf` to rank j and receive block i of `recvbuf` from rank i
    /// (mpi4py's signature and buffer specifications; `sendbuf` may be IN_PLACE). The
    /// keywords force the algorithm, copy order and store policy.
    /// `compress=` (a codec or its configuration) or `traffic=` (a class of the active
    /// compression policy) send compressed blocks (`shmcoll.compress`).
    "Alltoall" alltoall_py
        (sendbuf, recvbuf; algorithm, order, store, compress, traffic) => Route::Alltoall;

    /// Alltoall with per-rank counts and displacements (mpi4py's vector specifications;
    /// `sendbuf` may be IN_PLACE).
    "Alltoallv" alltoallv_py
        (sendbuf, recvbuf; algorithm, order, store) => Route::Alltoallv;

    /// Combine every rank's `sendbuf` element-wise with `op` (default SUM) into every
    /// `recvbuf` (mpi4py's signature; `sendbuf` may be IN_PLACE).
    "Allreduce" allreduce_py
        (sendbuf, recvbuf, op = None; algorithm, compress, traffic)
        => Route::OneBuffer(CollOp::Allreduce);

    /// Combine every rank's `sendbuf` element-wise with `op` into the root's `recvbuf`.
    "Reduce" reduce_py text "($self, sendbuf, recvbuf, op=None, root=0, *, algorithm=None)"
        (sendbuf, recvbuf, op = None, root = None; algorithm)
        => Route::OneBuffer(CollOp::Reduce);

    /// Broadcast the root's `buf` to every rank's `buf`.
    "Bcast" bcast_py
        text "($self, buf, root=0, *, algorithm=None, compress=None, traffic=None)"
        (buf, root = None; algorithm, compress, traffic) => Route::OneBuffer(CollOp::Bcast);

    /// Gather every rank's `sendbuf` into every rank's `recvbuf`, in rank order.
    "Allgather" allgather_py
        (sendbuf, recvbuf; algorithm, compress, traffic) => Route::OneBuffer(CollOp::Allgather);

    /// Gather every rank's `sendbuf` into the root's `recvbuf` (rank order).
    "Gather" gather_py text "($self, sendbuf, recvbuf, root=0, *, algorithm=None)"
        (sendbuf, recvbuf, root = None; algorithm) => Route::OneBuffer(CollOp::Gather);

    /// Send block j of the root's `sendbuf` to rank j's `recvbuf`.
    "Scatter" scatter_py text "($self, sendbuf, recvbuf, root=0, *, algorithm=None)"
        (sendbuf, recvbuf, root = None; algorithm) => Route::OneBuffer(CollOp::Scatter);

    /// Combine every rank's `sendbuf` with `op`; rank i gets the `recvcounts[i]` elements
    /// after those of ranks 0..i-1.
    "Reduce_scatter" reduce_scatter_py
        (sendbuf, recvbuf, recvcounts = None, op = None; algorithm) => Route::ReduceScatter;

    /// Allgather with per-rank counts and displacements in `recvbuf`'s specification.
    "Allgatherv" allgatherv_py
        (sendbuf, recvbuf; algorithm) => Route::Vector(CollOp::Allgatherv);

    /// Gather with per-rank counts and displacements (the root's `recvbuf` specification).
    "Gatherv" gatherv_py text "($self, sendbuf, recvbuf, root=0, *, algorithm=None)"
        (sendbuf, recvbuf, root = None; algorithm) => Route::Vector(CollOp::Gatherv);

    /// Scatter with per-rank counts and displacements (the root's `sendbuf` specification).
    "Scatterv" scatterv_py text "($self, sendbuf, recvbuf, root=0, *, algorithm=None)"
        (sendbuf, recvbuf, root = None; algorithm) => Route::Vector(CollOp::Scatterv);

    /// Combine every rank's `sendbuf` (p equal blocks) with `op`; rank i gets block i.
    "Reduce_scatter_block" reduce_scatter_block_py
        (sendbuf, recvbuf, op = None; algorithm, compress, traffic)
        => Route::OneBuffer(CollOp::ReduceScatterBlock);
}

    /// An unjoined communicator; `Comm.__init__` joins it with `_join`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> CommBase {
        CommBase {
            comm: None,
            forked: false,
        }
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


    /// Take part in collective `op` as this rank's rejection for the exception `e` (its
    /// arguments were rejected in Python): the peers raise `PeerRejectedError`, and this
    /// rank raises `e` as a shmcoll error (see calls.rs, `reject`).
    #[pyo3(name = "_reject_with")]
    fn reject_with(&mut self, py: Python<'_>, op: &str, e: &Bound<'_, PyAny>) -> PyResult<()> {
        let comm = self.comm(py)?;
        Err(crate::calls::reject(py, comm, op, PyErr::from_value(e.clone())))
    }

    /// This rank hands the collective `op` to MPI (`why`: the operator, datatype or buffer
    /// shmcoll does not serve): agree on it with every rank first (raises unless every rank does
    /// the same, see shmcoll_coll's `Comm::agree_fallback`).
    /// Run call `name` (made in Python: a persistent request's creation) on the wrapped MPI
    /// communicator with `args` once every rank agreed to, `why` (a `ServedByMPI`) being
    /// what shmcoll does not serve; without MPI, every rank rejects it (calls.rs, `on_mpi`).
    #[pyo3(name = "_on_mpi")]
    fn on_mpi<'py>(
        slf: &Bound<'py, Self>,
        name: &str,
        why: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::calls::on_mpi(slf, name, &why.str()?.to_string(), args)
    }

    #[pyo3(name = "_fallback_agree")]
    fn fallback_agree(&mut self, py: Python<'_>, op: &str, why: &str) -> PyResult<()> {
        crate::collectives::agree_fallback(py, self.comm(py)?, op, why)
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

    /// The table in force for operation `op` (its family's): (source, rows), see
    /// table.rs for the row format.
    #[pyo3(name = "_table")]
    fn table(&mut self, py: Python<'_>, op: &str) -> PyResult<(String, Vec<RangeRow>)> {
        let fam = crate::table::family(py, op)?;
        let sel = self.comm(py)?.selection(fam);
        Ok((sel.source.clone(), to_rows(fam, &sel.table)))
    }

    /// Bind a table for operation `op`'s family (every rank must bind the same one);
    /// `source` names it for explain.
    #[pyo3(name = "_set_table")]
    fn set_table(
        &mut self,
        py: Python<'_>,
        op: &str,
        rows: Vec<RangeRow>,
        source: String,
    ) -> PyResult<()> {
        let fam = crate::table::family(py, op)?;
        let t = from_rows(fam, rows).py_err(py)?;
        self.comm(py)?.set_table(fam, t, source);
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

    /// In a child of fork (`shmcoll.comm`'s at-fork hook): the communicator, its rank's
    /// slot and its calls are the parent's, mapped shared in both. The child must neither
    /// take part in a call (it would act as the parent's rank) nor leave the communicator
    /// (dropping it would hand the parent's segment to this process's pool), so it is
    /// forgotten, not dropped, and every call raises.
    #[pyo3(name = "_abandon_after_fork")]
    fn abandon_after_fork(&mut self) {
        if let Some(c) = self.comm.take() {
            std::mem::forget(c);
        }
        self.forked = true;
    }
}
