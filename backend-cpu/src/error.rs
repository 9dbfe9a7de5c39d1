//! Errors of the CPU backend.

use runtime::backend::allocations::{BadAddress, LoanError};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum CpuError {
    #[error("host allocation of {bytes} bytes (alignment {align}) failed")]
    AllocFailed { bytes: usize, align: usize },
    #[error("invalid allocation request: {0}")]
    BadRequest(String),
    /// An address range outside every live allocation of the device (rule M1), or a free
    /// of an address that is not a live allocation's base.
    #[error("{0}")]
    BadAddress(#[from] BadAddress),
    /// A host range that cannot be lent (`Backend::with_host_ranges`): empty, or
    /// overlapping memory the device already holds.
    #[error("{0}")]
    Loan(#[from] LoanError),
    #[error("device cpu:{0} does not exist")]
    NoDevice(usize),
    #[error("unknown stream {0} on cpu:{1}")]
    NoStream(u64, usize),
    #[error("unknown event {0} on cpu:{1}")]
    NoEvent(u64, usize),
    #[error("event {0} has not completed (or was never recorded)")]
    EventNotReady(u64),
    /// A kernel failed on operands that passed validation.
    #[error("{kernel}: {source}")]
    Kernel {
        kernel: std::borrow::Cow<'static, str>,
        #[source]
        source: runtime::KernelError,
    },
    /// A kernel panicked; the panic was caught and the stream stays usable.
    #[error("{kernel}: panicked: {msg}")]
    Panicked { kernel: std::borrow::Cow<'static, str>, msg: String },
    /// A failure injected with `CpuBackend::inject_fault`.
    #[error("{kernel}: injected fault")]
    Injected { kernel: std::borrow::Cow<'static, str> },
    /// An output operand's bytes do not cover its elements.
    #[error("{kernel}: output operand is not contiguous")]
    NotContiguous { kernel: std::borrow::Cow<'static, str> },
    /// A queued job (not a kernel) panicked.
    #[error("panicked: {0}")]
    JobPanicked(String),
    #[error("the worker thread of {0} has stopped")]
    WorkerGone(String),
    /// A forced instruction-set path (`NPURT_CPU_ISA`, `CpuConfig::isa`) that is unknown or
    /// that this CPU cannot run.
    #[error("{0}")]
    Isa(#[from] crate::features::IsaError),
    /// A CPU backend variable (`NPURT_CPU_PIN`, `NPURT_AMX`, `NPURT_GEMM`) set to a value
    /// that is not UTF-8, is empty or is unknown.
    #[error("invalid configuration: {0}")]
    Config(#[from] runtime::env::EnvError),
}

impl From<CpuError> for runtime::Error {
    /// A failed host allocation is [`runtime::Error::OutOfMemory`]; everything else is
    /// [`runtime::Error::Backend`]. The `CpuError` is the source either way.
    fn from(e: CpuError) -> runtime::Error {
        match e {
            CpuError::AllocFailed { bytes, .. } => runtime::Error::OutOfMemory {
                device: "cpu".into(),
                requested: bytes,
                stats: Box::default(),
                source: Some(std::sync::Arc::new(e)),
            },
            CpuError::Config(e) | CpuError::Isa(crate::features::IsaError::Env(e)) => e.into(),
            e => runtime::Error::backend("cpu", e),
        }
    }
}

/// Locks `m`, taking the guard back when another holder panicked.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
