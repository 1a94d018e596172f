//! Settings read once per communicator: segment sizes, waiting, forced choices.
//! Every setting has an environment variable; `shmcoll info` lists them (see SETTINGS).

use std::time::Duration;

use shmcoll_kernels::hw;
use shmcoll_shm::placement::BindPolicy;
use shmcoll_shm::{shm_free_bytes, Sizes, WaitConfig};

use crate::env_value::{env_bytes, env_real, env_whole};
use crate::error::{Error, Result};
use crate::op::CollOp;
use crate::registry::Algo;
use crate::registry::Forced;

/// (name, meaning) of every environment variable the engine reads.
pub const SETTINGS: &[(&str, &str)] = &[
    ("SHMCOLL_TIMEOUT", "seconds a rank waits for a peer before raising (default 60; 0 < value <= 31536000, a year)"),
    ("SHMCOLL_SPIN_US", "microseconds of busy waiting before yielding the core (default 50, 0 when ranks outnumber cores; 0 to 1000000)"),
    ("SHMCOLL_YIELD_US", "microseconds of waiting (in total) before sleeping on a futex (default 5000; 0 to 3600000000)"),
    ("SHMCOLL_LEAVE_YIELDS", "yields a rank leaving a call spends letting the ranks bound to its CPU that arrived before it leave first (default 4, 0 turns it off; at most 10000)"),
    ("SHMCOLL_INLINE_BYTES", "bytes per rank for payloads carried inline in the segment (default 64K; at most 1G)"),
    ("SHMCOLL_STAGING_BYTES", "bytes per rank of staging rings for two-copy transfers (default 4M; at most 64G)"),
    ("SHMCOLL_HEAP_BYTES", "bytes per rank of shared heap for Comm.empty (default: half of the free /dev/shm among the ranks, at most 4G; pages are taken as Comm.empty hands them out; at most 1T)"),
    ("SHMCOLL_SHARED_ARRAYS", "0 or off: NumPy arrays stay NumPy's own (no shared-array arena); default on"),
    ("SHMCOLL_SHARED_ARRAYS_MIN", "smallest NumPy array (bytes) allocated in the shared-array arena (default 8K; 1 to 1T)"),
    ("SHMCOLL_SHARED_ARRAYS_MAX", "largest NumPy array (bytes) allocated in the shared-array arena; larger ones stay NumPy's own, on its huge pages (default 4M, or 64M where the kernel gives shared memory huge pages, shmem_enabled=advise; 1 to 64T)"),
    ("SHMCOLL_ARENA_BYTES", "bytes of address space of the arena NumPy arrays are allocated from (default 64G, less under ulimit -v / -f; sparse until used; 1M to 64T)"),
    ("SHMCOLL_CHUNK_BYTES", "pipelining chunk of the staging algorithm (default 64K; 64 to 1G)"),
    ("SHMCOLL_NT_THRESHOLD", "bytes written per call from which the hybrid store policy streams (default from caches; at most 1T)"),
    ("SHMCOLL_CMA_FROM", "block bytes from which private (non-shared) buffers take CMA rather than staging (default: measured by a short probe, once per machine, cached in the user cache; 0 turns the probe off: CMA wherever the model's sizes put it; at most 1G). Only the value of the process that creates the communicator counts"),
    ("SHMCOLL_ALLTOALL_ALGORITHM", "force the Alltoall(v) algorithm: inline, staging, pull, push, cma, cma-push"),
    ("SHMCOLL_ALLTOALL_ORDER", "force the copy order: linear, shifted, reverse-shifted, xor, morton"),
    ("SHMCOLL_ALLTOALL_STORE", "force the store policy: temporal, nt, hybrid"),
    ("SHMCOLL_BCAST_ALGORITHM", "force Bcast's algorithm: inline, direct, cma, staging"),
    ("SHMCOLL_ALLGATHER_ALGORITHM", "force Allgather(v)'s algorithm: inline, direct, cma, staging"),
    ("SHMCOLL_GATHER_ALGORITHM", "force Gather(v)'s algorithm: inline, direct, cma, staging"),
    ("SHMCOLL_SCATTER_ALGORITHM", "force Scatter(v)'s algorithm: inline, direct, cma, staging"),
    ("SHMCOLL_REDUCE_SCATTER_ALGORITHM", "force Reduce_scatter(_block)'s algorithm: inline, direct, cma, staging"),
    ("SHMCOLL_ALLREDUCE_ALGORITHM", "force Allreduce's algorithm: inline, direct, cma, staging"),
    ("SHMCOLL_REDUCE_ALGORITHM", "force Reduce's algorithm: inline, direct, cma, staging"),
    ("SHMCOLL_POOL_SEGMENTS", "segments of freed communicators a process keeps to serve the next communicator of the same ranks at once (default 4, 0 turns pooling off; at most 8)"),
    ("SHMCOLL_BIND", "bind each rank to one CPU: auto (when ranks outnumber CPUs and none is bound yet), core, none"),
    ("SHMCOLL_ISA", "lower the SIMD level of the copy kernels: scalar, sse2, avx2, avx512"),
];

/// Segments a process keeps by default: enough for a communicator and a duplicate of it
/// at two sizes (a code's world and its sub-communicators), few enough that the staging
/// rings they keep backed stay small.
pub const DEFAULT_POOL_SEGMENTS: usize = 4;
/// The most segments a process keeps: as many as one creation record can offer
/// (crate::pool::OFFER_IDS).
pub const MAX_POOL_SEGMENTS: usize = 8;
/// The variable that forces the private-buffer crossover (crate::cma_from; 0: CMA
/// wherever the model's sizes put it, and no probe).
pub const CMA_FROM_ENV: &str = "SHMCOLL_CMA_FROM";

#[derive(Clone, Debug)]
pub struct Config {
    pub inline_bytes: usize,
    pub staging_bytes: usize,
    pub heap_bytes: usize,
    pub chunk_bytes: usize,
    /// Bytes a rank writes in one call from which `Store::Hybrid` streams: the CPU's cache
    /// budget shared among the ranks that take turns on it (`hw::nt_threshold_per_rank`).
    pub nt_threshold: usize,
    pub wait: WaitConfig,
    pub alltoall_forced: Forced,
    /// Forced algorithm of each collective family (index: CollOp as usize of the family).
    pub coll_forced: [Option<Algo>; CollOp::COUNT],
    pub bind: BindPolicy,
    /// `SHMCOLL_CMA_FROM`: the forced crossover of private buffers (crate::cma_from); what
    /// counts is the value of the process that creates the segment.
    pub cma_from: Option<usize>,
    /// Segments of freed communicators this process keeps for reuse (crate::pool).
    pub pool_segments: usize,
    /// Whether `heap_bytes` was set (`SHMCOLL_HEAP_BYTES`) rather than derived from the
    /// free space of /dev/shm: a pooled segment must then have exactly that heap.
    pub heap_explicit: bool,
}

/// The range of every numeric setting (SETTINGS states them too). Wide enough for any
/// real use, narrow enough that no product with the number of ranks or conversion to a
/// duration can overflow.
pub mod ranges {
    use crate::env_value::{Reals, Whole};

    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;

    /// One year: a deadline beyond it is no deadline.
    pub const TIMEOUT_S: Reals = Reals {
        lo: 0.0,
        lo_open: true,
        hi: 31_536_000.0,
        unit: "seconds",
    };
    /// A second of spinning is already a core burnt for nothing.
    pub const SPIN_US: Reals = Reals {
        lo: 0.0,
        lo_open: false,
        hi: 1e6,
        unit: "microseconds",
    };
    /// An hour of yielding before the first sleep.
    pub const YIELD_US: Reals = Reals {
        lo: 0.0,
        lo_open: false,
        hi: 3.6e9,
        unit: "microseconds",
    };
    pub const LEAVE_YIELDS: Whole = Whole {
        lo: 0,
        hi: 10_000,
        unit: "yields",
    };
    pub const INLINE_BYTES: Whole = Whole {
        lo: 0,
        hi: GIB,
        unit: "bytes per rank",
    };
    pub const STAGING_BYTES: Whole = Whole {
        lo: 0,
        hi: 64 * GIB,
        unit: "bytes per rank",
    };
    /// Sparse until used, but /dev/shm must be able to hold what is used.
    pub const HEAP_BYTES: Whole = Whole {
        lo: 0,
        hi: TIB,
        unit: "bytes per rank",
    };
    pub const CHUNK_BYTES: Whole = Whole {
        lo: 64,
        hi: GIB,
        unit: "bytes",
    };
    pub const NT_THRESHOLD: Whole = Whole {
        lo: 0,
        hi: TIB,
        unit: "bytes",
    };
    /// Array sizes that go to the shared-array arena.
    pub const SHARED_ARRAYS_MIN: Whole = Whole {
        lo: 1,
        hi: TIB,
        unit: "bytes",
    };
    pub const SHARED_ARRAYS_MAX: Whole = Whole {
        lo: 1,
        hi: 64 * TIB,
        unit: "bytes",
    };
    /// A block of a GiB amortises any system call.
    pub const CMA_FROM: Whole = Whole {
        lo: 0,
        hi: GIB,
        unit: "bytes",
    };
    /// As many as one creation record can offer (MAX_POOL_SEGMENTS).
    pub const POOL_SEGMENTS: Whole = Whole {
        lo: 0,
        hi: super::MAX_POOL_SEGMENTS as u64,
        unit: "segments",
    };
    /// Address space only; x86-64 gives a process 128 TiB.
    pub const ARENA_BYTES: Whole = Whole {
        lo: 1 << 20,
        hi: 64 * TIB,
        unit: "bytes",
    };
}

/// `SHMCOLL_<FAMILY>_ALGORITHM` for every collective family.
fn coll_forced_from_env() -> Result<[Option<Algo>; CollOp::COUNT]> {
    let mut out = [None; CollOp::COUNT];
    for op in CollOp::ALL.into_iter().filter(|o| o.is_module_collective()) {
        let fam = op.family();
        let var = format!("SHMCOLL_{}_ALGORITHM", fam.name().to_ascii_uppercase());
        let var = var.replace("_BLOCK_", "_");
        if let Ok(v) = std::env::var(&var) {
            let v = v.trim();
            if v.is_empty() || v.eq_ignore_ascii_case("auto") {
                continue;
            }
            out[op as usize] = Some(Algo::parse(op, v).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "environment: {var}={v:?}; known algorithms: {}",
                    Algo::names(op)
                ))
            })?);
        }
    }
    Ok(out)
}

impl Config {
    /// Defaults for `nranks` ranks on this machine, overridden by the environment.
    pub fn from_env(nranks: usize) -> Result<Config> {
        let m = hw::machine();
        let mut wait = WaitConfig::defaults(nranks, m.logical_cpus);
        if let Some(s) = env_real("SHMCOLL_TIMEOUT", ranges::TIMEOUT_S)? {
            wait.timeout = Duration::from_secs_f64(s);
        }
        if let Some(us) = env_real("SHMCOLL_SPIN_US", ranges::SPIN_US)? {
            wait.spin = Duration::from_secs_f64(us * 1e-6);
        }
        if let Some(us) = env_real("SHMCOLL_YIELD_US", ranges::YIELD_US)? {
            wait.yield_until = Duration::from_secs_f64(us * 1e-6);
        }
        if let Some(n) = env_whole("SHMCOLL_LEAVE_YIELDS", ranges::LEAVE_YIELDS)? {
            // Within u32 by its range.
            wait.leave_yields = u32::try_from(n).unwrap_or(u32::MAX);
        }
        wait.check_every = wait
            .check_every
            .min(wait.timeout / 4)
            .max(Duration::from_micros(100));
        let heap_default = {
            // Leave half of /dev/shm to others. The heap is sparse: its pages are allocated
            // block by block as comm.empty hands them out (Comm::heap_alloc), so jobs that
            // start together may promise more than /dev/shm holds; the block that cannot be
            // backed is then a HeapExhausted error, not a SIGBUS.
            let cap = shm_free_bytes().map_or(1 << 30, |f| (f / 2 / nranks.max(1) as u64) as usize);
            (4usize << 30).min(cap) / 4096 * 4096
        };
        // The kernels read these themselves (and ignore a bad value); checked here so that
        // a bad value is an error rather than silently the default.
        env_bytes("SHMCOLL_NT_THRESHOLD", ranges::NT_THRESHOLD)?;
        if let Ok(isa) = std::env::var("SHMCOLL_ISA") {
            if !isa.trim().is_empty() && shmcoll_kernels::Isa::parse(&isa).is_none() {
                let shown: String = isa.chars().take(64).collect();
                return Err(Error::InvalidArgument(format!(
                    "environment: SHMCOLL_ISA={shown:?} is not one of scalar, sse2, avx2, avx512"
                )));
            }
        }
        let heap_set = env_bytes("SHMCOLL_HEAP_BYTES", ranges::HEAP_BYTES)?;
        let pool_segments = env_whole("SHMCOLL_POOL_SEGMENTS", ranges::POOL_SEGMENTS)?
            .map_or(DEFAULT_POOL_SEGMENTS, |n| {
                usize::try_from(n).unwrap_or(MAX_POOL_SEGMENTS)
            });
        Ok(Config {
            inline_bytes: env_bytes("SHMCOLL_INLINE_BYTES", ranges::INLINE_BYTES)?
                .unwrap_or(64 << 10),
            staging_bytes: env_bytes("SHMCOLL_STAGING_BYTES", ranges::STAGING_BYTES)?
                .unwrap_or(4 << 20)
                .max(4096 * nranks.max(1)),
            heap_bytes: heap_set.unwrap_or(heap_default),
            chunk_bytes: env_bytes("SHMCOLL_CHUNK_BYTES", ranges::CHUNK_BYTES)?.unwrap_or(64 << 10),
            nt_threshold: hw::nt_threshold_per_rank(nranks),
            wait,
            alltoall_forced: Forced::from_env("SHMCOLL_ALLTOALL")?,
            coll_forced: coll_forced_from_env()?,
            bind: match std::env::var("SHMCOLL_BIND") {
                Ok(v) => BindPolicy::parse(&v).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "SHMCOLL_BIND={v:?}: expected auto, core or none"
                    ))
                })?,
                Err(_) => BindPolicy::Auto,
            },
            cma_from: env_bytes(CMA_FROM_ENV, ranges::CMA_FROM)?,
            pool_segments,
            heap_explicit: heap_set.is_some(),
        })
    }

    pub fn sizes(&self, nranks: usize) -> Sizes {
        Sizes {
            nranks,
            inline_bytes: self.inline_bytes,
            staging_bytes: self.staging_bytes,
            heap_bytes: self.heap_bytes,
        }
    }
}
