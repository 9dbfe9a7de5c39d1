//! Frozen plans: a compiled graph's launches validated once for one arena, the submission
//! steps between its streams, and where each output comes from; replayed on every run.
//!
//! * [`build`] — [`CompiledGraph::freeze`](super::exec::CompiledGraph): validating each
//!   node's launch and laying out the steps.
//! * [`run`] — a run through a plan: per-run addresses patched in, the steps submitted.
//! * [`host`] — [`CompiledGraph::run_host`](super::exec::CompiledGraph::run_host): a run
//!   over the caller's host buffers, read and written in place where the device lends them.
//!
//! Each arena's `Instance` holds its own plan.

mod build;
pub mod host;
mod run;

use crate::backend::{Frozen, FrozenLaunch, FrozenStep};
use crate::op::TensorMeta;
use crate::tensor::Tensor;
use crate::utilisation::UnitCounts;

/// Where a graph output comes from on a frozen run.
pub(super) enum OutputSrc {
    /// Graph input `i`, returned as is.
    Input(usize),
    /// A constant, returned as is.
    Constant(Tensor),
    /// Per-run output `j` (address slot `inputs + j`).
    PerRun(usize),
}

/// A compiled graph's launches, validated once. Arena slots and constants (and views of
/// them) are fixed operands; graph inputs and outputs (and views of them) get their
/// addresses per run from a table: inputs in graph order, then the per-run outputs.
pub(super) struct FrozenPlan {
    /// In submission order (alias nodes run no kernel and have none).
    pub(super) launches: Vec<FrozenLaunch>,
    /// The backend's own form of `launches` ([`crate::Backend::freeze`]), when it has one.
    pub(super) backend_form: Option<Frozen>,
    /// The submission steps of a run, in order; events are indexed by the node they
    /// follow. A backend may take them whole ([`crate::Backend::launch_frozen_run`]).
    pub(super) steps: Vec<FrozenStep>,
    /// Parallel to `steps`: what the launches of each `Launch` step do on each unit, for
    /// the utilisation counters (empty for the other steps).
    pub(super) step_units: Vec<UnitCounts>,
    /// Metadata of each per-run output.
    pub(super) per_run: Vec<TensorMeta>,
    pub(super) outputs: Vec<OutputSrc>,
    /// The streams (schedule indices) that use each address slot.
    pub(super) slot_streams: Vec<Vec<usize>>,
}
