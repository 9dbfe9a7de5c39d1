//! What one logical CPU device owns: its allocation table, its user streams and events,
//! the rayon pool its launches run in, and the backend's kernel table, features and
//! armed faults its launches use; with the look-ups of its streams and events.

use crate::error::{CpuError, lock};
use crate::fault::Faults;
use crate::features::CpuFeatures;
use crate::kernels;
use crate::memory;
use crate::pool::JoinedPool;
use crate::stream::{CpuEvent, DEFAULT_STREAM, Job, UserStream};
use runtime::{EventId, StreamId};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// One logical device.
pub(crate) struct Device {
    /// The device's index: it is `cpu:{index}`.
    pub(crate) index: usize,
    pub(crate) table: Arc<memory::Table>,
    pub(crate) streams: Mutex<HashMap<u64, Arc<UserStream>>>,
    pub(crate) events: Mutex<HashMap<u64, Arc<CpuEvent>>>,
    /// The next stream or event id.
    pub(crate) next_id: AtomicU64,
    /// The intra-op pool of `threads` workers.
    pub(crate) pool: Arc<JoinedPool>,
    pub(crate) threads: usize,
    /// The backend's kernel table and the features that chose it (the instruction-set
    /// path every kernel takes).
    pub(crate) kernels: &'static kernels::Table,
    pub(crate) features: &'static CpuFeatures,
    /// The faults armed on the backend, shared by its devices.
    pub(crate) faults: Arc<Faults>,
}

/// What a device shares with the other devices of its backend.
pub(crate) struct Shared {
    pub(crate) kernels: &'static kernels::Table,
    pub(crate) features: &'static CpuFeatures,
    pub(crate) faults: Arc<Faults>,
}

impl Device {
    /// Device `d` with a pool of `threads` workers, worker `i` pinned to `cpus[i]` when
    /// given.
    pub(crate) fn new(d: usize, threads: usize, cpus: Option<Vec<usize>>, shared: Shared) -> Result<Device, CpuError> {
        let pool = JoinedPool::new(threads, move |i| format!("npurt-cpu{d}-w{i}"), cpus)?;
        let Shared { kernels, features, faults } = shared;
        Ok(Device {
            index: d,
            table: Arc::new(memory::table(d)),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            pool: Arc::new(pool),
            threads,
            kernels,
            features,
            faults,
        })
    }

    /// The user stream `s`; `None` for the default stream.
    pub(crate) fn queue(&self, s: StreamId) -> Result<Option<Arc<UserStream>>, CpuError> {
        if s == DEFAULT_STREAM {
            return Ok(None);
        }
        lock(&self.streams).get(&s.0).cloned().map(Some).ok_or(CpuError::NoStream(s.0, self.index))
    }

    /// Event `e`.
    pub(crate) fn event(&self, e: EventId) -> Result<Arc<CpuEvent>, CpuError> {
        lock(&self.events).get(&e.0).cloned().ok_or(CpuError::NoEvent(e.0, self.index))
    }

    /// Runs `job` now (default stream) or queues it (user stream).
    pub(crate) fn submit(&self, s: StreamId, job: Job) -> runtime::Result<()> {
        match self.queue(s)? {
            None => job(),
            Some(q) => {
                q.queue.submit(job)?;
                Ok(())
            }
        }
    }
}
