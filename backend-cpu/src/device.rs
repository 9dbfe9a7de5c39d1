//! What one logical CPU device owns: its allocation table, its user streams and events,
//! and the rayon pool its launches run in.

use crate::error::CpuError;
use crate::memory;
use crate::stream::{CpuEvent, WorkQueue};
use runtime::StreamId;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// The id of every device's default (synchronous) stream.
pub const DEFAULT_STREAM: StreamId = StreamId(0);

/// A user stream: its queue and a one-thread pool for launches whose thread budget is 1
/// (so concurrent graph nodes do not oversubscribe the cores).
pub(crate) struct UserStream {
    pub(crate) queue: WorkQueue,
    pub(crate) solo: Arc<rayon::ThreadPool>,
}

impl UserStream {
    /// User stream `id` of device `device`, with its worker thread and one-thread pool.
    pub(crate) fn new(device: usize, id: u64) -> Result<UserStream, CpuError> {
        let queue = WorkQueue::new(format!("cpu:{device}/stream{id}"))?;
        let solo = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(move |_| format!("npurt-cpu{device}-s{id}"))
            .build()
            .map_err(|e| CpuError::BadRequest(format!("thread pool: {e}")))?;
        Ok(UserStream { queue, solo: Arc::new(solo) })
    }
}

/// One logical device.
pub(crate) struct CpuDevice {
    pub(crate) table: Arc<memory::Table>,
    pub(crate) streams: Mutex<HashMap<u64, Arc<UserStream>>>,
    pub(crate) events: Mutex<HashMap<u64, Arc<CpuEvent>>>,
    /// The next stream or event id.
    pub(crate) next_id: AtomicU64,
    /// The intra-op pool of `threads` workers.
    pub(crate) pool: Arc<rayon::ThreadPool>,
    pub(crate) threads: usize,
}

impl CpuDevice {
    /// Device `d` with a pool of `threads` workers.
    pub(crate) fn new(d: usize, threads: usize) -> Result<CpuDevice, CpuError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("npurt-cpu{d}-w{i}"))
            .build()
            .map_err(|e| CpuError::BadRequest(format!("thread pool: {e}")))?;
        Ok(CpuDevice {
            table: Arc::new(memory::table(d)),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            pool: Arc::new(pool),
            threads,
        })
    }
}

/// Locks `m`, taking the guard back when another holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
