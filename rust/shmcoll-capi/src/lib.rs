//! C ABI of shmcoll's engine for the PMPI interposition library (python/shmcoll/pmpi/).
//!
//! The C shim, compiled against the application's own mpi.h, does everything that needs
//! MPI (datatypes, communicator attributes, the bootstrap through PMPI_Bcast); this crate
//! does everything that needs the engine: segments, joining, and the collectives on raw
//! bytes. The declarations live in include/shmcoll_capi.h.
//!
//! engine.rs (segments, Alltoall(v)) and collectives.rs (Bcast, Allgather,
//! Reduce_scatter_block, Allreduce, Barrier) are the safe layer, which the unit tests
//! exercise with ranks as threads; ffi.rs turns it into `extern "C"` functions and holds
//! all the unsafe pointer handling.

pub mod collectives;
pub mod engine;
pub mod ffi;
#[cfg(test)]
mod header;
#[cfg(test)]
mod testing;

pub use engine::{Outcome, Status};
