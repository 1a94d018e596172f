//! The private-buffer crossover between thread ranks: every rank selects with the value
//! the segment's creator published, whatever its own setting says, and private buffers
//! take staging below it and CMA from it (Alltoall and Allgather), heap buffers their
//! single copy throughout.

mod common;

use common::{buf, config, run_ranks, run_ranks_with};
use shmcoll_coll::{Algo, AlltoallCall, Blocks, CollCall, CollOp, Comm, Config, Forced, RawBuf};

/// `config(p)` with the crossover forced to `cma_from`.
fn forcing(p: usize, cma_from: Option<usize>) -> Config {
    let mut cfg = config(p);
    cfg.cma_from = cma_from;
    cfg
}

/// The algorithm that served a uniform Alltoall of `bpp` bytes per peer between private
/// (`heap` false) or heap buffers; checks the result.
fn alltoall(comm: &mut Comm, bpp: usize, heap: bool) -> Algo {
    let (me, p) = (comm.rank(), comm.size());
    let total = p * bpp;
    let (hs, hr) = (
        comm.heap_alloc(total).unwrap(),
        comm.heap_alloc(total).unwrap(),
    );
    let mut vs: Vec<u8> = (0..total)
        .map(|i| (i / bpp * 7 + me * 31 + i) as u8)
        .collect();
    let mut vr = vec![0u8; total];
    let (send, recv) = if heap {
        let raw = |b: &shmcoll_coll::HeapBlock| RawBuf {
            addr: b.as_ptr() as usize,
            len: total,
        };
        // SAFETY: (test) `hs` is this rank's heap block of `total` bytes.
        unsafe { std::ptr::copy_nonoverlapping(vs.as_ptr(), hs.as_ptr(), total) };
        (raw(&hs), raw(&hr))
    } else {
        (buf(&mut vs), buf(&mut vr))
    };
    let call = AlltoallCall {
        send: Some(send),
        recv,
        send_blocks: Blocks::Uniform(bpp),
        recv_blocks: Blocks::Uniform(bpp),
        forced: Forced::default(),
    };
    let algo = comm.alltoall(Ok(call)).unwrap().algo;
    // SAFETY: (test) `recv` describes a live buffer of `total` bytes of this rank.
    let r = unsafe { std::slice::from_raw_parts(recv.addr as *const u8, total) };
    for (i, &b) in r.iter().enumerate() {
        let from = i / bpp;
        let k = me * bpp + i % bpp;
        assert_eq!(
            b,
            (k / bpp * 7 + from * 31 + k) as u8,
            "byte {i} ({algo:?})"
        );
    }
    algo
}

/// The algorithm that served an Allgather of `n` private bytes per rank.
fn allgather(comm: &mut Comm, n: usize) -> Algo {
    let (me, p) = (comm.rank(), comm.size());
    let mut s: Vec<u8> = (0..n).map(|k| (k * 7 + me * 31) as u8).collect();
    let mut r = vec![0u8; n * p];
    let call = CollCall {
        op: CollOp::Allgather,
        send: Some(buf(&mut s)),
        recv: Some(buf(&mut r)),
        root: 0,
        blocks: Some(Blocks::Uniform(n)),
        reduce: None,
        forced: None,
    };
    let algo = comm.collective(CollOp::Allgather, Ok(call)).unwrap().algo;
    let bad = (0..n * p).find(|&i| r[i] != ((i % n) * 7 + (i / n) * 31) as u8);
    assert_eq!(bad, None, "{algo:?}");
    algo
}

/// Past the model's own private inline and single-copy starts at any rank count here.
const CMA_FROM: usize = 96 << 10;

#[test]
fn every_rank_uses_the_creator_s_value_whatever_its_own() {
    let p = 3;
    // The creator forces CMA_FROM; each rank's own setting says otherwise (rank 1 none,
    // which would probe).
    let ranks = vec![
        forcing(p, Some(1 << 10)),
        forcing(p, None),
        forcing(p, Some(1 << 30)),
    ];
    let out = run_ranks_with(&forcing(p, Some(CMA_FROM)), ranks, |comm| {
        let digest = comm.tables_digest();
        let below = alltoall(comm, CMA_FROM - 1, false);
        let from = alltoall(comm, CMA_FROM, false);
        let heap = (
            alltoall(comm, CMA_FROM - 1, true),
            alltoall(comm, CMA_FROM, true),
        );
        let gathers = (allgather(comm, CMA_FROM - 1), allgather(comm, CMA_FROM));
        (
            comm.cma_from(),
            comm.cma_ok(),
            digest,
            below,
            from,
            heap,
            gathers,
        )
    });
    for (rank, (cma_from, cma_ok, digest, below, from, heap, gathers)) in
        out.iter().copied().enumerate()
    {
        assert_eq!(cma_from, CMA_FROM, "rank {rank}");
        assert_eq!(digest, out[0].2, "rank {rank} built other tables");
        assert!(cma_ok, "thread ranks of one process can always use CMA");
        assert_eq!(below, Algo::Staging, "rank {rank}");
        assert_eq!(from, Algo::CmaPush, "rank {rank}");
        assert_eq!(heap, (Algo::Push, Algo::Push), "rank {rank}");
        assert_eq!(gathers, (Algo::Staging, Algo::Cma), "rank {rank}");
    }
}

#[test]
fn zero_keeps_the_model_s_own_sizes() {
    let p = 2;
    let out = run_ranks(p, forcing(p, Some(0)), |comm| {
        (comm.cma_from(), alltoall(comm, CMA_FROM - 1, false))
    });
    assert_eq!(out, vec![(0, Algo::CmaPush); p]);
}

#[test]
fn an_unforced_creator_publishes_its_node_probe() {
    let p = 2;
    let out = run_ranks_with(
        &forcing(p, None),
        vec![forcing(p, Some(CMA_FROM)); p],
        |comm| comm.cma_from(),
    );
    let node = shmcoll_coll::cma_from::node();
    assert_eq!(out, vec![node.bytes; p], "{:?}", node.origin);
}
