//! The N-D codec (2-D, 3-D, 4-D blocks): the word-parallel plane coder against the
//! bit-serial transliteration of zfp's `encode_many_ints` / `decode_many_ints`, round-trip
//! error bounds on random shapes, padding, threading and size arguments. Byte equality
//! with zfpy itself is checked by `tests/zfp_golden.rs` and the Python tests.

use super::bits::{BitReader, BitWriter};
use super::reference::{self, Bits, Reader};
use super::*;
use proptest::prelude::*;

fn enc_nd32(src: &[f32], shape: &[usize], rate: u32) -> Vec<u8> {
    let mut out = vec![0xa5; compressed_bytes_nd(shape, FloatKind::F32, rate).unwrap()];
    assert_eq!(
        encode_nd_f32(src, shape, rate, &mut out).unwrap(),
        out.len()
    );
    out
}

fn dec_nd32(stream: &[u8], shape: &[usize], rate: u32) -> Vec<f32> {
    let mut out = vec![f32::NAN; values(shape).unwrap()];
    decode_nd_f32(stream, shape, rate, &mut out).unwrap();
    out
}

fn enc_nd64(src: &[f64], shape: &[usize], rate: u32) -> Vec<u8> {
    let mut out = vec![0xa5; compressed_bytes_nd(shape, FloatKind::F64, rate).unwrap()];
    assert_eq!(
        encode_nd_f64(src, shape, rate, &mut out).unwrap(),
        out.len()
    );
    out
}

fn dec_nd64(stream: &[u8], shape: &[usize], rate: u32) -> Vec<f64> {
    let mut out = vec![f64::NAN; values(shape).unwrap()];
    decode_nd_f64(stream, shape, rate, &mut out).unwrap();
    out
}

/// Coefficients as the transform leaves them: magnitudes falling with the position in
/// sequency order, at random scales, some zero.
fn coefficients(size: usize, prec: u32) -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec((any::<u64>(), 0u32..=64, any::<bool>()), size).prop_map(move |v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (bits, top, zero))| {
                let width = top.saturating_sub(i as u32 / 8).min(prec);
                if zero || width == 0 {
                    0
                } else {
                    bits & bits::mask(width)
                }
            })
            .collect()
    })
}

fn plane_case() -> impl Strategy<Value = (Vec<u64>, u32, u32)> {
    (
        prop_oneof![Just(16usize), Just(64), Just(256)],
        prop_oneof![Just(32u32), Just(64)],
    )
        .prop_flat_map(|(size, prec)| {
            (
                coefficients(size, prec),
                Just(prec),
                0u32..=(size as u32 * (prec + 1)),
            )
        })
}

fn coded(u: &[u64], prec: u32, budget: u32) -> Vec<u8> {
    let mut out = vec![0u8; (budget as usize).div_ceil(64) * 8];
    let mut w = BitWriter::new(&mut out);
    let used = match u.len() {
        256 => planes_nd::encode::<4>(&mut w, u, prec, budget),
        _ => planes_nd::encode::<1>(&mut w, u, prec, budget),
    };
    w.zeros(budget - used);
    w.finish();
    out
}

fn decoded(stream: &[u8], size: usize, prec: u32, kmin: u32, budget: u32) -> (Vec<u64>, usize) {
    let mut u = vec![0u64; size];
    let mut r = BitReader::new(stream, 0);
    match size {
        256 => planes_nd::decode::<4>(&mut r, &mut u, prec, kmin, budget),
        _ => planes_nd::decode::<1>(&mut r, &mut u, prec, kmin, budget),
    }
    (u, r.pos)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn plane_coder_matches_zfp((u, prec, budget) in plane_case()) {
        let mut s = Bits::default();
        reference::encode_many_ints(&mut s, &u, prec, budget);
        let want = s.to_bytes();
        let got = coded(&u, prec, budget);
        prop_assert_eq!(&got[..want.len()], &want[..]);
        prop_assert!(got[want.len()..].iter().all(|&b| b == 0));
        for kmin in [0, 3, prec / 2] {
            let (back, pos) = decoded(&got, u.len(), prec, kmin, budget);
            let mut ref_back = vec![0u64; u.len()];
            let mut r = Reader { bytes: &got, pos: 0 };
            reference::decode_many_ints(&mut r, &mut ref_back, prec, kmin, budget);
            prop_assert_eq!(&back, &ref_back, "kmin {}", kmin);
            prop_assert_eq!(pos, r.pos);
        }
    }

    #[test]
    fn plane_decoder_matches_zfp_on_any_bits(
        s in prop::collection::vec(any::<u8>(), 0..300),
        size in prop_oneof![Just(16usize), Just(64), Just(256)],
        budget in 0u32..2400,
        kmin in 0u32..8,
    ) {
        let (back, pos) = decoded(&s, size, 64, kmin, budget);
        let mut want = vec![0u64; size];
        let mut r = Reader { bytes: &s, pos: 0 };
        reference::decode_many_ints(&mut r, &mut want, 64, kmin, budget);
        prop_assert_eq!(back, want);
        prop_assert_eq!(pos, r.pos);
    }
}

/// Random C shapes of 2 to 4 axes, 1..=9 values each.
fn shape_nd() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=9, 2..=4)
}

/// The largest |x| of each block's values, for every value (the error scales with it).
fn block_max(v: &[f64], shape: &[usize]) -> Vec<f64> {
    let d = shape.len();
    let mut strides = vec![1usize; d];
    for a in (0..d - 1).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let block_of =
        |i: usize| -> Vec<usize> { (0..d).map(|a| (i / strides[a]) % shape[a] / 4).collect() };
    let mut maxima = std::collections::HashMap::new();
    for (i, x) in v.iter().enumerate() {
        let m = maxima.entry(block_of(i)).or_insert(0f64);
        *m = m.max(x.abs());
    }
    (0..v.len()).map(|i| maxima[&block_of(i)]).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The error of a value is below 2^(d + 6 - rate) times its block's largest magnitude
    /// (about rate - d - 6 planes survive the budget and the transform's gain), plus the
    /// float rounding of the decoder; at full rate values with few significant bits come
    /// back exactly.
    #[test]
    fn nd_round_trip_error_is_bounded(
        shape in shape_nd(),
        seed in any::<u64>(),
        rate in 1u32..=64,
        smooth in any::<bool>(),
    ) {
        let n: usize = shape.iter().product();
        let d = shape.len() as i32;
        let mut state = seed | 1;
        let v: Vec<f64> = (0..n)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let r = (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                if smooth { (i as f64 * 0.1).sin() * 100.0 + r } else { r * 1e6 }
            })
            .collect();
        let back = dec_nd64(&enc_nd64(&v, &shape, rate), &shape, rate);
        for ((x, y), m) in v.iter().zip(&back).zip(block_max(&v, &shape)) {
            let bound = m * 2f64.powi(d + 6 - rate as i32) + m * 2f64.powi(-50);
            prop_assert!((x - y).abs() <= bound, "{shape:?} rate {rate}: {x} -> {y} (bound {bound})");
        }
        if rate <= 32 {
            let v32: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            let back = dec_nd32(&enc_nd32(&v32, &shape, rate), &shape, rate);
            let wide: Vec<f64> = v32.iter().map(|&x| x as f64).collect();
            for ((x, y), m) in wide.iter().zip(&back).zip(block_max(&wide, &shape)) {
                let bound = m * 2f64.powi(d + 6 - rate as i32) + m * 2f64.powi(-21);
                prop_assert!((x - *y as f64).abs() <= bound, "{shape:?} rate {rate}: {x} -> {y} (bound {bound})");
            }
        }
    }
}

#[test]
fn nd_sizes_and_rates() {
    // 5x7: 2x2 blocks of 16 values; at rate 1 each is 16 bits: 64 bits, one word.
    assert_eq!(compressed_bytes_nd(&[5, 7], FloatKind::F32, 1).unwrap(), 8);
    assert_eq!(compressed_bytes_nd(&[5, 7], FloatKind::F32, 3).unwrap(), 24);
    // 3x5x6: 1x2x2 blocks of 64 values.
    assert_eq!(
        compressed_bytes_nd(&[3, 5, 6], FloatKind::F64, 64).unwrap(),
        4 * 64 * 8
    );
    assert_eq!(
        compressed_bytes_nd(&[2, 3, 5, 7], FloatKind::F32, 2).unwrap(),
        4 * 64
    );
    assert_eq!(compressed_bytes_nd(&[0, 7], FloatKind::F32, 8).unwrap(), 0);
    // The 1-D form is the one-axis shape.
    assert_eq!(
        compressed_bytes(37, FloatKind::F64, 9).unwrap(),
        compressed_bytes_nd(&[37], FloatKind::F64, 9).unwrap()
    );
    for (shape, kind, rate) in [
        (&[4, 4][..], FloatKind::F32, 0),
        (&[4, 4], FloatKind::F32, 33),
        (&[4, 4], FloatKind::F64, 65),
        (&[4], FloatKind::F32, 2),
        (&[], FloatKind::F32, 8),
        (&[1, 1, 1, 1, 1], FloatKind::F32, 8),
        (&[usize::MAX, 2], FloatKind::F32, 8),
        (&[1 << 40, 1 << 30, 1 << 20], FloatKind::F64, 64),
        (&[usize::MAX / 4, 4, 4], FloatKind::F32, 1),
    ] {
        assert!(
            matches!(
                compressed_bytes_nd(shape, kind, rate),
                Err(CodecError::InvalidArgument(_))
            ),
            "{shape:?} {kind:?} {rate}"
        );
    }
    // The input and output must hold exactly the shape's values.
    let mut out = [0u8; 64];
    assert!(matches!(
        encode_nd_f32(&[1.0; 12], &[3, 5], 8, &mut out),
        Err(CodecError::InvalidArgument(_))
    ));
    let mut vals = [0f64; 14];
    assert!(matches!(
        decode_nd_f64(&out, &[3, 5], 8, &mut vals),
        Err(CodecError::InvalidArgument(_))
    ));
    // A short stream is corrupt.
    let mut vals = [0f64; 15];
    assert!(matches!(
        decode_nd_f64(&out[..8], &[3, 5], 8, &mut vals),
        Err(CodecError::Corrupt(_))
    ));
}

#[test]
fn partial_nd_blocks_pad_like_zfp() {
    // A 1x1 array codes as the constant 4x4 block; a 1x3 row as its rows padded and the
    // padded row repeated down the columns (pad_block along x, then y).
    assert_eq!(
        enc_nd32(&[2.5], &[1, 1], 7),
        enc_nd32(&[2.5; 16], &[4, 4], 7)
    );
    let row = [1.0f32, -3.0, 5.5];
    let padded: Vec<f32> = [1.0f32, -3.0, 5.5, 1.0].repeat(4);
    assert_eq!(enc_nd32(&row, &[1, 3], 9), enc_nd32(&padded, &[4, 4], 9));
    let col = [1.0f64, -3.0];
    let padded: Vec<f64> = [1.0f64, -3.0, -3.0, 1.0]
        .iter()
        .flat_map(|&v| [v; 4])
        .collect();
    assert_eq!(enc_nd64(&col, &[2, 1], 11), enc_nd64(&padded, &[4, 4], 11));
    // Decoding keeps the part inside the array.
    let full = dec_nd64(&enc_nd64(&padded, &[4, 4], 11), &[4, 4], 11);
    let part = dec_nd64(&enc_nd64(&col, &[2, 1], 11), &[2, 1], 11);
    assert_eq!(part, vec![full[0], full[4]]);
}

/// Large N-D arrays are split over threads in slabs of word-aligned block rows: the pieces
/// laid end to end must be the serial stream, for rates whose block rows end mid-word.
#[test]
fn threaded_nd_streams_equal_the_serial_stream() {
    for shape in [
        vec![1203usize, 449],
        vec![70, 61, 123],
        vec![9, 10, 11, 557],
    ] {
        let n: usize = shape.iter().product();
        assert!(std::mem::size_of::<f32>() * n >= 2 * crate::threads::BYTES_PER_THREAD);
        let x: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.0031).sin() * 1e3).collect();
        let e = extents(&shape).unwrap();
        for rate in [1u32, 3, 16, 31] {
            let threaded = enc_nd32(&x, &shape, rate);
            let mut serial = vec![0u8; threaded.len()];
            assert_eq!(encode_serial(&x, e, rate, &mut serial), threaded.len());
            assert_eq!(threaded, serial, "{shape:?} rate {rate}");
            let mut back = vec![0f32; n];
            decode_serial(&serial, e, rate, &mut back);
            let got = dec_nd32(&threaded, &shape, rate);
            assert!(
                got.iter()
                    .zip(&back)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{shape:?} rate {rate}"
            );
            let rows = piece_rows(e, rate, 3);
            let row_blocks: usize = e.ext[..e.dims - 1].iter().map(|v| v.div_ceil(4)).product();
            assert_eq!(rows % 4, 0);
            assert_eq!((rows / 4 * row_blocks * block_bits(e.dims, rate)) % 64, 0);
        }
    }
}
