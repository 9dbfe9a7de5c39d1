//! The caching memory pool: one per device, over the backend's raw allocation.
//!
//! * Requests up to `small_threshold` bytes are rounded to 512-byte size classes and
//!   carved from pooled segments of `segment_bytes` (of the limit, when the limit is
//!   smaller); larger requests are rounded to 128 KiB classes and get a segment of their
//!   own straight from the system.
//! * Freed blocks are split and coalesced with their free neighbours in the same segment.
//! * Stream-aware reuse: a block freed while queued work may still use it carries the
//!   events recorded after that work. It is handed out again only once those events have
//!   completed, except to a request on the very stream that used it (stream order makes
//!   that safe). A block reused that way keeps the events of its previous owner until
//!   it is freed again, so a new owner that never queues work on it cannot make it look
//!   idle while the old work still runs; and it is never split, so no part of it becomes
//!   free for other streams early.
//! * When the limit (or the backend) refuses new memory, the pool waits for pending
//!   frees, releases its cache and retries once before reporting out-of-memory with its
//!   stats.

use crate::backend::{Backend, DevicePtr, EventId, StreamId};
use crate::config::{PoolConfig, ReuseStrategy};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

pub mod stats;
pub use stats::PoolStats;

const SMALL_CLASS: usize = 512;
const LARGE_CLASS: usize = 128 << 10;

/// Where a block came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// Carved from a pooled segment.
    Small,
    /// A segment of its own from the system.
    Large,
}

/// A block handed out by the pool. Return it with [`Pool::free`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub ptr: DevicePtr,
    /// Size of the block (its size class); at least the requested size.
    pub size: usize,
    pub kind: BlockKind,
}

#[derive(Debug)]
enum State {
    Free,
    /// Handed out. `inherited`: events of a previous owner that were still pending when
    /// the block was reused on the same stream; they join the events of the next free.
    Used {
        inherited: Vec<(StreamId, EventId)>,
    },
    /// Freed, waiting for events recorded on the streams that used it.
    Pending {
        events: Vec<(StreamId, EventId)>,
    },
}

#[derive(Debug)]
struct BlockEntry {
    size: usize,
    segment: u64,
    state: State,
}

#[derive(Debug)]
struct Segment {
    size: usize,
    kind: BlockKind,
}

#[derive(Default)]
struct Inner {
    segments: HashMap<u64, Segment>,
    blocks: BTreeMap<u64, BlockEntry>,
    free_small: BTreeSet<(usize, u64)>,
    free_large: BTreeSet<(usize, u64)>,
    pending: BTreeSet<u64>,
    total: usize,
    in_use: usize,
    system_in_use: usize,
    peak_in_use: usize,
    peak_total: usize,
    system_allocations: u64,
    cache_hits: u64,
    allocations: u64,
}

/// The caching allocator of one device.
///
/// `Send + Sync`: every method takes the pool's lock; allocations and frees from many
/// threads are serialised, and the stats are a consistent snapshot.
pub struct Pool {
    backend: Arc<dyn Backend>,
    device: usize,
    label: String,
    cfg: PoolConfig,
    /// Memory-pool switch of the optimisation preset: off = no caching at all.
    caching: bool,
    inner: Mutex<Inner>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool").field("device", &self.label).field("config", &self.cfg).finish()
    }
}

fn round_up(n: usize, to: usize) -> Option<usize> {
    n.div_ceil(to).checked_mul(to)
}

impl Pool {
    /// A pool over `backend`'s device `device`. `caching = false` sends every request
    /// straight to the system and every free straight back.
    pub fn new(backend: Arc<dyn Backend>, device: usize, cfg: PoolConfig, caching: bool) -> Result<Pool> {
        cfg.validate()?;
        let label = format!("{}:{device}", backend.name());
        Ok(Pool { backend, device, label, cfg, caching, inner: Mutex::new(Inner::default()) })
    }

    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    pub fn alignment(&self) -> usize {
        self.cfg.alignment
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than losing the pool, so recover the guard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn reusing(&self) -> bool {
        self.caching && self.cfg.reuse
    }

    /// The size class of a request and whether it is small (`usize::MAX` when the
    /// class does not fit the address space).
    pub fn size_class(&self, bytes: usize) -> (usize, BlockKind) {
        let (size, kind) = self.class_of(bytes);
        (size.unwrap_or(usize::MAX), kind)
    }

    fn class_of(&self, bytes: usize) -> (Option<usize>, BlockKind) {
        let bytes = bytes.max(1);
        if bytes <= self.cfg.small_threshold {
            (round_up(bytes, SMALL_CLASS.max(self.cfg.alignment)), BlockKind::Small)
        } else {
            (round_up(bytes, LARGE_CLASS.max(self.cfg.alignment)), BlockKind::Large)
        }
    }

    /// Smallest remainder worth splitting off a block of this kind.
    fn min_split(&self, kind: BlockKind) -> usize {
        match kind {
            BlockKind::Small => SMALL_CLASS.max(self.cfg.alignment),
            BlockKind::Large => self.cfg.small_threshold.max(LARGE_CLASS),
        }
    }

    /// Allocates a block of at least `bytes` for use on `stream`.
    pub fn alloc(&self, bytes: usize, stream: StreamId) -> Result<Block> {
        let (size, kind) = self.class_of(bytes);
        let mut g = self.lock();
        let Some(size) = size else {
            g.allocations += 1;
            return Err(Error::OutOfMemory {
                device: self.label.clone(),
                requested: bytes,
                stats: Box::new(self.stats_locked(&g)),
                source: None,
            });
        };
        self.collect_pending(&mut g, false);
        g.allocations += 1;
        if self.reusing()
            && let Some(b) = self.take_cached(&mut g, size, kind, stream)
        {
            g.cache_hits += 1;
            return Ok(b);
        }
        match self.grow(&mut g, size, kind) {
            Ok(b) => Ok(b),
            Err(first) => {
                log::debug!("{}: {first}; releasing the cache and retrying once", self.label);
                self.collect_pending(&mut g, true);
                if self.reusing()
                    && let Some(b) = self.take_cached(&mut g, size, kind, stream)
                {
                    g.cache_hits += 1;
                    return Ok(b);
                }
                self.release_locked(&mut g);
                self.grow(&mut g, size, kind).map_err(|e| {
                    log::warn!("{}: out of memory for {bytes} bytes: {e}", self.label);
                    // The backend's own out-of-memory (or whatever refused the memory)
                    // stays the source; the pool adds its stats.
                    let source: Option<crate::error::Source> = match e {
                        Error::OutOfMemory { source, .. } => source,
                        other => Some(std::sync::Arc::new(other)),
                    };
                    Error::OutOfMemory {
                        device: self.label.clone(),
                        requested: bytes,
                        stats: Box::new(self.stats_locked(&g)),
                        source,
                    }
                })
            }
        }
    }

    /// Returns a block. `events` were recorded after the last queued work using it on
    /// each stream; the block is reused only once they complete. The pool takes
    /// ownership of the events and destroys them.
    pub fn free(&self, block: Block, events: Vec<(StreamId, EventId)>) -> Result<()> {
        let mut g = self.lock();
        let addr = block.ptr.0;
        let Some(e) = g.blocks.get_mut(&addr) else {
            return Err(Error::on_device(self.device, format!("{}: free of unknown block {:#x}", self.label, addr)));
        };
        let State::Used { inherited } = &mut e.state else {
            return Err(Error::on_device(self.device, format!("{}: double free of block {:#x}", self.label, addr)));
        };
        let mut events = events;
        events.append(inherited);
        let size = e.size;
        let seg = e.segment;
        e.state = State::Pending { events };
        g.in_use -= size;
        if g.segments.get(&seg).is_some_and(|s| s.kind == BlockKind::Large) {
            g.system_in_use -= size;
        }
        g.pending.insert(addr);
        self.collect_pending(&mut g, false);
        Ok(())
    }

    /// Frees every cached segment that has no block in use; returns the bytes released.
    pub fn release_cached(&self) -> usize {
        let mut g = self.lock();
        self.collect_pending(&mut g, false);
        self.release_locked(&mut g)
    }

    /// Waits for every pending free, then releases the cache.
    pub fn trim(&self) -> usize {
        let mut g = self.lock();
        self.collect_pending(&mut g, true);
        self.release_locked(&mut g)
    }

    pub fn stats(&self) -> PoolStats {
        let mut g = self.lock();
        self.collect_pending(&mut g, false);
        self.stats_locked(&g)
    }

    fn stats_locked(&self, g: &Inner) -> PoolStats {
        let largest_small = g.free_small.iter().next_back().map_or(0, |(s, _)| *s);
        let largest_large = g.free_large.iter().next_back().map_or(0, |(s, _)| *s);
        let largest = largest_small.max(largest_large);
        let free: usize = g.free_small.iter().chain(g.free_large.iter()).map(|(s, _)| s).sum();
        PoolStats {
            total_bytes: g.total,
            in_use_bytes: g.in_use,
            cached_bytes: g.total - g.in_use,
            system_bytes: g.system_in_use,
            peak_in_use_bytes: g.peak_in_use,
            peak_total_bytes: g.peak_total,
            largest_free_block: largest,
            fragmentation: if free == 0 { 0.0 } else { 1.0 - largest as f64 / free as f64 },
            pending_blocks: g.pending.len(),
            segments: g.segments.len(),
            system_allocations: g.system_allocations,
            cache_hits: g.cache_hits,
            allocations: g.allocations,
            limit_bytes: self.cfg.limit_bytes,
        }
    }

    /// Moves pending blocks whose events completed to the free lists (or back to the
    /// system). With `wait`, waits for every pending block's events first.
    fn collect_pending(&self, g: &mut Inner, wait: bool) {
        if g.pending.is_empty() {
            return;
        }
        let addrs: Vec<u64> = g.pending.iter().copied().collect();
        for addr in addrs {
            let done = match g.blocks.get(&addr).map(|b| &b.state) {
                Some(State::Pending { events }) => events.iter().all(|(_, ev)| {
                    if wait && let Err(e) = self.backend.synchronize_event(self.device, *ev) {
                        log::warn!("{}: waiting for a pending free: {e}", self.label);
                    }
                    // An event that cannot be queried is treated as done only when waited
                    // for: never hand out memory on a guess.
                    self.backend.query_event(self.device, *ev).unwrap_or(wait)
                }),
                _ => true,
            };
            if done {
                g.pending.remove(&addr);
                if let Some(b) = g.blocks.get_mut(&addr) {
                    if let State::Pending { events } = std::mem::replace(&mut b.state, State::Free) {
                        for (_, ev) in events {
                            let _ = self.backend.destroy_event(self.device, ev);
                        }
                    }
                    // settled by `release_block` below
                    b.state = State::Used { inherited: Vec::new() };
                }
                self.release_block(g, addr);
            }
        }
    }

    /// Turns a used-but-freed block into free space: back to the system when not
    /// reusing, else into the free lists, coalesced with free neighbours.
    fn release_block(&self, g: &mut Inner, addr: u64) {
        let Some(b) = g.blocks.get(&addr) else { return };
        let (mut start, mut size, seg) = (addr, b.size, b.segment);
        let kind = g.segments.get(&seg).map_or(BlockKind::Large, |s| s.kind);
        if !self.reusing() {
            // Without reuse every block is its own segment: give it back.
            g.blocks.remove(&addr);
            self.return_segment(g, seg);
            return;
        }
        // Coalesce with the previous block.
        if let Some((&paddr, p)) = g.blocks.range(..addr).next_back()
            && p.segment == seg
            && paddr + p.size as u64 == addr
            && matches!(p.state, State::Free)
        {
            let psize = p.size;
            free_set(g, kind).remove(&(psize, paddr));
            g.blocks.remove(&addr);
            start = paddr;
            size += psize;
        }
        // Coalesce with the next block.
        let next = start + size as u64;
        if let Some(n) = g.blocks.get(&next)
            && n.segment == seg
            && matches!(n.state, State::Free)
        {
            let nsize = n.size;
            free_set(g, kind).remove(&(nsize, next));
            g.blocks.remove(&next);
            size += nsize;
        }
        g.blocks.insert(start, BlockEntry { size, segment: seg, state: State::Free });
        free_set(g, kind).insert((size, start));
    }

    /// Finds a cached block of class `kind` with room for `size`, splitting it if the
    /// remainder is worth keeping.
    fn take_cached(&self, g: &mut Inner, size: usize, kind: BlockKind, stream: StreamId) -> Option<Block> {
        // Large blocks are only reused when they are not much bigger than the request,
        // so one huge cached block does not end up serving many small-ish requests.
        let fits = |s: usize| kind == BlockKind::Small || s <= size + size / 4 + LARGE_CLASS;
        let found = match self.cfg.strategy {
            // The smallest block that is big enough: if it is too big, so are the rest.
            ReuseStrategy::BestFit => free_set(g, kind).range((size, 0)..).next().copied().filter(|(s, _)| fits(*s)),
            // The lowest-addressed block among those that fit: one that is too big must not
            // hide a suitable block at a higher address.
            ReuseStrategy::FirstFit => {
                free_set(g, kind).iter().filter(|(s, _)| *s >= size && fits(*s)).min_by_key(|(_, a)| *a).copied()
            }
        };
        if let Some((bsize, addr)) = found {
            free_set(g, kind).remove(&(bsize, addr));
            return Some(self.hand_out(g, addr, size, kind, Vec::new()));
        }
        // A block freed on this very stream can be reused at once: the stream's order
        // puts the new work after the old. It is handed out whole (a split-off tail would
        // be free for every stream while the old work may still use it) and keeps its
        // events until it is freed again.
        let min_split = self.min_split(kind);
        let same_stream = g
            .pending
            .iter()
            .copied()
            .filter(|a| {
                let b = &g.blocks[a];
                let seg_kind = g.segments.get(&b.segment).map(|s| s.kind);
                seg_kind == Some(kind)
                    && b.size >= size
                    && b.size - size < min_split
                    && (kind == BlockKind::Small || b.size <= size + size / 4 + LARGE_CLASS)
                    && matches!(&b.state, State::Pending { events } if events.iter().all(|(s, _)| *s == stream))
            })
            .min_by_key(|a| g.blocks[a].size);
        if let Some(addr) = same_stream {
            g.pending.remove(&addr);
            let b = g.blocks.get_mut(&addr)?;
            let inherited = match std::mem::replace(&mut b.state, State::Free) {
                State::Pending { events } => events,
                _ => Vec::new(),
            };
            return Some(self.hand_out(g, addr, size, kind, inherited));
        }
        None
    }

    /// Marks the free block at `addr` used, splitting off the tail when it is large enough
    /// (never when the block carries `inherited` events: its tail may still be in use).
    fn hand_out(
        &self,
        g: &mut Inner,
        addr: u64,
        size: usize,
        kind: BlockKind,
        inherited: Vec<(StreamId, EventId)>,
    ) -> Block {
        let min_split = self.min_split(kind);
        let b = g.blocks.get_mut(&addr).expect("free block is indexed");
        let seg = b.segment;
        let have = b.size;
        let mut used = have;
        if inherited.is_empty() && have - size >= min_split {
            b.size = size;
            used = size;
        }
        b.state = State::Used { inherited };
        if used < have {
            let tail = addr + used as u64;
            g.blocks.insert(tail, BlockEntry { size: have - used, segment: seg, state: State::Free });
            free_set(g, kind).insert((have - used, tail));
        }
        g.in_use += used;
        if kind == BlockKind::Large {
            g.system_in_use += used;
        }
        g.peak_in_use = g.peak_in_use.max(g.in_use);
        Block { ptr: DevicePtr(addr), size: used, kind }
    }

    /// Size of a pooled segment: `segment_bytes`, or under a smaller limit the limit
    /// rounded down to whole size classes, so that small requests still share segments.
    fn small_segment(&self) -> usize {
        let seg = self.cfg.segment_bytes;
        match self.cfg.limit_bytes {
            Some(limit) if limit < seg => {
                let class = SMALL_CLASS.max(self.cfg.alignment);
                limit / class * class
            }
            _ => seg,
        }
    }

    /// Gets a new segment from the system and hands out a block from it.
    fn grow(&self, g: &mut Inner, size: usize, kind: BlockKind) -> Result<Block> {
        // A small class can exceed the segment size when the threshold is not a multiple
        // of the class granularity; such a request gets a segment of its own size.
        let seg_size = if kind == BlockKind::Small && self.reusing() { self.small_segment().max(size) } else { size };
        if let Some(limit) = self.cfg.limit_bytes
            && g.total.checked_add(seg_size).is_none_or(|t| t > limit)
        {
            return Err(Error::on_device(
                self.device,
                format!("pool limit {limit} B reached ({} B held, {seg_size} B more needed)", g.total),
            ));
        }
        let ptr = self.backend.alloc(self.device, seg_size, self.cfg.alignment)?;
        g.system_allocations += 1;
        g.total += seg_size;
        g.peak_total = g.peak_total.max(g.total);
        g.segments.insert(ptr.0, Segment { size: seg_size, kind });
        g.blocks.insert(ptr.0, BlockEntry { size: seg_size, segment: ptr.0, state: State::Free });
        Ok(self.hand_out(g, ptr.0, size, kind, Vec::new()))
    }

    fn release_locked(&self, g: &mut Inner) -> usize {
        let whole: Vec<u64> = g
            .segments
            .iter()
            .filter(|(base, s)| g.blocks.get(base).is_some_and(|b| b.size == s.size && matches!(b.state, State::Free)))
            .map(|(b, _)| *b)
            .collect();
        let mut released = 0;
        for base in whole {
            let kind = g.segments[&base].kind;
            let size = g.blocks[&base].size;
            free_set(g, kind).remove(&(size, base));
            g.blocks.remove(&base);
            released += self.return_segment(g, base);
        }
        if released > 0 {
            log::debug!("{}: released {released} cached bytes", self.label);
        }
        released
    }

    fn return_segment(&self, g: &mut Inner, base: u64) -> usize {
        let Some(seg) = g.segments.remove(&base) else {
            return 0;
        };
        g.total -= seg.size;
        if let Err(e) = self.backend.free(self.device, DevicePtr(base)) {
            log::warn!("{}: returning a segment to the system: {e}", self.label);
        }
        seg.size
    }
}

fn free_set(g: &mut Inner, kind: BlockKind) -> &mut BTreeSet<(usize, u64)> {
    match kind {
        BlockKind::Small => &mut g.free_small,
        BlockKind::Large => &mut g.free_large,
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let mut g = self.lock();
        self.collect_pending(&mut g, true);
        let inherited: Vec<EventId> = g
            .blocks
            .values_mut()
            .filter_map(|b| match &mut b.state {
                State::Used { inherited } => Some(std::mem::take(inherited)),
                _ => None,
            })
            .flatten()
            .map(|(_, ev)| ev)
            .collect();
        for ev in inherited {
            let _ = self.backend.destroy_event(self.device, ev);
        }
        let bases: Vec<u64> = g.segments.keys().copied().collect();
        for base in bases {
            self.return_segment(&mut g, base);
        }
    }
}
