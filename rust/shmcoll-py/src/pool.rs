//! The pool of freed communicators' segments (shmcoll_coll::pool) for Python: a
//! `SegmentOffer` is this rank's part of a new communicator's creation exchange, and
//! settling it gives a `PooledSegment` to join when every rank offered the same one.
//! `shmcoll.comm` runs the exchange over MPI or over the parent communicator; the record's
//! token is `shmcoll.bound_tables`'s.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use shmcoll_coll::pool::{self, Offer, Pooled, RECORD_BYTES};
use shmcoll_coll::{Comm, Config, Error};

use crate::errors::{to_py, IntoPyResult};

/// This rank's offer for a new communicator (`Offer`): settle it once; dropped unsettled,
/// its segments go back to the pool.
#[derive(Debug)]
#[pyclass(module = "shmcoll._core", frozen)]
pub struct SegmentOffer {
    offer: Mutex<Option<Offer>>,
    areas: Option<(usize, usize)>,
}

/// A pooled segment every rank agreed to take again: join it (`CommBase._join`) at once.
#[derive(Debug)]
#[pyclass(module = "shmcoll._core", frozen)]
pub struct PooledSegment {
    taken: Mutex<Option<(Pooled, Config)>>,
}

impl PooledSegment {
    /// Start the communicator on it (once) as `rank`, the rank it had there.
    pub(crate) fn resume(&self, py: Python<'_>, rank: usize) -> PyResult<Comm> {
        let taken = self
            .taken
            .lock()
            .map_err(|_| to_py(py, Error::Broken("pool lock poisoned".into())))?
            .take();
        let (p, cfg) = taken.ok_or_else(|| {
            to_py(
                py,
                Error::InvalidArgument("this pooled segment was joined already".into()),
            )
        })?;
        if p.rank() != rank {
            return Err(to_py(
                py,
                Error::InvalidArgument(format!(
                    "rank {rank} cannot join a pooled segment as its rank {}",
                    p.rank()
                )),
            ));
        }
        Comm::resume(p, cfg).py_err(py)
    }
}

impl SegmentOffer {
    fn lock(&self, py: Python<'_>) -> PyResult<std::sync::MutexGuard<'_, Option<Offer>>> {
        self.offer
            .lock()
            .map_err(|_| to_py(py, Error::Broken("pool lock poisoned".into())))
    }
}

fn settled_already(py: Python<'_>) -> PyErr {
    to_py(
        py,
        Error::InvalidArgument("this offer was settled already".into()),
    )
}

#[pymethods]
impl SegmentOffer {
    /// Read the settings for `nranks` ranks and take the pooled segments to offer.
    #[new]
    fn new(nranks: usize) -> SegmentOffer {
        let offer = Offer::new(nranks);
        SegmentOffer {
            areas: offer.areas(),
            offer: Mutex::new(Some(offer)),
        }
    }

    /// (inline bytes, staging bytes) of a segment made for this rank's settings, or None
    /// when they are not valid.
    #[getter]
    fn areas(&self) -> Option<(usize, usize)> {
        self.areas
    }

    /// The bytes to send to every rank of the new communicator (`RECORD_BYTES`), carrying
    /// `token` (0: none).
    fn record<'py>(&self, py: Python<'py>, token: u64) -> PyResult<Bound<'py, PyBytes>> {
        let mut guard = self.lock(py)?;
        let offer = guard.as_mut().ok_or_else(|| settled_already(py))?;
        offer.set_token(token);
        Ok(PyBytes::new(py, &offer.record_bytes()))
    }

    /// Settle from every rank's record (concatenated in rank order; this rank is `rank`):
    /// (whether the ranks share a node, the pooled segment to join or None, whether every
    /// rank sent the same nonzero token for the same areas). Raises the same error on
    /// every rank when one rank's settings are not valid.
    fn settle(
        &self,
        py: Python<'_>,
        records: &[u8],
        rank: usize,
    ) -> PyResult<(bool, Option<PooledSegment>, bool)> {
        let offer = self.lock(py)?.take().ok_or_else(|| settled_already(py))?;
        let s = offer.settle(records, rank).py_err(py)?;
        let reuse = s.reuse.map(|p| PooledSegment {
            taken: Mutex::new(Some((p, s.cfg))),
        });
        Ok((s.one_node, reuse, s.tokens_agree))
    }
}

/// Bytes of one rank's creation record.
#[pyfunction]
pub fn pool_record_bytes() -> usize {
    RECORD_BYTES
}

/// Segments of freed communicators this process keeps now.
#[pyfunction]
pub fn pooled_segments() -> usize {
    pool::pooled_count()
}
