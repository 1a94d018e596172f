//! Throughput of the reduction kernels for every ISA (std only).
//!
//! ```text
//! cargo run --release -p shmcoll-kernels --example reducebw -- [options]
//!   --sizes 4K,1M        buffer sizes in bytes (default 1M)
//!   --dtypes float64     dtypes (default float64)
//!   --ops sum,max        operators (default sum)
//!   --isas avx2,avx512   ISAs (default: all the reduction kernels can use here)
//!   --reps N             timed repetitions per cell, median reported (default 7)
//!   --mis D,S            dst/src misalignment from 64 bytes (default 0,0)
//! ```
//!
//! Measures `reduce_into` (`dst = dst op src`, in place) on hot buffers; GB/s = bytes of
//! `dst` per second (1 GB = 1e9 B; the kernel reads twice that and writes it once).

use shmcoll_kernels::reduce::{available_reduce_isas, reduce_into_with};
use shmcoll_kernels::{hw, reduce_isa, Dtype, Isa, Op};
use std::hint::black_box;
use std::time::Instant;

struct Opts {
    sizes: Vec<usize>,
    dtypes: Vec<Dtype>,
    ops: Vec<Op>,
    isas: Vec<Isa>,
    reps: usize,
    mis: (usize, usize),
}

fn parse_args() -> Opts {
    let mut o = Opts {
        sizes: vec![1 << 20],
        dtypes: vec![Dtype::F64],
        ops: vec![Op::Sum],
        isas: available_reduce_isas(),
        reps: 7,
        mis: (0, 0),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    let list = |v: Option<&String>| -> Vec<String> {
        v.expect("missing value")
            .split(',')
            .map(str::to_string)
            .collect()
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--sizes" => {
                o.sizes = list(it.next())
                    .iter()
                    .map(|s| hw::parse_bytes(s).expect("bad size"))
                    .collect()
            }
            "--dtypes" => {
                o.dtypes = list(it.next())
                    .iter()
                    .map(|s| Dtype::parse(s).expect("bad dtype"))
                    .collect()
            }
            "--ops" => {
                o.ops = list(it.next())
                    .iter()
                    .map(|s| Op::parse(s).expect("bad op"))
                    .collect()
            }
            "--isas" => {
                o.isas = list(it.next())
                    .iter()
                    .map(|s| Isa::parse(s).expect("bad isa"))
                    .collect()
            }
            "--reps" => o.reps = it.next().and_then(|s| s.parse().ok()).expect("bad reps"),
            "--mis" => {
                let v = list(it.next());
                o.mis = (
                    v[0].parse().expect("bad mis"),
                    v[1].parse().expect("bad mis"),
                );
            }
            _ => {
                eprintln!("unknown argument {a}; see the header of examples/reducebw.rs");
                std::process::exit(2);
            }
        }
    }
    o
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds per call of `f` (repeated so that one rep covers >= ~256 MiB).
fn time_per_call(len: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let iters = ((256usize << 20) / len.max(1)).clamp(1, 1 << 22);
    f();
    let samples = (0..reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_secs_f64() / iters as f64
        })
        .collect();
    median(samples)
}

fn main() {
    let o = parse_args();
    println!(
        "# reduce_into, default ISA {} | reps {} | mis dst {} src {}",
        reduce_isa().name(),
        o.reps,
        o.mis.0,
        o.mis.1
    );
    print!("{:>9} {:>10} {:>5}", "size", "dtype", "op");
    for isa in &o.isas {
        print!(" {:>8}", isa.name());
    }
    println!("   GB/s");
    for &len in &o.sizes {
        for &dt in &o.dtypes {
            for &op in &o.ops {
                if !op.supports(dt) {
                    continue;
                }
                let len = len / dt.size() * dt.size();
                // Zeros: no denormals, NaNs or overflow however many reps run.
                let mut dv = vec![0u8; len + 128];
                let sv = vec![0u8; len + 128];
                let (d0, s0) = (
                    dv.as_ptr().align_offset(64) + o.mis.0,
                    sv.as_ptr().align_offset(64) + o.mis.1,
                );
                print!("{len:>9} {:>10} {:>5}", dt.name(), op.name());
                for &isa in &o.isas {
                    let (d, s) = (&mut dv[d0..d0 + len], &sv[s0..s0 + len]);
                    let secs = time_per_call(len, o.reps, || {
                        reduce_into_with(isa, dt, op, black_box(&mut *d), black_box(s)).unwrap();
                    });
                    print!(" {:>8.2}", len as f64 / secs / 1e9);
                }
                println!();
            }
        }
    }
}
