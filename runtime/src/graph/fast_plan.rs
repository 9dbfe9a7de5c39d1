//! What a frozen run replays: the launches of a compiled graph validated once for one
//! arena, the submission steps between streams, and where each output comes from.
//! Built and run by `frozen`; held by each arena `Instance`.

use crate::backend::{Frozen, FrozenLaunch, FrozenStep};
use crate::kernel::Unit;
use crate::op::TensorMeta;
use crate::tensor::Tensor;

/// Where a graph output comes from on the fast path.
pub(super) enum OutputSrc {
    /// Graph input `i`, returned as is.
    Input(usize),
    /// A constant, returned as is.
    Constant(Tensor),
    /// Per-run output `j` (address slot `inputs + j`).
    PerRun(usize),
}

/// One step of a fast run, in submission order.
pub(super) enum Step {
    /// Stream `stream` waits for the event after node `node`.
    Wait { stream: usize, node: usize },
    /// Launches `nodes` of the plan go to stream `stream` as one submission. `units`:
    /// (unit, launches, FLOPs, bytes) of those launches, for the utilisation counters.
    Launch { stream: usize, nodes: std::ops::Range<usize>, units: UnitCounts },
    /// The event after node `node` is recorded on stream `stream`.
    Record { stream: usize, node: usize },
}

/// (unit, launches, FLOPs, bytes) per unit of a batch of launches.
pub(super) type UnitCounts = Vec<(Unit, u64, u64, u64)>;
/// A batch being laid out: its stream, first launch and unit counts.
pub(super) type OpenBatch = (usize, usize, UnitCounts);

/// A compiled graph's launches, validated once. Arena slots and constants (and views of
/// them) are fixed operands; graph inputs and outputs (and views of them) get their
/// addresses per run from a table: inputs in graph order, then the per-run outputs.
pub(super) struct FastPlan {
    /// In submission order (alias nodes run no kernel and have none).
    pub(super) launches: Vec<FrozenLaunch>,
    /// The backend's own form of `launches`, when it has one.
    pub(super) frozen: Option<Frozen>,
    pub(super) steps: Vec<Step>,
    /// `steps` as the backend takes a whole run ([`crate::Backend::launch_frozen_run`]):
    /// events indexed by the node they follow.
    pub(super) run_steps: Vec<FrozenStep>,
    /// Metadata of each per-run output.
    pub(super) per_run: Vec<TensorMeta>,
    pub(super) outputs: Vec<OutputSrc>,
    /// The streams (schedule indices) that use each address slot.
    pub(super) slot_streams: Vec<Vec<usize>>,
}
