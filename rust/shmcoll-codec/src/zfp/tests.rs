//! The table-driven codec against the bit-serial transliteration of zfp (`reference`),
//! the size formula, error bounds and argument errors. Byte equality with zfpy itself is
//! checked by `tests/zfp_golden.rs` and the Python tests.

use super::*;
use crate::threads::BYTES_PER_THREAD;
use proptest::prelude::*;

fn enc32(src: &[f32], rate: u32) -> Vec<u8> {
    let mut out = vec![0xa5; compressed_bytes(src.len(), FloatKind::F32, rate).unwrap()];
    assert_eq!(encode_f32(src, rate, &mut out).unwrap(), out.len());
    out
}

fn enc64(src: &[f64], rate: u32) -> Vec<u8> {
    let mut out = vec![0xa5; compressed_bytes(src.len(), FloatKind::F64, rate).unwrap()];
    assert_eq!(encode_f64(src, rate, &mut out).unwrap(), out.len());
    out
}

fn dec32(stream: &[u8], rate: u32, n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n];
    decode_f32(stream, rate, &mut out).unwrap();
    out
}

fn dec64(stream: &[u8], rate: u32, n: usize) -> Vec<f64> {
    let mut out = vec![f64::NAN; n];
    decode_f64(stream, rate, &mut out).unwrap();
    out
}

fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn bits64(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Floats of every kind: zeros, subnormals, ordinary values, huge values, mixed signs.
fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        Just(0.0f32),
        Just(-0.0f32),
        (-1e6f32..1e6f32),
        any::<u32>().prop_map(|b| f32::from_bits(b & 0x807f_ffff)),
        any::<u32>().prop_map(|b| {
            let x = f32::from_bits(b);
            if x.is_finite() {
                x
            } else {
                f32::MAX
            }
        }),
        Just(f32::MAX),
        Just(-f32::MAX),
    ]
}

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0f64),
        (-1e12f64..1e12f64),
        any::<u64>().prop_map(|b| f64::from_bits(b & 0x800f_ffff_ffff_ffff)),
        any::<u64>().prop_map(|b| {
            let x = f64::from_bits(b);
            if x.is_finite() {
                x
            } else {
                -f64::MAX
            }
        }),
        Just(f64::MAX),
    ]
}

/// Smooth data: a large common value plus small deviations of random scale, so that the
/// lifted coefficients differ by many orders of magnitude and the coder spends many planes
/// with 1, 2 or 3 significant coefficients.
fn smooth_f64() -> impl Strategy<Value = Vec<f64>> {
    (
        -1e6f64..1e6f64,
        0i32..60,
        prop::collection::vec(-1.0f64..1.0, 1..40),
        prop::collection::vec(0i32..20, 1..40),
    )
        .prop_map(|(base, scale, dev, extra)| {
            dev.iter()
                .zip(extra.iter().cycle())
                .map(|(d, e)| base + d * 2f64.powi(-scale - e))
                .collect()
        })
}

#[test]
fn sizes_are_whole_words() {
    assert_eq!(compressed_bytes(0, FloatKind::F32, 8).unwrap(), 0);
    // One block of 4 * 8 = 32 bits rounds up to one word.
    assert_eq!(compressed_bytes(1, FloatKind::F32, 8).unwrap(), 8);
    assert_eq!(compressed_bytes(8, FloatKind::F32, 8).unwrap(), 8);
    assert_eq!(compressed_bytes(9, FloatKind::F32, 8).unwrap(), 16);
    assert_eq!(compressed_bytes(1000, FloatKind::F64, 64).unwrap(), 8000);
    assert_eq!(compressed_bytes(1000, FloatKind::F64, 16).unwrap(), 2000);
    // 3 blocks * 12 bits = 36 bits -> one word.
    assert_eq!(compressed_bytes(12, FloatKind::F32, 3).unwrap(), 8);
    for rate in 3..=32 {
        for n in 0..200usize {
            let want = (n.div_ceil(4) * 4 * rate as usize).div_ceil(64) * 8;
            assert_eq!(compressed_bytes(n, FloatKind::F32, rate).unwrap(), want);
        }
    }
}

#[test]
fn bad_arguments() {
    for (kind, rate) in [
        (FloatKind::F32, 0),
        (FloatKind::F32, 2),
        (FloatKind::F32, 33),
        (FloatKind::F64, 3),
        (FloatKind::F64, 65),
        (FloatKind::F64, 0),
    ] {
        assert!(matches!(
            compressed_bytes(4, kind, rate),
            Err(CodecError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        compressed_bytes(usize::MAX, FloatKind::F64, 64),
        Err(CodecError::InvalidArgument(_))
    ));
    let mut small = [0u8; 8];
    assert_eq!(
        encode_f32(&[1.0; 9], 8, &mut small),
        Err(CodecError::BufferTooSmall { need: 16, have: 8 })
    );
    assert!(matches!(
        encode_f64(&[1.0; 4], 2, &mut small),
        Err(CodecError::InvalidArgument(_))
    ));
    let mut out = [0f32; 9];
    assert!(matches!(
        decode_f32(&small, 8, &mut out),
        Err(CodecError::Corrupt(_))
    ));
    let mut out64 = [0f64; 4];
    // Rate 33 is valid for float64 (not float32); one block takes 3 words.
    assert!(matches!(
        decode_f64(&small, 33, &mut out64[..1]),
        Err(CodecError::Corrupt(_))
    ));
    assert!(matches!(
        decode_f32(&small, 33, &mut out[..1]),
        Err(CodecError::InvalidArgument(_))
    ));
    decode_f64(&small, 16, &mut out64[..1]).unwrap();
    assert!(matches!(
        decode_f64(&[], 16, &mut out64),
        Err(CodecError::Corrupt(_))
    ));
    // Empty arrays are fine.
    assert_eq!(encode_f32(&[], 8, &mut []).unwrap(), 0);
    decode_f64(&[], 16, &mut []).unwrap();
}

#[test]
fn zero_blocks_are_zero_bits_and_decode_to_positive_zero() {
    let s = enc32(&[0.0, -0.0, 0.0, 0.0, -0.0], 5);
    assert!(s.iter().all(|&b| b == 0));
    assert_eq!(bits32(&dec32(&s, 5, 5)), vec![0; 5]);
}

#[test]
fn first_block_header() {
    // 1.0: nonzero bit, then e = 128 in 8 bits: 2 * 128 + 1 = 0x101 in the first 9 bits.
    let s = enc32(&[1.0], 8);
    assert_eq!(s[0], 0x01);
    assert_eq!(s[1] & 1, 1);
    let s = enc64(&[1.0], 8);
    assert_eq!(u16::from_le_bytes([s[0], s[1]]) & 0xfff, (1024 << 1) | 1);
}

#[test]
fn partial_blocks_pad_like_zfp() {
    // A partial block codes as the padded full block.
    let a = [3.5f32, -1.25, 7.0];
    assert_eq!(enc32(&a, 12), enc32(&[3.5, -1.25, 7.0, 3.5], 12));
    assert_eq!(enc32(&a[..2], 12), enc32(&[3.5, -1.25, -1.25, 3.5], 12));
    assert_eq!(enc64(&[2.0], 9), enc64(&[2.0; 4], 9));
    // Decoding a partial block returns its leading values.
    let full = dec32(&enc32(&[3.5, -1.25, 7.0, 3.5], 12), 12, 4);
    assert_eq!(bits32(&dec32(&enc32(&a, 12), 12, 3)), bits32(&full[..3]));
}

#[test]
fn non_finite_inputs_are_sanitized() {
    let s = enc32(&[f32::NAN, f32::INFINITY, -f32::INFINITY, 1.0], 16);
    assert_eq!(s, enc32(&[0.0, f32::MAX, -f32::MAX, 1.0], 16));
    let s = enc64(&[f64::NAN; 3], 16);
    assert!(s.iter().all(|&b| b == 0));
}

#[test]
fn exact_at_high_rate_for_small_integers() {
    // Integers with few significant bits survive the transform exactly at full rate.
    let v: Vec<f64> = (0..103).map(|i| (i % 17) as f64 - 8.0).collect();
    assert_eq!(dec64(&enc64(&v, 64), 64, v.len()), v);
    let v: Vec<f32> = (0..103).map(|i| (i % 13) as f32 * 0.5).collect();
    assert_eq!(dec32(&enc32(&v, 32), 32, v.len()), v);
}

/// Bound on the fixed-rate error of a value in a block with frexp exponent `emax`:
/// at least about `R - 5` bit planes are coded, the inverse lifting amplifies by a small
/// factor, and the decoder rounds to the float type (`frac_bits` bits).
fn error_bound(emax: i32, rate: u32, frac_bits: i32) -> f64 {
    2f64.powi(emax + 10 - rate as i32) + 2f64.powi(emax - frac_bits)
}

fn block_emax(block: &[f64], min: i32) -> i32 {
    let m = block.iter().fold(0f64, |m, x| m.max(x.abs()));
    // frexp exponent, clamped as the encoder clamps.
    ((m.log2().floor() as i32) + 1).max(min)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn f32_matches_reference(v in prop::collection::vec(any_f32(), 1..40), rate in 3u32..=32) {
        let fast = enc32(&v, rate);
        prop_assert_eq!(&fast, &reference::encode(&v, rate));
        prop_assert_eq!(bits32(&dec32(&fast, rate, v.len())), bits32(&reference::decode::<f32>(&fast, rate, v.len())));
    }

    #[test]
    fn f64_matches_reference(v in prop::collection::vec(any_f64(), 1..40), rate in 4u32..=64) {
        let fast = enc64(&v, rate);
        prop_assert_eq!(&fast, &reference::encode(&v, rate));
        prop_assert_eq!(bits64(&dec64(&fast, rate, v.len())), bits64(&reference::decode::<f64>(&fast, rate, v.len())));
    }

    #[test]
    fn smooth_data_matches_reference(v in smooth_f64(), rate in 3u32..=64) {
        if rate <= 32 {
            let v32: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            let fast = enc32(&v32, rate);
            prop_assert_eq!(&fast, &reference::encode(&v32, rate));
            prop_assert_eq!(bits32(&dec32(&fast, rate, v.len())), bits32(&reference::decode::<f32>(&fast, rate, v.len())));
        }
        if rate >= 4 {
            let fast = enc64(&v, rate);
            prop_assert_eq!(&fast, &reference::encode(&v, rate));
            prop_assert_eq!(bits64(&dec64(&fast, rate, v.len())), bits64(&reference::decode::<f64>(&fast, rate, v.len())));
        }
    }

    #[test]
    fn arbitrary_streams_decode_like_reference(s in prop::collection::vec(any::<u8>(), 0..96), rate in 4u32..=32, n in 1usize..40) {
        // Not every stream is valid for (n, rate); the decoders must agree on those that are.
        let mut out = vec![0f32; n];
        if decode_f32(&s, rate, &mut out).is_ok() {
            prop_assert_eq!(bits32(&out), bits32(&reference::decode::<f32>(&s, rate, n)));
        }
        let mut out = vec![0f64; n];
        if decode_f64(&s, rate, &mut out).is_ok() {
            prop_assert_eq!(bits64(&out), bits64(&reference::decode::<f64>(&s, rate, n)));
        }
    }

    #[test]
    fn f32_error_is_bounded(v in prop::collection::vec(-1e30f32..1e30f32, 1..64), rate in 3u32..=32) {
        let back = dec32(&enc32(&v, rate), rate, v.len());
        for (b, chunk) in v.chunks(4).enumerate() {
            let wide: Vec<f64> = chunk.iter().map(|&x| x as f64).collect();
            let bound = error_bound(block_emax(&wide, -97), rate, 23);
            for (i, &x) in chunk.iter().enumerate() {
                let err = (back[4 * b + i] as f64 - x as f64).abs();
                prop_assert!(err <= bound, "rate {} value {} -> {} (bound {})", rate, x, back[4 * b + i], bound);
            }
        }
    }

    #[test]
    fn f64_error_is_bounded(v in prop::collection::vec(-1e300f64..1e300f64, 1..64), rate in 4u32..=64) {
        let back = dec64(&enc64(&v, rate), rate, v.len());
        for (b, chunk) in v.chunks(4).enumerate() {
            let bound = error_bound(block_emax(chunk, -961), rate, 52);
            for (i, &x) in chunk.iter().enumerate() {
                let err = (back[4 * b + i] - x).abs();
                prop_assert!(err <= bound, "rate {} value {} -> {} (bound {})", rate, x, back[4 * b + i], bound);
            }
        }
    }
}

/// Large inputs are split over threads at word-aligned block groups; the pieces laid end
/// to end must be the serial stream, byte for byte, at every rate (odd rates make the
/// groups longest) and for lengths that leave a partial last block.
#[test]
fn threaded_streams_equal_the_serial_stream() {
    let n = 3 * BYTES_PER_THREAD / 4 + 7;
    let x32: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.013).sin() * 1e3).collect();
    let x64: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.007).cos() * 1e-3).collect();
    for rate in [3, 5, 8, 13, 16, 31, 32] {
        let threaded = enc32(&x32, rate);
        let mut serial = vec![0u8; threaded.len()];
        assert_eq!(
            encode_serial(&x32, extents(&[n]).unwrap(), rate, &mut serial),
            threaded.len()
        );
        assert_eq!(threaded, serial, "f32 rate {rate}");
        let mut back = vec![0f32; n];
        decode_serial(&serial, extents(&[n]).unwrap(), rate, &mut back);
        assert_eq!(
            bits32(&dec32(&threaded, rate, n)),
            bits32(&back),
            "f32 rate {rate}"
        );
    }
    for rate in [4, 9, 16, 64] {
        let threaded = enc64(&x64, rate);
        let mut serial = vec![0u8; threaded.len()];
        encode_serial(&x64, extents(&[n]).unwrap(), rate, &mut serial);
        assert_eq!(threaded, serial, "f64 rate {rate}");
    }
    assert!(threads_for(4 * n).unwrap() >= 1 && threads_for(40).unwrap() == 1);
    for rate in 1..=64 {
        let per = piece_rows(extents(&[n]).unwrap(), rate, 3);
        assert_eq!((per / 4 * 4 * rate as usize) % 64, 0, "rate {rate}");
    }
}
