//! The per-graph set of run arenas, so that one compiled graph can serve many threads.
//!
//! A run needs memory and device objects of its own: the arena its intermediates live in,
//! the streams it queues on, the events that order them, and the launches frozen with the
//! arena's addresses. One [`Instance`] holds all of them. A run takes an instance from the
//! graph's [`InstanceSet`] and gives it back when it ends; two runs never hold the same one.
//! Instances are made on demand up to the set's limit and kept for later runs; when all of
//! them are taken (or the device cannot make another), a run waits for one to come back.

use super::frozen::FrozenPlan;
use super::ir::ValueId;
use crate::op::TensorMeta;
use crate::stream::{Event, Stream};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Where an intermediate lives during a run.
pub(super) enum Slot {
    /// A view into the instance's arena.
    Arena(Tensor),
    /// Allocated at the start of every run (no reuse).
    PerRun(TensorMeta),
}

/// What one run uses exclusively.
pub(super) struct Instance {
    pub(super) slots: HashMap<ValueId, Slot>,
    /// The arena the `Slot::Arena` views point into (absent without memory reuse).
    pub(super) arena: Option<Tensor>,
    /// The schedule's streams (empty when the graph runs on the default stream).
    pub(super) streams: Vec<Stream>,
    /// An event per node, recorded after it when another stream reads its output.
    pub(super) done: Vec<Option<Event>>,
    /// The graph's launches validated once with this instance's addresses (absent when
    /// the graph runs node by node).
    pub(super) frozen: Option<FrozenPlan>,
}

impl Instance {
    /// The schedule's stream `s` (the default stream when the graph uses one stream).
    pub(super) fn stream_at<'a>(&'a self, s: usize, default: &'a Stream) -> &'a Stream {
        if self.streams.is_empty() { default } else { &self.streams[s] }
    }

    fn arena_bytes(&self) -> usize {
        self.arena.as_ref().map_or(0, Tensor::nbytes)
    }

    /// Waits for everything queued on the instance's streams, discarding errors: after a
    /// failed run, the next run must neither inherit its queued work nor its error.
    fn drain(&self) {
        for s in &self.streams {
            if let Err(e) = s.synchronize() {
                log::debug!("compiled graph: discarding the error of a failed run: {e}");
            }
        }
    }
}

#[derive(Default)]
struct SetState {
    free: Vec<Arc<Instance>>,
    /// Instances alive (free, taken, or being made).
    created: usize,
    /// The most that were alive at once.
    peak: usize,
    arena_bytes: usize,
}

/// The instances of one compiled graph. `Send + Sync`: any number of threads may take
/// and return instances at once.
pub(super) struct InstanceSet {
    state: Mutex<SetState>,
    returned: Condvar,
    max: usize,
}

/// How many instances a set holds.
pub(super) struct SetStats {
    /// Instances alive (free, taken, or being made).
    pub(super) alive: usize,
    /// The most that were alive at once.
    pub(super) peak: usize,
    /// Bytes of all their arenas.
    pub(super) arena_bytes: usize,
}

/// The state a caller sees when it cannot take a free instance.
pub(super) enum Take<'a> {
    Got(Lease<'a>),
    /// The caller is to make a new instance and hand it to [`Lease::new`] (or call
    /// [`InstanceSet::abandon`] when making it failed).
    Make,
}

impl InstanceSet {
    pub(super) fn new(first: Instance, max: usize) -> InstanceSet {
        let arena_bytes = first.arena_bytes();
        let state = SetState { free: vec![Arc::new(first)], created: 1, peak: 1, arena_bytes };
        InstanceSet { state: Mutex::new(state), returned: Condvar::new(), max: max.max(1) }
    }

    fn lock(&self) -> MutexGuard<'_, SetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free instance, or permission to make one (when fewer than the limit exist and
    /// `may_make`), or waits until one is returned.
    pub(super) fn take(&self, may_make: bool) -> Take<'_> {
        let mut g = self.lock();
        loop {
            if let Some(inst) = g.free.pop() {
                return Take::Got(Lease { set: self, inst, clean: false });
            }
            if may_make && g.created < self.max {
                g.created += 1;
                g.peak = g.peak.max(g.created);
                return Take::Make;
            }
            g = self.returned.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A lease on an instance the caller just made after [`Take::Make`].
    pub(super) fn adopt(&self, inst: Instance) -> Lease<'_> {
        self.lock().arena_bytes += inst.arena_bytes();
        Lease { set: self, inst: Arc::new(inst), clean: false }
    }

    /// Making an instance after [`Take::Make`] failed: the slot is given back, so the
    /// caller can wait for an existing instance instead.
    pub(super) fn abandon(&self) {
        let mut g = self.lock();
        g.created -= 1;
        drop(g);
        self.returned.notify_one();
    }

    fn give_back(&self, inst: Arc<Instance>) {
        self.lock().free.push(inst);
        self.returned.notify_one();
    }

    /// Bytes the backend holds for the frozen plans of the arenas not running now.
    pub(super) fn frozen_bytes(&self, backend: &dyn crate::backend::Backend) -> usize {
        let g = self.lock();
        g.free.iter().filter_map(|i| i.frozen.as_ref()?.backend_form.as_ref()).map(|f| backend.frozen_bytes(f)).sum()
    }

    pub(super) fn stats(&self) -> SetStats {
        let g = self.lock();
        SetStats { alive: g.created, peak: g.peak, arena_bytes: g.arena_bytes }
    }

    pub(super) fn max(&self) -> usize {
        self.max
    }
}

/// An instance taken for one run; returned to its set when dropped (after draining its
/// streams, unless the run marked it clean).
pub(super) struct Lease<'a> {
    set: &'a InstanceSet,
    inst: Arc<Instance>,
    clean: bool,
}

impl Lease<'_> {
    pub(super) fn get(&self) -> &Instance {
        &self.inst
    }

    /// The run finished and synchronised its streams: nothing is left queued.
    pub(super) fn finish(mut self) {
        self.clean = true;
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if !self.clean {
            self.inst.drain();
        }
        self.set.give_back(self.inst.clone());
    }
}
