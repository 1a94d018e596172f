//! Collective algorithms of shmcoll on top of the shared-memory layer: the operations
//! (op.rs), the one algorithm registry (registry.rs), copy orders (order.rs), selection as
//! data (select.rs, one table type for every collective; tables.rs), the call protocol
//! (comm.rs, desc.rs; one_sided.rs for calls that skip the arrive round), the Alltoall(v) algorithms (alltoall/) and the other collectives
//! (collectives/).

pub mod alltoall;
pub mod arenas;
pub mod cma_from;
pub mod collectives;
pub mod comm;
pub mod config;
#[cfg(test)]
mod corrupt;
pub mod desc;
pub mod env_value;
pub mod error;
pub mod extent;
mod leave_order;
mod one_sided;
pub mod op;
pub mod order;
pub mod pool;
pub mod registry;
pub mod select;
pub mod tables;
mod transfer;
pub mod tuning_file;

pub use alltoall::{AlltoallCall, Blocks, RawBuf, Settled};
pub use cma_from::{CmaFrom, Origin};
pub use collectives::select::model_coll_table;
pub use collectives::{CollCall, CollSettled};
pub use comm::{Comm, HeapBlock, Stats};
pub use config::{Config, SETTINGS};
pub use error::{Error, ErrorKind, Result};
pub use op::CollOp;
pub use order::Order;
pub use registry::{Algo, CallFacts, Choice, Forced, Store};
pub use select::{model_table, Candidate, Range, Selection, Table};
pub use shmcoll_shm::ShmError;
pub use tables::Tables;
