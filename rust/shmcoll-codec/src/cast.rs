//! `cast`: float32 or float64 to a 16-bit float (bfloat16 or IEEE binary16) with round to
//! nearest even, and back. Fixed size: 2 bytes per element.
//!
//! # Stream
//!
//! `n` elements give `2*n` bytes: element `i` is the 16-bit pattern at bytes `2i, 2i+1`
//! (little-endian). No header; the format and `n` are side information.
//!
//! # Formats
//!
//! | format   | sign | exponent | mantissa | bias | max finite          |
//! |----------|------|----------|----------|------|---------------------|
//! | bfloat16 | 1    | 8        | 7        | 127  | (2 - 2^-7) * 2^127  |
//! | float16  | 1    | 5        | 10       | 15   | 65504               |
//!
//! # Narrowing (float32 or float64 source, rounded once, directly from the source)
//!
//! With `a` the source magnitude bits, `M` the target mantissa bits, `B` its bias, `S` the
//! source mantissa bits (23 or 52) and `sign` the source sign moved to bit 15:
//!
//! 1. NaN: `sign | exponent all ones | quiet bit (1 << (M-1)) | top M bits of the source
//!    mantissa`: a NaN stays a NaN, always quiet, keeping the top of its payload.
//! 2. Infinity, or a magnitude >= max finite + half an ulp (ties go to infinity because
//!    max finite has an odd mantissa): `sign | exponent all ones` (IEEE overflow).
//! 3. A magnitude >= the target's smallest normal `2^(1-B)`: rebias the exponent and round
//!    the mantissa to nearest even: `(a - ((Bs - B) << S) + (1 << (S-M-1)) - 1 + odd) >> (S-M)`
//!    where `Bs` is the source bias and `odd` is bit `S-M` of `a` (the kept lsb).
//! 4. Smaller magnitudes (the target's subnormals and zero): the source-format sum
//!    `a + 2^(1-B-M+S)` (one IEEE addition; the ulp of that power of two is the target's
//!    subnormal step, so the addition itself rounds to nearest even), minus the bits of
//!    that power of two, is the target's subnormal code (2^M is the smallest normal).
//!
//! # Widening (exact)
//!
//! To float32: finite values and infinities exactly; a NaN keeps sign and payload (shifted
//! to the top of the mantissa) and gets the quiet bit. To float64: through float32 by bit
//! manipulation (a NaN: sign, all-ones exponent, quiet bit, the float32 mantissa shifted up
//! 29 bits; anything else: its exact value).

use crate::threads::{map_pieces, threads_for, units_per_piece};
use crate::{CodecError, Result};

/// The 16-bit target format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Bf16,
    F16,
}

impl Format {
    /// "bfloat16" or "float16".
    pub fn parse(name: &str) -> Result<Format> {
        match name {
            "bfloat16" | "bf16" => Ok(Format::Bf16),
            "float16" | "fp16" | "f16" => Ok(Format::F16),
            _ => Err(CodecError::InvalidArgument(format!(
                "cast dtype must be \"bfloat16\" or \"float16\", not {name:?}"
            ))),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Format::Bf16 => "bfloat16",
            Format::F16 => "float16",
        }
    }
}

/// Bytes of the stream of `n` elements.
pub fn compressed_size(n: usize) -> usize {
    2 * n
}

/// The narrowing of one float32 pattern, for a target with `M` mantissa bits and bias `B`.
#[inline(always)]
fn narrow32<const M: u32, const B: u32>(x: u32) -> u16 {
    const S: u32 = 23;
    let sign = ((x >> 16) & 0x8000) as u16;
    let a = x & 0x7fff_ffff;
    let exp_ones = ((2 * B + 1) << M) as u16;
    let h = if a > 0x7f80_0000 {
        exp_ones | (1 << (M - 1)) | ((a >> (S - M)) as u16 & ((1 << M) - 1))
    } else if a >= (((B + 127) << S) | (((1 << (M + 1)) - 1) << (S - M - 1))) {
        exp_ones
    } else if a >= ((128 - B) << S) {
        let odd = (a >> (S - M)) & 1;
        ((a - ((127 - B) << S) + (1 << (S - M - 1)) - 1 + odd) >> (S - M)) as u16
    } else {
        // Added before subtracting: with bf16 (B = 127, M = 7) 128 - B - M underflows.
        let magic = (128 + S - B - M) << S;
        (f32::from_bits(a) + f32::from_bits(magic))
            .to_bits()
            .wrapping_sub(magic) as u16
    };
    sign | h
}

/// The narrowing of one float64 pattern (same rules, from the double directly).
#[inline(always)]
fn narrow64<const M: u32, const B: u32>(x: u64) -> u16 {
    const S: u64 = 52;
    let (m, b) = (u64::from(M), u64::from(B));
    let sign = ((x >> 48) & 0x8000) as u16;
    let a = x & 0x7fff_ffff_ffff_ffff;
    let exp_ones = ((2 * B + 1) << M) as u16;
    let h = if a > 0x7ff0_0000_0000_0000 {
        exp_ones | (1 << (M - 1)) | ((a >> (S - m)) as u16 & ((1 << M) - 1))
    } else if a >= (((b + 1023) << S) | (((1 << (m + 1)) - 1) << (S - m - 1))) {
        exp_ones
    } else if a >= ((1024 - b) << S) {
        let odd = (a >> (S - m)) & 1;
        ((a - ((1023 - b) << S) + (1 << (S - m - 1)) - 1 + odd) >> (S - m)) as u16
    } else {
        let magic = (1024 - b - m + S) << S;
        (f64::from_bits(a) + f64::from_bits(magic))
            .to_bits()
            .wrapping_sub(magic) as u16
    };
    sign | h
}

/// One bfloat16 pattern to float32 bits.
#[inline(always)]
fn widen_bf16(h: u16) -> u32 {
    let x = u32::from(h) << 16;
    if x & 0x7fff_ffff > 0x7f80_0000 {
        x | 0x0040_0000
    } else {
        x
    }
}

/// One binary16 pattern to float32 bits.
#[inline(always)]
fn widen_f16(h: u16) -> u32 {
    let sign = u32::from(h & 0x8000) << 16;
    let e = u32::from(h >> 10) & 0x1f;
    let m = u32::from(h & 0x3ff);
    let mag = if e == 0x1f {
        0x7f80_0000 | (m << 13) | if m != 0 { 0x0040_0000 } else { 0 }
    } else if e == 0 {
        // m * 2^-24, exact: m has at most 10 bits.
        (m as f32 * f32::from_bits(0x3380_0000)).to_bits()
    } else {
        ((e + 112) << 23) | (m << 13)
    };
    sign | mag
}

/// Float32 bits to float64 bits, exactly (NaN: quiet, payload kept).
#[inline(always)]
fn f32_bits_to_f64(x: u32) -> u64 {
    if x & 0x7fff_ffff > 0x7f80_0000 {
        (u64::from(x >> 31) << 63) | 0x7ff8_0000_0000_0000 | (u64::from(x & 0x007f_ffff) << 29)
    } else {
        f64::from(f32::from_bits(x)).to_bits()
    }
}

fn check_out(n: usize, have: usize) -> Result<()> {
    let need = compressed_size(n);
    if have < need {
        return Err(CodecError::BufferTooSmall { need, have });
    }
    Ok(())
}

fn check_in(n: usize, have: usize, fmt: Format) -> Result<()> {
    if have != compressed_size(n) {
        return Err(CodecError::Corrupt(format!(
            "a {} stream of {n} elements has {} bytes, not {have}",
            fmt.name(),
            compressed_size(n)
        )));
    }
    Ok(())
}

/// Narrow float32 `src` into `dst` (at least `2*n` bytes); returns the bytes written.
/// Large inputs are split over threads (`SHMCOLL_CODEC_THREADS`); every element is coded
/// alone, so the bytes are those of one thread.
pub fn encode_f32(fmt: Format, src: &[f32], dst: &mut [u8]) -> Result<usize> {
    check_out(src.len(), dst.len())?;
    let threads = threads_for(std::mem::size_of_val(src))?;
    encode_f32_on(fmt, src, dst, threads);
    Ok(compressed_size(src.len()))
}

pub(crate) fn encode_f32_on(fmt: Format, src: &[f32], dst: &mut [u8], threads: usize) {
    narrow_on(src, dst, threads, |x, d| {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { avx2::encode_f32(fmt, x, d) };
            return;
        }
        encode_f32_loops(fmt, x, d);
    });
}

#[inline(always)]
fn encode_f32_loops(fmt: Format, src: &[f32], dst: &mut [u8]) {
    match fmt {
        Format::Bf16 => narrow_all(src, dst, |x: &f32| narrow32::<7, 127>(x.to_bits())),
        Format::F16 => narrow_all(src, dst, |x: &f32| narrow32::<10, 15>(x.to_bits())),
    }
}

/// Narrow float64 `src` into `dst` (at least `2*n` bytes), rounding once from the double.
pub fn encode_f64(fmt: Format, src: &[f64], dst: &mut [u8]) -> Result<usize> {
    check_out(src.len(), dst.len())?;
    let threads = threads_for(std::mem::size_of_val(src))?;
    encode_f64_on(fmt, src, dst, threads);
    Ok(compressed_size(src.len()))
}

pub(crate) fn encode_f64_on(fmt: Format, src: &[f64], dst: &mut [u8], threads: usize) {
    narrow_on(src, dst, threads, |x, d| {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { avx2::encode_f64(fmt, x, d) };
            return;
        }
        encode_f64_loops(fmt, x, d);
    });
}

#[inline(always)]
fn encode_f64_loops(fmt: Format, src: &[f64], dst: &mut [u8]) {
    match fmt {
        Format::Bf16 => narrow_all(src, dst, |x: &f64| narrow64::<7, 127>(x.to_bits())),
        Format::F16 => narrow_all(src, dst, |x: &f64| narrow64::<10, 15>(x.to_bits())),
    }
}

/// `piece` on runs of elements of `src` and their 2-byte codes in `dst`, over `threads`.
fn narrow_on<T: Sync>(
    src: &[T],
    dst: &mut [u8],
    threads: usize,
    piece: impl Fn(&[T], &mut [u8]) + Sync,
) {
    let per = units_per_piece(src.len(), threads);
    if per >= src.len() {
        piece(src, dst);
        return;
    }
    // per <= n and 2 * n fits (the caller checked dst holds 2 * n bytes).
    let pieces: Vec<_> = src.chunks(per).zip(dst.chunks_mut(2 * per)).collect();
    map_pieces(pieces, |(x, d)| piece(x, d));
}

/// `piece` on runs of 2-byte codes in `src` and their elements in `dst`, over `threads`.
fn widen_on<T: Send>(
    src: &[u8],
    dst: &mut [T],
    threads: usize,
    piece: impl Fn(&[u8], &mut [T]) + Sync,
) {
    let per = units_per_piece(dst.len(), threads);
    if per >= dst.len() {
        piece(src, dst);
        return;
    }
    let pieces: Vec<_> = src.chunks(2 * per).zip(dst.chunks_mut(per)).collect();
    map_pieces(pieces, |(s, x)| piece(s, x));
}

/// The element loops, generic over the conversion so that each one is inlined (a function
/// pointer would keep the loop scalar).
#[inline(always)]
fn narrow_all<T>(src: &[T], dst: &mut [u8], f: impl Fn(&T) -> u16) {
    for (d, x) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&f(x).to_le_bytes());
    }
}

#[inline(always)]
fn widen_all<T>(src: &[u8], dst: &mut [T], f: impl Fn(u16) -> T) {
    for (x, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *x = f(u16::from_le_bytes([s[0], s[1]]));
    }
}

/// Widen a stream of exactly `2 * dst.len()` bytes into float32.
pub fn decode_f32(fmt: Format, src: &[u8], dst: &mut [f32]) -> Result<()> {
    check_in(dst.len(), src.len(), fmt)?;
    let threads = threads_for(std::mem::size_of_val(dst))?;
    decode_f32_on(fmt, src, dst, threads);
    Ok(())
}

pub(crate) fn decode_f32_on(fmt: Format, src: &[u8], dst: &mut [f32], threads: usize) {
    widen_on(src, dst, threads, |s, x| {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { avx2::decode_f32(fmt, s, x) };
            return;
        }
        decode_f32_loops(fmt, s, x);
    });
}

#[inline(always)]
fn decode_f32_loops(fmt: Format, src: &[u8], dst: &mut [f32]) {
    match fmt {
        Format::Bf16 => widen_all(src, dst, |h| f32::from_bits(widen_bf16(h))),
        Format::F16 => widen_all(src, dst, |h| f32::from_bits(widen_f16(h))),
    }
}

/// Widen a stream of exactly `2 * dst.len()` bytes into float64.
pub fn decode_f64(fmt: Format, src: &[u8], dst: &mut [f64]) -> Result<()> {
    check_in(dst.len(), src.len(), fmt)?;
    let threads = threads_for(std::mem::size_of_val(dst))?;
    decode_f64_on(fmt, src, dst, threads);
    Ok(())
}

pub(crate) fn decode_f64_on(fmt: Format, src: &[u8], dst: &mut [f64], threads: usize) {
    widen_on(src, dst, threads, |s, x| {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { avx2::decode_f64(fmt, s, x) };
            return;
        }
        decode_f64_loops(fmt, s, x);
    });
}

#[inline(always)]
fn decode_f64_loops(fmt: Format, src: &[u8], dst: &mut [f64]) {
    match fmt {
        Format::Bf16 => widen_all(src, dst, |h| f64::from_bits(f32_bits_to_f64(widen_bf16(h)))),
        Format::F16 => widen_all(src, dst, |h| f64::from_bits(f32_bits_to_f64(widen_f16(h)))),
    }
}

/// The loops compiled for AVX2 (integer selects and shifts on 8 lanes); the same bytes.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    #[target_feature(enable = "avx2")]
    pub(super) fn encode_f32(fmt: Format, src: &[f32], dst: &mut [u8]) {
        encode_f32_loops(fmt, src, dst);
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn encode_f64(fmt: Format, src: &[f64], dst: &mut [u8]) {
        encode_f64_loops(fmt, src, dst);
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn decode_f32(fmt: Format, src: &[u8], dst: &mut [f32]) {
        decode_f32_loops(fmt, src, dst);
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn decode_f64(fmt: Format, src: &[u8], dst: &mut [f64]) {
        decode_f64_loops(fmt, src, dst);
    }
}

#[cfg(test)]
mod tests;
