//! `mpc`: a lossless codec for 32- and 64-bit words (float32/float64 or integers) in the
//! style of MPC (Yang, Mukka, Hesaaraki, Burtscher, "MPC: a massively parallel compression
//! algorithm for scientific data", CLUSTER 2015): per chunk, a delta of words, a bit
//! transposition and zero-word elimination. Every bit pattern round-trips exactly (NaNs
//! included); the size varies, so the stream carries its lengths, and it is bounded: a
//! chunk that does not shrink is stored raw.
//!
//! # Stream (all integers little-endian)
//!
//! ```text
//! 0   3   b"MPC"
//! 3   1   version, 1
//! 4   1   word bytes W: 4 or 8
//! 5   1   dim D: 1..=255 (the delta distance in words)
//! 6   2   zero
//! 8   4   chunk words C: a multiple of 64, 64..=65536 (the encoder writes 1024)
//! 12  4   zero
//! 16  8   n: words in the stream
//! 24  4*k chunk lengths in bytes, u32 each, k = ceil(n / C)
//! ..      zero bytes up to a multiple of 8
//! ..      the k chunk payloads, back to back, in order
//! ```
//!
//! Chunk `j` holds words `j*C .. min((j+1)*C, n)`; call their count `m`. Its payload length
//! `L` is a multiple of W and at most `m*W`:
//!
//! * `L == m*W`: raw, the `m` input words as they are.
//! * `L < m*W`: compressed. With `x` the chunk's words (as unsigned W-byte integers):
//!   1. delta: `d[i] = x[i] - x[i-D]` (wrapping), with `x[i-D] = 0` for `i < D` (chunks are
//!      independent);
//!   2. zigzag: `z[i] = (d[i] << 1) ^ (d[i] >> (8W-1) arithmetic)`, so small negative
//!      deltas get leading zeros as small positive ones do (an addition to MPC's pipeline);
//!   3. bit transposition of each full group of G = 8W consecutive words (32 words for
//!      W=4, 64 for W=8): word `t[g+j]` bit `i` = word `z[g+i]` bit `j` (bit 0 the least
//!      significant); the `m mod G` trailing words are left as they are;
//!   4. zero-word elimination: a bitmap of `ceil(m/8)` bytes, rounded up to a multiple of
//!      W with zero bytes (bit `k%8` of byte `k/8` set iff `t[k] != 0`), then the nonzero
//!      words of `t` in order. `L` = bitmap bytes + W * (nonzero words).
//!
//!   The encoder stores a chunk compressed exactly when that is smaller than raw.
//!
//! Worst case: [`max_compressed_size`] = `round_up(24 + 4k, 8) + n*W`. A decoder rejects
//! (as [`CodecError::Corrupt`]) a bad header, a length that is not a multiple of W or
//! exceeds `m*W`, a bitmap whose padding bits are set or whose count disagrees with `L`,
//! and a stream whose size is not exactly the header, table and payloads.

use crate::threads::{map_pieces, threads_for, units_per_piece};
use crate::{CodecError, Result};

/// Chunk words the encoder uses (4 KiB of float32, 8 KiB of float64).
pub const CHUNK_WORDS: usize = 1024;
/// Bytes of the fixed header.
pub const HEADER_BYTES: usize = 24;
const MAGIC: &[u8; 3] = b"MPC";
const VERSION: u8 = 1;

/// A validated parameter set: word size and delta distance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mpc {
    word: usize,
    dim: usize,
}

/// What a stream's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub word: usize,
    pub dim: usize,
    pub chunk: usize,
    pub n: usize,
}

impl Header {
    fn chunks(&self) -> usize {
        self.n.div_ceil(self.chunk)
    }

    /// Where the first payload starts.
    pub fn payload_offset(&self) -> usize {
        (HEADER_BYTES + 4 * self.chunks()).next_multiple_of(8)
    }
}

/// The largest stream of `n` words of `word` bytes.
pub fn max_compressed_size(n: usize, word: usize) -> usize {
    (HEADER_BYTES + 4 * n.div_ceil(CHUNK_WORDS)).next_multiple_of(8) + n * word
}

impl Mpc {
    /// `word` 4 or 8 bytes, `dim` 1..=255.
    pub fn new(word: usize, dim: usize) -> Result<Mpc> {
        if word != 4 && word != 8 {
            return Err(CodecError::InvalidArgument(format!(
                "mpc compresses 4- or 8-byte words, not {word}-byte ones"
            )));
        }
        if !(1..=255).contains(&dim) {
            return Err(CodecError::InvalidArgument(format!(
                "mpc dim must be in 1..=255, not {dim}"
            )));
        }
        Ok(Mpc { word, dim })
    }

    pub fn word(&self) -> usize {
        self.word
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Encode the words in `src` (its length a multiple of the word size) into `dst` (at
    /// least [`max_compressed_size`] bytes); returns the bytes written. Large inputs are
    /// split over threads at chunk boundaries (`SHMCOLL_CODEC_THREADS`); the bytes are
    /// those of one thread.
    pub fn encode(&self, src: &[u8], dst: &mut [u8]) -> Result<usize> {
        self.encode_with(src, dst, threads_for(src.len())?)
    }

    /// [`Mpc::encode`] on `threads` threads.
    pub(crate) fn encode_with(&self, src: &[u8], dst: &mut [u8], threads: usize) -> Result<usize> {
        if !src.len().is_multiple_of(self.word) {
            return Err(CodecError::InvalidArgument(format!(
                "mpc input of {} bytes is not a whole number of {}-byte words",
                src.len(),
                self.word
            )));
        }
        let n = src.len() / self.word;
        let need = max_compressed_size(n, self.word);
        if dst.len() < need {
            return Err(CodecError::BufferTooSmall {
                need,
                have: dst.len(),
            });
        }
        let h = Header {
            word: self.word,
            dim: self.dim,
            chunk: CHUNK_WORDS,
            n,
        };
        write_header(&h, dst);
        let start = h.payload_offset();
        dst[HEADER_BYTES..start].fill(0);
        let (table, payload) = dst.split_at_mut(start);
        let table = &mut table[HEADER_BYTES..];
        let written = if self.word == 4 {
            encode_on::<u32>(src, self.dim, table, payload, threads)
        } else {
            encode_on::<u64>(src, self.dim, table, payload, threads)
        };
        Ok(start + written)
    }
}

fn write_header(h: &Header, dst: &mut [u8]) {
    dst[..3].copy_from_slice(MAGIC);
    dst[3] = VERSION;
    dst[4] = h.word as u8;
    dst[5] = h.dim as u8;
    dst[6..8].fill(0);
    dst[8..12].copy_from_slice(&(h.chunk as u32).to_le_bytes());
    dst[12..16].fill(0);
    dst[16..24].copy_from_slice(&(h.n as u64).to_le_bytes());
}

fn corrupt(what: impl Into<String>) -> CodecError {
    CodecError::Corrupt(what.into())
}

/// Read and check a stream's header.
pub fn header(src: &[u8]) -> Result<Header> {
    if src.len() < HEADER_BYTES || &src[..3] != MAGIC {
        return Err(corrupt("not an mpc stream (no MPC header)"));
    }
    if src[3] != VERSION {
        return Err(corrupt(format!(
            "mpc stream version {} (this reads 1)",
            src[3]
        )));
    }
    let word = usize::from(src[4]);
    let dim = usize::from(src[5]);
    let chunk = u32::from_le_bytes(src[8..12].try_into().unwrap_or_default()) as usize;
    let n = u64::from_le_bytes(src[16..24].try_into().unwrap_or_default());
    if (word != 4 && word != 8) || dim == 0 || src[6..8] != [0, 0] || src[12..16] != [0; 4] {
        return Err(corrupt("bad mpc header fields"));
    }
    if chunk == 0 || !chunk.is_multiple_of(64) || chunk > 65536 {
        return Err(corrupt(format!("bad mpc chunk size {chunk}")));
    }
    let n = usize::try_from(n)
        .ok()
        // A chunk of C words takes at least C/8 bytes (its bitmap).
        .filter(|&n| n <= src.len().saturating_mul(8))
        .ok_or_else(|| corrupt("mpc word count larger than the stream"))?;
    let h = Header {
        word,
        dim,
        chunk,
        n,
    };
    if src.len() < h.payload_offset() {
        return Err(corrupt("mpc stream truncated in its chunk table"));
    }
    Ok(h)
}

/// Decode a whole stream into `dst`, which must hold exactly the stream's `n * W` bytes.
/// Large outputs are decoded on several threads (`SHMCOLL_CODEC_THREADS`).
pub fn decode(src: &[u8], dst: &mut [u8]) -> Result<()> {
    decode_with(src, dst, threads_for(dst.len())?)
}

/// [`decode`] on `threads` threads.
pub(crate) fn decode_with(src: &[u8], dst: &mut [u8], threads: usize) -> Result<()> {
    let h = header(src)?;
    if dst.len() != h.n * h.word {
        return Err(CodecError::InvalidArgument(format!(
            "the mpc stream holds {} {}-byte words ({} bytes) but the output has {} bytes",
            h.n,
            h.word,
            h.n * h.word,
            dst.len()
        )));
    }
    let start = h.payload_offset();
    if src[HEADER_BYTES + 4 * h.chunks()..start]
        .iter()
        .any(|&b| b != 0)
    {
        return Err(corrupt("mpc table padding is not zero"));
    }
    let table = &src[HEADER_BYTES..HEADER_BYTES + 4 * h.chunks()];
    let payload = &src[start..];
    if h.word == 4 {
        decode_on::<u32>(&h, table, payload, dst, threads)
    } else {
        decode_on::<u64>(&h, table, payload, dst, threads)
    }
}

/// Encode on `threads` threads, each a run of whole chunks. A run's payload cannot
/// exceed its input bytes (a chunk that does not shrink is stored raw), so each thread
/// writes at its input's offset in `out` (which holds the whole input's bytes), and the
/// runs are then moved down, in order, to lie back to back: the stream of one thread.
fn encode_on<W: Word>(
    src: &[u8],
    dim: usize,
    table: &mut [u8],
    out: &mut [u8],
    threads: usize,
) -> usize {
    let chunks = src.len().div_ceil(CHUNK_WORDS * W::BYTES);
    let per = units_per_piece(chunks, threads);
    if per >= chunks {
        return encode_chunks::<W>(src, dim, table, out);
    }
    // per < chunks, so this is below the input's size: no overflow.
    let run = per * CHUNK_WORDS * W::BYTES;
    let pieces: Vec<_> = src
        .chunks(run)
        .zip(table.chunks_mut(4 * per))
        .zip(out.chunks_mut(run))
        .collect();
    let lens = map_pieces(pieces, |((s, t), o)| encode_chunks::<W>(s, dim, t, o));
    let mut pos = 0;
    for (k, len) in lens.into_iter().enumerate() {
        let at = k * run;
        out.copy_within(at..at + len, pos);
        pos += len;
    }
    pos
}

/// Decode on `threads` threads, each a run of whole chunks and exactly its payload bytes
/// (found from the table's lengths). When the lengths do not add up to the payload the
/// stream is corrupt, and one thread decodes it to report the fault it meets first.
fn decode_on<W: Word>(
    h: &Header,
    table: &[u8],
    payload: &[u8],
    dst: &mut [u8],
    threads: usize,
) -> Result<()> {
    let chunks = h.chunks();
    let per = units_per_piece(chunks, threads);
    let mut starts = Vec::with_capacity(chunks.div_ceil(per) + 1);
    let mut total = Some(0usize);
    for (j, len) in table.chunks_exact(4).enumerate() {
        if j % per == 0 {
            starts.push(total.unwrap_or(usize::MAX));
        }
        let l = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        total = total.and_then(|t| t.checked_add(l));
    }
    if per >= chunks || total != Some(payload.len()) {
        return decode_chunks::<W>(h, table, payload, dst, 0);
    }
    starts.push(payload.len());
    // per < chunks, so this is below the output's size: no overflow.
    let run = per * h.chunk * W::BYTES;
    let pieces: Vec<_> = dst
        .chunks_mut(run)
        .zip(table.chunks(4 * per))
        .zip(starts.windows(2))
        .enumerate()
        .collect();
    map_pieces(pieces, |(k, ((d, t), w))| {
        decode_chunks::<W>(h, t, &payload[w[0]..w[1]], d, k * per)
    })
    .into_iter()
    .collect()
}

/// The two word types, with the operations the pipeline needs.
trait Word: Copy + Default + Eq {
    const BYTES: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    fn sub(self, o: Self) -> Self;
    fn add(self, o: Self) -> Self;
    fn zigzag(self) -> Self;
    fn unzigzag(self) -> Self;
    fn and(self, o: Self) -> Self;
    /// All ones for bit 1, zero for bit 0.
    fn mask(bit: u8) -> Self;
    /// In-place transposition of one group of `8 * BYTES` words (the spec's step 3).
    fn transpose(g: &mut [Self]);
}

macro_rules! word {
    ($t:ty, $s:ty, $bits:expr, $mask:expr) => {
        impl Word for $t {
            const BYTES: usize = $bits / 8;
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap_or_default())
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn zigzag(self) -> Self {
                (self << 1) ^ ((self as $s >> ($bits - 1)) as $t)
            }
            #[inline(always)]
            fn unzigzag(self) -> Self {
                (self >> 1) ^ (self & 1).wrapping_neg()
            }
            #[inline(always)]
            fn and(self, o: Self) -> Self {
                self & o
            }
            #[inline(always)]
            fn mask(bit: u8) -> Self {
                <$t>::from(bit).wrapping_neg()
            }
            /// Recursive block swap (Hacker's Delight 7-3): swapping the off-diagonal
            /// halves, then quarters, ... transposes the bit matrix in log2(bits) rounds.
            #[inline(always)]
            fn transpose(g: &mut [Self]) {
                let a: &mut [$t; $bits] = g.try_into().expect("a full group");
                let mut m: $t = $mask;
                let mut j = $bits / 2;
                while j != 0 {
                    swap_stage(a, j, m);
                    j >>= 1;
                    m ^= m << j;
                }
            }
        }
    };
}

/// One round of the transposition: rows k and k+j for every k with bit j clear, i.e. the
/// lower and upper halves of each run of 2j rows (contiguous, so the loop vectorises).
#[inline(always)]
fn swap_stage<T, const N: usize>(a: &mut [T; N], j: usize, m: T)
where
    T: Copy
        + std::ops::Shr<usize, Output = T>
        + std::ops::Shl<usize, Output = T>
        + std::ops::BitXor<Output = T>
        + std::ops::BitAnd<Output = T>
        + std::ops::BitXorAssign,
{
    for run in a.chunks_exact_mut(2 * j) {
        let (lo, hi) = run.split_at_mut(j);
        for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
            let t = ((*x >> j) ^ *y) & m;
            *x ^= t << j;
            *y ^= t;
        }
    }
}

word!(u32, i32, 32, 0x0000_ffff);
word!(u64, i64, 64, 0x0000_0000_ffff_ffff);

fn bitmap_bytes<W: Word>(m: usize) -> usize {
    m.div_ceil(8).next_multiple_of(W::BYTES)
}

/// Per-call buffers of one chunk (reused across chunks).
struct Scratch<W> {
    /// The chunk's words.
    x: Vec<W>,
    /// The transformed words (steps 1-3).
    t: Vec<W>,
    /// The nonzero words, compacted (one spare slot, so that compaction needs no branch).
    packed: Vec<W>,
}

impl<W: Word> Scratch<W> {
    fn new(chunk: usize) -> Self {
        Scratch {
            x: Vec::with_capacity(chunk),
            t: Vec::with_capacity(chunk),
            packed: Vec::with_capacity(chunk + 1),
        }
    }
}

/// Steps 1-3 on one chunk, from its bytes, into `s.t`.
#[inline(always)]
fn forward<W: Word>(src: &[u8], dim: usize, s: &mut Scratch<W>) {
    s.x.clear();
    s.x.extend(src.chunks_exact(W::BYTES).map(W::load));
    s.t.clear();
    s.t.resize(s.x.len(), W::default());
    let d = dim.min(s.x.len());
    for (o, &a) in s.t[..d].iter_mut().zip(&s.x) {
        *o = a.zigzag();
    }
    for ((o, &a), &b) in s.t[d..].iter_mut().zip(&s.x[d..]).zip(&s.x) {
        *o = a.sub(b).zigzag();
    }
    for g in s.t.chunks_exact_mut(8 * W::BYTES) {
        W::transpose(g);
    }
}

/// Encode every chunk; returns the payload bytes written.
fn encode_chunks<W: Word>(src: &[u8], dim: usize, table: &mut [u8], out: &mut [u8]) -> usize {
    let mut s = Scratch::<W>::new(CHUNK_WORDS);
    let mut pos = 0;
    for (chunk, len) in src
        .chunks(CHUNK_WORDS * W::BYTES)
        .zip(table.chunks_exact_mut(4))
    {
        let m = chunk.len() / W::BYTES;
        forward::<W>(chunk, dim, &mut s);
        let bm = bitmap_bytes::<W>(m);
        // The bitmap goes straight to its place (it fits: bm <= m*W), the nonzero words to
        // `packed`, without branches; whether the chunk stays packed is decided after.
        let bitmap = &mut out[pos..pos + bm];
        bitmap.fill(0);
        s.packed.clear();
        s.packed.resize(m + 1, W::default());
        let mut at = 0;
        for (byte, eight) in bitmap.iter_mut().zip(s.t.chunks(8)) {
            // One byte of the bitmap built in a register (not eight read-modify-writes).
            let mut bits = 0u8;
            for (b, &w) in eight.iter().enumerate() {
                let nz = w != W::default();
                s.packed[at] = w;
                at += usize::from(nz);
                bits |= u8::from(nz) << b;
            }
            *byte = bits;
        }
        let packed = bm + at * W::BYTES;
        let l = if packed < chunk.len() {
            for (o, w) in out[pos + bm..pos + packed]
                .chunks_exact_mut(W::BYTES)
                .zip(&s.packed)
            {
                w.store(o);
            }
            packed
        } else {
            out[pos..pos + chunk.len()].copy_from_slice(chunk);
            chunk.len()
        };
        len.copy_from_slice(&(l as u32).to_le_bytes());
        pos += l;
    }
    pos
}

/// Decode a run of chunks (the first numbered `first` in messages) from exactly its
/// payload bytes.
fn decode_chunks<W: Word>(
    h: &Header,
    table: &[u8],
    payload: &[u8],
    dst: &mut [u8],
    first: usize,
) -> Result<()> {
    let mut s = Scratch::<W>::new(h.chunk);
    let mut pos = 0usize;
    for (j, (out, len)) in dst
        .chunks_mut(h.chunk * W::BYTES)
        .zip(table.chunks_exact(4))
        .enumerate()
    {
        let j = first + j;
        let m = out.len() / W::BYTES;
        let l = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if !l.is_multiple_of(W::BYTES) || l > out.len() || payload.len() - pos < l {
            return Err(corrupt(format!("mpc chunk {j} has a bad length {l}")));
        }
        let body = &payload[pos..pos + l];
        pos += l;
        if l == out.len() {
            out.copy_from_slice(body);
            continue;
        }
        let bm = bitmap_bytes::<W>(m);
        if l < bm {
            return Err(corrupt(format!("mpc chunk {j} is shorter than its bitmap")));
        }
        let (bitmap, words) = body.split_at(bm);
        let ones: usize = bitmap.iter().map(|b| b.count_ones() as usize).sum();
        let tail_bits_set = (m..bm * 8).any(|k| bitmap[k / 8] >> (k % 8) & 1 != 0);
        if tail_bits_set || ones * W::BYTES != words.len() {
            return Err(corrupt(format!("mpc chunk {j} has an inconsistent bitmap")));
        }
        // Expand without branches: the spare zero word after the packed ones is what an
        // absent word reads (masked to zero anyway).
        s.packed.clear();
        s.packed.extend(words.chunks_exact(W::BYTES).map(W::load));
        s.packed.push(W::default());
        s.t.clear();
        s.t.resize(m, W::default());
        let mut at = 0;
        for (k, o) in s.t.iter_mut().enumerate() {
            let bit = (bitmap[k / 8] >> (k % 8)) & 1;
            *o = s.packed[at].and(W::mask(bit));
            at += usize::from(bit);
        }
        // The transposition is its own inverse.
        for g in s.t.chunks_exact_mut(8 * W::BYTES) {
            W::transpose(g);
        }
        let d = h.dim.min(m);
        for w in &mut s.t[..d] {
            *w = w.unzigzag();
        }
        if d == 1 {
            // The running sum in a register: reading back the word just stored would put
            // a store-to-load forwarding on every step of the chain.
            let mut run = s.t[0];
            for w in &mut s.t[1..] {
                run = w.unzigzag().add(run);
                *w = run;
            }
        } else {
            for i in d..m {
                s.t[i] = s.t[i].unzigzag().add(s.t[i - d]);
            }
        }
        for (o, w) in out.chunks_exact_mut(W::BYTES).zip(&s.t) {
            w.store(o);
        }
    }
    if pos != payload.len() {
        return Err(corrupt(format!(
            "mpc stream has {} bytes after its last chunk",
            payload.len() - pos
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
