//! Reduction kernels: element-wise `dst = left op right` over typed buffers, the local step
//! of MPI_Reduce / MPI_Allreduce style collectives.
//!
//! # Semantics
//!
//! Results are fixed bit for bit, so that every rank, every algorithm and every ISA computes
//! the same bytes from the same operands in the same order. The *left* operand is `dst` (in
//! [`reduce_into`]) or `a` (in [`reduce3`]): by convention the value accumulated from lower
//! ranks. The *right* operand is `src` / `b`. Order matters for MIN/MAX with NaNs (and for
//! the payload of NaN results, see below).
//!
//! - Integers: SUM and PROD wrap (two's complement, like C unsigned arithmetic); MIN/MAX
//!   compare signed or unsigned according to the dtype; BAND/BOR/BXOR are bitwise; LAND is
//!   `(a != 0 && b != 0) as T` and LOR `(a != 0 || b != 0) as T` (always 0 or 1).
//! - Real floats: SUM is `a + b`, PROD `a * b`, IEEE 754 round-to-nearest, never contracted
//!   into fused multiply-adds (subnormals are kept, unless the process set FTZ/DAZ).
//! - MIN is `if b < a { b } else { a }` and MAX `if b > a { b } else { a }` (a = left, b =
//!   right). Any comparison with a NaN is false, so a NaN on the right never replaces the
//!   left value and a NaN on the left always stays (bit for bit, payload included). Of
//!   `-0.0` and `+0.0` the left one is kept. These are the semantics of x86 `minps`/`maxps`
//!   with the right operand first, not IEEE `minNum`.
//! - Complex (`complex64` = two `f32`, `complex128` = two `f64`, real part first): SUM is
//!   componentwise; PROD is `(ar*br - ai*bi, ar*bi + ai*br)`, evaluated in exactly that
//!   order, each operation rounded, no FMA. MIN/MAX and the bit/logical ops are not defined
//!   ([`Op::supports`]).
//! - NaN results of float SUM/PROD (each `+`, `-`, `*` above): if the left operand is a NaN
//!   the result is that NaN, quieted (payload and sign kept, quiet bit set); else if the
//!   right one is, that NaN quieted; a NaN made from non-NaN operands (`inf - inf`,
//!   `0 * inf`) is the x86 default NaN (`0xFFC00000` / `0xFFF8000000000000`). This is
//!   exactly what x86 SSE/AVX compute for `a op b` with `a` as the first source, but neither
//!   Rust nor LLVM promise it (LLVM freely swaps the operands of `a + b`, ARM picks other
//!   NaNs), so the kernels check every block for NaN results and recompute such blocks
//!   with the rule; a NaN-free block costs a few vector compares.
//!
//! # Dispatch
//!
//! As for the copy kernels: the kernel table (one function pointer per dtype x op x ISA) is
//! built once in a `OnceLock`; the ISA is the copy kernels' [`active_isa`] (so
//! `SHMCOLL_ISA` lowers it too), lowered further if the CPU lacks a feature the reduction
//! kernels need (AVX-512 here means F+BW+DQ+VL). Each ISA compiles the same generic element
//! loop with its own `#[target_feature]` and lets the compiler vectorise it. `Isa::Scalar`
//! and `Isa::Sse2` share the portable build (vectorised with the baseline SSE2 on x86_64,
//! NEON on aarch64). Calls on fewer than 16 elements use the portable kernels.

use crate::copy::{active_isa, available_isas, Isa};
use std::fmt;
use std::sync::OnceLock;

mod generic;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

use generic::Entry;

/// Element type of a reduction buffer (numpy's fixed-size numeric types, native endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dtype {
    /// `int8`.
    I8 = 0,
    /// `int16`.
    I16 = 1,
    /// `int32`.
    I32 = 2,
    /// `int64`.
    I64 = 3,
    /// `uint8`.
    U8 = 4,
    /// `uint16`.
    U16 = 5,
    /// `uint32`.
    U32 = 6,
    /// `uint64`.
    U64 = 7,
    /// `float32` (IEEE binary32).
    F32 = 8,
    /// `float64` (IEEE binary64).
    F64 = 9,
    /// `complex64`: two `float32`, real part first.
    C64 = 10,
    /// `complex128`: two `float64`, real part first.
    C128 = 11,
}

impl Dtype {
    /// All dtypes, in [`code`](Dtype::code) order.
    pub const ALL: [Dtype; 12] = [
        Dtype::I8,
        Dtype::I16,
        Dtype::I32,
        Dtype::I64,
        Dtype::U8,
        Dtype::U16,
        Dtype::U32,
        Dtype::U64,
        Dtype::F32,
        Dtype::F64,
        Dtype::C64,
        Dtype::C128,
    ];

    /// Bytes per element (`C64` = 8, `C128` = 16).
    pub fn size(self) -> usize {
        match self {
            Dtype::I8 | Dtype::U8 => 1,
            Dtype::I16 | Dtype::U16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 | Dtype::C64 => 8,
            Dtype::C128 => 16,
        }
    }

    /// numpy name: `"int8"` .. `"uint64"`, `"float32"`, `"float64"`, `"complex64"`,
    /// `"complex128"`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::I8 => "int8",
            Dtype::I16 => "int16",
            Dtype::I32 => "int32",
            Dtype::I64 => "int64",
            Dtype::U8 => "uint8",
            Dtype::U16 => "uint16",
            Dtype::U32 => "uint32",
            Dtype::U64 => "uint64",
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
            Dtype::C64 => "complex64",
            Dtype::C128 => "complex128",
        }
    }

    /// Parses a numpy name as returned by [`name`](Dtype::name) (case-insensitive, surrounding
    /// whitespace ignored).
    pub fn parse(s: &str) -> Option<Dtype> {
        let s = s.trim();
        Dtype::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
    }

    /// Stable small code (0..=11, the order of [`Dtype::ALL`]) for descriptors.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The dtype with [`code`](Dtype::code) `c`, if any.
    pub fn from_code(c: u8) -> Option<Dtype> {
        Dtype::ALL.get(usize::from(c)).copied()
    }

    /// Whether this is a (signed or unsigned) integer type.
    pub fn is_integer(self) -> bool {
        (self as u8) < 8
    }

    /// Whether this is `complex64` or `complex128`.
    pub fn is_complex(self) -> bool {
        matches!(self, Dtype::C64 | Dtype::C128)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operator (MPI's predefined operators, minus MINLOC/MAXLOC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Sum (wrapping for integers).
    Sum = 0,
    /// Product (wrapping for integers).
    Prod = 1,
    /// Minimum (`if b < a { b } else { a }`).
    Min = 2,
    /// Maximum (`if b > a { b } else { a }`).
    Max = 3,
    /// Bitwise and.
    Band = 4,
    /// Bitwise or.
    Bor = 5,
    /// Bitwise exclusive or.
    Bxor = 6,
    /// Logical and (result 0 or 1).
    Land = 7,
    /// Logical or (result 0 or 1).
    Lor = 8,
}

impl Op {
    /// All operators, in [`code`](Op::code) order.
    pub const ALL: [Op; 9] = [
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::Band,
        Op::Bor,
        Op::Bxor,
        Op::Land,
        Op::Lor,
    ];

    /// Name: `"sum"`, `"prod"`, `"min"`, `"max"`, `"band"`, `"bor"`, `"bxor"`, `"land"`,
    /// `"lor"`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Min => "min",
            Op::Max => "max",
            Op::Band => "band",
            Op::Bor => "bor",
            Op::Bxor => "bxor",
            Op::Land => "land",
            Op::Lor => "lor",
        }
    }

    /// Parses a name (case-insensitive, surrounding whitespace ignored), with or without
    /// MPI's `MPI_` prefix: `"sum"`, `"SUM"`, `"MPI_SUM"` all give [`Op::Sum`].
    pub fn parse(s: &str) -> Option<Op> {
        let s = s.trim();
        let s = match s.get(..4) {
            Some(p) if p.eq_ignore_ascii_case("mpi_") => &s[4..],
            _ => s,
        };
        Op::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(s))
    }

    /// Stable small code (0..=8, the order of [`Op::ALL`]) for descriptors.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The operator with [`code`](Op::code) `c`, if any.
    pub fn from_code(c: u8) -> Option<Op> {
        Op::ALL.get(usize::from(c)).copied()
    }

    /// Whether the operator is defined for `dt`: SUM/PROD for all dtypes; MIN/MAX for
    /// integers and real floats (not complex); BAND/BOR/BXOR/LAND/LOR for integers only.
    pub fn supports(self, dt: Dtype) -> bool {
        match self {
            Op::Sum | Op::Prod => true,
            Op::Min | Op::Max => !dt.is_complex(),
            Op::Band | Op::Bor | Op::Bxor | Op::Land | Op::Lor => dt.is_integer(),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Below this many elements the portable kernels are used whatever the ISA: the vector
/// loops would only run their tails.
const SMALL_N: usize = 16;

/// Kernels of one ISA, indexed by `[dtype code][op code]`; None where the op is undefined.
type Table = [[Option<Entry>; 9]; 12];

struct Dispatch {
    active: Isa,
    best: Isa,
    /// Indexed by `Isa as usize`; entries above `best` hold `best`'s kernels.
    tables: [Table; 4],
}

/// The best ISA the reduction kernels can use on this CPU: the copy kernels' best, lowered
/// to AVX2 when AVX-512 lacks BW, DQ or VL.
fn detect_isa() -> Isa {
    let copy_best = available_isas().last().copied().unwrap_or(Isa::Scalar);
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl");
        let own = if avx512 && is_x86_feature_detected!("avx2") {
            Isa::Avx512
        } else if is_x86_feature_detected!("avx2") {
            Isa::Avx2
        } else {
            Isa::Sse2
        };
        own.min(copy_best)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = copy_best;
        Isa::Scalar
    }
}

/// Kernel table of `isa`, which the CPU must support.
fn table(isa: Isa) -> Table {
    let get: fn(Dtype, Op) -> Option<Entry> = match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86_avx512::kernel,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86_avx2::kernel,
        _ => portable::kernel,
    };
    Dtype::ALL.map(|dt| Op::ALL.map(|op| get(dt, op)))
}

fn dispatch() -> &'static Dispatch {
    static D: OnceLock<Dispatch> = OnceLock::new();
    D.get_or_init(|| {
        let best = detect_isa();
        // Only ISAs <= best get their own kernels: this is what makes calling them sound.
        let tables = Isa::ALL.map(|i| table(i.min(best)));
        Dispatch {
            active: active_isa().min(best),
            best,
            tables,
        }
    })
}

/// Which ISA the reduction kernels run with: the copy kernels' [`active_isa`] (honouring
/// `SHMCOLL_ISA`), lowered if the CPU lacks a feature the reduction kernels need.
pub fn reduce_isa() -> Isa {
    dispatch().active
}

/// The ISAs the reduction kernels can run with on this CPU, ascending (regardless of
/// `SHMCOLL_ISA`). For tests and benchmarks.
#[doc(hidden)]
pub fn available_reduce_isas() -> Vec<Isa> {
    let best = dispatch().best;
    Isa::ALL.into_iter().filter(|&i| i <= best).collect()
}

#[cold]
#[inline(never)]
fn unsupported(dt: Dtype, op: Op) -> ! {
    panic!("reduce: op {op} is not defined for dtype {dt}")
}

/// Runs the kernel of `(dt, op)` from table `t`.
///
/// # Safety
/// As [`reduce3_raw`]; `t` holds only kernels the CPU supports.
#[inline(always)]
unsafe fn run(t: &Table, dt: Dtype, op: Op, dst: *mut u8, a: *const u8, b: *const u8, n: usize) {
    let Some(e) = t[dt as usize][op as usize] else {
        unsupported(dt, op)
    };
    // SAFETY: the caller's contract (n dtype elements = n * mult kernel elements, valid and
    // aliasing only exactly) is the kernel's; the dispatch table only holds kernels for
    // ISAs the CPU supports.
    unsafe { (e.f)(dst, a, b, n * e.mult) }
}

/// `dst[i] = dst[i] op src[i]` for `n` elements of `dt`, with the [`reduce_isa`] kernels.
/// Pointers may be unaligned.
///
/// # Panics
/// If `op` is not defined for `dt` ([`Op::supports`]).
///
/// # Safety
/// `dst` valid for `n * dt.size()` byte reads and writes, `src` for as many reads; the
/// ranges do not overlap, or `dst == src` exactly.
#[inline]
pub unsafe fn reduce_into_raw(dt: Dtype, op: Op, dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the caller's contract; dst as the left operand is an exact alias, allowed.
    unsafe { reduce3_raw(dt, op, dst, dst, src, n) }
}

/// `dst[i] = a[i] op b[i]` for `n` elements of `dt`, with the [`reduce_isa`] kernels.
/// Pointers may be unaligned.
///
/// # Panics
/// If `op` is not defined for `dt` ([`Op::supports`]).
///
/// # Safety
/// `a` and `b` valid for `n * dt.size()` byte reads, `dst` for as many writes; `dst` may be
/// equal to `a` and/or `b` (exact alias), otherwise it overlaps neither (`a` and `b` may
/// overlap each other in any way).
#[inline]
pub unsafe fn reduce3_raw(dt: Dtype, op: Op, dst: *mut u8, a: *const u8, b: *const u8, n: usize) {
    if n == 0 {
        if !op.supports(dt) {
            unsupported(dt, op);
        }
        return;
    }
    let d = dispatch();
    let isa = if n < SMALL_N { Isa::Scalar } else { d.active };
    // SAFETY: forwarded caller contract; tables only hold kernels the CPU supports.
    unsafe { run(&d.tables[isa as usize], dt, op, dst, a, b, n) }
}

/// Checks the arguments of the safe wrappers; returns the element count.
fn check(dt: Dtype, op: Op, dst: usize, srcs: &[(&str, usize)]) -> Result<usize, String> {
    if !op.supports(dt) {
        return Err(format!("reduce: op {op} is not defined for dtype {dt}"));
    }
    for &(name, len) in srcs {
        if len != dst {
            return Err(format!(
                "reduce: buffer lengths differ (dst {dst} bytes, {name} {len} bytes)"
            ));
        }
    }
    if !dst.is_multiple_of(dt.size()) {
        return Err(format!(
            "reduce: buffer length {dst} bytes is not a multiple of the {dt} element size ({} bytes)",
            dt.size()
        ));
    }
    Ok(dst / dt.size())
}

/// `dst[i] = dst[i] op src[i]` on byte buffers holding elements of `dt` (any alignment).
/// Errors if the lengths differ or are not a multiple of `dt.size()`, or if `op` is not
/// defined for `dt`.
pub fn reduce_into(dt: Dtype, op: Op, dst: &mut [u8], src: &[u8]) -> Result<(), String> {
    let n = check(dt, op, dst.len(), &[("src", src.len())])?;
    // SAFETY: both slices hold n elements; a &mut cannot overlap a &; op supports dt.
    unsafe { reduce_into_raw(dt, op, dst.as_mut_ptr(), src.as_ptr(), n) };
    Ok(())
}

/// `dst[i] = a[i] op b[i]` on byte buffers holding elements of `dt` (any alignment).
/// Errors as [`reduce_into`].
pub fn reduce3(dt: Dtype, op: Op, dst: &mut [u8], a: &[u8], b: &[u8]) -> Result<(), String> {
    let n = check(dt, op, dst.len(), &[("a", a.len()), ("b", b.len())])?;
    // SAFETY: all slices hold n elements; a &mut cannot overlap a &; op supports dt.
    unsafe { reduce3_raw(dt, op, dst.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n) };
    Ok(())
}

/// [`reduce_into`] with the kernels of `isa` for every length (no small-size shortcut). An
/// ISA the CPU lacks is replaced by the best one it has. For tests and benchmarks.
#[doc(hidden)]
pub fn reduce_into_with(
    isa: Isa,
    dt: Dtype,
    op: Op,
    dst: &mut [u8],
    src: &[u8],
) -> Result<(), String> {
    let n = check(dt, op, dst.len(), &[("src", src.len())])?;
    if n > 0 {
        let p = dst.as_mut_ptr();
        // SAFETY: both slices hold n elements; dst as the left operand is an exact alias and
        // cannot overlap src; tables only hold kernels the CPU supports.
        unsafe {
            run(
                &dispatch().tables[isa as usize],
                dt,
                op,
                p,
                p,
                src.as_ptr(),
                n,
            )
        };
    }
    Ok(())
}

/// [`reduce3`] with the kernels of `isa` for every length (no small-size shortcut). An ISA
/// the CPU lacks is replaced by the best one it has. For tests and benchmarks.
#[doc(hidden)]
pub fn reduce3_with(
    isa: Isa,
    dt: Dtype,
    op: Op,
    dst: &mut [u8],
    a: &[u8],
    b: &[u8],
) -> Result<(), String> {
    let n = check(dt, op, dst.len(), &[("a", a.len()), ("b", b.len())])?;
    if n > 0 {
        let t = &dispatch().tables[isa as usize];
        // SAFETY: all slices hold n elements; a &mut cannot overlap a &; tables only hold
        // kernels the CPU supports.
        unsafe { run(t, dt, op, dst.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_codes_sizes() {
        for (i, dt) in Dtype::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(dt.code()), i);
            assert_eq!(Dtype::from_code(dt.code()), Some(dt));
            assert_eq!(Dtype::parse(dt.name()), Some(dt));
            assert_eq!(Dtype::parse(&dt.name().to_uppercase()), Some(dt));
            assert_eq!(Dtype::parse(&format!(" {dt} ")), Some(dt));
            assert!(!(dt.is_integer() && dt.is_complex()));
        }
        assert_eq!(Dtype::from_code(12), None);
        assert_eq!(Dtype::from_code(255), None);
        assert_eq!(Dtype::parse("float"), None);
        assert_eq!(Dtype::parse("complex"), None);
        assert_eq!(Dtype::parse(""), None);
        let sizes: Vec<usize> = Dtype::ALL.iter().map(|d| d.size()).collect();
        assert_eq!(sizes, [1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 8, 16]);
        let names: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
        assert_eq!(
            names,
            [
                "int8",
                "int16",
                "int32",
                "int64",
                "uint8",
                "uint16",
                "uint32",
                "uint64",
                "float32",
                "float64",
                "complex64",
                "complex128"
            ]
        );
        let ints = Dtype::ALL.iter().filter(|d| d.is_integer()).count();
        let cplx = Dtype::ALL.iter().filter(|d| d.is_complex()).count();
        assert_eq!((ints, cplx), (8, 2));
        assert!(!Dtype::F32.is_integer() && !Dtype::F64.is_complex());
    }

    #[test]
    fn op_names_codes() {
        for (i, op) in Op::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(op.code()), i);
            assert_eq!(Op::from_code(op.code()), Some(op));
            let n = op.name();
            for s in [
                n.to_string(),
                n.to_uppercase(),
                format!("MPI_{}", n.to_uppercase()),
                format!("mpi_{n}"),
                format!(" Mpi_{n} "),
            ] {
                assert_eq!(Op::parse(&s), Some(op), "{s:?}");
            }
        }
        assert_eq!(Op::from_code(9), None);
        for s in [
            "",
            "mpi_",
            "MPI_MINLOC",
            "add",
            "MPI__SUM",
            "MPISUM",
            "mpi_mpi_sum",
        ] {
            assert_eq!(Op::parse(s), None, "{s:?}");
        }
        let names: Vec<&str> = Op::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(
            names,
            ["sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor"]
        );
    }

    #[test]
    fn supports_matrix() {
        for dt in Dtype::ALL {
            for op in Op::ALL {
                let expect = match op {
                    Op::Sum | Op::Prod => true,
                    Op::Min | Op::Max => dt.is_integer() || matches!(dt, Dtype::F32 | Dtype::F64),
                    _ => dt.is_integer(),
                };
                assert_eq!(op.supports(dt), expect, "{op} {dt}");
                // The kernel tables agree with `supports`, and kernel element sizes divide.
                for isa in available_reduce_isas() {
                    let e = dispatch().tables[isa as usize][dt as usize][op as usize];
                    assert_eq!(e.is_some(), expect, "{isa:?} {op} {dt}");
                }
            }
        }
        let n = Dtype::ALL
            .iter()
            .flat_map(|&d| Op::ALL.iter().filter(move |o| o.supports(d)))
            .count();
        assert_eq!(n, 8 * 9 + 2 * 4 + 2 * 2);
    }

    #[test]
    fn isa_selection() {
        let isas = available_reduce_isas();
        assert_eq!(isas[0], Isa::Scalar);
        assert!(isas.contains(&reduce_isa()));
        assert!(reduce_isa() <= active_isa());
        assert!(isas.last() <= available_isas().last());
    }

    #[test]
    fn unavailable_isa_falls_back() {
        let a: Vec<u8> = (0..800u32).map(|i| (i * 7) as u8).collect();
        let b: Vec<u8> = (0..800u32).map(|i| (i * 13 + 5) as u8).collect();
        let mut expect = vec![0u8; 800];
        reduce3_with(Isa::Scalar, Dtype::I32, Op::Sum, &mut expect, &a, &b).unwrap();
        for isa in Isa::ALL {
            let mut d = a.clone();
            reduce_into_with(isa, Dtype::I32, Op::Sum, &mut d, &b).unwrap();
            assert_eq!(d, expect, "{isa:?}");
        }
    }

    #[test]
    fn wrapper_errors() {
        let mut d = [0u8; 8];
        let e = reduce_into(Dtype::C64, Op::Max, &mut d, &[0u8; 8]).unwrap_err();
        assert!(e.contains("max") && e.contains("complex64"), "{e}");
        let e = reduce_into(Dtype::F32, Op::Band, &mut d, &[0u8; 8]).unwrap_err();
        assert!(e.contains("band") && e.contains("float32"), "{e}");
        let e = reduce_into(Dtype::I32, Op::Sum, &mut d, &[0u8; 4]).unwrap_err();
        assert!(e.contains("lengths differ"), "{e}");
        let e = reduce3(Dtype::I32, Op::Sum, &mut d, &[0u8; 8], &[0u8; 9]).unwrap_err();
        assert!(e.contains("lengths differ") && e.contains("b 9"), "{e}");
        let e = reduce3(Dtype::F64, Op::Sum, &mut d[..6], &[0u8; 6], &[0u8; 6]).unwrap_err();
        assert!(e.contains("multiple") && e.contains("float64"), "{e}");
        assert!(reduce_into(Dtype::F64, Op::Sum, &mut [], &[]).is_ok());
        assert!(reduce_into(Dtype::F64, Op::Band, &mut [], &[]).is_err());
    }

    #[test]
    #[should_panic(expected = "not defined")]
    fn raw_unsupported_panics() {
        let mut d = [0u8; 64];
        let s = [0u8; 64];
        // SAFETY: both buffers hold 4 complex128 elements and are distinct.
        unsafe { reduce_into_raw(Dtype::C128, Op::Min, d.as_mut_ptr(), s.as_ptr(), 4) };
    }

    #[test]
    fn documented_semantics() {
        fn f64s(v: &[f64]) -> Vec<u8> {
            v.iter().flat_map(|x| x.to_ne_bytes()).collect()
        }
        fn back(v: &[u8]) -> Vec<f64> {
            v.chunks(8)
                .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
                .collect()
        }
        let nan = f64::NAN;
        let a = f64s(&[nan, 1.0, 1.0, -0.0, 0.0, 5.0]);
        let b = f64s(&[1.0, nan, 2.0, 0.0, -0.0, 3.0]);
        for isa in available_reduce_isas() {
            let mut d = a.clone();
            reduce_into_with(isa, Dtype::F64, Op::Min, &mut d, &b).unwrap();
            let r = back(&d);
            assert!(r[0].is_nan() && r[1] == 1.0 && r[2] == 1.0 && r[5] == 3.0);
            assert!(r[3].is_sign_negative() && r[4].is_sign_positive());
            let mut d = a.clone();
            reduce_into_with(isa, Dtype::F64, Op::Max, &mut d, &b).unwrap();
            let r = back(&d);
            assert!(r[0].is_nan() && r[1] == 1.0 && r[2] == 2.0 && r[5] == 5.0);
            // Integer wrap and logical ops.
            let mut d = vec![200u8, 0, 7, 255];
            reduce_into_with(isa, Dtype::U8, Op::Sum, &mut d, &[100, 0, 1, 1]).unwrap();
            assert_eq!(d, [44, 0, 8, 0]);
            let mut d = vec![0x80u8, 0x7f, 3, 0];
            reduce_into_with(isa, Dtype::I8, Op::Max, &mut d, &[0x7f, 0x80, 0, 0]).unwrap();
            assert_eq!(d, [0x7f, 0x7f, 3, 0]);
            let mut d = vec![5u8, 0, 5, 0];
            reduce_into_with(isa, Dtype::U8, Op::Land, &mut d, &[9, 9, 0, 0]).unwrap();
            assert_eq!(d, [1, 0, 0, 0]);
        }
        // Complex product (1+2i)(3+4i) = -5+10i.
        let mut d = f64s(&[1.0, 2.0]);
        reduce_into(Dtype::C128, Op::Prod, &mut d, &f64s(&[3.0, 4.0])).unwrap();
        assert_eq!(back(&d), [-5.0, 10.0]);
    }
}
