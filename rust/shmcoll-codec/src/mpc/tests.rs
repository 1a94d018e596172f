use super::*;
use proptest::prelude::*;

fn enc(word: usize, dim: usize, src: &[u8]) -> Vec<u8> {
    let c = Mpc::new(word, dim).unwrap();
    let mut out = vec![0xA5u8; max_compressed_size(src.len() / word, word)];
    let k = c.encode(src, &mut out).unwrap();
    out.truncate(k);
    out
}

fn dec(s: &[u8]) -> Vec<u8> {
    let h = header(s).unwrap();
    let mut out = vec![0u8; h.n * h.word];
    decode(s, &mut out).unwrap();
    out
}

fn naive_transpose<W: Word + Into<u64> + TryFrom<u64>>(g: &[W]) -> Vec<u64> {
    let bits = g.len();
    (0..bits)
        .map(|j| (0..bits).fold(0u64, |acc, i| acc | (((g[i].into() >> j) & 1) << i)))
        .collect()
}

#[test]
fn transposition_is_the_bit_matrix_transpose() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let g32: Vec<u32> = (0..32).map(|_| next() as u32).collect();
    let mut t = g32.clone();
    u32::transpose(&mut t);
    assert_eq!(
        t.iter().map(|&w| u64::from(w)).collect::<Vec<_>>(),
        naive_transpose(&g32)
    );
    let g64: Vec<u64> = (0..64).map(|_| next()).collect();
    let mut t = g64.clone();
    u64::transpose(&mut t);
    assert_eq!(t, naive_transpose(&g64));
}

#[test]
fn empty_and_tiny_streams() {
    let s = enc(4, 1, &[]);
    assert_eq!(s.len(), 24);
    assert_eq!(&s[..8], b"MPC\x01\x04\x01\x00\x00");
    assert_eq!(dec(&s), Vec::<u8>::new());
    let one = 1.5f32.to_le_bytes();
    let s = enc(4, 1, &one);
    // header, one length, pad to 32, then the raw word (bitmap + word would be 8 > 4).
    assert_eq!(s.len(), 36);
    assert_eq!(&s[24..28], &4u32.to_le_bytes());
    assert_eq!(&s[32..], &one);
    assert_eq!(dec(&s), one);
}

#[test]
fn zeros_and_ramps_shrink() {
    let zeros = vec![0u8; 4 * 4096];
    let s = enc(4, 1, &zeros);
    // 4 chunks of a 128-byte bitmap each, no words.
    assert_eq!(s.len(), 24 + 16 + 4 * 128);
    let ramp: Vec<u8> = (0..4096u32).flat_map(|i| (i * 3).to_le_bytes()).collect();
    let s = enc(4, 1, &ramp);
    assert!(s.len() < ramp.len() / 8, "{}", s.len());
    assert_eq!(dec(&s), ramp);
    let f: Vec<u8> = (0..3000)
        .flat_map(|i| (f64::from(i) * 0.25).to_le_bytes())
        .collect();
    let s = enc(8, 1, &f);
    assert!(s.len() < f.len() / 2, "{} of {}", s.len(), f.len());
    assert_eq!(dec(&s), f);
}

#[test]
fn bad_arguments_and_corrupt_streams() {
    assert!(matches!(
        Mpc::new(2, 1),
        Err(CodecError::InvalidArgument(_))
    ));
    assert!(matches!(
        Mpc::new(4, 0),
        Err(CodecError::InvalidArgument(_))
    ));
    let c = Mpc::new(4, 1).unwrap();
    assert!(matches!(
        c.encode(&[0; 5], &mut [0; 64]),
        Err(CodecError::InvalidArgument(_))
    ));
    assert_eq!(
        c.encode(&[0; 8], &mut [0; 10]),
        Err(CodecError::BufferTooSmall { need: 40, have: 10 })
    );
    let data: Vec<u8> = (0..2000u32).flat_map(|i| (i / 7).to_le_bytes()).collect();
    let s = enc(4, 1, &data);
    let mut out = vec![0u8; data.len()];
    assert!(matches!(
        decode(&s[..s.len() - 1], &mut out),
        Err(CodecError::Corrupt(_))
    ));
    assert!(matches!(
        decode(&s[..10], &mut out),
        Err(CodecError::Corrupt(_))
    ));
    let mut extra = s.clone();
    extra.push(0);
    assert!(matches!(
        decode(&extra, &mut out),
        Err(CodecError::Corrupt(_))
    ));
    let mut bad = s.clone();
    bad[0] = b'X';
    assert!(matches!(
        decode(&bad, &mut out),
        Err(CodecError::Corrupt(_))
    ));
    assert!(matches!(
        decode(&s, &mut out[..4]),
        Err(CodecError::InvalidArgument(_))
    ));
    // Flip every byte once: never a panic, either an error or some output.
    for i in 0..s.len() {
        let mut f = s.clone();
        f[i] ^= 0x5a;
        let _ = decode(&f, &mut out);
    }
}

proptest! {
    #[test]
    fn any_words_round_trip_within_the_bound(
        words in prop::collection::vec(any::<u64>(), 0..2600),
        word in prop::sample::select(vec![4usize, 8]),
        dim in 1usize..40,
        smooth in any::<bool>(),
    ) {
        let words: Vec<u64> = if smooth {
            // Mostly small steps, so the compressed path is taken too.
            words.iter().scan(0u64, |a, &w| { *a = a.wrapping_add(w % 5); Some(*a) }).collect()
        } else {
            words
        };
        let src: Vec<u8> = if word == 4 {
            words.iter().flat_map(|&w| (w as u32).to_le_bytes()).collect()
        } else {
            words.iter().flat_map(|w| w.to_le_bytes()).collect()
        };
        let s = enc(word, dim, &src);
        prop_assert!(s.len() <= max_compressed_size(words.len(), word));
        prop_assert_eq!(dec(&s), src);
    }
}

/// Split over any number of threads (more than there are chunks included), the stream
/// is that of one thread, byte for byte, and decodes back on any number of threads; a
/// mix of chunks that shrink and chunks stored raw, and a partial last chunk.
#[test]
fn every_thread_count_gives_the_bytes_of_one_thread() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let words = 9 * CHUNK_WORDS + 77;
    for word in [4, 8] {
        let src: Vec<u8> = (0..words)
            .flat_map(|i| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Chunks 2 and 5 are noise (stored raw), the others a slow ramp (packed).
                let v = if (i / CHUNK_WORDS) % 3 == 2 {
                    rng
                } else {
                    (i / 3) as u64
                };
                v.to_le_bytes()[..word].to_vec()
            })
            .collect();
        for dim in [1, 3] {
            let c = Mpc::new(word, dim).unwrap();
            let mut one = vec![0u8; max_compressed_size(words, word)];
            let k = c.encode_with(&src, &mut one, 1).unwrap();
            one.truncate(k);
            assert_eq!(dec(&one), src);
            for threads in (2..=9).chain([64]) {
                let mut many = vec![0xA5u8; max_compressed_size(words, word)];
                let k = c.encode_with(&src, &mut many, threads).unwrap();
                assert_eq!(
                    &many[..k],
                    &one[..],
                    "word {word} dim {dim} threads {threads}"
                );
                let mut back = vec![0u8; src.len()];
                decode_with(&one, &mut back, threads).unwrap();
                assert_eq!(back, src, "word {word} dim {dim} threads {threads}");
            }
        }
    }
}

/// A corrupt stream gets the same error on any number of threads: a chunk length that
/// breaks the sum, and a bitmap inconsistency in a late chunk.
#[test]
fn corrupt_streams_fail_alike_on_every_thread_count() {
    let words = 6 * CHUNK_WORDS;
    let src: Vec<u8> = (0..words as u32)
        .flat_map(|i| (i / 5).to_le_bytes())
        .collect();
    let s = enc(4, 1, &src);
    let h = header(&s).unwrap();
    let mut bad_len = s.clone();
    bad_len[HEADER_BYTES + 4] ^= 4; // chunk 1's length
    let mut bad_map = s.clone();
    let last = h.payload_offset()
        + (0..5)
            .map(|j| {
                let t = &s[HEADER_BYTES + 4 * j..HEADER_BYTES + 4 * j + 4];
                u32::from_le_bytes([t[0], t[1], t[2], t[3]]) as usize
            })
            .sum::<usize>();
    bad_map[last] ^= 1; // chunk 5's bitmap
    for bad in [bad_len, bad_map] {
        let mut out = vec![0u8; src.len()];
        let serial = decode_with(&bad, &mut out, 1).unwrap_err().to_string();
        for threads in 2..=7 {
            let e = decode_with(&bad, &mut out, threads)
                .unwrap_err()
                .to_string();
            assert_eq!(e, serial, "threads {threads}");
        }
    }
}
