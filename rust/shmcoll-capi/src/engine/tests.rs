//! Ranks as threads of one process: each joins the same segment, as MPI processes would.

use super::*;
use crate::testing::on_ranks;

fn block(from: usize, to: usize, i: usize) -> u8 {
    (from * 31 + to * 7 + i) as u8
}

#[test]
fn alltoall_moves_every_block_and_names_its_algorithm() {
    for bpp in [0usize, 3, 200, 70_000] {
        let out = on_ranks(3, move |r, c| {
            let p = c.size();
            let send: Vec<u8> = (0..p * bpp)
                .map(|k| block(r, k / bpp.max(1), k % bpp.max(1)))
                .collect();
            let mut recv = vec![0xAAu8; p * bpp];
            let algo = alltoall(
                c,
                Some(send.as_ptr() as usize),
                recv.as_mut_ptr() as usize,
                bpp,
            )
            .expect("alltoall");
            let want: Vec<u8> = (0..p * bpp)
                .map(|k| block(k / bpp.max(1), r, k % bpp.max(1)))
                .collect();
            (recv == want, algo)
        });
        for (ok, algo) in out {
            assert!(ok, "bpp {bpp}: wrong data ({algo})");
            assert!(!algo.is_empty());
        }
    }
}

#[test]
fn in_place_alltoall_takes_the_data_from_the_receive_buffer() {
    let bpp = 5000;
    let out = on_ranks(2, move |r, c| {
        let mut buf: Vec<u8> = (0..2 * bpp).map(|k| block(r, k / bpp, k % bpp)).collect();
        alltoall(c, None, buf.as_mut_ptr() as usize, bpp).expect("in place");
        buf == (0..2 * bpp)
            .map(|k| block(k / bpp, r, k % bpp))
            .collect::<Vec<u8>>()
    });
    assert!(out.into_iter().all(|ok| ok));
}

#[test]
fn ragged_alltoallv_with_zero_counts_lands_at_the_displacements() {
    // Rank i sends (i + 2 * j) % 4 * 10 bytes to rank j; receive blocks in reverse order
    // with a gap, so displacements really matter.
    let count = |i: usize, j: usize| (i + 2 * j) % 4 * 10;
    let out = on_ranks(3, move |r, c| {
        let p = c.size();
        let sc: Vec<usize> = (0..p).map(|j| count(r, j)).collect();
        let sd: Vec<usize> = (0..p).map(|j| sc[..j].iter().sum()).collect();
        let rc: Vec<usize> = (0..p).map(|j| count(j, r)).collect();
        let mut rd = vec![0; p];
        let mut at = 0;
        for j in (0..p).rev() {
            rd[j] = at;
            at += rc[j] + 3;
        }
        let send: Vec<u8> = (0..p)
            .flat_map(|j| (0..sc[j]).map(move |i| block(r, j, i)))
            .collect();
        let mut recv = vec![0u8; at];
        let v = VectorArgs {
            send_counts: &sc,
            send_displs: &sd,
            recv_counts: &rc,
            recv_displs: &rd,
        };
        alltoallv(
            c,
            Some(send.as_ptr() as usize),
            recv.as_mut_ptr() as usize,
            v,
        )
        .expect("v");
        (0..p).all(|j| (0..rc[j]).all(|i| recv[rd[j] + i] == block(j, r, i)))
    });
    assert!(out.into_iter().all(|ok| ok));
}

#[test]
fn disagreeing_sizes_are_rejected_on_every_rank_and_the_comm_stays_usable() {
    let out = on_ranks(2, |r, c| {
        let bpp = 8 + r; // ranks disagree
        let send = vec![1u8; 2 * bpp];
        let mut recv = vec![0u8; 2 * bpp];
        let first = alltoall(
            c,
            Some(send.as_ptr() as usize),
            recv.as_mut_ptr() as usize,
            bpp,
        );
        let untouched = recv.iter().all(|&b| b == 0);
        let again = alltoall(
            c,
            Some(send.as_ptr() as usize),
            recv.as_mut_ptr() as usize,
            8,
        );
        (
            first.map_err(|f| (f.status, f.class)),
            untouched,
            again.is_ok(),
        )
    });
    for (first, untouched, again) in out {
        assert_eq!(first, Err((Status::Rejected, Class::Mismatch)));
        assert!(untouched, "a rejected call wrote into the receive buffer");
        assert!(again, "the communicator should survive a rejected call");
    }
}

#[test]
fn disagreeing_alltoallv_counts_are_a_mismatch_on_every_rank() {
    let out = on_ranks(3, |r, c| {
        // Rank 2 expects 5 bytes from each rank where the others send it 4.
        let (sc, rc) = if r == 2 {
            ([4, 4, 4], [5, 5, 5])
        } else {
            ([4, 4, 4], [4, 4, 4])
        };
        let displs = [0, 8, 16];
        let send = [1u8; 24];
        let mut recv = vec![0u8; 24];
        let v = VectorArgs {
            send_counts: &sc,
            send_displs: &displs,
            recv_counts: &rc,
            recv_displs: &displs,
        };
        let r = alltoallv(
            c,
            Some(send.as_ptr() as usize),
            recv.as_mut_ptr() as usize,
            v,
        );
        (
            r.map_err(|f| (f.status, f.class)),
            recv.iter().all(|&b| b == 0),
        )
    });
    for (r, untouched) in out {
        assert_eq!(r, Err((Status::Rejected, Class::Mismatch)));
        assert!(untouched);
    }
}

#[test]
fn one_rank_rejecting_fails_the_call_on_every_rank_with_its_class() {
    // Rank 1 rejects its arguments; the others make a correct call and must fail it too,
    // at once (a peer left waiting would hang the test until the engine's deadline), with
    // the rejecting rank's class, and nothing written.
    let out = on_ranks(3, |r, c| {
        let send = [1u8; 3 * 8];
        let mut recv = vec![0u8; 3 * 8];
        let first = if r == 1 {
            Err(reject(
                c,
                Rejected::Alltoall,
                Class::Count,
                "count -1 is negative",
            ))
        } else {
            alltoall(
                c,
                Some(send.as_ptr() as usize),
                recv.as_mut_ptr() as usize,
                8,
            )
        };
        let untouched = recv.iter().all(|&b| b == 0);
        let again = alltoall(
            c,
            Some(send.as_ptr() as usize),
            recv.as_mut_ptr() as usize,
            8,
        );
        (
            first.map_err(|f| (f.status, f.class, f.msg)),
            untouched,
            again.is_ok(),
        )
    });
    for (r, (first, untouched, again)) in out.into_iter().enumerate() {
        let (status, class, msg) = first.expect_err("every rank fails the call");
        assert_eq!(
            (status, class),
            (Status::Rejected, Class::Count),
            "rank {r}: {msg}"
        );
        assert!(msg.contains("count -1 is negative"), "rank {r}: {msg}");
        assert!(
            untouched,
            "rank {r}: a rejected call wrote into the receive buffer"
        );
        assert!(
            again,
            "rank {r}: the communicator should survive a rejection"
        );
    }
}

#[test]
fn array_lengths_and_overflow_are_rejected_through_the_engine() {
    // Only rank 0 makes the mistake: its peer must fail the same call rather than wait.
    let out = on_ranks(2, |r, c| {
        let mut recv = [0u8; 16];
        let addr = recv.as_mut_ptr() as usize;
        let good = VectorArgs {
            send_counts: &[8, 8],
            send_displs: &[0, 8],
            recv_counts: &[8, 8],
            recv_displs: &[0, 8],
        };
        let short = VectorArgs {
            send_counts: &[1, 2, 3],
            ..good
        };
        let a = alltoallv(c, None, addr, if r == 0 { short } else { good });
        let b = alltoall(c, None, addr, if r == 0 { usize::MAX } else { 8 });
        [a, b].map(|x| x.map_err(|f| (f.status, f.class)))
    });
    assert_eq!(out[0][0], Err((Status::Rejected, Class::Argument)));
    assert_eq!(out[0][1], Err((Status::Rejected, Class::Count)));
    // The peer sees rank 0's rejection, with its class.
    assert_eq!(out[1], out[0]);
}

#[test]
fn extent_covers_the_furthest_block() {
    assert_eq!(extent(&[4, 0, 2], &[10, 100, 0]).ok(), Some(100));
    assert_eq!(extent(&[4, 2], &[10, 0]).ok(), Some(14));
    assert_eq!(extent(&[0, 0], &[5, 9]).ok(), Some(9));
    assert!(extent(&[2], &[usize::MAX]).is_err());
}

/// An arena as the PMPI library's allocator makes one: a memfd, mapped shared.
struct TestArena {
    fd: std::os::fd::OwnedFd,
    map: memmap2::MmapRaw,
}

fn test_arena(len: usize) -> TestArena {
    use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
    let fd = memfd_create("shmcoll-test-arena", MemfdFlags::CLOEXEC).expect("memfd");
    ftruncate(&fd, len as u64).expect("ftruncate");
    let file = std::fs::File::from(fd.try_clone().expect("dup"));
    let map = memmap2::MmapOptions::new()
        .len(len)
        .map_raw(&file)
        .expect("mmap");
    TestArena { fd, map }
}

#[test]
fn buffers_in_attached_arenas_are_reached_directly() {
    use shmcoll_coll::arenas::ArenaRef;
    use std::os::fd::AsRawFd;
    use std::sync::{Arc, Barrier, Mutex};
    let p = 3;
    let bpp = 70_000;
    let len = 1 << 20;
    let refs = Arc::new(Mutex::new(vec![None; p]));
    let barrier = Arc::new(Barrier::new(p));
    let out = on_ranks(p, move |r, c| {
        let arena = test_arena(len);
        let base = arena.map.as_mut_ptr() as usize;
        refs.lock().unwrap()[r] = Some(ArenaRef {
            pid: std::process::id(),
            fd: arena.fd.as_raw_fd(),
            len,
        });
        barrier.wait();
        let peers = refs.lock().unwrap().clone();
        c.attach_arenas(Some((base, len)), &peers).expect("attach");
        barrier.wait();
        let (send, recv) = (base, base + len / 2);
        let run = |c: &mut Comm, salt: usize| {
            for k in 0..p * bpp {
                // SAFETY: k < p * bpp <= len / 2: inside the first half of the arena.
                unsafe { *(send as *mut u8).add(k) = block(r, k / bpp, k % bpp + salt) };
            }
            let algo = alltoall(c, Some(send), recv, bpp).expect("alltoall");
            // SAFETY: the second half of the arena holds p * bpp bytes, written by the call.
            let got = unsafe { std::slice::from_raw_parts(recv as *const u8, p * bpp) };
            let ok = (0..p * bpp).all(|k| got[k] == block(k / bpp, r, k % bpp + salt));
            (ok, algo)
        };
        // Attached but not enabled: the buffers are private as far as the engine knows.
        let before = run(c, 1);
        c.enable_arenas();
        barrier.wait();
        let after = run(c, 2);
        // The other collectives through arena buffers too: a Bcast large enough to split
        // its copies over all ranks (each reads the root's buffer through its descriptor,
        // the root included) and an Allgather (pushed into every receive buffer).
        let n = 200_000;
        let b = base + len / 4;
        for k in 0..n {
            // SAFETY: len / 4 + n < len / 2: inside the arena, clear of `recv`.
            unsafe { *(b as *mut u8).add(k) = if r == 1 { (k % 251) as u8 } else { 0 } };
        }
        let bcast = crate::collectives::Collective {
            op: shmcoll_coll::CollOp::Bcast,
            send: None,
            recv: b,
            bytes: n,
            root: 1,
            reduce: None,
        };
        let bc_algo = crate::collectives::collective(c, bcast).expect("bcast");
        // SAFETY: n bytes at b, written by the call.
        let bc = unsafe { std::slice::from_raw_parts(b as *const u8, n) };
        let bcast_ok = (0..n).all(|k| bc[k] == (k % 251) as u8);
        let gather = crate::collectives::Collective {
            op: shmcoll_coll::CollOp::Allgather,
            send: Some(send),
            recv,
            bytes: bpp,
            root: 0,
            reduce: None,
        };
        crate::collectives::collective(c, gather).expect("allgather");
        // SAFETY: p * bpp bytes at recv, written by the call.
        let g = unsafe { std::slice::from_raw_parts(recv as *const u8, p * bpp) };
        // Rank j contributed the first bpp bytes of its send buffer, as `run(c, 2)` filled it.
        let gather_ok = (0..p * bpp).all(|k| g[k] == block(k / bpp, 0, k % bpp + 2));
        assert!(
            bcast_ok && gather_ok,
            "rank {r}: bcast {bcast_ok} ({bc_algo}), allgather {gather_ok}"
        );
        (before, after)
    });
    for ((ok1, algo1), (ok2, algo2)) in out {
        assert!(ok1 && ok2, "wrong data ({algo1}, {algo2})");
        assert_eq!(algo1, "cma-push", "private buffers go through CMA");
        assert_eq!(
            algo2, "push",
            "arena buffers are written straight into the peer's buffer"
        );
    }
}

#[test]
fn private_buffers_follow_the_crossover_the_creator_published() {
    // The PMPI library creates and joins through Comm, so its communicators select with
    // the value the creating rank published: SHMCOLL_CMA_FROM there, else its probe.
    let expected = shmcoll_coll::cma_from::forced()
        .expect("SHMCOLL_CMA_FROM")
        .unwrap_or_else(|| shmcoll_coll::cma_from::node().bytes);
    let m = shmcoll_kernels::hw::machine();
    // The model's own start of CMA for private blocks at 2 ranks (select::model_table).
    let small = (m.l1d_bytes.max(6 << 10) / 6 / 2).max((1 << 10) / 2 + 1);
    let out = on_ranks(2, move |r, c| {
        let run = |c: &mut Comm, bpp: usize| {
            let send = vec![r as u8; 2 * bpp];
            let mut recv = vec![0u8; 2 * bpp];
            let algo = alltoall(
                c,
                Some(send.as_ptr() as usize),
                recv.as_mut_ptr() as usize,
                bpp,
            )
            .expect("alltoall");
            assert_eq!(recv[..bpp], vec![0u8; bpp][..], "{algo}");
            assert_eq!(recv[bpp..], vec![1u8; bpp][..], "{algo}");
            algo
        };
        let below = (expected > small + 1).then(|| run(c, expected - 1));
        let from = run(c, expected.max(small + 1));
        (c.cma_from(), below, from)
    });
    for (rank, (cma_from, below, from)) in out.into_iter().enumerate() {
        assert_eq!(cma_from, expected, "rank {rank}");
        assert!(
            below.is_none_or(|a| a == "staging"),
            "rank {rank}: {below:?}"
        );
        assert_eq!(from, "cma-push", "rank {rank}");
    }
}
