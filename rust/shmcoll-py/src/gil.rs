//! Releasing the GIL only when a collective actually blocks.
//!
//! `py.detach` costs a GIL hand-off on every call, a large share of a sub-microsecond
//! Alltoall. Small calls therefore run with the GIL held, and the wait loop calls a hook
//! (shmcoll_shm::set_block_hook) the first time a wait outlasts a few microseconds; the
//! hook releases the GIL, and the guard takes it back when the call returns (or unwinds).
//! Calls that copy a lot release it up front with `py.detach`.
//!
//! Signals: Python runs its signal handlers (Ctrl-C's KeyboardInterrupt) only when the main
//! thread executes bytecode, which a rank blocked in a collective does not. The wait loop
//! therefore asks `check_signals` (registered with shmcoll_shm::set_interrupt_check) every
//! INTERRUPT_CHECK_EVERY once it yields or sleeps; on the main thread it takes the GIL back and
//! runs the handlers. An exception they raise is kept here, the wait returns
//! ShmError::Interrupted (which breaks the communicator and tells the peers), and
//! errors::to_py raises the kept exception instead.

use std::cell::{Cell, RefCell};
use std::ffi::c_ulong;
use std::ptr;
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;

thread_local! {
    static SAVED: Cell<*mut ffi::PyThreadState> = const { Cell::new(ptr::null_mut()) };
    /// The exception a signal handler raised during a wait, until errors::to_py raises it.
    static PENDING: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Python's main thread (`threading.main_thread().ident`): the only one that runs handlers.
static MAIN_THREAD: OnceLock<c_ulong> = OnceLock::new();

/// Register `check_signals` as the wait loop's interrupt check (once, at import).
pub fn install_signal_check(py: Python<'_>) -> PyResult<()> {
    let ident: c_ulong = py
        .import("threading")?
        .call_method0("main_thread")?
        .getattr("ident")?
        .extract()?;
    let _ = MAIN_THREAD.set(ident);
    shmcoll_shm::set_interrupt_check(check_signals);
    Ok(())
}

/// Run Python's pending signal handlers; true if one raised (the exception is kept).
fn check_signals() -> bool {
    // SAFETY: PyThread_get_thread_ident only reads the calling thread's id; no GIL needed.
    let me = unsafe { ffi::PyThread_get_thread_ident() };
    if MAIN_THREAD.get() != Some(&me) {
        return false;
    }
    let saved = SAVED.with(|s| s.replace(ptr::null_mut()));
    let raised = if saved.is_null() {
        // The GIL is either held by this call (pyo3 knows) or released by `py.detach` (pyo3
        // knows too, and attaches again).
        Python::try_attach(|py| py.check_signals().err()).flatten()
    } else {
        // The block hook released the GIL behind pyo3's back: take it back the same way,
        // run the handlers, and release it again so the wait goes on without it.
        // SAFETY: `saved` came from PyEval_SaveThread on this thread (release_gil) and is
        // restored exactly once; SAVED holds the new state before the wait goes on.
        unsafe { ffi::PyEval_RestoreThread(saved) };
        // SAFETY: this thread holds the GIL from here to PyEval_SaveThread below.
        let py = unsafe { Python::assume_attached() };
        let raised = py.check_signals().err();
        // SAFETY: the GIL is held (restored above) and nothing Python is touched after.
        SAVED.with(|s| s.set(unsafe { ffi::PyEval_SaveThread() }));
        raised
    };
    match raised {
        Some(err) => {
            PENDING.with(|p| *p.borrow_mut() = Some(err));
            true
        }
        None => false,
    }
}

/// The exception kept by `check_signals`, if any (errors::to_py raises it).
pub fn take_pending_signal() -> Option<PyErr> {
    PENDING.with(|p| p.borrow_mut().take())
}

fn release_gil() {
    SAVED.with(|s| {
        if s.get().is_null() {
            // SAFETY: only installed as a hook by `run_releasing_on_block`, which runs on a
            // thread holding the GIL and restores the state before touching Python again.
            s.set(unsafe { ffi::PyEval_SaveThread() });
        }
    });
}

/// Restores the GIL (if the hook released it) and uninstalls the hook, also on unwind.
struct Restore {
    previous: Option<fn()>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        shmcoll_shm::set_block_hook(self.previous);
        SAVED.with(|s| {
            let ts = s.replace(ptr::null_mut());
            if !ts.is_null() {
                // SAFETY: `ts` came from PyEval_SaveThread on this thread, exactly once.
                unsafe { ffi::PyEval_RestoreThread(ts) };
            }
        });
    }
}

/// Run `f` (which must not touch Python objects) holding the GIL until it first blocks.
pub fn run_releasing_on_block<R>(_py: Python<'_>, f: impl FnOnce() -> R) -> R {
    let previous = shmcoll_shm::set_block_hook(Some(release_gil));
    let _restore = Restore { previous };
    f()
}

/// Bytes from which a call releases the GIL before it starts (copying takes long enough).
pub const DETACH_BYTES: usize = 64 << 10;
