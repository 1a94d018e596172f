//! What a Python object is to the native side, before any collective: shmcoll's and
//! mpi4py's special objects (IN_PLACE, BOTTOM, the predefined operators, registered when a
//! Comm wraps MPI), whether an object is a plain buffer, an array's element type and size,
//! lists and tuples, and counts scaled to bytes with checked arithmetic. The parsers of
//! buffer and vector specifications (buffer_spec.rs, vector_spec.rs, datatypes.rs) and the
//! fast paths build on it.
#![deny(clippy::arithmetic_side_effects)]

use numpy::{PyArrayDescrMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyModule, PyString, PyTuple};
use pyo3::{intern, PyTypeInfo};

use shmcoll_kernels::{Dtype, Op};

use crate::buffer::exact_ndarray;

static IN_PLACE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
/// mpi4py's predefined operators (registered by `shmcoll.Comm` when it wraps MPI).
static MPI_OPS: PyOnceLock<Vec<(Py<PyAny>, Op)>> = PyOnceLock::new();

fn in_place(py: Python<'_>) -> Option<&Bound<'_, PyAny>> {
    IN_PLACE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                PyModule::import(py, "shmcoll.buffers")?
                    .getattr("IN_PLACE")?
                    .unbind(),
            )
        })
        .ok()
        .map(|o| o.bind(py))
}

/// mpi4py's IN_PLACE (which exports an empty buffer, so it must be recognised first).
static MPI_IN_PLACE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
/// mpi4py's BOTTOM, which exports an empty buffer too but means absolute addresses: the
/// Python implementation hands calls with it to MPI.
static MPI_BOTTOM: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Register mpi4py's IN_PLACE, operators (a list of (operator object, name)) and BOTTOM.
#[pyfunction]
#[pyo3(signature = (in_place, ops, bottom=None))]
pub fn register_mpi(
    py: Python<'_>,
    in_place: Py<PyAny>,
    ops: Vec<(Py<PyAny>, String)>,
    bottom: Option<Py<PyAny>>,
) -> PyResult<()> {
    let _ = MPI_IN_PLACE.set(py, in_place);
    if let Some(b) = bottom {
        let _ = MPI_BOTTOM.set(py, b);
    }
    let v: Vec<(Py<PyAny>, Op)> = ops
        .into_iter()
        .filter_map(|(o, n)| Op::parse(&n).map(|op| (o, op)))
        .collect();
    let _ = MPI_OPS.set(py, v);
    Ok(())
}

/// `shmcoll.IN_PLACE` or mpi4py's `MPI.IN_PLACE`.
pub fn is_in_place(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    MPI_IN_PLACE.get(py).is_some_and(|ip| ip.bind(py).is(obj))
        || in_place(py).is_some_and(|ip| ip.is(obj))
}

/// Whether a buffer argument that may be IN_PLACE means it: IN_PLACE, or None (as mpi4py
/// reads None where MPI takes IN_PLACE).
pub(crate) fn means_in_place(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_none() || is_in_place(obj)
}

/// Whether `obj` exports a buffer (then it is a plain buffer, not a specification), other
/// than mpi4py's BOTTOM and IN_PLACE (which export empty buffers).
pub(crate) fn is_buffer(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `obj` is a live object; the call only inspects its type.
    let exports = unsafe { pyo3::ffi::PyObject_CheckBuffer(obj.as_ptr()) != 0 };
    let py = obj.py();
    exports
        && !MPI_BOTTOM.get(py).is_some_and(|b| b.bind(py).is(obj))
        && !MPI_IN_PLACE.get(py).is_some_and(|b| b.bind(py).is(obj))
}

/// The operator, if predefined (None: the default SUM).
pub(crate) fn operator(py: Python<'_>, op: Option<&Bound<'_, PyAny>>) -> Option<Op> {
    let Some(op) = op else { return Some(Op::Sum) };
    if PyString::is_type_of(op) {
        return op.extract::<&str>().ok().and_then(Op::parse);
    }
    MPI_OPS
        .get(py)?
        .iter()
        .find(|(o, _)| o.as_ptr() == op.as_ptr())
        .map(|(_, op)| *op)
}

/// NumPy dtype objects already mapped, each held by a strong reference so that its
/// address cannot be reused by another object while it is in the list. The builtin
/// dtypes are singletons, so a handful of entries serves every call; the list is capped
/// so that programs creating dtype objects on the fly cannot grow it without bound.
static DTYPES: std::sync::Mutex<Vec<(Py<PyAny>, Dtype)>> = std::sync::Mutex::new(Vec::new());
const DTYPES_CAP: usize = 32;

/// The element type of a NumPy array (None for anything else). The dtype object is looked
/// up by identity first: formatting its `str` ("<f8", "|u1", ...) costs more than the rest
/// of a small call's overhead together.
pub(crate) fn dtype(arr: &Bound<'_, PyAny>) -> Option<Dtype> {
    let py = arr.py();
    let dt = match exact_ndarray(arr) {
        Some(a) => a.dtype().into_any(),
        None => arr.getattr(intern!(py, "dtype")).ok()?,
    };
    let mut known = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = known.iter().find(|(o, _)| o.as_ptr() == dt.as_ptr()) {
        return Some(*d);
    }
    let d = dtype_from_str(&dt)?;
    if known.len() < DTYPES_CAP {
        known.push((dt.unbind(), d));
    }
    Some(d)
}

/// The element type named by a dtype's `str`, for native or little-endian byte order.
pub(crate) fn dtype_from_str(dt: &Bound<'_, PyAny>) -> Option<Dtype> {
    let s = dt.getattr(intern!(dt.py(), "str")).ok()?;
    let s: &str = s.extract().ok()?;
    let mut chars = s.chars();
    let order = chars.next()?;
    let kind = chars.next()?;
    let size: usize = chars.as_str().parse().ok()?;
    if order == '>' {
        return None;
    }
    Some(match (kind, size) {
        ('i', 1) => Dtype::I8,
        ('i', 2) => Dtype::I16,
        ('i', 4) => Dtype::I32,
        ('i', 8) => Dtype::I64,
        ('u', 1) => Dtype::U8,
        ('u', 2) => Dtype::U16,
        ('u', 4) => Dtype::U32,
        ('u', 8) => Dtype::U64,
        ('f', 4) => Dtype::F32,
        ('f', 8) => Dtype::F64,
        ('c', 8) => Dtype::C64,
        ('c', 16) => Dtype::C128,
        _ => return None,
    })
}

/// Bytes of a buffer's export (None if it does not export one).
pub(crate) fn nbytes(obj: &Bound<'_, PyAny>) -> Option<usize> {
    if let Some(a) = exact_ndarray(obj) {
        return a.len().checked_mul(a.dtype().itemsize());
    }
    obj.getattr(intern!(obj.py(), "nbytes"))
        .ok()?
        .extract()
        .ok()
}

/// The item size of a NumPy array or memoryview (None for other buffers: the Python
/// parser asks the buffer protocol).
pub(crate) fn item_size(buf: &Bound<'_, PyAny>) -> Option<usize> {
    if !is_buffer(buf) {
        return None;
    }
    buf.getattr(intern!(buf.py(), "itemsize"))
        .ok()?
        .extract::<usize>()
        .ok()
        .filter(|&n| n > 0)
}

/// The items of a list or tuple. Indexing them directly: collecting a generic iterator
/// asks `operator.length_hint` under the stable ABI, an import on every call.
pub(crate) fn list_items<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = obj.cast::<PyList>() {
        Some(l.iter().collect())
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        Some(t.iter().collect())
    } else {
        None
    }
}

pub(crate) fn is_list_or_tuple(obj: &Bound<'_, PyAny>) -> bool {
    PyList::is_type_of(obj) || PyTuple::is_type_of(obj)
}

/// A resolved vector specification: the buffer, counts and displacements in bytes.
pub type Vector<'py> = (Bound<'py, PyAny>, Vec<usize>, Vec<usize>);

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
