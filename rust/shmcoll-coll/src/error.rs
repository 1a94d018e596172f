//! The one error type of shmcoll; the Python bindings map each variant to an exception class.

use shmcoll_shm::ShmError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Below the collectives: OS, timeouts, dead or aborted peers, heap exhaustion.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// A bad argument this rank could see by itself (counts, displacements, names).
    #[error("{0}")]
    InvalidArgument(String),
    /// A buffer that cannot serve: read-only, non-contiguous, too small, overlapping.
    #[error("{0}")]
    Buffer(String),
    /// Ranks disagree about the call (sizes, operation, forced choices).
    #[error("{0}")]
    Mismatch(String),
    /// Another rank rejected its part of the call; nothing was transferred.
    #[error("rank {rank} rejected the call: {msg}")]
    Peer {
        rank: usize,
        kind: ErrorKind,
        msg: String,
    },
    /// Another rank failed while it moved this call's data (after every rank had accepted
    /// the call): this rank's results may be incomplete.
    #[error(
        "rank {rank} failed while moving this call's data, so the results may be incomplete: {msg}"
    )]
    PeerFailed { rank: usize, msg: String },
    /// Something shmcoll does not do (yet).
    #[error("{0}")]
    Unsupported(String),
    /// A forced algorithm cannot serve this call.
    #[error("algorithm '{algo}' cannot serve this call: {why}")]
    CannotServe { algo: &'static str, why: String },
    /// Ranks disagreed about a one-sided call that some of them had already completed:
    /// their sequences of calls no longer match, so the communicator is unusable.
    #[error("{0} (the ranks' calls no longer match)")]
    Diverged(String),
    /// An earlier fatal failure left the communicator unusable.
    #[error("the communicator is unusable after an earlier failure ({0}); create a new one")]
    Broken(String),
    /// What a rank read from shared memory for this call is not what its owner published
    /// or registered (a descriptor changed after it was published, an extent beyond the
    /// buffer a rank registered): nothing was copied with it, and the communicator is
    /// unusable, since its shared state can no longer be trusted.
    #[error("shared state of the communicator is corrupt: {0}; the communicator is unusable")]
    Corrupt(String),
    /// Not an error of the call: what a rank publishes when it hands the call to MPI
    /// (`Comm::agree_fallback`); the peers that did not raise `Error::Peer` with it.
    #[error("it hands this call to MPI: {0}")]
    FallsBack(String),
    /// A bug of shmcoll (a panic in the engine), turned into an error at the boundary.
    #[error("internal error of shmcoll: {0}; the communicator is unusable (please report this)")]
    Internal(String),
}

/// The kind of a rejection, carried to peers in the call descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorKind {
    InvalidArgument = 1,
    Buffer = 2,
    Mismatch = 3,
    Unsupported = 4,
    CannotServe = 5,
    Other = 6,
    /// Not a rejection of the call's own arguments: the notice, published in place of a
    /// call, that a rank rejected an earlier one-sided call this rank had completed
    /// (one_sided.rs). Never answered with a notice of its own.
    Notice = 7,
    /// Not a rejection: this rank hands the call to MPI (`Comm::agree_fallback`).
    Fallback = 8,
}

impl ErrorKind {
    pub fn from_code(code: u32) -> ErrorKind {
        match code {
            1 => ErrorKind::InvalidArgument,
            2 => ErrorKind::Buffer,
            3 => ErrorKind::Mismatch,
            4 => ErrorKind::Unsupported,
            5 => ErrorKind::CannotServe,
            7 => ErrorKind::Notice,
            8 => ErrorKind::Fallback,
            _ => ErrorKind::Other,
        }
    }
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Buffer(_) => ErrorKind::Buffer,
            Error::Mismatch(_) | Error::Diverged(_) => ErrorKind::Mismatch,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::CannotServe { .. } => ErrorKind::CannotServe,
            Error::FallsBack(_) => ErrorKind::Fallback,
            Error::Peer { kind, .. } => *kind,
            _ => ErrorKind::Other,
        }
    }

    /// Errors after which the ranks no longer agree on the state of the segment.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::Shm(_)
                | Error::Broken(_)
                | Error::Diverged(_)
                | Error::PeerFailed { .. }
                | Error::Corrupt(_)
                | Error::Internal(_)
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The message of a caught panic (for `Error::Internal` and the C ABI's fatal status).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}
