//! Property tests of the 1-D copy: every ISA of this CPU x every store policy, lengths
//! 0..=5*4096+63 (biased to small sizes and kernel boundaries), any src/dst misalignment
//! relative to a cache line; the copy must equal the source and leave the canary bytes
//! around the destination untouched.

use proptest::prelude::*;
use shmcoll_kernels::{available_isas, copy, copy_raw, copy_raw_with, store_fence, Isa, Store};

const CANARY: usize = 128;
const MAX_LEN: usize = 5 * 4096 + 63;

fn canary_byte(i: usize) -> u8 {
    (i as u8).wrapping_mul(31) ^ 0xA5
}

/// A buffer with a 64-byte aligned origin, `CANARY` bytes, then room for `len + mis`.
struct Buf {
    v: Vec<u8>,
    origin: usize,
}

impl Buf {
    fn new(len: usize, mis: usize, fill: impl Fn(usize) -> u8) -> Buf {
        let mut v: Vec<u8> = (0..len + mis + 2 * CANARY + 64).map(fill).collect();
        let origin = v.as_ptr().align_offset(64) + CANARY + mis;
        v.truncate(origin + len + CANARY);
        Buf { v, origin }
    }
}

/// Copies with `isa`/`store` and checks contents, canaries and the NT return value.
fn check(isa: Isa, store: Store, len: usize, smis: usize, dmis: usize, seed: u8) {
    let src = Buf::new(len, smis, |i| {
        (i as u8).wrapping_mul(7).wrapping_add(seed) | 1
    });
    let mut dst = Buf::new(len, dmis, canary_byte);
    let (s, d) = (src.origin, dst.origin);
    // SAFETY: both regions lie inside their Vecs; distinct Vecs do not overlap.
    let nt = unsafe {
        copy_raw_with(
            isa,
            dst.v.as_mut_ptr().add(d),
            src.v.as_ptr().add(s),
            len,
            store,
        )
    };
    if nt {
        store_fence();
    }
    let ctx = format!("isa={isa:?} store={store:?} len={len} smis={smis} dmis={dmis}");
    assert!(
        dst.v[d..d + len] == src.v[s..s + len],
        "content mismatch: {ctx}"
    );
    for (i, &b) in dst.v.iter().enumerate() {
        if i < d || i >= d + len {
            assert_eq!(b, canary_byte(i), "canary at {i} overwritten: {ctx}");
        }
    }
    // The return value: streaming iff NT was chosen and the copy is long enough.
    match store {
        Store::Temporal => assert!(!nt, "{ctx}"),
        Store::NonTemporal if cfg!(target_arch = "x86_64") => assert_eq!(nt, len >= 256, "{ctx}"),
        _ => {}
    }
}

fn check_all(len: usize, smis: usize, dmis: usize, seed: u8) {
    for isa in available_isas() {
        for store in Store::ALL {
            check(isa, store, len, smis, dmis, seed);
        }
    }
}

fn length() -> impl Strategy<Value = usize> {
    let edges: Vec<usize> = vec![
        0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 319,
        320, 511, 512, 1024, 2047, 2048, 2049, 4095, 4096, 4097, 8192, 16384, MAX_LEN,
    ];
    prop_oneof![
        3 => 0usize..=64,
        3 => 0usize..=600,
        3 => (prop::sample::select(edges), -4isize..=4)
            .prop_map(|(e, d)| e.saturating_add_signed(d).min(MAX_LEN)),
        2 => 0usize..=MAX_LEN,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, ..ProptestConfig::default() })]

    #[test]
    fn copy_matches_source(len in length(), smis in 0usize..64, dmis in 0usize..64, seed: u8) {
        check_all(len, smis, dmis, seed);
    }
}

/// Every length up to 600 and every NT head size, deterministic.
#[test]
fn small_lengths_exhaustive() {
    for len in 0..=600 {
        for (smis, dmis) in [(0, 0), (1, 63), (33, 7), (63, 1)] {
            check_all(len, smis, dmis, len as u8);
        }
    }
    for dmis in 0..64 {
        for len in [256, 300, 4096 + 17] {
            check_all(len, 5, dmis, dmis as u8);
        }
    }
}

#[test]
fn safe_copy_and_default_isa() {
    for store in Store::ALL {
        for len in [0, 5, 16, 17, 100, 1000, 70_000] {
            let src: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
            let mut dst = vec![0u8; len];
            copy(&mut dst, &src, store);
            assert_eq!(dst, src);
            let mut dst2 = vec![0u8; len + 1];
            // SAFETY: both buffers hold at least len bytes and are distinct.
            let nt = unsafe { copy_raw(dst2.as_mut_ptr().add(1), src.as_ptr(), len, store) };
            store_fence();
            assert_eq!(&dst2[1..], &src[..]);
            assert!(!(store == Store::Temporal && nt));
        }
    }
}

#[test]
#[should_panic(expected = "lengths differ")]
fn safe_copy_length_mismatch_panics() {
    copy(&mut [0u8; 4], &[0u8; 5], Store::Temporal);
}

/// An ISA the CPU lacks falls back to a supported one (no SIGILL, correct result).
#[test]
fn unavailable_isa_falls_back() {
    for isa in [Isa::Scalar, Isa::Sse2, Isa::Avx2, Isa::Avx512] {
        for store in Store::ALL {
            check(isa, store, 5000, 3, 9, 1);
        }
    }
}
