//! x86_64 helpers shared by the SIMD kernels: `rep movsb`, and copies of up to 32 bytes
//! with baseline SSE2 (always available on x86_64, so no `target_feature` needed). The
//! feature bits that choose among them are machine facts (crate::hw).

use core::arch::asm;
use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};

/// `rep movsb`.
///
/// # Safety
/// `src` valid for `len` reads, `dst` for `len` writes, no overlap.
#[inline(always)]
pub(crate) unsafe fn rep_movsb(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller guarantees the ranges; the direction flag is clear (SysV ABI), so
    // the copy goes forward over exactly [dst, dst+len); rep movsb leaves flags unchanged.
    unsafe {
        asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags)
        );
    }
}

/// Copies 0..=32 bytes with overlapping loads and stores, no loop.
///
/// # Safety
/// `len <= 32`; `src` valid for `len` reads, `dst` for `len` writes, no overlap.
#[inline(always)]
pub(crate) unsafe fn copy_le32(dst: *mut u8, src: *const u8, len: usize) {
    debug_assert!(len <= 32);
    // SAFETY: for 17..=32 bytes the two 16-byte accesses cover [0,16) and [len-16,len),
    // both within the regions; shorter lengths are handled by copy_le16 under the same
    // contract. SSE2 is part of the x86_64 baseline.
    unsafe {
        if len > 16 {
            let a = _mm_loadu_si128(src.cast::<__m128i>());
            let b = _mm_loadu_si128(src.add(len - 16).cast::<__m128i>());
            _mm_storeu_si128(dst.cast::<__m128i>(), a);
            _mm_storeu_si128(dst.add(len - 16).cast::<__m128i>(), b);
        } else {
            super::scalar::copy_le16(dst, src, len);
        }
    }
}
