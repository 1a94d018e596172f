//! Copy bandwidth of every ISA x store policy (std only).
//!
//! ```text
//! cargo run --release -p shmcoll-kernels --example copybw -- [options]
//!   --sizes 4K,64K,1M     sizes to measure (default 4K..256M, powers of 4)
//!   --isas avx2,avx512    ISAs (default: all this CPU has)
//!   --stores temporal,nt  store policies (default: temporal,nt,hybrid)
//!   --reps N              timed repetitions per cell, median reported (default 7)
//!   --mis S,D             src/dst misalignment from 64 bytes (default 0,0)
//!   --small               latency mode: ns per temporal copy for 1 B..8 KiB
//! ```
//!
//! GB/s = bytes copied / time (1 GB = 1e9 B; the memory traffic is about twice that, or
//! three times for temporal stores that miss, counting the read-for-ownership). The same
//! source and destination are copied repeatedly ("hot" buffers: small sizes stay in cache),
//! with `store_fence()` after each copy that streamed, as a real sender would. Buffers are
//! written before timing so page faults are not measured.

use shmcoll_kernels::{available_isas, copy_raw, copy_raw_with, hw, store_fence, Isa, Store};
use std::hint::black_box;
use std::time::Instant;

struct Opts {
    sizes: Vec<usize>,
    isas: Vec<Isa>,
    stores: Vec<Store>,
    reps: usize,
    mis: (usize, usize),
    small: bool,
}

fn parse_args() -> Opts {
    let mut o = Opts {
        sizes: (0..9).map(|i| 4096 << (2 * i)).collect(),
        isas: available_isas(),
        stores: Store::ALL.to_vec(),
        reps: 7,
        mis: (0, 0),
        small: false,
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
            "--isas" => {
                o.isas = list(it.next())
                    .iter()
                    .map(|s| Isa::parse(s).expect("bad isa"))
                    .collect()
            }
            "--stores" => {
                o.stores = list(it.next())
                    .iter()
                    .map(|s| Store::parse(s).expect("bad store"))
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
            "--small" => o.small = true,
            _ => {
                eprintln!("unknown argument {a}; see the header of examples/copybw.rs");
                std::process::exit(2);
            }
        }
    }
    o
}

/// A 64-byte aligned window of `len` bytes at misalignment `mis`, written once (faulted in).
struct Buf {
    v: Vec<u8>,
    off: usize,
}

impl Buf {
    fn new(len: usize, mis: usize, fill: u8) -> Buf {
        let v = vec![fill; len + 128];
        let off = v.as_ptr().align_offset(64) + mis;
        Buf { v, off }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.v[self.off..].as_mut_ptr()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds per call of `f` (repeated so that one rep moves >= ~256 MiB or takes one call).
fn time_per_call(len: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let iters = ((256usize << 20) / len.max(1)).clamp(1, 1 << 22);
    f(); // warm up: caches, TLB, dispatch table
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

fn fmt_size(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}G", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => format!("{n}"),
    }
}

fn main() {
    let o = parse_args();
    let m = hw::machine();
    println!(
        "# {} | {} logical / {} cores / {} socket(s) | L1d {} L2 {} L3 {} (/{}) | {:?}",
        m.model_name,
        m.logical_cpus,
        m.physical_cores,
        m.sockets,
        fmt_size(m.l1d_bytes),
        fmt_size(m.l2_bytes),
        fmt_size(m.l3_bytes),
        m.l3_shared_by,
        m.simd
    );
    println!(
        "# nt_threshold {} | reps {} | mis src {} dst {}",
        fmt_size(hw::nt_threshold()),
        o.reps,
        o.mis.0,
        o.mis.1
    );
    if o.small {
        small(&o);
    } else {
        bandwidth(&o);
    }
}

fn bandwidth(o: &Opts) {
    let max = o.sizes.iter().copied().max().unwrap_or(0);
    let mut src = Buf::new(max, o.mis.0, 0x5a);
    let mut dst = Buf::new(max, o.mis.1, 0);
    let cols: Vec<(Isa, Store)> = o
        .isas
        .iter()
        .flat_map(|&i| o.stores.iter().map(move |&s| (i, s)))
        .collect();
    print!("{:>6}", "size");
    for (i, s) in &cols {
        print!(" {:>14}", format!("{}/{}", i.name(), s.name()));
    }
    println!("   GB/s");
    for &len in &o.sizes {
        print!("{:>6}", fmt_size(len));
        for &(isa, store) in &cols {
            let (d, s) = (dst.ptr(), src.ptr());
            let secs = time_per_call(len, o.reps, || {
                // SAFETY: both buffers hold max >= len bytes past their offsets; distinct Vecs.
                let nt = unsafe { copy_raw_with(isa, black_box(d), black_box(s), len, store) };
                if nt {
                    store_fence();
                }
            });
            print!(" {:>14.2}", len as f64 / secs / 1e9);
        }
        println!();
    }
}

fn small(o: &Opts) {
    let sizes = [
        1usize, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
        2048, 3072, 4096, 6144, 8192,
    ];
    let mut src = Buf::new(8192, o.mis.0, 0x5a);
    let mut dst = Buf::new(8192, o.mis.1, 0);
    print!("{:>6} {:>9}", "size", "default");
    for i in &o.isas {
        print!(" {:>9}", i.name());
    }
    println!("   ns per temporal copy (default = copy_raw, active ISA, inline <= 16 B)");
    for len in sizes {
        let (d, s) = (dst.ptr(), src.ptr());
        let t = time_per_call(len, o.reps, || {
            // SAFETY: both buffers hold 8192 bytes past their offsets; distinct Vecs.
            unsafe { copy_raw(black_box(d), black_box(s), black_box(len), Store::Temporal) };
        });
        print!("{:>6} {:>9.2}", len, t * 1e9);
        for &isa in &o.isas {
            let t = time_per_call(len, o.reps, || {
                let (d, s, n) = (black_box(d), black_box(s), black_box(len));
                // SAFETY: as above.
                unsafe { copy_raw_with(isa, d, s, n, Store::Temporal) };
            });
            print!(" {:>9.2}", t * 1e9);
        }
        println!();
    }
}
