//! The other collectives on raw bytes, against results computed here.

use super::*;
use crate::engine::Status;
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
            collective(c, call(CollOp::Allreduce, None)),
            collective(c, call(CollOp::Bcast, Some((0, 0)))),
            collective(c, call(CollOp::Gather, None)),
        ]
        .map(|r| r.map_err(|f| f.status))
    });
    assert_eq!(out[0], [Err(Status::BadArgument); 4]);
}
