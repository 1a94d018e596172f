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
        let ptr = this.block.as_ptr();
        // SAFETY: `view` is the caller's struct to fill; the memory (len bytes inside the
        // block) stays mapped while the exporter `slf` lives, and the view holds a
        // reference to it. Writable: the heap is this rank's to write.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr as *mut std::ffi::c_void,
                this.len as ffi::Py_ssize_t,
                0,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
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
        let ptr = this.seg.ptr(this.off, this.len.max(1));
        // SAFETY: `view` is the caller's struct to fill; `ptr..ptr+len` lies inside the
        // mapping (Segment::ptr checks), which `slf` keeps alive (the view references it).
        // Read-only: the memory belongs to another rank.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr as *mut std::ffi::c_void,
                this.len as ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
