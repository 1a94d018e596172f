//! NumPy's data allocator (NEP 49) backed by the shared-array arena
//! (shmcoll_shm::shared_arena): while `shmcoll.shared_arrays()` is active, arrays of at
//! least `min_bytes` get their data from the arena, which the peers of every communicator
//! created afterwards map, so collectives on them copy directly instead of through CMA.
//! Smaller arrays, and any request the arena cannot serve, come from the C allocator as
//! with NumPy's default handler. An array keeps the handler it was allocated with, so it
//! is freed here even after the handler was switched back.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use shmcoll_shm::shared_arena::{self, SharedArena, DEFAULT_ARENA_BYTES};

use crate::errors::IntoPyResult;

/// Requests of at least this many bytes come from the arena (set by `_set_shared_arrays`).
static MIN_BYTES: AtomicUsize = AtomicUsize::new(usize::MAX);

type Malloc = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type Calloc = unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void;
type Realloc = unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut c_void, *mut c_void, usize);

/// NumPy's PyDataMemAllocator.
#[repr(C)]
struct Allocator {
    ctx: *mut c_void,
    malloc: Malloc,
    calloc: Calloc,
    realloc: Realloc,
    free: Free,
}

/// NumPy's PyDataMem_Handler (version 1).
#[repr(C)]
struct Handler {
    name: [u8; 127],
    version: u8,
    allocator: Allocator,
}

/// The handler is immutable and its context pointer null: sharing it is sound.
struct SyncHandler(Handler);
// SAFETY: nothing in the handler is ever written after initialisation, and its context
// pointer is null (the functions use the process-wide arena).
unsafe impl Sync for SyncHandler {}

const fn handler_name() -> [u8; 127] {
    let mut n = [0u8; 127];
    let s = b"shmcoll_shared_arrays";
    let mut i = 0;
    while i < s.len() {
        n[i] = s[i];
        i += 1;
    }
    n
}

static HANDLER: SyncHandler = SyncHandler(Handler {
    name: handler_name(),
    version: 1,
    allocator: Allocator {
        ctx: std::ptr::null_mut(),
        malloc: arena_malloc,
        calloc: arena_calloc,
        realloc: arena_realloc,
        free: arena_free,
    },
});

fn arena_for(size: usize) -> Option<&'static SharedArena> {
    (size >= MIN_BYTES.load(Ordering::Relaxed))
        .then(shared_arena::get)
        .flatten()
}

fn owning_arena(ptr: *mut c_void) -> Option<&'static SharedArena> {
    shared_arena::get().filter(|a| !ptr.is_null() && a.contains(ptr as usize))
}

unsafe extern "C" fn arena_malloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    if let Some(p) = arena_for(size).and_then(|a| a.alloc(size, false)) {
        return p as *mut c_void;
    }
    // SAFETY: plain C allocation, as NumPy's default handler makes.
    unsafe { libc::malloc(size.max(1)) }
}

unsafe extern "C" fn arena_calloc(_ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    if let Some(size) = nelem.checked_mul(elsize) {
        if let Some(p) = arena_for(size).and_then(|a| a.alloc(size, true)) {
            return p as *mut c_void;
        }
    }
    // SAFETY: plain C allocation (calloc checks the product itself).
    unsafe { libc::calloc(nelem.max(1), elsize.max(1)) }
}

/// Whether `ptr` is in the parent's arena (a forked child inherited the array, not the pages).
fn inherited(ptr: *mut c_void) -> bool {
    shared_arena::inherited().is_some_and(|a| a.contains(ptr as usize))
}

unsafe extern "C" fn arena_realloc(ctx: *mut c_void, ptr: *mut c_void, size: usize) -> *mut c_void {
    if inherited(ptr) {
        // Its data is not mapped here: NumPy raises MemoryError.
        return std::ptr::null_mut();
    }
    let Some(a) = owning_arena(ptr) else {
        // A C block stays a C block, as NumPy's default handler would keep it.
        // SAFETY: ptr came from this handler's C path (malloc/calloc/realloc) or is null.
        return unsafe { libc::realloc(ptr, size.max(1)) };
    };
    let old = a.block_len(ptr as usize).unwrap_or(0);
    if size <= old && size >= MIN_BYTES.load(Ordering::Relaxed) {
        return ptr;
    }
    // SAFETY: a fresh allocation from this handler.
    let new = unsafe { arena_malloc(ctx, size) };
    if !new.is_null() {
        // SAFETY: both blocks hold at least min(old, size) bytes and are distinct.
        unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, new as *mut u8, old.min(size)) };
        a.free(ptr as usize);
    }
    new
}

unsafe extern "C" fn arena_free(_ctx: *mut c_void, ptr: *mut c_void, _size: usize) {
    if let Some(a) = owning_arena(ptr) {
        a.free(ptr as usize);
        return;
    }
    if inherited(ptr) {
        return; // the parent's block: nothing of it exists in this process
    }
    // SAFETY: ptr came from this handler's C path, or is null.
    unsafe { libc::free(ptr) }
}

const CAPSULE_NAME: &CStr = c"mem_handler";

/// NumPy's C-API function `index` of its table (`_ARRAY_API`).
fn numpy_api(py: Python<'_>, index: usize) -> PyResult<*const c_void> {
    let module = PyModule::import(py, "numpy._core.multiarray")
        .or_else(|_| PyModule::import(py, "numpy.core.multiarray"))?;
    let capsule = module.getattr("_ARRAY_API")?.cast_into::<PyCapsule>()?;
    let table = capsule.pointer_checked(None)?.as_ptr() as *const *const c_void;
    // SAFETY: the table is NumPy's array of C-API entries, longer than the indices used
    // here (304 and 305 exist from NumPy 1.22, which pyproject requires); the module keeps
    // the capsule, and so the table, alive.
    Ok(unsafe { *table.add(index) })
}

/// `PyDataMem_SetHandler(handler)`: the new reference to the previous handler.
fn set_handler(py: Python<'_>, handler: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    type SetHandler = unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject;
    let f = numpy_api(py, 304)?;
    // SAFETY: entry 304 is PyDataMem_SetHandler; the GIL is held; handler is a valid object
    // (NumPy checks that it is a "mem_handler" capsule) and it returns a new reference or
    // null with an exception set.
    let old = unsafe {
        let set: SetHandler = std::mem::transmute(f);
        set(handler.as_ptr())
    };
    // SAFETY: a new reference (or null with the error set, which from_owned_ptr_or_err takes).
    unsafe { Bound::from_owned_ptr_or_err(py, old) }.map(Bound::unbind)
}

fn our_capsule(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: HANDLER is a static that lives as long as the process, and has NumPy's
    // layout; the capsule has no destructor (nothing to free).
    let p = unsafe {
        ffi::PyCapsule_New(
            &HANDLER.0 as *const Handler as *mut c_void,
            CAPSULE_NAME.as_ptr(),
            None,
        )
    };
    // SAFETY: a new reference, or null with the error set.
    unsafe { Bound::from_owned_ptr_or_err(py, p) }
}

/// Create the arena if needed, make `min_bytes` the threshold, install the handler in the
/// current context; returns the previous handler and threshold, for `_restore_handler`.
#[pyfunction]
#[pyo3(signature = (min_bytes, arena_bytes=None))]
pub fn _set_shared_arrays(
    py: Python<'_>,
    min_bytes: usize,
    arena_bytes: Option<usize>,
) -> PyResult<(Py<PyAny>, usize)> {
    let len = match arena_bytes {
        Some(n) => n,
        None => shmcoll_coll::env_value::env_bytes(
            "SHMCOLL_ARENA_BYTES",
            shmcoll_coll::config::ranges::ARENA_BYTES,
        )
        .py_err(py)?
        .unwrap_or(DEFAULT_ARENA_BYTES),
    };
    shared_arena::ensure(len)
        .map_err(shmcoll_coll::Error::from)
        .py_err(py)?;
    let old = set_handler(py, &our_capsule(py)?)?;
    let old_min = MIN_BYTES.swap(min_bytes.max(1), Ordering::Relaxed);
    Ok((old, old_min))
}

/// Put back what `_set_shared_arrays` returned.
#[pyfunction]
pub fn _restore_handler(
    py: Python<'_>,
    handler: &Bound<'_, PyAny>,
    min_bytes: usize,
) -> PyResult<()> {
    MIN_BYTES.store(min_bytes, Ordering::Relaxed);
    set_handler(py, handler).map(drop)
}

/// Whether the data of `buf` (an address) lies in this process's shared-array arena.
#[pyfunction]
pub fn _in_shared_arena(addr: usize) -> bool {
    shared_arena::get().is_some_and(|a| a.contains(addr))
}

/// The arena's counters (all zero before it exists).
#[pyfunction]
pub fn shared_arrays_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let s = shared_arena::get()
        .map(SharedArena::stats)
        .unwrap_or_default();
    d.set_item("exists", shared_arena::get().is_some())?;
    d.set_item("capacity", s.capacity)?;
    d.set_item("in_use", s.in_use)?;
    d.set_item("cached", s.cached)?;
    d.set_item("served", s.served)?;
    d.set_item("refused", s.refused)?;
    let min = MIN_BYTES.load(Ordering::Relaxed);
    d.set_item("min_bytes", (min != usize::MAX).then_some(min))?;
    Ok(d)
}
