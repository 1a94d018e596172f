//! The other collectives on raw bytes, against results computed here.

use super::*;
use crate::engine::{Class, Status};
use crate::testing::on_ranks;

fn run(
    c: &mut Comm,
    op: CollOp,
    send: Option<&[u8]>,
    recv: &mut [u8],
    bytes: usize,
    reduce: Option<(u8, u8)>,
) {
    let call = Collective {
        op,
        send: send.map(|s| s.as_ptr() as usize),
        recv: recv.as_mut_ptr() as usize,
        bytes,
        root: 1,
        reduce,
    };
    collective(c, call).unwrap_or_else(|e| panic!("{}: {e:?}", op.name()));
}

#[test]
fn bcast_allgather_reduce_scatter_allreduce_and_barrier() {
    let out = on_ranks(3, |r, c| {
        let p = c.size();
        // Bcast from rank 1.
        let mut b: Vec<u8> = if r == 1 {
            (0..100).collect()
        } else {
            vec![0; 100]
        };
        run(c, CollOp::Bcast, None, &mut b, 100, None);
        let bcast_ok = b == (0..100).collect::<Vec<u8>>();
        // Allgather of 5 bytes each.
        let mine = [r as u8; 5];
        let mut all = vec![0u8; 5 * p];
        run(c, CollOp::Allgather, Some(&mine), &mut all, 5, None);
        let gather_ok = (0..5 * p).all(|k| all[k] == (k / 5) as u8);
        // Allreduce (sum) of int32: rank r contributes r + k at index k.
        let v: Vec<u8> = (0..8i32)
            .flat_map(|k| (r as i32 + k).to_ne_bytes())
            .collect();
        let mut sum = vec![0u8; v.len()];
        let codes = Some((Dtype::I32.code(), Op::Sum.code()));
        run(c, CollOp::Allreduce, Some(&v), &mut sum, v.len(), codes);
        let want: Vec<u8> = (0..8i32).flat_map(|k| (3 + 3 * k).to_ne_bytes()).collect();
        let reduce_ok = sum == want;
        // Reduce_scatter_block (max) of int32, one element per rank.
        let v: Vec<u8> = (0..p as i32)
            .flat_map(|k| (10 * r as i32 + k).to_ne_bytes())
            .collect();
        let mut mine = [0u8; 4];
        let codes = Some((Dtype::I32.code(), Op::Max.code()));
        run(c, CollOp::ReduceScatterBlock, Some(&v), &mut mine, 4, codes);
        let scatter_ok = i32::from_ne_bytes(mine) == 20 + r as i32;
        barrier(c).expect("barrier");
        [bcast_ok, gather_ok, reduce_ok, scatter_ok]
    });
    for (r, oks) in out.iter().enumerate() {
        assert_eq!(
            oks, &[true; 4],
            "rank {r}: bcast, allgather, allreduce, reduce_scatter_block"
        );
    }
}

#[test]
fn reductions_need_known_codes_and_only_reductions_take_them() {
    let out = on_ranks(1, |_, c| {
        let mut buf = [0u8; 8];
        let addr = buf.as_mut_ptr() as usize;
        let call = |op, reduce| Collective {
            op,
            send: None,
            recv: addr,
            bytes: 8,
            root: 0,
            reduce,
        };
        [
            collective(c, call(CollOp::Allreduce, Some((99, 0)))),
            collective(c, call(CollOp::Allreduce, Some((0, 99)))),
            collective(c, call(CollOp::Allreduce, None)),
            collective(c, call(CollOp::Bcast, Some((0, 0)))),
            collective(c, call(CollOp::Gather, None)),
        ]
        .map(|r| r.map_err(|f| (f.status, f.class)))
    });
    let rejected = |class| Err((Status::Rejected, class));
    assert_eq!(
        out[0],
        [
            rejected(Class::Datatype),
            rejected(Class::Operator),
            rejected(Class::Argument),
            rejected(Class::Argument),
            rejected(Class::Argument),
        ]
    );
}

/// Per rank: the call's outcome, whether its buffer kept its contents, whether a barrier
/// after it worked, and whether a second one did.
type RankOutcome = (Result<(), (Status, Class)>, bool, bool, bool);

/// A Bcast of `bytes` from rank 2 on 3 ranks, where rank `bad` rejects its root instead:
/// per rank, its outcome, whether its buffer kept its contents, and whether two barriers
/// after it work.
fn bcast_with_a_bad_root(bad: usize, bytes: usize) -> Vec<RankOutcome> {
    on_ranks(3, move |r, c| {
        let mut buf = vec![if r == 2 { 9u8 } else { 7u8 }; bytes];
        let call = Collective {
            op: CollOp::Bcast,
            send: None,
            recv: buf.as_mut_ptr() as usize,
            bytes,
            root: 2,
            reduce: None,
        };
        let first = if r == bad {
            Err(crate::engine::reject(
                c,
                crate::engine::Rejected::Collective(CollOp::Bcast),
                Class::Root,
                "root 9 is not a rank",
            ))
        } else {
            collective(c, call).map(|_| ())
        };
        let kept = buf.iter().all(|&b| b == if r == 2 { 9 } else { 7 });
        let next = barrier(c).is_ok();
        (
            first.map_err(|f| (f.status, f.class)),
            kept,
            next,
            barrier(c).is_ok(),
        )
    })
}

#[test]
fn a_rank_with_a_bad_root_fails_the_call_on_every_rank() {
    // The rank the others name as root rejects: nobody can leave early, every rank fails
    // with the root class and nothing moves.
    for (r, out) in bcast_with_a_bad_root(2, 64).into_iter().enumerate() {
        assert_eq!(
            out,
            (Err((Status::Rejected, Class::Root)), true, true, true),
            "rank {r}"
        );
    }
    // A non-root rejects a Bcast too large for the root to leave once it published.
    for (r, out) in bcast_with_a_bad_root(0, 4 << 20).into_iter().enumerate() {
        assert_eq!(
            out,
            (Err((Status::Rejected, Class::Root)), true, true, true),
            "rank {r}"
        );
    }
}

#[test]
fn a_non_root_rejecting_a_small_bcast_fails_every_rank_by_the_next_call() {
    // The root of a small Bcast leaves as soon as it published (shmcoll-coll's one_sided.rs),
    // before it could learn of a rejection: the rejecting rank fails and keeps its buffer,
    // the others complete the Bcast and fail their next call (the notice of the rejection),
    // and the communicator stays usable after that.
    let out = bcast_with_a_bad_root(0, 64);
    assert_eq!(
        out[0],
        (Err((Status::Rejected, Class::Root)), true, false, true)
    );
    assert_eq!(out[1], (Ok(()), false, false, true));
    assert_eq!(out[2], (Ok(()), true, false, true));
}

#[test]
fn the_engine_reduces_what_the_kernels_define() {
    assert!(reduces(9, 0)); // float64 sum
    assert!(!reduces(9, 4)); // float64 band
    assert!(!reduces(11, 2)); // complex128 min
    assert!(!reduces(-1, 0) && !reduces(0, 99));
}
