//! The only place where collectives copy through raw addresses.
//!
//! Callers hand over addresses they have validated: ranges inside a user buffer whose
//! bounds were checked against its length, or inside the mapped segment (checked by
//! `Segment::ptr`), and protected from concurrent writers by the call's protocol.

use shmcoll_kernels::{copy_raw, store_fence, Store};

/// Tracks whether streaming stores were issued, so that one fence covers them all.
#[derive(Debug, Default)]
pub struct Mover {
    streamed: bool,
}

impl Mover {
    /// Copy `len` bytes from `src` to `dst`.
    ///
    /// # Safety
    /// `src..src+len` must be readable and `dst..dst+len` writable for the duration, the
    /// ranges must not overlap, and no other process may write them during the call.
    #[inline]
    pub unsafe fn copy(&mut self, dst: usize, src: usize, len: usize, store: Store) {
        if len == 0 {
            return;
        }
        // SAFETY: forwarded from this function's contract.
        self.streamed |= unsafe { copy_raw(dst as *mut u8, src as *const u8, len, store) };
    }

    /// Make streamed data visible before it is published to another process.
    pub fn fence(&mut self) {
        if std::mem::take(&mut self.streamed) {
            store_fence();
        }
    }
}
