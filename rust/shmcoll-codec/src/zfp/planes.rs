//! Embedded coding of the bit planes of one block's four coefficients (zfp's
//! `encode_few_ints` / `decode_few_ints` for blocks of 4), table driven.
//!
//! The code of one bit plane depends only on the plane's 4 bits and on `n`, the number of
//! coefficients already known to be significant, so it is looked up (at most 7 bits).
//! Under a bit budget zfp writes exactly a prefix of the unbudgeted code, so the encoder
//! truncates the last plane's code. The decoder is not prefix-closed in the same way
//! (a plane cut short by the budget still marks a coefficient significant), so it uses the
//! tables only while at least 7 budget bits remain and finishes bit by bit.
//!
//! Three shortcuts, each coding exactly what the plane-by-plane loop codes: leading empty
//! planes (one 0 bit each), runs of planes in which nothing new becomes significant (n
//! verbatim bits and a 0 each), and, once all four coefficients are significant, whole
//! planes sent verbatim as nibbles. The encoder reads planes from a 16-plane window of
//! nibbles in stream order; the decoder deposits bits straight into the coefficients.

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

/// Two planes at once: for `n` and index `first | second << 4` (plane nibbles in stream
/// order), `code | len << 16 | n' << 24`.
static ENC2: [[u32; 256]; 5] = enc2_table();

const fn enc2_table() -> [[u32; 256]; 5] {
    let mut t = [[0u32; 256]; 5];
    let mut n = 0;
    while n < 5 {
        let mut x = 0;
        while x < 256 {
            let e1 = enc_entry(n as u32, (x & 15) as u32) as u32;
            let (c1, l1, n1) = (e1 & 0xff, (e1 >> 8) & 0xf, e1 >> 12);
            let e2 = enc_entry(n1, (x >> 4) as u32) as u32;
            let (c2, l2, n2) = (e2 & 0xff, (e2 >> 8) & 0xf, e2 >> 12);
            t[n][x] = (c1 | (c2 << l1)) | ((l1 + l2) << 16) | (n2 << 24);
            x += 1;
        }
        n += 1;
    }
    t
}

/// For n = 1..=3 significant coefficients, the positions of the group bits in a run of
/// planes that each code as n verbatim bits and a 0 (bit n of every (n+1)-bit group).
static GROUP_BITS: [u64; 4] = [0, group_bits(1), group_bits(2), group_bits(3)];

/// For n = 1..=3 significant coefficients, the bits of every window nibble that would
/// make a new one significant.
static NEW_BITS: [u64; 4] = [
    0,
    0xeeee_eeee_eeee_eeee,
    0xcccc_cccc_cccc_cccc,
    0x8888_8888_8888_8888,
];

/// Block budgets (bits for the planes) up to which the encoder takes fewer shortcuts.
const SMALL_BUDGET: u32 = 32;

/// ceil(2^16 / (n + 1)): `x * RECIP[n] >> 16 == x / (n + 1)` for x < 2^14.
static RECIP: [u32; 4] = [0, 32768, 21846, 16384];

const fn group_bits(n: u32) -> u64 {
    let mut m = 0u64;
    let mut at = n;
    while at < 64 {
        m |= 1 << at;
        at += n + 1;
    }
    m
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

/// Bit `k` of each coefficient, coefficient `i` in bit `i` (tests only: the coder reads
/// planes from a window).
#[cfg(test)]
fn plane(u: &[u64; 4], k: u32) -> usize {
    (((u[0] >> k) & 1)
        | (((u[1] >> k) & 1) << 1)
        | (((u[2] >> k) & 1) << 2)
        | (((u[3] >> k) & 1) << 3)) as usize
}

/// `spread4` of every byte.
static SPREAD_BYTE: [u32; 256] = spread_byte_table();

const fn spread_byte_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut b = 0;
    while b < 256 {
        let mut m = 0;
        while m < 8 {
            t[b] |= (((b >> m) & 1) as u32) << (4 * m);
            m += 1;
        }
        b += 1;
    }
    t
}

/// Spread the 16 low bits of `v` to every 4th bit (bit `m` to bit `4m`), by table.
#[inline(always)]
fn spread4_fast(v: u64) -> u64 {
    SPREAD_BYTE[(v & 0xff) as usize] as u64 | (SPREAD_BYTE[((v >> 8) & 0xff) as usize] as u64) << 32
}

/// Spread the 16 low bits of `v` to every 4th bit (bit `m` to bit `4m`).
#[inline(always)]
#[cfg_attr(not(test), allow(dead_code))]
fn spread4(v: u64) -> u64 {
    let mut x = v & 0xffff;
    x = (x | (x << 24)) & 0x0000_00ff_0000_00ff;
    x = (x | (x << 12)) & 0x000f_000f_000f_000f;
    x = (x | (x << 6)) & 0x0303_0303_0303_0303;
    (x | (x << 3)) & 0x1111_1111_1111_1111
}

/// The bits at even positions of `x`, packed (bit `2m` to bit `m`).
#[inline(always)]
fn compress2(x: u64) -> u64 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x >> 4)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x >> 8)) & 0x0000_ffff_0000_ffff;
    (x | (x >> 16)) & 0xffff_ffff
}

/// Spread the 32 low bits of `v` to every other bit (bit `m` to bit `2m`).
#[inline(always)]
fn spread2(v: u64) -> u64 {
    let mut x = v & 0xffff_ffff;
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// Inverse of `spread4`: bit `4m` of `x` to bit `m`.
#[inline(always)]
fn compress4(x: u64) -> u64 {
    let mut x = x & 0x1111_1111_1111_1111;
    x = (x | (x >> 3)) & 0x0303_0303_0303_0303;
    x = (x | (x >> 6)) & 0x000f_000f_000f_000f;
    x = (x | (x >> 12)) & 0x0000_00ff_0000_00ff;
    (x | (x >> 24)) & 0xffff
}

/// Planes `base .. base+16` of the coefficients as nibbles in stream order: plane
/// `base + 15 - j` in nibble `j`, coefficient `i` at bit `i` of each.
#[inline(always)]
fn plane_window(u: &[u64; 4], base: u32) -> u64 {
    let mut w = 0;
    for (i, coeff) in u.iter().enumerate() {
        w |= spread4_fast(coeff >> base) << i;
    }
    // Reverse the nibble order: bytes, then the two nibbles of each byte.
    let w = w.swap_bytes();
    ((w >> 4) & 0x0f0f_0f0f_0f0f_0f0f) | ((w & 0x0f0f_0f0f_0f0f_0f0f) << 4)
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
    // Planes k-1 down to 0 remain; planes base .. base+16 are in `win` (stream order).
    let mut k = top;
    let mut base = u32::MAX;
    let mut win = 0;
    // With a small budget few planes are coded, and the shortcuts below cost more in
    // mispredicted branches than they save, except runs with one significant coefficient
    // (smooth data): otherwise two planes per lookup.
    let shortcuts = budget > SMALL_BUDGET;
    while bits > 0 && k > 0 {
        if k - 1 < base || (k >= 2 && k - 2 < base) {
            base = k.saturating_sub(16);
            win = plane_window(u, base);
        }
        // Plane k-1 in the low nibble, the planes below it next.
        let next = win >> (4 * (base + 16 - k));
        if shortcuts && n == 4 {
            // Everything significant: the planes are sent verbatim.
            let c = (bits / 4).min(k - base);
            if c == 0 {
                // The budget ends inside this plane: its first bits.
                w.put(next & mask(bits), bits);
                bits = 0;
                break;
            }
            w.put(next & mask(4 * c), 4 * c);
            bits -= 4 * c;
            k -= c;
            continue;
        }
        if n == 1 || (shortcuts && n > 1 && n < 4) {
            // A run of planes in which nothing new becomes significant codes as n verbatim
            // bits and a 0 each.
            let quiet = (next & NEW_BITS[n]).trailing_zeros() / 4;
            let runs = quiet.min(k - base).min((bits * RECIP[n]) >> 16);
            if runs > 0 {
                let len = (n as u32 + 1) * runs;
                let code = match n {
                    1 => spread2(compress4(next)),
                    2 => (0..runs).fold(0, |c, j| c | ((next >> (4 * j)) & 3) << (3 * j)),
                    // The nibbles themselves, their top bit (the group test) being 0.
                    _ => next,
                };
                w.put(code & mask(len), len);
                bits -= len;
                k -= runs;
                continue;
            }
        }
        let (code, len, n_after) = if k >= 2 {
            let e = ENC2[n][(next & 0xff) as usize];
            k -= 2;
            ((e & 0xffff) as u64, (e >> 16) & 0xff, (e >> 24) as usize)
        } else {
            let e = ENC[n][(next & 0xf) as usize] as u32;
            k -= 1;
            ((e & 0xff) as u64, (e >> 8) & 0xf, (e >> 12) as usize)
        };
        if len <= bits {
            w.put(code, len);
            bits -= len;
            n = n_after;
        } else {
            // The budget ends inside: zfp writes exactly a prefix of the code.
            w.put(code & mask(bits), bits);
            bits = 0;
        }
    }
    budget - bits
}

/// Set bit `k` of coefficient `i` for each bit `i` of the plane `x`.
#[inline(always)]
fn deposit(u: &mut [u64; 4], x: u64, k: u32) {
    for (i, c) in u.iter_mut().enumerate() {
        *c |= ((x >> i) & 1) << k;
    }
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
        if n == 4 && bits >= 4 {
            // Everything significant: whole planes are plain nibbles (57 bits per peek).
            let c = (bits / 4).min(k - kmin).min(14);
            let rev = (r.peek() & mask(4 * c)).reverse_bits() >> (64 - 4 * c);
            r.skip(4 * c);
            for (t, coeff) in u.iter_mut().rev().enumerate() {
                *coeff |= compress4(rev >> t) << (k - c);
            }
            bits -= 4 * c;
            k -= c;
            continue;
        }
        if n == 4 {
            // The budget ends inside this plane: its first bits.
            k -= 1;
            deposit(&mut u, r.read(bits), k);
            break;
        }
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
            if n > 0 {
                // A run of planes in which nothing new becomes significant: n verbatim
                // bits and a 0 group bit each.
                let step = n + 1;
                // min(a, b) / step == min(a / step, b / step); the division by 2, 3 or 4
                // as a multiplication (exact below 2^14), a hardware divide being slow.
                let most = (p & GROUP_BITS[n as usize])
                    .trailing_zeros()
                    .min(57)
                    .min(bits);
                let runs = ((most * RECIP[n as usize]) >> 16).min(k - kmin);
                if runs > 0 {
                    // Planes k-1 .. k-runs, straight into the coefficients.
                    let lo = k - runs;
                    match n {
                        1 => {
                            let rev = (compress2(p) & mask(runs)).reverse_bits() >> (64 - runs);
                            u[0] |= rev << lo;
                        }
                        2 => {
                            for j in 0..runs {
                                let at = k - 1 - j;
                                u[0] |= ((p >> (3 * j)) & 1) << at;
                                u[1] |= ((p >> (3 * j + 1)) & 1) << at;
                            }
                        }
                        _ => {
                            let rev = (p & mask(4 * runs)).reverse_bits() >> (64 - 4 * runs);
                            for (t, coeff) in u.iter_mut().rev().enumerate().skip(1) {
                                *coeff |= compress4(rev >> t) << lo;
                            }
                        }
                    }
                    k = lo;
                    r.skip(step * runs);
                    bits -= step * runs;
                    continue;
                }
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
        deposit(&mut u, x as u64, k);
    }
    u
}

/// One plane exactly as zfp's `decode_few_ints` reads it under a small budget.
#[inline]
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
    fn spread_and_compress() {
        for v in [0u64, 1, 0xffff, 0x8001, 0x1234, 0xa5a5] {
            let s = spread4(v);
            assert_eq!(s & !0x1111_1111_1111_1111, 0);
            assert_eq!(s.count_ones(), v.count_ones());
            assert_eq!(compress4(s), v);
            assert_eq!(spread4_fast(v), s);
            assert_eq!(compress4(s << 1 | s << 2 | s << 3), 0);
            assert_eq!(compress2(s), spread2_ref(v));
            assert_eq!(spread2(v), spread2_ref(v));
            assert_eq!(compress2(spread2(v | v << 16)), v | v << 16);
        }
        // The window lists planes in stream order, top first.
        let u = [0xdead_beef_u64, 0x1234_5678, 0xffff_0000, 0x0f0f_f0f0];
        for base in [0u32, 5, 16] {
            let w = plane_window(&u, base);
            for j in 0..16 {
                assert_eq!(
                    (w >> (4 * j)) & 15,
                    plane(&u, base + 15 - j) as u64,
                    "base={base} j={j}"
                );
            }
        }
    }

    /// Bit m of v to bit 2m, then packed back from the even bits: bit 4m -> 2m.
    fn spread2_ref(v: u64) -> u64 {
        (0..16).fold(0, |a, m| a | (((v >> m) & 1) << (2 * m)))
    }

    #[test]
    fn reciprocals_divide() {
        for n in 1..4u32 {
            for x in 0..1 << 14 {
                assert_eq!((x * RECIP[n as usize]) >> 16, x / (n + 1));
            }
        }
    }

    #[test]
    fn code_lengths() {
        // Nothing significant, empty plane: one bit.
        assert_eq!(ENC[0][0], 1 << 8);
        // All four become significant at once from n = 0: 1,1, 1,1, 1,1, 1 -> 7 bits.
        assert_eq!(ENC[0][15], 0x7f | (7 << 8) | (4 << 12));
        // Only the last coefficient: 1, 0, 0, 0 (implied) -> 4 bits.
        assert_eq!(ENC[0][8], 1 | (4 << 8) | (4 << 12));
        // Everything significant: the plane verbatim.
        for (x, &e) in ENC[4].iter().enumerate() {
            assert_eq!(e, x as u16 | (4 << 8) | (4 << 12));
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
