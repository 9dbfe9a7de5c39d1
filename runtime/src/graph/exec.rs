//! Compiled graphs: kernel selection, fusion, a static memory plan and stream assignment
//! done once; `run` many times.

use super::fusion::{self, FusionStats};
use super::ir::{Graph, HostTensor, ValueId, ValueKind};
use super::planner::{self, Buffer, MemoryPlan};
use super::schedule::{Schedule, ScheduleStrategy};
use crate::backend::{DevicePtr, Frozen, FrozenLaunch};
use crate::config::{Precision, RuntimeConfig};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::Unit;
use crate::op::TensorMeta;
use crate::runtime::{Operand, Runtime, Target};
use crate::stream::{Event, Stream};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Store Linear weights in bf16 where the backend has a bf16 Linear kernel.
    pub precision: Precision,
}

/// Converts the f32 constant weights of Linear nodes to bf16 where the runtime would
/// then run the node on a bf16 unit (a kernel whose unit label names bf16); a weight
/// also read by other ops stays f32. Returns how many were converted.
fn bf16_weights(rt: &Runtime, graph: &mut Graph) -> usize {
    let consumers = graph.consumers();
    let mut converted = 0;
    for ni in 0..graph.nodes.len() {
        let n = &graph.nodes[ni];
        if !matches!(n.op, crate::op::Op::Linear) {
            continue;
        }
        let w = n.inputs[1];
        let ValueKind::Constant(t) = &graph.values[w.0].kind else { continue };
        if t.dtype != DType::F32 || graph.meta(n.inputs[0]).dtype != DType::F32 {
            continue;
        }
        if consumers[w.0].iter().any(|c| !matches!(graph.nodes[c.0].op, crate::op::Op::Linear)) {
            continue;
        }
        let mut ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
        ins[1].dtype = DType::BF16;
        match rt.select_kernel(&n.op, &ins) {
            Ok(k) if k.unit.label.contains("bf16") => {}
            Ok(k) => {
                log::info!(
                    "precision bf16: node {:?} keeps its f32 weight (no bf16 unit; {} would run)",
                    n.name,
                    k.name
                );
                continue;
            }
            Err(e) => {
                log::info!("precision bf16: node {:?} keeps its f32 weight ({e})", n.name);
                continue;
            }
        }
        let bytes: Vec<u8> = t
            .bytes
            .chunks_exact(4)
            .flat_map(|c| half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_bits().to_le_bytes())
            .collect();
        let ht = HostTensor { dtype: DType::BF16, shape: t.shape.clone(), bytes: Arc::new(bytes) };
        graph.values[w.0].meta.dtype = DType::BF16;
        graph.values[w.0].kind = ValueKind::Constant(ht);
        converted += 1;
    }
    converted
}

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
        }
    }
}

/// Timing of one node in one run.
#[derive(Clone, Debug)]
pub struct NodeProfile {
    pub name: String,
    pub op: &'static str,
    pub implementation: &'static str,
    pub unit: Unit,
    pub stream: usize,
    /// Start relative to the run's start.
    pub start: Duration,
    pub elapsed: Duration,
    pub flops: u64,
    pub bytes: u64,
}

/// A profiled run.
#[derive(Clone, Debug, Default)]
pub struct RunProfile {
    pub total: Duration,
    pub nodes: Vec<NodeProfile>,
}

impl RunProfile {
    /// Chrome-trace JSON (opens in Perfetto / chrome://tracing): one track per stream.
    pub fn chrome_trace(&self) -> String {
        let mut s = String::from("{\"traceEvents\":[\n");
        let streams: std::collections::BTreeSet<usize> = self.nodes.iter().map(|n| n.stream).collect();
        for st in &streams {
            let _ = writeln!(
                s,
                "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{st},\"args\":{{\"name\":\"stream {st}\"}}}},"
            );
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let _ = write!(
                s,
                "{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"implementation\":{},\"unit\":{},\"flops\":{},\"bytes\":{}}}}}",
                json_str(&n.name),
                json_str(n.op),
                n.stream,
                n.start.as_secs_f64() * 1e6,
                n.elapsed.as_secs_f64() * 1e6,
                json_str(n.implementation),
                json_str(n.unit.label),
                n.flops,
                n.bytes
            );
            s.push_str(if i + 1 < self.nodes.len() { ",\n" } else { "\n" });
        }
        s.push_str("],\"displayTimeUnit\":\"ms\"}\n");
        s
    }

    /// Time, FLOPs and bytes per (op, implementation), largest time first.
    pub fn by_op(&self) -> Vec<(String, Duration, u64, usize)> {
        let mut m: HashMap<String, (Duration, u64, usize)> = HashMap::new();
        for n in &self.nodes {
            let e = m.entry(format!("{} [{}]", n.op, n.implementation)).or_default();
            e.0 += n.elapsed;
            e.1 += n.flops;
            e.2 += 1;
        }
        let mut v: Vec<_> = m.into_iter().map(|(k, (d, f, c))| (k, d, f, c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1));
        v
    }
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Where an intermediate lives during a run.
enum Slot {
    /// A view into the arena, made once at compile time.
    Arena(Tensor),
    /// Allocated at the start of every run (no reuse).
    PerRun(TensorMeta),
}

/// A graph compiled for one device of one runtime.
pub struct CompiledGraph {
    rt: Runtime,
    graph: Graph,
    schedule: Schedule,
    options: CompileOptions,
    fusion: FusionStats,
    constants: HashMap<ValueId, Tensor>,
    slots: HashMap<ValueId, Slot>,
    plan: Option<MemoryPlan>,
    _arena: Option<Tensor>,
    streams: Vec<Stream>,
    /// An event per node, recorded after it when another stream reads its output.
    done: Vec<Option<Event>>,
    /// Thread budget of each node (0 = all).
    threads: Vec<usize>,
    /// What the backend prepared from each node's constant inputs (packed weights).
    prepacked: Vec<Option<crate::backend::Prepacked>>,
    /// Reshape outputs that are views of another value (their node runs no kernel).
    aliases: HashMap<ValueId, ValueId>,
    /// Arena intermediates and the node that reads each last, when all of its readers run
    /// on one stream (used by `run_poisoned`).
    last_reader: Vec<(ValueId, usize)>,
    /// The nodes' launches validated once, for `run` (absent when something about the
    /// graph cannot be frozen, e.g. intermediates allocated per run).
    fast: Option<FastPlan>,
}

/// Where a graph output comes from on the fast path.
enum OutputSrc {
    /// Graph input `i`, returned as is.
    Input(usize),
    /// A constant, returned as is.
    Constant(Tensor),
    /// Per-run output `j` (address slot `inputs + j`).
    PerRun(usize),
}

/// One step of a fast run, in submission order.
enum Step {
    /// Stream `stream` waits for the event after node `node`.
    Wait { stream: usize, node: usize },
    /// Launches `nodes` of the plan go to stream `stream` as one submission. `units`:
    /// (unit, launches, FLOPs, bytes) of those launches, for the utilisation counters.
    Launch { stream: usize, nodes: std::ops::Range<usize>, units: UnitCounts },
    /// The event after node `node` is recorded on stream `stream`.
    Record { stream: usize, node: usize },
}

/// (unit, launches, FLOPs, bytes) per unit of a batch of launches.
type UnitCounts = Vec<(Unit, u64, u64, u64)>;
/// A batch being laid out: its stream, first launch and unit counts.
type OpenBatch = (usize, usize, UnitCounts);

/// A compiled graph's launches, validated once. Arena slots and constants (and views of
/// them) are fixed operands; graph inputs and outputs (and views of them) get their
/// addresses per run from a table: inputs in graph order, then the per-run outputs.
struct FastPlan {
    /// In submission order (alias nodes run no kernel and have none).
    launches: Vec<FrozenLaunch>,
    /// The backend's own form of `launches`, when it has one.
    frozen: Option<Frozen>,
    steps: Vec<Step>,
    /// Metadata of each per-run output.
    per_run: Vec<TensorMeta>,
    outputs: Vec<OutputSrc>,
    /// The streams (schedule indices) that use each address slot.
    slot_streams: Vec<Vec<usize>>,
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
        graph.validate()?;
        let (mut graph, fusion) = if options.fuse {
            let fused = fusion::fuse(&graph)?;
            drop(graph);
            fused
        } else {
            (graph, FusionStats::default())
        };
        if options.precision == Precision::Bf16 {
            let n = bf16_weights(rt, &mut graph);
            log::info!("precision bf16: {n} Linear weights stored in bf16");
        }
        let device = options.device;
        rt.device_info(device)?;
        // Kernel selection per node (errors name the node).
        let mut cost = Vec::with_capacity(graph.nodes.len());
        for n in &graph.nodes {
            let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
            let outs: Vec<TensorMeta> = n.outputs.iter().map(|v| graph.meta(*v).clone()).collect();
            rt.select_kernel(&n.op, &ins)
                .map_err(|e| Error::invalid(n.op.name(), format!("node {:?}: {e}", n.name)))?;
            let f = n.op.flops(&ins, &outs) as f64;
            let b = n.op.bytes(&ins, &outs) as f64;
            cost.push(f / 50e9 + b / 10e9 + 2e-6);
        }
        let schedule = if options.parallel {
            Schedule::build(&graph, options.strategy, options.max_streams, &cost)
        } else {
            Schedule::sequential(&graph)
        };
        // Constant inputs prepared for their kernels once (e.g. packed weights). A constant
        // the backend wants in another layout is rewritten here, before its upload, when
        // this node is its only reader (its original bytes are then never uploaded).
        let readers = graph.consumers();
        let mut prepacked = Vec::with_capacity(graph.nodes.len());
        for ni in 0..graph.nodes.len() {
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
            for (i, bytes) in p.relayout {
                if let ValueKind::Constant(t) = &mut graph.values[inputs[i].0].kind {
                    t.bytes = Arc::new(bytes);
                }
            }
            prepacked.push(Some(p.prepacked));
        }
        // Constants, uploaded once. What runs is the device copy (and anything prepacked):
        // each constant's host bytes are released right after its upload, so the weights
        // are never held twice when the caller handed the graph over (`compile_owned`).
        let mut constants = HashMap::new();
        for (i, v) in graph.values.iter_mut().enumerate() {
            if let ValueKind::Constant(t) = &mut v.kind {
                let dev = rt.empty(t.dtype, t.shape.clone(), device)?;
                upload_bytes(&dev, &t.bytes)?;
                constants.insert(ValueId(i), dev);
                t.bytes = Arc::new(Vec::new());
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
        let mut slots = HashMap::new();
        let mut plan = None;
        let mut arena = None;
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
            let p = planner::plan(&buffers, &conflict, align);
            let a = rt.empty(DType::U8, [p.arena_bytes.max(1)], device)?;
            for (k, &v) in inter.iter().enumerate() {
                let m = graph.meta(v);
                slots.insert(v, Slot::Arena(a.view_bytes(p.offsets[k], m.dtype, m.shape.clone())?));
            }
            log::info!(
                "compiled graph: {} nodes, arena {} bytes, load {} bytes (ratio {:.3}, {})",
                graph.nodes.len(),
                p.arena_bytes,
                p.load_bytes,
                p.ratio(),
                p.strategy
            );
            plan = Some(p);
            arena = Some(a);
        } else {
            for &v in &inter {
                slots.insert(v, Slot::PerRun(graph.meta(v).clone()));
            }
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
        let streams: Vec<Stream> = if schedule.streams > 1 {
            (0..schedule.streams).map(|_| rt.stream(device)).collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let mut needs_event = vec![false; graph.nodes.len()];
        for w in &schedule.waits {
            for p in w {
                needs_event[p.0] = true;
            }
        }
        let done = needs_event
            .iter()
            .map(|&n| if n { rt.event(device).map(Some) } else { Ok(None) })
            .collect::<Result<_>>()?;
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
        let mut cg = CompiledGraph {
            rt: rt.clone(),
            graph,
            schedule,
            options,
            fusion,
            constants,
            slots,
            plan,
            _arena: arena,
            streams,
            done,
            threads,
            prepacked,
            aliases: alias_of,
            last_reader,
            fast: None,
        };
        if cg.options.memory_reuse {
            match cg.freeze() {
                Ok(fp) => cg.fast = Some(fp),
                Err(e) => log::info!("compiled graph: runs node by node ({e})"),
            }
        }
        Ok(cg)
    }

    /// The schedule's stream `s` (the default stream when the graph uses one stream).
    fn stream_at<'a>(&'a self, s: usize, default: &'a Stream) -> &'a Stream {
        if self.streams.is_empty() { default } else { &self.streams[s] }
    }

    /// Validates every node's launch once and lays out the submission steps of a run.
    fn freeze(&self) -> Result<FastPlan> {
        let g = &self.graph;
        let device = self.options.device;
        let n_in = g.inputs.len();
        // Per-run outputs: distinct node outputs among the graph outputs.
        let mut per_run_ids: Vec<ValueId> = Vec::new();
        let mut outputs = Vec::with_capacity(g.outputs.len());
        for o in &g.outputs {
            let src = if let Some(i) = g.inputs.iter().position(|x| x == o) {
                OutputSrc::Input(i)
            } else if let Some(t) = self.constants.get(o) {
                OutputSrc::Constant(t.clone())
            } else {
                let j = per_run_ids.iter().position(|x| x == o).unwrap_or_else(|| {
                    per_run_ids.push(*o);
                    per_run_ids.len() - 1
                });
                OutputSrc::PerRun(j)
            };
            outputs.push(src);
        }
        let per_run: Vec<TensorMeta> = per_run_ids.iter().map(|v| g.meta(*v).clone()).collect();
        // What each value is at run time: a fixed tensor or an address slot.
        let slot_of = |v: ValueId| -> Option<usize> {
            g.inputs.iter().position(|x| *x == v).or_else(|| per_run_ids.iter().position(|x| *x == v).map(|j| n_in + j))
        };
        let resolve = |v: ValueId| -> Result<(Option<Tensor>, Option<usize>)> {
            let root = self.aliases.get(&v).copied().unwrap_or(v);
            if let Some(k) = slot_of(root) {
                return Ok((None, Some(k)));
            }
            let t = match (self.constants.get(&root), self.slots.get(&root)) {
                (Some(t), _) | (None, Some(Slot::Arena(t))) => t,
                _ => return Err(Error::invalid("Graph", format!("value {:?} has no fixed buffer", g.value(v).name))),
            };
            if root == v {
                return Ok((Some(t.clone()), None));
            }
            let dims: Vec<isize> = g.meta(v).shape.dims().iter().map(|&d| d as isize).collect();
            Ok((Some(t.reshape(&dims)?), None))
        };
        let default = self.rt.default_stream(device)?;
        let mut launches = Vec::new();
        let mut steps = Vec::new();
        let mut slot_streams: Vec<Vec<usize>> = vec![Vec::new(); n_in + per_run.len()];
        // The batch being built: its stream, first launch and unit totals.
        let mut open: Option<OpenBatch> = None;
        let close = |open: &mut Option<OpenBatch>, steps: &mut Vec<Step>, end: usize| {
            if let Some((stream, start, units)) = open.take() {
                steps.push(Step::Launch { stream, nodes: start..end, units });
            }
        };
        for &nid in &self.schedule.order {
            let n = &g.nodes[nid.0];
            let s = if self.streams.is_empty() { 0 } else { self.schedule.stream_of[nid.0] };
            let waits: Vec<usize> =
                self.schedule.waits[nid.0].iter().filter(|p| self.done[p.0].is_some()).map(|p| p.0).collect();
            if !waits.is_empty() || open.as_ref().is_some_and(|o| o.0 != s) {
                close(&mut open, &mut steps, launches.len());
            }
            for p in waits {
                steps.push(Step::Wait { stream: s, node: p });
            }
            let is_alias = n.outputs.first().is_some_and(|o| self.aliases.contains_key(o));
            if !is_alias {
                let mut fixed = Vec::new();
                let mut slots = Vec::new();
                for v in n.inputs.iter().chain(&n.outputs) {
                    let (t, k) = resolve(*v)?;
                    fixed.push(t);
                    slots.push(k);
                }
                let metas: Vec<TensorMeta> = n.inputs.iter().chain(&n.outputs).map(|v| g.meta(*v).clone()).collect();
                let operands: Vec<Operand<'_>> = fixed
                    .iter()
                    .zip(&metas)
                    .map(|(t, m)| match t {
                        Some(t) => Operand::Fixed(t),
                        None => Operand::PerRun(m),
                    })
                    .collect();
                let (ins, outs) = operands.split_at(n.inputs.len());
                let (kernel, args, flops, bytes) = self
                    .rt
                    .freeze_launch(device, &n.op, ins, outs, self.threads[nid.0], self.prepacked[nid.0].as_ref())
                    .map_err(|e| match e {
                        Error::Invalid { op, msg } => Error::Invalid { op, msg: format!("node {:?}: {msg}", n.name) },
                        other => other,
                    })?;
                let stream = self.stream_at(s, &default);
                let target = Target::on(stream);
                for t in fixed.iter().flatten() {
                    t.storage.mark_use(target);
                }
                let patches: Vec<(usize, usize)> =
                    slots.iter().enumerate().filter_map(|(i, k)| k.map(|k| (i, k))).collect();
                for &(_, k) in &patches {
                    if !slot_streams[k].contains(&s) {
                        slot_streams[k].push(s);
                    }
                }
                let o = open.get_or_insert_with(|| (s, launches.len(), Vec::new()));
                match o.2.iter_mut().find(|u| u.0 == kernel.unit) {
                    Some(u) => {
                        u.1 += 1;
                        u.2 += flops;
                        u.3 += bytes;
                    }
                    None => o.2.push((kernel.unit, 1, flops, bytes)),
                }
                launches.push(FrozenLaunch { kernel, args, patches });
            }
            if self.done[nid.0].is_some() {
                close(&mut open, &mut steps, launches.len());
                steps.push(Step::Record { stream: s, node: nid.0 });
            }
        }
        close(&mut open, &mut steps, launches.len());
        let ord = self.rt.inner.device(device)?.ordinal;
        let frozen = self.rt.backend().freeze(ord, &launches)?;
        Ok(FastPlan { launches, frozen, steps, per_run, outputs, slot_streams })
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
    pub fn options(&self) -> &CompileOptions {
        &self.options
    }
    /// True when `run` queues launches validated at compile time (the memory plan is on
    /// and every node could be frozen); false when it prepares every node on each run.
    pub fn runs_frozen(&self) -> bool {
        self.fast.is_some()
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
        if let Some(fp) = self.fast.as_ref().filter(|_| !profile && !poison)
            && let Some(outs) = self.run_fast(fp, inputs)?
        {
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
        for (id, s) in &self.slots {
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
            if self.streams.is_empty() { &default } else { &self.streams[self.schedule.stream_of[n]] }
        };
        // Make user streams wait for work queued before the run (e.g. input uploads).
        let start_ev = if profile || !self.streams.is_empty() { Some(default.record()?) } else { None };
        if let Some(ev) = &start_ev {
            for s in &self.streams {
                s.wait(ev)?;
            }
        }
        let t0 = Instant::now();
        let mut marks: Vec<(usize, Event, Event, &'static str, Unit, u64, u64)> = Vec::new();
        for &nid in &self.schedule.order {
            let n = &g.nodes[nid.0];
            let stream = stream_of(nid.0);
            for p in &self.schedule.waits[nid.0] {
                if let Some(ev) = &self.done[p.0] {
                    stream.wait(ev)?;
                }
            }
            if let Some(out) = n.outputs.first().filter(|o| self.aliases.contains_key(o)) {
                let dims: Vec<isize> = g.meta(*out).shape.dims().iter().map(|&d| d as isize).collect();
                let view = vals[&n.inputs[0]].reshape(&dims)?;
                vals.insert(*out, view);
                if let Some(ev) = &self.done[nid.0] {
                    ev.record(stream)?;
                }
                continue;
            }
            let ins: Vec<&Tensor> = n.inputs.iter().map(|v| &vals[v]).collect();
            let outs: Vec<&Tensor> = n.outputs.iter().map(|v| &vals[v]).collect();
            let before = if profile { Some(stream.record()?) } else { None };
            let mut target = Target::on(stream);
            target.threads = self.threads[nid.0];
            target.prepacked = self.prepacked[nid.0].as_ref();
            let r = self.rt.execute_at(target, &n.op, &ins, &outs).map_err(|e| match e {
                Error::Invalid { op, msg } => Error::Invalid { op, msg: format!("node {:?}: {msg}", n.name) },
                other => other,
            })?;
            if let Some(b) = before {
                marks.push((nid.0, b, stream.record()?, r.implementation, r.unit, r.flops, r.bytes));
            }
            if poison {
                for (v, last) in &self.last_reader {
                    if *last == nid.0 {
                        if let Some(t) = vals.get(v) {
                            t.fill_byte(0xFF, Target::on(stream))?;
                        }
                    }
                }
            }
            if let Some(ev) = &self.done[nid.0] {
                ev.record(stream)?;
            }
        }
        for s in &self.streams {
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
        Ok((outs, prof))
    }
}

impl CompiledGraph {
    /// A run through the frozen launches: per-run addresses patched in, consecutive nodes
    /// of a stream queued as one submission. `None` when the inputs need the node-by-node
    /// path (an input that is strided, or not on this runtime's device: that path
    /// materialises or reports it).
    fn run_fast(&self, fp: &FastPlan, inputs: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
        let device = self.options.device;
        let rt_inner = &self.rt.inner;
        if inputs.iter().any(|t| !t.is_contiguous() || t.device() != device || !Arc::ptr_eq(&t.storage.rt, rt_inner)) {
            return Ok(None);
        }
        let per_run: Vec<Tensor> =
            fp.per_run.iter().map(|m| self.rt.empty(m.dtype, m.shape.clone(), device)).collect::<Result<_>>()?;
        let slot = |k: usize| -> &Tensor { if k < inputs.len() { inputs[k] } else { &per_run[k - inputs.len()] } };
        let addrs: Vec<DevicePtr> = (0..inputs.len() + per_run.len()).map(|k| DevicePtr(slot(k).data_ptr())).collect();
        let default = self.rt.default_stream(device)?;
        if !self.streams.is_empty() {
            // User streams wait for work queued before the run (e.g. input uploads).
            let ev = default.record()?;
            for s in &self.streams {
                s.wait(&ev)?;
            }
        }
        // Graph inputs and outputs are used by the streams that read or write them; the
        // arena and constants were marked when the graph was compiled.
        for (k, streams) in fp.slot_streams.iter().enumerate() {
            for &s in streams {
                slot(k).storage.mark_use(Target::on(self.stream_at(s, &default)));
            }
        }
        let dev = rt_inner.device(device)?;
        let backend = self.rt.backend();
        let first_seq = self.rt.next_seqs(fp.launches.len() as u64);
        for step in &fp.steps {
            match step {
                Step::Wait { stream, node } => {
                    if let Some(ev) = &self.done[*node] {
                        self.stream_at(*stream, &default).wait(ev)?;
                    }
                }
                Step::Record { stream, node } => {
                    if let Some(ev) = &self.done[*node] {
                        ev.record(self.stream_at(*stream, &default))?;
                    }
                }
                Step::Launch { stream, nodes, units } => {
                    let stream = self.stream_at(*stream, &default);
                    let start = Instant::now();
                    let seq = first_seq + nodes.start as u64;
                    match &fp.frozen {
                        Some(f) => backend.launch_frozen(dev.ordinal, f, nodes.clone(), &addrs, seq, stream.id())?,
                        None => {
                            let batch = fp.launches[nodes.clone()]
                                .iter()
                                .enumerate()
                                .map(|(i, l)| {
                                    let mut args = l.args.clone();
                                    args.seq = seq + i as u64;
                                    let n_in = args.inputs.len();
                                    for &(op, k) in &l.patches {
                                        let a =
                                            if op < n_in { &mut args.inputs[op] } else { &mut args.outputs[op - n_in] };
                                        a.ptr = addrs[k];
                                    }
                                    (l.kernel, args)
                                })
                                .collect();
                            backend.launch_batch(dev.ordinal, batch, stream.id())?;
                        }
                    }
                    if !stream.is_async() {
                        backend.synchronize_stream(dev.ordinal, stream.id())?;
                        self.rt.record_busy(device, units, start.elapsed(), nodes.len() as u64);
                    }
                }
            }
        }
        for s in &self.streams {
            s.synchronize()?;
        }
        let outs = fp
            .outputs
            .iter()
            .map(|o| match o {
                OutputSrc::Input(i) => inputs[*i].clone(),
                OutputSrc::Constant(t) => t.clone(),
                OutputSrc::PerRun(j) => per_run[*j].clone(),
            })
            .collect();
        Ok(Some(outs))
    }
}

fn upload_bytes(t: &Tensor, bytes: &[u8]) -> Result<()> {
    t.copy_from_bytes(bytes)
}
