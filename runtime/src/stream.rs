//! Streams, events and the scoped current stream, as users see them.

use crate::backend::{EventId, StreamId};
use crate::context::Inner;
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub(crate) struct StreamInner {
    pub(crate) rt: Arc<Inner>,
    /// Logical device index.
    pub(crate) device: usize,
    pub(crate) id: StreamId,
    /// A user stream (asynchronous); false for the device's default stream.
    pub(crate) user: bool,
    pub(crate) label: Arc<str>,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.user {
            let ord = self.rt.devices[self.device].ordinal;
            if let Err(e) = self.rt.backend.destroy_stream(ord, self.id) {
                log::warn!("destroying {}: {e}", self.label);
            }
            self.rt.devices[self.device].user_streams.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// An in-order queue of work on one device. Cloning shares the same stream.
///
/// `Send + Sync`: several threads may queue work on one stream; each submission is queued
/// whole, in the order the calls return. `synchronize` waits for everything queued before
/// it and reports (once) the first failure since the last synchronisation.
#[derive(Clone)]
pub struct Stream {
    pub(crate) inner: Arc<StreamInner>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.label)
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.label)
    }
}

impl Stream {
    pub fn device(&self) -> usize {
        self.inner.device
    }
    /// True for user streams, where `execute` returns before the work is done.
    pub fn is_async(&self) -> bool {
        self.inner.user
    }
    pub fn id(&self) -> StreamId {
        self.inner.id
    }
    fn ordinal(&self) -> usize {
        self.inner.rt.devices[self.inner.device].ordinal
    }
    /// Waits for every op queued so far; reports the first failure of queued work.
    pub fn synchronize(&self) -> Result<()> {
        self.inner
            .rt
            .backend
            .synchronize_stream(self.ordinal(), self.inner.id)
            .map_err(|e| self.inner.rt.relabel_async(self.inner.device, e))
    }
    /// Records a new event at the current end of the stream. On the default stream the
    /// event is complete on return, like every default-stream operation.
    pub fn record(&self) -> Result<Event> {
        let ev = Event::new_on(&self.inner.rt, self.inner.device)?;
        ev.record(self)?;
        Ok(ev)
    }
    /// [`record`](Self::record) without waiting, on any stream: for the runtime's own
    /// ordering of the default stream against user streams (compiled graphs, profiles).
    pub(crate) fn record_queued(&self) -> Result<Event> {
        let ev = Event::new_on(&self.inner.rt, self.inner.device)?;
        ev.record_queued(self)?;
        Ok(ev)
    }
    /// Makes work queued on this stream from now on wait for `event`.
    pub fn wait(&self, event: &Event) -> Result<()> {
        if !Arc::ptr_eq(&event.rt, &self.inner.rt) {
            return Err(Error::on_stream(
                self.inner.device,
                self.inner.label.to_string(),
                format!("{} cannot wait for an event of another runtime", self.inner.label),
            ));
        }
        if event.device != self.inner.device {
            return Err(Error::on_stream(
                self.inner.device,
                self.inner.label.to_string(),
                format!("{} cannot wait for an event of device {}", self.inner.label, event.device),
            ));
        }
        self.inner.rt.backend.wait_event(self.ordinal(), self.inner.id, event.id)
    }
    pub(crate) fn same_runtime(&self, rt: &Arc<Inner>) -> bool {
        Arc::ptr_eq(&self.inner.rt, rt)
    }
}

/// A marker in a stream, for cross-stream waits and timing.
///
/// `Send + Sync`: recording, waiting and querying may happen from different threads; a
/// wait or query sees the latest record that had returned when it was called.
pub struct Event {
    rt: Arc<Inner>,
    device: usize,
    id: EventId,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event({}:{})", self.device, self.id.0)
    }
}

impl Event {
    pub(crate) fn new_on(rt: &Arc<Inner>, device: usize) -> Result<Event> {
        let ord = rt.device(device)?.ordinal;
        let id = rt.backend.create_event(ord)?;
        Ok(Event { rt: rt.clone(), device, id })
    }
    fn ordinal(&self) -> usize {
        self.rt.devices[self.device].ordinal
    }
    /// The backend's handle.
    pub(crate) fn id(&self) -> EventId {
        self.id
    }
    /// (Re-)records the event at the current end of `stream`. On a default stream the
    /// event is complete on return (a backend whose default stream is a device queue, as
    /// on Ascend, is waited for).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.record_queued(stream)?;
        if !stream.is_async() {
            self.synchronize()?;
        }
        Ok(())
    }
    /// [`record`](Self::record) without waiting on the default stream.
    pub(crate) fn record_queued(&self, stream: &Stream) -> Result<()> {
        // Stream and event ids are the backend's: another runtime's stream would name an
        // unrelated (or no) stream here, and a record that is never queued leaves the
        // event's waiters waiting.
        if !stream.same_runtime(&self.rt) {
            return Err(Error::on_stream(
                stream.inner.device,
                stream.inner.label.to_string(),
                format!("an event of one runtime cannot be recorded on {} of another", stream.inner.label),
            ));
        }
        if stream.inner.device != self.device {
            return Err(Error::on_stream(
                stream.inner.device,
                stream.inner.label.to_string(),
                format!("an event of device {} cannot be recorded on {}", self.device, stream.inner.label),
            ));
        }
        self.rt.backend.record_event(self.ordinal(), self.id, stream.inner.id)
    }
    /// True when the work before the record point has finished.
    pub fn query(&self) -> Result<bool> {
        self.rt.backend.query_event(self.ordinal(), self.id)
    }
    pub fn synchronize(&self) -> Result<()> {
        self.rt.backend.synchronize_event(self.ordinal(), self.id)
    }
    /// Time from `start` to `self`; both must have completed.
    pub fn elapsed_since(&self, start: &Event) -> Result<Duration> {
        if start.device != self.device || !Arc::ptr_eq(&start.rt, &self.rt) {
            return Err(Error::on_device(self.device, "events of different devices or runtimes cannot be compared"));
        }
        self.rt.backend.elapsed(self.ordinal(), start.id, self.id)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.rt.backend.destroy_event(self.ordinal(), self.id);
    }
}

thread_local! {
    /// Scoped current streams of this thread, innermost last, tagged with their runtime.
    static CURRENT: RefCell<Vec<Stream>> = const { RefCell::new(Vec::new()) };
}

/// While alive, makes a stream the current one of this thread for its runtime. Scopes
/// nest; dropping restores the previous stream.
///
/// Neither `Send` nor `Sync`: a scope belongs to the thread that made it.
#[must_use = "the stream is current only while the scope guard lives"]
pub struct StreamScope {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl StreamScope {
    pub(crate) fn enter(stream: &Stream) -> StreamScope {
        CURRENT.with(|c| c.borrow_mut().push(stream.clone()));
        StreamScope { _not_send: std::marker::PhantomData }
    }
}

impl Drop for StreamScope {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            c.borrow_mut().pop();
        });
    }
}

/// The innermost scoped stream of this thread that belongs to `rt`.
pub(crate) fn current_for(rt: &Arc<Inner>) -> Option<Stream> {
    CURRENT.with(|c| c.borrow().iter().rev().find(|s| s.same_runtime(rt)).cloned())
}

/// Where an execution goes: the device's default stream or a user stream.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) device: usize,
    pub(crate) id: StreamId,
    pub(crate) user: Option<&'a Stream>,
    /// Intra-op thread budget (0 = all).
    pub(crate) threads: usize,
    /// What the backend prepared for this node when its graph was compiled.
    pub(crate) prepacked: Option<&'a crate::backend::Prepacked>,
}

impl<'a> Target<'a> {
    pub(crate) fn on(stream: &'a Stream) -> Target<'a> {
        Target {
            device: stream.device(),
            id: stream.id(),
            user: stream.is_async().then_some(stream),
            threads: 0,
            prepacked: None,
        }
    }
}

impl Target<'_> {
    pub(crate) fn is_async(&self) -> bool {
        self.user.is_some()
    }
}
