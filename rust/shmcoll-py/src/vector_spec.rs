//! mpi4py's vector buffer specifications (`[buf, (counts, displs), datatype]`,
//! `[buf, counts, displs, datatype]`, `[buf, counts, datatype]`, and the same without a
//! datatype or with None for it) resolved natively for the common cases: counts and
//! displacements as lists or tuples of non-negative ints or as NumPy integer arrays (a
//! tuple in the counts' place is (counts, displs), as mpi4py reads it), and a datatype that is a
//! predefined mpi4py datatype, a NumPy dtype, a NumPy scalar type or a type code ("d"),
//! or, without one, the item size of a NumPy array or memoryview. On this path a call pays
//! well under a microsecond for its specification where the Python parser
//! (`shmcoll.buffers.parse_vector`) costs ten or more with NumPy counts. Anything else
//! (derived datatypes, negative or wrong-length counts, other sequences) returns None,
//! and the resolver (resolver.rs) reads it or raises.
//!
//! Counts, displacements and sizes here are the caller's, so they are computed with checked
//! arithmetic only (the lint below keeps it so): one that does not fit goes to the
//! resolver, which raises.
#![deny(clippy::arithmetic_side_effects)]

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{intern, PyTypeInfo};

use crate::datatypes::{datatype_size, is_ndarray};
use crate::pyobj::{in_bytes, is_list_or_tuple, item_size, list_items, prefix_sums, Vector};
use crate::resolver::Declined;

/// `size` non-negative ints from a list, a tuple or a NumPy array of integers (other
/// arrays' `tolist()` gives floats or nested lists, which do not convert: None).
pub(crate) fn ints(obj: &Bound<'_, PyAny>, size: usize) -> Option<Vec<usize>> {
    if !is_seq(obj) || obj.len().ok()? != size {
        return None;
    }
    let list;
    let items = match list_items(obj) {
        Some(items) => items,
        None => {
            // tolist() makes Python ints at C speed; iterating the array would make NumPy
            // scalars one by one.
            list = obj.call_method0(intern!(obj.py(), "tolist")).ok()?;
            list_items(&list)?
        }
    };
    items.iter().map(|c| c.extract::<usize>().ok()).collect()
}

/// The counts (and displacements, if given) of a two-item specification's second item,
/// as mpi4py reads it: a tuple is always (counts, displs), any other list or array the
/// counts. Scalars in the tuple (one count for every rank, strided displacements), and
/// tuples of other lengths (an error), are the Python parser's.
fn counts_and_displs(
    cd: &Bound<'_, PyAny>,
    size: usize,
) -> Option<(Vec<usize>, Option<Vec<usize>>)> {
    if PyTuple::is_type_of(cd) {
        if cd.len().ok()? != 2 {
            return None;
        }
        let (c, d) = (cd.get_item(0).ok()?, cd.get_item(1).ok()?);
        if !(is_seq(&c) && is_seq(&d)) {
            return None;
        }
        return Some((ints(&c, size)?, Some(ints(&d, size)?)));
    }
    is_seq(cd)
        .then(|| ints(cd, size))
        .flatten()
        .map(|c| (c, None))
}

/// A sequence of counts, as the Python parser's `_is_seq` sees one: a list, a tuple or a
/// NumPy array.
fn is_seq(obj: &Bound<'_, PyAny>) -> bool {
    is_list_or_tuple(obj) || is_ndarray(obj)
}

/// Allgatherv, Gatherv or Scatterv. The vector side (the receive buffer, or Scatterv's
/// send buffer, at the root for the rooted ones) is read here or else by the resolver; the
/// other side is a buffer, a single-buffer specification or IN_PLACE
/// (`buffer_spec::side`).
pub(crate) fn vector_collective<'py>(
    py: Python<'py>,
    comm: &mut shmcoll_coll::Comm,
    op: shmcoll_coll::CollOp,
    sendbuf: &Bound<'py, PyAny>,
    recvbuf: &Bound<'py, PyAny>,
    root: usize,
    algorithm: Option<&str>,
) -> Result<PyResult<()>, Declined> {
    use crate::collectives::{run, CollArgs};
    use shmcoll_coll::CollOp;
    let p = comm.size();
    let vector = |o: &Bound<'py, PyAny>| match vector_spec(o, p) {
        Some(v) => Ok(v),
        None => crate::resolver::vector(o, p),
    };
    // The other side: a buffer, the run of bytes a specification such as
    // [buf, MPI.DOUBLE] names, or IN_PLACE (None).
    type Side<'py> = Option<(Bound<'py, PyAny>, Option<(usize, usize)>)>;
    let plain = |o: &Bound<'py, PyAny>| -> Result<Side<'py>, Declined> {
        let a = crate::buffer_spec::side(o, 1, true, false)?;
        Ok(a.map(|a| (a.obj().clone(), a.window())))
    };
    let at_root = comm.rank() == root;
    let (send, recv, counts, displs) = match op {
        CollOp::Allgatherv => {
            let (r, c, d) = vector(recvbuf)?;
            (plain(sendbuf)?, Some((r, None)), Some(c), Some(d))
        }
        CollOp::Gatherv if at_root => {
            let (r, c, d) = vector(recvbuf)?;
            (plain(sendbuf)?, Some((r, None)), Some(c), Some(d))
        }
        CollOp::Gatherv => (plain(sendbuf)?, None, None, None),
        CollOp::Scatterv if at_root => {
            let (s, c, d) = vector(sendbuf)?;
            (Some((s, None)), plain(recvbuf)?, Some(c), Some(d))
        }
        CollOp::Scatterv => (None, plain(recvbuf)?, None, None),
        _ => {
            let msg = format!("{} has no vector specification", op.name());
            return Err(Declined(crate::errors::argument_error(py, &msg, false)));
        }
    };
    Ok(run(
        py,
        comm,
        CollArgs {
            op,
            sendbuf: send.as_ref().map(|(b, _)| b),
            recvbuf: recv.as_ref().map(|(b, _)| b),
            send_window: send.as_ref().and_then(|(_, w)| *w),
            recv_window: recv.as_ref().and_then(|(_, w)| *w),
            root,
            block: None,
            counts,
            displs,
            dtype: None,
            reduce_op: None,
            algorithm,
        },
    ))
}

/// `(buffer, counts in bytes, displacements in bytes)` of a vector specification for a
/// communicator of `size` ranks, or None when the Python parser must handle it.
#[pyfunction]
pub fn vector_spec<'py>(spec: &Bound<'py, PyAny>, size: usize) -> Option<Vector<'py>> {
    // The specification itself is a list or tuple (an array there is a plain buffer).
    if !is_list_or_tuple(spec) {
        return None;
    }
    let items = list_items(spec)?;
    let (buf, counts, displs, dt) = match items.as_slice() {
        [buf, cd] => {
            let (c, d) = counts_and_displs(cd, size)?;
            (buf, c, d, None)
        }
        // [buf, counts, displs] without a datatype.
        [buf, c, d] if is_seq(c) && is_seq(d) => (buf, ints(c, size)?, Some(ints(d, size)?), None),
        [buf, cd, dt] => {
            let (c, d) = counts_and_displs(cd, size)?;
            (buf, c, d, Some(dt))
        }
        [buf, c, d, dt] => (buf, ints(c, size)?, Some(ints(d, size)?), Some(dt)),
        _ => return None,
    };
    // Other exporters (DLPack, the CUDA array interface) are the Python parser's.
    if !crate::pyobj::is_buffer(buf) {
        return None;
    }
    // A missing datatype, or None, means the buffer's own item size.
    let isz = match dt {
        Some(dt) if !dt.is_none() => datatype_size(dt)?,
        _ => item_size(buf)?,
    };
    // Displacements default to the prefix sums; one that overflows is the Python parser's
    // to report.
    let displs = match displs {
        Some(d) => d,
        None => prefix_sums(&counts)?,
    };
    Some((
        buf.clone(),
        in_bytes(&counts, isz)?,
        in_bytes(&displs, isz)?,
    ))
}
