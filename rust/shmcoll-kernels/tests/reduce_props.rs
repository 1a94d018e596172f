//! Property tests of the reduction kernels: every (dtype, op) pair the API supports, every
//! ISA the reduction kernels can use on this CPU, lengths 0..300 elements, any byte
//! misalignment 0..15 of each buffer. Results must equal a straightforward scalar
//! reference bit for bit (floats are drawn from a pool rich in NaNs with payloads, signed
//! zeros, infinities and subnormals), and no byte outside the destination may change.

use proptest::prelude::*;
use shmcoll_kernels::reduce::{available_reduce_isas, reduce3_with, reduce_into_with};
use shmcoll_kernels::{reduce3, reduce3_raw, reduce_into, reduce_into_raw, Dtype, Isa, Op};

const CANARY: usize = 64;
const MAX_N: usize = 300;

// ---------------------------------------------------------------- reference

/// The documented NaN rule for float arithmetic: a NaN operand propagates quieted (left
/// first); a NaN from non-NaN operands is the x86 default NaN.
trait Rule: Copy {
    fn rule(a: Self, b: Self, r: Self) -> Self;
}

impl Rule for f32 {
    fn rule(a: f32, b: f32, r: f32) -> f32 {
        match (a.is_nan(), b.is_nan(), r.is_nan()) {
            (true, _, _) => f32::from_bits(a.to_bits() | 0x0040_0000),
            (false, true, _) => f32::from_bits(b.to_bits() | 0x0040_0000),
            (false, false, true) => f32::from_bits(0xFFC0_0000),
            _ => r,
        }
    }
}

impl Rule for f64 {
    fn rule(a: f64, b: f64, r: f64) -> f64 {
        match (a.is_nan(), b.is_nan(), r.is_nan()) {
            (true, _, _) => f64::from_bits(a.to_bits() | 0x0008_0000_0000_0000),
            (false, true, _) => f64::from_bits(b.to_bits() | 0x0008_0000_0000_0000),
            (false, false, true) => f64::from_bits(0xFFF8_0000_0000_0000),
            _ => r,
        }
    }
}

macro_rules! int_ref {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let a = <$t>::from_ne_bytes($a.try_into().unwrap());
        let b = <$t>::from_ne_bytes($b.try_into().unwrap());
        let r: $t = match $op {
            Op::Sum => a.wrapping_add(b),
            Op::Prod => a.wrapping_mul(b),
            Op::Min => {
                if b < a {
                    b
                } else {
                    a
                }
            }
            Op::Max => {
                if b > a {
                    b
                } else {
                    a
                }
            }
            Op::Band => a & b,
            Op::Bor => a | b,
            Op::Bxor => a ^ b,
            Op::Land => (a != 0 && b != 0) as $t,
            Op::Lor => (a != 0 || b != 0) as $t,
        };
        r.to_ne_bytes().to_vec()
    }};
}

macro_rules! float_ref {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let a = <$t>::from_ne_bytes($a.try_into().unwrap());
        let b = <$t>::from_ne_bytes($b.try_into().unwrap());
        let r: $t = match $op {
            Op::Sum => Rule::rule(a, b, a + b),
            Op::Prod => Rule::rule(a, b, a * b),
            Op::Min => {
                if b < a {
                    b
                } else {
                    a
                }
            }
            Op::Max => {
                if b > a {
                    b
                } else {
                    a
                }
            }
            _ => unreachable!(),
        };
        r.to_ne_bytes().to_vec()
    }};
}

macro_rules! complex_ref {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let h = std::mem::size_of::<$t>();
        let f = |s: &[u8]| <$t>::from_ne_bytes(s.try_into().unwrap());
        let (ar, ai) = (f(&$a[..h]), f(&$a[h..]));
        let (br, bi) = (f(&$b[..h]), f(&$b[h..]));
        let add = |x: $t, y: $t| Rule::rule(x, y, x + y);
        let sub = |x: $t, y: $t| Rule::rule(x, y, x - y);
        let mul = |x: $t, y: $t| Rule::rule(x, y, x * y);
        let (re, im) = match $op {
            Op::Sum => (add(ar, br), add(ai, bi)),
            Op::Prod => (sub(mul(ar, br), mul(ai, bi)), add(mul(ar, bi), mul(ai, br))),
            _ => unreachable!(),
        };
        let mut v = re.to_ne_bytes().to_vec();
        v.extend_from_slice(&im.to_ne_bytes());
        v
    }};
}

/// `a op b` for one element, as bytes.
fn ref_elem(dt: Dtype, op: Op, a: &[u8], b: &[u8]) -> Vec<u8> {
    match dt {
        Dtype::I8 => int_ref!(i8, op, a, b),
        Dtype::I16 => int_ref!(i16, op, a, b),
        Dtype::I32 => int_ref!(i32, op, a, b),
        Dtype::I64 => int_ref!(i64, op, a, b),
        Dtype::U8 => int_ref!(u8, op, a, b),
        Dtype::U16 => int_ref!(u16, op, a, b),
        Dtype::U32 => int_ref!(u32, op, a, b),
        Dtype::U64 => int_ref!(u64, op, a, b),
        Dtype::F32 => float_ref!(f32, op, a, b),
        Dtype::F64 => float_ref!(f64, op, a, b),
        Dtype::C64 => complex_ref!(f32, op, a, b),
        Dtype::C128 => complex_ref!(f64, op, a, b),
    }
}

/// `a op b` element-wise, as bytes.
fn reference(dt: Dtype, op: Op, a: &[u8], b: &[u8]) -> Vec<u8> {
    let s = dt.size();
    a.chunks(s)
        .zip(b.chunks(s))
        .flat_map(|(x, y)| ref_elem(dt, op, x, y))
        .collect()
}

// ---------------------------------------------------------------- data

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// One float's bits (`bits` = 32 or 64), drawn to hit the interesting cases often.
fn float_bits(r: &mut Rng, bits: u32) -> u64 {
    let (exp_mask, quiet, mant_mask, sign) = if bits == 32 {
        (
            0x7F80_0000u64,
            0x0040_0000u64,
            0x007F_FFFFu64,
            0x8000_0000u64,
        )
    } else {
        (
            0x7FF0_0000_0000_0000,
            0x0008_0000_0000_0000,
            0x000F_FFFF_FFFF_FFFF,
            0x8000_0000_0000_0000,
        )
    };
    let x = r.next();
    let s = if x & 1 == 0 { 0 } else { sign };
    let payload = (x >> 8) & mant_mask;
    let small = |v: f64| {
        if bits == 32 {
            u64::from((v as f32).to_bits())
        } else {
            v.to_bits()
        }
    };
    match (x >> 1) % 16 {
        0 => exp_mask | quiet | payload | s, // quiet NaN, any payload
        1 => exp_mask | (payload & !quiet).max(1) | s, // signalling NaN
        2 => exp_mask | s,                   // +-inf
        3 => s,                              // +-0
        4 => (payload >> 3).max(1) | s,      // subnormal
        5 => (exp_mask - (mant_mask + 1)) | payload | s, // huge finite
        6..=9 => small(((x >> 16) % 9) as f64 - 4.0), // small integers
        _ => r.next() & (if bits == 32 { 0xFFFF_FFFF } else { u64::MAX }), // anything
    }
}

/// `n` random elements of `dt`, as bytes.
fn gen(dt: Dtype, n: usize, r: &mut Rng) -> Vec<u8> {
    let mut v = Vec::with_capacity(n * dt.size());
    for _ in 0..n {
        match dt {
            Dtype::F32 => v.extend_from_slice(&(float_bits(r, 32) as u32).to_ne_bytes()),
            Dtype::F64 => v.extend_from_slice(&float_bits(r, 64).to_ne_bytes()),
            Dtype::C64 => {
                for _ in 0..2 {
                    v.extend_from_slice(&(float_bits(r, 32) as u32).to_ne_bytes());
                }
            }
            Dtype::C128 => {
                for _ in 0..2 {
                    v.extend_from_slice(&float_bits(r, 64).to_ne_bytes());
                }
            }
            _ => {
                let s = dt.size();
                let x = r.next();
                let full = r.next().to_ne_bytes();
                let bytes: Vec<u8> = match x % 8 {
                    0 => vec![0; s], // zero
                    1 => {
                        let mut b = vec![0; s]; // one
                        b[if cfg!(target_endian = "little") {
                            0
                        } else {
                            s - 1
                        }] = 1;
                        b
                    }
                    2 => vec![0xFF; s], // -1 / MAX
                    3 => {
                        let mut b = vec![0; s]; // MIN (signed)
                        b[if cfg!(target_endian = "little") {
                            s - 1
                        } else {
                            0
                        }] = 0x80;
                        b
                    }
                    4 => full[..s].iter().map(|b| b & 0x03).collect(), // small
                    _ => full[..s].to_vec(),
                };
                v.extend_from_slice(&bytes);
            }
        }
    }
    v
}

// ---------------------------------------------------------------- buffers

fn canary(i: usize) -> u8 {
    (i as u8).wrapping_mul(37) ^ 0xC3
}

/// A byte buffer whose window of `len` bytes starts `mis` bytes past a 64-byte boundary,
/// surrounded by canaries.
struct Buf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl Buf {
    fn new(content: &[u8], mis: usize) -> Buf {
        let len = content.len();
        let mut v: Vec<u8> = (0..len + mis + 2 * CANARY + 64).map(canary).collect();
        let off = v.as_ptr().align_offset(64) + CANARY + mis;
        v.truncate(off + len + CANARY);
        v[off..off + len].copy_from_slice(content);
        Buf { v, off, len }
    }
    fn win(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
    fn win_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
    fn ptr(&mut self) -> *mut u8 {
        self.win_mut().as_mut_ptr()
    }
    /// Asserts the window holds `expect` and every other byte is its canary.
    fn check(&self, expect: &[u8], ctx: &str) {
        let got = self.win();
        if got != expect {
            let i = got.iter().zip(expect).position(|(g, e)| g != e).unwrap();
            panic!(
                "{ctx}: first difference at byte {i}: got {:02x?} expected {:02x?}",
                &got[i..(i + 16).min(got.len())],
                &expect[i..(i + 16).min(expect.len())]
            );
        }
        for (i, &b) in self.v.iter().enumerate() {
            if i < self.off || i >= self.off + self.len {
                assert_eq!(b, canary(i), "{ctx}: byte {i} outside the window changed");
            }
        }
    }
}

/// All supported (dtype, op) pairs.
fn pairs() -> Vec<(Dtype, Op)> {
    Dtype::ALL
        .iter()
        .flat_map(|&d| {
            Op::ALL
                .iter()
                .filter(move |o| o.supports(d))
                .map(move |&o| (d, o))
        })
        .collect()
}

/// Runs every entry point on one case and checks it against the reference.
#[allow(clippy::too_many_arguments)]
fn check_case(dt: Dtype, op: Op, n: usize, dmis: usize, amis: usize, bmis: usize, seed: u64) {
    let mut r = Rng(seed);
    let a = gen(dt, n, &mut r);
    let b = gen(dt, n, &mut r);
    let expect = reference(dt, op, &a, &b);
    let ctx = |what: &str| format!("{what} {dt} {op} n={n} mis=({dmis},{amis},{bmis}) seed={seed}");

    let mut isas: Vec<Option<Isa>> = available_reduce_isas().into_iter().map(Some).collect();
    isas.push(None); // the default entry points (active ISA, small-size shortcut)
    for isa in isas {
        let tag = isa.map_or("default", |i| i.name());
        // In place: dst (= left operand) op= src.
        let mut d = Buf::new(&a, dmis);
        let s = Buf::new(&b, bmis);
        match isa {
            Some(i) => reduce_into_with(i, dt, op, d.win_mut(), s.win()),
            None => reduce_into(dt, op, d.win_mut(), s.win()),
        }
        .unwrap();
        d.check(&expect, &ctx(&format!("reduce_into[{tag}]")));
        s.check(&b, &ctx(&format!("reduce_into[{tag}] src")));

        // Three buffers.
        let mut d = Buf::new(&vec![0x5A; a.len()], dmis);
        let sa = Buf::new(&a, amis);
        let sb = Buf::new(&b, bmis);
        match isa {
            Some(i) => reduce3_with(i, dt, op, d.win_mut(), sa.win(), sb.win()),
            None => reduce3(dt, op, d.win_mut(), sa.win(), sb.win()),
        }
        .unwrap();
        d.check(&expect, &ctx(&format!("reduce3[{tag}]")));
        sa.check(&a, &ctx(&format!("reduce3[{tag}] a")));
        sb.check(&b, &ctx(&format!("reduce3[{tag}] b")));
    }

    // Exact aliases through the raw entry points.
    let mut d = Buf::new(&b, dmis);
    let mut sa = Buf::new(&a, amis);
    let p = d.ptr();
    // SAFETY: both windows hold n elements; dst aliases b exactly, a is a distinct Vec.
    unsafe { reduce3_raw(dt, op, p, sa.ptr(), p, n) };
    d.check(&expect, &ctx("reduce3_raw dst==b"));
    let mut d = Buf::new(&a, dmis);
    let mut sb = Buf::new(&b, bmis);
    let p = d.ptr();
    // SAFETY: as above, dst aliases a exactly.
    unsafe { reduce3_raw(dt, op, p, p, sb.ptr(), n) };
    d.check(&expect, &ctx("reduce3_raw dst==a"));
    let mut d = Buf::new(&a, dmis);
    let p = d.ptr();
    // SAFETY: the window holds n elements; dst == src exactly is allowed.
    unsafe { reduce_into_raw(dt, op, p, p, n) };
    d.check(&reference(dt, op, &a, &a), &ctx("reduce_into_raw dst==src"));
    let mut d = Buf::new(&a, dmis);
    let mut sb = Buf::new(&b, bmis);
    // SAFETY: both windows hold n elements, distinct Vecs.
    unsafe { reduce_into_raw(dt, op, d.ptr(), sb.ptr(), n) };
    d.check(&expect, &ctx("reduce_into_raw"));
}

// ---------------------------------------------------------------- tests

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn matches_reference(
        pair in 0usize..84,
        n in prop_oneof![2 => 0usize..40, 3 => 0usize..MAX_N],
        dmis in 0usize..16,
        amis in 0usize..16,
        bmis in 0usize..16,
        seed: u64,
    ) {
        let (dt, op) = pairs()[pair];
        check_case(dt, op, n, dmis, amis, bmis, seed);
    }
}

/// Every pair, every ISA, lengths around all block and tail boundaries, deterministic.
#[test]
fn all_pairs_boundary_lengths() {
    let ps = pairs();
    assert_eq!(ps.len(), 84);
    let mut lens: Vec<usize> = (0..=40).collect();
    lens.extend([47, 48, 49, 63, 64, 65, 127, 128, 129, 255, 256, 257, 299]);
    for (k, &(dt, op)) in ps.iter().enumerate() {
        for &n in &lens {
            let m = (k + n) % 16;
            check_case(
                dt,
                op,
                n,
                m,
                (m * 7) % 16,
                (m * 11 + 3) % 16,
                (k * 1000 + n) as u64,
            );
        }
    }
}

/// Float SUM/PROD on data made only of NaNs, infinities and zeros: every block takes the
/// NaN fix-up path; results must still be the documented bits.
#[test]
fn nan_heavy_blocks() {
    for dt in [Dtype::F32, Dtype::F64, Dtype::C64, Dtype::C128] {
        for op in [Op::Sum, Op::Prod, Op::Min, Op::Max] {
            if !op.supports(dt) {
                continue;
            }
            for seed in 0..64u64 {
                let mut r = Rng(seed);
                let n = 1 + (r.next() % 200) as usize;
                let specials = |r: &mut Rng, bits: u32| loop {
                    let x = float_bits(r, bits);
                    let e = if bits == 32 {
                        0x7F80_0000
                    } else {
                        0x7FF0_0000_0000_0000
                    };
                    if x & e == e || x & !(1 << (bits - 1)) == 0 {
                        break x;
                    }
                };
                let mk = |r: &mut Rng| -> Vec<u8> {
                    let comps = n * dt.size()
                        / if dt == Dtype::F32 || dt == Dtype::C64 {
                            4
                        } else {
                            8
                        };
                    (0..comps)
                        .flat_map(|_| {
                            if dt == Dtype::F32 || dt == Dtype::C64 {
                                (specials(r, 32) as u32).to_ne_bytes().to_vec()
                            } else {
                                specials(r, 64).to_ne_bytes().to_vec()
                            }
                        })
                        .collect()
                };
                let (a, b) = (mk(&mut r), mk(&mut r));
                let expect = reference(dt, op, &a, &b);
                for isa in available_reduce_isas() {
                    let mut d = a.clone();
                    reduce_into_with(isa, dt, op, &mut d, &b).unwrap();
                    assert!(d == expect, "{isa:?} {dt} {op} seed {seed}");
                }
            }
        }
    }
}

/// The NaN rule is what x86 SSE computes for `a op b` with `a` as the first operand.
#[cfg(target_arch = "x86_64")]
#[test]
fn nan_rule_matches_x86_hardware() {
    use std::arch::asm;
    fn hw64(op: u8, a: f64, b: f64) -> f64 {
        let mut x = a;
        // SAFETY: plain SSE2 arithmetic on registers.
        unsafe {
            match op {
                0 => asm!("addsd {x}, {y}", x = inout(xmm_reg) x, y = in(xmm_reg) b),
                1 => asm!("subsd {x}, {y}", x = inout(xmm_reg) x, y = in(xmm_reg) b),
                _ => asm!("mulsd {x}, {y}", x = inout(xmm_reg) x, y = in(xmm_reg) b),
            }
        }
        x
    }
    fn hw32(op: u8, a: f32, b: f32) -> f32 {
        let mut x = a;
        // SAFETY: plain SSE arithmetic on registers.
        unsafe {
            match op {
                0 => asm!("addss {x}, {y}", x = inout(xmm_reg) x, y = in(xmm_reg) b),
                1 => asm!("subss {x}, {y}", x = inout(xmm_reg) x, y = in(xmm_reg) b),
                _ => asm!("mulss {x}, {y}", x = inout(xmm_reg) x, y = in(xmm_reg) b),
            }
        }
        x
    }
    let mut r = Rng(42);
    for _ in 0..20_000 {
        let (a, b) = (
            f64::from_bits(float_bits(&mut r, 64)),
            f64::from_bits(float_bits(&mut r, 64)),
        );
        for (op, raw) in [(0, a + b), (1, a - b), (2, a * b)] {
            assert_eq!(
                Rule::rule(a, b, raw).to_bits(),
                hw64(op, a, b).to_bits(),
                "f64 op {op} {:x} {:x}",
                a.to_bits(),
                b.to_bits()
            );
        }
        let (a, b) = (
            f32::from_bits(float_bits(&mut r, 32) as u32),
            f32::from_bits(float_bits(&mut r, 32) as u32),
        );
        for (op, raw) in [(0, a + b), (1, a - b), (2, a * b)] {
            assert_eq!(
                Rule::rule(a, b, raw).to_bits(),
                hw32(op, a, b).to_bits(),
                "f32 op {op}"
            );
        }
    }
}

/// The data generator really produces the cases the tests rely on.
#[test]
fn generator_coverage() {
    let mut r = Rng(7);
    let v: Vec<f64> = (0..10_000)
        .map(|_| f64::from_bits(float_bits(&mut r, 64)))
        .collect();
    let nans = v.iter().filter(|x| x.is_nan()).count();
    let snans = v
        .iter()
        .filter(|x| x.is_nan() && x.to_bits() & 0x0008_0000_0000_0000 == 0)
        .count();
    let infs = v.iter().filter(|x| x.is_infinite()).count();
    let zeros = v.iter().filter(|&&x| x == 0.0).count();
    let subn = v.iter().filter(|x| x.is_subnormal()).count();
    assert!(nans > 500 && snans > 200 && infs > 300 && zeros > 300 && subn > 300);
}
