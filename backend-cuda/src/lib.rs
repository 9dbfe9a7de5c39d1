//! The NVIDIA GPU backend of npurt, on `cudarc` with dynamic loading.
//!
//! * Probing ([`CudaBackend::probe`]) opens the driver library itself (`libloading`),
//!   resolves every driver entry point the backend uses and calls `cuInit` before any
//!   cudarc call; NVRTC and cuBLAS are checked the same way. Whatever cudarc could still
//!   panic on is contained with `catch_unwind`. A machine without a GPU gets
//!   [`CudaError::NotAvailable`] (`CUDA not available: <reason>`).
//! * Memory: raw `cuMemAlloc` allocations under the runtime's caching pool, checked by an
//!   allocation table ([`memory`]); host copies go through pinned, double-buffered
//!   staging buffers.
//! * Streams and events are CUDA streams (non-blocking) and events; the default stream
//!   is a dedicated stream that the runtime synchronises after every launch.
//! * Kernels ([`kernels`]): cuBLAS for MatMul / Gemm / Linear (tensor cores = the "Cube"
//!   unit; f32 SIMT unless tf32 is allowed), and NVRTC kernels generated per op, dtype
//!   and tier ([`source`]) for everything, compiled once per process and cached.
//!
//! Layout: `device` (each GPU's record and the backend that owns them), [`memory`]
//! (allocations, the allocation table's releaser, host copies through pinned staging
//! buffers), `stream` (streams, events, queued byte copies and fills), `backend` (the
//! `runtime::Backend` implementation), [`kernels`] (the kernel table and the NVRTC
//! sources), and the backend's own extras: `launch` (enqueuing one table entry), [`plan`]
//! (host-side launch planning), [`nvrtc`], [`probe`] and [`info`].

mod backend;
mod device;
pub mod error;
pub mod info;
pub mod kernels;
mod launch;
pub mod memory;
pub mod nvrtc;
pub mod plan;
pub mod probe;
mod stream;

pub use device::{CudaBackend, DEFAULT_STREAM};
pub use error::CudaError;
pub use info::CudaDeviceInfo;
pub use kernels::source;

/// How the CUDA backend is set up.
#[derive(Clone, Debug)]
pub struct CudaConfig {
    /// Let f32 matrix products use tf32 tensor cores (reported in the kernel name).
    pub allow_tf32: bool,
    /// Size of each device's pinned staging buffer (split in two for double buffering).
    pub staging_bytes: usize,
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig { allow_tf32: false, staging_bytes: 8 << 20 }
    }
}

impl CudaConfig {
    /// Defaults with `NPURT_CUDA_TF32=1` (allow tf32) applied.
    pub fn from_env() -> CudaConfig {
        let tf32 = std::env::var("NPURT_CUDA_TF32").is_ok_and(|v| matches!(v.as_str(), "1" | "on" | "true" | "yes"));
        CudaConfig { allow_tf32: tf32, ..CudaConfig::default() }
    }
}
