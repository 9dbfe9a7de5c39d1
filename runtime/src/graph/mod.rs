//! Graphs: build once, compile once (fusion, kernel selection, a static memory plan,
//! stream assignment), run many times.
//!
//! * [`ir`] — values, nodes, constants, the builder and whole-graph validation.
//! * [`fusion`] — rewrites to the fused ops (Attention, BiasGelu, AddLayerNorm).
//! * [`schedule`] — stream assignment and the happens-before relation it implies.
//! * [`planner`] — offsets of intermediates in one arena.
//! * [`precision`] — compile-time precision rewrites (bf16 weights).
//! * [`exec`] — compiling: kernel selection, constants, the plan; the node-by-node run.
//! * [`arena`] — the per-graph set of run arenas that lets many threads run one graph.
//! * [`frozen`] — launches validated once per arena and the batched run through them;
//!   [`fast_plan`] — what such a run replays.
//! * [`profile`] — per-node timings of a run and its Chrome trace.
//! * [`shared`] — constants shared by the graphs compiled from one model.

mod arena;
pub mod exec;
mod fast_plan;
mod frozen;
pub mod fusion;
pub mod host_tier;
pub mod ir;
pub mod planner;
mod precision;
pub mod profile;
pub mod schedule;
pub mod shared;

pub use exec::{ArenaStats, CompileOptions, CompiledGraph, DEFAULT_MAX_ARENAS};
pub use host_tier::{HOST_UNIT, HostTierNode};
pub use ir::{Graph, HostBytes, HostTensor, Node, NodeId, Value, ValueId, ValueKind};
pub use planner::{Buffer, MemoryPlan};
pub use profile::{NodeProfile, RunProfile};
pub use schedule::{Schedule, ScheduleStrategy};
pub use shared::SharedConstants;
