//! Settings read once per communicator: segment sizes, waiting, forced choices.
//! Every setting has an environment variable; `shmcoll info` lists them (see SETTINGS).

use std::time::Duration;

use shmcoll_kernels::hw;
use shmcoll_shm::placement::BindPolicy;
use shmcoll_shm::{shm_free_bytes, Sizes, WaitConfig};

use crate::collectives::{CollAlgo, CollOp};
use crate::error::{Error, Result};
use crate::registry::Forced;

/// (name, meaning) of every environment variable the engine reads.
pub const SETTINGS: &[(&str, &str)] = &[
    ("SHMCOLL_TIMEOUT", "seconds a rank waits for a peer before raising (default 60)"),
    ("SHMCOLL_SPIN_US", "microseconds of busy waiting before yielding the core (default 50, 0 when ranks outnumber cores)"),
    ("SHMCOLL_YIELD_US", "microseconds of waiting (in total) before sleeping on a futex (default 5000)"),
    ("SHMCOLL_LEAVE_YIELDS", "yields a rank leaving a call spends letting the ranks bound to its CPU that arrived before it leave first (default 4, 0 turns it off)"),
    ("SHMCOLL_INLINE_BYTES", "bytes per rank for payloads carried inline in the segment (default 64K)"),
    ("SHMCOLL_STAGING_BYTES", "bytes per rank of staging rings for two-copy transfers (default 4M)"),
    ("SHMCOLL_HEAP_BYTES", "bytes per rank of shared heap for Comm.empty (default: 4G, or less if /dev/shm is small; sparse until used)"),
    ("SHMCOLL_ARENA_BYTES", "bytes of address space of the arena shmcoll.shared_arrays() allocates NumPy arrays from (default 64G; sparse until used)"),
    ("SHMCOLL_CHUNK_BYTES", "pipelining chunk of the staging algorithm (default 64K)"),
    ("SHMCOLL_NT_THRESHOLD", "bytes written per call from which the hybrid store policy streams (default from caches)"),
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
    ("SHMCOLL_BIND", "bind each rank to one CPU: auto (when ranks outnumber CPUs and none is bound yet), core, none"),
    ("SHMCOLL_ISA", "lower the SIMD level of the copy kernels: scalar, sse2, avx2, avx512"),
];

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
    pub coll_forced: [Option<CollAlgo>; 11],
    pub bind: BindPolicy,
}

fn env_bytes(name: &str) -> Result<Option<usize>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => hw::parse_bytes(v.trim()).map(Some).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{name}={v:?} is not a byte count (e.g. 4096, 64K, 16M)"
            ))
        }),
        _ => Ok(None),
    }
}

fn env_count(name: &str) -> Result<Option<u32>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse::<u32>().map(Some).map_err(|_| {
            Error::InvalidArgument(format!("{name}={v:?} is not a count (0, 1, 2, ...)"))
        }),
        _ => Ok(None),
    }
}

fn env_f64(name: &str) -> Result<Option<f64>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .map(Some)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("{name}={v:?} is not a non-negative number"))
            }),
        _ => Ok(None),
    }
}

/// `SHMCOLL_<FAMILY>_ALGORITHM` for every collective family.
fn coll_forced_from_env() -> Result<[Option<CollAlgo>; 11]> {
    let mut out = [None; 11];
    for op in CollOp::ALL {
        let fam = op.family();
        let var = format!("SHMCOLL_{}_ALGORITHM", fam.name().to_ascii_uppercase());
        let var = var.replace("_BLOCK_", "_");
        if let Ok(v) = std::env::var(&var) {
            let v = v.trim();
            if v.is_empty() || v.eq_ignore_ascii_case("auto") {
                continue;
            }
            out[op as usize] = Some(CollAlgo::parse(v).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "environment: {var}={v:?}; known algorithms: inline, direct, cma, staging"
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
        if let Some(s) = env_f64("SHMCOLL_TIMEOUT")? {
            wait.timeout = Duration::from_secs_f64(s);
        }
        if let Some(us) = env_f64("SHMCOLL_SPIN_US")? {
            wait.spin = Duration::from_secs_f64(us * 1e-6);
        }
        if let Some(us) = env_f64("SHMCOLL_YIELD_US")? {
            wait.yield_until = Duration::from_secs_f64(us * 1e-6);
        }
        if let Some(n) = env_count("SHMCOLL_LEAVE_YIELDS")? {
            wait.leave_yields = n;
        }
        wait.check_every = wait
            .check_every
            .min(wait.timeout / 4)
            .max(Duration::from_micros(100));
        let heap_default = {
            // Leave half of /dev/shm to others; sparse pages cost nothing until touched.
            let cap = shm_free_bytes().map_or(1 << 30, |f| (f / 2 / nranks.max(1) as u64) as usize);
            (4usize << 30).min(cap) / 4096 * 4096
        };
        Ok(Config {
            inline_bytes: env_bytes("SHMCOLL_INLINE_BYTES")?.unwrap_or(64 << 10),
            staging_bytes: env_bytes("SHMCOLL_STAGING_BYTES")?
                .unwrap_or(4 << 20)
                .max(4096 * nranks.max(1)),
            heap_bytes: env_bytes("SHMCOLL_HEAP_BYTES")?.unwrap_or(heap_default),
            chunk_bytes: env_bytes("SHMCOLL_CHUNK_BYTES")?
                .unwrap_or(64 << 10)
                .max(64),
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
