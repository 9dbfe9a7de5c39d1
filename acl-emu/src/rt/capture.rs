//! Stream capture into model runtime instances (`aclmdlRI*`).
//!
//! Between `aclmdlRICaptureBegin` and `aclmdlRICaptureEnd`, each aclnn launch on the
//! stream is checked as usual and then recorded (a copy of its executor, its workspace and
//! its modelled cost) instead of queued; any other stream-ordered call on that stream
//! (copies, fills, event records and waits) is refused with 207000, since acl-emu records
//! only aclnn launches. `aclmdlRIExecuteAsync` queues the recorded launches on a stream in
//! order: one replay, costing [`REPLAY_PS`] plus each kernel with [`REPLAYED_LAUNCH_PS`]
//! in place of [`LAUNCH_PS`] on the modelled clock. A replay reads and writes the addresses
//! the launches had when they were recorded; one whose memory was freed since fails at the
//! next synchronisation, as a kernel touching freed memory does.
//!
//! Ending a capture ends it whatever the call returns: on failure the recorded launches
//! are dropped and no instance is handed out.
//!
//! Checks, with CANN's codes: the default (NULL) stream cannot be captured (100000), nor
//! a stream already being captured (107027); ending a capture that was not begun is 107029;
//! an unknown mode (100000) or instance (107000); replaying on a stream of another device
//! (107003) or on a stream being captured (107027).

use crate::error::{Fail, R, fail};
use crate::ffi::{guard, guard_always, h, put};
use crate::model::{Cost, LAUNCH_PS, REPLAY_PS, REPLAYED_LAUNCH_PS};
use crate::ops;
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use std::sync::atomic::Ordering;

fn begin(t: &mut Tables, stream: u64, mode: aclmdlRICaptureMode) -> R<()> {
    if mode.name().is_none() {
        return fail(ACL_ERROR_INVALID_PARAM, format!("unknown capture mode {}", mode.0));
    }
    if stream == 0 {
        return fail(ACL_ERROR_INVALID_PARAM, "the default stream cannot be captured");
    }
    let s = t.stream(stream)?;
    if t.captures.contains_key(&stream) {
        return fail(ACL_ERROR_RT_STREAM_CAPTURED, format!("stream {stream:#x} is already being captured"));
    }
    let ri = emu().handle(TAG_MODEL);
    t.captures.insert(stream, (ri, Vec::new()));
    s.capturing.store(true, Ordering::Relaxed);
    Ok(())
}

fn end(t: &mut Tables, stream: u64) -> R<u64> {
    let s = t.stream(stream)?;
    let (ri, tasks) = t
        .captures
        .remove(&stream)
        .ok_or_else(|| Fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED, format!("stream {stream:#x} is not being captured")))?;
    s.capturing.store(false, Ordering::Relaxed);
    t.models.insert(ri, Model { device: s.device, tasks });
    Ok(ri)
}

fn execute(t: &mut Tables, ri: u64, stream: u64) -> R<()> {
    let device = t
        .models
        .get(&ri)
        .map(|m| m.device)
        .ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, format!("unknown model runtime instance {ri:#x}")))?;
    let s = t.stream(stream)?;
    if s.device != device {
        return fail(
            ACL_ERROR_RT_STREAM_CONTEXT,
            format!("instance {ri:#x} was captured on device {device}, the stream is on device {}", s.device),
        );
    }
    if t.captures.contains_key(&stream) {
        return fail(ACL_ERROR_RT_STREAM_CAPTURED, "cannot replay on a stream that is being captured");
    }
    let tasks = t.models.get(&ri).map(|m| m.tasks.clone()).unwrap_or_default();
    t.run.replays += 1;
    t.timeline.advance(&s.clock, REPLAY_PS);
    for c in tasks {
        let cost = Cost { ps: c.cost.ps.saturating_sub(LAUNCH_PS).saturating_add(REPLAYED_LAUNCH_PS), ..c.cost };
        let Captured { exec, ws, ws_size, .. } = c;
        s.submit(Box::new(move || ops::run(exec, ws, ws_size)))?;
        t.timeline.run_on(&s.clock, cost);
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureBegin(stream: aclrtStream, mode: aclmdlRICaptureMode) -> aclError {
    guard("aclmdlRICaptureBegin", |t| begin(t, h(stream), mode))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureGetInfo(
    stream: aclrtStream,
    status: *mut aclmdlRICaptureStatus,
    modelRI: *mut aclmdlRI,
) -> aclError {
    guard("aclmdlRICaptureGetInfo", |t| {
        let hs = h(stream);
        t.stream(hs)?;
        let (st, ri) = match t.captures.get(&hs) {
            Some((ri, _)) => (ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE, *ri),
            None => (ACL_MODEL_RI_CAPTURE_STATUS_NONE, 0),
        };
        // SAFETY: C contract: each out-pointer is NULL or writable (checked by `put`).
        unsafe { put(status, st) }?;
        // SAFETY: as above.
        unsafe { put(modelRI, ri as usize as aclmdlRI) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureEnd(stream: aclrtStream, modelRI: *mut aclmdlRI) -> aclError {
    // A failing end still ends the capture (the stream takes work again) and hands out
    // no instance.
    guard_always("aclmdlRICaptureEnd", |t, entry| {
        let ri = end(t, h(stream))?;
        if let Err(e) = entry {
            t.models.remove(&ri);
            return Err(e);
        }
        if modelRI.is_null() {
            t.models.remove(&ri);
            return fail(ACL_ERROR_INVALID_PARAM, "modelRI is NULL");
        }
        // SAFETY: C contract: `modelRI` is writable (checked non-NULL above).
        unsafe { put(modelRI, ri as usize as aclmdlRI) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIExecuteAsync(modelRI: aclmdlRI, stream: aclrtStream) -> aclError {
    guard("aclmdlRIExecuteAsync", |t| execute(t, h(modelRI), h(stream)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIDestroy(modelRI: aclmdlRI) -> aclError {
    guard("aclmdlRIDestroy", |t| {
        let ri = h(modelRI);
        t.models
            .remove(&ri)
            .map(drop)
            .ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, format!("unknown model runtime instance {ri:#x}")))
    })
}
