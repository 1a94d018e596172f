//! ZFP fixed-rate compression of 1-D float32 and float64 arrays, byte for byte the stream
//! of zfpy 1.0.1's `compress_numpy(a, rate=R, write_header=False)` for a contiguous 1-D
//! array `a`, and decoding bit for bit as `zfpy._decompress(stream, ztype, [n], rate=R)`.
//! This is the reference of the CUDA twin in `cuda/zfp.cu`.
//!
//! # Stream specification
//!
//! Parameters, float32 / float64: `P` (integer precision) = 32 / 64, `EBITS` = 8 / 11,
//! `EBIAS` = 127 / 1023, `NB` = `0xaaaa_aaaa` / `0xaaaa_aaaa_aaaa_aaaa`. The rate `R` is an
//! integer, 3..=32 (float32) or 4..=64 (float64), in bits per value; `M = 4 * R` bits per
//! block (zfp's `maxbits = minbits`).
//!
//! **Bits.** The stream is a sequence of 64-bit words stored little-endian. Stream bit
//! `i` is bit `i % 8` of byte `i / 8`. "Write `v` in `k` bits" appends bits 0, 1, .., k-1
//! of `v`, least significant first.
//!
//! **Layout.** `n` values make `nb = ceil(n / 4)` blocks; block `b` holds values
//! `4b .. 4b+3` and occupies stream bits `[b*M, (b+1)*M)`. The stream is
//! `ceil(nb * M / 64) * 8` bytes ([`compressed_bytes`]); bits after the last block are zero.
//! `n = 0` gives an empty stream. A last block with `r < 4` values `a, b, c` is padded as
//! zfp's `pad_block`: r = 1: `(a, a, a, a)`; r = 2: `(a, b, b, a)`; r = 3: `(a, b, c, a)`.
//!
//! **Encoding a block** `x0..x3` (written in exactly `M` bits):
//! 1. *Non-finite values* (zfp: undefined): NaN is coded as +0, +inf as MAX, -inf as -MAX.
//! 2. *Exponent.* `m = max |xi|`. If `m == 0` (all zeros, of either sign) the block is
//!    `M` zero bits. Otherwise let `E` be the biased exponent field of `m` (0 for
//!    subnormals) and `E' = max(E, Emin)` with `Emin` = 29 / 61; `emax = E' - (EBIAS - 1)`
//!    (for `E >= Emin` this is C's `frexp` exponent of `m`: `m = f * 2^emax`, `f` in
//!    [1/2, 1)). Write bit 1, then `emax + EBIAS` in `EBITS` bits. The clamp `Emin` (block
//!    maxima below 2^-98 / 2^-962) is ours: there zfp's scale factor `2^(P-2-emax)`
//!    overflows to infinity and its integer conversion is undefined; with it the block is
//!    coded as if its maximum were 2^-98 / 2^-962 and zfp's own decoder reads it.
//! 3. *Cast.* `s = 2^(P-2-emax)` (an exact power of two); `qi = trunc(xi * s)` as signed
//!    P-bit integers (`|qi| < 2^(P-2)`; the float product is exact).
//! 4. *Forward lifting* on `(x, y, z, w) = (q0, q1, q2, q3)`, P-bit two's complement,
//!    `>>` arithmetic: `x += w; x >>= 1; w -= x; z += y; z >>= 1; y -= z; x += z; x >>= 1;
//!    z -= x; w += y; w >>= 1; y -= w; w += y >> 1; y -= w >> 1;` giving
//!    `c = (x, y, z, w)`.
//! 5. *Negabinary.* `ui = ((ci as unsigned P-bit) + NB) ^ NB` (wrapping add).
//! 6. *Bit planes* into a budget of `B = M - 1 - EBITS` bits; every bit written takes one
//!    from `B`, and everything stops when `B` reaches 0. `n = 0`. For plane `k = P-1`
//!    down to 0, while `B > 0`: let `x` = bit `k` of `u0..u3` (bit `i` from `ui`);
//!    write the low `min(n, B)` bits of `x`, then shift them out of `x`; then, while
//!    `n < 4` and `B > 0`: write bit `x != 0`; if it was 0 stop this plane; else, while
//!    `n < 3` and `B > 0`: write bit `x & 1`; if it was 1 leave this inner loop, else
//!    `x >>= 1; n += 1`; after the inner loop `x >>= 1; n += 1`.
//! 7. *Pad* with zero bits to `M` bits.
//!
//! **Decoding a block**: read a bit; if 0 the four values are +0. Else read `e` in
//! `EBITS` bits, `emax = e - EBIAS`, `maxprec = min(64, max(0, emax + 1078))`,
//! `kmin = P - min(P, maxprec)` (nonzero only for float64 with `e <= 8`). Budget `B` as
//! above, `n = 0`, `ui = 0`; for `k = P-1` down to `kmin`, while `B > 0`: `x` = the next
//! `min(n, B)` bits; then while `n < 4` and `B > 0`: read a bit (B -= 1); if 0 stop; else
//! while `n < 3` and `B > 0`: read a bit (B -= 1); if 1 leave, else `n += 1`; after the
//! inner loop (also when it left because `B` ran out) `x += 1 << n; n += 1`. Then
//! `ui |= ((x >> i) & 1) << k`. Inverse negabinary `ci = (ui ^ NB) - NB`, inverse lifting
//! (wrapping, which matters only for streams no encoder wrote):
//! `y += w >> 1; w -= y >> 1; y += w; w <<= 1; w -= y; z += x; x <<= 1; x -= z; y += z;
//! z <<= 1; z -= y; w += x; x <<= 1; x -= w;` on `(x, y, z, w) = (c0..c3)`, then
//! `value_i = float(qi) * s'` where `float()` rounds to nearest even and
//! `s' = 2^(emax - (P-2))` rounded as C's `ldexp` (exact down to the smallest subnormal,
//! zero below), multiplied in the float type with IEEE rounding, no FMA. The next block
//! starts `M` bits after the start of this one, whatever was read.

mod bits;
mod planes;
#[cfg(test)]
mod reference;
mod scalar;
#[cfg(test)]
mod tests;

use crate::threads::threads_for;
use crate::{CodecError, Result};
use bits::{BitReader, BitWriter};
use scalar::Real;

/// The element type of a zfp array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatKind {
    F32,
    F64,
}

impl FloatKind {
    fn name(self) -> &'static str {
        match self {
            FloatKind::F32 => "float32",
            FloatKind::F64 => "float64",
        }
    }

    /// The rates (bits per value) this codec accepts for the type.
    pub fn rates(self) -> std::ops::RangeInclusive<u32> {
        match self {
            FloatKind::F32 => 3..=32,
            FloatKind::F64 => 4..=64,
        }
    }
}

fn check_rate(kind: FloatKind, rate: u32) -> Result<()> {
    if kind.rates().contains(&rate) {
        Ok(())
    } else {
        let r = kind.rates();
        Err(CodecError::InvalidArgument(format!(
            "zfp rate {rate} is not supported for {}: use an integer rate in {}..={} bits per value",
            kind.name(),
            r.start(),
            r.end()
        )))
    }
}

/// Size in bytes of the stream of `n` values of `kind` at `rate`: whole 64-bit words.
pub fn compressed_bytes(n: usize, kind: FloatKind, rate: u32) -> Result<usize> {
    check_rate(kind, rate)?;
    n.div_ceil(4)
        .checked_mul(4 * rate as usize)
        .map(|bits| bits.div_ceil(64) * 8)
        .ok_or_else(|| CodecError::InvalidArgument(format!("{n} values are too many to compress")))
}

/// Compress `src` at `rate` bits per value into `out`; returns the bytes written
/// (exactly [`compressed_bytes`]).
pub fn encode_f32(src: &[f32], rate: u32, out: &mut [u8]) -> Result<usize> {
    encode(src, FloatKind::F32, rate, out)
}

/// Compress `src` at `rate` bits per value into `out`; returns the bytes written.
pub fn encode_f64(src: &[f64], rate: u32, out: &mut [u8]) -> Result<usize> {
    encode(src, FloatKind::F64, rate, out)
}

/// Decompress `out.len()` values from `stream`, written at `rate`.
pub fn decode_f32(stream: &[u8], rate: u32, out: &mut [f32]) -> Result<()> {
    decode(stream, FloatKind::F32, rate, out)
}

/// Decompress `out.len()` values from `stream`, written at `rate`.
pub fn decode_f64(stream: &[u8], rate: u32, out: &mut [f64]) -> Result<()> {
    decode(stream, FloatKind::F64, rate, out)
}

/// zfp's `pad_block` for a last block of 1..=3 values.
fn pad_block<F: Real>(part: &[F]) -> [F; 4] {
    match *part {
        [a] => [a, a, a, a],
        [a, b] => [a, b, b, a],
        [a, b, c] => [a, b, c, a],
        _ => unreachable!("partial blocks hold 1 to 3 values"),
    }
}

#[inline(always)]
fn encode_block<F: Real>(w: &mut BitWriter<'_>, block: &[F; 4], maxbits: u32) {
    match F::forward(block) {
        None => w.zeros(maxbits),
        Some((e, u)) => {
            w.put(((e as u64) << 1) | 1, F::EBITS + 1);
            let budget = maxbits - 1 - F::EBITS;
            let used = planes::encode(w, &u, F::PREC, budget);
            w.zeros(budget - used);
        }
    }
}

#[inline(always)]
fn decode_block<F: Real>(r: &mut BitReader<'_>, maxbits: u32) -> [F; 4] {
    let start = r.pos;
    let head = r.read(1 + F::EBITS);
    let vals = if head & 1 == 0 {
        [F::default(); 4]
    } else {
        let e = (head >> 1) as u32;
        let u = planes::decode(r, F::PREC, F::kmin(e), maxbits - 1 - F::EBITS);
        F::inverse(e, &u)
    };
    r.pos = start + maxbits as usize;
    vals
}

/// Values per piece when `n` values are split over `threads`: a multiple of the blocks
/// whose bits fill whole 64-bit words (16 / gcd(rate, 16) blocks), so that each piece is
/// an independent stream ending on a word boundary and the pieces, laid end to end, are
/// the stream of the whole input, byte for byte.
fn piece_values(n: usize, rate: u32, threads: usize) -> usize {
    let g = 16 / gcd(rate as usize, 16);
    let unit = 4 * g;
    n.div_ceil(threads).div_ceil(unit) * unit
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn encode<F: Real + Send + Sync>(
    src: &[F],
    kind: FloatKind,
    rate: u32,
    out: &mut [u8],
) -> Result<usize> {
    let need = compressed_bytes(src.len(), kind, rate)?;
    if out.len() < need {
        return Err(CodecError::BufferTooSmall {
            need,
            have: out.len(),
        });
    }
    let threads = threads_for(std::mem::size_of_val(src))?;
    if threads == 1 {
        return Ok(encode_serial(src, rate, &mut out[..need]));
    }
    let per = piece_values(src.len(), rate, threads);
    std::thread::scope(|s| {
        let mut rest = &mut out[..need];
        for piece in src.chunks(per) {
            let bytes = compressed_bytes(piece.len(), kind, rate).expect("checked rate");
            let (mine, tail) = rest.split_at_mut(bytes);
            rest = tail;
            s.spawn(move || encode_serial(piece, rate, mine));
        }
    });
    Ok(need)
}

/// One stream on the calling thread; `out` holds exactly its bytes.
fn encode_serial<F: Real>(src: &[F], rate: u32, out: &mut [u8]) -> usize {
    let need = out.len();
    let maxbits = 4 * rate;
    let mut w = BitWriter::new(out);
    let mut blocks = src.chunks_exact(4);
    for b in &mut blocks {
        let b: &[F; 4] = b.try_into().expect("chunks of 4");
        encode_block(&mut w, b, maxbits);
    }
    let rest = blocks.remainder();
    if !rest.is_empty() {
        encode_block(&mut w, &pad_block(rest), maxbits);
    }
    let written = w.finish();
    debug_assert_eq!(written, need);
    written
}

fn decode<F: Real + Send + Sync>(
    stream: &[u8],
    kind: FloatKind,
    rate: u32,
    out: &mut [F],
) -> Result<()> {
    let need = compressed_bytes(out.len(), kind, rate)?;
    if stream.len() < need {
        return Err(CodecError::Corrupt(format!(
            "a zfp stream of {} {} values at rate {rate} has {need} bytes, this one {}",
            out.len(),
            kind.name(),
            stream.len()
        )));
    }
    let threads = threads_for(std::mem::size_of_val(out))?;
    if threads == 1 {
        decode_serial(&stream[..need], rate, out);
        return Ok(());
    }
    let per = piece_values(out.len(), rate, threads);
    std::thread::scope(|s| {
        let mut rest = &stream[..need];
        for piece in out.chunks_mut(per) {
            let bytes = compressed_bytes(piece.len(), kind, rate).expect("checked rate");
            let (mine, tail) = rest.split_at(bytes);
            rest = tail;
            s.spawn(move || decode_serial(mine, rate, piece));
        }
    });
    Ok(())
}

/// Decode one stream (exactly its bytes) on the calling thread.
fn decode_serial<F: Real>(stream: &[u8], rate: u32, out: &mut [F]) {
    let maxbits = 4 * rate;
    let mut r = BitReader::new(stream, 0);
    let mut blocks = out.chunks_exact_mut(4);
    for b in &mut blocks {
        b.copy_from_slice(&decode_block::<F>(&mut r, maxbits));
    }
    let rest = blocks.into_remainder();
    if !rest.is_empty() {
        let len = rest.len();
        rest.copy_from_slice(&decode_block::<F>(&mut r, maxbits)[..len]);
    }
}
