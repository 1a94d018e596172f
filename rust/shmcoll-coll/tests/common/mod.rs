//! Ranks as threads: each thread maps the segment on its own and joins as one rank, so the
//! whole protocol (descriptors, counters, rings, heap) runs as between processes.

use std::sync::Arc;
use std::time::Duration;

use shmcoll_coll::{Comm, Config, RawBuf};

/// A byte vector as the engine's buffer.
pub fn buf(v: &mut [u8]) -> RawBuf {
    RawBuf {
        addr: v.as_mut_ptr() as usize,
        len: v.len(),
    }
}

pub fn config(p: usize) -> Config {
    let mut cfg = Config::from_env(p).unwrap();
    cfg.heap_bytes = 64 << 20;
    cfg.staging_bytes = 256 << 10; // small rings, so that large messages wrap many times
    cfg.inline_bytes = 16 << 10;
    cfg.chunk_bytes = 16 << 10;
    cfg.wait.timeout = Duration::from_secs(20);
    cfg
}

/// Run `f(comm)` on `p` ranks; returns each rank's result in rank order.
pub fn run_ranks<T: Send + 'static>(
    p: usize,
    cfg: Config,
    f: impl Fn(&mut Comm) -> T + Send + Sync + 'static,
) -> Vec<T> {
    run_ranks_with(&cfg.clone(), vec![cfg; p], f)
}

/// Run `f(comm)` on thread ranks of a segment created with `creator`'s settings, rank r
/// joining with `ranks[r]`; each rank's result in rank order.
pub fn run_ranks_with<T: Send + 'static>(
    creator: &Config,
    ranks: Vec<Config>,
    f: impl Fn(&mut Comm) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let seg = Comm::create_segment(ranks.len(), creator).unwrap();
    let name = seg.name().to_string();
    let f = Arc::new(f);
    let handles: Vec<_> = ranks
        .into_iter()
        .enumerate()
        .map(|(r, cfg)| {
            let f = f.clone();
            let seg = (r == 0).then(|| seg.clone());
            let name = name.clone();
            std::thread::spawn(move || {
                let seg = seg.unwrap_or_else(|| Comm::open_segment(&name).unwrap());
                let mut comm = Comm::join(seg, r, cfg).unwrap();
                f(&mut comm)
            })
        })
        .collect();
    drop(seg);
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}
