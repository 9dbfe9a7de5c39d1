//! [`CpuConfig`]: how the CPU backend presents the host.

use crate::features::Isa;

/// How the CPU backend presents the host.
#[derive(Clone, Debug)]
pub struct CpuConfig {
    /// Logical devices (they share the host's cores and memory).
    pub devices: usize,
    /// Worker threads per device for intra-op parallelism (`None` = all cores).
    pub threads: Option<usize>,
    /// The instruction-set path every kernel takes, even where the CPU has a wider one
    /// (`None`: the one `NPURT_CPU_ISA` names, else the widest detected). A path this CPU
    /// cannot run makes [`CpuBackend::new`](crate::CpuBackend::new) fail with [`CpuError::Isa`](crate::CpuError::Isa).
    pub isa: Option<Isa>,
    /// Whether each device pool's workers are pinned to CPUs of their own (see
    /// [`affinity`](crate::affinity)); `None`: what `NPURT_CPU_PIN` says, else pinned when the workers of all
    /// devices are as many as the CPUs the process may run on.
    pub pin: Option<bool>,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig { devices: 1, threads: None, isa: None, pin: None }
    }
}
