//! Single-thread throughput of the zfp codec: encode and decode GB/s (uncompressed bytes
//! per second, median of several runs) at rates 8 and 16, float32 and float64, on 64 MiB
//! of a smooth random walk, and at rate 16 on float32 2-D and 3-D fields smooth along
//! every axis (zfp's N-D blocks). Run with `SHMCOLL_CODEC_THREADS=1` (the timing is the
//! calling thread's CPU time):
//! `cargo run --release -p shmcoll-codec --example zfpbw [MiB]`.
//! `bench/zfp_vs_zfpy.py` measures zfpy on the same data through the Python bindings.

use std::time::Instant;

use shmcoll_codec::zfp::{self, FloatKind};

/// CPU seconds this thread has run (Linux schedstat), robust to a busy machine; None
/// where unavailable.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(s.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
}

/// Median seconds of `f` over `runs`: CPU time where the OS reports it, else wall time.
fn median(mut f: impl FnMut(), runs: usize) -> f64 {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let (s, c) = (Instant::now(), cpu_seconds());
            f();
            match (c, cpu_seconds()) {
                (Some(a), Some(b)) => b - a,
                _ => s.elapsed().as_secs_f64(),
            }
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

/// A random walk (xorshift steps): smooth enough to exercise zfp's typical case; with
/// `ZFPBW_NOISE=1` in the environment, the steps themselves (white noise).
fn walk(n: usize) -> Vec<f64> {
    let noise = std::env::var_os("ZFPBW_NOISE").is_some();
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut x = 0.0;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let step = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            x = if noise { step } else { x + step };
            x
        })
        .collect()
}

/// A C-order field of `dims` equal axes holding about `n` values: a sum of sines along
/// each axis plus a small random walk along x.
fn field(n: usize, dims: u32) -> (Vec<usize>, Vec<f32>) {
    let side = (n as f64).powf(1.0 / dims as f64).round() as usize;
    let shape = vec![side; dims as usize];
    let total: usize = shape.iter().product();
    let noise = walk(total);
    let v = (0..total)
        .map(|i| {
            let mut rest = i;
            let mut x = 1e-3 * noise[i];
            for a in 0..dims {
                let c = rest % side;
                rest /= side;
                x += (c as f64 * 0.02 * (a + 1) as f64).sin();
            }
            x as f32
        })
        .collect();
    (shape, v)
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    // Optional filter for profiling: e.g. `zfpbw 64 F32:16`.
    let only = std::env::args().nth(2);
    let bytes = mib << 20;
    let runs = 5;
    println!("zfp single thread, {mib} MiB inputs, median of {runs}, by CPU time");
    for kind in [FloatKind::F32, FloatKind::F64] {
        for rate in [8, 16] {
            if only
                .as_ref()
                .is_some_and(|o| *o != format!("{kind:?}:{rate}"))
            {
                continue;
            }
            let (enc, dec) = match kind {
                FloatKind::F32 => {
                    let src: Vec<f32> = walk(bytes / 4).into_iter().map(|x| x as f32).collect();
                    let mut s = vec![0u8; zfp::compressed_bytes(src.len(), kind, rate).unwrap()];
                    let mut out = vec![0f32; src.len()];
                    let e = median(
                        || assert!(zfp::encode_f32(&src, rate, &mut s).unwrap() > 0),
                        runs,
                    );
                    let d = median(|| zfp::decode_f32(&s, rate, &mut out).unwrap(), runs);
                    (e, d)
                }
                FloatKind::F64 => {
                    let src = walk(bytes / 8);
                    let mut s = vec![0u8; zfp::compressed_bytes(src.len(), kind, rate).unwrap()];
                    let mut out = vec![0f64; src.len()];
                    let e = median(
                        || assert!(zfp::encode_f64(&src, rate, &mut s).unwrap() > 0),
                        runs,
                    );
                    let d = median(|| zfp::decode_f64(&s, rate, &mut out).unwrap(), runs);
                    (e, d)
                }
            };
            let gb = bytes as f64 / 1e9;
            println!(
                "{kind:?} rate {rate:2}: encode {:6.3} GB/s  decode {:6.3} GB/s",
                gb / enc,
                gb / dec
            );
        }
    }
    for dims in [2u32, 3] {
        if only
            .as_ref()
            .is_some_and(|o| *o != format!("F32:16:{dims}D"))
        {
            continue;
        }
        let (shape, src) = field(bytes / 4, dims);
        let rate = 16;
        let mut s = vec![0u8; zfp::compressed_bytes_nd(&shape, FloatKind::F32, rate).unwrap()];
        let mut out = vec![0f32; src.len()];
        let e = median(
            || assert!(zfp::encode_nd_f32(&src, &shape, rate, &mut s).unwrap() > 0),
            runs,
        );
        let d = median(
            || zfp::decode_nd_f32(&s, &shape, rate, &mut out).unwrap(),
            runs,
        );
        let gb = (src.len() * 4) as f64 / 1e9;
        println!(
            "F32 rate 16, {dims}-D {shape:?}: encode {:6.3} GB/s  decode {:6.3} GB/s",
            gb / e,
            gb / d
        );
    }
}
