//! What one logical CPU device owns: its allocation table, its user streams and events,
//! and the rayon pool its launches run in.

use crate::error::CpuError;
use crate::memory;
use crate::pool::JoinedPool;
use crate::stream::{CpuEvent, UserStream};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// One logical device.
pub(crate) struct Device {
    pub(crate) table: Arc<memory::Table>,
    pub(crate) streams: Mutex<HashMap<u64, Arc<UserStream>>>,
    pub(crate) events: Mutex<HashMap<u64, Arc<CpuEvent>>>,
    /// The next stream or event id.
    pub(crate) next_id: AtomicU64,
    /// The intra-op pool of `threads` workers.
    pub(crate) pool: Arc<JoinedPool>,
    pub(crate) threads: usize,
}

impl Device {
    /// Device `d` with a pool of `threads` workers, worker `i` pinned to `cpus[i]` when
    /// given.
    pub(crate) fn new(d: usize, threads: usize, cpus: Option<Vec<usize>>) -> Result<Device, CpuError> {
        let pool = JoinedPool::new(threads, move |i| format!("npurt-cpu{d}-w{i}"), cpus)?;
        Ok(Device {
            table: Arc::new(memory::table(d)),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            pool: Arc::new(pool),
            threads,
        })
    }
}
