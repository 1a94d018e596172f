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
        Error::Broken(_) | Error::Corrupt(_) => "CommBrokenError",
        Error::Internal(_) => "InternalError",
        Error::FallsBack(_) => "UnsupportedError",
        Error::Diverged(_) => "CallsDivergedError",
        Error::PeerFailed { .. } => "PeerFailedError",
        Error::Shm(s) => match s {
            ShmError::Timeout { .. } => "ShmcollTimeoutError",
            ShmError::PeerDied { .. } | ShmError::PeerAborted { .. } => "PeerFailedError",
            ShmError::HeapExhausted { .. } | ShmError::HeapUnbacked { .. } => "HeapExhaustedError",
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
    let msg = e.to_string();
    let cls = errors_module(py)
        .ok()
        .and_then(|m| m.getattr(class_name(&e)).ok());
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

/// `shmcoll.errors`, imported once.
fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS
        .get_or_try_init(py, || {
            PyModule::import(py, "shmcoll.errors").map(|m| m.unbind())
        })
        .map(|m| m.bind(py))
}

/// A rejected argument of this rank's call: `ArgumentTypeError` (also a TypeError) when
/// its type was wrong, else `ArgumentError` (a ValueError).
pub fn argument_error(py: Python<'_>, msg: &str, wrong_type: bool) -> PyErr {
    let name = if wrong_type {
        "ArgumentTypeError"
    } else {
        "ArgumentError"
    };
    match errors_module(py).and_then(|m| m.getattr(name)?.call1((msg,))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

/// An exception raised while this rank's arguments were read (a buffer's exporter, a
/// conversion), as the shmcoll error the rank raises (`errors.as_shmcoll_error`: the same
/// built-in family, the original as its cause).
pub fn as_shmcoll(py: Python<'_>, e: PyErr) -> PyErr {
    let converted =
        errors_module(py).and_then(|m| m.getattr("as_shmcoll_error")?.call1((e.value(py),)));
    match converted {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => e,
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
    match errors_module(py)
        .ok()
        .and_then(|m| m.getattr("CodecError").ok())
    {
        Some(cls) => match cls.call1((msg,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => err,
        },
        None => PyRuntimeError::new_err(msg),
    }
}
