//! Call descriptors: what each rank contributes to a call, in its own slot of the segment.
//!
//! A rank writes its descriptor for call `seq` into slot `seq % 2` and only then publishes
//! `seq` on its ARRIVE line (release); peers read it after they saw `seq` (acquire). The
//! slot is not rewritten before call `seq + 2`, which the owner can only start after every
//! peer arrived at `seq + 1`, hence after every peer is done reading this one.

use shmcoll_shm::layout::DESC_FIXED;
use shmcoll_shm::Segment;

/// The `extra` word of a descriptor: root (16 bits), datatype and operator codes (8 each).
pub fn pack_extra(root: usize, dtype: u8, op: u8) -> u32 {
    (root as u32 & 0xffff) | (u32::from(dtype) << 16) | (u32::from(op) << 24)
}

/// (root, datatype code, operator code) of an `extra` word.
pub fn unpack_extra(e: u32) -> (usize, u8, u8) {
    ((e & 0xffff) as usize, (e >> 16) as u8, (e >> 24) as u8)
}

pub const F_VECTOR: u32 = 1;
pub const F_IN_PLACE: u32 = 2;
pub const F_SEND_HEAP: u32 = 4;
pub const F_RECV_HEAP: u32 = 8;
pub const F_INLINE: u32 = 16;
/// The payload travels in the arrive line itself (tiny calls).
pub const F_TINY: u32 = 32;
/// The full descriptor is in the descriptor slot (else the line head is all there is).
pub const F_FULL: u32 = 64;
/// A one-sided call (collectives/one_sided.rs): the root published its payload inline and
/// returned without waiting for the others; non-roots wait for the root alone.
pub const F_ROOT_ONLY: u32 = 128;
/// The inline payload is streamed: the root copies it in chunks after arriving, and
/// publishes the bytes copied on its Progress line (from the base in the line's payload).
pub const F_STREAMED: u32 = 256;

/// Marks "not in the heap" in offset fields.
pub const NO_OFFSET: u64 = u64::MAX;

/// The fixed part of a descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DescCore {
    pub seq: u64,
    pub op: u32,
    /// 0, or the `ErrorKind` code of this rank's rejection (message in the text field).
    pub status: u32,
    pub flags: u32,
    /// Operation-specific: root rank, reduction datatype and operator (see `Extra`).
    pub extra: u32,
    pub forced: u64,
    pub send_bpp: u64,
    pub recv_bpp: u64,
    /// Segment offsets of the buffers when they are in the heap, else NO_OFFSET.
    pub send_off: u64,
    pub recv_off: u64,
    /// Virtual addresses in the owner's address space (for CMA).
    pub send_addr: u64,
    pub recv_addr: u64,
    /// Bytes of the buffers at those offsets and addresses, as the owner registered them
    /// for the call: a peer touches nothing of them beyond (Comm::peer_range).
    pub send_len: u64,
    pub recv_len: u64,
    /// `check_words` of the vector arrays (the four arrays of a vector call, 0 without
    /// F_VECTOR), set when the descriptor is published.
    pub arrays_check: u64,
    /// `check_words` of every field above (`check_of`), set when the descriptor is
    /// published: a field changed in shared memory after that fails every reader's check.
    pub check: u64,
}

/// The check of a sequence of words: the sum of a bijection of each word that depends on
/// its position (an odd multiplier and a rotation), so that changing any one word always
/// changes the check. Not a defence against a process that rewrites the check too (same-user
/// processes are outside the trust model, see docs/security.md) but against a
/// descriptor changed in part, by a stray write or by hand, which every rank then rejects
/// alike before any data moves. The terms are independent, so the sum costs a few cycles
/// per word on the publishing path of every call.
pub fn check_words(words: impl IntoIterator<Item = u64>) -> u64 {
    const ODD: [u64; 4] = [
        0x9e37_79b9_7f4a_7c15,
        0xbf58_476d_1ce4_e5b9,
        0x94d0_49bb_1331_11eb,
        0xd6e8_feb8_6659_fd93,
    ];
    words.into_iter().enumerate().fold(0, |h, (i, w)| {
        let term = w.wrapping_mul(ODD[i % 4]).rotate_left((i % 64) as u32);
        h.wrapping_add(term)
    })
}

/// The check word of a descriptor's fields (all but `check` itself).
pub fn check_of(c: &DescCore) -> u64 {
    check_words([
        c.seq,
        u64::from(c.op) | u64::from(c.status) << 32,
        u64::from(c.flags) | u64::from(c.extra) << 32,
        c.forced,
        c.send_bpp,
        c.recv_bpp,
        c.send_off,
        c.recv_off,
        c.send_addr,
        c.recv_addr,
        c.send_len,
        c.recv_len,
        c.arrays_check,
    ])
}

const MSG_OFF: usize = 128;
const MSG_LEN: usize = DESC_FIXED - MSG_OFF;
const _: () = assert!(std::mem::size_of::<DescCore>() <= MSG_OFF);

/// What the arrive line carries after its sequence number: enough to validate a call that
/// needs nothing else, so that small calls cost one cache-line transfer per peer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineHead {
    pub op: u32,
    pub status: u32,
    pub flags: u32,
    /// As `DescCore::extra`.
    pub extra: u32,
    pub forced: u64,
    /// Only meaningful without F_FULL (then both fit in 32 bits).
    pub send_bpp: u32,
    pub recv_bpp: u32,
}

impl LineHead {
    /// The head of `core` (sizes beyond 32 bits saturate: the slot then has them).
    pub fn of(core: &DescCore) -> LineHead {
        let small = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        LineHead {
            op: core.op,
            status: core.status,
            flags: core.flags,
            extra: core.extra,
            forced: core.forced,
            send_bpp: small(core.send_bpp),
            recv_bpp: small(core.recv_bpp),
        }
    }
}

/// Offset of the head in the line (after the u64 sequence number).
pub const LINE_HEAD_OFF: usize = 8;
/// Offset and size of the tiny payload in the line.
pub const LINE_PAYLOAD_OFF: usize = LINE_HEAD_OFF + std::mem::size_of::<LineHead>();
pub const LINE_PAYLOAD: usize = shmcoll_shm::LINE - LINE_PAYLOAD_OFF;

/// The arrive line of `rank` for call `seq`.
#[derive(Clone, Copy, Debug)]
pub struct ArriveLine {
    base: *mut u8,
}

impl ArriveLine {
    pub fn of(seg: &Segment, rank: usize, seq: u64) -> ArriveLine {
        ArriveLine {
            base: seg.line_ptr(rank, shmcoll_shm::Line::arrive(seq)),
        }
    }

    pub fn head(&self) -> LineHead {
        // SAFETY: the line is LINE bytes of the mapping (Segment::line_ptr checks), 128-byte
        // aligned; read after the owner's release of the line's sequence number.
        unsafe { std::ptr::read(self.base.add(LINE_HEAD_OFF) as *const LineHead) }
    }

    pub fn set_head(&self, h: &LineHead) {
        // SAFETY: as in `head`; only the owner writes its line, before publishing.
        unsafe { std::ptr::write(self.base.add(LINE_HEAD_OFF) as *mut LineHead, *h) }
    }

    /// Address of the tiny payload area (LINE_PAYLOAD bytes).
    pub fn payload(&self) -> usize {
        // SAFETY: LINE_PAYLOAD_OFF < LINE, inside the line.
        unsafe { self.base.add(LINE_PAYLOAD_OFF) as usize }
    }
}

/// The done line of `rank`: its sequence number, then what a rank that failed after the
/// arrivals (a copy the kernel refused, half of a peer's results written) tells its peers,
/// who would otherwise return success with incomplete buffers: the call it failed in and
/// a short message. Written by the owner before it publishes the sequence number, read by
/// peers after they saw it; the owner cannot fail again (and rewrite them) before every
/// peer has arrived at a later call, which they do only after reading.
#[derive(Clone, Copy, Debug)]
pub struct DoneLine {
    base: *mut u8,
}

const DONE_FAILED_OFF: usize = 8;
const DONE_CORRUPT_OFF: usize = 16;
const DONE_MSG_OFF: usize = 24;
const DONE_MSG_LEN: usize = shmcoll_shm::LINE - DONE_MSG_OFF;

impl DoneLine {
    pub fn of(seg: &Segment, rank: usize) -> DoneLine {
        DoneLine {
            base: seg.line_ptr(rank, shmcoll_shm::Line::Done),
        }
    }

    /// Record that the owner failed in call `seq` (before it publishes its done round);
    /// `corrupt`: it found the shared state corrupt (peers then fail as it does).
    pub fn set_failed(&self, seq: u64, msg: &str, corrupt: bool) {
        // SAFETY: the line is LINE bytes of the mapping (Segment::line_ptr checks), 128-byte
        // aligned, so the u64s at 8 and 16 are aligned and the message ends inside it; only
        // the owner writes its line.
        unsafe {
            std::ptr::write_volatile(self.base.add(DONE_FAILED_OFF) as *mut u64, seq);
            std::ptr::write_volatile(
                self.base.add(DONE_CORRUPT_OFF) as *mut u64,
                u64::from(corrupt),
            );
            write_msg(self.base.add(DONE_MSG_OFF), DONE_MSG_LEN, msg);
        }
    }

    /// The owner's message, and whether it found the shared state corrupt, if it failed in
    /// call `seq` (read after its done round).
    pub fn failed_in(&self, seq: u64) -> Option<(String, bool)> {
        // SAFETY: as in `set_failed`; read after the acquire of the line's sequence number.
        let failed =
            unsafe { std::ptr::read_volatile(self.base.add(DONE_FAILED_OFF) as *const u64) };
        if failed != seq {
            return None;
        }
        // SAFETY: as in `set_failed`.
        let corrupt =
            unsafe { std::ptr::read_volatile(self.base.add(DONE_CORRUPT_OFF) as *const u64) };
        // SAFETY: as in `set_failed`.
        Some((
            unsafe { read_msg(self.base.add(DONE_MSG_OFF), DONE_MSG_LEN) },
            corrupt != 0,
        ))
    }
}

/// Write `msg` at `dst` as a NUL-terminated string of at most `cap` bytes (cut to fit).
///
/// # Safety
/// `dst` must be valid for writes of `cap` bytes, `cap >= 1`.
unsafe fn write_msg(dst: *mut u8, cap: usize, msg: &str) {
    let n = msg.len().min(cap - 1);
    // SAFETY: n + 1 <= cap bytes at dst (caller).
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), dst, n);
        *dst.add(n) = 0;
    }
}

/// The NUL-terminated string at `src` (at most `cap` bytes), lossily as UTF-8 (a message
/// cut by `write_msg` may end inside a character).
///
/// # Safety
/// `src` must be valid for reads of `cap` bytes.
unsafe fn read_msg(src: *const u8, cap: usize) -> String {
    // SAFETY: cap bytes at src (caller).
    let bytes = unsafe { std::slice::from_raw_parts(src, cap) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(cap);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The four arrays of a vector call, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Arr {
    SendCounts = 0,
    SendDispls = 1,
    RecvCounts = 2,
    RecvDispls = 3,
}

/// One rank's descriptor slot.
#[derive(Clone, Copy, Debug)]
pub struct Desc {
    base: *mut u8,
    p: usize,
}

impl Desc {
    pub fn slot(seg: &Segment, rank: usize, parity: usize) -> Desc {
        let l = seg.layout();
        let p = l.sizes.nranks;
        Desc {
            base: seg.ptr(l.desc(rank, parity), l.desc_stride),
            p,
        }
    }

    pub fn core(&self) -> DescCore {
        // SAFETY: the slot is desc_stride >= DESC_FIXED bytes of the mapping (checked in
        // `slot`), aligned to 128; callers read only after the owner's release of `seq`.
        unsafe { std::ptr::read(self.base as *const DescCore) }
    }

    /// The four vector arrays, in order.
    fn arrays(&self) -> impl Iterator<Item = u64> + '_ {
        (0..4 * self.p).map(|k| {
            // SAFETY: the slot holds DESC_FIXED + 4 * p u64 (Layout::desc_stride); k < 4p.
            unsafe { std::ptr::read((self.base.add(DESC_FIXED) as *const u64).add(k)) }
        })
    }

    /// Write `c` as this call's descriptor, sealed: its check words set (`arrays_check`
    /// from the vector arrays already in the slot, under F_VECTOR). Only the owner, before
    /// publishing.
    pub fn set_sealed(&self, c: &DescCore) {
        let mut c = *c;
        c.arrays_check = if c.flags & F_VECTOR != 0 {
            check_words(self.arrays())
        } else {
            0
        };
        c.check = check_of(&c);
        self.set_core(&c);
    }

    /// The core of call `seq`, if it is intact: sealed for that call, and unchanged since
    /// (its check and its sequence number agree). Else why not. The vector arrays are
    /// checked apart (`verify_arrays`), by the algorithms that copy with them.
    pub fn verified_core(&self, seq: u64) -> Result<DescCore, String> {
        let c = self.core();
        if c.seq != seq {
            return Err(format!("its descriptor is for call {}, not {seq}", c.seq));
        }
        if c.check != check_of(&c) {
            return Err("its descriptor was changed after it was published".into());
        }
        Ok(c)
    }

    /// Whether the vector arrays are those the owner sealed into `c` (a verified core).
    pub fn verify_arrays(&self, c: &DescCore) -> Result<(), String> {
        if c.flags & F_VECTOR != 0 && check_words(self.arrays()) != c.arrays_check {
            return Err(
                "its counts or displacements were changed after they were published".into(),
            );
        }
        Ok(())
    }

    pub fn set_core(&self, c: &DescCore) {
        // SAFETY: as in `core`; only the owner writes its slot, before publishing.
        unsafe { std::ptr::write(self.base as *mut DescCore, *c) }
    }

    pub fn set_msg(&self, msg: &str) {
        // SAFETY: MSG_OFF + MSG_LEN = DESC_FIXED bytes lie inside the slot.
        unsafe { write_msg(self.base.add(MSG_OFF), MSG_LEN, msg) }
    }

    pub fn msg(&self) -> String {
        // SAFETY: as in `set_msg`.
        unsafe { read_msg(self.base.add(MSG_OFF), MSG_LEN) }
    }

    #[inline]
    pub fn get(&self, a: Arr, j: usize) -> usize {
        assert!(j < self.p);
        // SAFETY: the slot holds DESC_FIXED + 4 * p u64 (Layout::desc_stride); j < p.
        unsafe {
            std::ptr::read((self.base.add(DESC_FIXED) as *const u64).add(a as usize * self.p + j))
                as usize
        }
    }

    /// Entry j of array `a` (only the owner writes its slot, before publishing).
    #[inline]
    pub fn set(&self, a: Arr, j: usize, v: usize) {
        assert!(j < self.p);
        // SAFETY: as in `get`.
        unsafe {
            std::ptr::write(
                (self.base.add(DESC_FIXED) as *mut u64).add(a as usize * self.p + j),
                v as u64,
            )
        };
    }

    pub fn set_array(&self, a: Arr, values: &[usize]) {
        assert_eq!(values.len(), self.p);
        for (j, &v) in values.iter().enumerate() {
            // SAFETY: as in `get`.
            unsafe {
                std::ptr::write(
                    (self.base.add(DESC_FIXED) as *mut u64).add(a as usize * self.p + j),
                    v as u64,
                )
            };
        }
    }
}
