//! Embedded coding of the bit planes of one block's four coefficients (zfp's
//! `encode_few_ints` / `decode_few_ints` for blocks of 4), table driven.
//!
//! The code of one bit plane depends only on the plane's 4 bits and on `n`, the number of
//! coefficients already known to be significant, so it is looked up (at most 7 bits).
//! Under a bit budget zfp writes exactly a prefix of the unbudgeted code, so the encoder
//! truncates the last plane's code. The decoder is not prefix-closed in the same way
//! (a plane cut short by the budget still marks a coefficient significant), so it uses the
//! tables only while at least 7 budget bits remain and finishes bit by bit.

use super::bits::{mask, BitReader, BitWriter};

const BLOCK: u32 = 4;

/// Encoder table: for `n` in 0..=4 and plane bits `x`, `code | len << 8 | n' << 12`.
static ENC: [[u16; 16]; 5] = enc_table();
/// Decoder table: for `n` and the 7 stream bits after the `n` verbatim ones,
/// `x_high | len << 4 | n' << 8` (`len` counts only the bits after the verbatim ones).
static DEC: [[u16; 128]; 5] = dec_table();

const fn enc_entry(n0: u32, x0: u32) -> u16 {
    // The first n0 bits are sent verbatim.
    let mut code = x0 & ((1 << n0) - 1);
    let mut len = n0;
    let mut n = n0;
    let mut x = x0 >> n0;
    // Group tests: "is any remaining bit set", then the position of the next one in
    // unary (the last position is implied).
    while n < BLOCK {
        let any = (x != 0) as u32;
        code |= any << len;
        len += 1;
        if any == 0 {
            break;
        }
        while n < BLOCK - 1 {
            let bit = x & 1;
            code |= bit << len;
            len += 1;
            if bit == 1 {
                break;
            }
            x >>= 1;
            n += 1;
        }
        x >>= 1;
        n += 1;
    }
    (code | (len << 8) | (n << 12)) as u16
}

const fn enc_table() -> [[u16; 16]; 5] {
    let mut t = [[0u16; 16]; 5];
    let mut n = 0;
    while n < 5 {
        let mut x = 0;
        while x < 16 {
            t[n][x] = enc_entry(n as u32, x as u32);
            x += 1;
        }
        n += 1;
    }
    t
}

const fn dec_entry(n0: u32, p: u32) -> u16 {
    let mut x = 0u32;
    let mut len = 0u32;
    let mut n = n0;
    while n < BLOCK {
        let any = (p >> len) & 1;
        len += 1;
        if any == 0 {
            break;
        }
        while n < BLOCK - 1 {
            let bit = (p >> len) & 1;
            len += 1;
            if bit == 1 {
                break;
            }
            n += 1;
        }
        x |= 1 << n;
        n += 1;
    }
    (x | (len << 4) | (n << 8)) as u16
}

const fn dec_table() -> [[u16; 128]; 5] {
    let mut t = [[0u16; 128]; 5];
    let mut n = 0;
    while n < 5 {
        let mut p = 0;
        while p < 128 {
            t[n][p] = dec_entry(n as u32, p as u32);
            p += 1;
        }
        n += 1;
    }
    t
}

/// Bit `k` of each coefficient, coefficient `i` in bit `i`.
#[inline(always)]
fn plane(u: &[u64; 4], k: u32) -> usize {
    (((u[0] >> k) & 1)
        | (((u[1] >> k) & 1) << 1)
        | (((u[2] >> k) & 1) << 2)
        | (((u[3] >> k) & 1) << 3)) as usize
}

/// Code planes `prec-1` down to 0 of `u` into at most `budget` bits; returns the bits
/// written (the caller pads to the budget).
#[inline(always)]
pub(super) fn encode(w: &mut BitWriter<'_>, u: &[u64; 4], prec: u32, budget: u32) -> u32 {
    let mut bits = budget;
    // Planes above the highest set bit are empty; with nothing significant yet each of
    // them codes as a single 0.
    let top = 64 - (u[0] | u[1] | u[2] | u[3]).leading_zeros();
    let skip = (prec - top).min(bits);
    w.zeros(skip);
    bits -= skip;
    let mut n = 0usize;
    let mut k = top;
    while bits > 0 && k > 0 {
        k -= 1;
        let e = ENC[n][plane(u, k)] as u32;
        let (code, len) = ((e & 0xff) as u64, (e >> 8) & 0xf);
        if len <= bits {
            w.put(code, len);
            bits -= len;
            n = (e >> 12) as usize;
        } else {
            w.put(code & mask(bits), bits);
            bits = 0;
        }
    }
    budget - bits
}

/// Decode planes `prec-1` down to `kmin` from at most `budget` bits at the reader's
/// position (the reader advances past what was read).
#[inline(always)]
pub(super) fn decode(r: &mut BitReader<'_>, prec: u32, kmin: u32, budget: u32) -> [u64; 4] {
    let mut u = [0u64; 4];
    let mut bits = budget;
    let mut n = 0u32;
    let mut k = prec;
    while bits > 0 && k > kmin {
        let x;
        if bits >= 7 {
            let p = r.peek();
            if n == 0 && p & 1 == 0 {
                // A run of empty planes, one 0 bit each (57 bits of p are valid).
                let z = p.trailing_zeros().min(57).min(k - kmin).min(bits);
                r.skip(z);
                bits -= z;
                k -= z;
                continue;
            }
            let e = DEC[n as usize][((p >> n) & 0x7f) as usize] as u32;
            let len = n + ((e >> 4) & 0xf);
            x = (p & mask(n)) as u32 | (e & 0xf);
            r.skip(len);
            bits -= len;
            n = e >> 8;
        } else {
            x = decode_plane_slow(r, &mut n, &mut bits);
        }
        k -= 1;
        for (i, c) in u.iter_mut().enumerate() {
            *c |= (((x >> i) & 1) as u64) << k;
        }
    }
    u
}

/// One plane exactly as zfp's `decode_few_ints` reads it under a small budget.
#[cold]
fn decode_plane_slow(r: &mut BitReader<'_>, n: &mut u32, bits: &mut u32) -> u32 {
    let m = (*n).min(*bits);
    *bits -= m;
    let mut x = r.read(m) as u32;
    while *n < BLOCK && *bits > 0 {
        *bits -= 1;
        if r.read(1) == 0 {
            break;
        }
        while *n < BLOCK - 1 && *bits > 0 {
            *bits -= 1;
            if r.read(1) != 0 {
                break;
            }
            *n += 1;
        }
        // Reached also when the budget ran out: zfp then marks position n significant.
        x += 1 << *n;
        *n += 1;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_lengths() {
        // Nothing significant, empty plane: one bit.
        assert_eq!(ENC[0][0], 1 << 8);
        // All four become significant at once from n = 0: 1,1, 1,1, 1,1, 1 -> 7 bits.
        assert_eq!(ENC[0][15], 0x7f | (7 << 8) | (4 << 12));
        // Only the last coefficient: 1, 0, 0, 0 (implied) -> 4 bits.
        assert_eq!(ENC[0][8], 1 | (4 << 8) | (4 << 12));
        // Everything significant: the plane verbatim.
        for x in 0..16 {
            assert_eq!(ENC[4][x], x as u16 | (4 << 8) | (4 << 12));
        }
    }

    #[test]
    fn decoder_table_inverts_encoder_table() {
        for n in 0..5 {
            for x in 0..16u32 {
                // Only bits above n can become significant through the group tests.
                let e = ENC[n][x as usize] as u32;
                let (code, len) = (e & 0xff, (e >> 8) & 0xf);
                let p = code >> n;
                let d = DEC[n][p as usize] as u32;
                assert_eq!((d >> 4) & 0xf, len - n as u32, "n={n} x={x}");
                assert_eq!(d >> 8, e >> 12);
                assert_eq!((code & ((1 << n) - 1)) | (d & 0xf), x, "n={n} x={x}");
            }
        }
    }
}
