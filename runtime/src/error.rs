//! The runtime's error type.

use crate::pool::PoolStats;
use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure the runtime reports. Backends convert their own error enums into
/// [`Error::Backend`].
#[derive(Debug, Error, Clone)]
pub enum Error {
    /// An operator was called with operands it cannot accept (shapes, dtypes, attributes,
    /// devices, aliasing). Raised before anything is enqueued.
    #[error("{op}: {msg}")]
    Invalid { op: &'static str, msg: String },

    /// A configuration value is out of range or malformed.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// The memory pool could not satisfy a request even after releasing its cache.
    #[error("out of memory on {device}: requested {requested} bytes ({stats})")]
    OutOfMemory { device: String, requested: usize, stats: Box<PoolStats> },

    /// No kernel of the backend accepts this signature.
    #[error("no implementation of {op} on {backend} accepts {signature}: {reasons}")]
    NoKernel { op: &'static str, backend: &'static str, signature: String, reasons: String },

    /// Work queued on a stream failed; reported at the next synchronisation.
    #[error("{op} failed on {stream} (submission #{seq}): {msg}")]
    Async { op: String, stream: String, seq: u64, msg: String },

    /// A backend or driver call failed.
    #[error("{backend}: {msg}")]
    Backend { backend: &'static str, msg: String },

    /// A device index, stream or event that does not exist (or belongs elsewhere).
    #[error("device error: {0}")]
    Device(String),

    /// A request the chosen backend cannot serve (e.g. a zero-copy view on a GPU).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// Reading or writing a file (the CLI's .npy files).
    #[error("io: {0}")]
    Io(String),

    /// An element count, byte size or offset derived from a shape, a stride, an offset or
    /// a file header does not fit the address space (see [`crate::size`]).
    #[error("size overflow: {what}")]
    Overflow { what: String },
}

impl Error {
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Error {
        Error::Invalid { op, msg: msg.into() }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(e.to_string())
    }
}

/// The text of a panic payload (`&str` or `String`; anything else is named as such), for
/// backends that turn a caught kernel panic into an error.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}
