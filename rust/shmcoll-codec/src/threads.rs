//! How many threads a codec call uses, and the runner that spreads its pieces over them:
//! one rule for every codec. Each codec splits its input at boundaries where the pieces
//! are independent (zfp's word-aligned block groups, bq's blocks, the casts' elements,
//! mpc's chunks), so the bytes never depend on the thread count; only the wall time does.
//!
//! The model: a call is worth splitting when every thread gets at least
//! [`BYTES_PER_THREAD`] of input (starting a scoped thread costs tens of microseconds; a
//! mebibyte takes the fastest codec fifty or more from memory), and it never uses more
//! threads than the CPUs this process may run on (`available_parallelism`, which on Linux
//! reads the `sched_getaffinity` mask and the cgroup CPU quota) or than
//! `SHMCOLL_CODEC_THREADS` says.

use crate::{CodecError, Result};

/// Input bytes per thread below which a call runs on the calling thread alone.
pub(crate) const BYTES_PER_THREAD: usize = 1 << 20;

/// The most threads `SHMCOLL_CODEC_THREADS` may ask for.
pub const MAX_CODEC_THREADS: usize = 1024;

/// Threads for a call reading `bytes` of input: one per CPU this process may run on
/// (`SHMCOLL_CODEC_THREADS`, a whole number from 1 to MAX_CODEC_THREADS, caps it), and
/// no more than keeps every thread busy with [`BYTES_PER_THREAD`] bytes.
pub(crate) fn threads_for(bytes: usize) -> Result<usize> {
    if bytes < 2 * BYTES_PER_THREAD {
        return Ok(1); // before reading the environment: small calls stay cheap
    }
    let cpus = match std::env::var_os("SHMCOLL_CODEC_THREADS") {
        Some(v) if !v.to_string_lossy().trim().is_empty() => codec_threads(&v.to_string_lossy())?,
        _ => std::thread::available_parallelism().map_or(1, |c| c.get()),
    };
    Ok(cpus.min(bytes / BYTES_PER_THREAD).max(1))
}

/// `SHMCOLL_CODEC_THREADS` from its text: digits only, 1 to MAX_CODEC_THREADS.
pub(crate) fn codec_threads(raw: &str) -> Result<usize> {
    let t = raw.trim();
    match t.parse::<usize>() {
        Ok(k) if t.bytes().all(|b| b.is_ascii_digit()) && (1..=MAX_CODEC_THREADS).contains(&k) => {
            Ok(k)
        }
        _ => {
            let shown: String = raw.chars().take(64).collect();
            Err(CodecError::InvalidArgument(format!(
                "environment: SHMCOLL_CODEC_THREADS={shown:?} is not allowed; allowed: \
                 threads: 1 <= value <= {MAX_CODEC_THREADS}"
            )))
        }
    }
}

/// Units (blocks, elements, chunks) per piece when `units` are split over `threads`:
/// at least one, so that a split never yields an empty piece.
pub(crate) fn units_per_piece(units: usize, threads: usize) -> usize {
    units.div_ceil(threads.max(1)).max(1)
}

/// Run `work` on every piece, the first on the calling thread and the others on scoped
/// threads; the results in the pieces' order.
pub(crate) fn map_pieces<T: Send, R: Send>(pieces: Vec<T>, work: impl Fn(T) -> R + Sync) -> Vec<R> {
    let mut pieces = pieces.into_iter();
    let Some(first) = pieces.next() else {
        return Vec::new();
    };
    let work = &work;
    std::thread::scope(|s| {
        let spawned: Vec<_> = pieces.map(|p| s.spawn(move || work(p))).collect();
        let mut out = Vec::with_capacity(spawned.len() + 1);
        out.push(work(first));
        for h in spawned {
            // A piece's panic is the call's panic, as on one thread.
            out.push(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        out
    })
}

#[cfg(test)]
mod tests;
