//! What each device owns: its default context, SoC and description, allocation table,
//! streams and events, and the objects that must be released before it is reset
//! ([`DeviceOwned`]: frozen plans); binding the calling thread to it; opening and
//! teardown.
//!
//! The calling thread is bound to a device (`aclrtSetCurrentContext` with the device's
//! default context) before every ACL call on it, once per thread and device: a
//! thread-local remembers the (backend instance, device) it is bound to.

use crate::error::AclBackendError;
use crate::memory::{AclRelease, Allocations};
use crate::probe;
use crate::stream::{self, DEFAULT_STREAM, EventRec, StreamRec, lock};
use acl_sys::{Api, aclrtContext, result};
use runtime::{DeviceInfo, EventId, StreamId};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

type BResult<T> = std::result::Result<T, AclBackendError>;

thread_local! {
    /// (backend instance, device) the calling thread is bound to.
    static BOUND: Cell<(u64, i32)> = const { Cell::new((0, -1)) };
}

/// Forgets the calling thread's binding when it is to a device of `instance`.
pub(crate) fn unbind(instance: u64) {
    BOUND.with(|b| {
        if b.get().0 == instance {
            b.set((0, -1))
        }
    });
}

/// Something made on a device that may outlive the backend's handle to it (a frozen plan
/// lives as long as the runtime's arena that holds it) and must be released before the
/// device is reset.
pub(crate) trait DeviceOwned: Send + Sync {
    /// Releases its device objects now, if it still holds any. Called at the device's
    /// teardown, with the device's streams drained and the calling thread bound to it.
    fn release(&self, api: &Api);
}

/// One open device.
pub(crate) struct Device {
    pub id: i32,
    /// The default context `aclrtSetDevice` made (live until `aclrtResetDevice`).
    ctx: usize,
    pub soc: String,
    pub info: DeviceInfo,
    /// Shared with the pins of frozen plans (their fixed operands).
    pub allocs: Arc<Allocations>,
    pub streams: Mutex<HashMap<u64, Arc<StreamRec>>>,
    events: Mutex<HashMap<u64, EventRec>>,
    next_id: AtomicU64,
    /// Released at teardown if still alive then (see [`DeviceOwned`]).
    owned: Mutex<Vec<Weak<dyn DeviceOwned>>>,
}

/// What binds a thread to a device later, without the device record: a frozen plan's
/// teardown. Only valid while the device is open, which the plan's [`DeviceOwned`]
/// registration guarantees for as long as it holds device objects.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding {
    instance: u64,
    id: i32,
    ctx: usize,
}

impl Binding {
    /// Binds the calling thread to the device (once per thread, device and backend).
    pub(crate) fn bind(&self, api: &Api) -> BResult<()> {
        if BOUND.with(|b| b.get()) != (self.instance, self.id) {
            // SAFETY: `ctx` is the live default context of this device (made by
            // aclrtSetDevice in `Device::open`, released only by `Device::close`).
            unsafe { result::set_current_context(api, self.ctx as aclrtContext) }?;
            BOUND.with(|b| b.set((self.instance, self.id)));
        }
        Ok(())
    }
}

impl Device {
    /// Opens device `d` for backend `instance`: `aclrtSetDevice` (undone if anything
    /// after it fails), its context, SoC, memory, description and default stream. The
    /// calling thread is left bound to it.
    pub(crate) fn open(api: &Arc<Api>, instance: u64, d: i32) -> BResult<Device> {
        result::set_device(api, d)?;
        let r = (|| {
            let ctx = result::get_current_context(api)?;
            BOUND.with(|b| b.set((instance, d)));
            let soc = result::get_soc_name(api)?;
            let (_free, total) = result::get_mem_info(api, acl_sys::ACL_HBM_MEM)?;
            let info = probe::describe(api, d, &soc, total as u64);
            let dev = Device {
                id: d,
                ctx: ctx as usize,
                soc,
                info,
                allocs: Arc::new(Allocations::new(format!("acl:{d}"), AclRelease::new(api.clone()))),
                streams: Mutex::new(HashMap::new()),
                events: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                owned: Mutex::new(Vec::new()),
            };
            let s = stream::create(api, format!("acl:{d}/default"))?;
            lock(&dev.streams).insert(DEFAULT_STREAM.0, Arc::new(s));
            Ok(dev)
        })();
        if r.is_err() {
            // SAFETY: undoes the aclrtSetDevice above; nothing made on the device since
            // is kept (the partly built record is dropped with its empty table).
            let _ = unsafe { result::reset_device(api, d) };
        }
        r
    }

    fn index(&self) -> usize {
        self.id as usize
    }

    /// Binds the calling thread to this device (once per thread, device and backend).
    pub(crate) fn bind(&self, api: &Api, instance: u64) -> BResult<()> {
        self.binding(instance).bind(api)
    }

    /// What binds a thread to this device (of backend `instance`) later.
    pub(crate) fn binding(&self, instance: u64) -> Binding {
        Binding { instance, id: self.id, ctx: self.ctx }
    }

    /// Registers `o` to be released at the device's teardown if it is still alive then.
    pub(crate) fn adopt(&self, o: Weak<dyn DeviceOwned>) {
        let mut v = lock(&self.owned);
        v.retain(|w| w.strong_count() > 0);
        v.push(o);
    }

    /// A fresh stream or event id.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn stream(&self, s: StreamId) -> BResult<Arc<StreamRec>> {
        lock(&self.streams).get(&s.0).cloned().ok_or(AclBackendError::NoStream(s.0, self.index()))
    }

    /// Every stream of the device.
    pub(crate) fn all_streams(&self) -> Vec<Arc<StreamRec>> {
        lock(&self.streams).values().cloned().collect()
    }

    /// Records a new event under `id`.
    pub(crate) fn add_event(&self, id: u64, rec: EventRec) {
        lock(&self.events).insert(id, rec);
    }

    /// The event's (handle, recorded) pair.
    pub(crate) fn event(&self, e: EventId) -> BResult<(usize, bool)> {
        lock(&self.events).get(&e.0).map(|r| (r.handle, r.recorded)).ok_or(AclBackendError::NoEvent(e.0, self.index()))
    }

    /// Removes the event from the table (to destroy it).
    pub(crate) fn take_event(&self, e: EventId) -> BResult<EventRec> {
        lock(&self.events).remove(&e.0).ok_or(AclBackendError::NoEvent(e.0, self.index()))
    }

    pub(crate) fn set_recorded(&self, e: EventId) {
        if let Some(r) = lock(&self.events).get_mut(&e.0) {
            r.recorded = true;
        }
    }

    /// Synchronises every stream with queued work, keeping their errors for them.
    pub(crate) fn drain(&self, api: &Api) {
        for r in self.all_streams() {
            if r.dirty.load(Ordering::Acquire) {
                stream::sync_keeping_errors(api, &r);
            }
        }
    }

    /// Releases everything the device owns, in the order CANN requires (events, streams,
    /// contexts, then `aclrtResetDevice`; see docs/ASCEND.md):
    /// queued work, what frozen plans still hold (executors, descriptors, memory, pins),
    /// events, streams, memory, then `aclrtResetDevice` (retried once). The calling thread
    /// is bound to the device.
    pub(crate) fn close(self, api: &Api) {
        self.drain(api);
        let owned = std::mem::take(&mut *lock(&self.owned));
        for o in owned.iter().filter_map(Weak::upgrade) {
            o.release(api);
        }
        let events: Vec<EventRec> = lock(&self.events).drain().map(|(_, v)| v).collect();
        for e in events {
            // A failed destroy released nothing: retried once.
            let r = stream::destroy_event(api, e.raw()).or_else(|_| stream::destroy_event(api, e.raw()));
            if let Err(err) = r {
                log::error!("acl: {err} at teardown");
            }
        }
        let streams: Vec<Arc<StreamRec>> = lock(&self.streams).drain().map(|(_, v)| v).collect();
        for s in streams {
            if let Err(e) = stream::destroy(api, &s) {
                log::error!("acl: destroying a stream at teardown: {e}");
            }
        }
        let Device { id, allocs, .. } = self;
        if !allocs.is_empty() {
            log::warn!("acl:{id}: {} allocation(s) still live at teardown; freeing them", allocs.len());
        }
        allocs.releaser().retry_failed();
        drop(allocs);
        // SAFETY: pairs the single aclrtSetDevice of `open`; everything made on the
        // device was released above.
        if let Err(e) = unsafe { result::reset_device(api, id) } {
            log::warn!("acl: {e}; retrying once");
            // SAFETY: as above; the failed call dropped no reference.
            if let Err(e) = unsafe { result::reset_device(api, id) } {
                log::error!("acl: {e}");
            }
        }
    }
}
