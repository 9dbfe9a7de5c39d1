//! Streams and events.
//!
//! Each stream is an explicit ACL stream (`aclrtCreateStreamWithConfig` with
//! `ACL_STREAM_FAST_LAUNCH`, falling back to `aclrtCreateStream`) owning a workspace
//! (aclnn phase 2) and a scratch buffer (intermediates of composed ops), which grow
//! after synchronising the stream. A stream remembers the ops queued since its last
//! synchronisation, so an asynchronous failure names them, and keeps a failure found
//! by a synchronisation made on its behalf (e.g. by a free) for its own next one.
//!
//! Events are created with `ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE` where the release
//! has `aclrtCreateEventWithFlag`; an event never recorded counts as complete.

use crate::error::AclBackendError;
use crate::memory;
use acl_sys::{AclError, Api, aclrtEvent, aclrtStream, result};
use runtime::StreamId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

type BResult<T> = std::result::Result<T, AclBackendError>;

/// The id of every device's default stream (an explicit ACL stream made at start-up).
pub const DEFAULT_STREAM: StreamId = StreamId(0);

/// Locks `m`, recovering a poisoned lock (the records stay consistent across a panic).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A device buffer owned by a stream (its workspace or scratch).
#[derive(Default)]
pub(crate) struct Buf {
    pub ptr: u64,
    pub size: usize,
}

/// One stream of a device.
pub(crate) struct StreamRec {
    handle: usize,
    /// Work was queued since the last successful synchronisation.
    pub dirty: AtomicBool,
    /// An error found by a synchronisation made on the stream's behalf (e.g. by `free`),
    /// reported at its next synchronisation.
    pub pending: Mutex<Option<runtime::Error>>,
    pub workspace: Mutex<Buf>,
    pub scratch: Mutex<Buf>,
    /// (op, submission) queued since the last synchronisation, named by async errors.
    pub inflight: Mutex<Vec<(&'static str, u64)>>,
    pub label: String,
    /// Set once the stream is destroyed (after synchronising it). Held while destroying,
    /// so that whoever holds it sees a stream that is either live or done with all work.
    pub gone: Mutex<bool>,
}

impl StreamRec {
    pub fn raw(&self) -> aclrtStream {
        self.handle as aclrtStream
    }

    /// Notes work queued on the stream (an op, a copy, an event record or wait).
    pub fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Notes `op` (submission `seq`) queued on the stream.
    pub fn queued(&self, op: &'static str, seq: u64) {
        self.mark_dirty();
        lock(&self.inflight).push((op, seq));
    }
}

/// A new ACL stream on the bound device; `label` names it in errors
/// (`acl:<device>/default`, `acl:<device>/stream<id>`).
pub(crate) fn create(api: &Api, label: String) -> BResult<StreamRec> {
    let s = match result::create_stream_with_config(api, 0, acl_sys::ACL_STREAM_FAST_LAUNCH) {
        Err(e) if e.is_missing() => {
            log::debug!("acl-sys: optional symbol unavailable: {e}");
            result::create_stream(api)?
        }
        r => r?,
    };
    Ok(StreamRec {
        handle: s as usize,
        dirty: AtomicBool::new(false),
        pending: Mutex::new(None),
        workspace: Mutex::new(Buf::default()),
        scratch: Mutex::new(Buf::default()),
        inflight: Mutex::new(Vec::new()),
        label,
        gone: Mutex::new(false),
    })
}

/// Waits for the stream's queued work. A failure of that work (or one kept from a
/// synchronisation made on the stream's behalf) is `runtime::Error::Async` naming the
/// ops queued since the last synchronisation.
pub(crate) fn sync(api: &Api, rec: &StreamRec) -> runtime::Result<()> {
    if let Some(e) = lock(&rec.pending).take() {
        return Err(e);
    }
    // SAFETY: a live stream of the bound device (streams are destroyed only after they
    // are removed from the device's table).
    let r = unsafe { result::synchronize_stream(api, rec.raw()) };
    let inflight = std::mem::take(&mut *lock(&rec.inflight));
    if let Err(e) = r {
        let e = AclBackendError::from(e);
        let ops: Vec<&str> = inflight.iter().map(|(o, _)| *o).collect();
        return Err(runtime::Error::Async {
            op: if ops.is_empty() { "(no op)".into() } else { ops.join(", ") },
            stream: rec.label.clone(),
            seq: inflight.last().map_or(0, |x| x.1),
            source: std::sync::Arc::new(e),
        });
    }
    rec.dirty.store(false, Ordering::Release);
    Ok(())
}

/// [`sync`] as a backend error (for the backend's own waits).
pub(crate) fn sync_backend(api: &Api, rec: &StreamRec) -> BResult<()> {
    sync(api, rec).map_err(AclBackendError::Stream)
}

/// [`sync_keeping_errors`] unless the stream was destroyed, which synchronised it (a
/// frozen plan's teardown: the streams that ran it may be gone).
pub(crate) fn sync_if_live(api: &Api, rec: &StreamRec) {
    let gone = lock(&rec.gone);
    if !*gone {
        sync_keeping_errors(api, rec);
    }
}

/// [`sync`] on behalf of someone else: a failure is kept for the stream's next one.
pub(crate) fn sync_keeping_errors(api: &Api, rec: &StreamRec) {
    if let Err(e) = sync(api, rec) {
        lock(&rec.pending).get_or_insert(e);
    }
}

/// A per-stream buffer (`which`: the stream's workspace or scratch) of at least
/// `bytes`; it grows after synchronising the stream, whose queued work may still use
/// the old one. Failures name `op`.
pub(crate) fn buffer(api: &Api, op: &'static str, rec: &StreamRec, which: &Mutex<Buf>, bytes: usize) -> BResult<u64> {
    if bytes == 0 {
        return Ok(0);
    }
    let mut b = lock(which);
    if b.size >= bytes {
        return Ok(b.ptr);
    }
    if b.ptr != 0 {
        sync_keeping_errors(api, rec);
        memory::free(api, b.ptr)?;
        *b = Buf::default();
    }
    let size = bytes.next_power_of_two().max(64 << 10);
    let p = memory::malloc(api, Some(op), size)?;
    *b = Buf { ptr: p, size };
    Ok(p)
}

fn free_buffers(api: &Api, rec: &StreamRec) {
    for m in [&rec.workspace, &rec.scratch] {
        let mut b = lock(m);
        if b.ptr != 0 {
            if let Err(e) = memory::free(api, b.ptr) {
                log::error!("acl: freeing a stream buffer: {e}");
            }
            *b = Buf::default();
        }
    }
}

/// Synchronises the stream (its failure is dropped: nobody can synchronise it again),
/// frees its buffers and destroys it (retried once).
pub(crate) fn destroy(api: &Api, rec: &StreamRec) -> BResult<()> {
    let mut gone = lock(&rec.gone);
    let _ = sync(api, rec);
    *gone = true;
    free_buffers(api, rec);
    // SAFETY: a live stream, synchronised, no longer reachable from the device's table.
    match unsafe { result::destroy_stream(api, rec.raw()) } {
        Ok(()) => return Ok(()),
        Err(e) if e.is_missing() => return Err(e.into()),
        Err(e) => log::warn!("acl: {e}; retrying once"),
    }
    // SAFETY: as above; the first attempt failed, so the stream is still live.
    Ok(unsafe { result::destroy_stream(api, rec.raw()) }?)
}

/// One event of a device.
pub(crate) struct EventRec {
    pub handle: usize,
    /// Recorded at least once (an event never recorded counts as complete).
    pub recorded: bool,
}

impl EventRec {
    pub fn raw(&self) -> aclrtEvent {
        self.handle as aclrtEvent
    }
}

/// A new event on the bound device (cross-stream waits and timestamps where the release
/// takes flags).
pub(crate) fn create_event(api: &Api) -> BResult<EventRec> {
    let e = match result::create_event_with_flag(api, acl_sys::ACL_EVENT_SYNC | acl_sys::ACL_EVENT_TIME_LINE) {
        Err(e) if e.is_missing() => {
            log::debug!("acl-sys: optional symbol unavailable: {e}");
            result::create_event(api)?
        }
        r => r?,
    };
    Ok(EventRec { handle: e as usize, recorded: false })
}

/// Destroys a live event, no longer reachable from the device's table.
pub(crate) fn destroy_event(api: &Api, event: aclrtEvent) -> Result<(), AclError> {
    // SAFETY: a live event that nothing can name any more (destroying a pending event is
    // allowed).
    unsafe { result::destroy_event(api, event) }
}

/// Records `event` on the stream.
pub(crate) fn record(api: &Api, event: aclrtEvent, rec: &StreamRec) -> BResult<()> {
    // SAFETY: a live event and stream of the bound device.
    unsafe { result::record_event(api, event, rec.raw()) }?;
    rec.mark_dirty();
    Ok(())
}

/// Later work on the stream waits for the recorded `event`.
pub(crate) fn wait(api: &Api, rec: &StreamRec, event: aclrtEvent) -> BResult<()> {
    // SAFETY: a live event (created with ACL_EVENT_SYNC where possible) and stream.
    unsafe { result::stream_wait_event(api, rec.raw(), event) }?;
    rec.mark_dirty();
    Ok(())
}

/// Whether the recorded `event` has completed; `None` when the release has neither
/// query call (the caller synchronises instead).
pub(crate) fn query(api: &Api, event: aclrtEvent) -> BResult<Option<bool>> {
    // SAFETY: a live event of the bound device.
    match unsafe { result::query_event_status(api, event) } {
        Ok(st) => return Ok(Some(st == acl_sys::ACL_EVENT_RECORDED_STATUS_COMPLETE)),
        Err(e) if e.is_missing() => log::debug!("acl-sys: optional symbol unavailable: {e}"),
        Err(e) => return Err(e.into()),
    }
    // SAFETY: as above (the deprecated enum numbers COMPLETE as 0).
    match unsafe { result::query_event(api, event) } {
        Ok(st) => Ok(Some(st == acl_sys::ACL_EVENT_STATUS_COMPLETE)),
        Err(e) if e.is_missing() => {
            log::debug!("acl-sys: optional symbol unavailable: {e}");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Waits until the recorded `event` has completed.
pub(crate) fn synchronize_event(api: &Api, event: aclrtEvent) -> BResult<()> {
    // SAFETY: a live event of the bound device.
    Ok(unsafe { result::synchronize_event(api, event) }?)
}

/// The time between two recorded events.
pub(crate) fn elapsed(api: &Api, start: aclrtEvent, end: aclrtEvent) -> BResult<Duration> {
    // SAFETY: two live events of the bound device.
    let ms = unsafe { result::event_elapsed_time(api, start, end) }?;
    Ok(Duration::from_secs_f64((ms.max(0.0) as f64) / 1e3))
}
