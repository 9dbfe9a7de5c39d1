//! Errors of the CUDA backend and their mapping onto [`runtime::Error`].

use runtime::backend::allocations::BadAddress;
use std::sync::{Mutex, MutexGuard};
use thiserror::Error;

/// Every failure the CUDA backend reports.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CudaError {
    /// The driver, a device or a required library is missing (probing failed).
    #[error("CUDA not available: {0}")]
    NotAvailable(String),
    /// A driver call failed.
    #[error("{call} failed: {code}")]
    Driver { call: &'static str, code: String },
    /// The device ran out of memory.
    #[error("device cuda:{device} is out of memory ({bytes} bytes requested)")]
    OutOfMemory { device: usize, bytes: usize },
    /// A cuBLAS call failed.
    #[error("cuBLAS {call} failed: {status}")]
    Cublas { call: &'static str, status: String },
    /// NVRTC could not compile a generated module.
    #[error("NVRTC could not compile {module}: {log}")]
    Nvrtc { module: String, log: String },
    /// A library call panicked (a missing symbol, typically); the panic was contained.
    #[error("{call} panicked: {msg}")]
    Panic { call: &'static str, msg: String },
    #[error("invalid request: {0}")]
    BadRequest(String),
    /// A CUDA backend variable (`NPURT_CUDA_TF32`) set to a value that is not UTF-8, is
    /// empty or is unknown.
    #[error("invalid configuration: {0}")]
    Config(#[from] runtime::env::EnvError),
    /// An address range outside every live allocation of the device (rule M1), or a free
    /// of an address that is not a live allocation's base; the table's error is the source.
    #[error("{0}")]
    BadAddress(#[from] BadAddress),
    #[error("device cuda:{0} does not exist")]
    NoDevice(usize),
    #[error("unknown stream {0} on cuda:{1}")]
    NoStream(u64, usize),
    #[error("unknown event {0} on cuda:{1}")]
    NoEvent(u64, usize),
    /// A kernel reported an index outside its axis (through the device's error word).
    #[error("an index is out of range for the gathered axis")]
    IndexOutOfRange,
    /// Queued work of `op` (submission `seq`) failed on the default stream.
    #[error("{op} (submission #{seq}): {source}")]
    Queued {
        op: String,
        seq: u64,
        #[source]
        source: Box<CudaError>,
    },
    /// A launch of kernel `kernel` failed.
    #[error("{op} (submission #{seq}): {kernel}: {source}")]
    Launch {
        op: &'static str,
        seq: u64,
        kernel: std::borrow::Cow<'static, str>,
        #[source]
        source: Box<CudaError>,
    },
}

impl CudaError {
    /// Maps a driver error of `call`; out-of-memory becomes [`CudaError::OutOfMemory`] when
    /// `oom` names the device and size of the request.
    pub fn driver(call: &'static str, e: cudarc::driver::DriverError, oom: Option<(usize, usize)>) -> CudaError {
        let code = e.0;
        if code == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
            && let Some((device, bytes)) = oom
        {
            return CudaError::OutOfMemory { device, bytes };
        }
        // The enum's own name: no driver call needed (works without a driver loaded).
        CudaError::Driver { call, code: format!("{code:?} ({})", code as u32) }
    }

    pub fn cublas(call: &'static str, e: cudarc::cublas::result::CublasError) -> CudaError {
        CudaError::Cublas { call, status: format!("{:?} ({})", e.0, e.0 as u32) }
    }

    /// True when this error means "no usable GPU here" rather than a failure.
    pub fn is_not_available(&self) -> bool {
        matches!(self, CudaError::NotAvailable(_))
    }
}

impl From<CudaError> for runtime::Error {
    fn from(e: CudaError) -> runtime::Error {
        match e {
            CudaError::NoDevice(_) | CudaError::NoStream(..) | CudaError::NoEvent(..) => {
                runtime::Error::device(e.to_string())
            }
            CudaError::NotAvailable(_) => runtime::Error::Unsupported(e.to_string()),
            CudaError::Config(e) => e.into(),
            CudaError::OutOfMemory { device, bytes } => runtime::Error::OutOfMemory {
                device: format!("cuda:{device}"),
                requested: bytes,
                stats: Box::default(),
                source: Some(std::sync::Arc::new(e)),
            },
            e => runtime::Error::backend("cuda", e),
        }
    }
}

/// Maps a failed driver call `call` to [`CudaError::Driver`] (for `map_err`).
pub(crate) fn drv(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::driver(call, e, None)
}

/// Locks `m`, taking the data of a poisoned lock as it is (a panic elsewhere was contained
/// and must not disable the device).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f`, turning a panic inside it (cudarc panics on a missing library or symbol)
/// into [`CudaError::Panic`].
pub fn guard<T>(call: &'static str, f: impl FnOnce() -> Result<T, CudaError>) -> Result<T, CudaError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = if let Some(s) = p.downcast_ref::<&str>() {
                (*s).to_string()
            } else if let Some(s) = p.downcast_ref::<String>() {
                s.clone()
            } else {
                "unknown panic payload".to_string()
            };
            Err(CudaError::Panic { call, msg })
        }
    }
}
