//! Streams and events: creating, destroying, recording, waiting, synchronising; the
//! memory queued work uses, kept alive until the stream shows the work done (rule M2);
//! and the queuing of byte copies and fills (what they do is in `memory.rs`).

use crate::device::{DEFAULT_STREAM, Device, Inflight, StreamState};
use crate::error::{CudaError, drv, lock};
use crate::memory::CudaRelease;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream, result};
use runtime::backend::allocations::Pins;
use runtime::{EventId, Result, StreamId};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Device {
    /// The stream `s` of this device.
    pub(crate) fn stream(&self, s: StreamId) -> std::result::Result<Arc<StreamState>, CudaError> {
        lock(&self.streams).get(&s.0).cloned().ok_or(CudaError::NoStream(s.0, self.ordinal))
    }

    /// The event `e` of this device.
    pub(crate) fn event(&self, e: EventId) -> std::result::Result<Arc<CudaEvent>, CudaError> {
        lock(&self.events).get(&e.0).cloned().ok_or(CudaError::NoEvent(e.0, self.ordinal))
    }

    /// Keeps `pins` alive until the work just queued on `st` has finished.
    pub(crate) fn retire(
        &self,
        st: &StreamState,
        user: bool,
        pins: Pins<CudaRelease>,
        op: &str,
        seq: u64,
    ) -> std::result::Result<(), CudaError> {
        let done = if user {
            let ev = match lock(&self.spare_events).pop() {
                Some(e) => e,
                None => {
                    self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(drv("cuEventCreate"))?
                }
            };
            ev.record(&st.cu).map_err(drv("cuEventRecord"))?;
            Some(ev)
        } else {
            None
        };
        lock(&st.inflight).push_back(Inflight { done, _pins: pins });
        *lock(&st.last) = (op.to_string(), seq);
        Ok(())
    }

    /// Releases the memory of finished work on every stream.
    pub(crate) fn reap(&self) {
        let streams: Vec<Arc<StreamState>> = lock(&self.streams).values().cloned().collect();
        for st in streams {
            let mut q = lock(&st.inflight);
            while let Some(front) = q.front() {
                let finished = match &front.done {
                    Some(ev) => ev.try_is_complete().unwrap_or(false),
                    None => false,
                };
                if !finished {
                    break;
                }
                if let Some(Inflight { done: Some(ev), .. }) = q.pop_front() {
                    lock(&self.spare_events).push(ev);
                }
            }
        }
    }

    /// Waits for `st`, releases its queued memory and reports the first failure.
    pub(crate) fn sync_stream(&self, st: &StreamState, user: bool) -> Result<()> {
        self.bind()?;
        let r = st.cu.synchronize();
        let drained: Vec<Inflight> = lock(&st.inflight).drain(..).collect();
        let mut spare = lock(&self.spare_events);
        for f in drained {
            if let Some(ev) = f.done {
                spare.push(ev);
            }
        }
        drop(spare);
        let (op, seq) = lock(&st.last).clone();
        let fail = |e: CudaError| -> runtime::Error {
            if user {
                runtime::Error::Async { op: op.clone(), stream: st.label.clone(), seq, source: std::sync::Arc::new(e) }
            } else {
                runtime::Error::backend("cuda", CudaError::Queued { op: op.clone(), seq, source: Box::new(e) })
            }
        };
        if let Err(e) = r {
            return Err(fail(CudaError::driver("cuStreamSynchronize", e, None)));
        }
        if st.check_error_word.swap(false, Ordering::AcqRel) {
            let mut word = [0i32; 1];
            // SAFETY: the error word is a live 4-byte device allocation owned by this
            // device; `word` is a 4-byte host buffer.
            let read = unsafe { result::memcpy_dtoh_sync(&mut word, self.error_word) };
            if read.is_ok() && word[0] != 0 {
                // SAFETY: as above; resets the word for the next check.
                let _ = unsafe { result::memset_d8_sync(self.error_word, 0, 4) };
                return Err(fail(CudaError::IndexOutOfRange));
            }
        }
        Ok(())
    }

    /// Queues a byte copy or fill on `stream`, keeping its memory alive (rule M2). The
    /// default stream waits for it before returning, as on the CPU.
    pub(crate) fn enqueue_bytes(
        &self,
        stream: StreamId,
        ranges: &[(u64, usize)],
        what: &str,
        go: impl FnOnce(&CudaStream) -> std::result::Result<(), CudaError>,
    ) -> Result<()> {
        let st = self.stream(stream)?;
        let pins = self.table.pin(ranges).map_err(CudaError::from)?;
        self.bind()?;
        go(&st.cu)?;
        let user = stream != DEFAULT_STREAM;
        self.retire(&st, user, pins, what, 0)?;
        if !user {
            self.sync_stream(&st, false)?;
        }
        Ok(())
    }

    /// A new non-blocking stream on this device (`Backend::create_stream`).
    pub(crate) fn new_stream(&self) -> Result<StreamId> {
        self.bind()?;
        let cu = self.ctx.new_stream().map_err(drv("cuStreamCreate"))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let st = StreamState::new(cu, format!("cuda:{}/stream{id}", self.ordinal));
        lock(&self.streams).insert(id, Arc::new(st));
        Ok(StreamId(id))
    }

    /// Waits for `stream`, then forgets it (`Backend::destroy_stream`).
    pub(crate) fn remove_stream(&self, stream: StreamId) -> Result<()> {
        if stream == DEFAULT_STREAM {
            return Ok(());
        }
        let st = lock(&self.streams).remove(&stream.0).ok_or(CudaError::NoStream(stream.0, self.ordinal))?;
        if let Err(e) = self.sync_stream(&st, true) {
            log::warn!("destroying {}: unreported failure: {e}", st.label);
        }
        Ok(())
    }

    /// Waits for `stream` and reports its first failure (`Backend::synchronize_stream`).
    pub(crate) fn sync_stream_of(&self, stream: StreamId) -> Result<()> {
        let st = self.stream(stream)?;
        self.sync_stream(&st, stream != DEFAULT_STREAM)
    }

    /// Waits for every stream of this device (`Backend::synchronize_device`).
    pub(crate) fn sync_device(&self) -> Result<()> {
        let all: Vec<(u64, Arc<StreamState>)> = lock(&self.streams).iter().map(|(k, v)| (*k, v.clone())).collect();
        let mut first = Ok(());
        for (id, st) in all {
            if let Err(e) = self.sync_stream(&st, id != DEFAULT_STREAM.0)
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// A new event on this device (`Backend::create_event`).
    pub(crate) fn new_event(&self) -> Result<EventId> {
        let ev = self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cuEventCreate"))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.events).insert(id, Arc::new(ev));
        Ok(EventId(id))
    }

    /// Forgets `event` (`Backend::destroy_event`).
    pub(crate) fn remove_event(&self, event: EventId) -> Result<()> {
        lock(&self.events).remove(&event.0).ok_or(CudaError::NoEvent(event.0, self.ordinal))?;
        Ok(())
    }

    /// Records `event` on `stream` (`Backend::record_event`).
    pub(crate) fn record(&self, event: EventId, stream: StreamId) -> Result<()> {
        let (ev, st) = (self.event(event)?, self.stream(stream)?);
        ev.record(&st.cu).map_err(drv("cuEventRecord"))?;
        Ok(())
    }

    /// Makes `stream` wait for `event` (`Backend::wait_event`).
    pub(crate) fn wait(&self, stream: StreamId, event: EventId) -> Result<()> {
        let (ev, st) = (self.event(event)?, self.stream(stream)?);
        st.cu.wait(&ev).map_err(drv("cuStreamWaitEvent"))?;
        Ok(())
    }

    /// True once the work before `event` is done (`Backend::query_event`).
    pub(crate) fn query(&self, event: EventId) -> Result<bool> {
        let ev = self.event(event)?;
        self.bind()?;
        Ok(ev.try_is_complete().map_err(drv("cuEventQuery"))?)
    }

    /// Waits for `event` (`Backend::synchronize_event`).
    pub(crate) fn sync_event(&self, event: EventId) -> Result<()> {
        let ev = self.event(event)?;
        ev.synchronize().map_err(drv("cuEventSynchronize"))?;
        Ok(())
    }

    /// Time between two recorded events (`Backend::elapsed`).
    pub(crate) fn event_elapsed(&self, start: EventId, end: EventId) -> Result<Duration> {
        let (a, b) = (self.event(start)?, self.event(end)?);
        let ms = a.elapsed_ms(&b).map_err(drv("cuEventElapsedTime"))?;
        Ok(Duration::from_secs_f64((ms.max(0.0) as f64) / 1e3))
    }
}
