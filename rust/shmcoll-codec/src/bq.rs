//! `bq`: block-wise absmax quantization of float32 to int8 or int4, one float32 scale per
//! block. Fixed size, so compressed collectives know every rank's bytes in advance; the
//! aggressive codec for gradients.
//!
//! # Parameters
//!
//! * `bits`: 8 (codes in [-127, 127], `qmax = 127`) or 4 (codes in [-7, 7], `qmax = 7`).
//! * `block`: elements per block, one of 32, 64, 128, 256 (the usual choices are 256 for
//!   int8 and 64 or 128 for int4).
//!
//! # Stream (n float32 elements, `nb = ceil(n / block)` blocks)
//!
//! ```text
//! offset 0          nb scales, float32 little-endian, block b at 4*b
//! offset 4*nb       codes: bits 8: n bytes, element i at byte i (two's complement i8)
//!                          bits 4: ceil(n/2) bytes, element i in byte i/2, low nibble
//!                          for even i, high nibble for odd i (two's-complement nibbles);
//!                          when n is odd the last high nibble is 0
//! size              4*nb + (n if bits == 8 else ceil(n/2)) bytes, nothing else
//! ```
//!
//! No header: the parameters and `n` are side information (the Python frame carries them).
//! The last block may be partial: it holds the remaining `n - block*(nb-1)` elements, its
//! scale is computed over those only, and its codes follow the others without padding.
//!
//! # Encoding one block (all arithmetic IEEE-754 binary32, round to nearest even)
//!
//! 1. `amax = max |x_i|` over the block, taken on the bit patterns `bits(x_i) & 0x7fffffff`
//!    (an unsigned integer maximum, so -0.0 counts as 0 and the result is exact).
//! 2. If `amax` is not finite (the block holds a NaN or an infinity): the scale is the quiet
//!    NaN `0x7fc00000` and every code is 0, so the whole block decodes to NaN. Gradients
//!    that overflowed stay visibly non-finite after a compressed collective, which is what
//!    loss scalers test for.
//! 3. Otherwise `scale = amax / qmax` (a division, correctly rounded). If `scale == 0`
//!    (an all-zero block, or one so small that the division underflows) every code is 0.
//! 4. Otherwise `q_i = round_half_even(clamp(x_i / scale, -qmax, qmax))`: the quotient is a
//!    correctly rounded division (not a multiplication by a reciprocal), clamped before
//!    rounding (the same as clamping after, since the bounds are integers).
//!
//! # Decoding
//!
//! `x_i = (float32) q_i * scale` (one correctly rounded product). A block whose scale is
//! not finite (the encoder only writes the NaN of step 2) decodes to the quiet NaN
//! `0x7fc00000` in every element: written as such rather than left to `0 * NaN`, whose
//! NaN bits differ between CPUs and GPUs.
//!
//! # Error bound
//!
//! For a finite block with `scale > 0`: `|x - x̂| <= scale/2` up to the rounding of the
//! quotient and of the product (a few ulps of `x`); for `scale == 0`, `|x| <= 127 * 2^-150`.

use crate::threads::{map_pieces, threads_for, units_per_piece};
use crate::{CodecError, Result};

/// The block sizes a stream may use.
pub const BLOCKS: [usize; 4] = [32, 64, 128, 256];

/// `1.5 * 2^23`: adding it to a float in [-2^22, 2^22] rounds to an integer (half to even,
/// the default rounding mode) and leaves that integer in the low mantissa bits.
const ROUND_MAGIC: f32 = 12_582_912.0;
const ROUND_MAGIC_BITS: i32 = 0x4B40_0000;

/// A validated parameter set of the bq codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bq {
    bits: u32,
    block: usize,
}

impl Bq {
    /// `bits` 8 or 4, `block` one of [`BLOCKS`].
    pub fn new(bits: u32, block: usize) -> Result<Bq> {
        if bits != 8 && bits != 4 {
            return Err(CodecError::InvalidArgument(format!(
                "bq bits must be 8 or 4, not {bits}"
            )));
        }
        if !BLOCKS.contains(&block) {
            return Err(CodecError::InvalidArgument(format!(
                "bq block must be one of 32, 64, 128, 256, not {block}"
            )));
        }
        Ok(Bq { bits, block })
    }

    pub fn bits(&self) -> u32 {
        self.bits
    }

    pub fn block(&self) -> usize {
        self.block
    }

    /// The largest code magnitude: 127 or 7.
    pub fn qmax(&self) -> f32 {
        if self.bits == 8 {
            127.0
        } else {
            7.0
        }
    }

    fn code_bytes(&self, n: usize) -> usize {
        if self.bits == 8 {
            n
        } else {
            n.div_ceil(2)
        }
    }

    /// Bytes of the stream of `n` elements.
    pub fn compressed_size(&self, n: usize) -> usize {
        4 * n.div_ceil(self.block) + self.code_bytes(n)
    }

    /// Encode `src` into `dst` (at least [`Bq::compressed_size`] bytes); returns the bytes
    /// written. Large inputs are split over threads at block boundaries
    /// (`SHMCOLL_CODEC_THREADS`); the bytes are those of one thread.
    pub fn encode(&self, src: &[f32], dst: &mut [u8]) -> Result<usize> {
        let need = self.compressed_size(src.len());
        if dst.len() < need {
            return Err(CodecError::BufferTooSmall {
                need,
                have: dst.len(),
            });
        }
        let threads = threads_for(std::mem::size_of_val(src))?;
        self.encode_on(src, &mut dst[..need], threads);
        Ok(need)
    }

    /// Encode into `dst` of exactly the stream's size on `threads` threads: each takes a
    /// run of whole blocks, its scales and its codes.
    pub(crate) fn encode_on(&self, src: &[f32], dst: &mut [u8], threads: usize) {
        let nb = src.len().div_ceil(self.block);
        let (scales, codes) = dst.split_at_mut(4 * nb);
        // per <= nb, so per * block < n + block: no overflow.
        let per = units_per_piece(nb, threads);
        if per >= nb {
            self.encode_piece(src, scales, codes);
            return;
        }
        let pieces: Vec<_> = src
            .chunks(per * self.block)
            .zip(scales.chunks_mut(4 * per))
            .zip(codes.chunks_mut(self.code_bytes(per * self.block)))
            .collect();
        map_pieces(pieces, |((x, s), c)| self.encode_piece(x, s, c));
    }

    /// One run of whole blocks, with the widest SIMD build this CPU runs.
    fn encode_piece(&self, src: &[f32], scales: &mut [u8], codes: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has AVX-512F/BW (checked just above).
            unsafe { self.encode_avx512(src, scales, codes) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { self.encode_avx2(src, scales, codes) };
            return;
        }
        self.encode_blocks(src, scales, codes);
    }

    /// The same loops compiled for AVX2: twice the lanes for the division, which bounds
    /// the encoder. IEEE arithmetic only, so the bytes are those of the baseline build.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn encode_avx2(&self, src: &[f32], scales: &mut [u8], codes: &mut [u8]) {
        self.encode_blocks(src, scales, codes);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn decode_avx2(&self, scales: &[u8], codes: &[u8], dst: &mut [f32]) {
        self.decode_blocks(scales, codes, dst);
    }

    /// And for AVX-512 (16 lanes; byte packing of the codes in one instruction).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn encode_avx512(&self, src: &[f32], scales: &mut [u8], codes: &mut [u8]) {
        self.encode_blocks(src, scales, codes);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn decode_avx512(&self, scales: &[u8], codes: &[u8], dst: &mut [f32]) {
        self.decode_blocks(scales, codes, dst);
    }

    /// Encode a run of whole blocks into its scales and codes.
    #[inline(always)]
    fn encode_blocks(&self, src: &[f32], scales: &mut [u8], codes: &mut [u8]) {
        let qmax = self.qmax();
        let per_block = self.code_bytes(self.block);
        for ((x, s), c) in src
            .chunks(self.block)
            .zip(scales.chunks_exact_mut(4))
            .zip(codes.chunks_mut(per_block))
        {
            let scale = block_scale(x, qmax);
            s.copy_from_slice(&scale.to_le_bytes());
            if self.bits == 8 {
                encode8(x, scale, c);
            } else {
                encode4(x, scale, c);
            }
        }
    }

    /// Decode a run of whole blocks from its scales and codes.
    #[inline(always)]
    fn decode_blocks(&self, scales: &[u8], codes: &[u8], dst: &mut [f32]) {
        let per_block = self.code_bytes(self.block);
        for ((x, s), c) in dst
            .chunks_mut(self.block)
            .zip(scales.chunks_exact(4))
            .zip(codes.chunks(per_block))
        {
            let scale = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            if !scale.is_finite() {
                x.fill(f32::from_bits(0x7fc0_0000));
            } else if self.bits == 8 {
                decode8(c, scale, x);
            } else {
                decode4(c, scale, x);
            }
        }
    }

    /// Decode a stream of exactly [`Bq::compressed_size`]`(dst.len())` bytes into `dst`.
    pub fn decode(&self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        let need = self.compressed_size(dst.len());
        if src.len() != need {
            return Err(CodecError::Corrupt(format!(
                "a bq stream of {} elements (bits {}, block {}) has {need} bytes, not {}",
                dst.len(),
                self.bits,
                self.block,
                src.len()
            )));
        }
        let threads = threads_for(std::mem::size_of_val(dst))?;
        self.decode_on(src, dst, threads);
        Ok(())
    }

    /// Decode a stream of exactly the right size on `threads` threads, in runs of whole
    /// blocks as [`Bq::encode_on`] splits them.
    pub(crate) fn decode_on(&self, src: &[u8], dst: &mut [f32], threads: usize) {
        let nb = dst.len().div_ceil(self.block);
        let (scales, codes) = src.split_at(4 * nb);
        let per = units_per_piece(nb, threads);
        if per >= nb {
            self.decode_piece(scales, codes, dst);
            return;
        }
        let pieces: Vec<_> = dst
            .chunks_mut(per * self.block)
            .zip(scales.chunks(4 * per))
            .zip(codes.chunks(self.code_bytes(per * self.block)))
            .collect();
        map_pieces(pieces, |((x, s), c)| self.decode_piece(s, c, x));
    }

    /// One run of whole blocks, with the widest SIMD build this CPU runs.
    fn decode_piece(&self, scales: &[u8], codes: &[u8], dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has AVX-512F/BW (checked just above).
            unsafe { self.decode_avx512(scales, codes, dst) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { self.decode_avx2(scales, codes, dst) };
            return;
        }
        self.decode_blocks(scales, codes, dst);
    }
}

/// Step 1-3 of the spec: the block's scale (NaN for a non-finite block).
#[inline(always)]
fn block_scale(x: &[f32], qmax: f32) -> f32 {
    // An integer maximum of the magnitudes' bit patterns vectorises and orders NaN above
    // every finite value, so one comparison detects a non-finite block.
    let amax = x.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
    if amax >= 0x7f80_0000 {
        return f32::from_bits(0x7fc0_0000);
    }
    f32::from_bits(amax) / qmax
}

/// Step 4: one code (for a finite block with `scale > 0`).
#[inline(always)]
fn quantize(v: f32, scale: f32, qmax: f32) -> i32 {
    let t = (v / scale).clamp(-qmax, qmax);
    ((t + ROUND_MAGIC).to_bits() as i32) - ROUND_MAGIC_BITS
}

/// Whether the block's codes are all zero (a zero/underflowed or a non-finite block).
#[inline(always)]
fn all_zero_codes(scale: f32) -> bool {
    scale == 0.0 || scale.is_nan()
}

#[inline(always)]
fn encode8(x: &[f32], scale: f32, codes: &mut [u8]) {
    if all_zero_codes(scale) {
        codes.fill(0);
        return;
    }
    for (c, &v) in codes.iter_mut().zip(x) {
        *c = quantize(v, scale, 127.0) as i8 as u8;
    }
}

#[inline(always)]
fn encode4(x: &[f32], scale: f32, codes: &mut [u8]) {
    if all_zero_codes(scale) {
        codes.fill(0);
        return;
    }
    let mut pairs = x.chunks_exact(2);
    for (c, p) in codes.iter_mut().zip(&mut pairs) {
        let lo = quantize(p[0], scale, 7.0) as u8 & 0x0f;
        let hi = quantize(p[1], scale, 7.0) as u8 & 0x0f;
        *c = lo | (hi << 4);
    }
    if let [v] = pairs.remainder() {
        codes[codes.len() - 1] = quantize(*v, scale, 7.0) as u8 & 0x0f;
    }
}

#[inline(always)]
fn decode8(codes: &[u8], scale: f32, x: &mut [f32]) {
    for (v, &c) in x.iter_mut().zip(codes) {
        *v = f32::from(c as i8) * scale;
    }
}

/// The int4 codes of a block, sign-extended into a byte array first (shifts over whole
/// vectors) and then converted and scaled (the loop of the int8 codes).
#[inline(always)]
fn decode4(codes: &[u8], scale: f32, x: &mut [f32]) {
    let mut q = [0i8; BLOCKS[3]];
    let q = &mut q[..x.len()];
    let mut pairs = q.chunks_exact_mut(2);
    for (p, &c) in (&mut pairs).zip(codes) {
        // Shifting the nibble to the top of an i8 and back sign-extends it.
        p[0] = ((c << 4) as i8) >> 4;
        p[1] = (c as i8) >> 4;
    }
    if let [v] = pairs.into_remainder() {
        *v = ((codes[codes.len() - 1] << 4) as i8) >> 4;
    }
    for (v, &c) in x.iter_mut().zip(q.iter()) {
        *v = f32::from(c) * scale;
    }
}

#[cfg(test)]
mod tests;
