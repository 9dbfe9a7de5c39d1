//! Compiled graphs: kernel selection, fusion, a static memory plan and stream assignment
//! done once; `run` many times.

use super::arena::{Instance, InstanceSet, Lease, Slot, Take};
use super::fusion::{self, FusionStats};
use super::host_tier::HostTierNode;
use super::ir::{Graph, HostBytes, ValueId, ValueKind};
use super::planner::{self, Buffer, MemoryPlan};
use super::precision;
use super::profile::{NodeProfile, RunProfile};
use super::schedule::{Schedule, ScheduleStrategy};
use super::shared::{self, SharedConstants};
use crate::config::{GraphCapture, Precision, RuntimeConfig};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::Unit;
use crate::op::TensorMeta;
use crate::runtime::Runtime;
use crate::stream::Target;
use crate::stream::{Event, Stream};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::time::Instant;

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
    fusion: FusionStats,
    pub(super) constants: HashMap<ValueId, Tensor>,
    /// Intermediates (arena buffers, in plan order).
    inter: Vec<ValueId>,
    plan: Option<MemoryPlan>,
    /// Which nodes record an event after them (another stream reads their output).
    needs_event: Vec<bool>,
    /// Thread budget of each node (0 = all).
    pub(super) threads: Vec<usize>,
    /// What the backend prepared from each node's constant inputs (packed weights).
    pub(super) prepacked: Vec<Option<crate::backend::Prepacked>>,
    /// Reshape outputs that are views of another value (their node runs no kernel).
    pub(super) aliases: HashMap<ValueId, ValueId>,
    /// Arena intermediates and the node that reads each last, when all of its readers run
    /// on one stream (used by `run_poisoned`).
    last_reader: Vec<(ValueId, usize)>,
    /// Whether runs go through frozen launches (validated for the first arena; absent when
    /// something about the graph cannot be frozen, e.g. intermediates allocated per run).
    frozen: bool,
    /// The run arenas (at least one once compiled).
    instances: Option<InstanceSet>,
    /// Nodes that run on the host tier, and why.
    host_tier: Vec<HostTierNode>,
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
    /// Validates, fuses, selects kernels, schedules and plans memory.
    pub fn compile(rt: &Runtime, graph: &Graph, options: CompileOptions) -> Result<CompiledGraph> {
        Self::compile_owned(rt, graph.clone(), options)
    }

    /// [`compile`](Self::compile) taking the graph: its constants' host bytes are freed as
    /// they are uploaded (peak memory about one copy of the weights, not two), unless the
    /// caller still shares them.
    pub fn compile_owned(rt: &Runtime, graph: Graph, options: CompileOptions) -> Result<CompiledGraph> {
        Self::compile_with(rt, graph, options, None)
    }

    /// [`compile_owned`](Self::compile_owned) with the constants' device copies (and what
    /// the backend prepared for them) taken from `shared` where it holds them, and left
    /// there for the next graph of the same model: compiling another input shape of a model
    /// then uploads and packs nothing (see [`SharedConstants`]).
    pub fn compile_shared(
        rt: &Runtime,
        graph: Graph,
        options: CompileOptions,
        shared: &SharedConstants,
    ) -> Result<CompiledGraph> {
        Self::compile_with(rt, graph, options, Some(shared))
    }

    fn compile_with(
        rt: &Runtime,
        graph: Graph,
        mut options: CompileOptions,
        shared: Option<&SharedConstants>,
    ) -> Result<CompiledGraph> {
        graph.validate()?;
        if options.precision == Precision::Auto {
            options.precision = Precision::Auto.resolve(rt.auto_precision(options.device)?);
            static ANNOUNCED: std::sync::Once = std::sync::Once::new();
            ANNOUNCED.call_once(|| {
                log::info!("precision auto: {} on {}", options.precision.name(), rt.backend_name());
            });
        }
        let (mut graph, fusion) = if options.fuse {
            let kernel_of =
                |op: &crate::op::Op, ins: &[TensorMeta]| rt.select_kernel(op, ins).ok().map(|k| k.name.to_string());
            let fused = fusion::fuse(&graph, &kernel_of)?;
            drop(graph);
            fused
        } else {
            (graph, FusionStats::default())
        };
        match options.precision {
            Precision::Bf16 => {
                let n = precision::low_precision_weights(rt, &mut graph, DType::BF16);
                log::info!("precision bf16: {n} Linear weights stored in bf16");
            }
            Precision::F16 => {
                let n = precision::low_precision_weights(rt, &mut graph, DType::F16);
                log::info!("precision f16: {n} Linear weights stored in fp16");
            }
            Precision::F32 | Precision::Auto => {}
        }
        let device = options.device;
        rt.device_info(device)?;
        // Kernel selection per node (errors name the node).
        let mut cost = Vec::with_capacity(graph.nodes.len());
        let mut kernels = Vec::with_capacity(graph.nodes.len());
        for n in &graph.nodes {
            let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
            let outs: Vec<TensorMeta> = n.outputs.iter().map(|v| graph.meta(*v).clone()).collect();
            let k = rt
                .select_kernel(&n.op, &ins)
                .map_err(|e| Error::invalid(n.op.name(), format!("node {:?}: {e}", n.name)))?;
            kernels.push(k.name.to_string());
            let f = n.op.flops(&ins, &outs) as f64;
            let b = n.op.bytes(&ins, &outs) as f64;
            cost.push(f / 50e9 + b / 10e9 + 2e-6);
        }
        let host_tier = super::host_tier::find(rt, &graph);
        if let Some(h) = host_tier.first() {
            log::warn!(
                "{} node(s) run on the host tier of {}, the first {:?} ({}): {}",
                host_tier.len(),
                rt.backend_name(),
                h.node,
                h.op,
                h.reason
            );
        }
        for h in &host_tier {
            log::info!("node {:?} ({}) runs on the host tier: {}", h.node, h.op, h.reason);
        }
        if let (true, Some(h)) = (options.deny_host_tier, host_tier.first()) {
            return Err(Error::Unsupported(format!(
                "node {:?} ({}) would run on the host tier of {} ({} such nodes): {}",
                h.node,
                h.op,
                rt.backend_name(),
                host_tier.len(),
                h.reason
            )));
        }
        let schedule = if options.parallel {
            let mut max_streams = options.max_streams;
            if options.strategy == ScheduleStrategy::Balanced {
                let ordinal = rt.inner.device(device)?.ordinal;
                if let Some(k) = rt.inner.backend.graph_streams(ordinal) {
                    max_streams = max_streams.min(k.max(1));
                }
            }
            Schedule::build(&graph, options.strategy, max_streams, &cost)
        } else {
            Schedule::sequential(&graph)
        };
        // Constant inputs prepared for their kernels once (e.g. packed weights). A constant
        // the backend wants in another layout is rewritten here, before its upload, when
        // this node is its only reader (its original bytes are then never uploaded).
        let readers = graph.consumers();
        let mut prepacked = Vec::with_capacity(graph.nodes.len());
        // Constants the store holds, and what this compile prepared (to offer it).
        let mut keys = shared.map_or_else(HashMap::new, |_| shared::keys(&graph, device));
        let mut hits = shared.map_or_else(HashMap::new, |st| shared::hits(st, &keys));
        let mut prepared: HashMap<ValueId, shared::Prepared> = HashMap::new();
        for (ni, k) in kernels.iter().enumerate() {
            let n = &graph.nodes[ni];
            let kernel = shared.map(|_| k.as_str());
            if let Some(p) = shared::reuse(&graph, n, kernel, &mut hits) {
                prepacked.push(Some(p));
                continue;
            }
            let consts: Vec<Option<&[u8]>> = n
                .inputs
                .iter()
                .map(|v| match &graph.values[v.0].kind {
                    ValueKind::Constant(t) => Some(t.bytes.as_slice()),
                    _ => None,
                })
                .collect();
            if consts.iter().all(Option::is_none) {
                prepacked.push(None);
                continue;
            }
            let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
            let Some(p) = rt
                .prepack(&n.op, &ins, &consts)
                .map_err(|e| Error::invalid(n.op.name(), format!("node {:?}: preparing constants: {e}", n.name)))?
            else {
                prepacked.push(None);
                continue;
            };
            let inputs = n.inputs.clone();
            let relayout_ok = p.relayout.iter().all(|(i, bytes)| {
                let Some(v) = inputs.get(*i) else { return false };
                match &graph.values[v.0].kind {
                    ValueKind::Constant(t) => {
                        t.bytes.len() == bytes.len()
                            && readers[v.0] == [super::ir::NodeId(ni)]
                            && inputs.iter().filter(|x| *x == v).count() == 1
                            && !graph.outputs.contains(v)
                    }
                    _ => false,
                }
            });
            if !relayout_ok {
                log::info!("node {:?}: a prepared constant has other readers; running without it", n.name);
                prepacked.push(None);
                continue;
            }
            let relaid: Vec<ValueId> = p.relayout.iter().map(|(i, _)| inputs[*i]).collect();
            for (i, bytes) in p.relayout {
                if let ValueKind::Constant(t) = &mut graph.values[inputs[i].0].kind {
                    t.bytes = bytes.into();
                }
            }
            if let Some(k) = kernel {
                shared::note(&graph, &inputs, &relaid, k, &p.prepacked, &mut hits, &mut prepared);
            }
            prepacked.push(Some(p.prepacked));
        }
        // Constants, uploaded once. What runs is the device copy (and anything prepacked):
        // each constant's host bytes are released right after its upload, so the weights
        // are never held twice when the caller handed the graph over (`compile_owned`).
        let mut constants = HashMap::new();
        for (i, v) in graph.values.iter_mut().enumerate() {
            if let ValueKind::Constant(t) = &mut v.kind {
                let id = ValueId(i);
                if let Some(e) = hits.get(&id) {
                    constants.insert(id, e.tensor.clone());
                } else {
                    let dev = rt.empty(t.dtype, t.shape.clone(), device)?;
                    upload_bytes(&dev, &t.bytes)?;
                    if let (Some(st), Some(k)) = (shared, keys.remove(&id)) {
                        st.offer(k, shared::entry(&dev, prepared.remove(&id)));
                    }
                    constants.insert(id, dev);
                }
                t.bytes = HostBytes::default();
            }
        }
        // Reshapes of contiguous values become views (no kernel, no buffer): the alias
        // shares its root's buffer, whose lifetime grows to cover the alias's readers.
        let mut alias_of: HashMap<ValueId, ValueId> = HashMap::new();
        for n in &graph.nodes {
            if let crate::op::Op::Reshape { .. } = n.op {
                let out = n.outputs[0];
                if !graph.outputs.contains(&out) {
                    let src = n.inputs[0];
                    let root = alias_of.get(&src).copied().unwrap_or(src);
                    alias_of.insert(out, root);
                }
            }
        }
        // Intermediates: every node output that is not a graph output or an alias.
        let mut inter: Vec<ValueId> = Vec::new();
        for n in &graph.nodes {
            for o in &n.outputs {
                if !graph.outputs.contains(o) && !alias_of.contains_key(o) {
                    inter.push(*o);
                }
            }
        }
        let mut consumers = graph.consumers();
        for (a, root) in &alias_of {
            let extra = consumers[a.0].clone();
            for c in extra {
                if !consumers[root.0].contains(&c) {
                    consumers[root.0].push(c);
                }
            }
        }
        let pos = &schedule.position;
        let def_node = |v: ValueId| match graph.values[v.0].kind {
            ValueKind::Node(n) => n.0,
            _ => 0,
        };
        let buffers: Vec<Buffer> = inter
            .iter()
            .map(|&v| {
                let def = def_node(v);
                let last_node = consumers[v.0].iter().map(|c| c.0).max_by_key(|&c| pos[c]).unwrap_or(def);
                Buffer { size: graph.meta(v).bytes(), def: pos[def], last: pos[last_node].max(pos[def]) }
            })
            .collect();
        let mut plan = None;
        if options.memory_reuse {
            // Conflict: unless the last reader of one happens-before the writer of the other.
            let nodes_of: Vec<(usize, usize)> = inter
                .iter()
                .map(|&v| {
                    let def = def_node(v);
                    let last = consumers[v.0].iter().map(|c| c.0).max_by_key(|&c| pos[c]).unwrap_or(def);
                    (def, last)
                })
                .collect();
            let readers: Vec<Vec<usize>> =
                inter.iter().map(|&v| consumers[v.0].iter().map(|c| c.0).collect()).collect();
            let conflict = |i: usize, j: usize| {
                let before = |a: usize, b: usize| {
                    // Every reader of `a` (and its writer) finishes before `b`'s writer starts.
                    let w = nodes_of[b].0;
                    let (da, _) = nodes_of[a];
                    (readers[a].is_empty() && schedule.happens_before(da, w))
                        || (!readers[a].is_empty() && readers[a].iter().all(|&r| schedule.happens_before(r, w)))
                };
                !(before(i, j) || before(j, i))
            };
            let align = rt.config().pool.alignment.max(64);
            let p = planner::plan(&buffers, &conflict, align)?;
            log::info!(
                "compiled graph: {} nodes, arena {} bytes, load {} bytes (ratio {:.3}, {})",
                graph.nodes.len(),
                p.arena_bytes,
                p.load_bytes,
                p.ratio(),
                p.strategy
            );
            plan = Some(p);
        }
        let last_reader: Vec<(ValueId, usize)> = if options.memory_reuse {
            inter
                .iter()
                .filter_map(|&v| {
                    let rs = &consumers[v.0];
                    let last = rs.iter().map(|c| c.0).max_by_key(|&c| pos[c])?;
                    let same_stream = rs.iter().all(|c| schedule.stream_of[c.0] == schedule.stream_of[last]);
                    same_stream.then_some((v, last))
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut needs_event = vec![false; graph.nodes.len()];
        for w in &schedule.waits {
            for p in w {
                needs_event[p.0] = true;
            }
        }
        // CPU thread budget. A small node that may run beside others gets its share of the
        // cores, fixed. A large one (est. >= WIDE_NODE_S, e.g. a projection GEMM) keeps the
        // whole device budget: it enters the device's thread pool, whose fixed set of
        // workers it shares with whatever else runs, so the cores are still not
        // oversubscribed, and when its neighbour finishes first it gets every core instead of
        // leaving one idle (the third of Q/K/V on two streams).
        const WIDE_NODE_S: f64 = 200e-6;
        let threads = if schedule.streams > 1 {
            let total =
                rt.config().threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            schedule
                .concurrency
                .iter()
                .zip(&cost)
                .map(|(&c, &t)| if t >= WIDE_NODE_S { 0 } else { (total / c.max(1)).max(1) })
                .collect()
        } else {
            vec![0; graph.nodes.len()]
        };
        let max_arenas = options.max_arenas.max(1);
        let mut cg = CompiledGraph {
            rt: rt.clone(),
            graph,
            schedule,
            options,
            fusion,
            constants,
            inter,
            plan,
            needs_event,
            threads,
            prepacked,
            aliases: alias_of,
            last_reader,
            frozen: false,
            instances: None,
            host_tier,
        };
        let mut first = cg.new_instance()?;
        if cg.options.memory_reuse {
            match cg.freeze(&first) {
                Ok(fp) => {
                    first.fast = Some(fp);
                    cg.frozen = true;
                }
                // A launch the backend cannot freeze runs node by node; a failure of the
                // device or driver (e.g. preparing the launches there) fails the compile.
                Err(e @ (Error::Invalid { .. } | Error::Unsupported(_) | Error::NoKernel { .. })) => {
                    log::info!("compiled graph: runs node by node ({e})")
                }
                Err(e) => return Err(e),
            }
        }
        cg.instances = Some(InstanceSet::new(first, max_arenas));
        Ok(cg)
    }

    /// A run arena: the planned arena (or per-run slots), streams, events, and the frozen
    /// launches when the graph runs frozen.
    fn new_instance(&self) -> Result<Instance> {
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
            (0..self.schedule.streams).map(|_| rt.stream(device)).collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let done = self
            .needs_event
            .iter()
            .map(|&n| if n { rt.event(device).map(Some) } else { Ok(None) })
            .collect::<Result<_>>()?;
        let mut inst = Instance { slots, arena, streams, done, fast: None };
        if self.frozen {
            inst.fast = Some(self.freeze(&inst)?);
        }
        Ok(inst)
    }

    /// An arena for one run: a free one, a new one while fewer than `max_arenas` exist, or
    /// the next one returned. A new one that cannot be made (device memory, stream limit)
    /// is not an error while another exists: the run waits for that one instead.
    fn lease(&self) -> Result<Lease<'_>> {
        let set = self.instances.as_ref().ok_or_else(|| Error::invalid("Graph", "not compiled"))?;
        let mut may_make = true;
        loop {
            match set.take(may_make) {
                Take::Got(l) => return Ok(l),
                Take::Make => match self.new_instance() {
                    Ok(inst) => {
                        log::debug!("compiled graph: arena {} of at most {} made", set.stats().0, set.max());
                        return Ok(set.adopt(inst));
                    }
                    Err(e) => {
                        set.abandon();
                        if set.stats().0 == 0 {
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
        let (arenas, peak, bytes) = self.instances.as_ref().map_or((0, 0, 0), InstanceSet::stats);
        let backend_bytes = self.instances.as_ref().map_or(0, |s| s.frozen_bytes(self.rt.backend().as_ref()));
        ArenaStats { arenas, peak, max: self.instances.as_ref().map_or(0, InstanceSet::max), bytes, backend_bytes }
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
        self.frozen
    }
    /// Reshape nodes turned into views (they run no kernel).
    pub fn view_nodes(&self) -> usize {
        self.aliases.len()
    }

    /// Runs the graph on `inputs` (in the graph's input order); returns the outputs.
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(self.run_inner(inputs, false, false)?.0)
    }

    /// Runs and times every node (events around each node).
    pub fn run_profiled(&self, inputs: &[&Tensor]) -> Result<(Vec<Tensor>, RunProfile)> {
        let (o, p) = self.run_inner(inputs, true, false)?;
        Ok((o, p.unwrap_or_default()))
    }

    /// Runs with every intermediate's bytes overwritten with NaN (all bits set) right after
    /// its last reader, on that reader's stream. If the plan let two live tensors share
    /// bytes, the poison reaches a live one and the outputs change; tests compare.
    pub fn run_poisoned(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(self.run_inner(inputs, false, true)?.0)
    }

    fn run_inner(&self, inputs: &[&Tensor], profile: bool, poison: bool) -> Result<(Vec<Tensor>, Option<RunProfile>)> {
        let g = &self.graph;
        if inputs.len() != g.inputs.len() {
            return Err(Error::invalid("Graph", format!("expects {} inputs, got {}", g.inputs.len(), inputs.len())));
        }
        for (i, (id, t)) in g.inputs.iter().zip(inputs).enumerate() {
            let m = g.meta(*id);
            if t.dtype() != m.dtype || *t.shape() != m.shape {
                return Err(Error::invalid(
                    "Graph",
                    format!("input {i} ({:?}) must be {}, got {}", g.value(*id).name, m, t.meta()),
                ));
            }
        }
        let lease = self.lease()?;
        let inst = lease.get();
        if let Some(fp) = inst.fast.as_ref().filter(|_| !profile && !poison)
            && let Some(outs) = self.run_fast(inst, fp, inputs)?
        {
            lease.finish();
            return Ok((outs, None));
        }
        let mut vals: HashMap<ValueId, Tensor> = HashMap::with_capacity(g.values.len());
        for (id, t) in g.inputs.iter().zip(inputs) {
            vals.insert(*id, (*t).clone());
        }
        for (id, t) in &self.constants {
            vals.insert(*id, t.clone());
        }
        let device = self.options.device;
        for (id, s) in &inst.slots {
            let t = match s {
                Slot::Arena(t) => t.clone(),
                Slot::PerRun(m) => self.rt.empty(m.dtype, m.shape.clone(), device)?,
            };
            vals.insert(*id, t);
        }
        for o in &g.outputs {
            if !vals.contains_key(o) {
                let m = g.meta(*o);
                vals.insert(*o, self.rt.empty(m.dtype, m.shape.clone(), device)?);
            }
        }
        let default = self.rt.default_stream(device)?;
        let stream_of = |n: usize| -> &Stream {
            if inst.streams.is_empty() { &default } else { &inst.streams[self.schedule.stream_of[n]] }
        };
        // Make user streams wait for work queued before the run (e.g. input uploads).
        let start_ev = if profile || !inst.streams.is_empty() { Some(default.record_queued()?) } else { None };
        if let Some(ev) = &start_ev {
            for s in &inst.streams {
                s.wait(ev)?;
            }
        }
        let t0 = Instant::now();
        let mut marks: Vec<(usize, Event, Event, std::borrow::Cow<'static, str>, Unit, u64, u64)> = Vec::new();
        for &nid in &self.schedule.order {
            let n = &g.nodes[nid.0];
            let stream = stream_of(nid.0);
            for p in &self.schedule.waits[nid.0] {
                if let Some(ev) = &inst.done[p.0] {
                    stream.wait(ev)?;
                }
            }
            if let Some(out) = n.outputs.first().filter(|o| self.aliases.contains_key(o)) {
                let dims: Vec<isize> = g.meta(*out).shape.dims().iter().map(|&d| d as isize).collect();
                let src = &vals[&n.inputs[0]];
                let view = if src.is_contiguous() {
                    src.reshape(&dims)?
                } else {
                    // A strided graph input: the view needs its elements in order first.
                    let dense = self.rt.empty(src.dtype(), src.shape().clone(), self.options.device)?;
                    self.rt.execute_at(Target::on(stream), &crate::op::Op::Copy, &[src], &[&dense])?;
                    dense.reshape(&dims)?
                };
                vals.insert(*out, view);
                if let Some(ev) = &inst.done[nid.0] {
                    ev.record_queued(stream)?;
                }
                continue;
            }
            let ins: Vec<&Tensor> = n.inputs.iter().map(|v| &vals[v]).collect();
            let outs: Vec<&Tensor> = n.outputs.iter().map(|v| &vals[v]).collect();
            let before = if profile { Some(stream.record_queued()?) } else { None };
            let mut target = Target::on(stream);
            target.threads = self.threads[nid.0];
            target.prepacked = self.prepacked[nid.0].as_ref();
            let r = self.rt.execute_at(target, &n.op, &ins, &outs).map_err(|e| match e {
                Error::Invalid { op, msg, operands } => {
                    Error::Invalid { op, msg: format!("node {:?}: {msg}", n.name), operands }
                }
                other => other,
            })?;
            if let Some(b) = before {
                marks.push((nid.0, b, stream.record_queued()?, r.implementation, r.unit, r.flops, r.bytes));
            }
            if poison {
                for (v, last) in &self.last_reader {
                    if *last == nid.0
                        && let Some(t) = vals.get(v)
                    {
                        t.fill_byte(0xFF, Target::on(stream))?;
                    }
                }
            }
            if let Some(ev) = &inst.done[nid.0] {
                ev.record_queued(stream)?;
            }
        }
        for s in &inst.streams {
            s.synchronize()?;
        }
        let total = t0.elapsed();
        let prof = match (profile, &start_ev) {
            (true, Some(start)) => {
                let mut nodes = Vec::with_capacity(marks.len());
                for (nid, b, e, imp, unit, flops, bytes) in marks {
                    let n = &g.nodes[nid];
                    nodes.push(NodeProfile {
                        name: n.name.clone(),
                        op: n.op.name(),
                        implementation: imp,
                        unit,
                        stream: self.schedule.stream_of[nid],
                        start: b.elapsed_since(start).unwrap_or_default(),
                        elapsed: e.elapsed_since(&b).unwrap_or_default(),
                        flops,
                        bytes,
                    });
                }
                Some(RunProfile { total, nodes })
            }
            _ => None,
        };
        let outs = g.outputs.iter().map(|o| vals[o].clone()).collect();
        drop(vals);
        lease.finish();
        Ok((outs, prof))
    }
}

fn upload_bytes(t: &Tensor, bytes: &[u8]) -> Result<()> {
    t.copy_from_bytes(bytes)
}
