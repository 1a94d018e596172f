//! SSE2 kernels: 16-byte vectors (baseline x86_64, so no `target_feature` is needed).
//! Same structure as `x86_avx512` (see there for the why).

use super::x86::{copy_le32, rep_movsb};
use super::{NT_MIN_LEN, PREFETCH_DIST};
use core::arch::x86_64::*;

const V: usize = 16;

/// From here temporal copies use `rep movsb` on ERMS CPUs: with 16-byte stores the loop is
/// store-bound at half the L1 bandwidth, and beyond L1 both are alike (figures:
/// docs/results-collectives.md, "The measurements behind the model's choices"). glibc
/// uses the same 2 KiB for 16-byte vectors.
const REP_MOVSB_MIN: usize = 2048;

/// Loads 4 vectors (64 bytes) from `s`.
#[inline(always)]
unsafe fn ld4(s: *const u8) -> [__m128i; 4] {
    // SAFETY: the caller guarantees 64 readable bytes at s.
    unsafe {
        [
            _mm_loadu_si128(s.cast()),
            _mm_loadu_si128(s.add(V).cast()),
            _mm_loadu_si128(s.add(2 * V).cast()),
            _mm_loadu_si128(s.add(3 * V).cast()),
        ]
    }
}

/// Stores 4 vectors (64 bytes) to `d`, unaligned.
#[inline(always)]
unsafe fn st4(d: *mut u8, v: [__m128i; 4]) {
    // SAFETY: the caller guarantees 64 writable bytes at d.
    unsafe {
        _mm_storeu_si128(d.cast(), v[0]);
        _mm_storeu_si128(d.add(V).cast(), v[1]);
        _mm_storeu_si128(d.add(2 * V).cast(), v[2]);
        _mm_storeu_si128(d.add(3 * V).cast(), v[3]);
    }
}

/// Copies 0..=256 bytes without a loop. Stores may overlap: regions do not, so the
/// overlapping bytes get the same value whatever the order.
///
/// # Safety
/// `len <= 256`; `src` valid for `len` reads, `dst` for `len` writes, no overlap.
#[inline(always)]
unsafe fn copy_le256(dst: *mut u8, src: *const u8, len: usize) {
    debug_assert!(len <= 256);
    // SAFETY: each branch accesses a prefix and a suffix of [0, len) that lie inside it.
    unsafe {
        if len <= 32 {
            copy_le32(dst, src, len);
        } else if len <= 64 {
            copy_le32(dst, src, 32);
            copy_le32(dst.add(len - 32), src.add(len - 32), 32);
        } else if len <= 128 {
            st4(dst, ld4(src));
            st4(dst.add(len - 64), ld4(src.add(len - 64)));
        } else {
            st4(dst, ld4(src));
            st4(dst.add(64), ld4(src.add(64)));
            st4(dst.add(len - 128), ld4(src.add(len - 128)));
            st4(dst.add(len - 64), ld4(src.add(len - 64)));
        }
    }
}

/// Temporal copy: no loop up to 256 B, then aligned 4x16 B loop, or `rep movsb` from
/// `REP_MOVSB_MIN` bytes when `REP` (the CPU has ERMS).
///
/// # Safety
/// `src` valid for `len` reads, `dst` for `len` writes, no overlap.
pub(crate) unsafe fn copy_temporal<const REP: bool>(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: as in x86_avx512::copy_temporal with 16-byte vectors: [0, 16) unaligned,
    // the aligned loop [skip, d) with d < len - 64 before each iteration, [len - 64, len).
    unsafe {
        if len <= 256 {
            return copy_le256(dst, src, len);
        }
        if REP && len >= REP_MOVSB_MIN {
            return rep_movsb(dst, src, len);
        }
        let first = _mm_loadu_si128(src.cast());
        let t = len - 4 * V;
        let last = ld4(src.add(t));
        let skip = V - (dst as usize & (V - 1));
        let (mut d, mut s) = (dst.add(skip), src.add(skip));
        let end = dst.add(t);
        while d < end {
            let v = ld4(s);
            _mm_store_si128(d.cast(), v[0]);
            _mm_store_si128(d.add(V).cast(), v[1]);
            _mm_store_si128(d.add(2 * V).cast(), v[2]);
            _mm_store_si128(d.add(3 * V).cast(), v[3]);
            (d, s) = (d.add(4 * V), s.add(4 * V));
        }
        _mm_storeu_si128(dst.cast(), first);
        st4(dst.add(t), last);
    }
}

/// Streams one 64-byte line to a 64-byte aligned `d`.
#[inline(always)]
unsafe fn stream_line(d: *mut u8, v: [__m128i; 4]) {
    // SAFETY: the caller guarantees 64 writable bytes at d, 16-byte aligned.
    unsafe {
        _mm_stream_si128(d.cast(), v[0]);
        _mm_stream_si128(d.add(V).cast(), v[1]);
        _mm_stream_si128(d.add(2 * V).cast(), v[2]);
        _mm_stream_si128(d.add(3 * V).cast(), v[3]);
    }
}

/// Non-temporal copy: temporal head to 64-byte alignment, streamed whole lines (256 B per
/// iteration), temporal tail. See `x86_avx512::copy_nt`.
///
/// # Safety
/// `src` valid for `len` reads, `dst` for `len` writes, no overlap.
pub(crate) unsafe fn copy_nt(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: as in x86_avx512::copy_nt; d stays 64-byte aligned.
    unsafe {
        if len < NT_MIN_LEN {
            return copy_le256(dst, src, len);
        }
        let head = (dst as usize).wrapping_neg() & 63;
        copy_le256(dst, src, head);
        let (mut d, mut s, mut n) = (dst.add(head), src.add(head), len - head);
        while n >= 256 {
            _mm_prefetch::<_MM_HINT_T0>(s.wrapping_add(PREFETCH_DIST).cast());
            _mm_prefetch::<_MM_HINT_T0>(s.wrapping_add(PREFETCH_DIST + 128).cast());
            let (a, b) = (ld4(s), ld4(s.add(64)));
            stream_line(d, a);
            stream_line(d.add(64), b);
            let (a, b) = (ld4(s.add(128)), ld4(s.add(192)));
            stream_line(d.add(128), a);
            stream_line(d.add(192), b);
            (d, s, n) = (d.add(256), s.add(256), n - 256);
        }
        while n >= 64 {
            stream_line(d, ld4(s));
            (d, s, n) = (d.add(64), s.add(64), n - 64);
        }
        copy_le256(d, s, n);
    }
}
