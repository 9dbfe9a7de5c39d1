//! acl-emu's counters and modelled clock as the benchmarks read them: zeroed before a
//! timed run, read after it. Without the `acl` feature, or over a real device, there is no
//! emulator and both say so.

use npurt::{Result, Runtime};

/// The emulator's counters of one run, and its modelled latency (not a measurement).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct EmulatorRun {
    pub(super) phase1_calls: u64,
    pub(super) phase2_calls: u64,
    pub(super) h2d_copies: u64,
    pub(super) d2h_copies: u64,
    pub(super) d2d_copies: u64,
    pub(super) h2d_bytes: u64,
    pub(super) d2h_bytes: u64,
    pub(super) d2d_bytes: u64,
    pub(super) allocations: u64,
    pub(super) synchronizations: u64,
    pub(super) replays: u64,
    pub(super) modelled_latency_ms: f64,
    /// The kernels' roofline bounds summed (modelled): each max(FLOPs / Cube FP16 or
    /// Vector peak, bytes / HBM bandwidth), no launch cost.
    pub(super) roofline_ms: f64,
}

/// Zeroes the emulator's counters and restarts its modelled clock; false when the
/// runtime is not over acl-emu.
#[cfg(feature = "acl")]
pub(super) fn emulator_reset(rt: &Runtime) -> Result<bool> {
    match rt.acl_emulator() {
        Some(e) => {
            e.reset()?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// What the emulator counted since [`emulator_reset`].
#[cfg(feature = "acl")]
pub(super) fn emulator_read(rt: &Runtime) -> Result<Option<EmulatorRun>> {
    let Some(e) = rt.acl_emulator() else { return Ok(None) };
    let c = e.counters()?;
    Ok(Some(EmulatorRun {
        phase1_calls: c.phase1_calls,
        phase2_calls: c.phase2_calls,
        h2d_copies: c.h2d_copies,
        d2h_copies: c.d2h_copies,
        d2d_copies: c.d2d_copies,
        h2d_bytes: c.h2d_bytes,
        d2h_bytes: c.d2h_bytes,
        d2d_bytes: c.d2d_bytes,
        allocations: c.allocations,
        synchronizations: c.synchronizations,
        replays: c.replays,
        modelled_latency_ms: c.modelled_latency_ms(),
        roofline_ms: c.roofline_ms(),
    }))
}

#[cfg(not(feature = "acl"))]
pub(super) fn emulator_reset(_rt: &Runtime) -> Result<bool> {
    Ok(false)
}

#[cfg(not(feature = "acl"))]
pub(super) fn emulator_read(_rt: &Runtime) -> Result<Option<EmulatorRun>> {
    Ok(None)
}
