//! Errors of the CPU backend.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum CpuError {
    #[error("host allocation of {bytes} bytes (alignment {align}) failed")]
    AllocFailed { bytes: usize, align: usize },
    #[error("invalid allocation request: {0}")]
    BadRequest(String),
    #[error("address range {addr:#x}+{len} is not inside a live allocation of cpu:{device}")]
    BadAddress { device: usize, addr: u64, len: usize },
    #[error("device cpu:{0} does not exist")]
    NoDevice(usize),
    #[error("unknown stream {0} on cpu:{1}")]
    NoStream(u64, usize),
    #[error("unknown event {0} on cpu:{1}")]
    NoEvent(u64, usize),
    #[error("event {0} has not completed (or was never recorded)")]
    EventNotReady(u64),
    #[error("kernel {kernel}: {msg}")]
    Kernel { kernel: &'static str, msg: String },
    #[error("the worker thread of {0} has stopped")]
    WorkerGone(String),
}

impl From<CpuError> for runtime::Error {
    fn from(e: CpuError) -> runtime::Error {
        runtime::Error::Backend { backend: "cpu", msg: e.to_string() }
    }
}
