//! The safe layer under the C ABI: segments, joining, and Alltoall(v) on raw byte
//! buffers, with every engine error sorted into what the PMPI shim must do next.

use std::sync::Arc;

use shmcoll_coll::{AlltoallCall, Blocks, Comm, Config, Error, Forced, RawBuf};
use shmcoll_shm::Segment;

/// What a call tells the shim (the C header's `SHMCOLL_*` codes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    /// Every rank rejected the call before any byte moved (the engine checks the call
    /// identically on every rank): the shim may hand the same call to PMPI on every rank.
    Rejected = 1,
    /// The communicator is unusable (a peer died, a timeout): nothing consistent remains.
    Fatal = 2,
    /// The C caller broke the ABI's contract (null pointer, bad length); nothing was sent.
    BadArgument = 3,
}

/// A failed call: its status and the message for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub status: Status,
    pub msg: String,
}

impl Failure {
    pub fn bad_argument(msg: impl Into<String>) -> Failure {
        Failure {
            status: Status::BadArgument,
            msg: msg.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure {
            status: if e.is_fatal() {
                Status::Fatal
            } else {
                Status::Rejected
            },
            msg: e.to_string(),
        }
    }
}

pub type Outcome<T> = Result<T, Failure>;

/// A failure to set a communicator up is never fatal: there is no communicator yet that
/// could be broken, and the shim passes its calls to PMPI instead.
fn setup(e: Error) -> Failure {
    Failure {
        status: Status::Rejected,
        msg: e.to_string(),
    }
}

/// Heap per rank when SHMCOLL_HEAP_BYTES is not set: an MPI program's buffers are its own
/// private memory, never the shared heap, so the heap only needs to exist.
pub const PMPI_HEAP_BYTES: usize = 64 << 10;

/// The engine's settings from the environment, with the PMPI library's heap default.
pub fn config(nranks: usize) -> Outcome<Config> {
    let mut cfg = Config::from_env(nranks).map_err(setup)?;
    if std::env::var_os("SHMCOLL_HEAP_BYTES").is_none() {
        cfg.heap_bytes = PMPI_HEAP_BYTES;
    }
    Ok(cfg)
}

/// A new segment for `nranks` ranks (one rank creates it; the others open it by name).
pub fn create_segment(nranks: usize) -> Outcome<Arc<Segment>> {
    if nranks == 0 {
        return Err(Failure::bad_argument(
            "a communicator needs at least one rank",
        ));
    }
    Comm::create_segment(nranks, &config(nranks)?).map_err(setup)
}

pub fn open_segment(name: &str) -> Outcome<Arc<Segment>> {
    Comm::open_segment(name).map_err(setup)
}

/// Join as `rank`; every rank of the segment must call this (the handshake waits for all
/// and unlinks the name once everyone mapped it).
pub fn join(seg: Arc<Segment>, rank: usize) -> Outcome<Comm> {
    let cfg = config(seg.layout().sizes.nranks)?;
    let mut comm = Comm::join(seg, rank, cfg).map_err(setup)?;
    // The tuned tables (`shmcoll tune`), as Python communicators bind them; a broken file
    // fails the setup (every rank reads the same file, so all pass through together).
    comm.bind_tuning_file().map_err(setup)?;
    Ok(comm)
}

/// Bytes spanned by the blocks `(displs[j], counts[j])`: the buffer length they need.
/// Empty blocks count too (MPI lets their displacements point anywhere; the engine checks
/// every block against the length and never touches an empty one).
fn extent(counts: &[usize], displs: &[usize]) -> Outcome<usize> {
    counts.iter().zip(displs).try_fold(0usize, |hi, (c, d)| {
        d.checked_add(*c)
            .map(|end| hi.max(end))
            .ok_or_else(|| Failure::bad_argument("a block ends beyond the address space"))
    })
}

/// Alltoall of `bpp` bytes per rank; `send` None is MPI_IN_PLACE. Returns the name of
/// the algorithm that served it.
pub fn alltoall(
    comm: &mut Comm,
    send: Option<usize>,
    recv: usize,
    bpp: usize,
) -> Outcome<&'static str> {
    let len = bpp
        .checked_mul(comm.size())
        .ok_or_else(|| Failure::bad_argument("count times ranks overflows"))?;
    let call = AlltoallCall {
        send: send.map(|addr| RawBuf { addr, len }),
        recv: RawBuf { addr: recv, len },
        send_blocks: Blocks::Uniform(bpp),
        recv_blocks: Blocks::Uniform(bpp),
        forced: Forced::default(),
    };
    Ok(comm.alltoall(Ok(call))?.algo.name())
}

/// The byte counts and displacements of one Alltoallv, one entry per rank each.
#[derive(Clone, Copy, Debug)]
pub struct VectorArgs<'a> {
    pub send_counts: &'a [usize],
    pub send_displs: &'a [usize],
    pub recv_counts: &'a [usize],
    pub recv_displs: &'a [usize],
}

/// Alltoallv in bytes; `send` None is MPI_IN_PLACE (the send blocks are the receive
/// blocks, as MPI says).
pub fn alltoallv(
    comm: &mut Comm,
    send: Option<usize>,
    recv: usize,
    v: VectorArgs<'_>,
) -> Outcome<&'static str> {
    let p = comm.size();
    for (what, a) in [
        ("send counts", v.send_counts),
        ("send displacements", v.send_displs),
        ("receive counts", v.recv_counts),
        ("receive displacements", v.recv_displs),
    ] {
        if a.len() != p {
            return Err(Failure::bad_argument(format!(
                "{what}: {} entries for {p} ranks",
                a.len()
            )));
        }
    }
    let call = AlltoallCall {
        send: match send {
            Some(addr) => Some(RawBuf {
                addr,
                len: extent(v.send_counts, v.send_displs)?,
            }),
            None => None,
        },
        recv: RawBuf {
            addr: recv,
            len: extent(v.recv_counts, v.recv_displs)?,
        },
        send_blocks: Blocks::Vector {
            counts: v.send_counts,
            displs: v.send_displs,
        },
        recv_blocks: Blocks::Vector {
            counts: v.recv_counts,
            displs: v.recv_displs,
        },
        forced: Forced::default(),
    };
    Ok(comm.alltoall(Ok(call))?.algo.name())
}

#[cfg(test)]
mod tests;
