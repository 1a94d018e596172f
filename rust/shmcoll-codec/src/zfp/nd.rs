//! The blocks of 2-D, 3-D and 4-D arrays: zfp's gather of a block of 4^d values (x, the
//! last C axis, fastest), the padding of partial blocks (`pad_block` along each axis in
//! turn), the scatter of decoded blocks, and the serial loops over the blocks of one
//! array in zfp's order (x fastest, then y, z, w). Each block takes exactly `4^d * rate`
//! stream bits.

use super::bits::{BitReader, BitWriter};
use super::planes_nd;
use super::scalar::Real;

/// An array's extents in zfp's order, `[nx, ny, nz, nw]` (x = the last C axis), 1 for
/// the axes it does not have; `dims` axes (2..=4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Extents {
    pub(super) ext: [usize; 4],
    pub(super) dims: usize,
}

impl Extents {
    /// Element strides of y, z and w in the C-contiguous array (x's is 1).
    fn strides(&self) -> [usize; 4] {
        let [nx, ny, nz, _] = self.ext;
        [1, nx, nx * ny, nx * ny * nz]
    }
}

/// Axes of a block of `N` = 4^d values.
const fn dims_of(n: usize) -> usize {
    match n {
        16 => 2,
        64 => 3,
        256 => 4,
        _ => panic!("N-D blocks hold 16, 64 or 256 values"),
    }
}

/// zfp's `pad_block`: values `n..4` of the line at `base` with `stride` (n = 1..=3).
#[inline(always)]
fn pad_line<F: Real>(q: &mut [F], base: usize, stride: usize, n: usize) {
    let at = |i: usize| base + i * stride;
    if n <= 1 {
        q[at(1)] = q[at(0)];
    }
    if n <= 2 {
        q[at(2)] = q[at(1)];
    }
    q[at(3)] = q[at(0)];
}

/// The values of the block whose first value is at coordinates `at` (x first), in block
/// order, partial blocks padded as zfp pads them.
#[inline(always)]
fn gather<F: Real, const N: usize>(src: &[F], e: Extents, at: [usize; 4], q: &mut [F; N]) {
    let dims = dims_of(N);
    let cnt = block_rows(e, at, dims, |row, qi, n| {
        q[qi..qi + n].copy_from_slice(&src[row..row + n]);
    });
    // Pad along x, then y, z, w. Lines outside the data along a later axis are padded
    // too (from stale values) and then overwritten by that axis' padding, which reads
    // only lines inside: the result is zfp's.
    for (a, &n) in cnt.iter().enumerate().take(dims) {
        if n == 4 {
            continue;
        }
        let stride = 1 << (2 * a);
        for base in 0..N {
            if (base / stride) % 4 == 0 {
                pad_line(q, base, stride, n);
            }
        }
    }
}

/// Write the part of a decoded block inside the array back to `dst`.
#[inline(always)]
fn scatter<F: Real, const N: usize>(q: &[F; N], e: Extents, at: [usize; 4], dst: &mut [F]) {
    block_rows(e, at, dims_of(N), |row, qi, n| {
        dst[row..row + n].copy_from_slice(&q[qi..qi + n]);
    });
}

/// The rows (along x) of the block whose first value is at `at` that lie inside the array:
/// `row(array offset, block offset, values)` for each; returns the values inside along
/// each axis (1 beyond `dims`).
#[inline(always)]
fn block_rows(
    e: Extents,
    at: [usize; 4],
    dims: usize,
    mut row: impl FnMut(usize, usize, usize),
) -> [usize; 4] {
    let mut cnt = [1usize; 4];
    for a in 0..dims {
        cnt[a] = (e.ext[a] - at[a]).min(4);
    }
    let s = e.strides();
    let origin: usize = (0..4).map(|a| at[a] * s[a]).sum();
    for w in 0..cnt[3] {
        for z in 0..cnt[2] {
            for y in 0..cnt[1] {
                row(
                    origin + y * s[1] + z * s[2] + w * s[3],
                    4 * y + 16 * z + 64 * w,
                    cnt[0],
                );
            }
        }
    }
    cnt
}

/// Coordinates of the first value of every block, in zfp's order.
fn block_origins(e: Extents) -> impl Iterator<Item = [usize; 4]> {
    let [nx, ny, nz, nw] = e.ext;
    (0..nw).step_by(4).flat_map(move |w| {
        (0..nz).step_by(4).flat_map(move |z| {
            (0..ny)
                .step_by(4)
                .flat_map(move |y| (0..nx).step_by(4).map(move |x| [x, y, z, w]))
        })
    })
}

#[inline(always)]
fn encode_block<F: Real, const N: usize, const W: usize>(
    w: &mut BitWriter<'_>,
    block: &[F; N],
    maxbits: u32,
) {
    let mut u = [0u64; N];
    match F::forward_nd(block, &mut u) {
        None => w.zeros(maxbits),
        Some(e) => {
            w.put(((e as u64) << 1) | 1, F::EBITS + 1);
            let budget = maxbits - 1 - F::EBITS;
            let used = planes_nd::encode::<W>(w, &u, F::PREC, budget);
            w.zeros(budget - used);
        }
    }
}

#[inline(always)]
fn decode_block<F: Real, const N: usize, const W: usize>(
    r: &mut BitReader<'_>,
    maxbits: u32,
    block: &mut [F; N],
) {
    let start = r.pos;
    let head = r.read(1 + F::EBITS);
    if head & 1 == 0 {
        *block = [F::default(); N];
    } else {
        let e = (head >> 1) as u32;
        let mut u = [0u64; N];
        let kmin = F::kmin(e, dims_of(N) as u32);
        planes_nd::decode::<W>(r, &mut u, F::PREC, kmin, maxbits - 1 - F::EBITS);
        F::inverse_nd(e, &u, block);
    }
    r.pos = start + maxbits as usize;
}

fn encode_blocks<F: Real, const N: usize, const W: usize>(
    src: &[F],
    e: Extents,
    rate: u32,
    out: &mut [u8],
) -> usize {
    let maxbits = N as u32 * rate;
    let mut w = BitWriter::new(out);
    let mut block = [F::default(); N];
    for at in block_origins(e) {
        gather(src, e, at, &mut block);
        encode_block::<F, N, W>(&mut w, &block, maxbits);
    }
    w.finish()
}

fn decode_blocks<F: Real, const N: usize, const W: usize>(
    stream: &[u8],
    e: Extents,
    rate: u32,
    out: &mut [F],
) {
    let maxbits = N as u32 * rate;
    let mut r = BitReader::new(stream, 0);
    let mut block = [F::default(); N];
    for at in block_origins(e) {
        decode_block::<F, N, W>(&mut r, maxbits, &mut block);
        scatter(&block, e, at, out);
    }
}

/// One N-D stream on the calling thread; `out` holds exactly its bytes, `src` exactly the
/// array's values.
pub(super) fn encode_serial<F: Real>(src: &[F], e: Extents, rate: u32, out: &mut [u8]) -> usize {
    match e.dims {
        2 => encode_blocks::<F, 16, 1>(src, e, rate, out),
        3 => encode_blocks::<F, 64, 1>(src, e, rate, out),
        4 => encode_blocks::<F, 256, 4>(src, e, rate, out),
        d => unreachable!("{d}-D blocks"),
    }
}

/// Decode one N-D stream (exactly its bytes) into `out` (exactly the array's values).
pub(super) fn decode_serial<F: Real>(stream: &[u8], e: Extents, rate: u32, out: &mut [F]) {
    match e.dims {
        2 => decode_blocks::<F, 16, 1>(stream, e, rate, out),
        3 => decode_blocks::<F, 64, 1>(stream, e, rate, out),
        4 => decode_blocks::<F, 256, 4>(stream, e, rate, out),
        d => unreachable!("{d}-D blocks"),
    }
}
