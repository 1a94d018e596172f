use super::*;
use proptest::prelude::*;

/// The spec written the slow, obvious way (f32::round_ties_even instead of the magic add).
fn reference(x: &[f32], bits: u32, block: usize) -> Vec<u8> {
    let qmax = if bits == 8 { 127.0f32 } else { 7.0 };
    let mut scales = Vec::new();
    let mut codes: Vec<i32> = Vec::new();
    for b in x.chunks(block) {
        let finite = b.iter().all(|v| v.is_finite());
        let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = if finite { amax / qmax } else { f32::NAN };
        scales.push(scale);
        for &v in b {
            codes.push(if finite && scale != 0.0 {
                (v / scale).round_ties_even().clamp(-qmax, qmax) as i32
            } else {
                0
            });
        }
    }
    let mut out: Vec<u8> = scales.iter().flat_map(|s| s.to_le_bytes()).collect();
    if bits == 8 {
        out.extend(codes.iter().map(|&q| q as i8 as u8));
    } else {
        for p in codes.chunks(2) {
            let lo = p[0] as u8 & 15;
            let hi = p.get(1).map_or(0, |&q| q as u8 & 15);
            out.push(lo | (hi << 4));
        }
    }
    out
}

fn encode(bq: Bq, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0xAAu8; bq.compressed_size(x.len())];
    assert_eq!(bq.encode(x, &mut out).unwrap(), out.len());
    out
}

fn decode(bq: Bq, s: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; n];
    bq.decode(s, &mut out).unwrap();
    out
}

#[test]
fn sizes_follow_the_formula() {
    let b8 = Bq::new(8, 256).unwrap();
    assert_eq!(b8.compressed_size(0), 0);
    assert_eq!(b8.compressed_size(1), 5);
    assert_eq!(b8.compressed_size(256), 260);
    assert_eq!(b8.compressed_size(257), 265);
    let b4 = Bq::new(4, 64).unwrap();
    assert_eq!(b4.compressed_size(1), 5);
    assert_eq!(b4.compressed_size(64), 36);
    assert_eq!(b4.compressed_size(65), 8 + 33);
}

#[test]
fn small_example_byte_for_byte() {
    // amax 2.54 -> scale 0.02; 1.27 / 0.02 = 63.5 (in float32 a hair off; whatever it
    // is, the reference agrees), -2.54 -> -127.
    let x = [0.0f32, 1.0, -2.54, 0.01];
    let b = Bq::new(8, 32).unwrap();
    let s = encode(b, &x);
    assert_eq!(s, reference(&x, 8, 32));
    assert_eq!(
        f32::from_le_bytes(s[..4].try_into().unwrap()),
        2.54f32 / 127.0
    );
    assert_eq!(s[4..], [0, 50, (-127i8) as u8, 0]);
}

#[test]
fn half_way_codes_round_to_even() {
    // amax 127 -> scale 1: x/scale is exactly x.
    let x = [127.0f32, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5];
    let s = encode(Bq::new(8, 32).unwrap(), &x);
    let q: Vec<i8> = s[4..].iter().map(|&c| c as i8).collect();
    assert_eq!(q, [127, 0, 2, 2, 0, -2, -2, 4]);
    // int4: amax 7 -> scale 1, nibbles low first.
    let x = [7.0f32, -7.0, 0.5, 1.5, -3.0];
    let s = encode(Bq::new(4, 32).unwrap(), &x);
    assert_eq!(s[4..], [0x97, 0x20, 0x0d]);
}

#[test]
fn zero_and_non_finite_blocks() {
    let b = Bq::new(8, 32).unwrap();
    let mut x = vec![0.0f32; 96];
    x[40] = f32::NAN;
    x[70] = f32::NEG_INFINITY;
    x[33] = 5.0;
    let s = encode(b, &x);
    assert_eq!(&s[0..4], &0.0f32.to_le_bytes());
    assert_eq!(&s[4..8], &0x7fc0_0000u32.to_le_bytes());
    assert_eq!(&s[8..12], &0x7fc0_0000u32.to_le_bytes());
    assert!(s[12..].iter().all(|&c| c == 0));
    let y = decode(b, &s, 96);
    assert!(y[..32].iter().all(|&v| v == 0.0));
    assert!(y[32..].iter().all(|v| v.to_bits() == 0x7fc0_0000));
    // A foreign stream with an infinite scale decodes to the same NaN.
    let mut t = s.clone();
    t[..4].copy_from_slice(&f32::INFINITY.to_le_bytes());
    assert!(decode(b, &t, 96)[..32]
        .iter()
        .all(|v| v.to_bits() == 0x7fc0_0000));
}

#[test]
fn underflowing_scale_gives_zero_codes() {
    let x = [f32::from_bits(1), -f32::from_bits(3)];
    let b = Bq::new(8, 32).unwrap();
    let s = encode(b, &x);
    assert_eq!(s, [0, 0, 0, 0, 0, 0]);
}

#[test]
fn bad_arguments_and_buffers() {
    assert!(matches!(
        Bq::new(2, 64),
        Err(CodecError::InvalidArgument(_))
    ));
    assert!(matches!(
        Bq::new(8, 100),
        Err(CodecError::InvalidArgument(_))
    ));
    let b = Bq::new(8, 32).unwrap();
    let mut small = [0u8; 4];
    assert_eq!(
        b.encode(&[1.0, 2.0], &mut small),
        Err(CodecError::BufferTooSmall { need: 6, have: 4 })
    );
    let mut out = [0.0f32; 3];
    assert!(matches!(
        b.decode(&[0u8; 6], &mut out),
        Err(CodecError::Corrupt(_))
    ));
}

fn finite_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        -1e3f32..1e3,
        any::<u32>()
            .prop_map(f32::from_bits)
            .prop_filter("finite", |v| v.is_finite()),
        Just(0.0f32),
    ]
}

proptest! {
    #[test]
    fn matches_the_reference_and_the_error_bound(
        x in prop::collection::vec(finite_f32(), 0..700),
        bits in prop::sample::select(vec![8u32, 4]),
        block in prop::sample::select(BLOCKS.to_vec()),
    ) {
        let b = Bq::new(bits, block).unwrap();
        let s = encode(b, &x);
        prop_assert_eq!(s.len(), b.compressed_size(x.len()));
        prop_assert_eq!(&s, &reference(&x, bits, block));
        let y = decode(b, &s, x.len());
        for (i, (&v, &w)) in x.iter().zip(&y).enumerate() {
            let si = 4 * (i / block);
            let scale = f32::from_le_bytes(s[si..si + 4].try_into().unwrap());
            // scale/2 from the rounding of the code, plus the roundings of the quotient
            // and the product (relative 2^-23 of the values involved).
            let bound = f64::from(scale) * 0.5 * (1.0 + 1e-6) + f64::from(v.abs()) * 1e-6 + 1e-44;
            prop_assert!(f64::from((v - w).abs()) <= bound, "x {} x̂ {} scale {}", v, w, scale);
        }
    }

    #[test]
    fn any_bit_pattern_round_trips_shape(
        x in prop::collection::vec(any::<u32>().prop_map(f32::from_bits), 0..300),
    ) {
        let b = Bq::new(4, 128).unwrap();
        let s = encode(b, &x);
        prop_assert_eq!(&s, &reference(&x, 4, 128));
        let y = decode(b, &s, x.len());
        for (blk, out) in x.chunks(128).zip(y.chunks(128)) {
            if blk.iter().any(|v| !v.is_finite()) {
                prop_assert!(out.iter().all(|v| v.is_nan()));
            }
        }
    }
}

#[test]
fn the_portable_loops_give_the_dispatched_bytes() {
    let x: Vec<f32> = (0..5003u32)
        .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9) & 0xbfff_ffff))
        .collect();
    for (bits, block) in [(8, 256), (4, 64), (4, 32), (8, 128)] {
        let b = Bq::new(bits, block).unwrap();
        let a = encode(b, &x);
        let mut p = vec![0u8; a.len()];
        let (scales, codes) = p.split_at_mut(4 * x.len().div_ceil(block));
        b.encode_blocks(&x, scales, codes);
        assert_eq!(a, p);
        let y = decode(b, &a, x.len());
        let mut z = vec![0f32; x.len()];
        let (scales, codes) = a.split_at(4 * x.len().div_ceil(block));
        b.decode_blocks(scales, codes, &mut z);
        assert!(y.iter().zip(&z).all(|(p, q)| p.to_bits() == q.to_bits()));
    }
}

/// Split over any number of threads (more than there are blocks included), the stream is
/// that of one thread, byte for byte, and so is the decoded array: every bits/block
/// combination, a partial last block, a non-finite block and an all-zero block.
#[test]
fn every_thread_count_gives_the_bytes_of_one_thread() {
    let n = 37 * 256 + 13;
    let mut x: Vec<f32> = (0..n)
        .map(|i| ((i as f32) * 0.37).sin() * (1 + i % 7) as f32)
        .collect();
    x[300] = f32::NAN;
    x[2048..2304].fill(0.0);
    for bits in [8, 4] {
        for block in BLOCKS {
            let c = Bq::new(bits, block).unwrap();
            let size = c.compressed_size(n);
            let mut one = vec![0u8; size];
            c.encode_on(&x, &mut one, 1);
            assert_eq!(one, reference(&x, bits, block), "bits {bits} block {block}");
            let mut back_one = vec![0f32; n];
            c.decode_on(&one, &mut back_one, 1);
            for threads in (2..=9).chain([64, 1000]) {
                let mut many = vec![0xA5u8; size];
                c.encode_on(&x, &mut many, threads);
                assert_eq!(many, one, "bits {bits} block {block} threads {threads}");
                let mut back = vec![1f32; n];
                c.decode_on(&one, &mut back, threads);
                let same = back
                    .iter()
                    .zip(&back_one)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "bits {bits} block {block} threads {threads}");
            }
        }
    }
}
