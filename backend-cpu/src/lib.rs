//! The host CPU backend of npurt.
//!
//! Each logical device owns aligned host allocations (checked by an allocation table),
//! a synchronous default stream that runs kernels on the calling thread, user streams
//! served in order by one worker thread each, events, and a rayon pool sized by the
//! configured thread cap for intra-op parallelism. Kernels come in three tiers; see
//! [`kernels`].
//!
//! Files: [`CpuBackend`] and its `Backend` methods in `backend.rs`; the per-device
//! record (allocation table, streams and events, pool, and the kernel table and features
//! its launches use) in `device.rs`; allocations and every copy in [`memory`]; streams,
//! events and the default stream in [`stream`]; launch checks, batches and frozen
//! launches in `launch.rs`; injected faults in `fault.rs`; the joined rayon pools in
//! `pool.rs`; the configuration in `config.rs`; the detected CPU and the instruction-set
//! path in use in [`features`]; the FMA peak measurement in [`peak`]; errors in [`error`].

pub mod affinity;
mod backend;
mod config;
mod device;
pub mod error;
mod fault;
pub mod features;
pub mod kernels;
mod launch;
pub mod memory;
pub mod peak;
mod pool;
pub mod stream;

pub use backend::{CpuBackend, ONE_STREAM_MAX_THREADS};
pub use config::CpuConfig;
pub use error::CpuError;
pub use fault::Fault;
pub use features::{Isa, IsaError};
pub use stream::DEFAULT_STREAM;
