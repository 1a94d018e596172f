//! Control lines and counters: who writes what, and how a write is made visible.
//!
//! Every counter is a monotonically increasing u64 written by exactly one rank (its owner)
//! with release order, and read by peers with acquire order. A reader that sees value `v`
//! therefore sees everything the owner wrote before publishing `v`. Counters never go back,
//! so a stale read can only make a waiter wait a little longer, never proceed early.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use crate::layout::LINE;
use crate::segment::Segment;

/// The control lines of a rank.
///
/// Arrivals alternate between two lines by call parity: the line of call `s` carries the
/// small descriptor of the call (and tiny payloads) next to its sequence number, so that a
/// peer gets everything with one cache-line transfer; it is not rewritten before call
/// `s + 2`, which its owner cannot reach before every peer is done with call `s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// Arrival at even calls.
    ArriveEven = 0,
    /// Arrival at odd calls.
    ArriveOdd = 1,
    /// Sequence number of the last call this rank finished touching peers' memory for.
    Done = 2,
    /// Identity and state: pid, poison, CMA probe.
    Info = 3,
    /// Steps inside a call (multi-round algorithms): monotonic over the communicator's
    /// life, every rank takes the same steps in the same order.
    Step = 4,
    /// Bytes of streamed payloads this rank has published, over the communicator's life
    /// (a one-sided Bcast's root copies its payload in chunks after it arrived).
    Progress = 5,
    /// Sequence number of the last call this rank has left; written only by ranks that
    /// share their CPU with another rank (see shmcoll-coll's leave_order.rs).
    Left = 6,
}

impl Line {
    /// The arrive line of call `seq`.
    pub fn arrive(seq: u64) -> Line {
        if seq.is_multiple_of(2) {
            Line::ArriveEven
        } else {
            Line::ArriveOdd
        }
    }
}

/// Offsets inside the INFO line.
const INFO_PID: usize = 0;
const INFO_POISON: usize = 4;
const INFO_CMA_OK: usize = 8;
const INFO_CPU: usize = 12;
const INFO_PROBE_ADDR: usize = 16;
const INFO_ARENA_FD: usize = 24;
const INFO_ARENA_OK: usize = 28;
const INFO_ARENA_LEN: usize = 32;

impl Segment {
    /// The sequence counter at the start of `rank`'s `line`.
    pub fn seq(&self, rank: usize, line: Line) -> &AtomicU64 {
        self.atomic_u64(self.layout().ctrl_line(rank, line as usize))
    }

    /// The sequence number of the arrive line of call `seq` (monotonic per line).
    pub fn arrive_seq(&self, rank: usize, seq: u64) -> &AtomicU64 {
        self.seq(rank, Line::arrive(seq))
    }

    /// The whole 128-byte line (the sequence number is its first 8 bytes).
    pub fn line_ptr(&self, rank: usize, line: Line) -> *mut u8 {
        self.ptr(self.layout().ctrl_line(rank, line as usize), LINE)
    }

    pub fn pid_of(&self, rank: usize) -> &AtomicU32 {
        self.atomic_u32(self.layout().ctrl_line(rank, Line::Info as usize) + INFO_PID)
    }

    /// Nonzero once `rank` has given up on the communicator.
    pub fn poison_of(&self, rank: usize) -> &AtomicU32 {
        self.atomic_u32(self.layout().ctrl_line(rank, Line::Info as usize) + INFO_POISON)
    }

    /// 1 when `rank` could read its neighbour with CMA, 2 when it could not.
    pub fn cma_ok_of(&self, rank: usize) -> &AtomicU32 {
        self.atomic_u32(self.layout().ctrl_line(rank, Line::Info as usize) + INFO_CMA_OK)
    }

    /// 1 + the one CPU `rank` may run on, or 0 when it may run on several (or has not said
    /// yet): a waiter does not spin for a rank that needs the waiter's own CPU.
    pub fn cpu_of(&self, rank: usize) -> &AtomicU32 {
        self.atomic_u32(self.layout().ctrl_line(rank, Line::Info as usize) + INFO_CPU)
    }

    /// Address of a word in `rank`'s private memory that peers read to probe CMA.
    pub fn probe_addr_of(&self, rank: usize) -> &AtomicU64 {
        self.atomic_u64(self.layout().ctrl_line(rank, Line::Info as usize) + INFO_PROBE_ADDR)
    }

    /// 1 + the descriptor of `rank`'s shared-array arena (crate::shared_arena) in its
    /// process, or 0 when it has none (yet); written before the handshake's first round, or
    /// before `rank` first describes a buffer in an arena created later.
    pub fn arena_fd_of(&self, rank: usize) -> &AtomicU32 {
        self.atomic_u32(self.layout().ctrl_line(rank, Line::Info as usize) + INFO_ARENA_FD)
    }

    /// The length of `rank`'s shared-array arena (0: none).
    pub fn arena_len_of(&self, rank: usize) -> &AtomicU64 {
        self.atomic_u64(self.layout().ctrl_line(rank, Line::Info as usize) + INFO_ARENA_LEN)
    }

    /// 1 when `rank` can map its peers' arenas (pidfd_getfd works), 2 when it cannot;
    /// written before the handshake's first round.
    pub fn arena_ok_of(&self, rank: usize) -> &AtomicU32 {
        self.atomic_u32(self.layout().ctrl_line(rank, Line::Info as usize) + INFO_ARENA_OK)
    }

    /// Bytes `rank` has produced into its ring for `peer`, since the segment was created.
    pub fn produced(&self, rank: usize, peer: usize) -> &AtomicU64 {
        self.atomic_u64(self.layout().produced(rank, peer))
    }

    /// Bytes `rank` has consumed from `peer`'s ring for it.
    pub fn consumed(&self, rank: usize, peer: usize) -> &AtomicU64 {
        self.atomic_u64(self.layout().consumed(rank, peer))
    }

    /// Publish `value` on a counter this rank owns and wake peers sleeping on it.
    ///
    /// The fence orders the counter store before the load of the waiter count; the waiter
    /// increments that count before its last check of the counter (see `wait`). One of the
    /// two therefore sees the other: a sleeper is never left asleep on a published value.
    #[inline]
    pub fn publish(&self, counter: &AtomicU64, value: u64) {
        counter.store(value, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.waiters().load(Ordering::Relaxed) != 0 {
            futex_wake(counter);
        }
    }
}

const _: () = assert!(LINE >= INFO_ARENA_LEN + 8);

/// The 32-bit word the kernel's futex compares: the low half of a u64 counter.
pub(crate) fn futex_word(counter: &AtomicU64) -> &AtomicU32 {
    let p = counter as *const AtomicU64 as *const u8;
    let off = if cfg!(target_endian = "little") { 0 } else { 4 };
    // SAFETY: an AtomicU64 is 8-byte aligned, so either half is a valid, aligned u32 that
    // lives as long as the counter. The kernel reads it atomically; we never store through
    // this view, so mixed-size access is limited to the kernel's read.
    unsafe { &*(p.add(off) as *const AtomicU32) }
}

pub(crate) fn futex_wake(counter: &AtomicU64) {
    use rustix::thread::futex;
    // Shared (not PRIVATE): the waiters live in other processes.
    let _ = futex::wake(futex_word(counter), futex::Flags::empty(), i32::MAX as u32);
}
