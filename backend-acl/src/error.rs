//! Errors of the Ascend backend.

use acl_sys::{AclError, LoadError};
use runtime::KernelError;
use runtime::backend::allocations::BadAddress;
use thiserror::Error;

/// What the backend's own methods return; becomes a [`runtime::Error`] (see the `From`
/// impl) with this error as the `source()`.
#[derive(Debug, Error, Clone)]
pub enum AclBackendError {
    /// CANN or a device is missing: the runtime falls back to the next backend.
    #[error("Ascend not available: {0}")]
    Unavailable(#[source] Unavailable),
    /// An ACL or aclnn call failed or could not be resolved (for an op, when `op` is set).
    #[error("{}{err}", op.map(|o| format!("{o}: ")).unwrap_or_default())]
    Call {
        op: Option<&'static str>,
        #[source]
        err: AclError,
    },
    /// An address range outside every live allocation of the device (rule M1).
    #[error("{0}")]
    BadAddress(#[from] BadAddress),
    #[error("{what} {addr:#x} is not {align}-byte aligned (aclnn needs 32)")]
    Unaligned { what: &'static str, addr: u64, align: u64 },
    #[error("device acl:{0} does not exist")]
    NoDevice(usize),
    #[error("unknown stream {0} on acl:{1}")]
    NoStream(u64, usize),
    #[error("unknown event {0} on acl:{1}")]
    NoEvent(u64, usize),
    #[error("{0}")]
    BadRequest(String),
    /// A synchronisation the backend made on its own behalf (the host tier waits for the
    /// stream's queued work) reported a failure of that work.
    #[error("{0}")]
    Stream(#[source] runtime::Error),
    /// A failure in one node of a compiled graph (its name), or in the capture of a run
    /// of nodes (the first one's name and the range).
    #[error("node {node}: {source}")]
    InNode {
        node: String,
        #[source]
        source: Box<AclBackendError>,
    },
    /// The host reference tier could not compute the op.
    #[error("{op}: host reference: {source}")]
    HostReference {
        op: &'static str,
        #[source]
        source: KernelError,
    },
}

/// Why the backend could not start.
#[derive(Debug, Error, Clone)]
pub enum Unavailable {
    /// A library, or a symbol the backend requires, could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Initialising ACL failed (or one of its symbols is missing).
    #[error(transparent)]
    Acl(#[from] AclError),
    /// `aclrtGetDeviceCount` failed.
    #[error("no usable device: {0}")]
    DeviceCount(#[source] AclError),
    /// `aclrtGetDeviceCount` returned 0.
    #[error("no Ascend device is visible (aclrtGetDeviceCount = 0)")]
    NoDevice,
    /// A visible device could not be opened.
    #[error("opening device {device}: {source}")]
    OpenDevice {
        device: i32,
        #[source]
        source: Box<AclBackendError>,
    },
}

impl From<Unavailable> for AclBackendError {
    fn from(e: Unavailable) -> Self {
        AclBackendError::Unavailable(e)
    }
}

impl AclBackendError {
    pub fn call(op: Option<&'static str>, err: AclError) -> Self {
        AclBackendError::Call { op, err }
    }
    /// The ACL status code, when the failure came from a call.
    pub fn code(&self) -> Option<i32> {
        match self {
            AclBackendError::Call { err, .. } => err.code(),
            AclBackendError::InNode { source, .. } => source.code(),
            _ => None,
        }
    }
    /// The same error, attributed to `op` when it names no op yet.
    pub(crate) fn in_op(self, op: &'static str) -> Self {
        match self {
            AclBackendError::Call { op: None, err } => AclBackendError::Call { op: Some(op), err },
            e => e,
        }
    }
}

/// An ACL failure outside any op (device, stream, event and memory calls).
impl From<AclError> for AclBackendError {
    fn from(err: AclError) -> Self {
        AclBackendError::Call { op: None, err }
    }
}

impl From<AclBackendError> for runtime::Error {
    fn from(e: AclBackendError) -> runtime::Error {
        match &e {
            AclBackendError::Unavailable(_) => runtime::Error::Unsupported(e.to_string()),
            AclBackendError::NoDevice(_) | AclBackendError::NoStream(..) | AclBackendError::NoEvent(..) => {
                runtime::Error::device(e.to_string())
            }
            _ => runtime::Error::backend("acl", e),
        }
    }
}
