//! acl-emu's counters and modelled clock as the benchmarks read them: zeroed before a
//! timed run, read after it, and reported as JSON. Without the `acl` feature, or over a
//! real device, there is no emulator and both say so.

use npurt::{Result, Runtime};

/// The emulator's counters of one run, and its modelled latency (not a measurement): the
/// Ascend backend's record, through the facade.
#[cfg(feature = "acl")]
pub(super) use npurt::AclRunCounters as EmulatorRun;

/// Without the Ascend backend there is no emulator, so no record of one is ever made.
#[cfg(not(feature = "acl"))]
#[derive(Clone, Copy, Debug)]
pub(super) enum EmulatorRun {}

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
    Ok(Some(e.counters()?))
}

/// One run's counters, its modelled latency and the kernels' summed roofline bound (each
/// max(FLOPs / Cube FP16 or Vector peak, bytes / HBM bandwidth), no launch cost), both
/// modelled, in milliseconds.
#[cfg(feature = "acl")]
pub(super) fn emulator_json(e: &EmulatorRun) -> serde_json::Value {
    let (latency, roofline) = (e.modelled_latency_ms(), e.roofline_ms());
    serde_json::json!({
        "phase1_calls": e.phase1_calls,
        "phase2_calls": e.phase2_calls,
        "h2d_copies": e.h2d_copies,
        "d2h_copies": e.d2h_copies,
        "d2d_copies": e.d2d_copies,
        "h2d_bytes": e.h2d_bytes,
        "d2h_bytes": e.d2h_bytes,
        "d2d_bytes": e.d2d_bytes,
        "allocations": e.allocations,
        "synchronizations": e.synchronizations,
        "replays": e.replays,
        "modelled_latency_ms": latency,
        "roofline_ms": roofline,
        // The modelled latency over the bound (`null` when the bound is 0).
        "latency_over_roofline": (roofline > 0.0).then(|| latency / roofline),
    })
}

/// A generation's modelled (not measured) device time and aclnn calls (phase 1:
/// GetWorkspaceSize, phase 2: launches), from the counters at the end of prefill and at
/// the end of the call: prefill's, and each of the `steps` decode steps'.
#[cfg(feature = "acl")]
pub(super) fn generation_json(prefill: &EmulatorRun, end: &EmulatorRun, steps: usize) -> serde_json::Value {
    let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / steps as f64;
    let (p, e) = (prefill, end);
    serde_json::json!({
        "prefill_ms": p.modelled_latency_ms(),
        "decode_ms_per_token": (e.modelled_latency_ms() - p.modelled_latency_ms()) / steps as f64,
        "prefill_phase1_calls": p.phase1_calls, "prefill_phase2_calls": p.phase2_calls,
        "decode_phase1_calls_per_step": per(p.phase1_calls, e.phase1_calls),
        "decode_phase2_calls_per_step": per(p.phase2_calls, e.phase2_calls),
    })
}

#[cfg(not(feature = "acl"))]
pub(super) fn emulator_reset(_rt: &Runtime) -> Result<bool> {
    Ok(false)
}

#[cfg(not(feature = "acl"))]
pub(super) fn emulator_read(_rt: &Runtime) -> Result<Option<EmulatorRun>> {
    Ok(None)
}

#[cfg(not(feature = "acl"))]
pub(super) fn emulator_json(e: &EmulatorRun) -> serde_json::Value {
    match *e {}
}

#[cfg(not(feature = "acl"))]
pub(super) fn generation_json(prefill: &EmulatorRun, _end: &EmulatorRun, _steps: usize) -> serde_json::Value {
    match *prefill {}
}
