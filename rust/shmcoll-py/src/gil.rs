//! Releasing the GIL only when a collective actually blocks.
//!
//! `py.detach` costs a GIL hand-off on every call, a large share of a sub-microsecond
//! Alltoall. Small calls therefore run with the GIL held, and the wait loop calls a hook
//! (shmcoll_shm::set_block_hook) the first time a wait outlasts a few microseconds; the
//! hook releases the GIL, and the guard takes it back when the call returns (or unwinds).
//! Calls that copy a lot release it up front with `py.detach`.

use std::cell::Cell;
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;

thread_local! {
    static SAVED: Cell<*mut ffi::PyThreadState> = const { Cell::new(ptr::null_mut()) };
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
