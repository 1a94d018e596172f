//! Borrowing the memory of any buffer-protocol object (NumPy arrays, bytearray, memoryview,
//! CuPy host mirrors...) as (address, length), without copies.
//!
//! Only strides are requested, not the format: computing a format string is most of what
//! an exporter like NumPy spends on a buffer request, and shmcoll moves bytes.
//!
//! The view is held until the `Borrowed` is dropped, which keeps the exporter alive (and
//! bytearray and memoryview from resizing), so the address stays valid while the GIL is
//! released.
//!
//! One call's buffers (`hold_for_call`) read an exact NumPy ndarray from the array itself
//! instead: NumPy's getbuffer builds and compares a buffer-info record on every request,
//! and with the view's allocation and release that was a quarter of a small collective's
//! binding cost. The caller's arguments keep such an array alive for the call; NumPy
//! resizes an array with exports as readily as one without (`resize(refcheck=False)`),
//! so an export protected nothing more.

use std::ffi::c_char;
use std::mem::MaybeUninit;

use numpy::npyffi::{self, NPY_ARRAY_WRITEABLE};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
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
            return Err(BorrowError::Shm(not_contiguous(what)));
        }
        if writable && b.view.readonly != 0 {
            return Err(BorrowError::Shm(read_only(what)));
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

fn not_contiguous(what: &str) -> Error {
    Error::Buffer(format!(
        "the {what} is not contiguous; pass a contiguous array (numpy.ascontiguousarray)"
    ))
}

fn read_only(what: &str) -> Error {
    Error::Buffer(format!("the {what} is read-only"))
}

/// `obj` as an ndarray if it is exactly one (not a subclass, which may export its memory
/// differently), so that its fields can be read directly.
pub(crate) fn exact_ndarray<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
) -> Option<&'a Bound<'py, PyUntypedArray>> {
    // SAFETY: `obj` is a live object; the check compares its type with NumPy's.
    let exact = unsafe { npyffi::PyArray_CheckExact(obj.py(), obj.as_ptr()) } != 0;
    // SAFETY: the check above found an ndarray.
    exact.then(|| unsafe { obj.cast_unchecked::<PyUntypedArray>() })
}

/// A buffer of one call: its memory and its item size (as the exporter reports it).
#[derive(Clone, Copy, Debug)]
pub struct CallBuf {
    pub raw: RawBuf,
    pub itemsize: usize,
}

/// An exact NumPy ndarray's memory as its buffer export would give it. None for any
/// other object.
pub fn ndarray(
    obj: &Bound<'_, PyAny>,
    writable: bool,
    what: &str,
) -> Option<Result<CallBuf, Error>> {
    let arr = exact_ndarray(obj)?;
    if !arr.is_contiguous() {
        return Some(Err(not_contiguous(what)));
    }
    // SAFETY: `arr` is a live ndarray and we hold the GIL, so its fields (reached through
    // NumPy's accessor) are valid to read.
    let (data, flags) = unsafe {
        let f = npyffi::_PyArray_GET_ITEM_DATA(arr.as_array_ptr());
        ((*f).data, (*f).flags)
    };
    if writable && flags & NPY_ARRAY_WRITEABLE == 0 {
        return Some(Err(read_only(what)));
    }
    let itemsize = arr.dtype().itemsize();
    Some(Ok(CallBuf {
        raw: RawBuf {
            addr: data as usize,
            len: arr.len() * itemsize,
        },
        itemsize,
    }))
}

/// Borrow `obj`'s buffer for one call: an exact ndarray directly (`ndarray`), anything
/// else through the buffer protocol (kept in `held`). The caller's arguments must keep
/// `obj` alive until the call returns.
pub fn hold_for_call(
    held: &mut Vec<Borrowed>,
    pyerr: &mut Option<PyErr>,
    obj: &Bound<'_, PyAny>,
    writable: bool,
    what: &str,
) -> Result<CallBuf, Error> {
    if let Some(r) = ndarray(obj, writable, what) {
        return r;
    }
    let raw = hold(held, pyerr, obj, writable, what)?;
    let itemsize = held.last().map_or(1, Borrowed::itemsize);
    Ok(CallBuf { raw, itemsize })
}

/// Why a buffer could not be borrowed: the exporter raised, or it is unusable.
pub enum BorrowError {
    Python(PyErr),
    Shm(Error),
}

/// [`Borrowed::new`] with its error as the Python exception the caller raises.
pub fn borrow(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    writable: bool,
    what: &str,
) -> PyResult<Borrowed> {
    Borrowed::new(obj, writable, what).map_err(|e| match e {
        BorrowError::Python(pe) => pe,
        BorrowError::Shm(e) => crate::errors::to_py(py, e),
    })
}

/// The destination and source of a local kernel call (`copy`, `reduce_local`): borrowed,
/// of equal length, and disjoint, or the very same bytes where `same_ok`.
pub fn borrow_pair(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    same_ok: bool,
) -> PyResult<(Borrowed, Borrowed)> {
    let d = borrow(py, dst, true, "destination")?;
    let s = borrow(py, src, false, "source")?;
    let (dr, sr) = (d.raw(), s.raw());
    if dr.len != sr.len {
        return Err(crate::errors::to_py(
            py,
            Error::Buffer(format!(
                "destination has {} bytes but source has {}",
                dr.len, sr.len
            )),
        ));
    }
    let same = same_ok && dr.addr == sr.addr;
    if !same && dr.len > 0 && dr.addr < sr.addr + sr.len && sr.addr < dr.addr + dr.len {
        return Err(crate::errors::to_py(
            py,
            Error::Buffer("source and destination overlap".into()),
        ));
    }
    Ok((d, s))
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
