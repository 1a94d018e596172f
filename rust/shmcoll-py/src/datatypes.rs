//! Datatypes of buffer specifications (mpi4py datatypes, NumPy dtypes, scalar types, type
//! codes) as the native parsers need them: bytes per element and, for reductions, the
//! element type. The Python parser's answer is asked once per datatype object and cached.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyType};
use pyo3::{intern, PyTypeInfo};

use shmcoll_kernels::Dtype;

/// What a datatype means to a specification.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DatatypeInfo {
    /// Bytes per element.
    pub size: usize,
    /// The element type for reductions (None: not one the kernels combine, or unknown).
    pub elem: Option<Dtype>,
}

/// Datatypes seen so far, held by strong references so that an address stays theirs. Only
/// immutable kinds are cached (predefined mpi4py datatypes, which are never freed; NumPy
/// dtypes; types; strings), so an entry stays right; the list is capped.
static DATATYPES: std::sync::Mutex<Vec<(Py<PyAny>, DatatypeInfo)>> =
    std::sync::Mutex::new(Vec::new());
const DATATYPES_CAP: usize = 64;

/// `shmcoll.buffers.datatype_info`: the Python parser's size (which validates and rejects
/// gaps) and NumPy dtype of a datatype.
static DATATYPE_INFO: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `numpy.ndarray` and `numpy.dtype`.
static NUMPY_TYPES: PyOnceLock<(Py<PyType>, Py<PyType>)> = PyOnceLock::new();

fn numpy_types(py: Python<'_>) -> Option<&(Py<PyType>, Py<PyType>)> {
    NUMPY_TYPES
        .get_or_try_init(py, || {
            let np = PyModule::import(py, "numpy")?;
            let ty = |name: &str| -> PyResult<Py<PyType>> {
                Ok(np.getattr(name)?.cast_into::<PyType>()?.unbind())
            };
            Ok::<_, PyErr>((ty("ndarray")?, ty("dtype")?))
        })
        .ok()
}

pub(crate) fn is_ndarray(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    numpy_types(py).is_some_and(|(ndarray, _)| obj.is_instance(ndarray.bind(py)).unwrap_or(false))
}

/// Whether `dt` is a datatype whose meaning cannot change while we hold it, so that it may
/// be cached by identity.
pub(crate) fn immutable_datatype(dt: &Bound<'_, PyAny>) -> bool {
    let py = dt.py();
    if PyString::is_type_of(dt) || PyType::is_type_of(dt) {
        return true;
    }
    if numpy_types(py).is_some_and(|(_, dtype)| dt.is_instance(dtype.bind(py)).unwrap_or(false)) {
        return true;
    }
    // mpi4py's predefined datatypes; derived ones can be freed and their handle reused.
    dt.getattr(intern!(py, "is_predefined"))
        .and_then(|v| v.extract::<bool>())
        .unwrap_or(false)
}

/// The meaning of `dt`, or None for the Python parser to decide (derived datatypes,
/// objects that are no datatype, errors).
pub(crate) fn datatype_info(dt: &Bound<'_, PyAny>) -> Option<DatatypeInfo> {
    let py = dt.py();
    {
        let known = DATATYPES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, i)) = known.iter().find(|(o, _)| o.as_ptr() == dt.as_ptr()) {
            return Some(*i);
        }
    }
    if !immutable_datatype(dt) {
        return None;
    }
    let f = DATATYPE_INFO
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                PyModule::import(py, "shmcoll.buffers")?
                    .getattr("datatype_info")?
                    .unbind(),
            )
        })
        .ok()?;
    let (size, np_dtype): (usize, Bound<'_, PyAny>) =
        f.bind(py).call1((dt,)).ok()?.extract().ok()?;
    let elem = if np_dtype.is_none() {
        None
    } else {
        crate::pyobj::dtype_from_str(&np_dtype)
    };
    let info = DatatypeInfo { size, elem };
    let mut known = DATATYPES.lock().unwrap_or_else(|e| e.into_inner());
    if known.len() < DATATYPES_CAP {
        known.push((dt.clone().unbind(), info));
    }
    Some(info)
}

/// Bytes per element of `dt` (None: the Python parser decides).
pub(crate) fn datatype_size(dt: &Bound<'_, PyAny>) -> Option<usize> {
    datatype_info(dt).map(|i| i.size)
}
