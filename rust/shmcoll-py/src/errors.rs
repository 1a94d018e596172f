//! The mapping from shmcoll's one error enum to the exception hierarchy of
//! `shmcoll.errors` (defined in Python so that each class can also derive from the
//! matching built-in: ValueError, BufferError, TimeoutError...).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

use shmcoll_coll::{Error, ShmError};

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn class_name(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument(_) => "ArgumentError",
        Error::Buffer(_) => "BadBufferError",
        Error::Mismatch(_) => "MismatchError",
        Error::Peer { .. } => "PeerRejectedError",
        Error::Unsupported(_) => "UnsupportedError",
        Error::CannotServe { .. } => "AlgorithmError",
        Error::Broken(_) => "CommBrokenError",
        Error::Diverged(_) => "CallsDivergedError",
        Error::PeerFailed { .. } => "PeerFailedError",
        Error::Shm(s) => match s {
            ShmError::Timeout { .. } => "ShmcollTimeoutError",
            ShmError::PeerDied { .. } | ShmError::PeerAborted { .. } => "PeerFailedError",
            ShmError::HeapExhausted { .. } => "HeapExhaustedError",
            // Only when no handler's exception was kept (see to_py).
            ShmError::Interrupted { .. } => "CommBrokenError",
            ShmError::Config(_) => "ArgumentError",
            ShmError::Os { .. } | ShmError::BadSegment { .. } => "SegmentError",
        },
    }
}

/// Convert, looking the class up in `shmcoll.errors` (imported once).
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    // A wait interrupted by a signal raises what the signal's handler raised
    // (KeyboardInterrupt for Ctrl-C), as Python code interrupted there would.
    if let Error::Shm(ShmError::Interrupted { .. }) = &e {
        if let Some(err) = crate::gil::take_pending_signal() {
            return err;
        }
    }
    let module = ERRORS.get_or_try_init(py, || {
        PyModule::import(py, "shmcoll.errors").map(|m| m.unbind())
    });
    let msg = e.to_string();
    let cls = module
        .ok()
        .and_then(|m| m.bind(py).getattr(class_name(&e)).ok());
    match cls {
        Some(cls) => match cls.call1((msg.clone(),)) {
            Ok(exc) => {
                if let Error::Peer { rank, .. } | Error::PeerFailed { rank, .. } = &e {
                    let _ = exc.setattr("rank", *rank);
                }
                PyErr::from_value(exc)
            }
            Err(err) => err,
        },
        None => PyRuntimeError::new_err(msg),
    }
}

/// `?`-friendly conversion for results of the engine.
pub trait IntoPyResult<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// Convert a codec error: `shmcoll.errors.CodecError` (a ValueError).
pub fn codec_to_py(py: Python<'_>, e: shmcoll_codec::CodecError) -> PyErr {
    let msg = e.to_string();
    let module = ERRORS.get_or_try_init(py, || {
        PyModule::import(py, "shmcoll.errors").map(|m| m.unbind())
    });
    match module
        .ok()
        .and_then(|m| m.bind(py).getattr("CodecError").ok())
    {
        Some(cls) => match cls.call1((msg,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => err,
        },
        None => PyRuntimeError::new_err(msg),
    }
}
