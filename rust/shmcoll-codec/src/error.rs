//! The one error type of the codecs.

/// What can go wrong encoding or decoding.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    /// A parameter outside the codec's domain (rate, bits, block size, dtype).
    #[error("{0}")]
    InvalidArgument(String),
    /// An output buffer smaller than the codec needs.
    #[error("output buffer holds {have} bytes but {need} are needed")]
    BufferTooSmall { need: usize, have: usize },
    /// A stream that is truncated or not produced by this codec.
    #[error("corrupt stream: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, CodecError>;
