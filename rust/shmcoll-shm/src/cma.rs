//! Cross Memory Attach: reading and writing a peer's private memory with
//! `process_vm_readv` and `process_vm_writev`.
//!
//! It moves data in one copy between ordinary (non-shared) buffers, at the price of a
//! system call and of page pinning in the kernel. Whether it is permitted (ptrace access
//! mode, Yama, seccomp in containers) is only known by trying, so the handshake probes it
//! after each rank allowed its peers to trace it (crate::ptrace).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest piece handed to one system call; the kernel caps a call at MAX_RW_COUNT anyway.
const MAX_PIECE: usize = 1 << 30;

/// Which way a CMA transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// process_vm_readv: remote -> local.
    Read,
    /// process_vm_writev: local -> remote.
    Write,
}

/// Copy `len` bytes from address `remote` in process `pid` to `local`.
///
/// # Safety
/// `local` must be valid for `len` bytes of writes.
pub unsafe fn read_from(pid: u32, remote: usize, local: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: forwarded.
    unsafe { transfer(Direction::Read, pid, remote, local, len) }
}

/// Copy `len` bytes from `local` to address `remote` in process `pid`.
///
/// # Safety
/// `local` must be valid for `len` bytes of reads.
pub unsafe fn write_to(pid: u32, remote: usize, local: *const u8, len: usize) -> io::Result<()> {
    // SAFETY: forwarded; a write only reads from `local`.
    unsafe { transfer(Direction::Write, pid, remote, local as *mut u8, len) }
}

/// # Safety
/// `local` must be valid for `len` bytes of writes (Read) or reads (Write).
unsafe fn transfer(
    dir: Direction,
    pid: u32,
    remote: usize,
    local: *mut u8,
    len: usize,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let piece = (len - done).min(MAX_PIECE);
        let liov = libc::iovec {
            // SAFETY: `done < len`, so the pointer stays inside the caller's buffer.
            iov_base: unsafe { local.add(done) } as *mut libc::c_void,
            iov_len: piece,
        };
        let riov = libc::iovec {
            iov_base: (remote + done) as *mut libc::c_void,
            iov_len: piece,
        };
        // SAFETY: the local iovec describes memory the caller lent us; the remote one is
        // checked by the kernel against the peer's address space.
        let n = unsafe {
            match dir {
                Direction::Read => {
                    libc::process_vm_readv(pid as libc::pid_t, &liov, 1, &riov, 1, 0)
                }
                Direction::Write => {
                    libc::process_vm_writev(pid as libc::pid_t, &liov, 1, &riov, 1, 0)
                }
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "process_vm_readv/writev moved no bytes",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// The word peers read to probe CMA: its value is this process's pid mixed with a
/// constant. Rewritten at every handshake, because a forked child inherits its parent's
/// copy (and would otherwise publish the parent's value).
pub fn probe_word() -> &'static AtomicU64 {
    static WORD: AtomicU64 = AtomicU64::new(0);
    WORD.store(probe_value(std::process::id()), Ordering::Relaxed);
    &WORD
}

pub fn probe_value(pid: u32) -> u64 {
    0x5348_4d43_4f4c_4c00u64 ^ u64::from(pid)
}

/// Can this process read `pid`'s probe word at `addr`?
pub fn probe(pid: u32, addr: usize) -> bool {
    let mut v = 0u64;
    // SAFETY: `v` is a local u64, valid for 8 bytes of writes.
    let ok = unsafe { read_from(pid, addr, &mut v as *mut u64 as *mut u8, 8) }.is_ok();
    ok && v == probe_value(pid)
}
