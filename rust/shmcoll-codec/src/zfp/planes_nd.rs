//! Embedded coding of the bit planes of one 2-D, 3-D or 4-D block: 16, 64 or 256
//! coefficients (zfp's `encode_few_ints` / `decode_few_ints`, and `encode_many_ints` /
//! `decode_many_ints` for 256, which write and read the same bits).
//!
//! Plane `k` is the word(s) holding bit `k` of every coefficient, coefficient `i` at bit
//! `i % 64` of word `i / 64` (`W` words per plane). The coefficients are turned into planes
//! and back by 64x64 bit-matrix transposes (8x8 ones for the 16 coefficients of 2-D
//! blocks, which fill a quarter of a 64x64 matrix), and every step of the coder is a word
//! operation: the `n` verbatim bits of a plane are one write, a group test is a test of
//! the plane above `n`, and the scan for the next significant coefficient is a
//! trailing-zero count.

use super::bits::{mask, BitReader, BitWriter};

/// Transpose a 64x64 bit matrix in place: bit `j` of `a[i]` becomes bit `i` of `a[j]`.
/// Recursive block swap: exchange the off-diagonal `j x j` blocks, halve `j`.
pub(super) fn transpose64(a: &mut [u64; 64]) {
    let mut j = 32usize;
    let mut m: u64 = 0x0000_0000_ffff_ffff;
    while j != 0 {
        let mut k = 0;
        while k < 64 {
            let t = ((a[k] >> j) ^ a[k + j]) & m;
            a[k] ^= t << j;
            a[k + j] ^= t;
            k = (k + j + 1) & !j;
        }
        j >>= 1;
        m ^= m << j;
    }
}

/// Transpose an 8x8 bit matrix held in a word: bit `c` of byte `r` becomes bit `r` of
/// byte `c`.
#[inline(always)]
pub(super) fn transpose8(mut x: u64) -> u64 {
    let t = (x ^ (x >> 7)) & 0x00aa_00aa_00aa_00aa;
    x ^= t ^ (t << 7);
    let t = (x ^ (x >> 14)) & 0x0000_cccc_0000_cccc;
    x ^= t ^ (t << 14);
    let t = (x ^ (x >> 28)) & 0x0000_0000_f0f0_f0f0;
    x ^ t ^ (t << 28)
}

/// Planes `0..prec` of 16 coefficients (plane `k` in word 0 of `planes[k]`), by 8x8
/// transposes of 8 coefficients times 8 bits each.
#[inline(always)]
fn to_planes16<const W: usize>(u: &[u64], prec: u32, planes: &mut [[u64; W]; 64]) {
    for g in 0..2 {
        for b in 0..(prec / 8) as usize {
            let rows = (0..8).fold(0, |w, j| w | ((u[8 * g + j] >> (8 * b)) & 0xff) << (8 * j));
            let cols = transpose8(rows);
            for c in 0..8 {
                planes[8 * b + c][0] |= ((cols >> (8 * c)) & 0xff) << (8 * g);
            }
        }
    }
}

/// The inverse of [`to_planes16`]: 16 coefficients from planes `0..prec`.
#[inline(always)]
fn from_planes16<const W: usize>(planes: &[[u64; W]; 64], prec: u32, out: &mut [u64]) {
    out.fill(0);
    for g in 0..2 {
        for b in 0..(prec / 8) as usize {
            let rows = (0..8).fold(0, |w, c| {
                w | ((planes[8 * b + c][0] >> (8 * g)) & 0xff) << (8 * c)
            });
            let coeffs = transpose8(rows);
            for j in 0..8 {
                out[8 * g + j] |= ((coeffs >> (8 * j)) & 0xff) << (8 * b);
            }
        }
    }
}

/// The first set bit of `p` at position `from` or above, if any.
#[inline(always)]
fn next_set<const W: usize>(p: &[u64; W], from: u32) -> Option<u32> {
    let mut g = (from / 64) as usize;
    if g >= W {
        return None;
    }
    let mut word = p[g] & (u64::MAX << (from % 64));
    loop {
        if word != 0 {
            return Some(64 * g as u32 + word.trailing_zeros());
        }
        g += 1;
        if g == W {
            return None;
        }
        word = p[g];
    }
}

/// Code planes `prec-1` down to 0 of the `size` coefficients `u` (16, 64 or 256; `W` =
/// words per plane) into at most `budget` bits; returns the bits written (the caller pads
/// to the budget).
pub(super) fn encode<const W: usize>(
    w: &mut BitWriter<'_>,
    u: &[u64],
    prec: u32,
    budget: u32,
) -> u32 {
    let size = u.len() as u32;
    debug_assert!(size <= 64 * W as u32);
    let mut planes = [[0u64; W]; 64];
    let all = u.iter().fold(0, |a, c| a | c);
    if size == 16 {
        to_planes16(u, prec, &mut planes);
    } else {
        for (g, chunk) in u.chunks(64).enumerate() {
            let mut m = [0u64; 64];
            m[..chunk.len()].copy_from_slice(chunk);
            transpose64(&mut m);
            for (k, plane) in planes.iter_mut().enumerate() {
                plane[g] = m[k];
            }
        }
    }
    let mut bits = budget;
    // Planes above the highest set bit code as a single 0 each (nothing significant yet).
    let top = 64 - all.leading_zeros();
    let skip = (prec - top.min(prec)).min(bits);
    w.zeros(skip);
    bits -= skip;
    let mut k = prec - skip;
    let mut n = 0u32;
    while bits > 0 && k > 0 {
        k -= 1;
        let p = &planes[k as usize];
        // The first n bits, verbatim.
        let m = n.min(bits);
        let mut left = m;
        for &word in p.iter() {
            if left == 0 {
                break;
            }
            let c = left.min(64);
            w.put(word & mask(c), c);
            left -= c;
        }
        bits -= m;
        // Group tests, each followed by the position of the next significant coefficient
        // in unary (zeros, then a one, the one implied at the last position).
        while bits > 0 && n < size {
            bits -= 1;
            let Some(j) = next_set(p, n) else {
                w.put(0, 1);
                break;
            };
            w.put(1, 1);
            let zeros = j - n;
            let last = j == size - 1;
            let len = zeros + u32::from(!last);
            if len > bits {
                // The budget ends inside the run of zeros: its prefix.
                w.zeros(bits);
                bits = 0;
                break;
            }
            w.zeros(zeros);
            if !last {
                w.put(1, 1);
            }
            bits -= len;
            n = j + 1;
        }
    }
    budget - bits
}

/// Read `limit` bits at most, up to and including the first 1; returns the number of
/// zeros before it (`limit` if there was none within the limit, nothing more consumed).
#[inline(always)]
fn read_zeros(r: &mut BitReader<'_>, limit: u32) -> u32 {
    let mut z = 0;
    while z < limit {
        let t = r.peek().trailing_zeros().min(57).min(limit - z);
        r.skip(t);
        z += t;
        if z < limit && t < 57 {
            // Stopped at a one within the limit: consume it.
            r.skip(1);
            return z;
        }
    }
    limit
}

/// Decode planes `prec-1` down to `kmin` of `out.len()` coefficients (16, 64 or 256; `W`
/// words per plane) from at most `budget` bits at the reader's position.
pub(super) fn decode<const W: usize>(
    r: &mut BitReader<'_>,
    out: &mut [u64],
    prec: u32,
    kmin: u32,
    budget: u32,
) {
    let size = out.len() as u32;
    let mut planes = [[0u64; W]; 64];
    let mut bits = budget;
    let mut n = 0u32;
    let mut k = prec;
    while bits > 0 && k > kmin {
        k -= 1;
        let p = &mut planes[k as usize];
        let m = n.min(bits);
        bits -= m;
        let mut at = 0;
        while at < m {
            let c = (m - at).min(32);
            p[(at / 64) as usize] |= r.read(c) << (at % 64);
            at += c;
        }
        while bits > 0 && n < size {
            bits -= 1;
            if r.read(1) == 0 {
                break;
            }
            let limit = bits.min(size - 1 - n);
            let z = read_zeros(r, limit);
            // A one after z zeros costs z + 1 bits; no one within the limit, z bits (the
            // budget ran out or the last position is implied: either way position n + z
            // is significant, as zfp's decoder has it).
            bits -= if z < limit { z + 1 } else { z };
            n += z;
            p[(n / 64) as usize] |= 1 << (n % 64);
            n += 1;
        }
    }
    if size == 16 {
        from_planes16(&planes, prec, out);
        return;
    }
    for (g, chunk) in out.chunks_mut(64).enumerate() {
        let mut m = [0u64; 64];
        for (k, plane) in planes.iter().enumerate() {
            m[k] = plane[g];
        }
        transpose64(&mut m);
        chunk.copy_from_slice(&m[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_is_the_bit_transpose() {
        let mut a = [0u64; 64];
        for (i, row) in a.iter_mut().enumerate() {
            *row = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 * 2 + 1);
        }
        let orig = a;
        transpose64(&mut a);
        for (i, row) in orig.iter().enumerate() {
            for (j, col) in a.iter().enumerate() {
                assert_eq!((col >> i) & 1, (row >> j) & 1, "({i}, {j})");
            }
        }
        transpose64(&mut a);
        assert_eq!(a, orig);
    }

    #[test]
    fn small_transposes_are_the_bit_transpose() {
        let x = 0x0123_4567_89ab_cdefu64;
        let t = transpose8(x);
        for r in 0..8 {
            for c in 0..8 {
                assert_eq!((t >> (8 * c + r)) & 1, (x >> (8 * r + c)) & 1, "({r}, {c})");
            }
        }
        let u: Vec<u64> = (0..16u64)
            .map(|i| 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i + 1))
            .collect();
        for prec in [32u32, 64] {
            let want: Vec<u64> = u.iter().map(|c| c & mask(prec)).collect();
            let mut planes = [[0u64; 1]; 64];
            to_planes16(&want, prec, &mut planes);
            for (k, plane) in planes.iter().enumerate() {
                for (i, c) in want.iter().enumerate() {
                    assert_eq!(
                        (plane[0] >> i) & 1,
                        (c >> k) & 1,
                        "plane {k} coefficient {i}"
                    );
                }
            }
            let mut back = vec![0u64; 16];
            from_planes16(&planes, prec, &mut back);
            assert_eq!(back, want);
        }
    }

    #[test]
    fn next_set_spans_words() {
        let p = [0u64, 1 << 5, 0, 1 << 63];
        assert_eq!(next_set(&p, 0), Some(69));
        assert_eq!(next_set(&p, 69), Some(69));
        assert_eq!(next_set(&p, 70), Some(255));
        assert_eq!(next_set(&[1u64], 1), None);
    }
}
