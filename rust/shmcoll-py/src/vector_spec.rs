//! mpi4py's vector buffer specifications (`[buf, (counts, displs), datatype]`,
//! `[buf, counts, displs, datatype]`, `[buf, counts, datatype]`, and the same without a
//! datatype or with None for it) resolved natively for the common case: lists or tuples of
//! non-negative ints and a predefined mpi4py datatype, or the item size of a NumPy array or
//! memoryview when there is no datatype. On
//! this path a call pays well under a microsecond for its specification where the Python
//! parser (`shmcoll.buffers.parse_vector`) costs several. Anything else (NumPy count
//! arrays, NumPy dtypes, derived datatypes, bad counts) returns None, and the Python parser
//! resolves it or raises its own error.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple};
use pyo3::{intern, PyTypeInfo};

/// Predefined mpi4py datatypes seen so far, with their sizes, held by strong references so
/// that an address stays theirs. Predefined datatypes are never freed, so a size stays
/// right; the list is capped.
static DATATYPES: std::sync::Mutex<Vec<(Py<PyAny>, usize)>> = std::sync::Mutex::new(Vec::new());
const DATATYPES_CAP: usize = 64;

/// The Python parser's size function (validates, rejects gaps).
static DATATYPE_SIZE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn datatype_size(dt: &Bound<'_, PyAny>) -> Option<usize> {
    let py = dt.py();
    {
        let known = DATATYPES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, n)) = known.iter().find(|(o, _)| o.as_ptr() == dt.as_ptr()) {
            return Some(*n);
        }
    }
    // Only mpi4py's predefined datatypes are cached; the rest go to the Python parser.
    let predefined = dt
        .getattr(intern!(py, "is_predefined"))
        .ok()?
        .extract::<bool>()
        .ok()?;
    if !predefined {
        return None;
    }
    let f = DATATYPE_SIZE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                PyModule::import(py, "shmcoll.buffers")?
                    .getattr("datatype_size")?
                    .unbind(),
            )
        })
        .ok()?;
    let n: usize = f.bind(py).call1((dt,)).ok()?.extract().ok()?;
    let mut known = DATATYPES.lock().unwrap_or_else(|e| e.into_inner());
    if known.len() < DATATYPES_CAP {
        known.push((dt.clone().unbind(), n));
    }
    Some(n)
}

/// `size` non-negative ints from a list or tuple.
fn ints(obj: &Bound<'_, PyAny>, size: usize) -> Option<Vec<usize>> {
    if !is_seq(obj) || obj.len().ok()? != size {
        return None;
    }
    obj.extract::<Vec<usize>>().ok()
}

/// The counts (and displacements, if given) of a two-item specification's second item: a
/// tuple of two sequences is (counts, displs); any other list or tuple, the counts.
fn counts_and_displs(
    cd: &Bound<'_, PyAny>,
    size: usize,
) -> Option<(Vec<usize>, Option<Vec<usize>>)> {
    if PyTuple::is_type_of(cd) && cd.len().ok()? == 2 {
        let (c, d) = (cd.get_item(0).ok()?, cd.get_item(1).ok()?);
        if is_seq(&c) && is_seq(&d) {
            return Some((ints(&c, size)?, Some(ints(&d, size)?)));
        }
    }
    is_seq(cd)
        .then(|| ints(cd, size))
        .flatten()
        .map(|c| (c, None))
}

/// The item size of a NumPy array or memoryview (None for other buffers: the Python
/// parser asks the buffer protocol).
fn item_size(buf: &Bound<'_, PyAny>) -> Option<usize> {
    if !crate::fastpath::is_buffer(buf) {
        return None;
    }
    buf.getattr(intern!(buf.py(), "itemsize"))
        .ok()?
        .extract::<usize>()
        .ok()
        .filter(|&n| n > 0)
}

fn is_seq(obj: &Bound<'_, PyAny>) -> bool {
    PyList::is_type_of(obj) || PyTuple::is_type_of(obj)
}

/// Allgatherv, Gatherv or Scatterv natively when the vector side (the receive buffer,
/// or Scatterv's send buffer, at the root for the rooted ones) resolves here and the
/// other side is a plain buffer or IN_PLACE; None sends the call to the Python
/// implementation.
pub fn vector_collective<'py>(
    py: Python<'py>,
    comm: &mut shmcoll_coll::Comm,
    op: shmcoll_coll::CollOp,
    sendbuf: &Bound<'py, PyAny>,
    recvbuf: &Bound<'py, PyAny>,
    root: usize,
    algorithm: Option<&str>,
) -> Option<PyResult<()>> {
    use crate::collectives::{run, CollArgs};
    use crate::fastpath::buffer_or_in_place;
    use shmcoll_coll::CollOp;
    let p = comm.size();
    let plain = |o: &Bound<'py, PyAny>| buffer_or_in_place(o).map(|b| b.cloned());
    // The side whose counts only the root has (Gatherv's receive, Scatterv's send).
    let at_root = comm.rank() == root;
    let (send, recv, counts, displs) = match op {
        CollOp::Allgatherv => {
            let (r, c, d) = vector_spec(recvbuf, p)?;
            (plain(sendbuf)?, Some(r), Some(c), Some(d))
        }
        CollOp::Gatherv if at_root => {
            let (r, c, d) = vector_spec(recvbuf, p)?;
            (plain(sendbuf)?, Some(r), Some(c), Some(d))
        }
        CollOp::Gatherv => (plain(sendbuf)?, None, None, None),
        CollOp::Scatterv if at_root => {
            let (s, c, d) = vector_spec(sendbuf, p)?;
            (Some(s), plain(recvbuf)?, Some(c), Some(d))
        }
        CollOp::Scatterv => (None, plain(recvbuf)?, None, None),
        _ => return None,
    };
    Some(run(
        py,
        comm,
        CollArgs {
            op,
            sendbuf: send.as_ref(),
            recvbuf: recv.as_ref(),
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

/// A resolved vector specification: the buffer, counts and displacements in bytes.
pub type Vector<'py> = (Bound<'py, PyAny>, Vec<usize>, Vec<usize>);

/// `(buffer, counts in bytes, displacements in bytes)` of a vector specification for a
/// communicator of `size` ranks, or None when the Python parser must handle it.
#[pyfunction]
pub fn vector_spec<'py>(spec: &Bound<'py, PyAny>, size: usize) -> Option<Vector<'py>> {
    if !is_seq(spec) {
        return None;
    }
    let items: Vec<Bound<'py, PyAny>> = spec.try_iter().ok()?.collect::<PyResult<_>>().ok()?;
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

/// `v` scaled from elements of `isz` bytes to bytes (None on overflow).
pub(crate) fn in_bytes(v: &[usize], isz: usize) -> Option<Vec<usize>> {
    v.iter().map(|&x| x.checked_mul(isz)).collect()
}

/// The exclusive prefix sums of `v`: where each block starts when they lie back to back
/// (None on overflow).
pub(crate) fn prefix_sums(v: &[usize]) -> Option<Vec<usize>> {
    v.iter()
        .scan(Some(0usize), |at, &c| {
            let o = *at;
            *at = at.and_then(|a| a.checked_add(c));
            Some(o)
        })
        .collect()
}
