//! Errors of the Ascend backend.

use thiserror::Error;

#[derive(Debug, Error, Clone)]
pub enum AclBackendError {
    /// CANN or a device is missing: the runtime falls back to the next backend.
    #[error("Ascend not available: {0}")]
    Unavailable(String),
    /// An ACL or aclnn call failed (for an op, when `op` is set).
    #[error("{}{err}", op.map(|o| format!("{o}: ")).unwrap_or_default())]
    Call { op: Option<&'static str>, err: acl_sys::AclError },
    /// A symbol could not be resolved after the backend started.
    #[error("{}{err}", op.map(|o| format!("{o}: ")).unwrap_or_default())]
    Symbol { op: Option<&'static str>, err: acl_sys::LoadError },
    #[error("address range {addr:#x}+{len} is not inside a live allocation of acl:{device}")]
    BadAddress { device: usize, addr: u64, len: usize },
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
}

impl AclBackendError {
    pub fn call(op: Option<&'static str>, err: acl_sys::AclError) -> Self {
        AclBackendError::Call { op, err }
    }
    /// The ACL status code, when the failure came from a call.
    pub fn code(&self) -> Option<i32> {
        match self {
            AclBackendError::Call { err, .. } => Some(err.code),
            _ => None,
        }
    }
}

impl From<AclBackendError> for runtime::Error {
    fn from(e: AclBackendError) -> runtime::Error {
        match &e {
            AclBackendError::Unavailable(_) => runtime::Error::Unsupported(e.to_string()),
            AclBackendError::NoDevice(_) | AclBackendError::NoStream(..) | AclBackendError::NoEvent(..) => {
                runtime::Error::Device(e.to_string())
            }
            _ => runtime::Error::Backend { backend: "acl", msg: e.to_string() },
        }
    }
}
