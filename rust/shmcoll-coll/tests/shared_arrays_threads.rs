//! The shared-array arena (shmcoll_shm::shared_arena) between thread ranks: a communicator
//! joined after the arena exists describes buffers in it as reachable (the forced direct
//! algorithm, which refuses private buffers, serves them), and every result is right.

mod common;

use common::{buf, config, run_ranks};
use shmcoll_coll::{Algo, Blocks, CollCall, CollOp};
use shmcoll_shm::shared_arena;

#[test]
fn buffers_in_the_arena_take_the_direct_path() {
    let arena = shared_arena::ensure(64 << 20).unwrap();
    let p = 3;
    let n = 100_000;
    let results = run_ranks(p, config(p), move |comm| {
        let me = comm.rank();
        let send = arena.alloc(n, false).unwrap();
        let recv = arena.alloc(n * p, true).unwrap();
        assert!(
            comm.heap_offset(send, n).is_some(),
            "an arena buffer is not reachable"
        );
        // SAFETY: both blocks were just allocated for this rank, n and n * p bytes long.
        let (s, r) = unsafe {
            (
                std::slice::from_raw_parts_mut(send as *mut u8, n),
                std::slice::from_raw_parts_mut(recv as *mut u8, n * p),
            )
        };
        for (k, b) in s.iter_mut().enumerate() {
            *b = (k * 7 + me * 31) as u8;
        }
        let call = CollCall {
            op: CollOp::Allgather,
            send: Some(buf(s)),
            recv: Some(buf(r)),
            root: 0,
            blocks: Some(Blocks::Uniform(n)),
            reduce: None,
            forced: Some(Algo::Direct),
        };
        let algo = comm.collective(CollOp::Allgather, Ok(call)).unwrap().algo;
        let bad = (0..n * p).find(|&i| r[i] != ((i % n) * 7 + (i / n) * 31) as u8);
        arena.free(send);
        arena.free(recv);
        (algo, bad)
    });
    for (rank, (algo, bad)) in results.into_iter().enumerate() {
        assert_eq!(algo, Algo::Direct, "rank {rank}");
        assert_eq!(bad, None, "rank {rank}: wrong byte");
    }
}
