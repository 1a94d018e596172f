use super::*;
use proptest::prelude::*;

/// The positive magnitudes of a format by code, from 0 up to the infinity code, which
/// stands for `2^(emax+1)` (where overflow rounds): codes are monotonic in the value.
fn magnitudes(fmt: Format) -> Vec<f64> {
    let inf: u16 = if fmt == Format::F16 { 0x7c00 } else { 0x7f80 };
    let mut v: Vec<f64> = (0..inf)
        .map(|c| f64::from(f32::from_bits(widener_ref(fmt, c))))
        .collect();
    let last = v[v.len() - 1];
    let prev = v[v.len() - 2];
    v.push(last + (last - prev)); // max + ulp = 2^(emax+1)
    v
}

fn widener_ref(fmt: Format, h: u16) -> u32 {
    match fmt {
        Format::Bf16 => widen_bf16(h),
        Format::F16 => widen_f16(h),
    }
}

/// Nearest-even by search over every code (independent of the bit tricks).
fn nearest(table: &[f64], x: f64) -> u16 {
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    let ax = x.abs();
    let hi = table.partition_point(|&v| v < ax);
    let code = if hi == 0 || table[hi.min(table.len() - 1)] == ax {
        hi.min(table.len() - 1)
    } else if hi == table.len() {
        table.len() - 1
    } else {
        let mid = (table[hi - 1] + table[hi]) / 2.0; // exact: few significant bits
                                                     // Above the midpoint, or on it with an even upper code: round up.
        if ax > mid || (ax == mid && hi.is_multiple_of(2)) {
            hi
        } else {
            hi - 1
        }
    };
    sign | code as u16
}

fn enc32(fmt: Format, x: &[f32]) -> Vec<u16> {
    let mut b = vec![0u8; compressed_size(x.len())];
    encode_f32(fmt, x, &mut b).unwrap();
    b.chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

fn enc64(fmt: Format, x: &[f64]) -> Vec<u16> {
    let mut b = vec![0u8; compressed_size(x.len())];
    encode_f64(fmt, x, &mut b).unwrap();
    b.chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

fn bytes(h: &[u16]) -> Vec<u8> {
    h.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn every_16_bit_pattern_widens_and_narrows_back() {
    for fmt in [Format::Bf16, Format::F16] {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let mut y = vec![0f32; all.len()];
        decode_f32(fmt, &bytes(&all), &mut y).unwrap();
        let mut y64 = vec![0f64; all.len()];
        decode_f64(fmt, &bytes(&all), &mut y64).unwrap();
        let back = enc32(fmt, &y);
        let back64 = enc64(fmt, &y64);
        for (i, &h) in all.iter().enumerate() {
            let nan = widener_ref(fmt, h) & 0x7fff_ffff > 0x7f80_0000;
            assert_eq!(y[i].is_nan(), nan);
            assert!(y64[i].to_bits() == f64::from(y[i]).to_bits() || nan);
            if nan {
                assert!(y64[i].is_nan());
                assert!(f32::from_bits(widener_ref(fmt, back[i])).is_nan());
                assert_eq!(y[i].to_bits() & 0x0040_0000, 0x0040_0000, "quiet");
            } else {
                assert_eq!(back[i], h, "{fmt:?} {h:#06x}");
                assert_eq!(back64[i], h, "{fmt:?} {h:#06x}");
            }
        }
    }
}

#[test]
fn known_values() {
    let f = enc32(
        Format::F16,
        &[
            1.0,
            -2.0,
            65504.0,
            65519.0,
            65520.0,
            1e-8,
            2.9802322e-8,
            f32::NAN,
        ],
    );
    assert_eq!(
        f,
        [0x3c00, 0xc000, 0x7bff, 0x7bff, 0x7c00, 0x0000, 0x0000, 0x7e00]
    );
    // 1 + 2^-8 is half way between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
    let b = enc32(
        Format::Bf16,
        &[1.0, 1.003_906_3, 1.011_718_8, f32::INFINITY, -0.0],
    );
    assert_eq!(b, [0x3f80, 0x3f80, 0x3f82, 0x7f80, 0x8000]);
    // Rounded directly from the double: 1 + 2^-8 + 2^-40 rounds up, though float32 would
    // first round it to the tie 1 + 2^-8 and then to even (down).
    assert_eq!(
        enc64(Format::Bf16, &[1.0 + 2f64.powi(-8) + 2f64.powi(-40)]),
        [0x3f81]
    );
    assert_eq!(
        enc64(Format::F16, &[1e300, -1e-300, f64::NAN]),
        [0x7c00, 0x8000, 0x7e00]
    );
}

#[test]
fn signaling_nans_become_quiet() {
    let snan = f32::from_bits(0x7f80_0001);
    assert_eq!(enc32(Format::F16, &[snan]), [0x7e00]);
    assert_eq!(enc32(Format::Bf16, &[-snan]), [0xffc0]);
    assert_eq!(
        enc64(Format::Bf16, &[f64::from_bits(0x7ff0_0000_0000_0001)]),
        [0x7fc0]
    );
}

#[test]
fn bad_buffers() {
    let mut out = [0u8; 3];
    assert_eq!(
        encode_f32(Format::F16, &[1.0, 2.0], &mut out),
        Err(CodecError::BufferTooSmall { need: 4, have: 3 })
    );
    let mut y = [0f32; 2];
    assert!(matches!(
        decode_f32(Format::F16, &[0; 3], &mut y),
        Err(CodecError::Corrupt(_))
    ));
    assert!(matches!(
        Format::parse("float8"),
        Err(CodecError::InvalidArgument(_))
    ));
}

proptest! {
    #[test]
    fn f32_narrowing_is_nearest_even(bits in prop::collection::vec(any::<u32>(), 1..200)) {
        let x: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        for fmt in [Format::Bf16, Format::F16] {
            let table = magnitudes(fmt);
            let h = enc32(fmt, &x);
            for (&v, &c) in x.iter().zip(&h) {
                if v.is_nan() {
                    prop_assert!(f32::from_bits(widener_ref(fmt, c)).is_nan());
                } else {
                    prop_assert_eq!(c, nearest(&table, f64::from(v)), "{:?} {:e}", fmt, v);
                }
            }
        }
    }

    #[test]
    fn f64_narrowing_is_nearest_even(
        x in prop::collection::vec(
            prop_oneof![
                any::<u64>().prop_map(f64::from_bits),
                -1e5f64..1e5,
                -1e-5f64..1e-5,
                (-1e-38f64..1e-38),
            ],
            1..200,
        ),
    ) {
        for fmt in [Format::Bf16, Format::F16] {
            let table = magnitudes(fmt);
            let h = enc64(fmt, &x);
            for (&v, &c) in x.iter().zip(&h) {
                if v.is_nan() {
                    prop_assert!(f32::from_bits(widener_ref(fmt, c)).is_nan());
                } else {
                    prop_assert_eq!(c, nearest(&table, v), "{:?} {:e}", fmt, v);
                }
            }
        }
    }
}

#[test]
fn the_portable_loops_give_the_dispatched_bytes() {
    let x: Vec<f32> = (0..5000u32)
        .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9)))
        .collect();
    let x64: Vec<f64> = (0..5000u64)
        .map(|i| f64::from_bits(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect();
    for fmt in [Format::Bf16, Format::F16] {
        let (mut a, mut b) = (vec![0u8; 10000], vec![0u8; 10000]);
        encode_f32(fmt, &x, &mut a).unwrap();
        encode_f32_loops(fmt, &x, &mut b);
        assert_eq!(a, b);
        encode_f64(fmt, &x64, &mut a).unwrap();
        encode_f64_loops(fmt, &x64, &mut b);
        assert_eq!(a, b);
        let (mut y, mut z) = (vec![0f32; 5000], vec![0f32; 5000]);
        decode_f32(fmt, &a, &mut y).unwrap();
        decode_f32_loops(fmt, &a, &mut z);
        assert!(y.iter().zip(&z).all(|(p, q)| p.to_bits() == q.to_bits()));
        let (mut y, mut z) = (vec![0f64; 5000], vec![0f64; 5000]);
        decode_f64(fmt, &a, &mut y).unwrap();
        decode_f64_loops(fmt, &a, &mut z);
        assert!(y.iter().zip(&z).all(|(p, q)| p.to_bits() == q.to_bits()));
    }
}

/// Split over any number of threads (more than there are elements included), the
/// stream and the widened arrays are those of one thread, bit for bit, in both formats
/// and from both source widths (NaNs, infinities and subnormals included).
#[test]
fn every_thread_count_gives_the_bytes_of_one_thread() {
    let n = 4099;
    let mut x64: Vec<f64> = (0..n)
        .map(|i| ((i as f64) * 0.71).sin() * 10f64.powi(i as i32 % 13 - 6))
        .collect();
    x64[5] = f64::NAN;
    x64[6] = f64::INFINITY;
    x64[7] = 1e-40;
    let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
    for fmt in [Format::Bf16, Format::F16] {
        let mut one32 = vec![0u8; 2 * n];
        encode_f32_on(fmt, &x32, &mut one32, 1);
        let mut one64 = vec![0u8; 2 * n];
        encode_f64_on(fmt, &x64, &mut one64, 1);
        let mut w32 = vec![0f32; n];
        decode_f32_on(fmt, &one32, &mut w32, 1);
        let mut w64 = vec![0f64; n];
        decode_f64_on(fmt, &one64, &mut w64, 1);
        for threads in (2..=9).chain([64, 5000]) {
            let mut s = vec![0xA5u8; 2 * n];
            encode_f32_on(fmt, &x32, &mut s, threads);
            assert_eq!(s, one32, "{} f32 threads {threads}", fmt.name());
            encode_f64_on(fmt, &x64, &mut s, threads);
            assert_eq!(s, one64, "{} f64 threads {threads}", fmt.name());
            let mut v32 = vec![1f32; n];
            decode_f32_on(fmt, &one32, &mut v32, threads);
            assert!(
                v32.iter()
                    .zip(&w32)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "threads {threads}"
            );
            let mut v64 = vec![1f64; n];
            decode_f64_on(fmt, &one64, &mut v64, threads);
            assert!(
                v64.iter()
                    .zip(&w64)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "threads {threads}"
            );
        }
    }
}
