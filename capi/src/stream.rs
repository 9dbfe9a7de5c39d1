//! `npurt_stream` and `npurt_event`: user streams, markers in them, waits and timing.

use crate::error::{guard, guard_void, npurt_status};
use crate::ffi::{handle, out_ptr, write};
use crate::runtime::{device_index, npurt_runtime};
use npurt::{Event, Stream};

/// An asynchronous in-order queue of work on one device. Opaque; made by
/// `npurt_stream_new`, freed by `npurt_stream_free`.
pub struct npurt_stream {
    pub(crate) stream: Stream,
}

/// A marker in a stream, for cross-stream waits and timing. Opaque; made by
/// `npurt_event_new`, freed by `npurt_event_free`.
pub struct npurt_event {
    event: Event,
}

/// Makes a user stream on `device` (at most `max_streams` alive per device, else
/// `NPURT_ERR_DEVICE`). Work queued on it runs in order, asynchronously.
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_stream_new(
    rt: *mut npurt_runtime,
    device: i32,
    out: *mut *mut npurt_stream,
) -> npurt_status {
    guard(|| {
        // SAFETY: `rt` is NULL or live (the caller's contract).
        let rt = &unsafe { handle(rt, "runtime") }?.rt;
        out_ptr(out, "out")?;
        let d = device_index(rt, device)?;
        let stream = rt.stream(d)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, Box::into_raw(Box::new(npurt_stream { stream }))) };
        Ok(())
    })
}

/// Waits for everything queued on the stream; reports (once) the first failure of queued
/// work since the last synchronisation, naming the op, the stream and the submission
/// number.
///
/// # Safety
/// `stream` is NULL or a live stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_stream_synchronize(stream: *mut npurt_stream) -> npurt_status {
    guard(|| {
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { handle(stream, "stream") }?;
        Ok(s.stream.synchronize()?)
    })
}

/// Frees a stream (NULL is accepted) after waiting for the work queued on it. Tensors
/// written on it stay valid.
///
/// # Safety
/// `stream` is NULL or a stream not yet freed; no other thread uses it during or after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_stream_free(stream: *mut npurt_stream) {
    if stream.is_null() {
        return;
    }
    guard_void("npurt_stream_free", || {
        // SAFETY: came from Box::into_raw in npurt_stream_new; freed once.
        let s = unsafe { Box::from_raw(stream) };
        if let Err(e) = s.stream.synchronize() {
            log::warn!("npurt_stream_free: work queued on {} failed: {e}", s.stream);
        }
        drop(s);
    });
}

/// Makes an event on `device` (not yet recorded).
///
/// # Safety
/// `rt` is NULL or a live runtime; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_new(
    rt: *mut npurt_runtime,
    device: i32,
    out: *mut *mut npurt_event,
) -> npurt_status {
    guard(|| {
        // SAFETY: `rt` is NULL or live (the caller's contract).
        let rt = &unsafe { handle(rt, "runtime") }?.rt;
        out_ptr(out, "out")?;
        let d = device_index(rt, device)?;
        let event = rt.event(d)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, Box::into_raw(Box::new(npurt_event { event }))) };
        Ok(())
    })
}

/// (Re-)records the event at the current end of `stream` (same runtime and device).
///
/// # Safety
/// `event` and `stream` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_record(event: *mut npurt_event, stream: *mut npurt_stream) -> npurt_status {
    guard(|| {
        // SAFETY: NULL or live (the caller's contract).
        let e = unsafe { handle(event, "event") }?;
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { handle(stream, "stream") }?;
        Ok(e.event.record(&s.stream)?)
    })
}

/// Makes work queued on `stream` from now on wait for the latest record of `event`.
///
/// # Safety
/// `stream` and `event` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_stream_wait_event(stream: *mut npurt_stream, event: *const npurt_event) -> npurt_status {
    guard(|| {
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { handle(stream, "stream") }?;
        // SAFETY: NULL or live (the caller's contract).
        let e = unsafe { handle(event, "event") }?;
        Ok(s.stream.wait(&e.event)?)
    })
}

/// Waits until the work before the event's latest record has finished.
///
/// # Safety
/// `event` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_synchronize(event: *mut npurt_event) -> npurt_status {
    guard(|| {
        // SAFETY: NULL or live (the caller's contract).
        let e = unsafe { handle(event, "event") }?;
        Ok(e.event.synchronize()?)
    })
}

/// `*done` = 1 when the work before the event's latest record has finished, else 0.
///
/// # Safety
/// `event` is NULL or live; `done` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_query(event: *const npurt_event, done: *mut i32) -> npurt_status {
    guard(|| {
        // SAFETY: NULL or live (the caller's contract).
        let e = unsafe { handle(event, "event") }?;
        out_ptr(done, "done")?;
        let d = e.event.query()?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(done, i32::from(d)) };
        Ok(())
    })
}

/// `*ms` = milliseconds from `start` to `end`; both recorded on the same device and
/// completed.
///
/// # Safety
/// `start` and `end` are NULL or live; `ms` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_elapsed_ms(
    start: *const npurt_event,
    end: *const npurt_event,
    ms: *mut f32,
) -> npurt_status {
    guard(|| {
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { handle(start, "start") }?;
        // SAFETY: NULL or live (the caller's contract).
        let e = unsafe { handle(end, "end") }?;
        out_ptr(ms, "ms")?;
        let d = e.event.elapsed_since(&s.event)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(ms, (d.as_secs_f64() * 1e3) as f32) };
        Ok(())
    })
}

/// Frees an event (NULL is accepted).
///
/// # Safety
/// `event` is NULL or an event not yet freed; no other thread uses it during or after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_free(event: *mut npurt_event) {
    if event.is_null() {
        return;
    }
    guard_void("npurt_event_free", || {
        // SAFETY: came from Box::into_raw in npurt_event_new; freed once.
        drop(unsafe { Box::from_raw(event) });
    });
}
