//! What acl-emu says about the work it ran, when the backend runs over it: per-run
//! counters (aclnn phase-1 and phase-2 calls, copies and their bytes, allocations,
//! synchronisations, captured replays) and the **modelled** device time of the emulated
//! SoC. On a real CANN host the emulator's symbols are absent and
//! [`AclBackend::emulator`](crate::AclBackend::emulator) is `None`.
//!
//! The counters are the emulator's, process-wide: [`Emulator::reset`] before the work to
//! measure, [`Emulator::counters`] after it has been synchronised.

use crate::error::AclBackendError;
use acl_sys::Api;
use acl_sys::fns::aclEmuRunCounters;
use acl_sys::result::emulator as emu;
use std::sync::Arc;
use std::time::Duration;

/// Counted and modelled since the last [`Emulator::reset`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounters {
    /// `aclnn*GetWorkspaceSize` calls.
    pub phase1_calls: u64,
    /// aclnn launches.
    pub phase2_calls: u64,
    pub h2d_copies: u64,
    pub d2h_copies: u64,
    pub d2d_copies: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    pub d2d_bytes: u64,
    /// Device and pinned-host allocations.
    pub allocations: u64,
    pub allocated_bytes: u64,
    /// `aclrtSynchronize*` calls.
    pub synchronizations: u64,
    /// Replays of captured graphs.
    pub replays: u64,
    /// Modelled device time from the reset to the latest modelled instant (not measured).
    pub modelled: Duration,
    /// Modelled busy time of the Cube, of the Vector units and of copies, summed over streams.
    pub modelled_cube: Duration,
    pub modelled_vector: Duration,
    pub modelled_copy: Duration,
    /// The kernels' roofline bounds summed over streams: each `max(FLOPs / peak, bytes /
    /// HBM bandwidth)` with the Cube at its FP16 peak and no launch cost (modelled).
    pub roofline: Duration,
}

impl RunCounters {
    /// The modelled elapsed time in milliseconds.
    pub fn modelled_latency_ms(&self) -> f64 {
        self.modelled.as_secs_f64() * 1e3
    }

    /// The summed roofline bound of the kernels in milliseconds.
    pub fn roofline_ms(&self) -> f64 {
        self.roofline.as_secs_f64() * 1e3
    }
}

impl From<aclEmuRunCounters> for RunCounters {
    fn from(c: aclEmuRunCounters) -> Self {
        RunCounters {
            phase1_calls: c.phase1_calls,
            phase2_calls: c.phase2_calls,
            h2d_copies: c.h2d_copies,
            d2h_copies: c.d2h_copies,
            d2d_copies: c.d2d_copies,
            h2d_bytes: c.h2d_bytes,
            d2h_bytes: c.d2h_bytes,
            d2d_bytes: c.d2d_bytes,
            allocations: c.allocations,
            allocated_bytes: c.allocated_bytes,
            synchronizations: c.synchronizations,
            replays: c.replays,
            modelled: Duration::from_nanos(c.modelled_ns),
            modelled_cube: Duration::from_nanos(c.modelled_cube_ns),
            modelled_vector: Duration::from_nanos(c.modelled_vector_ns),
            modelled_copy: Duration::from_nanos(c.modelled_copy_ns),
            roofline: Duration::from_nanos(c.modelled_roofline_ns),
        }
    }
}

/// The emulator under a backend (cheap to clone; keeps the libraries loaded).
#[derive(Clone, Debug)]
pub struct Emulator {
    api: Arc<Api>,
}

impl Emulator {
    /// `Some` when the loaded libraries export the emulator's counter functions.
    pub(crate) fn probe(api: &Arc<Api>) -> Option<Emulator> {
        let present =
            api.optional(api.aclEmuGetRunCounters()).is_some() && api.optional(api.aclEmuResetRunCounters()).is_some();
        present.then(|| Emulator { api: api.clone() })
    }

    /// What was counted and modelled since the last [`reset`](Self::reset).
    pub fn counters(&self) -> Result<RunCounters, AclBackendError> {
        Ok(emu::get_run_counters(&self.api)?.into())
    }

    /// Zeroes the counters and restarts the modelled elapsed time.
    pub fn reset(&self) -> Result<(), AclBackendError> {
        Ok(emu::reset_run_counters(&self.api)?)
    }
}
