//! Where private buffers start to take CMA: the block size (`cma_from`, bytes) below which
//! the model tables serve ordinary (non-shared) buffers with staging (or inline) instead of
//! the cma algorithms, measured on this machine rather than guessed.
//!
//! A CMA transfer pays a system call and page pinning per piece; staging pays a second
//! copy and a handoff per chunk. Which costs less up to which size depends on the
//! machine (system call cost under the kernel's mitigations, pinning, moving lines
//! between cores), so a short probe (probe.rs) times both, derive.rs finds the size from
//! which CMA costs no more, and the figures are cached per machine (cache.rs) so that
//! only the first process of a node pays for the probe. A probe the machine's load cut
//! short serves its process but is not kept; one that passes its cap gives up, and its
//! process keeps CMA where the model's cache sizes put it (0: the tables unchanged).
//! Either leaves a marker, and the node's processes in the next minutes take the model's
//! sizes without probing (cache::RETRY_AFTER).
//!
//! Selection must be identical on every rank, so a communicator never uses its own rank's
//! value: the process that creates the segment decides (`SHMCOLL_CMA_FROM` there, else
//! its probe) and publishes it in the segment's header; every rank, the creator's
//! included, builds its model tables from the published value (`agreed`). Outside a
//! communicator (`shmcoll explain`, the bindings' model tables), this process uses the
//! value its latest communicator agreed on, else its own (`in_force`), so that tables the
//! bindings compute right after joining are the ones every rank computes.

pub mod cache;
pub mod derive;
pub mod probe;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use shmcoll_kernels::hw;
use shmcoll_shm::Segment;

use crate::config::Config;
use crate::error::{Error, Result};
pub use probe::Figures;

/// The environment variable that forces the value (0: CMA wherever the model's sizes
/// put it, and no probe).
pub const ENV: &str = crate::config::CMA_FROM_ENV;
/// The largest value accepted from the environment or a segment.
pub const MAX_BYTES: usize = crate::config::ranges::CMA_FROM.hi as usize;
/// The probe's time budget: no repetition starts that would end past it.
const BUDGET: Duration = Duration::from_millis(25);
/// A probe still running at this point gives up (the machine is too busy to measure).
const CAP: Duration = Duration::from_millis(40);

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Set by `SHMCOLL_CMA_FROM`.
    Forced,
    /// Measured by this process's probe.
    Measured,
    /// Read from the cache file at this path.
    Cached(PathBuf),
    /// The probe could not run (why); CMA wherever the model's sizes put it.
    Failed(String),
    /// Published by the creator of the segment of a communicator this process joined.
    Agreed,
}

impl Origin {
    pub fn describe(&self) -> String {
        match self {
            Origin::Forced => format!("forced by {ENV}"),
            Origin::Measured => "measured now by this process's probe".into(),
            Origin::Cached(p) => format!("the probe's cache file {}", p.display()),
            Origin::Failed(why) => format!("no probe ({why}): the model's own sizes"),
            Origin::Agreed => {
                "published by the creator of this process's latest communicator".into()
            }
        }
    }
}

/// A value, where it came from, and the figures behind it (when this process has them).
#[derive(Clone, Debug)]
pub struct CmaFrom {
    pub bytes: usize,
    pub origin: Origin,
    pub figures: Option<Figures>,
}

/// The staging chunk the probe's ring uses: the model's (select::staging_chunk).
fn chunk() -> usize {
    crate::select::staging_chunk(hw::machine())
}

/// This process's probe (or cache file), once taken.
static NODE: OnceLock<CmaFrom> = OnceLock::new();

/// This node's figures, once per process: from the cache file when it holds a valid one
/// for this machine, else measured now (and written there for the next process).
pub fn node() -> &'static CmaFrom {
    NODE.get_or_init(|| {
        let fp = cache::Fingerprint::of(hw::machine());
        let path = cache::dir().map(|d| d.join(fp.file_name()));
        if let Some(p) = &path {
            if let Ok((figures, bytes)) = cache::load(p, &fp, chunk()) {
                return CmaFrom {
                    bytes,
                    origin: Origin::Cached(p.clone()),
                    figures: Some(figures),
                };
            }
            if let Some(age) = cache::gave_up_within(p, cache::RETRY_AFTER) {
                return CmaFrom {
                    bytes: 0,
                    origin: Origin::Failed(format!(
                        "a probe on this node kept nothing {} s ago (a busy machine); \
                         the next one after {} s",
                        age.as_secs(),
                        cache::RETRY_AFTER.as_secs()
                    )),
                    figures: None,
                };
            }
        }
        let measured = probe::measure(chunk(), BUDGET, CAP).and_then(|f| {
            let bytes = f
                .crossover()
                .ok_or("the probe's figures give no crossover")?;
            Ok((f, bytes))
        });
        // Best effort: kept only when the probe took every repetition (cache::store),
        // else marked so that the node's next processes do not probe again at once.
        let kept = match (&path, &measured) {
            (Some(p), Ok((figures, _))) => cache::store(p, &fp, figures).is_ok(),
            _ => false,
        };
        if let (Some(p), false) = (&path, kept) {
            let _ = cache::mark_gave_up(p);
        }
        match measured {
            Ok((figures, bytes)) => CmaFrom {
                bytes,
                origin: Origin::Measured,
                figures: Some(figures),
            },
            Err(why) => CmaFrom {
                bytes: 0,
                origin: Origin::Failed(why),
                figures: None,
            },
        }
    })
}

/// The value the creator of a segment publishes: the forced one, else this node's probe.
pub fn for_new_segment(cfg: &Config) -> usize {
    cfg.cma_from.unwrap_or_else(|| node().bytes)
}

/// Publish `cfg`'s value in a segment this process just created (before sharing its name).
pub fn publish(seg: &Segment, cfg: &Config) {
    seg.publish_cma_from(for_new_segment(cfg) as u64);
}

/// 1 + the value the latest communicator of this process agreed on; 0 before any.
static AGREED: AtomicU64 = AtomicU64::new(0);

/// The value a communicator on `seg` uses: what its creator published, checked.
pub fn agreed(seg: &Segment) -> Result<usize> {
    let v = seg
        .cma_from()
        .ok_or_else(|| Error::Corrupt("the segment's creator published no CMA crossover".into()))?;
    let bytes = usize::try_from(v)
        .ok()
        .filter(|&b| b <= MAX_BYTES)
        .ok_or_else(|| {
            Error::Corrupt(format!(
                "the segment's CMA crossover of {v} bytes is beyond {MAX_BYTES}"
            ))
        })?;
    AGREED.store(bytes as u64 + 1, Ordering::Relaxed);
    Ok(bytes)
}

/// The value this process's model tables use outside a communicator: its latest
/// communicator's, else `SHMCOLL_CMA_FROM`, else this node's probe.
pub fn in_force() -> Result<CmaFrom> {
    if let Some(bytes) = AGREED.load(Ordering::Relaxed).checked_sub(1) {
        return Ok(CmaFrom {
            bytes: bytes as usize,
            origin: Origin::Agreed,
            // This process's own figures, if it took them (the value may be another's).
            figures: NODE.get().and_then(|n| n.figures.clone()),
        });
    }
    if let Some(bytes) = forced()? {
        return Ok(CmaFrom {
            bytes,
            origin: Origin::Forced,
            figures: None,
        });
    }
    Ok(node().clone())
}

/// `SHMCOLL_CMA_FROM`, checked, if set.
pub fn forced() -> Result<Option<usize>> {
    crate::env_value::env_bytes(ENV, crate::config::ranges::CMA_FROM)
}
