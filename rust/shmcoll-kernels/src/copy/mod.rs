//! Copy kernels and their run-time dispatch.
//!
//! Each ISA has a temporal and a non-temporal kernel (`unsafe fn(dst, src, len)`). The
//! kernel table is built once (CPU detection, `SHMCOLL_ISA`, ERMS, NT threshold) and stored
//! in a `OnceLock`; a call then costs one atomic load, a branch on the store policy and an
//! indirect call, with no feature test. Copies of up to 16 bytes skip even that.

use crate::hw;
use std::sync::OnceLock;

mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;
#[cfg(target_arch = "x86_64")]
mod x86_sse2;

/// Below this many bytes a non-temporal copy is done with ordinary stores: head/tail
/// handling and the later fence cost more than streaming saves, and small data is usually
/// read again soon. Also the point from which kernels loop (shorter copies are loop-free).
pub(crate) const NT_MIN_LEN: usize = 256;

/// Software prefetch distance of the source in the NT loops (two lines per 256 bytes).
/// Hardware prefetchers stop at 4 KiB page boundaries; prefetching one page ahead gained
/// 5-10% for 64-256 MiB NT copies on a Sapphire Rapids VM and cost ~2% at 1 MiB.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_DIST: usize = 4096;

/// How stores are issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Store {
    /// Ordinary stores: the destination ends up in this core's caches.
    Temporal,
    /// Streaming (non-temporal) stores for whole cache lines: bypass the caches, no
    /// read-for-ownership of the destination. Needs [`store_fence`] before publishing.
    NonTemporal,
    /// `NonTemporal` when the copy is at least [`hw::nt_threshold`] bytes, else `Temporal`.
    Hybrid,
}

impl Store {
    /// The policy a copy of `total` bytes takes: `Hybrid` streams from `threshold` bytes
    /// (beyond that the data cannot stay in cache for the writer anyway, and streaming
    /// saves the read-for-ownership of every line), else stores temporally; the others
    /// are themselves. `total` is what the call writes on this core, not one piece of it.
    pub fn resolve(self, total: usize, threshold: usize) -> Store {
        match self {
            Store::Hybrid if total >= threshold => Store::NonTemporal,
            Store::Hybrid => Store::Temporal,
            s => s,
        }
    }

    /// All policies.
    pub const ALL: [Store; 3] = [Store::Temporal, Store::NonTemporal, Store::Hybrid];

    /// Short name: `"temporal"`, `"nt"`, `"hybrid"`.
    pub fn name(self) -> &'static str {
        match self {
            Store::Temporal => "temporal",
            Store::NonTemporal => "nt",
            Store::Hybrid => "hybrid",
        }
    }

    /// Parses a name (case-insensitive); also accepts `"non-temporal"` and `"nontemporal"`.
    pub fn parse(s: &str) -> Option<Store> {
        match s.trim().to_ascii_lowercase().as_str() {
            "temporal" => Some(Store::Temporal),
            "nt" | "non-temporal" | "nontemporal" => Some(Store::NonTemporal),
            "hybrid" => Some(Store::Hybrid),
            _ => None,
        }
    }
}

/// Instruction set of a kernel, in ascending order of capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// No explicit SIMD: the platform `memcpy` for temporal copies, `movnti` (x86_64) for NT.
    Scalar,
    /// 16-byte vectors.
    Sse2,
    /// 32-byte vectors.
    Avx2,
    /// 64-byte vectors (AVX-512F).
    Avx512,
}

impl Isa {
    /// All ISAs, ascending.
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Sse2, Isa::Avx2, Isa::Avx512];

    /// Name: `"scalar"`, `"sse2"`, `"avx2"`, `"avx512"`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Sse2 => "sse2",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses a name (case-insensitive; `"avx512f"` is accepted for `Avx512`).
    pub fn parse(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "sse2" => Some(Isa::Sse2),
            "avx2" => Some(Isa::Avx2),
            "avx512" | "avx512f" => Some(Isa::Avx512),
            _ => None,
        }
    }
}

/// The best ISA this CPU supports.
fn detect_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2");
        if avx2 && is_x86_feature_detected!("avx512f") {
            Isa::Avx512
        } else if avx2 {
            Isa::Avx2
        } else {
            Isa::Sse2
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    Isa::Scalar
}

/// Applies a `SHMCOLL_ISA` value to the detected ISA: it can only lower it; values that do
/// not parse are ignored.
pub(crate) fn lower_isa(detected: Isa, requested: Option<&str>) -> Isa {
    requested
        .and_then(Isa::parse)
        .map_or(detected, |r| r.min(detected))
}

type Kernel = unsafe fn(*mut u8, *const u8, usize);

#[derive(Clone, Copy)]
struct Kernels {
    temporal: Kernel,
    nt: Kernel,
    /// Whether `nt` really issues streaming stores (for lengths >= NT_MIN_LEN).
    streams: bool,
}

struct Dispatch {
    active: Isa,
    best: Isa,
    /// Indexed by `Isa as usize`; entries above `best` hold `best`'s kernels.
    table: [Kernels; 4],
    nt_threshold: usize,
}

/// Kernels of `isa`, which the CPU must support.
fn kernels(isa: Isa) -> Kernels {
    #[cfg(target_arch = "x86_64")]
    {
        let erms = hw::x86_erms();
        match isa {
            Isa::Scalar => Kernels {
                temporal: scalar::copy_temporal,
                nt: scalar::copy_nt,
                streams: true,
            },
            Isa::Sse2 => Kernels {
                temporal: if erms {
                    x86_sse2::copy_temporal::<true>
                } else {
                    x86_sse2::copy_temporal::<false>
                },
                nt: x86_sse2::copy_nt,
                streams: true,
            },
            Isa::Avx2 => Kernels {
                temporal: if erms {
                    x86_avx2::copy_temporal::<true>
                } else {
                    x86_avx2::copy_temporal::<false>
                },
                nt: x86_avx2::copy_nt,
                streams: true,
            },
            Isa::Avx512 => Kernels {
                temporal: x86_avx512::copy_temporal,
                nt: x86_avx512::copy_nt,
                streams: true,
            },
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        Kernels {
            temporal: scalar::copy_temporal,
            nt: scalar::copy_temporal,
            streams: false,
        }
    }
}

fn dispatch() -> &'static Dispatch {
    static D: OnceLock<Dispatch> = OnceLock::new();
    D.get_or_init(|| {
        let best = detect_isa();
        let active = lower_isa(best, std::env::var("SHMCOLL_ISA").ok().as_deref());
        // Only ISAs <= best get their own kernels: this is what makes calling them sound.
        let table = Isa::ALL.map(|i| kernels(i.min(best)));
        Dispatch {
            active,
            best,
            table,
            nt_threshold: hw::nt_threshold(),
        }
    })
}

/// Best ISA of this CPU, lowered by `SHMCOLL_ISA=scalar|sse2|avx2|avx512` if set (never
/// raised above what the CPU has). Used by [`copy`] and [`copy_raw`].
pub fn active_isa() -> Isa {
    dispatch().active
}

/// All ISAs this CPU can run, ascending (regardless of `SHMCOLL_ISA`).
pub fn available_isas() -> Vec<Isa> {
    let best = dispatch().best;
    Isa::ALL.into_iter().filter(|&i| i <= best).collect()
}

/// Picks the kernel for `store` and a copy of `total` bytes; returns it and whether it is
/// the NT kernel.
#[inline]
fn select(k: &Kernels, store: Store, total: usize, threshold: usize) -> (Kernel, bool) {
    if store.resolve(total, threshold) == Store::NonTemporal {
        (k.nt, k.streams)
    } else {
        (k.temporal, false)
    }
}

/// Safe copy; panics if the lengths differ. Fences (see [`store_fence`]) if NT stores were
/// used, so the data may be published right after.
pub fn copy(dst: &mut [u8], src: &[u8], store: Store) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy: destination and source lengths differ"
    );
    // SAFETY: both slices are valid for len bytes, and a &mut cannot overlap a &.
    if unsafe { copy_raw(dst.as_mut_ptr(), src.as_ptr(), src.len(), store) } {
        store_fence();
    }
}

/// Copies `len` bytes with the active ISA. Does NOT fence: returns true if non-temporal
/// stores were issued, in which case the caller must call [`store_fence`] before publishing
/// the data to another process. `Hybrid` streams when `len >= hw::nt_threshold()`.
///
/// # Safety
/// `src` valid for `len` reads, `dst` valid for `len` writes, the regions do not overlap.
#[inline]
pub unsafe fn copy_raw(dst: *mut u8, src: *const u8, len: usize, store: Store) -> bool {
    if len <= 16 {
        // SAFETY: forwarded caller contract, len <= 16.
        unsafe { scalar::copy_le16(dst, src, len) };
        return false;
    }
    let d = dispatch();
    // SAFETY: forwarded caller contract.
    unsafe {
        run(
            &d.table[d.active as usize],
            d.nt_threshold,
            dst,
            src,
            len,
            store,
        )
    }
}

/// [`copy_raw`] with an explicit ISA. An ISA the CPU lacks is replaced by the best one it has.
///
/// # Safety
/// As [`copy_raw`].
#[inline]
pub unsafe fn copy_raw_with(
    isa: Isa,
    dst: *mut u8,
    src: *const u8,
    len: usize,
    store: Store,
) -> bool {
    let d = dispatch();
    // SAFETY: forwarded caller contract.
    unsafe { run(&d.table[isa as usize], d.nt_threshold, dst, src, len, store) }
}

/// # Safety
/// As [`copy_raw`].
#[inline(always)]
unsafe fn run(
    k: &Kernels,
    threshold: usize,
    dst: *mut u8,
    src: *const u8,
    len: usize,
    store: Store,
) -> bool {
    let (f, nt) = select(k, store, len, threshold);
    // SAFETY: the caller's contract is the kernel's; the kernel's ISA is supported by the
    // CPU (the dispatch table only holds kernels for ISAs <= the detected one).
    unsafe { f(dst, src, len) };
    nt && len >= NT_MIN_LEN
}

/// Strided 2-D copy: `rows` rows of `row_bytes` bytes, source rows `src_stride` bytes apart,
/// destination rows `dst_stride` bytes apart (active ISA). Store semantics and return value
/// as [`copy_raw`]; `Hybrid` decides on the total `rows * row_bytes`. Each row is copied
/// with the 1-D kernel, so NT applies to the whole cache lines inside each destination row;
/// contiguous layouts (both strides equal to `row_bytes`) become one 1-D copy.
///
/// # Safety
/// For every `r < rows`: `src + r*src_stride` valid for `row_bytes` reads, `dst +
/// r*dst_stride` valid for `row_bytes` writes; no destination row overlaps a source row or
/// another destination row.
pub unsafe fn copy_2d_raw(
    dst: *mut u8,
    dst_stride: usize,
    src: *const u8,
    src_stride: usize,
    rows: usize,
    row_bytes: usize,
    store: Store,
) -> bool {
    if rows == 0 || row_bytes == 0 {
        return false;
    }
    if rows == 1 || (dst_stride == row_bytes && src_stride == row_bytes) {
        // SAFETY: the rows form one contiguous block of rows*row_bytes bytes on each side
        // (or there is a single row), valid and non-overlapping by the caller's contract.
        return unsafe { copy_raw(dst, src, rows * row_bytes, store) };
    }
    if row_bytes <= 16 {
        // Tiny rows (e.g. one complex double): an inline copy beats an indirect call.
        for r in 0..rows {
            // SAFETY: row r is valid on both sides by the caller's contract.
            unsafe {
                scalar::copy_le16(dst.add(r * dst_stride), src.add(r * src_stride), row_bytes)
            };
        }
        return false;
    }
    let d = dispatch();
    let k = &d.table[d.active as usize];
    let (f, nt) = select(k, store, rows.saturating_mul(row_bytes), d.nt_threshold);
    for r in 0..rows {
        // SAFETY: row r is valid on both sides by the caller's contract; the kernel's ISA
        // is supported by the CPU (see `run`).
        unsafe { f(dst.add(r * dst_stride), src.add(r * src_stride), row_bytes) };
    }
    nt && row_bytes >= NT_MIN_LEN
}

/// Orders all earlier stores, streaming ones included, before any later store: `sfence` on
/// x86, a release fence elsewhere.
///
/// Non-temporal stores are weakly ordered even on x86: without `sfence` they may become
/// visible to another core after a later ordinary store, such as the flag or sequence
/// number that tells a peer the data is ready (a release store alone does not order them).
#[inline]
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no memory-safety preconditions; SSE is baseline on x86_64.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
}

#[cfg(test)]
mod tests {
    #[test]
    fn hybrid_streams_from_the_threshold_and_the_others_stay() {
        assert_eq!(Store::Hybrid.resolve(99, 100), Store::Temporal);
        assert_eq!(Store::Hybrid.resolve(100, 100), Store::NonTemporal);
        assert_eq!(Store::Temporal.resolve(1 << 30, 100), Store::Temporal);
        assert_eq!(Store::NonTemporal.resolve(1, 100), Store::NonTemporal);
    }

    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Store::ALL {
            assert_eq!(Store::parse(s.name()), Some(s));
            assert_eq!(Store::parse(&s.name().to_uppercase()), Some(s));
        }
        for s in ["non-temporal", "NonTemporal", " NT "] {
            assert_eq!(Store::parse(s), Some(Store::NonTemporal));
        }
        assert_eq!(Store::parse("stream"), None);
        for i in Isa::ALL {
            assert_eq!(Isa::parse(i.name()), Some(i));
            assert_eq!(Isa::parse(&i.name().to_uppercase()), Some(i));
        }
        assert_eq!(Isa::parse("AVX512F"), Some(Isa::Avx512));
        assert_eq!(Isa::parse("neon"), None);
        assert!(Isa::Scalar < Isa::Sse2 && Isa::Sse2 < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
    }

    #[test]
    fn isa_override_only_lowers() {
        use Isa::*;
        assert_eq!(lower_isa(Avx512, None), Avx512);
        assert_eq!(lower_isa(Avx512, Some("avx2")), Avx2);
        assert_eq!(lower_isa(Avx512, Some("SCALAR")), Scalar);
        assert_eq!(lower_isa(Avx2, Some("avx512")), Avx2);
        assert_eq!(lower_isa(Sse2, Some("avx2")), Sse2);
        assert_eq!(lower_isa(Avx2, Some("bogus")), Avx2);
        assert_eq!(lower_isa(Avx2, Some("")), Avx2);
    }

    #[test]
    fn hybrid_selects_by_threshold() {
        for isa in available_isas() {
            let k = kernels(isa);
            assert!(!select(&k, Store::Temporal, 1 << 30, 100).1);
            assert_eq!(select(&k, Store::NonTemporal, 1, 100).1, k.streams);
            assert!(!select(&k, Store::Hybrid, 99, 100).1);
            assert_eq!(select(&k, Store::Hybrid, 100, 100).1, k.streams);
            assert_eq!(k.streams, cfg!(target_arch = "x86_64"));
        }
    }

    #[test]
    fn detection() {
        let isas = available_isas();
        assert_eq!(isas[0], Isa::Scalar);
        assert!(isas.windows(2).all(|w| w[0] < w[1]));
        assert!(isas.contains(&active_isa()));
        assert_eq!(*isas.last().unwrap(), detect_isa());
        if cfg!(target_arch = "x86_64") {
            assert!(isas.contains(&Isa::Sse2));
        }
    }
}
