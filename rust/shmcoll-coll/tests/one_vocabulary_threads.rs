//! One selection vocabulary for every collective, between thread ranks: Alltoall and the
//! other collectives are recorded alike (one last choice, one count per algorithm), and
//! forcing an algorithm on an operation it does not serve fails on every rank.

mod common;

use common::{buf, config, run_ranks};
use shmcoll_coll::{Algo, AlltoallCall, Blocks, CollCall, CollOp, Error, Forced};

#[test]
fn alltoall_and_allgather_are_recorded_alike() {
    let p = 2;
    let n = 64;
    let out = run_ranks(p, config(p), move |comm| {
        let mut send = vec![comm.rank() as u8; n * p];
        let mut recv = vec![0u8; n * p];
        let call = AlltoallCall {
            send: Some(buf(&mut send)),
            recv: buf(&mut recv),
            send_blocks: Blocks::Uniform(n),
            recv_blocks: Blocks::Uniform(n),
            forced: Forced::algo(Some(Algo::Inline)),
        };
        let a = comm.alltoall(Ok(call)).unwrap();
        let after_alltoall = comm.last_choice().map(|c| c.op);
        let call = CollCall {
            op: CollOp::Allgather,
            send: Some(buf(&mut send[..n])),
            recv: Some(buf(&mut recv)),
            root: 0,
            blocks: Some(Blocks::Uniform(n)),
            reduce: None,
            forced: Some(Algo::Inline),
        };
        let g = comm.collective(CollOp::Allgather, Ok(call)).unwrap();
        let last = comm.last_choice().map(|c| (c.op, c.algo));
        (
            (a.op, a.algo, g.op, g.algo),
            after_alltoall,
            last,
            comm.calls_with(Algo::Inline),
            comm.stats().calls,
        )
    });
    for (rank, (choices, after_alltoall, last, inline_calls, calls)) in out.into_iter().enumerate()
    {
        let want = (
            CollOp::Alltoall,
            Algo::Inline,
            CollOp::Allgather,
            Algo::Inline,
        );
        assert_eq!(choices, want, "rank {rank}");
        assert_eq!(after_alltoall, Some(CollOp::Alltoall), "rank {rank}");
        assert_eq!(last, Some((CollOp::Allgather, Algo::Inline)), "rank {rank}");
        assert_eq!((inline_calls, calls), (2, 2), "rank {rank}");
    }
}

#[test]
fn an_algorithm_forced_on_an_operation_it_does_not_serve_fails_on_every_rank() {
    let p = 2;
    let n = 64;
    let out = run_ranks(p, config(p), move |comm| {
        let mut send = vec![1u8; n * p];
        let mut recv = vec![0u8; n * p];
        let call = AlltoallCall {
            send: Some(buf(&mut send)),
            recv: buf(&mut recv),
            send_blocks: Blocks::Uniform(n),
            recv_blocks: Blocks::Uniform(n),
            forced: Forced::algo(Some(Algo::Direct)),
        };
        let direct = comm.alltoall(Ok(call)).map(|c| c.algo);
        let call = CollCall {
            op: CollOp::Allgather,
            send: Some(buf(&mut send[..n])),
            recv: Some(buf(&mut recv)),
            root: 0,
            blocks: Some(Blocks::Uniform(n)),
            reduce: None,
            forced: Some(Algo::Push),
        };
        let push = comm.collective(CollOp::Allgather, Ok(call)).map(|c| c.algo);
        (direct, push)
    });
    for (rank, (direct, push)) in out.into_iter().enumerate() {
        for (what, r) in [("direct on Alltoall", direct), ("push on Allgather", push)] {
            match r {
                Err(Error::CannotServe { why, .. }) => {
                    assert!(why.contains("does not serve"), "rank {rank}, {what}: {why}")
                }
                other => panic!("rank {rank}, {what}: {other:?}"),
            }
        }
    }
}
