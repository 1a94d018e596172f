//! CPU codecs of shmcoll. Each codec's stream is specified byte for byte in its module's
//! documentation; these implementations are the reference that the CUDA kernels in
//! `cuda/` must match bit for bit. No knowledge of processes or
//! collectives: buffers in, buffers out.

pub mod bq;
pub mod cast;
mod error;
pub mod mpc;
mod threads;
pub mod zfp;

pub use error::{CodecError, Result};
pub use threads::MAX_CODEC_THREADS;
