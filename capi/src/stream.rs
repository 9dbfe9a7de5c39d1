//! `npurt_stream` and `npurt_event`: user streams, markers in them, waits and timing.

use crate::error::{guard, npurt_status};
use crate::ffi::{out_ptr, write};
use crate::handles::{Kind, Object, get, insert, release};
use crate::runtime::{device_index, npurt_runtime};
use npurt::{Event, Stream};

/// An asynchronous in-order queue of work on one device. Opaque; made by
/// `npurt_stream_new`, freed by `npurt_stream_free`. Send and Sync (a `Stream`).
pub struct npurt_stream {
    pub(crate) stream: Stream,
}

impl Object for npurt_stream {
    const KIND: Kind = Kind::Stream;
}

/// A marker in a stream, for cross-stream waits and timing. Opaque; made by
/// `npurt_event_new`, freed by `npurt_event_free`. Send and Sync (an `Event`).
pub struct npurt_event {
    event: Event,
}

impl Object for npurt_event {
    const KIND: Kind = Kind::Event;
}

/// Makes a user stream on `device` (at most `max_streams` alive per device, else
/// `NPURT_ERR_DEVICE`). Work queued on it runs in order, asynchronously.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_stream_new(
    rt: *mut npurt_runtime,
    device: i32,
    out: *mut *mut npurt_stream,
) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        out_ptr(out, "out")?;
        let d = device_index(rt, device)?;
        let stream = rt.stream(d)?;
        let h = insert(npurt_stream { stream })?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, h) };
        Ok(())
    })
}

/// Waits for everything queued on the stream; reports (once) the first failure of queued
/// work since the last synchronisation, naming the op, the stream and the submission
/// number.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_stream_synchronize(stream: *mut npurt_stream) -> npurt_status {
    guard(|| {
        let s = get(stream, "stream")?;
        Ok(s.stream.synchronize()?)
    })
}

/// Frees a stream (NULL is accepted: `NPURT_OK`) after waiting for the work queued on it
/// (a failure of that work is logged, not returned). Tensors written on it stay valid. A
/// handle already freed, or not a stream, is `NPURT_ERR_INVALID_HANDLE`.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_stream_free(stream: *mut npurt_stream) -> npurt_status {
    guard(|| {
        if let Some(s) = release(stream, "stream")? {
            if let Err(e) = s.stream.synchronize() {
                log::warn!("npurt_stream_free: work queued on {} failed: {e}", s.stream);
            }
            drop(s);
        }
        Ok(())
    })
}

/// Makes an event on `device` (not yet recorded).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_new(
    rt: *mut npurt_runtime,
    device: i32,
    out: *mut *mut npurt_event,
) -> npurt_status {
    guard(|| {
        let rt = get(rt, "runtime")?;
        let rt = &rt.rt;
        out_ptr(out, "out")?;
        let d = device_index(rt, device)?;
        let event = rt.event(d)?;
        let h = insert(npurt_event { event })?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(out, h) };
        Ok(())
    })
}

/// (Re-)records the event at the current end of `stream` (same runtime and device).
#[unsafe(no_mangle)]
pub extern "C" fn npurt_event_record(event: *mut npurt_event, stream: *mut npurt_stream) -> npurt_status {
    guard(|| {
        let e = get(event, "event")?;
        let s = get(stream, "stream")?;
        Ok(e.event.record(&s.stream)?)
    })
}

/// Makes work queued on `stream` from now on wait for the latest record of `event`.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_stream_wait_event(stream: *mut npurt_stream, event: *const npurt_event) -> npurt_status {
    guard(|| {
        let s = get(stream, "stream")?;
        let e = get(event, "event")?;
        Ok(s.stream.wait(&e.event)?)
    })
}

/// Waits until the work before the event's latest record has finished.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_event_synchronize(event: *mut npurt_event) -> npurt_status {
    guard(|| {
        let e = get(event, "event")?;
        Ok(e.event.synchronize()?)
    })
}

/// `*done` = 1 when the work before the event's latest record has finished, else 0.
///
/// # Safety
/// `done` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_query(event: *const npurt_event, done: *mut i32) -> npurt_status {
    guard(|| {
        let e = get(event, "event")?;
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
/// `ms` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npurt_event_elapsed_ms(
    start: *const npurt_event,
    end: *const npurt_event,
    ms: *mut f32,
) -> npurt_status {
    guard(|| {
        let s = get(start, "start")?;
        let e = get(end, "end")?;
        out_ptr(ms, "ms")?;
        let d = e.event.elapsed_since(&s.event)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { write(ms, (d.as_secs_f64() * 1e3) as f32) };
        Ok(())
    })
}

/// Frees an event (NULL is accepted: `NPURT_OK`). A handle already freed, or not an
/// event, is `NPURT_ERR_INVALID_HANDLE`.
#[unsafe(no_mangle)]
pub extern "C" fn npurt_event_free(event: *mut npurt_event) -> npurt_status {
    guard(|| {
        drop(release(event, "event")?);
        Ok(())
    })
}
