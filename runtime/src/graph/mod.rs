//! Graphs: build once, compile once (fusion, kernel selection, a static memory plan,
//! stream assignment), run many times.
//!
//! * [`ir`] — values, nodes, constants, the builder and whole-graph validation.
//! * [`inplace`] — in-place ops in graphs (KvCacheWrite): their rules and the write-after-read order.
//! * [`canonical`] — rewrites an exporter's spellings (ONNX's) into the ops fusion matches.
//! * [`fusion`] — rewrites to the fused ops (Attention, BiasGelu, AddLayerNorm).
//! * [`schedule`] — stream assignment and the happens-before relation it implies.
//! * [`planner`] — offsets of intermediates in one arena.
//! * [`precision`] — compile-time precision rewrites (bf16 weights).
//! * [`exec`] — the compiled graph: its options, what it holds, its run arenas.
//! * [`compile`] — the compile passes, in order: canonical rewrites and fusion, precision, kernel selection,
//!   scheduling, constants, views, the memory plan, thread budgets, the first arena.
//! * [`run`] — a run: through the arena's frozen plan, or node by node.
//! * [`arena`] — the per-graph set of run arenas that lets many threads run one graph.
//! * [`frozen`] — frozen plans: the launches validated once per arena, the steps between
//!   streams, and the run that replays them.
//! * [`profile`] — per-node timings of a run and its Chrome trace.
//! * [`shared`] — constants shared by the graphs compiled from one model.

mod arena;
pub mod canonical;
mod compile;
pub mod exec;
mod frozen;
pub mod fusion;
pub mod host_tier;
pub mod inplace;
pub mod ir;
pub mod planner;
mod precision;
pub mod profile;
mod run;
pub mod schedule;
pub mod shared;
mod siblings;

pub use exec::{ArenaStats, CompileOptions, CompiledGraph, DEFAULT_MAX_ARENAS};
pub use frozen::host::HostRun;
pub use host_tier::{HOST_UNIT, HostTierNode};
pub use ir::{Graph, HostBytes, HostTensor, Node, NodeId, Value, ValueId, ValueKind};
pub use planner::{Buffer, MemoryPlan};
pub use profile::{NodeProfile, RunProfile};
pub use schedule::{Schedule, ScheduleStrategy};
pub use shared::SharedConstants;
