//! The safe layer under the C ABI: segments, joining, and Alltoall(v) on raw byte
//! buffers, with every engine error sorted into what the PMPI shim must do next.
//!
//! Once a communicator exists, every failure of a call goes through the engine's call, so
//! that the peers fail in the same call instead of waiting for this rank until the
//! deadline: arguments this layer cannot turn into a call become the call's rejection
//! (`Comm::alltoall(Err(..))`), which the engine publishes to every peer.
#![deny(clippy::arithmetic_side_effects)]

use std::sync::Arc;

use shmcoll_coll::pool::Offer;
use shmcoll_coll::{AlltoallCall, Blocks, Comm, Config, Error, ErrorKind, Forced, RawBuf};
use shmcoll_shm::Segment;

/// What a call tells the shim (the C header's `SHMCOLL_*` codes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    /// The call failed on every rank before any byte moved: a rank rejected its own
    /// arguments (every peer learns it in the same call), or the engine found the ranks'
    /// calls disagree (the same verdict everywhere). The shim raises an MPI error of the
    /// failure's `Class` on every rank; it must not hand the call to PMPI, which would
    /// move data on arguments shmcoll knows to be wrong. Also every failure of the setup
    /// functions (create, open, join), after which the shim passes calls to PMPI.
    Rejected = 1,
    /// The communicator is unusable (a peer died, a timeout): nothing consistent remains.
    Fatal = 2,
    /// The C caller broke the ABI's contract (null pointer, bad length); nothing was sent.
    BadArgument = 3,
    /// Every rank accepted the call but no algorithm serves it (a forced one cannot):
    /// decided from what all ranks published, so the same everywhere, and the same call
    /// may go to PMPI on every rank.
    Declined = 4,
}

/// What kind of mistake a failed call was (the header's `SHMCOLL_CLASS_*`), for the shim
/// to pick the MPI error class. A rank's rejection carries its class to the peers as the
/// first words of its message (`tag`), since the engine's descriptor carries only its
/// coarser `ErrorKind`: every rank then reports the class of the rank that rejected.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    None = 0,
    Other = 1,
    Argument = 2,
    Count = 3,
    Buffer = 4,
    Root = 5,
    Operator = 6,
    Datatype = 7,
    /// The engine found that the ranks' calls disagree (sizes, counts, collective, root,
    /// operator): the same verdict on every rank, unlike a rejection, which only the
    /// ranks other than the rejecting one see as a peer's.
    Mismatch = 8,
}

/// The message prefixes of the classes a rejection can carry, as `Class::tag` writes them.
const TAGS: [(Class, &str); 6] = [
    (Class::Argument, "invalid argument: "),
    (Class::Count, "invalid count: "),
    (Class::Buffer, "invalid buffer: "),
    (Class::Root, "invalid root: "),
    (Class::Operator, "invalid operator: "),
    (Class::Datatype, "invalid datatype: "),
];

impl Class {
    /// The class with code `c` of the header, if it is one a rejection can carry.
    pub fn from_code(c: i32) -> Option<Class> {
        TAGS.iter().map(|(k, _)| *k).find(|k| *k as i32 == c)
    }

    /// `msg` with this class's prefix, as peers will read it.
    fn tag(self, msg: &str) -> String {
        let prefix = TAGS.iter().find(|(k, _)| *k == self).map_or("", |(_, t)| t);
        format!("{prefix}{msg}")
    }

    /// The class a tagged message carries.
    fn of_tagged(msg: &str) -> Option<Class> {
        TAGS.iter()
            .find(|(_, t)| msg.starts_with(t))
            .map(|(k, _)| *k)
    }

    /// The class of an engine error. A peer's rejection is never `Mismatch`: only the
    /// ranks other than the rejecting one see it so, and the shim retries a `Mismatch`
    /// (alltoall.c), which must happen on every rank or none.
    pub fn of(e: &Error) -> Class {
        let by_kind = |k: ErrorKind| match k {
            ErrorKind::InvalidArgument => Class::Argument,
            ErrorKind::Buffer => Class::Buffer,
            ErrorKind::Mismatch => Class::Count,
            _ => Class::Other,
        };
        match e {
            Error::Peer { kind, msg, .. } => Class::of_tagged(msg).unwrap_or(by_kind(*kind)),
            Error::InvalidArgument(m) | Error::Buffer(m) => {
                Class::of_tagged(m).unwrap_or(by_kind(e.kind()))
            }
            Error::Mismatch(_) => Class::Mismatch,
            _ => Class::Other,
        }
    }
}

/// A rejection of this rank's arguments, to be published to the peers in the call.
pub fn rejection(class: Class, msg: &str) -> Error {
    let msg = class.tag(msg);
    match class {
        Class::Buffer => Error::Buffer(msg),
        _ => Error::InvalidArgument(msg),
    }
}

/// A failed call: its status, its class and the message for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub status: Status,
    pub class: Class,
    pub msg: String,
}

impl Failure {
    pub fn bad_argument(msg: impl Into<String>) -> Failure {
        Failure {
            status: Status::BadArgument,
            class: Class::Argument,
            msg: msg.into(),
        }
    }

    pub fn fatal(msg: impl Into<String>) -> Failure {
        Failure {
            status: Status::Fatal,
            class: Class::Other,
            msg: msg.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure {
            status: if e.is_fatal() {
                Status::Fatal
            } else if matches!(e, Error::CannotServe { .. }) {
                Status::Declined
            } else {
                Status::Rejected
            },
            class: Class::of(&e),
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
        class: Class::Other,
        msg: e.to_string(),
    }
}

/// Heap per rank when SHMCOLL_HEAP_BYTES is not set: an MPI program's buffers are its own
/// private memory, never the shared heap, so the heap only needs to exist.
pub const PMPI_HEAP_BYTES: usize = 64 << 10;

/// The engine's settings from the environment, with the PMPI library's heap default.
pub fn config(nranks: usize) -> Outcome<Config> {
    pmpi_config(nranks).map_err(setup)
}

fn pmpi_config(nranks: usize) -> Result<Config, Error> {
    let mut cfg = Config::from_env(nranks)?;
    if std::env::var_os("SHMCOLL_HEAP_BYTES").is_none() {
        cfg.heap_bytes = PMPI_HEAP_BYTES;
    }
    Ok(cfg)
}

/// This rank's part of a new communicator's creation exchange (shmcoll_coll::pool), with
/// the library's settings; its record goes to every rank.
pub fn offer(nranks: usize) -> Offer {
    Offer::with_config(nranks, pmpi_config(nranks.max(1)))
}

/// Settle `offer` from every rank's record (in rank order; this rank is `rank`): whether
/// every rank is on this node, and the communicator on the pooled segment every rank
/// offered, its tuning tables bound (as `join` binds them), or None: then the ranks make
/// a segment (`create_segment`, `open_segment`, `join`). The same records give the same
/// outcome, and the same error, on every rank.
pub fn settle(offer: Offer, records: &[u8], rank: usize) -> Outcome<(bool, Option<Comm>)> {
    let s = offer.settle(records, rank).map_err(setup)?;
    let comm = match s.reuse {
        Some(p) => {
            let mut comm = Comm::resume(p, s.cfg).map_err(setup)?;
            comm.bind_tuning_file().map_err(setup)?;
            Some(comm)
        }
        None => None,
    };
    Ok((s.one_node, comm))
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
fn extent(counts: &[usize], displs: &[usize]) -> Result<usize, Error> {
    counts.iter().zip(displs).try_fold(0usize, |hi, (c, d)| {
        d.checked_add(*c)
            .map(|end| hi.max(end))
            .ok_or_else(|| rejection(Class::Count, "a block ends beyond the address space"))
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
    let call = bpp
        .checked_mul(comm.size())
        .ok_or_else(|| rejection(Class::Count, "count times ranks overflows"))
        .map(|len| AlltoallCall {
            send: send.map(|addr| RawBuf { addr, len }),
            recv: RawBuf { addr: recv, len },
            send_blocks: Blocks::Uniform(bpp),
            recv_blocks: Blocks::Uniform(bpp),
            forced: Forced::default(),
        });
    Ok(comm.alltoall(call)?.algo.name())
}

/// The byte counts and displacements of one Alltoallv, one entry per rank each.
#[derive(Clone, Copy, Debug)]
pub struct VectorArgs<'a> {
    pub send_counts: &'a [usize],
    pub send_displs: &'a [usize],
    pub recv_counts: &'a [usize],
    pub recv_displs: &'a [usize],
}

fn vector_call<'a>(
    p: usize,
    send: Option<usize>,
    recv: usize,
    v: VectorArgs<'a>,
) -> Result<AlltoallCall<'a>, Error> {
    for (what, a) in [
        ("send counts", v.send_counts),
        ("send displacements", v.send_displs),
        ("receive counts", v.recv_counts),
        ("receive displacements", v.recv_displs),
    ] {
        if a.len() != p {
            return Err(rejection(
                Class::Argument,
                &format!("{what}: {} entries for {p} ranks", a.len()),
            ));
        }
    }
    Ok(AlltoallCall {
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
    })
}

/// Alltoallv in bytes; `send` None is MPI_IN_PLACE (the send blocks are the receive
/// blocks, as MPI says).
pub fn alltoallv(
    comm: &mut Comm,
    send: Option<usize>,
    recv: usize,
    v: VectorArgs<'_>,
) -> Outcome<&'static str> {
    let call = vector_call(comm.size(), send, recv, v);
    Ok(comm.alltoall(call)?.algo.name())
}

/// Which call a rejection stands for: the peers must be in the same engine entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Alltoall or Alltoallv (one entry; the shim may run an Alltoallv as an Alltoall).
    Alltoall,
    Collective(shmcoll_coll::CollOp),
}

/// Reject this rank's call in the engine: every peer fails the same call with this class
/// and message, and nothing moves. Always a failure (Rejected, or Fatal if the peers
/// could not be reached).
pub fn reject(comm: &mut Comm, call: Rejected, class: Class, msg: &str) -> Failure {
    let e = rejection(class, msg);
    let r = match call {
        Rejected::Alltoall => comm.alltoall(Err(e)).map(|_| ()),
        Rejected::Collective(op) => comm.collective(op, Err(e)).map(|_| ()),
    };
    match r {
        Err(e) => e.into(),
        Ok(()) => Failure::fatal("internal error in shmcoll: a rejected call succeeded"),
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
