//! One-sided Bcast (src/one_sided.rs) between thread ranks: random schedules of Bcasts from
//! changing roots (tiny, inline, too large to be one-sided, split over the ranks with CMA,
//! and pipelined through a staging ring that wraps), mixed with Allreduce (inline and in staging steps), Alltoall and
//! Barrier, with random delays per rank so that roots run ahead of their peers by every
//! possible amount. Every result is checked.

mod common;

use std::time::Duration;

use common::{buf, config, run_ranks};
use proptest::prelude::*;
use shmcoll_coll::{Algo, AlltoallCall, Blocks, CollCall, CollOp, Comm, Error};
use shmcoll_kernels::reduce::{Dtype, Op};

/// A small deterministic generator (the schedule must be the same on every rank).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn byte(step: usize, root: usize, k: usize) -> u8 {
    (step.wrapping_mul(29) ^ root.wrapping_mul(101) ^ k.wrapping_mul(7) ^ (k >> 8)) as u8
}

fn bcast(comm: &mut Comm, step: usize, root: usize, n: usize) -> Result<Algo, Error> {
    bcast_forced(comm, step, root, n, None)
}

fn bcast_forced(
    comm: &mut Comm,
    step: usize,
    root: usize,
    n: usize,
    forced: Option<Algo>,
) -> Result<Algo, Error> {
    let mut v: Vec<u8> = if comm.rank() == root {
        (0..n).map(|k| byte(step, root, k)).collect()
    } else {
        vec![0xEE; n]
    };
    let call = CollCall {
        op: CollOp::Bcast,
        send: None,
        recv: Some(buf(&mut v)),
        root,
        blocks: None,
        reduce: None,
        forced,
    };
    let algo = comm.collective(CollOp::Bcast, Ok(call))?.algo;
    if let Some(k) = (0..n).find(|&k| v[k] != byte(step, root, k)) {
        panic!(
            "rank {} step {step}: Bcast of {n} bytes from {root} wrong at byte {k}",
            comm.rank()
        );
    }
    Ok(algo)
}

fn allreduce(comm: &mut Comm, step: usize, n: usize, forced: Option<Algo>) {
    let (me, p) = (comm.rank(), comm.size());
    let mut s: Vec<u8> = (0..n).map(|k| (me * 3 + k + step) as u8).collect();
    let mut r = vec![0u8; n];
    let call = CollCall {
        op: CollOp::Allreduce,
        send: Some(buf(&mut s)),
        recv: Some(buf(&mut r)),
        root: 0,
        blocks: None,
        reduce: Some((Dtype::U8, Op::Sum)),
        forced,
    };
    comm.collective(CollOp::Allreduce, Ok(call)).unwrap();
    for (k, &got) in r.iter().enumerate() {
        let want = (0..p).fold(0u8, |a, j| a.wrapping_add((j * 3 + k + step) as u8));
        assert_eq!(got, want, "rank {me} step {step}: Allreduce byte {k}");
    }
}

fn alltoall(comm: &mut Comm, step: usize) {
    let (me, p) = (comm.rank(), comm.size());
    let bpp = 24;
    let mut s: Vec<u8> = (0..p * bpp)
        .map(|i| byte(step, me, i / bpp * 1000 + i % bpp))
        .collect();
    let mut r = vec![0u8; p * bpp];
    let call = AlltoallCall {
        send: Some(buf(&mut s)),
        recv: buf(&mut r),
        send_blocks: Blocks::Uniform(bpp),
        recv_blocks: Blocks::Uniform(bpp),
        forced: Default::default(),
    };
    comm.alltoall(Ok(call)).unwrap();
    for j in 0..p {
        for k in 0..bpp {
            assert_eq!(r[j * bpp + k], byte(step, j, me * 1000 + k));
        }
    }
}

/// Rank `me`'s part of schedule `seed`: `steps` calls; returns how many were one-sided.
fn schedule(comm: &mut Comm, seed: u64, steps: usize) -> usize {
    let (me, p) = (comm.rank(), comm.size());
    let mut one_sided = 0;
    for step in 0..steps {
        let shared = mix(seed ^ step as u64);
        // Delays differ per rank: up to 300 µs, often none.
        let d = mix(shared ^ ((me as u64 + 1) * 0x1234_5678));
        if d.is_multiple_of(3) {
            std::thread::sleep(Duration::from_micros(d % 300));
        }
        let root = (shared >> 8) as usize % p;
        match shared % 8 {
            0..=2 => {
                let n = [0, 1, 8, 60][(shared >> 16) as usize % 4];
                bcast(comm, step, root, n).unwrap();
                one_sided += 1;
            }
            3 | 4 => {
                // Up to the 16 KiB inline area of these tests; above 8 KiB, streamed.
                let n = 1000 + (shared >> 16) as usize % 15_000;
                let algo = bcast_forced(comm, step, root, n, Some(Algo::Inline)).unwrap();
                assert_eq!(algo, Algo::Inline);
                one_sided += 1;
            }
            5 if shared & (3 << 20) == 0 => {
                // Larger than the inline area (16 KiB in these tests): every rank waits.
                let algo = bcast(comm, step, root, 40_000).unwrap();
                assert_ne!(algo, Algo::Inline);
            }
            5 if shared & (1 << 20) == 0 => {
                // Split between the ranks: each reads its part of the root's private buffer
                // with CMA and forwards it to the other non-roots.
                let n = 65_536 + (shared >> 24) as usize % 400_000;
                let algo = bcast_forced(comm, step, root, n, Some(Algo::Cma)).unwrap();
                assert_eq!(algo, Algo::Cma);
            }
            5 => {
                // Pipelined through the root's 256 KiB staging ring, which wraps up to
                // three times; the root leaves as soon as its last chunk is in.
                let n = 1 + (shared >> 24) as usize % 900_000;
                let algo = bcast_forced(comm, step, root, n, Some(Algo::Staging)).unwrap();
                assert_eq!(algo, Algo::Staging);
            }
            // Staging steps right after a pipelined Bcast check that the Step lines stayed
            // in lockstep.
            6 if shared & (1 << 20) == 0 => allreduce(comm, step, 37, None),
            6 => allreduce(comm, step, 3000, Some(Algo::Staging)),
            _ => {
                if shared.is_multiple_of(2) {
                    comm.barrier().unwrap();
                } else {
                    alltoall(comm, step);
                }
            }
        }
    }
    comm.barrier().unwrap();
    one_sided
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]
    #[test]
    fn one_sided_bcasts_in_random_schedules(p in 1usize..5, seed in any::<u64>()) {
        let counts = run_ranks(p, config(p), move |c| schedule(c, seed, 80));
        prop_assert!(counts.iter().all(|&n| n == counts[0]));
    }
}

/// The root leaves before its peers arrive, but not twice in a row: its next call waits
/// for their arrival at the first (so it never rewrites a payload still to be read).
#[test]
fn the_root_runs_ahead_by_one_call_at_most() {
    let times = run_ranks(3, config(3), |c| {
        let mut spent = Vec::new();
        if c.rank() != 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        for step in 0..3 {
            let t = std::time::Instant::now();
            bcast(c, step, 0, 8).unwrap();
            spent.push(t.elapsed());
        }
        c.barrier().unwrap();
        spent
    });
    let root = &times[0];
    assert!(root[0] < Duration::from_millis(150), "{root:?}");
    assert!(root[1] >= Duration::from_millis(150), "{root:?}");
}

/// A non-root whose call differs from the root's raises at once; the root and the other
/// non-root raise at their next call; the communicator is unusable afterwards.
#[test]
fn a_disagreement_breaks_the_communicator_on_every_rank() {
    let got = run_ranks(3, config(3), |c| {
        let n = if c.rank() == 2 { 9 } else { 8 };
        let first = bcast(c, 0, 0, n).err().map(|e| e.to_string());
        let second = c.barrier().err().map(|e| e.to_string());
        let third = c.barrier().err().map(|e| e.to_string());
        (first, second, third)
    });
    for (r, (first, second, third)) in got.iter().enumerate() {
        let seen = if r == 2 { first } else { second };
        let msg = seen
            .as_deref()
            .unwrap_or_else(|| panic!("rank {r}: {got:?}"));
        // A rank still waiting for another's arrival may see rank 2's poison first.
        assert!(
            msg.contains("calls no longer match") || (r != 2 && msg.contains("aborted")),
            "rank {r}: {msg}"
        );
        assert!(third.is_some(), "rank {r} still usable: {got:?}");
    }
}

/// Streamed payloads (above 8 KiB, within the 16 KiB inline area of these tests): readers
/// that are waiting when the root arrives copy each chunk as it is published; late readers
/// find it all there. Both orders, many times.
#[test]
fn streamed_payloads_reach_early_and_late_readers() {
    for p in [2, 3, 4] {
        let fails = run_ranks(p, config(p), |c| {
            for step in 0..40 {
                let root = step % c.size();
                let late = if step % 2 == 0 {
                    root
                } else {
                    (root + 1) % c.size()
                };
                if c.rank() == late {
                    std::thread::sleep(Duration::from_micros(300));
                }
                let n = [8193, 12_000, 16 << 10][step % 3];
                bcast_forced(c, step, root, n, Some(Algo::Inline)).unwrap();
            }
            c.barrier().unwrap();
        });
        assert_eq!(fails.len(), p);
    }
}
