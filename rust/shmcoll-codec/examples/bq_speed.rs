//! Single-thread throughput of bq encode and decode on 64 MiB of float32 (best of 7):
//! `cargo run --release -p shmcoll-codec --example bq_speed [bits] [block]`.

use std::time::Instant;

use shmcoll_codec::bq::Bq;

fn main() {
    let mut args = std::env::args().skip(1);
    let bits: u32 = args.next().map_or(8, |a| a.parse().expect("bits"));
    let block: usize = args.next().map_or(256, |a| a.parse().expect("block"));
    let q = Bq::new(bits, block).expect("parameters");
    let n: usize = args
        .next()
        .map_or(16 << 20, |a| a.parse().expect("elements"));
    let x: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.001).sin()).collect();
    let mut s = vec![0u8; q.compressed_size(n)];
    let mut y = vec![0f32; n];
    let (mut enc, mut dec) = (f64::MAX, f64::MAX);
    for _ in 0..(7 + (1 << 26) / (4 * n)) {
        let t = Instant::now();
        q.encode(&x, &mut s).expect("encode");
        enc = enc.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        q.decode(&s, &mut y).expect("decode");
        dec = dec.min(t.elapsed().as_secs_f64());
    }
    let gb = (4 * n) as f64 / 1e9;
    println!(
        "bq int{bits}/{block}: encode {:.2} GB/s, decode {:.2} GB/s",
        gb / enc,
        gb / dec
    );
}
