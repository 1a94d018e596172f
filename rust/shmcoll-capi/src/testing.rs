//! Test helper: ranks as threads of one process, each joined to the same segment, as MPI
//! processes would be.

use std::thread;

use shmcoll_coll::Comm;

use crate::engine::{create_segment, join, open_segment};

/// Run `f(rank, comm)` on `p` threads joined to one fresh segment; results by rank.
pub(crate) fn on_ranks<T: Send + 'static>(
    p: usize,
    f: impl Fn(usize, &mut Comm) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let seg = create_segment(p).expect("segment");
    let name = seg.name().to_string();
    let mut handles = Vec::new();
    for r in 0..p {
        let f = f.clone();
        let seg = (r == 0).then(|| seg.clone());
        let name = name.clone();
        handles.push(thread::spawn(move || {
            let seg = seg.unwrap_or_else(|| open_segment(&name).expect("open"));
            let mut comm = join(seg, r).expect("join");
            f(r, &mut comm)
        }));
    }
    drop(seg);
    handles
        .into_iter()
        .map(|h| h.join().expect("rank"))
        .collect()
}
