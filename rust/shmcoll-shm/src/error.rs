//! Errors of the shared-memory layer.

use std::time::Duration;

/// What can go wrong below the collectives: the OS, a peer, or the clock.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A system call failed.
    #[error("{context}: {source}")]
    Os {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A wait passed its deadline.
    #[error("timed out after {:.1} s waiting for rank {peer} ({what}); raise SHMCOLL_TIMEOUT if the peer is merely slow", waited.as_secs_f64())]
    Timeout {
        what: &'static str,
        peer: usize,
        waited: Duration,
    },
    /// A peer process exited while we waited for it.
    #[error("rank {peer} (pid {pid}) exited while this rank waited for it ({what})")]
    PeerDied {
        what: &'static str,
        peer: usize,
        pid: u32,
    },
    /// A peer gave up on the communicator (its own timeout, death of a third rank, ...).
    #[error("rank {peer} aborted the communicator while this rank waited for it ({what})")]
    PeerAborted { what: &'static str, peer: usize },
    /// The process was interrupted (a signal such as SIGINT) while it waited; the
    /// embedder's interrupt check holds the details (the Python exception to raise).
    #[error("interrupted while waiting for rank {peer} ({what})")]
    Interrupted { what: &'static str, peer: usize },
    /// The segment is not one of ours, or of another version.
    #[error("shared-memory segment {name}: {reason}")]
    BadSegment { name: String, reason: String },
    /// The shared heap of this rank has no free range large enough.
    #[error("shared heap exhausted: asked for {requested} bytes, largest free range is {largest_free} of {capacity} (set SHMCOLL_HEAP_BYTES to enlarge it)")]
    HeapExhausted {
        requested: usize,
        largest_free: usize,
        capacity: usize,
    },
    /// /dev/shm could not back a block of the shared heap: the heap is sized from the free
    /// space when the communicator is created, and other jobs (or this one's other
    /// communicators) may have used that space since.
    #[error("shared heap exhausted: /dev/shm could not back {requested} more bytes ({source}); other processes hold its space, or SHMCOLL_HEAP_BYTES promises more than it has")]
    HeapUnbacked {
        requested: usize,
        #[source]
        source: std::io::Error,
    },
    /// A configuration value is out of range.
    #[error("{0}")]
    Config(String),
}

impl ShmError {
    pub(crate) fn os(context: impl Into<String>, source: impl Into<std::io::Error>) -> Self {
        ShmError::Os {
            context: context.into(),
            source: source.into(),
        }
    }
}

pub type Result<T, E = ShmError> = std::result::Result<T, E>;
