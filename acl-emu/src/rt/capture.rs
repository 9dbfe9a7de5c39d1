//! Stream capture into model runtime instances (`aclmdlRI*`).
//!
//! Between `aclmdlRICaptureBegin` and `aclmdlRICaptureEnd`, work queued on the stream is
//! recorded instead of run:
//! * an aclnn launch is checked as usual, then recorded (a copy of its executor, so that a
//!   one-shot executor replays too, its workspace and its modelled cost);
//! * an event record (`aclrtRecordEvent`) is recorded; a stream that waits on such an event
//!   (`aclrtStreamWaitEvent`) joins the capture, and its work is recorded too (each stream
//!   of a capture is a *lane*);
//! * anything else on a captured stream (copies, fills) is refused with 207000: acl-emu
//!   records aclnn launches and event dependencies only.
//!
//! Ending the capture on the stream that began it requires every other lane to have
//! joined back (its last work recorded before an event the first stream waited on;
//! 107025 otherwise). Ending ends it whatever the call returns: on failure the recording is
//! dropped and no instance is handed out. `aclmdlRIExecuteAsync` queues the recorded
//! launches on a stream in recording order (an order the recorded dependencies allow) and
//! counts one replay. On the modelled clock a replay costs [`REPLAY_PS`], then each lane
//! advances by its kernels (with [`REPLAYED_LAUNCH_PS`] in place of [`LAUNCH_PS`]) and its
//! waits, independently of the others; the replay ends when the last lane does. A replay
//! touches the addresses its launches had when recorded; one whose memory was freed since
//! fails at the next synchronisation, as a kernel touching freed memory does.
//!
//! Checks, with CANN's codes: the default (NULL) stream cannot be captured (100000), nor
//! a stream already being captured (107027); ending a capture not begun on that stream is
//! 107029; an unknown mode (100000) or instance (107000); a captured stream waiting on an
//! event recorded outside its capture (107024) or in another capture (107032); replaying
//! on a stream of another device (107003) or on a stream being captured (107027).

use crate::error::{Fail, R, fail};
use crate::ffi::{guard, guard_always, h, put};
use crate::model::{Cost, LAUNCH_PS, REPLAY_PS, REPLAYED_LAUNCH_PS};
use crate::ops;
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use std::collections::HashMap;
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
    t.captures.insert(stream, ri);
    let c = Capturing { device: s.device, lanes: vec![stream], tasks: Vec::new(), tokens: 0, events: HashMap::new() };
    t.capturing.insert(ri, c);
    s.capturing.store(true, Ordering::Relaxed);
    Ok(())
}

/// Releases every lane of capture `ri` (the streams take work again); the recording.
fn release(t: &mut Tables, ri: u64) -> Option<Capturing> {
    let c = t.capturing.remove(&ri)?;
    for l in &c.lanes {
        t.captures.remove(l);
        if let Some(s) = t.streams.get(l) {
            s.capturing.store(false, Ordering::Relaxed);
        }
    }
    Some(c)
}

/// Lanes other than the first whose last work no later wait of the first lane covers.
fn unjoined(c: &Capturing) -> Vec<usize> {
    (1..c.lanes.len())
        .filter(|&lane| {
            let last = c.tasks.iter().rposition(|k| match k {
                Task::Kernel { lane: l, .. } | Task::Record { lane: l, .. } | Task::Wait { lane: l, .. } => *l == lane,
            });
            let Some(last) = last else { return false };
            // A record on this lane at or after its last work, waited on by lane 0 later.
            !c.tasks[last..].iter().enumerate().any(|(i, k)| match k {
                Task::Record { lane: l, token } if *l == lane => {
                    c.tasks[last + i..].iter().any(|w| matches!(w, Task::Wait { lane: 0, token: tk } if tk == token))
                }
                _ => false,
            })
        })
        .collect()
}

fn end(t: &mut Tables, stream: u64) -> R<u64> {
    t.stream(stream)?;
    let ri = match t.captures.get(&stream) {
        Some(&ri) if t.capturing.get(&ri).is_some_and(|c| c.lanes[0] == stream) => ri,
        Some(_) => {
            return fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED, "the capture must end on the stream that began it");
        }
        None => return fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED, format!("stream {stream:#x} is not being captured")),
    };
    let c = release(t, ri).ok_or_else(|| Fail(ACL_ERROR_RT_INTERNAL_ERROR, "capture vanished".into()))?;
    let open = unjoined(&c);
    if !open.is_empty() {
        return fail(
            ACL_ERROR_RT_STREAM_UNJOINED,
            format!("{} captured stream(s) never joined back the stream that began the capture", open.len()),
        );
    }
    t.models.insert(ri, Model { device: c.device, tasks: c.tasks, lanes: c.lanes.len(), tokens: c.tokens });
    Ok(ri)
}

/// `aclrtRecordEvent` on a captured stream: recorded in its capture.
pub(crate) fn record_event(t: &mut Tables, stream: u64, event: u64) -> Option<()> {
    let ri = *t.captures.get(&stream)?;
    let c = t.capturing.get_mut(&ri)?;
    let lane = c.lanes.iter().position(|&l| l == stream)?;
    let token = c.tokens;
    c.tokens += 1;
    c.events.insert(event, token);
    c.tasks.push(Task::Record { lane, token });
    Some(())
}

/// `aclrtStreamWaitEvent`: `Ok(true)` when the wait was recorded in a capture (the stream
/// joins the event's capture if it is not in it yet), `Ok(false)` when no capture is
/// involved.
pub(crate) fn wait_event(t: &mut Tables, stream: u64, event: u64) -> R<bool> {
    let owner = t.capturing.iter().find(|(_, c)| c.events.contains_key(&event)).map(|(ri, _)| *ri);
    let mine = t.captures.get(&stream).copied();
    let ri = match (owner, mine) {
        (None, None) => return Ok(false),
        (None, Some(_)) => {
            return fail(
                ACL_ERROR_RT_CAPTURE_DEPENDENCY,
                "a captured stream waits on an event recorded outside the capture",
            );
        }
        (Some(o), Some(m)) if o != m => {
            return fail(ACL_ERROR_STREAM_CAPTURE_CONFLICT, "the event was recorded in another capture");
        }
        (Some(o), _) => o,
    };
    if mine.is_none() {
        let s = t.stream(stream)?;
        if t.capturing.get(&ri).is_some_and(|c| c.device != s.device) {
            return fail(ACL_ERROR_RT_STREAM_CONTEXT, "the event's capture is on another device");
        }
        s.capturing.store(true, Ordering::Relaxed);
        t.captures.insert(stream, ri);
        if let Some(c) = t.capturing.get_mut(&ri) {
            c.lanes.push(stream);
        }
    }
    let c = t.capturing.get_mut(&ri).ok_or_else(|| Fail(ACL_ERROR_RT_INTERNAL_ERROR, "capture vanished".into()))?;
    let lane = c.lanes.iter().position(|&l| l == stream).unwrap_or(0);
    let token = c.events[&event];
    c.tasks.push(Task::Wait { lane, token });
    Ok(true)
}

/// A captured stream is destroyed: a capture it began is dropped; otherwise it leaves its
/// capture (which can then not end cleanly unless it had joined back).
pub(crate) fn stream_destroyed(t: &mut Tables, stream: u64) {
    let Some(ri) = t.captures.get(&stream).copied() else { return };
    if t.capturing.get(&ri).is_some_and(|c| c.lanes[0] == stream) {
        release(t, ri);
    } else {
        t.captures.remove(&stream);
    }
}

fn execute(t: &mut Tables, ri: u64, stream: u64) -> R<()> {
    let m = t
        .models
        .get(&ri)
        .ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, format!("unknown model runtime instance {ri:#x}")))?;
    let (device, tasks, lanes, tokens) = (m.device, m.tasks.clone(), m.lanes, m.tokens);
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
    let start = t.timeline.start_of(&s.clock).saturating_add(REPLAY_PS);
    let mut clock = vec![start; lanes];
    let mut at = vec![start; tokens];
    let mut busy = Vec::new();
    for k in tasks {
        match k {
            Task::Kernel { lane, launch } => {
                let Captured { exec, ws, ws_size, cost } = *launch;
                let ps = cost.ps.saturating_sub(LAUNCH_PS).saturating_add(REPLAYED_LAUNCH_PS);
                clock[lane] = clock[lane].saturating_add(ps);
                busy.push(Cost { ps, ..cost });
                s.submit(Box::new(move || ops::run(exec, ws, ws_size)))?;
            }
            Task::Record { lane, token } => at[token] = clock[lane],
            Task::Wait { lane, token } => clock[lane] = clock[lane].max(at[token]),
        }
    }
    t.run.replays += 1;
    let end = clock.into_iter().max().unwrap_or(start);
    t.timeline.run_until(&s.clock, end, &busy);
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
            Some(ri) => (ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE, *ri),
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
