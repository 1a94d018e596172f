//! Node-local shared memory for shmcoll: segments, their layout, control lines and
//! counters, waiting with deadlines, peer liveness, the per-rank heap allocator and Cross
//! Memory Attach. Knows nothing about collectives.

pub mod arena;
pub mod cma;
pub mod ctrl;
pub mod error;
pub mod handshake;
pub mod heap;
pub mod huge_pages;
pub mod layout;
pub mod node;
pub mod placement;
pub mod probe;
pub mod ptrace;
pub mod segment;
pub mod shared_arena;
pub mod wait;

pub use ctrl::Line;
pub use error::{Result, ShmError};
pub use handshake::{handshake, Attached, FIRST_CALL_SEQ};
pub use heap::HeapAlloc;
pub use layout::{Layout, Sizes, LINE};
pub use segment::{shm_free_bytes, Segment, NAME_PREFIX};
pub use wait::{
    bound_apart, set_block_hook, set_interrupt_check, shares_cpu, wait_counter, wait_until, Peers,
    WaitConfig, BLOCK_HOOK_AFTER, INTERRUPT_CHECK_EVERY,
};
