//! The arguments the native readers decline (buffer_spec.rs, vector_spec.rs, pyobj.rs:
//! mpi4py's rarer specification forms, bytearrays and other exporters, DLPack tensors,
//! operators and element types the kernels do not combine), read by the Python resolver
//! `shmcoll.resolve` in the middle of the native call, which then goes on natively with
//! the plain buffers and byte counts it returns. So every call enters the engine once.
//!
//! What the resolver raises is the call's `Declined`: `ServedByMPI` (the call runs on MPI)
//! or what is wrong with the argument (the call is rejected on every rank); calls.rs
//! settles it. The resolver's functions are looked up at every call (only calls the native
//! readers decline pay for it), so tests can count them.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

use shmcoll_kernels::{Dtype, Op};

use crate::pyobj::Vector;

/// A call this rank cannot make as given: the exception the resolver (or a check of the
/// resolved arguments) raised.
pub(crate) struct Declined(pub PyErr);

impl From<PyErr> for Declined {
    fn from(e: PyErr) -> Declined {
        Declined(e)
    }
}

static RESOLVE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// `shmcoll.resolve.<name>(*args)`.
fn call<'py>(
    py: Python<'py>,
    name: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> Result<Bound<'py, PyAny>, Declined> {
    let m = RESOLVE.get_or_try_init(py, || {
        PyModule::import(py, "shmcoll.resolve").map(Bound::unbind)
    })?;
    Ok(m.bind(py).getattr(name)?.call1(args)?)
}

/// A single-buffer specification: (the exact bytes it names, their count); a count in it
/// is per block when `blocks` > 1.
pub(crate) fn whole<'py>(
    spec: &Bound<'py, PyAny>,
    blocks: usize,
) -> Result<(Bound<'py, PyAny>, usize), Declined> {
    Ok(call(spec.py(), "whole", (spec, blocks))?.extract()?)
}

/// An Alltoall specification: (buffer, bytes per rank).
pub(crate) fn per_rank<'py>(
    spec: &Bound<'py, PyAny>,
    size: usize,
) -> Result<(Bound<'py, PyAny>, usize), Declined> {
    Ok(call(spec.py(), "per_rank", (spec, size))?.extract()?)
}

/// A vector specification: (buffer, counts in bytes, displacements in bytes).
pub(crate) fn vector<'py>(spec: &Bound<'py, PyAny>, size: usize) -> Result<Vector<'py>, Declined> {
    Ok(call(spec.py(), "vector", (spec, size))?.extract()?)
}

/// Reduce_scatter's `recvcounts`: `size` element counts.
pub(crate) fn counts(
    recvcounts: &Bound<'_, PyAny>,
    size: usize,
    itemsize: usize,
) -> Result<Vec<usize>, Declined> {
    Ok(call(recvcounts.py(), "counts", (recvcounts, size, itemsize))?.extract()?)
}

/// The element type and operator of reduction `name`, as `shmcoll.resolve.reduction`
/// reads them from the call's arguments (`recvbuf` None where this rank has none).
pub(crate) fn reduction(
    py: Python<'_>,
    name: &str,
    sendbuf: Option<&Bound<'_, PyAny>>,
    recvbuf: Option<&Bound<'_, PyAny>>,
    op: Option<&Bound<'_, PyAny>>,
    blocks: (usize, usize),
) -> Result<(Dtype, Op), Declined> {
    let r = call(
        py,
        "reduction",
        (name, sendbuf, recvbuf, op, blocks.0, blocks.1),
    )?;
    let dt: String = r.getattr("dtype")?.extract()?;
    let o: String = r.getattr("op")?.extract()?;
    match (Dtype::parse(&dt), Op::parse(&o)) {
        (Some(d), Some(o)) => Ok((d, o)),
        _ => Err(Declined(pyo3::exceptions::PyValueError::new_err(format!(
            "{name}: the kernels do not combine {o} on {dt}"
        )))),
    }
}
