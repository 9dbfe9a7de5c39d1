//! A test backend that wraps a real one and can hold user streams *blocked*, so that
//! "work still queued" is a deterministic state rather than a race against a worker.
//!
//! Why a wrapper: on the CPU backend `wait_event` captures its target generation when it
//! is called, so no sequence of record/wait calls can block a worker except by racing
//! one that is still busy (a first blocked stream would need an event recorded on an
//! already blocked stream). The gate gives the same effect for real: while a stream is
//! blocked, everything queued on it (launches, batches, copies, fills, event records and
//! waits) is held back in call order, and forwarded to the wrapped backend, in that
//! order, when [`Gate::open`] is called. Events recorded on a blocked stream are
//! incomplete until then; a stream that waits for such an event becomes blocked too.
//! Host-side calls that must see the held work (`synchronize_*`, `copy_to_host` on that
//! stream, `map_host`, `destroy_stream`) wait for the gate; if nothing opens it within a
//! minute they panic, which flags a runtime that synchronised where it should not have.
//! Frees issued while the gate is closed are forwarded after the held work.

use runtime::{Backend, DeviceInfo, Error, KernelInfo, Result};
use runtime::{DevicePtr, EventId, LaunchArgs, StreamId};
use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

enum Held {
    /// Boxed: the other variants are a few words.
    Launch(Box<(KernelInfo, LaunchArgs)>),
    Batch(Vec<(KernelInfo, LaunchArgs)>),
    Record(EventId),
    Wait(EventId),
    Copy(DevicePtr, DevicePtr, usize),
    Memset(DevicePtr, u8, usize),
    DestroyEvent(EventId),
}

#[derive(Default)]
struct State {
    blocked: HashSet<(usize, StreamId)>,
    /// Held work in call order: (device, stream, what).
    held: Vec<(usize, StreamId, Held)>,
    /// Events whose latest record is held.
    pending_events: HashSet<(usize, EventId)>,
    frees: Vec<(usize, DevicePtr)>,
}

pub struct Gate {
    inner: Arc<dyn Backend>,
    st: Mutex<State>,
    cv: Condvar,
}

const DEADLOCK: Duration = Duration::from_secs(60);

impl Gate {
    pub fn new(inner: Arc<dyn Backend>) -> Arc<Gate> {
        Arc::new(Gate { inner, st: Mutex::default(), cv: Condvar::new() })
    }
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Holds back everything queued on `stream` from now on.
    pub fn block(&self, device: usize, stream: StreamId) {
        assert_ne!(stream, self.inner.default_stream(device), "the gate blocks user streams only");
        self.lock().blocked.insert((device, stream));
    }
    pub fn is_blocked(&self, device: usize, stream: StreamId) -> bool {
        self.lock().blocked.contains(&(device, stream))
    }
    /// Items currently held back.
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }
    /// Forwards all held work in call order, then the held frees, and unblocks
    /// every stream. Returns the first error the wrapped backend gave.
    pub fn open(&self) -> Result<()> {
        let mut g = self.lock();
        let mut first = Ok(());
        for (d, s, h) in std::mem::take(&mut g.held) {
            let r = match h {
                Held::Launch(l) => self.inner.launch(d, &l.0, l.1, s),
                Held::Batch(v) => self.inner.launch_batch(d, v, s),
                Held::Record(e) => self.inner.record_event(d, e, s),
                Held::Wait(e) => self.inner.wait_event(d, s, e),
                Held::Copy(src, dst, n) => self.inner.copy_on_device(d, src, dst, n, s),
                Held::Memset(dst, v, n) => self.inner.memset(d, dst, v, n, s),
                Held::DestroyEvent(e) => self.inner.destroy_event(d, e),
            };
            if let Err(e) = r
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        for (d, p) in std::mem::take(&mut g.frees) {
            let _ = self.inner.free(d, p);
        }
        g.blocked.clear();
        g.pending_events.clear();
        self.cv.notify_all();
        first
    }
    fn wait_until(&self, what: &str, mut ready: impl FnMut(&State) -> bool) {
        if std::thread::panicking() {
            // A test already failed; do not turn its unwinding into a hang.
            return;
        }
        let deadline = Instant::now() + DEADLOCK;
        let mut g = self.lock();
        while !ready(&g) {
            let now = Instant::now();
            assert!(
                now < deadline,
                "gate: {what} waited for a blocked stream for a minute (a synchronisation the runtime should not do?)"
            );
            g = self.cv.wait_timeout(g, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
    fn wait_stream(&self, d: usize, s: StreamId, what: &str) {
        self.wait_until(what, |g| !g.blocked.contains(&(d, s)));
    }
    fn wait_device(&self, d: usize, what: &str) {
        self.wait_until(what, |g| !g.blocked.iter().any(|(dd, _)| *dd == d));
    }
    /// Holds `h` if `stream` is blocked; otherwise gives it back to be forwarded.
    fn hold(&self, d: usize, s: StreamId, h: Held) -> Option<Held> {
        let mut g = self.lock();
        if g.blocked.contains(&(d, s)) {
            if let Held::Record(e) = &h {
                g.pending_events.insert((d, *e));
            }
            g.held.push((d, s, h));
            None
        } else {
            Some(h)
        }
    }
}

// SAFETY: every call that touches memory is forwarded to the wrapped backend, which
// checks addresses (M1) and pins what its queued work uses (M2); held work is forwarded
// before any free issued while it was held, so memory named by held work is still
// allocated when the wrapped backend validates it. Handles are the wrapped backend's
// (M4), and no method panics except the test-only deadlock guard.
unsafe impl Backend for Gate {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn device_count(&self) -> usize {
        self.inner.device_count()
    }
    fn device_info(&self, device: usize) -> Result<DeviceInfo> {
        self.inner.device_info(device)
    }
    fn alloc(&self, device: usize, bytes: usize, align: usize) -> Result<DevicePtr> {
        self.inner.alloc(device, bytes, align)
    }
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        {
            let mut g = self.lock();
            if !g.blocked.is_empty() {
                g.frees.push((device, ptr));
                return Ok(());
            }
        }
        self.inner.free(device, ptr)
    }
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        self.inner.copy_to_device(device, src, dst)
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        self.wait_stream(device, stream, "copy_to_host");
        self.inner.copy_to_host(device, src, dst, stream)
    }
    fn copy_on_device(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        match self.hold(device, stream, Held::Copy(src, dst, bytes)) {
            None => Ok(()),
            Some(_) => self.inner.copy_on_device(device, src, dst, bytes, stream),
        }
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        match self.hold(device, stream, Held::Memset(dst, value, bytes)) {
            None => Ok(()),
            Some(_) => self.inner.memset(device, dst, value, bytes, stream),
        }
    }
    fn map_host(&self, device: usize, ptr: DevicePtr, len: usize, f: &mut dyn FnMut(&mut [u8])) -> Result<bool> {
        self.wait_device(device, "map_host");
        self.inner.map_host(device, ptr, len, f)
    }
    fn default_stream(&self, device: usize) -> StreamId {
        self.inner.default_stream(device)
    }
    fn create_stream(&self, device: usize) -> Result<StreamId> {
        self.inner.create_stream(device)
    }
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.wait_stream(device, stream, "destroy_stream");
        self.inner.destroy_stream(device, stream)
    }
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.wait_stream(device, stream, "synchronize_stream");
        self.inner.synchronize_stream(device, stream)
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        self.wait_device(device, "synchronize_device");
        self.inner.synchronize_device(device)
    }
    fn create_event(&self, device: usize) -> Result<EventId> {
        self.inner.create_event(device)
    }
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()> {
        {
            let mut g = self.lock();
            if g.pending_events.contains(&(device, event)) {
                // Destroy it after its held record has been forwarded.
                let s = g
                    .held
                    .iter()
                    .find(|(d, _, h)| *d == device && matches!(h, Held::Record(e) if *e == event))
                    .map(|(_, s, _)| *s);
                if let Some(s) = s {
                    g.held.push((device, s, Held::DestroyEvent(event)));
                    return Ok(());
                }
            }
        }
        self.inner.destroy_event(device, event)
    }
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()> {
        match self.hold(device, stream, Held::Record(event)) {
            None => Ok(()),
            Some(_) => {
                assert!(
                    !self.lock().pending_events.contains(&(device, event)),
                    "gate: re-recording a held event is not modelled"
                );
                self.inner.record_event(device, event, stream)
            }
        }
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        {
            let mut g = self.lock();
            if g.pending_events.contains(&(device, event)) || g.blocked.contains(&(device, stream)) {
                // Waiting for held work blocks the waiter as well.
                assert_ne!(
                    stream,
                    self.inner.default_stream(device),
                    "gate: the default stream would wait for held work forever"
                );
                g.blocked.insert((device, stream));
                g.held.push((device, stream, Held::Wait(event)));
                return Ok(());
            }
        }
        self.inner.wait_event(device, stream, event)
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        if self.lock().pending_events.contains(&(device, event)) {
            return Ok(false);
        }
        self.inner.query_event(device, event)
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        self.wait_until("synchronize_event", |g| !g.pending_events.contains(&(device, event)));
        self.inner.synchronize_event(device, event)
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        {
            let g = self.lock();
            if g.pending_events.contains(&(device, start)) || g.pending_events.contains(&(device, end)) {
                return Err(Error::device("gate: event has not completed"));
            }
        }
        self.inner.elapsed(device, start, end)
    }
    fn memory_free(&self, device: usize) -> Option<u64> {
        self.inner.memory_free(device)
    }
    fn kernels(&self) -> &[KernelInfo] {
        self.inner.kernels()
    }
    fn workspace_size(&self, kernel: &KernelInfo, args: &LaunchArgs) -> usize {
        self.inner.workspace_size(kernel, args)
    }
    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        match self.hold(device, stream, Held::Launch(Box::new((kernel.clone(), args)))) {
            None => Ok(()),
            Some(Held::Launch(l)) => self.inner.launch(device, &l.0, l.1, stream),
            Some(_) => unreachable!(),
        }
    }
    fn launch_batch(&self, device: usize, launches: Vec<(KernelInfo, LaunchArgs)>, stream: StreamId) -> Result<()> {
        match self.hold(device, stream, Held::Batch(launches)) {
            None => Ok(()),
            Some(Held::Batch(v)) => self.inner.launch_batch(device, v, stream),
            Some(_) => unreachable!(),
        }
    }
}
