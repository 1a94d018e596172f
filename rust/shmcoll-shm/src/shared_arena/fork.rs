//! fork() keeps its meaning for arrays in the shared-array arena.
//!
//! fork gives the child a copy-on-write image of anonymous memory, but a MAP_SHARED mapping
//! stays shared: parent and child would write into each other's arrays. So the child gets
//! a copy instead, made before the parent goes on:
//!
//! * prepare (parent, before fork): take the arena's lock, so that the block map is
//!   consistent in the child and no allocation changes it meanwhile; open a pipe.
//! * child: copy the data of every live block (the extents SEEK_DATA finds, so untouched
//!   pages stay holes) into a new memfd, map it over the arena at the same address
//!   (MAP_FIXED), write one byte into the pipe, release the lock. The child's arena is then
//!   its own: new arrays come from it and its communicators share it.
//! * parent (after fork, or after a failed fork): wait for that byte, or for end of file if
//!   the child died first or never existed, then release the lock. The parent's threads
//!   may have written arrays while the child copied; the forking thread has not, so what
//!   the child sees is what that thread saw at fork, as with anonymous memory.
//!
//! If the copy fails (no memory for a new memfd), the child maps the parent's memfd
//! privately (MAP_PRIVATE: copy on the child's writes; pages the child has not written show
//! the parent's later writes) and allocates no more from it. The copy costs time in fork
//! proportional to the live arrays' touched bytes. vfork/posix_spawn children, which run no
//! handlers and exec at once, are unaffected.

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, Once};

use rustix::fs::{ftruncate, memfd_create, seek, MemfdFlags, SeekFrom};
use rustix::io::Errno;
use rustix::mm::{mmap, MapFlags, ProtFlags};
use rustix::pipe::{pipe_with, PipeFlags};

use super::{SharedArena, State, CURRENT, INHERITED};

/// What prepare hands to the parent and child handlers, which run on the same thread.
struct Held {
    arena: &'static SharedArena,
    guard: MutexGuard<'static, State>,
    /// (read end, write end): the child's "copied" signal.
    pipe: Option<(OwnedFd, OwnedFd)>,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

static REGISTER: Once = Once::new();

/// Install the handlers (once per process, before the arena exists).
pub(super) fn register() {
    REGISTER.call_once(|| {
        // SAFETY: registering handlers that only take and release a lock, make system
        // calls and copy memory; they run in the forking thread (and in the single-threaded
        // child), where everything they touch is in a consistent state (the lock is held).
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

fn take() -> Option<Held> {
    HELD.try_with(|h| h.borrow_mut().take()).ok().flatten()
}

extern "C" fn prepare() {
    let Some(arena) = super::get() else { return };
    let guard = arena.lock();
    let pipe = pipe_with(PipeFlags::CLOEXEC).ok();
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some(Held { arena, guard, pipe }));
}

extern "C" fn parent() {
    let Some(held) = take() else { return };
    if let Some((read_end, write_end)) = held.pipe {
        drop(write_end);
        let mut byte = [0u8; 1];
        while let Err(Errno::INTR) = rustix::io::read(&read_end, &mut byte) {}
    }
    drop(held.guard);
}

extern "C" fn child() {
    let Some(held) = take() else { return };
    let Held {
        arena,
        mut guard,
        pipe,
    } = held;
    if privatize(arena, &mut guard).is_err() {
        keep_copy_on_write(arena, &guard);
        CURRENT.store(std::ptr::null_mut(), Ordering::Release);
        INHERITED.store(
            arena as *const SharedArena as *mut SharedArena,
            Ordering::Release,
        );
    }
    if let Some((read_end, write_end)) = pipe {
        drop(read_end);
        while let Err(Errno::INTR) = rustix::io::write(&write_end, &[1]) {}
    }
    drop(guard);
}

/// Copy the live blocks into a new memfd and map it over the arena.
fn privatize(arena: &SharedArena, state: &mut State) -> rustix::io::Result<()> {
    let (base, len) = (arena.base(), arena.len());
    let new = memfd_create("shmcoll-arrays", MemfdFlags::CLOEXEC)?;
    ftruncate(&new, len as u64)?;
    for (&off, &blen) in &state.blocks {
        copy_data(state.fd.as_fd(), new.as_fd(), base, off, blen)?;
    }
    // SAFETY: [base, base + len) is the arena's own mapping (the arena is leaked, so nothing
    // unmaps it); replacing it with a mapping of the same length keeps every pointer into it
    // valid, and the new file holds the same bytes at the same offsets.
    unsafe {
        mmap(
            base as *mut std::ffi::c_void,
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED | MapFlags::FIXED | MapFlags::NORESERVE,
            &new,
            0,
        )
    }?;
    state.fd = new; // closes the parent's memfd in this process
                    // The new mapping has none of the old one's advice.
    super::advise_huge_pages(&arena.map);
    Ok(())
}

/// Write the data extents of `[off, off + len)` of `from` (as mapped at `base`) into `to`.
fn copy_data(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    base: usize,
    off: usize,
    len: usize,
) -> rustix::io::Result<()> {
    let end = off as u64 + len as u64;
    let mut pos = off as u64;
    while pos < end {
        let data = match seek(from, SeekFrom::Data(pos)) {
            Ok(d) => d,
            Err(Errno::NXIO) => return Ok(()), // only holes from here on
            Err(e) => return Err(e),
        };
        if data >= end {
            return Ok(());
        }
        let hole = seek(from, SeekFrom::Hole(data))?.min(end);
        let mut at = data;
        while at < hole {
            let n = (hole - at) as usize;
            // SAFETY: [base + at, base + at + n) lies inside the arena's mapping (a live
            // block), which stays mapped; pwrite only reads it, through a raw pointer
            // (other processes may write there meanwhile, so no Rust reference is made).
            let r = unsafe {
                libc::pwrite(
                    to.as_raw_fd(),
                    (base + at as usize) as *const libc::c_void,
                    n,
                    at as libc::off_t,
                )
            };
            if r > 0 {
                at += r as u64;
                continue;
            }
            let e = Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO);
            if r == 0 || e != Errno::INTR {
                return Err(if r == 0 { Errno::IO } else { e });
            }
        }
        pos = hole;
    }
    Ok(())
}

/// The fallback: the parent's file, mapped privately.
fn keep_copy_on_write(arena: &SharedArena, state: &State) {
    // SAFETY: as in `privatize`: the same range, the same file, now copy on write.
    let _ = unsafe {
        mmap(
            arena.base() as *mut std::ffi::c_void,
            arena.len(),
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::FIXED | MapFlags::NORESERVE,
            &state.fd,
            0,
        )
    };
}
