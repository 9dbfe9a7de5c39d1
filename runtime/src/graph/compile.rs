//! Compiling a graph: the passes from a validated graph to a [`CompiledGraph`] with its
//! first run arena, in the order [`CompiledGraph::compile_with`] runs them.

use super::arena::InstanceSet;
use super::canonical;
use super::exec::{CompileOptions, CompiledGraph};
use super::fusion::{self, FusionStats};
use super::host_tier::{self, HostTierNode};
use super::ir::{Graph, HostBytes, NodeId, ValueId, ValueKind};
use super::planner::{self, Buffer, MemoryPlan};
use super::precision;
use super::schedule::{Schedule, ScheduleStrategy};
use super::shared::{SharedConstants, Sharing};
use crate::backend::Prepacked;
use crate::config::Precision;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::TensorMeta;
use crate::runtime::Runtime;
use crate::tensor::Tensor;
use std::collections::HashMap;

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

    /// The passes, in order.
    fn compile_with(
        rt: &Runtime,
        graph: Graph,
        mut options: CompileOptions,
        shared: Option<&SharedConstants>,
    ) -> Result<CompiledGraph> {
        graph.validate()?;
        super::inplace::check(&graph)?;
        resolve_auto_precision(rt, &mut options)?;
        let (mut graph, fusion) = fuse(rt, graph, options.fuse, &options)?;
        store_weights_in(rt, &mut graph, options.precision, options.store_slow_precision);
        let device = options.device;
        rt.device_info(device)?;
        let kernels = select_kernels(rt, &graph, device)?;
        let host_tier = check_host_tier(rt, &graph, options.deny_host_tier)?;
        let schedule = schedule(rt, &graph, &options, &kernels.cost)?;
        let mut sharing = Sharing::new(shared, &graph, device);
        let int8 = if options.precision == Precision::Int8 {
            precision::int8_linears(&graph)
        } else {
            vec![false; graph.nodes.len()]
        };
        let prepacked = prepare_constants(rt, &mut graph, &kernels.names, &int8, device, &mut sharing)?;
        let constants = upload_constants(rt, &mut graph, device, &mut sharing)?;
        let aliases = find_views(&graph)?;
        let inter = intermediates(&graph, &aliases);
        let readers = readers_through_views(&graph, &aliases);
        let plan =
            if options.memory_reuse { Some(plan_memory(rt, &graph, &schedule, &inter, &readers)?) } else { None };
        let last_reader = if options.memory_reuse { last_readers(&schedule, &inter, &readers) } else { Vec::new() };
        let needs_event = event_nodes(&schedule, graph.nodes.len());
        let threads = thread_budgets(rt, &schedule, &kernels.cost, graph.nodes.len());
        let cg = CompiledGraph {
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
            aliases,
            last_reader,
            runs_frozen: false,
            instances: None,
            host_tier,
        };
        cg.with_first_arena()
    }

    /// The graph with its first run arena, frozen when the memory plan is on and the
    /// backend can freeze every launch.
    fn with_first_arena(mut self) -> Result<CompiledGraph> {
        let mut first = self.new_instance(true)?;
        if self.options.memory_reuse {
            match self.freeze(&first) {
                Ok(plan) => {
                    first.frozen = Some(plan);
                    self.runs_frozen = true;
                }
                // A launch the backend cannot freeze runs node by node; a failure of the
                // device or driver (e.g. preparing the launches there) fails the compile.
                Err(e @ (Error::Invalid { .. } | Error::Unsupported(_) | Error::NoKernel { .. })) => {
                    log::info!("compiled graph: runs node by node ({e})")
                }
                Err(e) => return Err(e),
            }
        }
        self.instances = Some(InstanceSet::new(first, self.options.max_arenas.max(1)));
        Ok(self)
    }
}

/// `Precision::Auto` becomes what the backend prefers on the device (announced once per
/// process).
fn resolve_auto_precision(rt: &Runtime, options: &mut CompileOptions) -> Result<()> {
    if options.precision == Precision::Auto {
        options.precision = Precision::Auto.resolve(rt.auto_precision(options.device)?);
        static ANNOUNCED: std::sync::Once = std::sync::Once::new();
        ANNOUNCED.call_once(|| {
            log::info!("precision auto: {} on {}", options.precision.name(), rt.backend_name());
        });
    }
    Ok(())
}

/// The canonical rewrites and the fusion pass, when on (the fused ops where the device
/// runs them, and where the device's model, if the backend has one, does not say they are
/// slower: see [`choose_patterns`]).
fn fuse(rt: &Runtime, graph: Graph, on: bool, options: &CompileOptions) -> Result<(Graph, FusionStats)> {
    if !on {
        return Ok((graph, FusionStats::default()));
    }
    let kernel_of = |op: &crate::op::Op, ins: &[TensorMeta]| rt.select_kernel(op, ins).ok().map(|k| k.name.to_string());
    let (device, precision) = (options.device, options.precision);
    let cost_of = |op: &crate::op::Op, ins: &[TensorMeta]| {
        rt.modelled_cost(device, op, &as_compiled(op, ins, precision)).map(|d| d.as_secs_f64())
    };
    let (graph, canonical) = canonical::canonicalize(graph, &kernel_of)?;
    let (graph, mut stats) = choose_patterns(rt, &graph, &kernel_of, &cost_of, options)?;
    stats.canonical = canonical;
    let (graph, merged) = super::siblings::merge(&graph, &kernel_of, &cost_of)?;
    stats.merged_linears = merged;
    if stats != FusionStats::default() {
        log::info!("compiled graph: fusion {stats:?}");
    }
    Ok((graph, stats))
}

/// Fusion where the backend models its device ([`Runtime::modelled_cost`]): each match
/// fuses only if its fused nodes cost no more than the nodes they replace, and then each
/// pattern that fused is left out in turn, kept out where that shortens the modelled
/// critical path of the graph as it will be scheduled (a fused node waits for all of its
/// inputs, where the unfused ops could overlap one input's producer with the others: on
/// two streams that can outweigh the fusion's saving). Without a model, every match fuses.
fn choose_patterns(
    rt: &Runtime,
    graph: &Graph,
    kernel_of: fusion::KernelOf<'_>,
    cost_of: fusion::CostOf<'_>,
    options: &CompileOptions,
) -> Result<(Graph, FusionStats)> {
    let mut on = fusion::Patterns::ALL;
    let mut best = fusion::fuse_by_cost(graph, kernel_of, cost_of, on)?;
    let modelled = graph.nodes.iter().any(|n| {
        let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
        cost_of(&n.op, &ins).is_some()
    });
    if !modelled || !options.parallel {
        return Ok(best);
    }
    let mut best_span = modelled_span(rt, &best.0, options, cost_of)?;
    for pattern in 0..3 {
        let mut trial = on;
        let fused = match pattern {
            0 => std::mem::replace(&mut trial.attention, false) && best.1.attention > 0,
            1 => std::mem::replace(&mut trial.bias_gelu, false) && best.1.bias_gelu > 0,
            _ => std::mem::replace(&mut trial.add_layer_norm, false) && best.1.add_layer_norm > 0,
        };
        if !fused {
            continue;
        }
        let candidate = fusion::fuse_by_cost(graph, kernel_of, cost_of, trial)?;
        let span = modelled_span(rt, &candidate.0, options, cost_of)?;
        log::debug!(
            "fusion: patterns {trial:?} give a modelled span of {:.1} µs against {:.1} µs",
            span * 1e6,
            best_span * 1e6
        );
        if span < best_span {
            (on, best, best_span) = (trial, candidate, span);
        }
    }
    Ok(best)
}

/// The metas a node will run with once the precision pass has stored Linear weights in
/// `precision` (bf16, f16): what its modelled cost should see before that pass.
fn as_compiled(op: &crate::op::Op, ins: &[TensorMeta], precision: Precision) -> Vec<TensorMeta> {
    let mut ins = ins.to_vec();
    let low = match precision {
        Precision::F16 => DType::F16,
        Precision::Bf16 => DType::BF16,
        Precision::F32 | Precision::Int8 | Precision::Auto => return ins,
    };
    if matches!(op, crate::op::Op::Linear) && ins.len() >= 2 && ins[0].dtype == DType::F32 && ins[1].dtype == DType::F32
    {
        ins[1].dtype = low;
    }
    ins
}

/// The modelled critical path of `graph` as [`schedule`] lays it out, seconds (a node
/// the model does not cover counts as nothing).
fn modelled_span(rt: &Runtime, graph: &Graph, options: &CompileOptions, cost_of: fusion::CostOf<'_>) -> Result<f64> {
    let cost: Vec<f64> = graph
        .nodes
        .iter()
        .map(|n| {
            let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
            cost_of(&n.op, &ins).unwrap_or(0.0)
        })
        .collect();
    let s = schedule(rt, graph, options, &cost)?;
    if s.streams <= 1 {
        // One stream: the nodes one after the other (`est_start` is then their order).
        return Ok(cost.iter().sum());
    }
    Ok(s.est_start.iter().zip(&cost).map(|(t, c)| t + c).fold(0.0, f64::max))
}

/// Linear weights stored in the chosen low precision (bf16, f16), where it is one.
/// `even_if_slow`: [`CompileOptions::store_slow_precision`].
fn store_weights_in(rt: &Runtime, graph: &mut Graph, precision: Precision, even_if_slow: bool) {
    match precision {
        Precision::Bf16 => {
            let n = precision::low_precision_weights(rt, graph, DType::BF16, even_if_slow);
            log::info!("precision bf16: {n} Linear weights stored in bf16");
            let a = precision::bf16_attention_operands(rt, graph);
            if a > 0 {
                log::info!("precision bf16: {a} Attention nodes read bf16 q, k and v");
            }
        }
        Precision::F16 => {
            let n = precision::low_precision_weights(rt, graph, DType::F16, even_if_slow);
            log::info!("precision f16: {n} Linear weights stored in fp16");
        }
        // Int8: the weights stay f32 in the graph; the backend quantises them as it
        // prepares each Linear (`prepare_constants`).
        Precision::F32 | Precision::Int8 | Precision::Auto => {}
    }
}

/// The kernel of every node, and its estimated time.
struct Kernels {
    /// Kernel name per node.
    names: Vec<String>,
    /// Estimated seconds per node: the backend's model of its device where it has one
    /// ([`Runtime::modelled_cost`]), else FLOPs at 50 GFLOP/s, bytes at 10 GB/s, 2 µs launch.
    cost: Vec<f64>,
}

/// Kernel selection per node (errors name the node).
fn select_kernels(rt: &Runtime, graph: &Graph, device: usize) -> Result<Kernels> {
    let mut cost = Vec::with_capacity(graph.nodes.len());
    let mut names = Vec::with_capacity(graph.nodes.len());
    for n in &graph.nodes {
        let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
        let outs: Vec<TensorMeta> = n.outputs.iter().map(|v| graph.meta(*v).clone()).collect();
        let k = rt
            .select_kernel(&n.op, &ins)
            .map_err(|e| Error::invalid(n.op.name(), format!("node {:?}: {e}", n.name)))?;
        names.push(k.name.to_string());
        let f = n.op.flops(&ins, &outs) as f64;
        let b = n.op.bytes(&ins, &outs) as f64;
        let modelled = rt.modelled_cost(device, &n.op, &ins).map(|d| d.as_secs_f64());
        cost.push(modelled.unwrap_or(f / 50e9 + b / 10e9 + 2e-6));
    }
    Ok(Kernels { names, cost })
}

/// The nodes that would run on the backend's host tier, logged; an error naming the first
/// when `deny`.
fn check_host_tier(rt: &Runtime, graph: &Graph, deny: bool) -> Result<Vec<HostTierNode>> {
    let host_tier = host_tier::find(rt, graph);
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
    if let (true, Some(h)) = (deny, host_tier.first()) {
        return Err(Error::Unsupported(format!(
            "node {:?} ({}) would run on the host tier of {} ({} such nodes): {}",
            h.node,
            h.op,
            rt.backend_name(),
            host_tier.len(),
            h.reason
        )));
    }
    Ok(host_tier)
}

/// Stream assignment: several streams when parallel (no more than the backend's graph
/// streams for the balanced strategy), else one.
fn schedule(rt: &Runtime, graph: &Graph, options: &CompileOptions, cost: &[f64]) -> Result<Schedule> {
    if !options.parallel {
        return Ok(Schedule::sequential(graph));
    }
    let mut max_streams = options.max_streams;
    if options.strategy == ScheduleStrategy::Balanced {
        let ordinal = rt.inner.device(options.device)?.ordinal;
        if let Some(k) = rt.inner.backend.graph_streams(ordinal) {
            max_streams = max_streams.min(k.max(1));
        }
    }
    Ok(Schedule::build(graph, options.strategy, max_streams, cost))
}

/// Constant inputs prepared for their kernels once (e.g. packed weights), per node. A
/// constant the backend wants in another layout is rewritten here, before its upload, when
/// this node is its only reader (its original bytes are then never uploaded).
///
/// The nodes marked in `int8` (a graph compiled in `int8`) are offered to the backend's
/// int8 preparation first ([`crate::Backend::prepack_int8`]); what it declines is prepared
/// as in f32. What was prepared for int8 is shared under the kernel's name with `+int8`.
fn prepare_constants(
    rt: &Runtime,
    graph: &mut Graph,
    kernels: &[String],
    int8: &[bool],
    device: usize,
    sharing: &mut Sharing<'_>,
) -> Result<Vec<Option<Prepacked>>> {
    let readers = graph.consumers();
    let mut prepacked = Vec::with_capacity(graph.nodes.len());
    let mut quantised = 0;
    for (ni, k) in kernels.iter().enumerate() {
        if int8.get(ni).copied().unwrap_or(false) {
            let key = format!("{k}+int8");
            let kernel = sharing.kernel(key.as_str());
            let p = match sharing.reuse(graph, &graph.nodes[ni], kernel) {
                Some(p) => p,
                None => prepare_node(rt, graph, &readers, ni, kernel, sharing, Some(device))?,
            };
            if p.is_some() {
                quantised += 1;
                prepacked.push(p);
                continue;
            }
        }
        let kernel = sharing.kernel(k.as_str());
        let p = match sharing.reuse(graph, &graph.nodes[ni], kernel) {
            Some(p) => p,
            None => prepare_node(rt, graph, &readers, ni, kernel, sharing, None)?,
        };
        prepacked.push(p);
    }
    precision::report_int8(rt, device, quantised, int8.iter().filter(|b| **b).count());
    Ok(prepacked)
}

/// What the backend prepares from node `ni`'s constant inputs (for an int8 product on
/// device `int8_on` where given), its relayouts applied to the graph; `None` when it
/// prepares nothing, or when a constant it would lay out anew has other readers.
fn prepare_node(
    rt: &Runtime,
    graph: &mut Graph,
    readers: &[Vec<NodeId>],
    ni: usize,
    kernel: Option<&str>,
    sharing: &mut Sharing<'_>,
    int8_on: Option<usize>,
) -> Result<Option<Prepacked>> {
    let n = &graph.nodes[ni];
    let consts: Vec<Option<&[u8]>> = n
        .inputs
        .iter()
        .map(|v| match &graph.values[v.0].kind {
            ValueKind::Constant(t) => Some(t.bytes.as_slice()),
            _ => None,
        })
        .collect();
    if consts.iter().all(Option::is_none) {
        return Ok(None);
    }
    let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
    let prepared = match int8_on {
        Some(device) => rt.prepack_int8(device, &n.op, &ins, &consts),
        None => rt.prepack(&n.op, &ins, &consts),
    };
    let Some(p) =
        prepared.map_err(|e| Error::invalid(n.op.name(), format!("node {:?}: preparing constants: {e}", n.name)))?
    else {
        if let Some(k) = kernel {
            let inputs = n.inputs.clone();
            sharing.decline(graph, &inputs, k);
        }
        return Ok(None);
    };
    let inputs = n.inputs.clone();
    let relayout_ok = p.relayout.iter().all(|(i, bytes)| {
        let Some(v) = inputs.get(*i) else { return false };
        match &graph.values[v.0].kind {
            ValueKind::Constant(t) => {
                t.bytes.len() == bytes.len()
                    && readers[v.0] == [NodeId(ni)]
                    && inputs.iter().filter(|x| *x == v).count() == 1
                    && !graph.outputs.contains(v)
            }
            _ => false,
        }
    });
    if !relayout_ok {
        log::info!("node {:?}: a prepared constant has other readers; running without it", n.name);
        return Ok(None);
    }
    let relaid: Vec<ValueId> = p.relayout.iter().map(|(i, _)| inputs[*i]).collect();
    for (i, bytes) in p.relayout {
        if let ValueKind::Constant(t) = &mut graph.values[inputs[i].0].kind {
            t.bytes = bytes.into();
        }
    }
    if let Some(k) = kernel {
        sharing.note(graph, &inputs, &relaid, k, &p.prepacked);
    }
    Ok(Some(p.prepacked))
}

/// Constants, uploaded once (or taken from the store). What runs is the device copy (and
/// anything prepacked): each constant's host bytes are released right after its upload,
/// so the weights are never held twice when the caller handed the graph over
/// (`compile_owned`).
fn upload_constants(
    rt: &Runtime,
    graph: &mut Graph,
    device: usize,
    sharing: &mut Sharing<'_>,
) -> Result<HashMap<ValueId, Tensor>> {
    let mut constants = HashMap::new();
    for (i, v) in graph.values.iter_mut().enumerate() {
        if let ValueKind::Constant(t) = &mut v.kind {
            let id = ValueId(i);
            if let Some(hit) = sharing.hit(id) {
                constants.insert(id, hit);
            } else {
                let dev = rt.empty(t.dtype, t.shape.clone(), device)?;
                dev.copy_from_bytes(&t.bytes)?;
                sharing.offer(id, &dev);
                constants.insert(id, dev);
            }
            t.bytes = HostBytes::default();
        }
    }
    Ok(constants)
}

/// Values that hold another value's memory, each with the value whose buffer it is: the
/// Reshapes of contiguous values, which become views (no kernel, no buffer), and the
/// outputs of in-place ops ([`crate::Op::in_place`]), which are their inputs' memory
/// updated (a kernel, no buffer of their own; see [`super::inplace`]). An in-place output
/// that is a graph output must update a graph input (the run returns that tensor).
fn find_views(graph: &Graph) -> Result<HashMap<ValueId, ValueId>> {
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
        for &(i, o) in n.op.in_place() {
            let (src, out) = (n.inputs[i], n.outputs[o]);
            if graph.outputs.contains(&out) && graph.values[src.0].kind != ValueKind::Input {
                return Err(Error::Unsupported(format!(
                    "node {:?} ({}): its in-place output {o} is a graph output but updates {:?}, which is not a graph input",
                    n.name,
                    n.op.name(),
                    graph.values[src.0].name
                )));
            }
            let root = alias_of.get(&src).copied().unwrap_or(src);
            alias_of.insert(out, root);
        }
    }
    Ok(alias_of)
}

/// Intermediates: every node output that is not a graph output or a view.
fn intermediates(graph: &Graph, aliases: &HashMap<ValueId, ValueId>) -> Vec<ValueId> {
    let mut inter: Vec<ValueId> = Vec::new();
    for n in &graph.nodes {
        for o in &n.outputs {
            if !graph.outputs.contains(o) && !aliases.contains_key(o) {
                inter.push(*o);
            }
        }
    }
    inter
}

/// The readers of each value, a view's readers counted as its root's too: a view's root
/// lives until the view's last reader.
fn readers_through_views(graph: &Graph, aliases: &HashMap<ValueId, ValueId>) -> Vec<Vec<NodeId>> {
    let mut consumers = graph.consumers();
    for (a, root) in aliases {
        let extra = consumers[a.0].clone();
        for c in extra {
            if !consumers[root.0].contains(&c) {
                consumers[root.0].push(c);
            }
        }
    }
    consumers
}

/// The node that writes `v` (0 for a value no node writes).
fn writer(graph: &Graph, v: ValueId) -> usize {
    match graph.values[v.0].kind {
        ValueKind::Node(n) => n.0,
        _ => 0,
    }
}

/// The node among `v`'s readers that runs last, or its writer when none reads it.
fn last_node(graph: &Graph, schedule: &Schedule, readers: &[Vec<NodeId>], v: ValueId) -> usize {
    let pos = &schedule.position;
    readers[v.0].iter().map(|c| c.0).max_by_key(|&c| pos[c]).unwrap_or_else(|| writer(graph, v))
}

/// Offsets of the intermediates in one arena: two may share bytes when every reader of
/// one (its writer, if none) happens before the other's writer.
fn plan_memory(
    rt: &Runtime,
    graph: &Graph,
    schedule: &Schedule,
    inter: &[ValueId],
    readers: &[Vec<NodeId>],
) -> Result<MemoryPlan> {
    let pos = &schedule.position;
    let buffers: Vec<Buffer> = inter
        .iter()
        .map(|&v| {
            let def = writer(graph, v);
            let last = last_node(graph, schedule, readers, v);
            Buffer { size: graph.meta(v).bytes(), def: pos[def], last: pos[last].max(pos[def]) }
        })
        .collect();
    let writers: Vec<usize> = inter.iter().map(|&v| writer(graph, v)).collect();
    let read_by: Vec<Vec<usize>> = inter.iter().map(|&v| readers[v.0].iter().map(|c| c.0).collect()).collect();
    let conflict = |i: usize, j: usize| {
        let before = |a: usize, b: usize| {
            // Every reader of `a` (and its writer) finishes before `b`'s writer starts.
            let w = writers[b];
            (read_by[a].is_empty() && schedule.happens_before(writers[a], w))
                || (!read_by[a].is_empty() && read_by[a].iter().all(|&r| schedule.happens_before(r, w)))
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
    Ok(p)
}

/// Arena intermediates and the node that reads each last, when all of its readers run on
/// one stream (what `run_poisoned` overwrites after that node).
fn last_readers(schedule: &Schedule, inter: &[ValueId], readers: &[Vec<NodeId>]) -> Vec<(ValueId, usize)> {
    let pos = &schedule.position;
    inter
        .iter()
        .filter_map(|&v| {
            let rs = &readers[v.0];
            let last = rs.iter().map(|c| c.0).max_by_key(|&c| pos[c])?;
            let same_stream = rs.iter().all(|c| schedule.stream_of[c.0] == schedule.stream_of[last]);
            same_stream.then_some((v, last))
        })
        .collect()
}

/// Which nodes record an event after them (a node on another stream waits for it).
fn event_nodes(schedule: &Schedule, nodes: usize) -> Vec<bool> {
    let mut needs_event = vec![false; nodes];
    for w in &schedule.waits {
        for p in w {
            needs_event[p.0] = true;
        }
    }
    needs_event
}

/// CPU thread budget of each node (0 = the whole device budget). A small node that may
/// run beside others gets its share of the cores, fixed. A large one (est. >= WIDE_NODE_S,
/// e.g. a projection GEMM) keeps the whole device budget: it enters the device's thread
/// pool, whose fixed set of workers it shares with whatever else runs, so the cores are
/// still not oversubscribed, and when its neighbour finishes first it gets every core
/// instead of leaving one idle (the third of Q/K/V on two streams).
fn thread_budgets(rt: &Runtime, schedule: &Schedule, cost: &[f64], nodes: usize) -> Vec<usize> {
    const WIDE_NODE_S: f64 = 200e-6;
    if schedule.streams <= 1 {
        return vec![0; nodes];
    }
    let total = rt.config().threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    schedule
        .concurrency
        .iter()
        .zip(cost)
        .map(|(&c, &t)| if t >= WIDE_NODE_S { 0 } else { (total / c.max(1)).max(1) })
        .collect()
}
