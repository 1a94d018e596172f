//! ZFP fixed-rate compression of 1-D, 2-D, 3-D and 4-D float32 and float64 arrays, byte
//! for byte the stream of zfpy 1.0.1's `compress_numpy(a, rate=R, write_header=False)` for
//! a C-contiguous array `a`, and decoding bit for bit as zfpy's decompression of that
//! stream (`zfpy._decompress(stream, ztype, shape, rate=R)`). This is the reference of the
//! CUDA twin in `cuda/zfp.cu`. The 1-D specification follows; N-D arrays are at the end.
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
//!
//! # N-D arrays (d = 2, 3, 4 axes)
//!
//! The C shape `(.., ny, nx)` is read as zfp reads zfpy's arrays: x is the last axis,
//! then y, z, w. The rate is 1..=32 (float32) or 1..=64 (float64); `M = 4^d * R` bits per
//! block (zfp_stream_set_rate with `align = false`: `floor(4^d R + 1/2)`, never below
//! `1 + EBITS` here). Blocks of `4^d` values at coordinates `(4i, 4j, ..)` follow each
//! other with x fastest, then y, z, w, each in exactly `M` bits; the stream is whole
//! 64-bit words, as in 1-D. In a block value `(x, y, z, w)` is at `x + 4y + 16z + 64w`.
//! A block reaching past the array is padded with `pad_block` along x, then y, z, w.
//! Encoding: the exponent and cast as in 1-D over all `4^d` values; the lifting of step
//! 4 on every line of 4 along x, then y, z, w; the coefficients reordered by zfp's
//! sequency tables ([`perm`]: position `i` takes the coefficient at offset `PERM[i]`);
//! negabinary; then the bit planes as in step 6 with `4^d` coefficients (`n < 4^d`,
//! `n < 4^d - 1` in the loops). Decoding mirrors it (inverse lifting along w, z, y, x);
//! `maxprec = min(64, max(0, emax + 1074 + 2 (d + 1)))`; only the part of a block inside
//! the array is written.

mod bits;
mod nd;
mod perm;
mod planes;
mod planes_nd;
#[cfg(test)]
mod reference;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_nd;

use crate::threads::threads_for;
use crate::{CodecError, Result};
use bits::{BitReader, BitWriter};
use nd::Extents;
use scalar::Real;

/// The element type of a zfp array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatKind {
    F32,
    F64,
}

/// The most axes zfp codes an array in.
pub const MAX_DIMS: usize = 4;

impl FloatKind {
    fn name(self) -> &'static str {
        match self {
            FloatKind::F32 => "float32",
            FloatKind::F64 => "float64",
        }
    }

    /// The rates (bits per value) this codec accepts for the type in arrays of `dims`
    /// axes: blocks of 4 values need room for the exponent (`4 R >= 1 + EBITS`, and one
    /// more for float64's planes), larger blocks take any rate from 1.
    pub fn rates(self, dims: usize) -> std::ops::RangeInclusive<u32> {
        match (self, dims <= 1) {
            (FloatKind::F32, true) => 3..=32,
            (FloatKind::F64, true) => 4..=64,
            (FloatKind::F32, false) => 1..=32,
            (FloatKind::F64, false) => 1..=64,
        }
    }
}

fn check_rate(kind: FloatKind, rate: u32, dims: usize) -> Result<()> {
    if kind.rates(dims).contains(&rate) {
        Ok(())
    } else {
        let r = kind.rates(dims);
        Err(CodecError::InvalidArgument(format!(
            "zfp rate {rate} is not supported for {}-D {}: use an integer rate in {}..={} bits per value",
            dims.max(1),
            kind.name(),
            r.start(),
            r.end()
        )))
    }
}

/// `shape` (C order, 1 to [`MAX_DIMS`] axes) in zfp's order, checked.
fn extents(shape: &[usize]) -> Result<Extents> {
    if shape.is_empty() || shape.len() > MAX_DIMS {
        return Err(CodecError::InvalidArgument(format!(
            "zfp codes arrays of 1 to {MAX_DIMS} axes, not {} ({shape:?})",
            shape.len()
        )));
    }
    let mut ext = [1usize; 4];
    for (a, &n) in shape.iter().rev().enumerate() {
        ext[a] = n;
    }
    Ok(Extents {
        ext,
        dims: shape.len(),
    })
}

fn too_many(shape: &[usize]) -> CodecError {
    CodecError::InvalidArgument(format!(
        "an array of shape {shape:?} is too large to compress"
    ))
}

/// The number of values of `shape`, checked.
pub fn values(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n))
        .ok_or_else(|| too_many(shape))
}

/// Size in bytes of the stream of `n` values (a 1-D array) of `kind` at `rate`: whole
/// 64-bit words.
pub fn compressed_bytes(n: usize, kind: FloatKind, rate: u32) -> Result<usize> {
    compressed_bytes_nd(&[n], kind, rate)
}

/// Size in bytes of the stream of an array of `shape` (C order, 1 to [`MAX_DIMS`] axes).
pub fn compressed_bytes_nd(shape: &[usize], kind: FloatKind, rate: u32) -> Result<usize> {
    let e = extents(shape)?;
    check_rate(kind, rate, e.dims)?;
    values(shape)?;
    let blocks = e.ext[..e.dims]
        .iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n.div_ceil(4)))
        .ok_or_else(|| too_many(shape))?;
    blocks
        .checked_mul(block_bits(e.dims, rate))
        .and_then(|bits| bits.div_ceil(64).checked_mul(8))
        .ok_or_else(|| too_many(shape))
}

/// Stream bits of one block: `4^dims * rate` (at most 256 * 64).
fn block_bits(dims: usize, rate: u32) -> usize {
    (1usize << (2 * dims)) * rate as usize
}

/// Compress `src` (a 1-D array) at `rate` bits per value into `out`; returns the bytes
/// written (exactly [`compressed_bytes`]).
pub fn encode_f32(src: &[f32], rate: u32, out: &mut [u8]) -> Result<usize> {
    encode(src, &[src.len()], FloatKind::F32, rate, out)
}

/// Compress `src` (a 1-D array) at `rate` bits per value into `out`; returns the bytes
/// written.
pub fn encode_f64(src: &[f64], rate: u32, out: &mut [u8]) -> Result<usize> {
    encode(src, &[src.len()], FloatKind::F64, rate, out)
}

/// Decompress `out.len()` values (a 1-D array) from `stream`, written at `rate`.
pub fn decode_f32(stream: &[u8], rate: u32, out: &mut [f32]) -> Result<()> {
    decode(stream, &[out.len()], FloatKind::F32, rate, out)
}

/// Decompress `out.len()` values (a 1-D array) from `stream`, written at `rate`.
pub fn decode_f64(stream: &[u8], rate: u32, out: &mut [f64]) -> Result<()> {
    decode(stream, &[out.len()], FloatKind::F64, rate, out)
}

/// Compress the C-contiguous array `src` of `shape` (1 to 4 axes) at `rate` into `out`;
/// returns the bytes written (exactly [`compressed_bytes_nd`]).
pub fn encode_nd_f32(src: &[f32], shape: &[usize], rate: u32, out: &mut [u8]) -> Result<usize> {
    encode(src, shape, FloatKind::F32, rate, out)
}

/// Compress the C-contiguous array `src` of `shape` (1 to 4 axes) at `rate` into `out`.
pub fn encode_nd_f64(src: &[f64], shape: &[usize], rate: u32, out: &mut [u8]) -> Result<usize> {
    encode(src, shape, FloatKind::F64, rate, out)
}

/// Decompress the array of `shape` (C order, `out` exactly its values) from `stream`.
pub fn decode_nd_f32(stream: &[u8], shape: &[usize], rate: u32, out: &mut [f32]) -> Result<()> {
    decode(stream, shape, FloatKind::F32, rate, out)
}

/// Decompress the array of `shape` (C order, `out` exactly its values) from `stream`.
pub fn decode_nd_f64(stream: &[u8], shape: &[usize], rate: u32, out: &mut [f64]) -> Result<()> {
    decode(stream, shape, FloatKind::F64, rate, out)
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
        let u = planes::decode(r, F::PREC, F::kmin(e, 1), maxbits - 1 - F::EBITS);
        F::inverse(e, &u)
    };
    r.pos = start + maxbits as usize;
    vals
}

/// The pieces of an array of `shape` coded by separate threads: slabs of whole rows along
/// the slowest (first C) axis, each a multiple of the rows whose blocks fill whole 64-bit
/// words (4 rows of blocks times 64 / gcd(bits per block row, 64)), so that each piece is
/// an independent stream of an array of the same extents but fewer rows, ending on a word
/// boundary, and the pieces laid end to end are the stream of the whole array, byte for
/// byte. Returns the rows per piece.
fn piece_rows(e: Extents, rate: u32, threads: usize) -> usize {
    let rows = e.ext[e.dims - 1];
    // Blocks in one block row: all blocks but the slowest axis' (bounded by the stream size,
    // which is checked).
    let row_blocks: usize = e.ext[..e.dims - 1].iter().map(|n| n.div_ceil(4)).product();
    let row_bits = row_blocks * block_bits(e.dims, rate);
    let unit = 4 * (64 / gcd(row_bits % 64, 64));
    rows.div_ceil(threads).div_ceil(unit) * unit
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `shape` with its first axis set to `rows`.
fn with_rows(shape: &[usize], rows: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[0] = rows;
    s
}

fn check_count(shape: &[usize], have: usize, what: &str) -> Result<()> {
    let want = values(shape)?;
    if want != have {
        return Err(CodecError::InvalidArgument(format!(
            "an array of shape {shape:?} has {want} values, the {what} {have}"
        )));
    }
    Ok(())
}

fn encode<F: Real + Send + Sync>(
    src: &[F],
    shape: &[usize],
    kind: FloatKind,
    rate: u32,
    out: &mut [u8],
) -> Result<usize> {
    let need = compressed_bytes_nd(shape, kind, rate)?;
    check_count(shape, src.len(), "input")?;
    if out.len() < need {
        return Err(CodecError::BufferTooSmall {
            need,
            have: out.len(),
        });
    }
    let e = extents(shape)?;
    let threads = threads_for(std::mem::size_of_val(src))?;
    if threads == 1 {
        return Ok(encode_serial(src, e, rate, &mut out[..need]));
    }
    let rows = piece_rows(e, rate, threads);
    let row_values = src.len() / shape[0];
    std::thread::scope(|s| {
        let mut rest = &mut out[..need];
        for piece in src.chunks(rows * row_values) {
            let sub = with_rows(shape, piece.len() / row_values);
            let bytes = compressed_bytes_nd(&sub, kind, rate).expect("a part of a checked shape");
            let (mine, tail) = rest.split_at_mut(bytes);
            rest = tail;
            let pe = extents(&sub).expect("checked shape");
            s.spawn(move || encode_serial(piece, pe, rate, mine));
        }
    });
    Ok(need)
}

/// One stream on the calling thread; `out` holds exactly its bytes.
fn encode_serial<F: Real>(src: &[F], e: Extents, rate: u32, out: &mut [u8]) -> usize {
    if e.dims > 1 {
        nd::encode_serial(src, e, rate, out)
    } else {
        encode_serial_1d(src, rate, out)
    }
}

/// The 1-D stream of `src`. Never inlined into the dispatch: the 1-D loop, the hot path of
/// the compressed collectives, is then compiled and laid out on its own, whatever the N-D
/// code beside it.
#[inline(never)]
fn encode_serial_1d<F: Real>(src: &[F], rate: u32, out: &mut [u8]) -> usize {
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
    shape: &[usize],
    kind: FloatKind,
    rate: u32,
    out: &mut [F],
) -> Result<()> {
    let need = compressed_bytes_nd(shape, kind, rate)?;
    check_count(shape, out.len(), "output")?;
    if stream.len() < need {
        return Err(CodecError::Corrupt(format!(
            "a zfp stream of a {} array of shape {shape:?} at rate {rate} has {need} bytes, this one {}",
            kind.name(),
            stream.len()
        )));
    }
    let e = extents(shape)?;
    let threads = threads_for(std::mem::size_of_val(out))?;
    if threads == 1 {
        decode_serial(&stream[..need], e, rate, out);
        return Ok(());
    }
    let rows = piece_rows(e, rate, threads);
    let row_values = out.len() / shape[0];
    std::thread::scope(|s| {
        let mut rest = &stream[..need];
        for piece in out.chunks_mut(rows * row_values) {
            let sub = with_rows(shape, piece.len() / row_values);
            let bytes = compressed_bytes_nd(&sub, kind, rate).expect("a part of a checked shape");
            let (mine, tail) = rest.split_at(bytes);
            rest = tail;
            let pe = extents(&sub).expect("checked shape");
            s.spawn(move || decode_serial(mine, pe, rate, piece));
        }
    });
    Ok(())
}

/// Decode one stream (exactly its bytes) on the calling thread.
fn decode_serial<F: Real>(stream: &[u8], e: Extents, rate: u32, out: &mut [F]) {
    if e.dims > 1 {
        nd::decode_serial(stream, e, rate, out)
    } else {
        decode_serial_1d(stream, rate, out)
    }
}

/// The 1-D decoder of one stream (out of line, as `encode_serial_1d`).
#[inline(never)]
fn decode_serial_1d<F: Real>(stream: &[u8], rate: u32, out: &mut [F]) {
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
