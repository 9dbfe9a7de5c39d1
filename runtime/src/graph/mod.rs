//! Graphs: build once, compile once (fusion, kernel selection, a static memory plan,
//! stream assignment), run many times.
//!
//! * [`ir`] — values, nodes, constants, the builder and whole-graph validation.
//! * [`fusion`] — rewrites to the fused ops (Attention, BiasGelu, AddLayerNorm).
//! * [`schedule`] — stream assignment and the happens-before relation it implies.
//! * [`planner`] — offsets of intermediates in one arena.
//! * [`exec`] — the compiled, executable plan, its profile and Chrome trace.

pub mod exec;
pub mod fusion;
pub mod ir;
pub mod planner;
pub mod schedule;

pub use exec::{CompileOptions, CompiledGraph, NodeProfile, RunProfile};
pub use ir::{Graph, HostTensor, Node, NodeId, Value, ValueId, ValueKind};
pub use planner::{Buffer, MemoryPlan};
pub use schedule::{Schedule, ScheduleStrategy};
