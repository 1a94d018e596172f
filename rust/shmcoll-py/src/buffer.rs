//! Borrowing the memory of any buffer-protocol object (NumPy arrays, bytearray, memoryview,
//! CuPy host mirrors...) as (address, length), without copies.
//!
//! Only strides are requested, not the format: computing a format string is most of what
//! an exporter like NumPy spends on a buffer request, and shmcoll moves bytes.
//!
//! The view is held until the `Borrowed` is dropped, which keeps the exporter alive and
//! prevents it from resizing (NumPy refuses to resize an array with exports), so the
//! address stays valid while the GIL is released.

use std::ffi::c_char;
use std::mem::MaybeUninit;

use pyo3::ffi;
use pyo3::prelude::*;

use shmcoll_coll::{Error, RawBuf};

/// An acquired buffer view.
pub struct Borrowed {
    view: Box<ffi::Py_buffer>,
}

impl Borrowed {
    /// Acquire `obj`'s buffer; `what` names it in errors ("receive buffer").
    pub fn new(
        obj: &Bound<'_, PyAny>,
        writable: bool,
        what: &str,
    ) -> Result<Borrowed, BorrowError> {
        let mut view: Box<MaybeUninit<ffi::Py_buffer>> = Box::new(MaybeUninit::uninit());
        // SAFETY: `obj` is a live object (we hold the GIL through `Bound`); on success the
        // exporter initialised the view, which we release exactly once in Drop.
        let rc =
            unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_STRIDES) };
        if rc != 0 {
            let err = PyErr::fetch(obj.py());
            return Err(BorrowError::Python(err));
        }
        // SAFETY: PyObject_GetBuffer succeeded, so the view is initialised.
        let view: Box<ffi::Py_buffer> =
            unsafe { Box::from_raw(Box::into_raw(view) as *mut ffi::Py_buffer) };
        let b = Borrowed { view };
        // SAFETY: the view is initialised and owned by `b`.
        if unsafe { ffi::PyBuffer_IsContiguous(&*b.view, b'A' as c_char) } == 0 {
            return Err(BorrowError::Shm(Error::Buffer(format!(
                "the {what} is not contiguous; pass a contiguous array (numpy.ascontiguousarray)"
            ))));
        }
        if writable && b.view.readonly != 0 {
            return Err(BorrowError::Shm(Error::Buffer(format!(
                "the {what} is read-only"
            ))));
        }
        Ok(b)
    }

    /// Bytes per element as the exporter reports it (1 for plain bytes).
    pub fn itemsize(&self) -> usize {
        self.view.itemsize as usize
    }

    pub fn raw(&self) -> RawBuf {
        RawBuf {
            addr: self.view.buf as usize,
            len: self.view.len as usize,
        }
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        // Releasing calls back into the exporter, so it needs the GIL.
        Python::attach(|_py| {
            // SAFETY: the view was acquired by PyObject_GetBuffer and is released once.
            unsafe { ffi::PyBuffer_Release(&mut *self.view) }
        });
    }
}

/// Why a buffer could not be borrowed: the exporter raised, or it is unusable.
pub enum BorrowError {
    Python(PyErr),
    Shm(Error),
}

/// Borrow `obj`'s buffer for the duration of the call (kept in `held`).
pub fn hold(
    held: &mut Vec<Borrowed>,
    pyerr: &mut Option<PyErr>,
    obj: &Bound<'_, PyAny>,
    writable: bool,
    what: &str,
) -> Result<RawBuf, Error> {
    match Borrowed::new(obj, writable, what) {
        Ok(b) => {
            let raw = b.raw();
            held.push(b);
            Ok(raw)
        }
        Err(BorrowError::Shm(e)) => Err(e),
        Err(BorrowError::Python(pe)) => {
            let e = Error::Buffer(format!(
                "the {what} does not support the buffer protocol ({pe})"
            ));
            *pyerr = Some(pe);
            Err(e)
        }
    }
}
