mod common;

use common::{buf, config, run_ranks};
use proptest::prelude::*;
use shmcoll_coll::{Algo, AlltoallCall, Blocks, CollOp, Comm, Error, Forced, Order, RawBuf, Store};

/// Byte k of the block rank `from` sends to rank `to`.
fn pattern(from: usize, to: usize, k: usize) -> u8 {
    (from.wrapping_mul(31) ^ to.wrapping_mul(7) ^ k.wrapping_mul(13) ^ (k >> 8)) as u8
}

/// Uniform Alltoall of `bpp` bytes per peer; heap buffers on request; checks the result.
fn uniform(
    comm: &mut Comm,
    bpp: usize,
    forced: Forced,
    heap_send: bool,
    heap_recv: bool,
    in_place: bool,
) -> Result<Algo, Error> {
    let (me, p) = (comm.rank(), comm.size());
    let total = p * bpp;
    let hs = comm.heap_alloc(total).unwrap();
    let hr = comm.heap_alloc(total).unwrap();
    let mut vs = vec![0u8; total];
    let mut vr = vec![0u8; total];
    let send = if heap_send {
        RawBuf {
            addr: hs.as_ptr() as usize,
            len: total,
        }
    } else {
        buf(&mut vs)
    };
    let recv = if heap_recv {
        RawBuf {
            addr: hr.as_ptr() as usize,
            len: total,
        }
    } else {
        buf(&mut vr)
    };
    let fill = |b: RawBuf| {
        // SAFETY: (test) b describes a live buffer of b.len bytes owned by this rank.
        let s = unsafe { std::slice::from_raw_parts_mut(b.addr as *mut u8, b.len) };
        for j in 0..p {
            for k in 0..bpp {
                s[j * bpp + k] = pattern(me, j, k);
            }
        }
    };
    if in_place {
        fill(recv)
    } else {
        fill(send)
    }
    let call = AlltoallCall {
        send: if in_place { None } else { Some(send) },
        recv,
        send_blocks: Blocks::Uniform(bpp),
        recv_blocks: Blocks::Uniform(bpp),
        forced,
    };
    let choice = comm.alltoall(Ok(call))?;
    // SAFETY: (test) as above.
    let r = unsafe { std::slice::from_raw_parts(recv.addr as *const u8, total) };
    for j in 0..p {
        for k in 0..bpp {
            assert_eq!(
                r[j * bpp + k],
                pattern(j, me, k),
                "rank {me} block from {j} byte {k} ({choice:?}, bpp {bpp})"
            );
        }
    }
    Ok(choice.algo)
}

fn forced(a: Algo, o: Order, s: Store) -> Forced {
    Forced {
        algo: Some(a),
        order: Some(o),
        store: Some(s),
    }
}

#[test]
fn every_algorithm_order_and_store_at_1_to_4_ranks() {
    for p in 1..=4 {
        let out = run_ranks(p, config(p), |comm| {
            let mut served = Vec::new();
            for a in Algo::serving(CollOp::Alltoall) {
                for o in Order::ALL {
                    for s in Store::ALL {
                        for bpp in [0usize, 1, 7, 64, 1000, 4099, 70_000] {
                            let (hs, hr) = match a {
                                Algo::Pull => (true, false),
                                Algo::Push => (false, true),
                                _ => (false, false),
                            };
                            for in_place in [false, true] {
                                let r = uniform(comm, bpp, forced(a, o, s), hs, hr, in_place);
                                match (a, in_place, &r) {
                                    (Algo::Inline, _, Err(Error::CannotServe { .. }))
                                        if bpp * comm.size() > 16 << 10 => {}
                                    (
                                        Algo::Pull | Algo::Push | Algo::Cma | Algo::CmaPush,
                                        true,
                                        Err(Error::CannotServe { .. }),
                                    ) => {}
                                    (_, _, Ok(got)) => {
                                        assert_eq!(*got, a);
                                        served.push(a)
                                    }
                                    _ => panic!(
                                        "{a:?} {o:?} {s:?} bpp={bpp} in_place={in_place}: {r:?}"
                                    ),
                                }
                            }
                        }
                    }
                }
            }
            served.len()
        });
        assert!(out.iter().all(|&n| n > 0));
    }
}

#[test]
fn automatic_choice_works_on_every_buffer_kind() {
    for p in [1, 2, 3, 4] {
        run_ranks(p, config(p), |comm| {
            for bpp in [0usize, 8, 3000, 100_000, 1 << 20] {
                for (hs, hr) in [(false, false), (true, false), (false, true), (true, true)] {
                    uniform(comm, bpp, Forced::default(), hs, hr, false).unwrap();
                }
                uniform(comm, bpp, Forced::default(), false, false, true).unwrap();
            }
        });
    }
}

#[test]
fn mismatched_sizes_fail_on_every_rank_and_the_comm_survives() {
    let out = run_ranks(3, config(3), |comm| {
        let me = comm.rank();
        let bpp = if me == 1 { 16 } else { 8 };
        let mut s = vec![0u8; 3 * bpp];
        let mut r = vec![0xAAu8; 3 * bpp];
        let call = AlltoallCall {
            send: Some(buf(&mut s)),
            recv: buf(&mut r),
            send_blocks: Blocks::Uniform(bpp),
            recv_blocks: Blocks::Uniform(bpp),
            forced: Forced::default(),
        };
        let e = comm.alltoall(Ok(call)).unwrap_err();
        assert!(matches!(e, Error::Mismatch(_)), "{e}");
        assert!(r.iter().all(|&b| b == 0xAA), "nothing written on rejection");
        // Still usable afterwards.
        uniform(comm, 5, Forced::default(), false, false, false).unwrap();
        e.to_string()
    });
    assert!(
        out.iter().all(|m| m == &out[0]),
        "same message everywhere: {out:?}"
    );
}

#[test]
fn a_local_rejection_is_raised_on_every_rank() {
    run_ranks(3, config(3), |comm| {
        let me = comm.rank();
        let mut s = vec![0u8; 24];
        let mut r = vec![0u8; if me == 2 { 16 } else { 24 }];
        let call = AlltoallCall {
            send: Some(buf(&mut s)),
            recv: buf(&mut r),
            send_blocks: Blocks::Uniform(8),
            recv_blocks: Blocks::Uniform(8),
            forced: Forced::default(),
        };
        match comm.alltoall(Ok(call)).unwrap_err() {
            Error::Buffer(_) => assert_eq!(me, 2),
            Error::Peer { rank: 2, .. } => assert_ne!(me, 2),
            e => panic!("{e}"),
        }
        comm.barrier().unwrap();
    });
}

#[test]
fn overlapping_buffers_are_rejected() {
    run_ranks(2, config(2), |comm| {
        let mut v = vec![0u8; 64];
        let b = buf(&mut v);
        let call = AlltoallCall {
            send: Some(b),
            recv: RawBuf {
                addr: b.addr + 8,
                len: 32,
            },
            send_blocks: Blocks::Uniform(16),
            recv_blocks: Blocks::Uniform(16),
            forced: Forced::default(),
        };
        let e = comm.alltoall(Ok(call)).unwrap_err();
        assert!(matches!(e, Error::Buffer(_) | Error::Peer { .. }), "{e}");
    });
}

/// Alltoallv with counts from a matrix: counts[i][j] bytes from i to j.
fn vector(
    comm: &mut Comm,
    counts: &[Vec<usize>],
    gaps: &[usize],
    forced: Forced,
    heap: bool,
    in_place: bool,
) -> Result<Algo, Error> {
    let (me, p) = (comm.rank(), comm.size());
    let scounts: Vec<usize> = (0..p).map(|j| counts[me][j]).collect();
    let rcounts: Vec<usize> = (0..p).map(|j| counts[j][me]).collect();
    let displs = |c: &[usize]| -> Vec<usize> {
        let mut at = 0;
        // Reverse order with gaps, so that displacements are not just prefix sums.
        let mut d = vec![0; p];
        for j in (0..p).rev() {
            at += gaps[j];
            d[j] = at;
            at += c[j];
        }
        d
    };
    let (sd, rd) = (displs(&scounts), displs(&rcounts));
    let slen = (0..p).map(|j| sd[j] + scounts[j]).max().unwrap_or(0) + 3;
    let rlen = (0..p).map(|j| rd[j] + rcounts[j]).max().unwrap_or(0) + 3;
    let hs = comm.heap_alloc(slen).unwrap();
    let hr = comm.heap_alloc(rlen).unwrap();
    let mut vs = vec![0u8; slen];
    let mut vr = vec![0xEEu8; rlen];
    let send = if heap {
        RawBuf {
            addr: hs.as_ptr() as usize,
            len: slen,
        }
    } else {
        buf(&mut vs)
    };
    let recv = if heap {
        RawBuf {
            addr: hr.as_ptr() as usize,
            len: rlen,
        }
    } else {
        buf(&mut vr)
    };
    // SAFETY: (test) live buffers of the given lengths.
    let (s, r) = unsafe {
        (
            std::slice::from_raw_parts_mut(send.addr as *mut u8, slen),
            std::slice::from_raw_parts_mut(recv.addr as *mut u8, rlen),
        )
    };
    r.fill(0xEE);
    if in_place {
        if counts
            .iter()
            .enumerate()
            .any(|(i, row)| row.iter().enumerate().any(|(j, &c)| c != counts[j][i]))
        {
            return Ok(Algo::Staging);
        }
        for j in 0..p {
            for k in 0..rcounts[j] {
                r[rd[j] + k] = pattern(me, j, k);
            }
        }
    } else {
        for j in 0..p {
            for k in 0..scounts[j] {
                s[sd[j] + k] = pattern(me, j, k);
            }
        }
    }
    let call = AlltoallCall {
        send: if in_place { None } else { Some(send) },
        recv,
        send_blocks: Blocks::Vector {
            counts: &scounts,
            displs: &sd,
        },
        recv_blocks: Blocks::Vector {
            counts: &rcounts,
            displs: &rd,
        },
        forced,
    };
    let choice = comm.alltoall(Ok(call))?;
    let mut expect = vec![0xEEu8; rlen];
    for j in 0..p {
        for k in 0..rcounts[j] {
            expect[rd[j] + k] = pattern(j, me, k);
        }
    }
    assert!(
        r == &expect[..],
        "rank {me}: Alltoallv result differs ({choice:?})"
    );
    Ok(choice.algo)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn alltoallv_random_counts(p in 1usize..5, seed in any::<u64>(), algo_i in 0usize..7, heap in any::<bool>(), in_place in any::<bool>()) {
        let mut x = seed | 1;
        let mut next = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x };
        let big = next() % 4 == 0;
        let counts: Vec<Vec<usize>> = (0..p).map(|_| (0..p).map(|_| { let v = next(); if v % 5 == 0 { 0 } else if big { (v % 300_000) as usize } else { (v % 300) as usize } }).collect()).collect();
        // in place needs a symmetric matrix
        let counts: Vec<Vec<usize>> = if in_place { (0..p).map(|i| (0..p).map(|j| counts[i.min(j)][i.max(j)]).collect()).collect() } else { counts };
        let gaps: Vec<usize> = (0..p).map(|_| (next() % 70) as usize).collect();
        let algo = Algo::serving(CollOp::Alltoall).nth(algo_i);
        let f = Forced { algo, order: None, store: None };
        let results = run_ranks(p, config(p), move |comm| vector(comm, &counts, &gaps, f, heap, in_place).map_err(|e| e.to_string()));
        for r in &results {
            match (algo, r) {
                (_, Ok(_)) => {}
                (Some(_), Err(m)) if m.contains("cannot serve") => {}
                (_, Err(m)) => prop_assert!(false, "{}", m),
            }
        }
    }
}

/// A table may list a single-copy algorithm before `inline` for tiny sizes: ranks then
/// write their payload into the arrive line and selection still picks `push`, which needs
/// the peers' buffer offsets from the full descriptor.
#[test]
fn tiny_calls_served_by_single_copy_algorithms() {
    use shmcoll_coll::{Candidate, Range, Table};
    for p in [2usize, 3, 4] {
        run_ranks(p, config(p), |comm| {
            let c = |a| Candidate::new(a, Order::Shifted, Store::Hybrid);
            let t = Table::new(vec![Range {
                min_bytes: 0,
                max_bytes: usize::MAX,
                candidates: vec![
                    c(Algo::Push),
                    c(Algo::Pull),
                    c(Algo::Inline),
                    c(Algo::Staging),
                ],
            }])
            .unwrap();
            comm.set_table(CollOp::Alltoall, t, "test".into());
            for bpp in [1usize, 8, 20] {
                assert_eq!(
                    uniform(comm, bpp, Forced::default(), true, true, false).unwrap(),
                    Algo::Push
                );
                assert_eq!(
                    uniform(comm, bpp, Forced::default(), true, false, false).unwrap(),
                    Algo::Pull
                );
                assert_eq!(
                    uniform(comm, bpp, Forced::default(), false, false, false).unwrap(),
                    Algo::Inline
                );
            }
        });
    }
}
