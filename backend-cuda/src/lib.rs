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
//! Layout: `backend` ([`CudaBackend`] and its `runtime::Backend` implementation),
//! `device` (each GPU's record), [`memory`] (allocations, the allocation table's releaser,
//! every copy: host copies through pinned staging buffers, device-to-device copies and
//! fills), `stream` (streams, events, and the queuing of copies and fills), [`kernels`]
//! (the kernel table and the NVRTC sources), `config` ([`CudaConfig`]), and the backend's
//! own extras: `launch` (enqueuing one table entry), [`plan`] (host-side launch planning),
//! [`nvrtc`], [`probe`] and [`info`].

mod backend;
mod config;
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

pub use backend::CudaBackend;
pub use config::CudaConfig;
pub use device::DEFAULT_STREAM;
pub use error::CudaError;
pub use info::CudaDeviceInfo;
pub use kernels::source;
