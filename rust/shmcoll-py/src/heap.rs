//! `HeapBuffer`: a block of the shared heap exported through the buffer protocol, so that
//! `numpy.frombuffer` can wrap it; the array keeps the block (and the mapping) alive.

use std::ffi::c_int;

use pyo3::ffi;
use pyo3::prelude::*;

use shmcoll_coll::HeapBlock;

#[derive(Debug)]
#[pyclass(module = "shmcoll._core", frozen)]
pub struct HeapBuffer {
    block: HeapBlock,
    len: usize,
}

impl HeapBuffer {
    pub fn new(block: HeapBlock, len: usize) -> HeapBuffer {
        HeapBuffer { block, len }
    }
}

#[pymethods]
impl HeapBuffer {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Address of the first byte (for tests and diagnostics).
    #[getter]
    fn address(&self) -> usize {
        self.block.as_ptr() as usize
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        // SAFETY: the block's `len` bytes stay mapped while `slf` lives (forwarded contract).
        // Writable: the heap is this rank's to write.
        unsafe { export(&slf, this.block.as_ptr(), this.len, false, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// Read-only view of part of a peer's shared heap (for one-copy transposes that read peers'
/// arrays in place). Keeps the mapping alive; the data is only valid while the protocol of
/// the caller (a collective around the reads) keeps the peer from rewriting it.
#[derive(Debug)]
#[pyclass(module = "shmcoll._core", frozen)]
pub struct PeerView {
    seg: std::sync::Arc<shmcoll_shm::Segment>,
    off: usize,
    len: usize,
}

impl PeerView {
    pub fn new(seg: std::sync::Arc<shmcoll_shm::Segment>, off: usize, len: usize) -> PeerView {
        PeerView { seg, off, len }
    }
}

#[pymethods]
impl PeerView {
    fn __len__(&self) -> usize {
        self.len
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        // `len`, not at least 1: an empty view may sit at the end of the heap, and
        // Segment::ptr asserts (the bindings checked the range, not one byte past it).
        let ptr = this.seg.ptr(this.off, this.len);
        // SAFETY: `ptr..ptr+len` lies inside the mapping (Segment::ptr checks), which `slf`
        // keeps alive. Read-only: the memory belongs to another rank.
        unsafe { export(&slf, ptr, this.len, true, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// Fill `view` with `len` bytes at `ptr`, owned by the exporter `owner`.
///
/// # Safety
/// `view` must be the caller's buffer struct to fill, and `ptr..ptr+len` must stay valid
/// while `owner` lives (the view holds a reference to it).
unsafe fn export<T: pyo3::PyClass>(
    owner: &Bound<'_, T>,
    ptr: *mut u8,
    len: usize,
    readonly: bool,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    // SAFETY: forwarded from this function's contract.
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(
            view,
            owner.as_ptr(),
            ptr as *mut std::ffi::c_void,
            len as ffi::Py_ssize_t,
            c_int::from(readonly),
            flags,
        )
    };
    if rc != 0 {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}
