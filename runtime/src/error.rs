//! The runtime's error type.

use crate::dtype::DType;
use crate::pool::stats::PoolStats;
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A backend's (or a driver's) own error, kept whole as the [`std::error::Error::source`]
/// of the runtime's error that reports it. Shared, so errors stay `Clone` (a stream keeps
/// its first failure until the next synchronisation reports it).
pub type Source = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure the runtime reports. A backend's own error arrives as the `source()` of
/// [`Error::Backend`] or [`Error::Async`]; a backend's out-of-memory arrives as
/// [`Error::OutOfMemory`].
///
/// `Send + Sync + Clone`: an error can be handed to another thread or reported twice.
///
/// `Display` and `std::error::Error` are implemented here rather than derived, so that
/// `source()` yields the backend's (or the parser's, or the `io::Error`) own error,
/// which callers can `downcast_ref` to its type, rather than the shared `Arc` holding it.
#[derive(Debug, Clone)]
pub enum Error {
    /// An operator was called with operands it cannot accept (shapes, dtypes, attributes,
    /// devices, aliasing). Raised before anything is enqueued. `operands` are the dtypes
    /// and dims of the operands checked, where the check had them (the message names
    /// the ones that matter).
    Invalid { op: &'static str, msg: String, operands: Vec<Operand> },

    /// A configuration value is out of range or malformed.
    Config(String),

    /// The device memory (or the pool's limit) could not satisfy a request, even after
    /// the pool released its cache. `stats` are the pool's at that moment (empty when
    /// the backend's allocator was called directly); `source` is the backend's own error.
    OutOfMemory { device: String, requested: usize, stats: Box<PoolStats>, source: Option<Source> },

    /// No kernel of the backend accepts this signature.
    NoKernel { op: &'static str, backend: &'static str, signature: String, reasons: String },

    /// Work queued on a stream failed; reported at the next synchronisation of that
    /// stream (or of the device). `seq` is the stream's submission number of the failed
    /// work; `source` is why it failed (a kernel error, a panic, a driver error).
    Async { op: String, stream: String, seq: u64, source: Source },

    /// A backend or driver call failed; `source` is the backend's own error.
    Backend { backend: &'static str, source: Source },

    /// A device index, stream or event that does not exist (or belongs elsewhere), a
    /// stream limit reached, a block freed twice. `device` is the runtime's device index
    /// and `stream` the stream's name, where the failing call had them.
    Device { device: Option<usize>, stream: Option<String>, msg: String },

    /// A request the chosen backend cannot serve (e.g. a zero-copy view on a GPU).
    Unsupported(String),

    /// Reading or writing a file or a pipe failed; `context` names what was read.
    Io { context: String, source: Arc<std::io::Error> },

    /// A file, a header or a message was read but its content is malformed (a model
    /// directory, `config.json`, a `.npy` header, a peer's reply). `context` says what
    /// and where; `source` is the parser's own error, when one reported it.
    Format { context: String, source: Option<Source> },

    /// An element count, byte size or offset derived from a shape, a stride, an offset or
    /// a file header does not fit the address space (see [`crate::size`]).
    Overflow { what: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid { op, msg, .. } => write!(f, "{op}: {msg}"),
            Error::Config(m) => write!(f, "invalid configuration: {m}"),
            Error::OutOfMemory { device, requested, stats, source } => {
                write!(f, "out of memory on {device}: requested {requested} bytes ({stats})")?;
                match source {
                    Some(s) => write!(f, ": {s}"),
                    None => Ok(()),
                }
            }
            Error::NoKernel { op, backend, signature, reasons } => {
                write!(f, "no implementation of {op} on {backend} accepts {signature}: {reasons}")
            }
            Error::Async { op, stream, seq, source } => {
                write!(f, "{op} failed on {stream} (submission #{seq}): {source}")
            }
            Error::Backend { backend, source } => write!(f, "{backend}: {source}"),
            Error::Device { msg, .. } => write!(f, "device error: {msg}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Io { context, source } if context.is_empty() => write!(f, "io: {source}"),
            Error::Io { context, source } => write!(f, "io: {context}: {source}"),
            Error::Format { context, source: None } => write!(f, "format: {context}"),
            Error::Format { context, source: Some(s) } if context.is_empty() => write!(f, "format: {s}"),
            Error::Format { context, source: Some(s) } => write!(f, "format: {context}: {s}"),
            Error::Overflow { what } => write!(f, "size overflow: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::OutOfMemory { source: Some(s), .. } | Error::Format { source: Some(s), .. } => Some(&**s),
            Error::Async { source, .. } | Error::Backend { source, .. } => Some(&**source),
            Error::Io { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

/// The dtype and dims of one operand named in an [`Error::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operand {
    pub dtype: DType,
    pub dims: Vec<usize>,
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.dtype, self.dims)
    }
}

/// A failure that a backend (or a tool driving one) describes only in words.
#[derive(Debug, Clone, Error)]
#[error("{0}")]
pub struct Message(pub String);

impl Error {
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Error {
        Error::Invalid { op, msg: msg.into(), operands: Vec::new() }
    }

    /// Attaches the checked operands to an [`Error::Invalid`] that has none yet; any
    /// other error is returned unchanged.
    pub fn with_operands(self, operands: impl IntoIterator<Item = Operand>) -> Error {
        match self {
            Error::Invalid { op, msg, operands: o } if o.is_empty() => {
                Error::Invalid { op, msg, operands: operands.into_iter().collect() }
            }
            e => e,
        }
    }

    /// A backend's failure, keeping the backend's error as the source.
    pub fn backend(backend: &'static str, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Backend { backend, source: Arc::new(source) }
    }

    /// [`Error::Device`] with neither a device nor a stream to name.
    pub fn device(msg: impl Into<String>) -> Error {
        Error::Device { device: None, stream: None, msg: msg.into() }
    }

    /// [`Error::Device`] about device `device`.
    pub fn on_device(device: usize, msg: impl Into<String>) -> Error {
        Error::Device { device: Some(device), stream: None, msg: msg.into() }
    }

    /// [`Error::Device`] about `stream` of device `device`.
    pub fn on_stream(device: usize, stream: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::Device { device: Some(device), stream: Some(stream.into()), msg: msg.into() }
    }

    /// A backend's failure described only by a message.
    pub fn backend_msg(backend: &'static str, msg: impl Into<String>) -> Error {
        Error::backend(backend, Message(msg.into()))
    }

    /// A failed read or write of `context` (a path, "standard input", ...).
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source: Arc::new(source) }
    }

    /// Malformed content, described in words.
    pub fn format(context: impl Into<String>) -> Error {
        Error::Format { context: context.into(), source: None }
    }

    /// Malformed content of `context`, as the parser `source` reported it.
    pub fn format_from(context: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Format { context: context.into(), source: Some(Arc::new(source)) }
    }

    /// True for [`Error::OutOfMemory`].
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::OutOfMemory { .. })
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io { context: String::new(), source: Arc::new(e) }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn sources_are_kept() {
        let io = Error::io("model.safetensors", std::io::Error::new(std::io::ErrorKind::NotFound, "gone"));
        assert_eq!(io.to_string(), "io: model.safetensors: gone");
        let inner = io.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("io::Error kept");
        assert_eq!(inner.kind(), std::io::ErrorKind::NotFound);
        let b = Error::backend_msg("cpu", "refused");
        assert_eq!(b.to_string(), "cpu: refused");
        assert!(b.source().and_then(|s| s.downcast_ref::<Message>()).is_some());
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let f = Error::format_from("config.json", json);
        assert!(f.to_string().starts_with("format: config.json: EOF"), "{f}");
        assert!(f.source().and_then(|s| s.downcast_ref::<serde_json::Error>()).is_some());
        assert_eq!(Error::format("bad header").to_string(), "format: bad header");
    }

    #[test]
    fn invalid_names_its_operands() {
        let e = Error::invalid("MatMul", "inner dims differ").with_operands([
            Operand { dtype: DType::F32, dims: vec![2, 3] },
            Operand { dtype: DType::F32, dims: vec![4, 5] },
        ]);
        assert_eq!(e.to_string(), "MatMul: inner dims differ");
        let Error::Invalid { operands, .. } = &e else { panic!("{e:?}") };
        assert_eq!(operands.iter().map(|o| o.to_string()).collect::<Vec<_>>(), ["f32 [2, 3]", "f32 [4, 5]"]);
        // Operands already named are kept.
        let again = e.clone().with_operands([Operand { dtype: DType::I32, dims: vec![] }]);
        assert!(matches!(again, Error::Invalid { operands: o, .. } if o.len() == 2));
    }
}
