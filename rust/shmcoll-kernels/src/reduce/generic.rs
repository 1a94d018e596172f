//! Element types, operators and the generic block loop that every ISA module compiles with
//! its own `#[target_feature]`s.
//!
//! The loop works in blocks: it loads a whole block of both operands, combines them into a
//! local array, then stores the block. Because every load of a block comes before any store
//! of it, an exact alias of the destination with an operand is correct, and the compiler
//! needs no run-time overlap check to vectorise. (LLVM guards a plain `d[i] = a[i] op b[i]`
//! loop over raw pointers with such a check, and the in-place case `d == a`, the common
//! one, would fail it and run the scalar fallback loop.)
//!
//! Float SUM/PROD also check each block's result for NaNs (a few vector compares) and
//! recompute blocks that hold one with the documented NaN rule, see [`BinOp::FIX_NAN`].

use super::Dtype;
use core::mem::size_of;
use core::ops::{Add, Mul, Sub};
use core::ptr::{read_unaligned, write_unaligned};

/// A kernel: `dst[i] = a[i] op b[i]` for `n` elements of the kernel's element type (which
/// may be smaller than the user's dtype, see [`Entry::mult`]).
///
/// # Safety
/// `a`, `b` valid for `n` element reads, `dst` for `n` element writes; `dst` equal to `a`
/// and/or `b` or disjoint from both; the CPU supports the kernel's target features.
pub(crate) type Kernel = unsafe fn(*mut u8, *const u8, *const u8, usize);

/// A kernel for one (dtype, op) pair.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    /// The kernel.
    pub(crate) f: Kernel,
    /// Kernel elements per dtype element: e.g. 2 for complex SUM done as real SUM, 8 for a
    /// bitwise op on `int64` done on bytes.
    pub(crate) mult: usize,
}

impl Entry {
    /// An entry whose kernel works on elements of type `T`.
    pub(crate) fn new<T>(dt: Dtype, f: Kernel) -> Option<Entry> {
        debug_assert_eq!(dt.size() % size_of::<T>(), 0);
        Some(Entry {
            f,
            mult: dt.size() / size_of::<T>(),
        })
    }
}

/// Elements per block of the main loop for an element of `size` bytes and blocks of
/// `bytes` bytes (at least one element).
pub(crate) const fn block_len(bytes: usize, size: usize) -> usize {
    if size >= bytes {
        1
    } else {
        bytes / size
    }
}

/// Bytes per block of the tail loop: one 16-byte vector.
pub(crate) const SMALL_BYTES: usize = 16;

/// A binary operator on `T`: `apply(left, right)`, left being the accumulated value.
pub(crate) trait BinOp<T: Copy> {
    /// Whether `apply` is float arithmetic, whose NaN results the compiler and the hardware
    /// do not fix (LLVM may swap the operands of `a + b`; ARM and x86 differ): then blocks
    /// whose result holds a NaN are recomputed with [`exact`](BinOp::exact).
    const FIX_NAN: bool = false;

    /// The combined value, as the vector loop computes it.
    fn apply(a: T, b: T) -> T;

    /// Whether `p` or `q` is or holds a NaN (only called when `FIX_NAN`).
    #[inline(always)]
    fn nan2(_p: T, _q: T) -> bool {
        false
    }

    /// The combined value with the documented NaN rule (only called when `FIX_NAN`).
    #[inline(always)]
    fn exact(a: T, b: T) -> T {
        Self::apply(a, b)
    }
}

/// Zero-sized operator types, one per `Op` (complex PROD is `Prod` on `Complex<F>`).
pub(crate) mod ops {
    /// Wrapping (integer) or IEEE (float) addition.
    pub(crate) struct Sum;
    /// Wrapping (integer) or IEEE (float) multiplication.
    pub(crate) struct Prod;
    /// `if b < a { b } else { a }`.
    pub(crate) struct Min;
    /// `if b > a { b } else { a }`.
    pub(crate) struct Max;
    /// `a & b`.
    pub(crate) struct Band;
    /// `a | b`.
    pub(crate) struct Bor;
    /// `a ^ b`.
    pub(crate) struct Bxor;
    /// `(a != 0 && b != 0) as T`.
    pub(crate) struct Land;
    /// `(a != 0 || b != 0) as T`.
    pub(crate) struct Lor;
}

macro_rules! int_ops {
    ($($t:ty),*) => {$(
        impl BinOp<$t> for ops::Sum {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.wrapping_add(b) }
        }
        impl BinOp<$t> for ops::Prod {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.wrapping_mul(b) }
        }
        impl BinOp<$t> for ops::Band {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a & b }
        }
        impl BinOp<$t> for ops::Bor {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a | b }
        }
        impl BinOp<$t> for ops::Bxor {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a ^ b }
        }
        // `&` / `|` on bools instead of `&&` / `||`: same value, no branch.
        impl BinOp<$t> for ops::Land {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { ((a != 0) & (b != 0)) as $t }
        }
        impl BinOp<$t> for ops::Lor {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { ((a != 0) | (b != 0)) as $t }
        }
    )*};
}
int_ops!(u8, u16, u32, u64);

macro_rules! ordered_ops {
    ($($t:ty),*) => {$(
        impl BinOp<$t> for ops::Min {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { if b < a { b } else { a } }
        }
        impl BinOp<$t> for ops::Max {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { if b > a { b } else { a } }
        }
    )*};
}
ordered_ops!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

/// Float arithmetic with fixed NaN results: a NaN operand propagates, quieted, the left
/// one first; a NaN made from non-NaN operands (`inf - inf`, `0 * inf`) is x86's default
/// NaN (sign set, quiet, zero payload). This is what x86 SSE/AVX give for `a op b` with
/// `a` as the first source operand.
macro_rules! exact_float {
    ($t:ty, $quiet:expr, $default:expr) => {
        impl ExactFloat for $t {
            #[inline(always)]
            fn fix(a: $t, b: $t, r: $t) -> $t {
                if a.is_nan() {
                    <$t>::from_bits(a.to_bits() | $quiet)
                } else if b.is_nan() {
                    <$t>::from_bits(b.to_bits() | $quiet)
                } else if r.is_nan() {
                    <$t>::from_bits($default)
                } else {
                    r
                }
            }
        }
    };
}

/// The NaN rule of [`exact_float!`], for `f32` and `f64`.
pub(crate) trait ExactFloat:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self>
{
    /// The result of `a op b` given its raw result `r`: `r` unless a NaN is involved.
    fn fix(a: Self, b: Self, r: Self) -> Self;
}
exact_float!(f32, 0x0040_0000, 0xFFC0_0000);
exact_float!(f64, 0x0008_0000_0000_0000, 0xFFF8_0000_0000_0000);

/// `a + b` with the NaN rule.
#[inline(always)]
fn add<F: ExactFloat>(a: F, b: F) -> F {
    F::fix(a, b, a + b)
}

/// `a - b` with the NaN rule.
#[inline(always)]
fn sub<F: ExactFloat>(a: F, b: F) -> F {
    F::fix(a, b, a - b)
}

/// `a * b` with the NaN rule.
#[inline(always)]
fn mul<F: ExactFloat>(a: F, b: F) -> F {
    F::fix(a, b, a * b)
}

macro_rules! float_ops {
    ($($t:ty),*) => {$(
        impl BinOp<$t> for ops::Sum {
            const FIX_NAN: bool = true;
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a + b }
            #[inline(always)]
            fn nan2(p: $t, q: $t) -> bool { p.is_nan() | q.is_nan() }
            #[inline(always)]
            fn exact(a: $t, b: $t) -> $t { add(a, b) }
        }
        impl BinOp<$t> for ops::Prod {
            const FIX_NAN: bool = true;
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a * b }
            #[inline(always)]
            fn nan2(p: $t, q: $t) -> bool { p.is_nan() | q.is_nan() }
            #[inline(always)]
            fn exact(a: $t, b: $t) -> $t { mul(a, b) }
        }
    )*};
}
float_ops!(f32, f64);

/// A complex number as numpy stores it: real part, then imaginary part.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub(crate) struct Complex<F> {
    re: F,
    im: F,
}

macro_rules! complex_ops {
    ($($t:ty),*) => {$(
        impl BinOp<Complex<$t>> for ops::Prod {
            const FIX_NAN: bool = true;
            #[inline(always)]
            fn apply(a: Complex<$t>, b: Complex<$t>) -> Complex<$t> {
                Complex {
                    re: a.re * b.re - a.im * b.im,
                    im: a.re * b.im + a.im * b.re,
                }
            }
            #[inline(always)]
            fn nan2(p: Complex<$t>, q: Complex<$t>) -> bool {
                (p.re.is_nan() | q.re.is_nan()) | (p.im.is_nan() | q.im.is_nan())
            }
            #[inline(always)]
            fn exact(a: Complex<$t>, b: Complex<$t>) -> Complex<$t> {
                Complex {
                    re: sub(mul(a.re, b.re), mul(a.im, b.im)),
                    im: add(mul(a.re, b.im), mul(a.im, b.re)),
                }
            }
        }
    )*};
}
complex_ops!(f32, f64);

/// Recomputes a block from memory with [`BinOp::exact`], element by element (rare: only
/// blocks whose result holds a NaN). Kept out of line, and fed pointers rather than the
/// block arrays, so that the fast path keeps its arrays in registers.
///
/// # Safety
/// As `block`.
#[cold]
#[inline(never)]
unsafe fn fix_block<T: Copy, O: BinOp<T>, const L: usize>(d: *mut T, a: *const T, b: *const T) {
    for j in 0..L {
        // SAFETY: j < L, inside all three blocks; element j is read before it is written,
        // and no other element is read after that, so exact aliasing is fine.
        unsafe {
            let r = O::exact(read_unaligned(a.add(j)), read_unaligned(b.add(j)));
            write_unaligned(d.add(j), r);
        }
    }
}

/// Whether the block holds a NaN. Elements `j` and `j + L/2` are tested together: LLVM
/// merges two NaN tests into one `uno(p, q)` compare, and with partners a half block apart
/// (a whole number of vectors) that compare is vertical, no lane shuffles needed.
#[inline(always)]
fn any_nan<T: Copy, O: BinOp<T>, const L: usize>(x: &[T; L]) -> bool {
    // A plain loop: iterator adapters take closures that LLVM may leave out of line.
    let h = L / 2;
    let mut nan = !L.is_multiple_of(2) && O::nan2(x[L - 1], x[L - 1]);
    for j in 0..h {
        nan |= O::nan2(x[j], x[j + h]);
    }
    nan
}

/// One block of `L` elements: loads all of `a` and `b`, then stores all of `d`.
///
/// Whole-array loads and stores: the block lives in vector registers between them (checked
/// in the disassembly of the release build, see `examples/reducebw.rs`).
///
/// # Safety
/// `a`, `b` valid for `L` element reads, `d` for `L` element writes; `d` equal to `a` and/or
/// `b` or disjoint from both (any alignment).
#[inline(always)]
unsafe fn block<T: Copy + Default, O: BinOp<T>, const L: usize>(
    d: *mut T,
    a: *const T,
    b: *const T,
) {
    // SAFETY: the caller guarantees L readable elements at a and b; unaligned reads of an
    // array of plain numbers are fine.
    let (xa, xb) = unsafe {
        (
            read_unaligned(a.cast::<[T; L]>()),
            read_unaligned(b.cast::<[T; L]>()),
        )
    };
    let mut x = [T::default(); L];
    for ((x, &a), &b) in x.iter_mut().zip(&xa).zip(&xb) {
        *x = O::apply(a, b);
    }
    // NaN in, NaN out: a block without NaN results had no NaN anywhere, and its results
    // are exact whatever order the compiler gave the operands.
    if O::FIX_NAN && any_nan::<T, O, L>(&x) {
        // SAFETY: the caller's contract is fix_block's; nothing was stored yet.
        unsafe { fix_block::<T, O, L>(d, a, b) };
        return;
    }
    // SAFETY: the caller guarantees L writable elements at d; both operands are read.
    unsafe { write_unaligned(d.cast::<[T; L]>(), x) };
}

/// `d[i] = a[i] op b[i]` for `n` elements: blocks of `L`, then of `S`, then single elements.
///
/// # Safety
/// As [`Kernel`] (without the CPU-feature part, which is the caller's business).
#[inline(always)]
pub(crate) unsafe fn combine<T: Copy + Default, O: BinOp<T>, const L: usize, const S: usize>(
    d: *mut T,
    a: *const T,
    b: *const T,
    n: usize,
) {
    let mut i = 0;
    while n - i >= L {
        // SAFETY: i + L <= n, so the block lies inside the regions (the same holds for the
        // two loops below); aliasing is as the caller promised, which is what `block` needs.
        unsafe { block::<T, O, L>(d.add(i), a.add(i), b.add(i)) };
        i += L;
    }
    while n - i >= S {
        // SAFETY: see above.
        unsafe { block::<T, O, S>(d.add(i), a.add(i), b.add(i)) };
        i += S;
    }
    while i < n {
        // SAFETY: see above.
        unsafe { block::<T, O, 1>(d.add(i), a.add(i), b.add(i)) };
        i += 1;
    }
}

/// `Entry` for kernel `$k` instantiated with element type `$t` and operator `$o`.
macro_rules! entry {
    ($k:ident, $dt:expr, $t:ty, $o:ty) => {
        $crate::reduce::generic::Entry::new::<$t>(
            $dt,
            $k::<
                $t,
                $o,
                { $crate::reduce::generic::block_len(BLOCK_BYTES, ::core::mem::size_of::<$t>()) },
                {
                    $crate::reduce::generic::block_len(
                        $crate::reduce::generic::SMALL_BYTES,
                        ::core::mem::size_of::<$t>(),
                    )
                },
            >,
        )
    };
}

/// Defines, in an ISA module, the generic kernel `k` (with the given attributes, e.g. a
/// `#[target_feature]`), its block size `BLOCK_BYTES` and `kernel(dt, op) ->
/// Option<Entry>`, the kernel for a pair (None if the op is not defined for the dtype).
///
/// Block sizes in use: 128 bytes for the portable build (8 of the 16 SSE2 registers), 256
/// for AVX2 (8 of 16 ymm) and AVX-512 (4 of 32 zmm), leaving registers for the other
/// operand's loads and the NaN test.
///
/// Signed and unsigned integers share every kernel but MIN/MAX (wrapping arithmetic and bit
/// operations do not depend on the sign); bitwise ops run on bytes; complex SUM runs as
/// real SUM on twice the elements.
macro_rules! define_kernels {
    ($block_bytes:expr $(, #[$attr:meta])*) => {
        use $crate::reduce::generic::{combine, ops, BinOp, Complex, Entry};
        use $crate::reduce::{Dtype, Op};

        /// Bytes per block of the main loop.
        const BLOCK_BYTES: usize = $block_bytes;

        $(#[$attr])*
        /// `combine` compiled for this module's ISA.
        ///
        /// # Safety
        /// As `generic::Kernel`.
        unsafe fn k<T: Copy + Default, O: BinOp<T>, const L: usize, const S: usize>(
            d: *mut u8,
            a: *const u8,
            b: *const u8,
            n: usize,
        ) {
            // SAFETY: forwarded caller contract (regions, aliasing, CPU features).
            unsafe { combine::<T, O, L, S>(d.cast(), a.cast(), b.cast(), n) }
        }

        /// This module's kernel for `(dt, op)`, None if `op` is not defined for `dt`.
        pub(crate) fn kernel(dt: Dtype, op: Op) -> Option<Entry> {
            use Dtype::*;
            macro_rules! by_width {
                ($o:ty) => {
                    match dt {
                        I8 | U8 => $crate::reduce::generic::entry!(k, dt, u8, $o),
                        I16 | U16 => $crate::reduce::generic::entry!(k, dt, u16, $o),
                        I32 | U32 => $crate::reduce::generic::entry!(k, dt, u32, $o),
                        I64 | U64 => $crate::reduce::generic::entry!(k, dt, u64, $o),
                        _ => None,
                    }
                };
            }
            macro_rules! ordered {
                ($o:ty) => {
                    match dt {
                        I8 => $crate::reduce::generic::entry!(k, dt, i8, $o),
                        I16 => $crate::reduce::generic::entry!(k, dt, i16, $o),
                        I32 => $crate::reduce::generic::entry!(k, dt, i32, $o),
                        I64 => $crate::reduce::generic::entry!(k, dt, i64, $o),
                        U8 => $crate::reduce::generic::entry!(k, dt, u8, $o),
                        U16 => $crate::reduce::generic::entry!(k, dt, u16, $o),
                        U32 => $crate::reduce::generic::entry!(k, dt, u32, $o),
                        U64 => $crate::reduce::generic::entry!(k, dt, u64, $o),
                        F32 => $crate::reduce::generic::entry!(k, dt, f32, $o),
                        F64 => $crate::reduce::generic::entry!(k, dt, f64, $o),
                        C64 | C128 => None,
                    }
                };
            }
            match op {
                Op::Sum => match dt {
                    F32 | C64 => $crate::reduce::generic::entry!(k, dt, f32, ops::Sum),
                    F64 | C128 => $crate::reduce::generic::entry!(k, dt, f64, ops::Sum),
                    _ => by_width!(ops::Sum),
                },
                Op::Prod => match dt {
                    F32 => $crate::reduce::generic::entry!(k, dt, f32, ops::Prod),
                    F64 => $crate::reduce::generic::entry!(k, dt, f64, ops::Prod),
                    C64 => $crate::reduce::generic::entry!(k, dt, Complex<f32>, ops::Prod),
                    C128 => $crate::reduce::generic::entry!(k, dt, Complex<f64>, ops::Prod),
                    _ => by_width!(ops::Prod),
                },
                Op::Min => ordered!(ops::Min),
                Op::Max => ordered!(ops::Max),
                Op::Band if dt.is_integer() => {
                    $crate::reduce::generic::entry!(k, dt, u8, ops::Band)
                }
                Op::Bor if dt.is_integer() => {
                    $crate::reduce::generic::entry!(k, dt, u8, ops::Bor)
                }
                Op::Bxor if dt.is_integer() => {
                    $crate::reduce::generic::entry!(k, dt, u8, ops::Bxor)
                }
                Op::Band | Op::Bor | Op::Bxor => None,
                Op::Land => by_width!(ops::Land),
                Op::Lor => by_width!(ops::Lor),
            }
        }
    };
}

pub(crate) use {define_kernels, entry};
