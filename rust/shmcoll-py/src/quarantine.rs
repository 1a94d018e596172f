//! The buffers of a call that failed fatally (a deadline passed, a peer died or failed,
//! an interrupt) while its peers may still copy into or out of them. A peer that was only
//! slow (stopped, swapped out, descheduled) resumes and finishes its copies later; had
//! this rank returned its buffers to the heap, the arena or malloc, those late copies
//! would land in whatever uses the memory then. So such buffers are kept for the life of
//! the process: the call's references to their Python objects, and its buffer exports,
//! are leaked, never released. That costs the memory of failed calls only, which end the
//! job or at least the communicator (a fatal error breaks it).

use pyo3::prelude::*;

use shmcoll_coll::Error;

/// Whether peers may still touch this call's buffers after `e`: the fatal errors (the
/// others are found before any data moves, on every rank alike).
pub(crate) fn exposed(e: &Error) -> bool {
    e.is_fatal()
}

/// Keep `objs` (the call's buffer objects) and `held` (its exports) alive for good.
pub(crate) fn keep_forever<H>(objs: &[Option<&Bound<'_, PyAny>>], held: H) {
    for o in objs.iter().flatten() {
        std::mem::forget(Bound::clone(o).unbind());
    }
    std::mem::forget(held);
}
