//! Single-thread throughput of mpc encode and decode on 64 MiB of a smooth float32 field
//! (best of 5): `cargo run --release -p shmcoll-codec --example mpc_speed [4|8]`.

use std::time::Instant;

use shmcoll_codec::mpc;

fn main() {
    let word: usize = std::env::args()
        .nth(1)
        .map_or(4, |a| a.parse().expect("word"));
    let n = (64 << 20) / word;
    let src: Vec<u8> = (0..n)
        .flat_map(|i| {
            let v = (i as f64 * 1e-3).sin() + 0.3 * (i as f64 * 7.3e-3).sin();
            if word == 4 {
                (v as f32).to_le_bytes().to_vec()
            } else {
                v.to_le_bytes().to_vec()
            }
        })
        .collect();
    let c = mpc::Mpc::new(word, 1).expect("parameters");
    let mut s = vec![0u8; mpc::max_compressed_size(n, word)];
    let mut y = vec![0u8; src.len()];
    let (mut enc, mut dec, mut k) = (f64::MAX, f64::MAX, 0);
    for _ in 0..5 {
        let t = Instant::now();
        k = c.encode(&src, &mut s).expect("encode");
        enc = enc.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        mpc::decode(&s[..k], &mut y).expect("decode");
        dec = dec.min(t.elapsed().as_secs_f64());
    }
    assert_eq!(y, src);
    let gb = src.len() as f64 / 1e9;
    println!(
        "mpc {word}-byte words: ratio {:.2}, encode {:.2} GB/s, decode {:.2} GB/s",
        src.len() as f64 / k as f64,
        gb / enc,
        gb / dec
    );
}
