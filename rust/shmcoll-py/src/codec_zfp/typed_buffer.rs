//! A C-contiguous buffer view that also reports its element format, so that the zfp
//! bindings can tell float32 from float64 (buffer.rs's `Borrowed` skips the format on
//! purpose: the collectives move bytes).

use std::ffi::{c_char, CStr};
use std::mem::MaybeUninit;

use pyo3::ffi;
use pyo3::prelude::*;

use shmcoll_codec::zfp::FloatKind;

/// An acquired view, released on drop.
pub struct TypedBuf {
    view: Box<ffi::Py_buffer>,
}

impl TypedBuf {
    /// Acquire `obj` as a C-contiguous buffer with its format; Err carries the reason
    /// (the exporter's own message when it refused).
    pub fn new(obj: &Bound<'_, PyAny>, writable: bool) -> Result<TypedBuf, String> {
        let mut flags = ffi::PyBUF_C_CONTIGUOUS | ffi::PyBUF_FORMAT;
        if writable {
            flags |= ffi::PyBUF_WRITABLE;
        }
        let mut view: Box<MaybeUninit<ffi::Py_buffer>> = Box::new(MaybeUninit::uninit());
        // SAFETY: `obj` is alive (GIL held through `Bound`); on success the exporter
        // initialised the view, which Drop releases exactly once.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), flags) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()).to_string());
        }
        // SAFETY: PyObject_GetBuffer succeeded, so the view is initialised.
        let view = unsafe { Box::from_raw(Box::into_raw(view) as *mut ffi::Py_buffer) };
        Ok(TypedBuf { view })
    }

    /// float32 or float64 in native byte order, from the format string and item size.
    pub fn float_kind(&self) -> Option<FloatKind> {
        let fmt: &[u8] = if self.view.format.is_null() {
            b"B"
        } else {
            // SAFETY: a non-null format of an acquired view is a NUL-terminated string
            // owned by the exporter for the lifetime of the view.
            unsafe { CStr::from_ptr(self.view.format as *const c_char) }.to_bytes()
        };
        let native: &[u8] = if cfg!(target_endian = "little") {
            b"@=<"
        } else {
            b"@=>!"
        };
        let code = match fmt {
            [p, c] if native.contains(p) => *c,
            [c] => *c,
            _ => return None,
        };
        match (code, self.view.itemsize) {
            (b'f', 4) => Some(FloatKind::F32),
            (b'd', 8) => Some(FloatKind::F64),
            _ => None,
        }
    }

    /// Human-readable format, for error messages.
    pub fn format(&self) -> String {
        if self.view.format.is_null() {
            return "B".into();
        }
        // SAFETY: as in float_kind.
        unsafe { CStr::from_ptr(self.view.format as *const c_char) }
            .to_string_lossy()
            .into_owned()
    }

    pub fn addr(&self) -> usize {
        self.view.buf as usize
    }

    pub fn len(&self) -> usize {
        self.view.len as usize
    }
}

impl Drop for TypedBuf {
    fn drop(&mut self) {
        // Releasing calls back into the exporter, so it needs the GIL.
        Python::attach(|_py| {
            // SAFETY: acquired by PyObject_GetBuffer, released once.
            unsafe { ffi::PyBuffer_Release(&mut *self.view) }
        });
    }
}
