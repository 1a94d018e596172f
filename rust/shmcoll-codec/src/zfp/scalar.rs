//! The per-type half of zfp: block-floating-point cast, the lifting transform and the
//! negabinary map, for float32 (32-bit integers) and float64 (64-bit integers), for the
//! blocks of 4 values of 1-D arrays and the blocks of 4^d values (d = 2, 3, 4) of N-D ones.
//! The coefficients travel as `u64` for both types so that the bit-plane coders are shared.

use super::perm;

/// A float type zfp codes.
pub(super) trait Real: Copy + Default {
    /// Bits of the biased block exponent in the stream.
    const EBITS: u32;
    /// Integer precision: bit planes per block.
    const PREC: u32;

    /// Forward transform of one block: `None` for a block of zeros, else the biased
    /// exponent `e` (1 ..= 2^EBITS - 1) and the four negabinary coefficients.
    fn forward(block: &[Self; 4]) -> Option<(u32, [u64; 4])>;

    /// Inverse transform of decoded coefficients with biased exponent `e` (any EBITS-bit
    /// value read from a stream).
    fn inverse(e: u32, coeffs: &[u64; 4]) -> [Self; 4];

    /// Forward transform of one block of `N` = 4^d values (d = 2, 3, 4; x fastest):
    /// `None` for a block of zeros, else the biased exponent, with the negabinary
    /// coefficients in zfp's sequency order in `out`.
    fn forward_nd<const N: usize>(block: &[Self; N], out: &mut [u64; N]) -> Option<u32>;

    /// Inverse of [`Real::forward_nd`] for coefficients decoded with biased exponent `e`.
    fn inverse_nd<const N: usize>(e: u32, coeffs: &[u64; N], out: &mut [Self; N]);

    /// The lowest bit plane decoded for biased exponent `e` in blocks of `dims` axes
    /// (zfp's `intprec - maxprec` with `maxprec = precision(emax, 64, ZFP_MIN_EXP, dims)`).
    fn kmin(e: u32, dims: u32) -> u32;
}

/// Apply `lift` to every line of 4 values along every axis of a block of `N` = 4^d values,
/// the axes in `order` (`true`: x first, as zfp's forward transform; `false`: the last axis
/// first, as its inverse).
#[inline(always)]
fn lift_axes<I: Copy, const N: usize>(
    p: &mut [I; N],
    forward: bool,
    lift: impl Fn([I; 4]) -> [I; 4],
) {
    let mut strides = [0usize; 4];
    let mut dims = 0;
    let mut s = 1;
    while s < N {
        strides[dims] = s;
        dims += 1;
        s *= 4;
    }
    for a in 0..dims {
        let stride = strides[if forward { a } else { dims - 1 - a }];
        for base in 0..N {
            if (base / stride) % 4 != 0 {
                continue;
            }
            let v = lift([
                p[base],
                p[base + stride],
                p[base + 2 * stride],
                p[base + 3 * stride],
            ]);
            p[base] = v[0];
            p[base + stride] = v[1];
            p[base + 2 * stride] = v[2];
            p[base + 3 * stride] = v[3];
        }
    }
}

macro_rules! real_impl {
    (
        $f:ty, $i:ty, $u:ty, bits: $bits:expr, ebits: $ebits:expr, ebias: $ebias:expr,
        mant: $mant:expr, ef_min: $ef_min:expr, nb: $nb:expr, pow2: $pow2:ident,
        lift: $fwd:ident, $inv:ident, cast: $cast:ident
    ) => {
        /// Forward lifting of zfp (the non-orthogonal 4-point decorrelating transform),
        /// in two's-complement arithmetic with arithmetic right shifts.
        #[inline(always)]
        pub(super) fn $fwd(p: [$i; 4]) -> [$i; 4] {
            let [mut x, mut y, mut z, mut w] = p;
            x = x.wrapping_add(w);
            x >>= 1;
            w = w.wrapping_sub(x);
            z = z.wrapping_add(y);
            z >>= 1;
            y = y.wrapping_sub(z);
            x = x.wrapping_add(z);
            x >>= 1;
            z = z.wrapping_sub(x);
            w = w.wrapping_add(y);
            w >>= 1;
            y = y.wrapping_sub(w);
            w = w.wrapping_add(y >> 1);
            y = y.wrapping_sub(w >> 1);
            [x, y, z, w]
        }

        /// Inverse lifting; wraps on overflow, which only streams not written by an
        /// encoder can cause (zfp's C code leaves that undefined).
        #[inline(always)]
        pub(super) fn $inv(p: [$i; 4]) -> [$i; 4] {
            let [mut x, mut y, mut z, mut w] = p;
            y = y.wrapping_add(w >> 1);
            w = w.wrapping_sub(y >> 1);
            y = y.wrapping_add(w);
            w = w.wrapping_shl(1);
            w = w.wrapping_sub(y);
            z = z.wrapping_add(x);
            x = x.wrapping_shl(1);
            x = x.wrapping_sub(z);
            y = y.wrapping_add(z);
            z = z.wrapping_shl(1);
            z = z.wrapping_sub(y);
            w = w.wrapping_add(x);
            x = x.wrapping_shl(1);
            x = x.wrapping_sub(w);
            [x, y, z, w]
        }

        /// 2^k rounded as C's ldexp(1, k) rounds: exact down to the smallest subnormal,
        /// zero below it (2^(min-1) ties to even, i.e. to zero).
        #[inline(always)]
        pub(super) fn $pow2(k: i32) -> $f {
            let min_normal = 1 - $ebias;
            if k >= min_normal {
                <$f>::from_bits(((k + $ebias) as $u) << $mant)
            } else if k >= min_normal - $mant {
                <$f>::from_bits((1 as $u) << (k - (min_normal - $mant)))
            } else {
                0.0
            }
        }

        /// The block-floating-point cast of a block (any length): NaN and infinities
        /// sanitized in place (NaN as +0, +-inf as +-MAX, see the stream spec); `None` for
        /// a block of zeros, else the biased exponent and the scale factor `2^(P-2-emax)`.
        #[inline(always)]
        fn $cast(v: &mut [$f]) -> Option<(u32, $f)> {
            const ABS: $u = <$u>::MAX >> 1;
            const INF: $u = (((1 as $u) << ($bits - 1 - $mant)) - 1) << $mant;
            let mut m = v.iter().fold(0, |m, x| m.max(x.to_bits() & ABS));
            if m >= INF {
                for x in v.iter_mut() {
                    *x = if x.is_nan() { 0.0 } else { x.clamp(<$f>::MIN, <$f>::MAX) };
                }
                m = v.iter().fold(0, |m, x| m.max(x.to_bits() & ABS));
            }
            if m == 0 {
                return None;
            }
            // Biased exponent field of the block maximum, clamped from below so that the
            // scale factor stays a finite float (zfp: undefined there).
            let ef = ((m >> $mant) as i32).max($ef_min);
            // frexp exponent of the maximum: m = f * 2^emax, f in [1/2, 1).
            let emax = ef - ($ebias - 1);
            let s = <$f>::from_bits((($ebias + ($bits - 2) - emax) as $u) << $mant);
            Some(((emax + $ebias) as u32, s))
        }

        impl Real for $f {
            const EBITS: u32 = $ebits;
            const PREC: u32 = $bits;

            #[inline(always)]
            fn forward(block: &[$f; 4]) -> Option<(u32, [u64; 4])> {
                let mut v = *block;
                let (e, s) = $cast(&mut v)?;
                // |x * s| < 2^(bits-2), exact (power-of-two scaling), truncated to integer.
                let c = $fwd(v.map(|x| (x * s) as $i));
                Some((e, c.map(|c| ((c as $u).wrapping_add($nb) ^ $nb) as u64)))
            }

            #[inline(always)]
            fn forward_nd<const N: usize>(block: &[$f; N], out: &mut [u64; N]) -> Option<u32> {
                let mut v = *block;
                let (e, s) = $cast(&mut v)?;
                let mut q = v.map(|x| (x * s) as $i);
                lift_axes(&mut q, true, $fwd);
                for (o, &at) in out.iter_mut().zip(perm::for_size(N)) {
                    *o = ((q[at as usize] as $u).wrapping_add($nb) ^ $nb) as u64;
                }
                Some(e)
            }

            #[inline(always)]
            fn inverse_nd<const N: usize>(e: u32, coeffs: &[u64; N], out: &mut [$f; N]) {
                let s = $pow2(e as i32 - $ebias - ($bits - 2));
                let mut q = [0 as $i; N];
                for (&u, &at) in coeffs.iter().zip(perm::for_size(N)) {
                    q[at as usize] = ((u as $u) ^ $nb).wrapping_sub($nb) as $i;
                }
                lift_axes(&mut q, false, $inv);
                for (o, q) in out.iter_mut().zip(q) {
                    *o = q as $f * s;
                }
            }

            #[inline(always)]
            fn inverse(e: u32, coeffs: &[u64; 4]) -> [$f; 4] {
                let emax = e as i32 - $ebias;
                let s = $pow2(emax - ($bits - 2));
                let c = coeffs.map(|u| ((u as $u) ^ $nb).wrapping_sub($nb) as $i);
                $inv(c).map(|q| q as $f * s)
            }

            #[inline(always)]
            fn kmin(e: u32, dims: u32) -> u32 {
                // maxprec = min(64, max(0, emax - ZFP_MIN_EXP + 2 * (dims + 1))).
                let emax = e as i32 - $ebias;
                let maxprec = (emax + 1074 + 2 * (dims as i32 + 1)).clamp(0, 64) as u32;
                $bits - maxprec.min($bits)
            }
        }
    };
}

real_impl!(
    f32, i32, u32, bits: 32, ebits: 8, ebias: 127, mant: 23,
    // 2^(30 - emax) overflows float32 for emax < -97, i.e. exponent field < 29.
    ef_min: 29, nb: 0xaaaa_aaaa_u32, pow2: pow2_f32, lift: fwd_lift32, inv_lift32, cast: cast32
);
real_impl!(
    f64, i64, u64, bits: 64, ebits: 11, ebias: 1023, mant: 52,
    // 2^(62 - emax) overflows float64 for emax < -961, i.e. exponent field < 61.
    ef_min: 61, nb: 0xaaaa_aaaa_aaaa_aaaa_u64, pow2: pow2_f64, lift: fwd_lift64, inv_lift64, cast: cast64
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_matches_ldexp_rounding() {
        assert_eq!(pow2_f32(0), 1.0);
        assert_eq!(pow2_f32(-126), f32::MIN_POSITIVE);
        assert_eq!(pow2_f32(-149), f32::from_bits(1));
        assert_eq!(pow2_f32(-150), 0.0);
        assert_eq!(pow2_f32(127), 2f32.powi(127));
        assert_eq!(pow2_f64(-1074), f64::from_bits(1));
        assert_eq!(pow2_f64(-1075), 0.0);
        assert_eq!(pow2_f64(1023), 2f64.powi(1023));
        for k in -160..128 {
            let want = if k >= -149 { 2f64.powi(k) } else { 0.0 };
            assert_eq!(pow2_f32(k) as f64, want, "2^{k}");
        }
    }

    #[test]
    fn lifting_inverts_on_the_encoder_range() {
        let cases: [[i32; 4]; 4] = [
            [0, 0, 0, 0],
            [(1 << 30) - 1, -(1 << 30) + 1, 12345, -1],
            [1 << 29, 1 << 29, 1 << 29, 1 << 29],
            [-7, 3, 1, -(1 << 30) + 1],
        ];
        for c in cases {
            let back = inv_lift32(fwd_lift32(c));
            // The lifting is not exactly invertible (the shifts lose low bits): within a
            // few units.
            for (a, b) in c.iter().zip(back) {
                assert!((*a as i64 - b as i64).abs() <= 4, "{c:?} -> {back:?}");
            }
        }
    }

    #[test]
    fn zero_and_negative_zero_blocks_are_empty() {
        assert!(f32::forward(&[0.0, -0.0, 0.0, -0.0]).is_none());
        assert!(f64::forward(&[-0.0; 4]).is_none());
    }

    #[test]
    fn exponents_follow_frexp() {
        // 1.0 = 0.5 * 2^1, so emax = 1 and e = 128 (float32) / 1024 (float64).
        assert_eq!(f32::forward(&[1.0, 0.0, 0.0, 0.0]).unwrap().0, 128);
        assert_eq!(f64::forward(&[0.0, -1.0, 0.0, 0.0]).unwrap().0, 1024);
        assert_eq!(f32::forward(&[f32::MAX; 4]).unwrap().0, 255);
        assert_eq!(f64::forward(&[f64::MAX; 4]).unwrap().0, 2047);
        // Tiny maxima are clamped to the lowest exponent with a finite scale.
        assert_eq!(f32::forward(&[f32::from_bits(1); 4]).unwrap().0, 30);
        assert_eq!(f64::forward(&[f64::from_bits(1); 4]).unwrap().0, 62);
        // NaN and infinities are sanitized.
        assert_eq!(f32::forward(&[f32::NAN; 4]), None);
        assert_eq!(
            f32::forward(&[f32::INFINITY, 0.0, 0.0, 0.0]),
            f32::forward(&[f32::MAX, 0.0, 0.0, 0.0])
        );
    }

    #[test]
    fn kmin_only_for_tiny_float64_exponents() {
        assert_eq!(f32::kmin(0, 1), 0);
        assert_eq!(f64::kmin(1023, 1), 0);
        // emax = -1023: maxprec = 55 in 1-D, 2 more per axis.
        assert_eq!(f64::kmin(0, 1), 9);
        assert_eq!(f64::kmin(9, 1), 0);
        assert_eq!(f64::kmin(8, 1), 1);
        assert_eq!(f64::kmin(0, 2), 7);
        assert_eq!(f64::kmin(0, 4), 3);
        assert_eq!(f64::kmin(3, 4), 0);
    }
}
