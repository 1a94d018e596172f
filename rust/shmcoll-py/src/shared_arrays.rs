//! NumPy's data allocator (NEP 49) backed by the shared-array arena
//! (shmcoll_shm::shared_arena), so that the arrays people allocate with `np.empty`,
//! `np.zeros` or arithmetic are ones that the peers of every communicator reach directly,
//! and collectives on them copy once instead of through CMA.
//!
//! Installed for the whole process, every thread and every context: NumPy keeps the current
//! handler in a context variable whose default is its own handler capsule, so this module
//! points that default capsule at the handler here (PyCapsule_SetPointer) instead of setting
//! the variable in one context. The handler's requests of `MIN_BYTES..=MAX_BYTES` bytes come
//! from the arena; everything else, and any request the arena cannot serve, goes to NumPy's
//! original handler (its small-block cache, its huge-page advice for large arrays). Since
//! arrays allocated before keep that same capsule, they are freed here too: through the
//! original handler, which allocated them. The handler is never taken out again (an array
//! from the arena must find it at free); opting out sets the bounds so that it serves
//! nothing.
//!
//! The upper bound is there because NumPy puts arrays of 4 MiB or more on transparent huge
//! pages, which a memfd gets only where the kernel allows them for shared memory
//! (shmcoll_shm::huge_pages; most systems say `never`): element-wise work over arrays larger
//! than the caches runs slower on 4 KiB pages (docs/results-collectives.md,
//! "Ordinary NumPy arrays by default"). Where the arena's large blocks get huge pages, that
//! cost is gone and the bound rises to `DEFAULT_MAX_BYTES_HUGE`.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use shmcoll_coll::config::ranges;
use shmcoll_coll::env_value::env_bytes;
use shmcoll_shm::shared_arena::{self, SharedArena, DEFAULT_ARENA_BYTES};

use crate::errors::IntoPyResult;

/// Default bounds: from 8 KiB, two whole pages (below, a collective's fixed costs outweigh
/// its copies, and rounding to pages would waste more of a small array) to 4 MiB included, NumPy's own threshold
/// for huge pages (an array of exactly 4 MiB, which power-of-two codes make often, loses
/// under a tenth on element-wise work without them and halves a collective's time).
pub const DEFAULT_MIN_BYTES: usize = 8 << 10;
pub const DEFAULT_MAX_BYTES: usize = 4 << 20;
/// The default upper bound where the arena's large blocks get huge pages. Not every size:
/// fork copies the arena's live arrays (shmcoll_shm::shared_arena's fork model), where it
/// shares anonymous memory copy-on-write, so arrays larger than collectives commonly move
/// (a dataset loaded whole, a memory-mapped file's copy) stay NumPy's.
pub const DEFAULT_MAX_BYTES_HUGE: usize = 64 << 20;

/// The default upper bound in this process: `DEFAULT_MAX_BYTES_HUGE` once the arena exists
/// and gives large blocks huge pages, else `DEFAULT_MAX_BYTES`.
fn default_max_bytes() -> usize {
    if shared_arena::get().is_some_and(SharedArena::huge_pages) {
        DEFAULT_MAX_BYTES_HUGE
    } else {
        DEFAULT_MAX_BYTES
    }
}

/// Requests of `MIN_BYTES <= n <= MAX_BYTES` bytes come from the arena (none until set).
static MIN_BYTES: AtomicUsize = AtomicUsize::new(usize::MAX);
static MAX_BYTES: AtomicUsize = AtomicUsize::new(0);
/// NumPy's own handler, which serves what the arena does not (null before installation).
static ORIGINAL: AtomicPtr<Handler> = AtomicPtr::new(std::ptr::null_mut());
static INSTALLED: AtomicBool = AtomicBool::new(false);

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
// pointer is null (the functions use the process-wide arena and ORIGINAL).
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

/// NumPy's original allocator.
fn original() -> &'static Allocator {
    // SAFETY: ORIGINAL is set, before the handler can be reached, to NumPy's default
    // handler, a static of NumPy's that lives as long as the process.
    unsafe { &(*ORIGINAL.load(Ordering::Acquire)).allocator }
}

fn arena_for(size: usize) -> Option<&'static SharedArena> {
    let wanted =
        size >= MIN_BYTES.load(Ordering::Relaxed) && size <= MAX_BYTES.load(Ordering::Relaxed);
    wanted.then(shared_arena::get).flatten()
}

fn owning_arena(ptr: *mut c_void) -> Option<&'static SharedArena> {
    shared_arena::get().filter(|a| !ptr.is_null() && a.contains(ptr as usize))
}

/// Whether `ptr` is in the parent's arena (a forked child whose copy of it failed).
fn inherited(ptr: *mut c_void) -> bool {
    shared_arena::inherited().is_some_and(|a| a.contains(ptr as usize))
}

unsafe extern "C" fn arena_malloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    if let Some(p) = arena_for(size).and_then(|a| a.alloc(size, false)) {
        return p as *mut c_void;
    }
    let o = original();
    // SAFETY: NumPy's own allocator, called as NumPy would.
    unsafe { (o.malloc)(o.ctx, size) }
}

unsafe extern "C" fn arena_calloc(_ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    if let Some(size) = nelem.checked_mul(elsize) {
        if let Some(p) = arena_for(size).and_then(|a| a.alloc(size, true)) {
            return p as *mut c_void;
        }
    }
    let o = original();
    // SAFETY: NumPy's own allocator (it checks the product itself).
    unsafe { (o.calloc)(o.ctx, nelem, elsize) }
}

unsafe extern "C" fn arena_realloc(ctx: *mut c_void, ptr: *mut c_void, size: usize) -> *mut c_void {
    if inherited(ptr) {
        // Its data is not this process's to move: NumPy raises MemoryError.
        return std::ptr::null_mut();
    }
    let Some(a) = owning_arena(ptr) else {
        // NumPy's block stays NumPy's, as its own handler would keep it.
        let o = original();
        // SAFETY: ptr came from NumPy's allocator (through this handler or before it).
        return unsafe { (o.realloc)(o.ctx, ptr, size) };
    };
    let old = a.block_len(ptr as usize).unwrap_or(0);
    if size <= old && arena_for(size).is_some() {
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

unsafe extern "C" fn arena_free(_ctx: *mut c_void, ptr: *mut c_void, size: usize) {
    if let Some(a) = owning_arena(ptr) {
        a.free(ptr as usize);
        return;
    }
    if inherited(ptr) {
        return; // the parent's block: this process does not own it
    }
    let o = original();
    // SAFETY: ptr came from NumPy's allocator, or is null.
    unsafe { (o.free)(o.ctx, ptr, size) }
}

const CAPSULE_NAME: &CStr = c"mem_handler";

/// NumPy's C-API function `index` of its table (`_ARRAY_API`).
fn numpy_api(py: Python<'_>, index: usize) -> PyResult<*const c_void> {
    let module = PyModule::import(py, "numpy._core.multiarray")
        .or_else(|_| PyModule::import(py, "numpy.core.multiarray"))?;
    let capsule = module.getattr("_ARRAY_API")?.cast_into::<PyCapsule>()?;
    let table = capsule.pointer_checked(None)?.as_ptr() as *const *const c_void;
    // SAFETY: the table is NumPy's array of C-API entries, longer than the index used here
    // (305 exists from NumPy 1.22, which pyproject requires); the module keeps the capsule,
    // and so the table, alive.
    Ok(unsafe { *table.add(index) })
}

/// `PyDataMem_GetHandler()`: the current context's handler capsule. Called in a fresh
/// context (`_install_shared_arrays`), it is NumPy's default one.
#[pyfunction]
pub fn _numpy_handler(py: Python<'_>) -> PyResult<Py<PyAny>> {
    type GetHandler = unsafe extern "C" fn() -> *mut ffi::PyObject;
    let f = numpy_api(py, 305)?;
    // SAFETY: entry 305 is PyDataMem_GetHandler; the GIL is held; it returns a new
    // reference or null with an exception set.
    let h = unsafe {
        let get: GetHandler = std::mem::transmute(f);
        get()
    };
    // SAFETY: a new reference, or null with the error set.
    unsafe { Bound::from_owned_ptr_or_err(py, h) }.map(Bound::unbind)
}

/// Point NumPy's default handler capsule at the handler here (once).
fn install(py: Python<'_>) -> PyResult<()> {
    if INSTALLED.load(Ordering::Acquire) {
        return Ok(());
    }
    let get = wrap_pyfunction!(_numpy_handler, py)?;
    let fresh = PyModule::import(py, "contextvars")?
        .getattr("Context")?
        .call0()?;
    let default = fresh.call_method1("run", (get,))?;
    // SAFETY: `default` is a live object; PyCapsule_GetPointer checks that it is a capsule
    // named "mem_handler" and returns null with an exception set otherwise.
    let p = unsafe { ffi::PyCapsule_GetPointer(default.as_ptr(), CAPSULE_NAME.as_ptr()) };
    if p.is_null() {
        return Err(PyErr::fetch(py));
    }
    let ours = &HANDLER.0 as *const Handler as *mut Handler;
    if p as *mut Handler != ours {
        ORIGINAL.store(p as *mut Handler, Ordering::Release);
        // SAFETY: the capsule is NumPy's default handler capsule (checked above), kept
        // alive by NumPy's context variable; HANDLER is a static with NumPy's layout. The
        // GIL is held, so no NumPy allocation reads the pointer while it changes.
        if unsafe { ffi::PyCapsule_SetPointer(default.as_ptr(), ours as *mut c_void) } != 0 {
            return Err(PyErr::fetch(py));
        }
    }
    INSTALLED.store(true, Ordering::Release);
    Ok(())
}

/// Create the arena (SHMCOLL_ARENA_BYTES, or `arena_bytes`) and install the handler for the
/// whole process, serving nothing until `_shared_arrays_bounds` says what. Returns the
/// arena's sizing when the process's limits made it smaller than asked (the caller warns),
/// else None. Raises when no arena can be created; the handler is then not installed.
#[pyfunction]
#[pyo3(signature = (arena_bytes=None))]
pub fn _install_shared_arrays(
    py: Python<'_>,
    arena_bytes: Option<usize>,
) -> PyResult<Option<String>> {
    let len = match arena_bytes {
        Some(n) => n,
        None => env_bytes("SHMCOLL_ARENA_BYTES", ranges::ARENA_BYTES)
            .py_err(py)?
            .unwrap_or(DEFAULT_ARENA_BYTES),
    };
    let a = shared_arena::ensure(len)
        .map_err(shmcoll_coll::Error::from)
        .py_err(py)?;
    install(py)?;
    let s = a.sizing();
    Ok(s.reduced_by.is_some().then(|| s.to_string()))
}

/// The bounds from the environment (SHMCOLL_SHARED_ARRAYS_MIN/MAX), the defaults (which
/// depend on the arena: call after `_install_shared_arrays`) otherwise.
#[pyfunction]
pub fn _shared_arrays_env_bounds(py: Python<'_>) -> PyResult<(usize, usize)> {
    let min = env_bytes("SHMCOLL_SHARED_ARRAYS_MIN", ranges::SHARED_ARRAYS_MIN).py_err(py)?;
    let max = env_bytes("SHMCOLL_SHARED_ARRAYS_MAX", ranges::SHARED_ARRAYS_MAX).py_err(py)?;
    let (dmin, dmax) = _shared_arrays_default_bounds();
    Ok((min.unwrap_or(dmin), max.unwrap_or(dmax)))
}

/// The default bounds in this process (the upper one depends on whether the arena's large
/// blocks get huge pages: call after `_install_shared_arrays`).
#[pyfunction]
pub fn _shared_arrays_default_bounds() -> (usize, usize) {
    (DEFAULT_MIN_BYTES, default_max_bytes())
}

/// Serve arrays of `min_bytes <= n <= max_bytes` from the arena (process-wide); returns the
/// previous bounds (`min_bytes > max_bytes`: nothing).
#[pyfunction]
pub fn _shared_arrays_bounds(min_bytes: usize, max_bytes: usize) -> (usize, usize) {
    let old_min = MIN_BYTES.swap(min_bytes, Ordering::Relaxed);
    let old_max = MAX_BYTES.swap(max_bytes, Ordering::Relaxed);
    (old_min, old_max)
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
    let a = shared_arena::get();
    let s = a.map(SharedArena::stats).unwrap_or_default();
    d.set_item("exists", a.is_some())?;
    d.set_item("installed", INSTALLED.load(Ordering::Acquire))?;
    d.set_item("capacity", s.capacity)?;
    d.set_item("in_use", s.in_use)?;
    d.set_item("cached", s.cached)?;
    d.set_item("resident", a.and_then(SharedArena::resident))?;
    d.set_item("served", s.served)?;
    d.set_item("refused", s.refused)?;
    let (min, max) = (
        MIN_BYTES.load(Ordering::Relaxed),
        MAX_BYTES.load(Ordering::Relaxed),
    );
    let serving = INSTALLED.load(Ordering::Acquire) && min <= max;
    d.set_item("huge_pages", a.is_some_and(SharedArena::huge_pages))?;
    d.set_item(
        "huge_pages_setting",
        &shmcoll_shm::huge_pages::shared_memory().setting,
    )?;
    d.set_item("min_bytes", serving.then_some(min))?;
    d.set_item("max_bytes", serving.then_some(max))?;
    Ok(d)
}
