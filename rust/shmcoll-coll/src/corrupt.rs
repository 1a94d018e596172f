//! Corrupted shared state, as a test: a hook (compiled into test builds only) that changes
//! one field of a descriptor right after its owner sealed it and before it publishes it,
//! and tests that drive every algorithm that reaches peers' buffers through it.
//!
//! What they show: whatever field is changed (an offset, a registered length, a block
//! size, the sequence number, a count or displacement of a vector call, a CMA address),
//! every rank of the call fails with an error that breaks the communicator, nothing
//! panics, and no byte outside the buffers the ranks registered changes (a victim array
//! next to them in the shared heap, and the receive buffers when the change is caught
//! before any data moves). A change that keeps the descriptor's check word intact (the
//! hook reseals it) must still be caught by the checks of each peer-provided extent.

use std::sync::Mutex;

use crate::desc::{Arr, Desc};

/// A field of a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Seq,
    SendOff,
    RecvOff,
    SendLen,
    RecvLen,
    SendBpp,
    RecvBpp,
    SendAddr,
    RecvAddr,
    /// Entry 0 of the receive counts (vector calls).
    Count,
    /// Entry 0 of the receive displacements (vector calls).
    Displ,
}

/// One change to make: in segment `segment`, rank `rank`'s next sealed descriptor gets
/// `field` flipped by the bits of `value` (or, when `reseal`, set to `value` and the
/// descriptor resealed).
#[derive(Clone, Debug)]
struct Hook {
    segment: String,
    rank: usize,
    field: Field,
    value: u64,
    reseal: bool,
}

static HOOK: Mutex<Option<Hook>> = Mutex::new(None);

/// Called by `Comm::publish_arrive` once the descriptor is sealed (test builds only).
pub(crate) fn after_seal(segment: &str, rank: usize, d: &Desc) {
    let mut hook = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = hook.take_if(|h| h.segment == segment && h.rank == rank) else {
        return;
    };
    let change = |v: u64| if h.reseal { h.value } else { v ^ h.value };
    let mut c = d.core();
    match h.field {
        Field::Seq => c.seq = change(c.seq),
        Field::SendOff => c.send_off = change(c.send_off),
        Field::RecvOff => c.recv_off = change(c.recv_off),
        Field::SendLen => c.send_len = change(c.send_len),
        Field::RecvLen => c.recv_len = change(c.recv_len),
        Field::SendBpp => c.send_bpp = change(c.send_bpp),
        Field::RecvBpp => c.recv_bpp = change(c.recv_bpp),
        Field::SendAddr => c.send_addr = change(c.send_addr),
        Field::RecvAddr => c.recv_addr = change(c.recv_addr),
        Field::Count => d.set(
            Arr::RecvCounts,
            0,
            change(d.get(Arr::RecvCounts, 0) as u64) as usize,
        ),
        Field::Displ => d.set(
            Arr::RecvDispls,
            0,
            change(d.get(Arr::RecvDispls, 0) as u64) as usize,
        ),
    }
    if h.reseal {
        d.set_sealed(&c);
    } else {
        d.set_core(&c);
    }
}

mod tests {
    use std::time::Duration;

    use super::*;
    use crate::alltoall::{AlltoallCall, Blocks, RawBuf};
    use crate::collectives::CollCall;
    use crate::op::CollOp;
    use crate::registry::{Algo, Forced};
    use crate::{Comm, Config, Error};
    use shmcoll_kernels::reduce::{Dtype, Op};

    /// Bytes per block.
    const N: usize = 4096;
    const SENTINEL: u8 = 0xEE;
    const VICTIM: u8 = 0x5A;

    /// Serialises the tests of this module: the hook is process-wide.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[derive(Clone, Copy, Debug)]
    enum Scenario {
        Alltoall(Algo),
        Alltoallv(Algo),
        Allgather(Algo),
        Allreduce(Algo),
    }

    fn config(p: usize) -> Config {
        let mut cfg = Config::from_env(p).unwrap();
        cfg.heap_bytes = 8 << 20;
        cfg.wait.timeout = Duration::from_secs(10);
        cfg
    }

    /// What one rank saw: the call's result, whether its receive buffer and its victim
    /// array kept their bytes.
    #[derive(Debug)]
    struct Seen {
        result: Result<(), String>,
        fatal: bool,
        recv_untouched: bool,
        /// The receive buffer holds the call's closed-form result.
        recv_right: bool,
        victim_untouched: bool,
    }

    fn run(s: Scenario, p: usize, hook: Option<(usize, Field, u64, bool)>) -> Vec<Seen> {
        let cfg = config(p);
        let seg = Comm::create_segment(p, &cfg).unwrap();
        let name = seg.name().to_string();
        if let Some((rank, field, value, reseal)) = hook {
            *HOOK.lock().unwrap() = Some(Hook {
                segment: name.clone(),
                rank,
                field,
                value,
                reseal,
            });
        }
        let handles: Vec<_> = (0..p)
            .map(|r| {
                let (cfg, name) = (cfg.clone(), name.clone());
                let own = (r == 0).then(|| seg.clone());
                std::thread::spawn(move || {
                    let seg = own.unwrap_or_else(|| Comm::open_segment(&name).unwrap());
                    let mut comm = Comm::join(seg, r, cfg).unwrap();
                    one_rank(&mut comm, s)
                })
            })
            .collect();
        drop(seg);
        let seen = handles.into_iter().map(|h| h.join().unwrap()).collect();
        *HOOK.lock().unwrap() = None;
        seen
    }

    fn one_rank(comm: &mut Comm, s: Scenario) -> Seen {
        let p = comm.size();
        let total = p * N;
        let send = comm.heap_alloc(total).unwrap();
        let recv = comm.heap_alloc(total).unwrap();
        let victim = comm.heap_alloc(total).unwrap();
        // SAFETY: three distinct heap blocks of `total` bytes each, owned by this rank.
        let (sb, rb, vb) = unsafe {
            (
                std::slice::from_raw_parts_mut(send.as_ptr(), total),
                std::slice::from_raw_parts_mut(recv.as_ptr(), total),
                std::slice::from_raw_parts_mut(victim.as_ptr(), total),
            )
        };
        for (k, b) in sb.iter_mut().enumerate() {
            *b = (k % 251) as u8;
        }
        rb.fill(SENTINEL);
        vb.fill(VICTIM);
        let raw = |b: &mut [u8]| RawBuf {
            addr: b.as_mut_ptr() as usize,
            len: b.len(),
        };
        let (sr, rr) = (raw(sb), raw(rb));
        let counts = vec![N; p];
        let displs: Vec<usize> = (0..p).map(|j| j * N).collect();
        let result = match s {
            Scenario::Alltoall(a) | Scenario::Alltoallv(a) => {
                let blocks = if matches!(s, Scenario::Alltoall(_)) {
                    Blocks::Uniform(N)
                } else {
                    Blocks::Vector {
                        counts: &counts,
                        displs: &displs,
                    }
                };
                comm.alltoall(Ok(AlltoallCall {
                    send: Some(sr),
                    recv: rr,
                    send_blocks: blocks,
                    recv_blocks: blocks,
                    forced: Forced {
                        algo: Some(a),
                        ..Forced::default()
                    },
                }))
                .map(|_| ())
            }
            Scenario::Allgather(a) => comm
                .collective(
                    CollOp::Allgather,
                    Ok(CollCall {
                        op: CollOp::Allgather,
                        send: Some(RawBuf { len: N, ..sr }),
                        recv: Some(rr),
                        root: 0,
                        blocks: Some(Blocks::Uniform(N)),
                        reduce: None,
                        forced: Some(a),
                    }),
                )
                .map(|_| ()),
            Scenario::Allreduce(a) => comm
                .collective(
                    CollOp::Allreduce,
                    Ok(CollCall {
                        op: CollOp::Allreduce,
                        send: Some(sr),
                        recv: Some(rr),
                        root: 0,
                        blocks: None,
                        reduce: Some((Dtype::U8, Op::Sum)),
                        forced: Some(a),
                    }),
                )
                .map(|_| ()),
        };
        // Every rank sends the same bytes (k mod 251 at offset k), so each result has a
        // closed form.
        let byte = |k: usize| (k % 251) as u8;
        let me = comm.rank();
        let recv_right = match s {
            Scenario::Alltoall(_) | Scenario::Alltoallv(_) => {
                (0..total).all(|k| rb[k] == byte(me * N + k % N))
            }
            Scenario::Allgather(_) => (0..total).all(|k| rb[k] == byte(k % N)),
            Scenario::Allreduce(_) => (0..total).all(|k| rb[k] == byte(k).wrapping_mul(p as u8)),
        };
        Seen {
            fatal: result.as_ref().is_err_and(Error::is_fatal),
            result: result.map_err(|e| e.to_string()),
            recv_untouched: rb.iter().all(|&b| b == SENTINEL),
            recv_right,
            victim_untouched: vb.iter().all(|&b| b == VICTIM),
        }
    }

    fn scenarios() -> Vec<Scenario> {
        let mut v = vec![
            Scenario::Alltoall(Algo::Pull),
            Scenario::Alltoall(Algo::Push),
            Scenario::Alltoallv(Algo::Pull),
            Scenario::Alltoallv(Algo::Push),
            Scenario::Allgather(Algo::Direct),
            Scenario::Allreduce(Algo::Direct),
        ];
        let word = shmcoll_shm::cma::probe_word() as *const _ as usize;
        if shmcoll_shm::cma::probe(std::process::id(), word) {
            v.extend([
                Scenario::Alltoall(Algo::Cma),
                Scenario::Alltoall(Algo::CmaPush),
                Scenario::Allgather(Algo::Cma),
            ]);
        }
        v
    }

    fn fields(s: Scenario) -> Vec<Field> {
        let mut f = vec![
            Field::Seq,
            Field::SendOff,
            Field::RecvOff,
            Field::SendLen,
            Field::RecvLen,
            Field::SendAddr,
            Field::RecvAddr,
        ];
        match s {
            Scenario::Alltoallv(_) => f.extend([Field::Count, Field::Displ]),
            _ => f.extend([Field::SendBpp, Field::RecvBpp]),
        }
        f
    }

    /// Whether the algorithm of `s` reaches the field's side of a peer's buffers: reading
    /// peers' send buffers (pull, cma, a reduction's contributions) or writing their
    /// receive buffers (push, cma-push, a gather's or reduction's results).
    fn reaches(s: Scenario, field: Field) -> bool {
        let (send, recv) = match s {
            Scenario::Alltoall(a) | Scenario::Alltoallv(a) => (
                matches!(a, Algo::Pull | Algo::Cma),
                matches!(a, Algo::Push | Algo::CmaPush),
            ),
            Scenario::Allgather(_) => (false, true),
            Scenario::Allreduce(_) => (true, true),
        };
        match field {
            Field::SendOff | Field::SendLen | Field::SendAddr => send,
            Field::RecvOff | Field::RecvLen | Field::RecvAddr => recv,
            _ => true,
        }
    }

    #[test]
    fn the_scenarios_run_clean_without_the_hook() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        for s in scenarios() {
            for (r, seen) in run(s, 3, None).iter().enumerate() {
                assert!(seen.result.is_ok(), "{s:?} rank {r}: {seen:?}");
                assert!(
                    seen.recv_right && seen.victim_untouched,
                    "{s:?} rank {r}: {seen:?}"
                );
            }
        }
    }

    /// A field changed after sealing (bits flipped): every rank fails before any data moves.
    #[test]
    fn a_changed_descriptor_fails_every_rank_before_data_moves() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        for s in scenarios() {
            for field in fields(s) {
                for value in [1, 1 << 40, u64::MAX] {
                    let seen = run(s, 3, Some((1, field, value, false)));
                    for (r, x) in seen.iter().enumerate() {
                        let what = format!("{s:?} {field:?}={value:#x} rank {r}: {x:?}");
                        // A count is checked against its peer's own (a disagreement,
                        // not fatal); any other field breaks the communicator.
                        assert!(x.result.is_err(), "{what}");
                        assert!(x.fatal || field == Field::Count, "{what}");
                        assert!(x.recv_untouched && x.victim_untouched, "{what}");
                    }
                }
            }
        }
    }

    /// Hostile extents that keep the check word intact (resealed): the checks of every
    /// peer-provided extent refuse them; every rank fails, nothing outside the registered
    /// buffers changes.
    #[test]
    fn hostile_extents_are_refused_by_the_extent_checks() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let hostile = [
            (Field::RecvOff, u64::MAX - 8),
            (Field::RecvOff, 0),
            (Field::SendOff, 1 << 62 | 1 << 40),
            (Field::RecvLen, 8),
            (Field::SendLen, 8),
            (Field::RecvLen, u64::MAX),
        ];
        for s in scenarios() {
            for &(field, value) in &hostile {
                let seen = run(s, 3, Some((1, field, value, true)));
                // A changed extent that the algorithm reaches fails every rank; one it does
                // not reach leaves the call right on every rank. Either way no byte outside
                // the registered buffers changes.
                let what = format!("{s:?} {field:?}={value:#x} (resealed): {seen:?}");
                if reaches(s, field) {
                    assert!(seen.iter().all(|x| x.result.is_err()), "{what}");
                } else {
                    assert!(
                        seen.iter().all(|x| x.result.is_ok() && x.recv_right),
                        "{what}"
                    );
                }
                assert!(seen.iter().all(|x| x.victim_untouched), "{what}");
            }
        }
    }
}
