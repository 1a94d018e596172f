//! Copy kernels for shmcoll: memcpy with explicit control over the store policy.
//!
//! This crate knows nothing about processes or collectives. It offers:
//! - [`copy`] / [`copy_raw`] / [`copy_raw_with`] / [`copy_2d_raw`]: copies with temporal,
//!   non-temporal (streaming) or hybrid stores, dispatched at run time to AVX-512, AVX2,
//!   SSE2 or scalar code;
//! - [`store_fence`]: the fence that must follow non-temporal stores before another process
//!   is told the data is there;
//! - [`hw`]: machine facts (cache sizes, cores, SIMD features) used by selection;
//! - [`reduce`]: element-wise reduction kernels ([`reduce_into`], [`reduce3`], ...).
//!
//! Environment: `SHMCOLL_ISA` lowers the ISA used by default, `SHMCOLL_NT_THRESHOLD` sets
//! the size from which `Store::Hybrid` streams. Both are read once.

mod copy;
pub mod hw;
pub mod reduce;

pub use copy::{
    active_isa, available_isas, copy, copy_2d_raw, copy_raw, copy_raw_with, store_fence, Isa, Store,
};
pub use reduce::{reduce3, reduce3_raw, reduce_into, reduce_into_raw, reduce_isa, Dtype, Op};
