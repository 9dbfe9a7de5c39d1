//! What a pool reports about itself: [`PoolStats`].

use std::fmt;

/// A snapshot of the pool's accounting.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolStats {
    /// Bytes the pool holds from the system (segments).
    pub total_bytes: usize,
    /// Bytes in blocks handed out (size classes, so >= what was requested).
    pub in_use_bytes: usize,
    /// Bytes held but not handed out: `total - in_use` (free plus pending blocks).
    pub cached_bytes: usize,
    /// Bytes of large requests served directly from the system, currently in use.
    pub system_bytes: usize,
    /// Highest `in_use_bytes` seen.
    pub peak_in_use_bytes: usize,
    /// Highest `total_bytes` seen.
    pub peak_total_bytes: usize,
    /// Largest block that could be handed out now without asking the system.
    pub largest_free_block: usize,
    /// `1 - largest_free_block / free bytes` (0 when nothing is free).
    pub fragmentation: f64,
    /// Blocks waiting for queued work before they can be reused.
    pub pending_blocks: usize,
    pub segments: usize,
    /// Calls to the backend's allocator so far.
    pub system_allocations: u64,
    /// Requests served from the cache so far.
    pub cache_hits: u64,
    /// Requests served so far.
    pub allocations: u64,
    /// The configured limit, if any.
    pub limit_bytes: Option<usize>,
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pool: total {} B, in use {} B, cached {} B, from system {} B, peak {} B, largest free {} B, fragmentation {:.2}",
            self.total_bytes,
            self.in_use_bytes,
            self.cached_bytes,
            self.system_bytes,
            self.peak_in_use_bytes,
            self.largest_free_block,
            self.fragmentation
        )?;
        if let Some(l) = self.limit_bytes {
            write!(f, ", limit {l} B")?;
        }
        Ok(())
    }
}
