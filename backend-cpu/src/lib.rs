//! The host CPU backend of npurt.
//!
//! Each logical device owns aligned host allocations (checked by an allocation table),
//! a synchronous default stream that runs kernels on the calling thread, user streams
//! served in order by one worker thread each, events, and a rayon pool sized by the
//! configured thread cap for intra-op parallelism. Kernels come in three tiers; see
//! [`kernels`].
//!
//! Files: [`CpuBackend`] and its `Backend` methods in `backend.rs`, the per-device
//! records in `device.rs`, allocations and copies in [`memory`], streams and events in
//! [`stream`], launch checks, batches and frozen launches in `launch.rs`, the detected
//! CPU and the instruction-set path in use in [`features`], the FMA peak measurement in
//! [`peak`], errors in [`error`].

pub mod affinity;
mod backend;
mod device;
pub mod error;
pub mod features;
pub mod kernels;
mod launch;
pub mod memory;
pub mod peak;
mod pool;
pub mod stream;

pub use backend::{CpuBackend, ONE_STREAM_MAX_THREADS};
pub use error::CpuError;
pub use features::{Isa, IsaError};
pub use launch::Fault;
pub use stream::DEFAULT_STREAM;

/// How the CPU backend presents the host.
#[derive(Clone, Debug)]
pub struct CpuConfig {
    /// Logical devices (they share the host's cores and memory).
    pub devices: usize,
    /// Worker threads per device for intra-op parallelism (`None` = all cores).
    pub threads: Option<usize>,
    /// The instruction-set path every kernel takes, even where the CPU has a wider one
    /// (`None`: the one `NPURT_CPU_ISA` names, else the widest detected). A path this CPU
    /// cannot run makes [`CpuBackend::new`] fail with [`CpuError::Isa`].
    pub isa: Option<Isa>,
    /// Whether each device pool's workers are pinned to CPUs of their own (see
    /// [`affinity`]); `None`: what `NPURT_CPU_PIN` says, else pinned when the workers of all
    /// devices are as many as the CPUs the process may run on.
    pub pin: Option<bool>,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig { devices: 1, threads: None, isa: None, pin: None }
    }
}
