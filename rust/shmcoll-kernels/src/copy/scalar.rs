//! Portable kernels (`Isa::Scalar`): no explicit SIMD from this crate.
//!
//! The temporal copy is `ptr::copy_nonoverlapping`, i.e. the platform `memcpy` (which may
//! well use SIMD itself: this makes `Scalar` the "what libc gives" baseline in benchmarks).
//! On x86_64 the non-temporal copy uses `movnti` (8-byte streaming stores, baseline SSE2);
//! elsewhere there is no portable streaming store and `Scalar` NT is a temporal copy.

use core::ptr;

/// Copies 0..=16 bytes with at most two overlapping loads and stores, no loop.
///
/// # Safety
/// `len <= 16`; `src` valid for `len` reads, `dst` for `len` writes, no overlap.
#[inline(always)]
pub(crate) unsafe fn copy_le16(dst: *mut u8, src: *const u8, len: usize) {
    debug_assert!(len <= 16);
    // SAFETY: every access below lies in [0, len) of both regions (the caller's contract);
    // unaligned reads/writes are used for the multi-byte accesses.
    unsafe {
        if len >= 8 {
            let a = ptr::read_unaligned(src.cast::<u64>());
            let b = ptr::read_unaligned(src.add(len - 8).cast::<u64>());
            ptr::write_unaligned(dst.cast::<u64>(), a);
            ptr::write_unaligned(dst.add(len - 8).cast::<u64>(), b);
        } else if len >= 4 {
            let a = ptr::read_unaligned(src.cast::<u32>());
            let b = ptr::read_unaligned(src.add(len - 4).cast::<u32>());
            ptr::write_unaligned(dst.cast::<u32>(), a);
            ptr::write_unaligned(dst.add(len - 4).cast::<u32>(), b);
        } else if len > 0 {
            // 1..=3 bytes: first, middle, last (they coincide for short lengths).
            let (a, b, c) = (*src, *src.add(len / 2), *src.add(len - 1));
            *dst = a;
            *dst.add(len / 2) = b;
            *dst.add(len - 1) = c;
        }
    }
}

/// Temporal copy through the platform `memcpy`.
///
/// # Safety
/// `src` valid for `len` reads, `dst` for `len` writes, no overlap.
pub(crate) unsafe fn copy_temporal(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: forwarded caller contract.
    unsafe { ptr::copy_nonoverlapping(src, dst, len) }
}

/// Non-temporal copy with `movnti`: temporal head up to 64-byte alignment of `dst`, 8-byte
/// streaming stores for whole cache lines, temporal tail. See `x86_avx512::copy_nt` for why.
///
/// # Safety
/// `src` valid for `len` reads, `dst` for `len` writes, no overlap.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn copy_nt(dst: *mut u8, src: *const u8, len: usize) {
    use core::arch::x86_64::_mm_stream_si64;
    if len < super::NT_MIN_LEN {
        // SAFETY: forwarded caller contract.
        return unsafe { copy_temporal(dst, src, len) };
    }
    // SAFETY: all accesses stay within [0, len) of both regions: `head < 64 <= len`, the
    // loop runs while 64 bytes remain, the tail copies the rest. `movnti` needs no
    // alignment but is given 8-byte aligned addresses (d is 64-byte aligned).
    unsafe {
        let head = (dst as usize).wrapping_neg() & 63;
        copy_temporal(dst, src, head);
        let (mut d, mut s, mut n) = (dst.add(head), src.add(head), len - head);
        while n >= 64 {
            for i in 0..8 {
                let v = ptr::read_unaligned(s.add(8 * i).cast::<i64>());
                _mm_stream_si64(d.add(8 * i).cast::<i64>(), v);
            }
            (d, s, n) = (d.add(64), s.add(64), n - 64);
        }
        copy_temporal(d, s, n);
    }
}
