//! The exchanges under mpi4py's object collectives (`bcast`, `gather`, `allgather`,
//! `scatter`, `alltoall` and the reductions built on them; python/shmcoll/objects.py
//! pickles and unpickles).
//!
//! mpi4py sends a call's byte counts in one collective and the pickles in a second. Here
//! each pickle travels in a fixed slot of `SLOT` bytes behind a 16-byte header (its length
//! and `aux`), so an object whose pickle fits (a number, a short list or dict) costs one
//! collective. Longer pickles follow in a vector collective, which every rank knows from
//! the headers whether to make: for gather and allgather every rank sees every header, and
//! scatter's and alltoall's headers carry a flag meaning "some pickle of this call is long".
//! Doing this here rather than in Python saves the per-call glue, which costs more than the
//! exchange itself for a small object.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView, PySlice};

use shmcoll_coll::{AlltoallCall, Blocks, CollCall, CollOp, Comm, Error, Forced, RawBuf};

use crate::errors::IntoPyResult;
use crate::gil::run_releasing_on_block;

/// Bytes per rank of the first collective: the header and up to `ROOM` bytes of pickle.
pub const SLOT: usize = 256;
const HEAD: usize = 16;
pub const ROOM: usize = SLOT - HEAD;
/// Header flag of scatter and alltoall: some pickle of this call is longer than ROOM.
const LONG: u64 = 1;
/// The gathering calls, by code: a header's `aux` is `code << 4 | root << 8`, so that
/// ranks that make different ones, or name different roots, all raise MismatchError.
const KINDS: [&str; 6] = [
    "allgather",
    "gather",
    "allreduce",
    "reduce",
    "scan",
    "exscan",
];

fn call_aux(kind: &str, root: usize) -> u64 {
    let code = KINDS.iter().position(|k| *k == kind).unwrap_or(KINDS.len());
    (code as u64) << 4 | (root as u64) << 8
}

fn put(slot: &mut [u8], data: &[u8], aux: u64) {
    slot[..8].copy_from_slice(&(data.len() as u64).to_le_bytes());
    slot[8..HEAD].copy_from_slice(&aux.to_le_bytes());
    if data.len() <= ROOM {
        slot[HEAD..HEAD + data.len()].copy_from_slice(data);
    }
}

/// (pickle length, aux) of a slot.
fn head(slot: &[u8]) -> (usize, u64) {
    let word = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().expect("8 bytes"));
    (word(0) as usize, word(8))
}

fn long(len: usize) -> usize {
    if len > ROOM {
        len
    } else {
        0
    }
}

fn prefix(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

/// The long pickles of `items`, back to back (the send buffer of the vector collective).
fn joined_long(items: &[&[u8]]) -> Vec<u8> {
    items
        .iter()
        .filter(|d| d.len() > ROOM)
        .copied()
        .collect::<Vec<_>>()
        .concat()
}

fn raw(b: &[u8]) -> RawBuf {
    RawBuf {
        addr: b.as_ptr() as usize,
        len: b.len(),
    }
}

/// One collective on Rust-owned memory (`recv` is written by the engine while borrowed).
fn coll(
    py: Python<'_>,
    comm: &mut Comm,
    op: CollOp,
    send: Option<&[u8]>,
    recv: Option<&mut [u8]>,
    root: usize,
    blocks: Option<Blocks<'_>>,
) -> PyResult<()> {
    coll_raw(py, comm, op, send, recv.map(|r| raw(r)), root, blocks)
}

/// `coll` with the receive buffer as an address: the root of a Bcast, whose buffer the
/// engine only reads, passes its immutable pickle.
fn coll_raw(
    py: Python<'_>,
    comm: &mut Comm,
    op: CollOp,
    send: Option<&[u8]>,
    recv: Option<RawBuf>,
    root: usize,
    blocks: Option<Blocks<'_>>,
) -> PyResult<()> {
    let call = CollCall {
        op,
        send: send.map(raw),
        recv,
        root,
        blocks,
        reduce: None,
        forced: None,
    };
    run_releasing_on_block(py, || comm.collective(op, Ok(call)))
        .map(|_| ())
        .py_err(py)
}

/// The items: memoryviews of the one bytes object the vector collective filled for long
/// pickles (unpickling reads them where they are), copies of the slot for short ones, and
/// None for a long pickle that was not moved (`keep_own`).
fn results<'py>(
    py: Python<'py>,
    slots: &[u8],
    heads: &[(usize, u64)],
    counts: &[usize],
    displs: &[usize],
    big: Option<&Bound<'py, PyBytes>>,
) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
    let view = big.map(|b| PyMemoryView::from(b.as_any())).transpose()?;
    (0..heads.len())
        .map(|j| match (counts[j], &view) {
            (0, _) if heads[j].0 > ROOM => Ok(None),
            (0, _) | (_, None) => Ok(Some(bytes_of(py, slots, j, heads[j].0).into_any())),
            (n, Some(v)) => {
                let at = displs[j] as isize;
                v.get_item(PySlice::new(py, at, at + n as isize, 1))
                    .map(Some)
            }
        })
        .collect()
}

fn bytes_of<'py>(py: Python<'py>, slots: &[u8], j: usize, len: usize) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &slots[j * SLOT + HEAD..j * SLOT + HEAD + len])
}

/// Every rank's pickle (gather: at the root, an empty list elsewhere), and whether some
/// pickle was long. With `long_root`, long pickles go to that rank alone, as for a gather
/// (allreduce then combines there and broadcasts the result, rather than moving every
/// large object to every rank). With `keep_own`, the rank that gets the long pickles does
/// not get its own back (its item is None: the reductions use the object itself, as
/// mpi4py's do); that rank may then pass empty `data` for an object it knows is long and
/// need not pickle. `kind` (the Python call) and `root` must be the same on every rank,
/// which every rank checks.
pub fn gather<'py>(
    py: Python<'py>,
    comm: &mut Comm,
    data: &[u8],
    kind: &str,
    root: Option<usize>,
    long_root: Option<usize>,
    keep_own: bool,
) -> PyResult<(Vec<Option<Bound<'py, PyAny>>>, bool)> {
    let (p, me) = (comm.size(), comm.rank());
    let mut mine = [0u8; SLOT];
    put(&mut mine, data, call_aux(kind, root.unwrap_or(0)));
    if data.is_empty() && keep_own && long_root == Some(me) {
        // The caller kept its large object unpickled: declare it long (it stays here).
        mine[..8].copy_from_slice(&(ROOM as u64 + 1).to_le_bytes());
    }
    let mut slots = vec![0u8; SLOT * p];
    let blocks = Some(Blocks::Uniform(SLOT));
    coll(
        py,
        comm,
        CollOp::Allgather,
        Some(&mine),
        Some(&mut slots),
        0,
        blocks,
    )?;
    let heads: Vec<(usize, u64)> = (0..p).map(|j| head(&slots[j * SLOT..])).collect();
    if let Some(j) = heads.iter().position(|h| h.1 != heads[0].1) {
        let name = |a: u64| {
            let kind = KINDS.get((a >> 4 & 15) as usize).unwrap_or(&"?");
            format!("{kind}(root={})", a >> 8)
        };
        let msg = format!(
            "the ranks made different object collectives: rank 0 {}, rank {j} {}",
            name(heads[0].1),
            name(heads[j].1)
        );
        return Err(Error::Mismatch(msg)).py_err(py);
    }
    let mut counts: Vec<usize> = heads.iter().map(|h| long(h.0)).collect();
    let any_long = counts.iter().any(|&c| c > 0);
    let root = if any_long { root.or(long_root) } else { root };
    if let (true, true, Some(r)) = (any_long, keep_own, root) {
        counts[r] = 0; // the same on every rank, as the engine checks
    }
    let displs = prefix(&counts);
    let mut big = None;
    if any_long {
        let send = if counts[me] > 0 { data } else { &[] };
        let blocks = Some(Blocks::Vector {
            counts: &counts,
            displs: &displs,
        });
        match root {
            None => {
                big = Some(PyBytes::new_with(py, counts.iter().sum(), |buf| {
                    coll(
                        py,
                        comm,
                        CollOp::Allgatherv,
                        Some(send),
                        Some(buf),
                        0,
                        blocks,
                    )
                })?);
            }
            Some(r) if r == me => {
                big = Some(PyBytes::new_with(py, counts.iter().sum(), |buf| {
                    coll(py, comm, CollOp::Gatherv, Some(send), Some(buf), r, blocks)
                })?);
            }
            Some(r) => coll(py, comm, CollOp::Gatherv, Some(send), None, r, blocks)?,
        }
    }
    if root.is_some_and(|r| r != me) {
        return Ok((Vec::new(), any_long));
    }
    Ok((
        results(py, &slots, &heads, &counts, &displs, big.as_ref())?,
        any_long,
    ))
}

/// The root's pickle on every rank (None on the root, which has it), with the root's
/// `aux` (bcast's flag: out-of-band buffers follow, their sizes leading the pickle).
pub fn bcast<'py>(
    py: Python<'py>,
    comm: &mut Comm,
    data: Option<&[u8]>,
    root: usize,
    aux: u64,
) -> PyResult<(Option<Bound<'py, PyBytes>>, u64)> {
    let mut slot = [0u8; SLOT];
    if let Some(d) = data {
        put(&mut slot, d, aux);
    }
    coll(py, comm, CollOp::Bcast, None, Some(&mut slot), root, None)?;
    if let Some(d) = data {
        if d.len() > ROOM {
            coll_raw(py, comm, CollOp::Bcast, None, Some(raw(d)), root, None)?;
        }
        return Ok((None, aux));
    }
    let (len, aux) = head(&slot);
    if len <= ROOM {
        return Ok((Some(bytes_of(py, &slot, 0, len)), aux));
    }
    let big = PyBytes::new_with(py, len, |buf| {
        coll(py, comm, CollOp::Bcast, None, Some(buf), root, None)
    })?;
    Ok((Some(big), aux))
}

/// This rank's item of the root's `items` (one pickle per rank).
pub fn scatter<'py>(
    py: Python<'py>,
    comm: &mut Comm,
    items: Option<Vec<&[u8]>>,
    root: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let p = comm.size();
    let mut mine = [0u8; SLOT];
    let mut slots = Vec::new();
    if let Some(items) = &items {
        let flag = if items.iter().any(|d| d.len() > ROOM) {
            LONG
        } else {
            0
        };
        slots = vec![0u8; SLOT * p];
        for (j, d) in items.iter().enumerate() {
            put(&mut slots[j * SLOT..(j + 1) * SLOT], d, flag);
        }
    }
    let send = items.as_ref().map(|_| slots.as_slice());
    let blocks = Some(Blocks::Uniform(SLOT));
    coll(
        py,
        comm,
        CollOp::Scatter,
        send,
        Some(&mut mine),
        root,
        blocks,
    )?;
    let (len, aux) = head(&mine);
    if aux & LONG == 0 {
        return Ok(bytes_of(py, &mine, 0, len));
    }
    // Some item is long: every rank takes part in the Scatterv of the long ones.
    let (counts, joined): (Vec<usize>, Vec<u8>) = match &items {
        Some(items) => (
            items.iter().map(|d| long(d.len())).collect(),
            joined_long(items),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let displs = prefix(&counts);
    let blocks = items.as_ref().map(|_| Blocks::Vector {
        counts: &counts,
        displs: &displs,
    });
    let send = items.as_ref().map(|_| joined.as_slice());
    if len <= ROOM {
        coll(
            py,
            comm,
            CollOp::Scatterv,
            send,
            Some(&mut []),
            root,
            blocks,
        )?;
        return Ok(bytes_of(py, &mine, 0, len));
    }
    PyBytes::new_with(py, len, |buf| {
        coll(py, comm, CollOp::Scatterv, send, Some(buf), root, blocks)
    })
}

/// One Alltoall(v) on Rust-owned memory.
fn exchange(
    py: Python<'_>,
    comm: &mut Comm,
    send: &[u8],
    recv: &mut [u8],
    send_blocks: Blocks<'_>,
    recv_blocks: Blocks<'_>,
) -> PyResult<()> {
    let call = AlltoallCall {
        send: Some(raw(send)),
        recv: raw(recv),
        send_blocks,
        recv_blocks,
        forced: Forced::default(),
    };
    run_releasing_on_block(py, || comm.alltoall(Ok(call)))
        .map(|_| ())
        .py_err(py)
}

/// Item j of every rank's `items` goes to rank j: this rank's items from every rank.
pub fn alltoall<'py>(
    py: Python<'py>,
    comm: &mut Comm,
    items: Vec<&[u8]>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let p = comm.size();
    if items.len() != p {
        // The caller checks; this keeps the peers from waiting if it did not.
        let msg = format!("expected {p} items, got {}", items.len());
        let _ = comm.alltoall(Err(Error::InvalidArgument(msg.clone())));
        return Err(Error::InvalidArgument(msg)).py_err(py);
    }
    let flag = if items.iter().any(|d| d.len() > ROOM) {
        LONG
    } else {
        0
    };
    let mut out = vec![0u8; SLOT * p];
    for (j, d) in items.iter().enumerate() {
        put(&mut out[j * SLOT..(j + 1) * SLOT], d, flag);
    }
    let mut slots = vec![0u8; SLOT * p];
    let uniform = Blocks::Uniform(SLOT);
    exchange(py, comm, &out, &mut slots, uniform, uniform)?;
    let heads: Vec<(usize, u64)> = (0..p).map(|j| head(&slots[j * SLOT..])).collect();
    let counts: Vec<usize> = heads.iter().map(|h| long(h.0)).collect();
    let displs = prefix(&counts);
    let mut big = None;
    // Every sender's flag reaches every rank, so all ranks agree on this.
    if heads.iter().any(|h| h.1 & LONG != 0) {
        let scounts: Vec<usize> = items.iter().map(|d| long(d.len())).collect();
        let sdispls = prefix(&scounts);
        let joined = joined_long(&items);
        let sb = Blocks::Vector {
            counts: &scounts,
            displs: &sdispls,
        };
        let rb = Blocks::Vector {
            counts: &counts,
            displs: &displs,
        };
        big = Some(PyBytes::new_with(py, counts.iter().sum(), |buf| {
            exchange(py, comm, &joined, buf, sb, rb)
        })?);
    }
    let out = results(py, &slots, &heads, &counts, &displs, big.as_ref())?;
    Ok(out.into_iter().flatten().collect()) // every pickle was moved: no None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_their_header_and_short_payload() {
        let mut s = [0u8; SLOT];
        put(&mut s, b"abc", 0x123);
        assert_eq!(head(&s), (3, 0x123));
        assert_eq!(&s[HEAD..HEAD + 3], b"abc");
        let long_one = vec![7u8; ROOM + 1];
        let mut t = [0u8; SLOT];
        put(&mut t, &long_one, LONG);
        assert_eq!(head(&t), (ROOM + 1, LONG));
        assert!(
            t[HEAD..].iter().all(|&b| b == 0),
            "a long pickle is not in its slot"
        );
    }

    #[test]
    fn only_pickles_beyond_the_slot_are_long() {
        assert_eq!(long(ROOM), 0);
        assert_eq!(long(ROOM + 1), ROOM + 1);
        assert_eq!(prefix(&[0, 300, 0, 500]), vec![0, 0, 300, 300]);
    }
}
