//! Compiled graphs: what compiling (`compile.rs`) leaves for every run, the options it
//! takes, and the run arenas (`run.rs` takes one per run).

use super::arena::{Instance, InstanceSet, Lease, Slot, Take};
use super::fusion::FusionStats;
use super::host_tier::HostTierNode;
use super::ir::{Graph, ValueId};
use super::planner::MemoryPlan;
use super::schedule::{Schedule, ScheduleStrategy};
use crate::config::{GraphCapture, Precision, RuntimeConfig};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::stream::Stream;
use crate::tensor::Tensor;
use std::collections::HashMap;

/// What `compile` does; [`CompileOptions::from_config`] reads the optimisation switches.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    pub device: usize,
    /// Apply the fusion pass (hardware mapping).
    pub fuse: bool,
    /// Place intermediates in one arena by the static plan (memory reuse); otherwise each
    /// intermediate gets its own buffer for the whole run.
    pub memory_reuse: bool,
    /// Spread independent nodes over several streams.
    pub parallel: bool,
    pub strategy: ScheduleStrategy,
    pub max_streams: usize,
    /// Precision of the Linear weights ([`Precision`]); `Auto` is resolved for the
    /// device when the graph is compiled, and [`CompiledGraph::options`] holds the result.
    pub precision: Precision,
    /// Most runs of the graph in flight at once: each holds an arena (and streams, events
    /// and frozen launches) of its own, made on first need and kept; a run beyond this
    /// many waits for one to finish. At least 1.
    pub max_arenas: usize,
    /// Refuse to compile a graph any node of which would run on a device backend's host
    /// tier ([`CompiledGraph::host_tier`]); the error names the node and why.
    pub deny_host_tier: bool,
    /// Capture each arena's launches once and replay them per run, where the backend can
    /// ([`GraphCapture`]).
    pub graph_capture: GraphCapture,
    /// Store the Linear weights in `precision` (bf16) also where the backend says that
    /// precision is slow on the device ([`crate::Backend::slow_precision`]: a CPU without
    /// AVX-512-BF16 or AMX, which widens each weight to f32 in the product; elsewhere it
    /// changes nothing). That halves
    /// the bytes a memory-bound graph streams, such as an LLM's decode step, which reads
    /// every weight once per token; a compute-bound graph (an encoder over a sequence)
    /// runs faster on f32 weights, so it is off unless set (the LLM engine sets it).
    pub store_slow_precision: bool,
}

/// [`CompileOptions::max_arenas`] unless set otherwise.
pub const DEFAULT_MAX_ARENAS: usize = 4;

impl CompileOptions {
    pub fn from_config(cfg: &RuntimeConfig, device: usize) -> CompileOptions {
        CompileOptions {
            device,
            fuse: cfg.optimizations.hardware_mapping,
            memory_reuse: cfg.optimizations.memory_reuse,
            parallel: cfg.optimizations.parallel_scheduling,
            strategy: cfg.scheduling.into(),
            max_streams: cfg.max_streams,
            precision: cfg.precision,
            max_arenas: DEFAULT_MAX_ARENAS,
            deny_host_tier: false,
            graph_capture: cfg.graph_capture,
            store_slow_precision: false,
        }
    }
}

/// A graph compiled for one device of one runtime.
///
/// `Send + Sync`: [`run`](Self::run) may be called from any number of threads at once.
/// Each run takes an arena of its own from the graph's set (see
/// [`CompileOptions::max_arenas`]), so concurrent runs overlap and never share
/// intermediates, streams, events or frozen launches; constants and packed weights are
/// shared, read-only.
pub struct CompiledGraph {
    pub(super) rt: Runtime,
    pub(super) graph: Graph,
    pub(super) schedule: Schedule,
    pub(super) options: CompileOptions,
    pub(super) fusion: FusionStats,
    pub(super) constants: HashMap<ValueId, Tensor>,
    /// Intermediates (arena buffers, in plan order).
    pub(super) inter: Vec<ValueId>,
    pub(super) plan: Option<MemoryPlan>,
    /// Which nodes record an event after them (another stream reads their output).
    pub(super) needs_event: Vec<bool>,
    /// Thread budget of each node (0 = all).
    pub(super) threads: Vec<usize>,
    /// What the backend prepared from each node's constant inputs (packed weights).
    pub(super) prepacked: Vec<Option<crate::backend::Prepacked>>,
    /// Reshape outputs that are views of another value (their node runs no kernel).
    pub(super) aliases: HashMap<ValueId, ValueId>,
    /// Arena intermediates and the node that reads each last, when all of its readers run
    /// on one stream (used by `run_poisoned`).
    pub(super) last_reader: Vec<(ValueId, usize)>,
    /// Whether runs go through frozen launches (validated for the first arena; absent when
    /// something about the graph cannot be frozen, e.g. intermediates allocated per run).
    pub(super) runs_frozen: bool,
    /// The run arenas (at least one once compiled).
    pub(super) instances: Option<InstanceSet>,
    /// Nodes that run on the host tier, and why.
    pub(super) host_tier: Vec<HostTierNode>,
}

/// How many run arenas a compiled graph holds, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaStats {
    /// Arenas alive now.
    pub arenas: usize,
    /// The most alive at once.
    pub peak: usize,
    /// The configured limit.
    pub max: usize,
    /// Bytes of all arenas together.
    pub bytes: usize,
    /// Device bytes the backend holds beyond the arenas for the frozen launches of the
    /// arenas not running now (Ascend: recorded executors' own buffers, workspaces, and
    /// graph-capture staging); 0 on the CPU.
    pub backend_bytes: usize,
}

impl CompiledGraph {
    /// A run arena: the planned arena (or per-run slots), streams, events, and the frozen
    /// launches when the graph runs frozen. With `sole` (no other arena exists), an arena
    /// whose streams cannot be made (the runtime's `max_streams` user streams are taken,
    /// e.g. by other compiled graphs) runs its nodes in order on the device's default
    /// stream instead of failing: the same results, without the parallelism.
    pub(super) fn new_instance(&self, sole: bool) -> Result<Instance> {
        let device = self.options.device;
        let rt = &self.rt;
        let mut slots = HashMap::with_capacity(self.inter.len());
        let mut arena = None;
        match &self.plan {
            Some(p) => {
                let a = rt.empty(DType::U8, [p.arena_bytes.max(1)], device)?;
                for (k, &v) in self.inter.iter().enumerate() {
                    let m = self.graph.meta(v);
                    slots.insert(v, Slot::Arena(a.view_bytes(p.offsets[k], m.dtype, m.shape.clone())?));
                }
                arena = Some(a);
            }
            None => {
                for &v in &self.inter {
                    slots.insert(v, Slot::PerRun(self.graph.meta(v).clone()));
                }
            }
        }
        let streams: Vec<Stream> = if self.schedule.streams > 1 {
            match (0..self.schedule.streams).map(|_| rt.stream(device)).collect::<Result<_>>() {
                Ok(streams) => streams,
                Err(e) if sole => {
                    log::info!(
                        "compiled graph: the schedule's {} streams cannot be made ({e}); the arena runs its nodes in order on the default stream",
                        self.schedule.streams
                    );
                    Vec::new()
                }
                Err(e) => return Err(e),
            }
        } else {
            Vec::new()
        };
        let done = self
            .needs_event
            .iter()
            .map(|&n| if n { rt.event(device).map(Some) } else { Ok(None) })
            .collect::<Result<_>>()?;
        let mut inst = Instance { slots, arena, streams, done, frozen: None };
        if self.runs_frozen {
            inst.frozen = Some(self.freeze(&inst)?);
        }
        Ok(inst)
    }

    /// An arena for one run: a free one, a new one while fewer than `max_arenas` exist, or
    /// the next one returned. A new one that cannot be made (device memory, stream limit)
    /// is not an error while another exists: the run waits for that one instead.
    pub(super) fn lease(&self) -> Result<Lease<'_>> {
        let set = self.instances.as_ref().ok_or_else(|| Error::invalid("Graph", "not compiled"))?;
        let mut may_make = true;
        loop {
            match set.take(may_make) {
                Take::Got(l) => return Ok(l),
                Take::Make => match self.new_instance(set.stats().alive <= 1) {
                    Ok(inst) => {
                        log::debug!("compiled graph: arena {} of at most {} made", set.stats().alive, set.max());
                        return Ok(set.adopt(inst));
                    }
                    Err(e) => {
                        set.abandon();
                        if set.stats().alive == 0 {
                            return Err(e);
                        }
                        log::info!("compiled graph: no further arena ({e}); waiting for a free one");
                        may_make = false;
                    }
                },
            }
        }
    }

    /// The run arenas: how many exist, the most at once, the limit and their bytes.
    pub fn arena_stats(&self) -> ArenaStats {
        let Some(set) = self.instances.as_ref() else {
            return ArenaStats { arenas: 0, peak: 0, max: 0, bytes: 0, backend_bytes: 0 };
        };
        let s = set.stats();
        let backend_bytes = set.frozen_bytes(self.rt.backend().as_ref());
        ArenaStats { arenas: s.alive, peak: s.peak, max: set.max(), bytes: s.arena_bytes, backend_bytes }
    }

    /// The graph as compiled (after fusion and precision changes). Its constants keep
    /// their names and metadata; their bytes live on the device only.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }
    pub fn memory_plan(&self) -> Option<&MemoryPlan> {
        self.plan.as_ref()
    }
    pub fn fusion_stats(&self) -> &FusionStats {
        &self.fusion
    }
    /// The nodes that run on a device backend's host tier (reference kernels on host
    /// copies), each with why the faster kernels declined; empty on the CPU backend.
    pub fn host_tier(&self) -> &[HostTierNode] {
        &self.host_tier
    }
    pub fn options(&self) -> &CompileOptions {
        &self.options
    }
    /// True when `run` queues launches validated at compile time (the memory plan is on
    /// and every node could be frozen); false when it prepares every node on each run.
    pub fn runs_frozen(&self) -> bool {
        self.runs_frozen
    }
    /// Reshape nodes turned into views (they run no kernel).
    pub fn view_nodes(&self) -> usize {
        self.graph.nodes.iter().filter(|n| self.is_view(n)).count()
    }

    /// True when node `n` runs no kernel: a Reshape whose output is a view of its input.
    pub(super) fn is_view(&self, n: &super::ir::Node) -> bool {
        matches!(n.op, crate::op::Op::Reshape { .. }) && n.outputs.first().is_some_and(|o| self.aliases.contains_key(o))
    }
}

/// `e` with the name of the graph node it happened in, when it is about the node's operands.
pub(super) fn in_node(e: Error, node: &str) -> Error {
    match e {
        Error::Invalid { op, msg, operands } => Error::Invalid { op, msg: format!("node {node:?}: {msg}"), operands },
        other => other,
    }
}
