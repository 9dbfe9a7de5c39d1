//! Frozen launches: a compiled graph's kernels validated once per arena, and the run
//! that patches the per-run addresses in and queues them in batches.

use super::arena::{Instance, Slot};
use super::exec::CompiledGraph;
use super::fast_plan::{FastPlan, OpenBatch, OutputSrc, Step};
use super::ir::ValueId;
use crate::backend::{DevicePtr, EventId, FrozenLaunch, FrozenRun, FrozenStep};
use crate::error::{Error, Result};
use crate::execute::Operand;
use crate::op::TensorMeta;
use crate::stream::Target;
use crate::tensor::Tensor;
use std::time::Instant;

impl CompiledGraph {
    /// Validates every node's launch once and lays out the submission steps of a run.
    pub(super) fn freeze(&self, inst: &Instance) -> Result<FastPlan> {
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
            let t = match (self.constants.get(&root), inst.slots.get(&root)) {
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
            let s = if inst.streams.is_empty() { 0 } else { self.schedule.stream_of[nid.0] };
            let waits: Vec<usize> =
                self.schedule.waits[nid.0].iter().filter(|p| inst.done[p.0].is_some()).map(|p| p.0).collect();
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
                        Error::Invalid { op, msg, operands } => {
                            Error::Invalid { op, msg: format!("node {:?}: {msg}", n.name), operands }
                        }
                        other => other,
                    })?;
                let stream = inst.stream_at(s, &default);
                let target = Target::on(stream);
                for t in fixed.iter().flatten() {
                    t.mark_use(target);
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
                launches.push(FrozenLaunch { kernel, args, patches, label: n.name.clone(), stream: stream.id() });
            }
            if inst.done[nid.0].is_some() {
                close(&mut open, &mut steps, launches.len());
                steps.push(Step::Record { stream: s, node: nid.0 });
            }
        }
        close(&mut open, &mut steps, launches.len());
        let frozen = self.rt.backend().freeze(self.rt.ordinal(device)?, &launches, self.options.graph_capture)?;
        let run_steps = steps
            .iter()
            .map(|st| match st {
                Step::Wait { stream, node } => FrozenStep::Wait { stream: *stream, event: *node },
                Step::Record { stream, node } => FrozenStep::Record { stream: *stream, event: *node },
                Step::Launch { stream, nodes, .. } => FrozenStep::Launch { stream: *stream, nodes: nodes.clone() },
            })
            .collect();
        Ok(FastPlan { launches, frozen, steps, run_steps, per_run, outputs, slot_streams })
    }

    /// A run through the frozen launches: per-run addresses patched in, consecutive nodes
    /// of a stream queued as one submission. `None` when the inputs need the node-by-node
    /// path (an input that is strided, or not on this runtime's device: that path
    /// materialises or reports it).
    pub(super) fn run_fast(&self, inst: &Instance, fp: &FastPlan, inputs: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
        let device = self.options.device;
        if inputs.iter().any(|t| !t.is_contiguous() || t.device() != device || !self.rt.owns(t)) {
            return Ok(None);
        }
        let per_run: Vec<Tensor> =
            fp.per_run.iter().map(|m| self.rt.empty(m.dtype, m.shape.clone(), device)).collect::<Result<_>>()?;
        let slot = |k: usize| -> &Tensor { if k < inputs.len() { inputs[k] } else { &per_run[k - inputs.len()] } };
        let addrs: Vec<DevicePtr> = (0..inputs.len() + per_run.len()).map(|k| DevicePtr(slot(k).data_ptr())).collect();
        let default = self.rt.default_stream(device)?;
        if !inst.streams.is_empty() {
            // User streams wait for work queued before the run (e.g. input uploads).
            let ev = default.record_queued()?;
            for s in &inst.streams {
                s.wait(&ev)?;
            }
        }
        // Graph inputs and outputs are used by the streams that read or write them, and by
        // the run's first stream (a backend taking the whole run may stage them there); the
        // arena and constants were marked when the graph was compiled.
        let first = inst.stream_at(0, &default);
        for (k, streams) in fp.slot_streams.iter().enumerate() {
            slot(k).mark_use(Target::on(first));
            for &s in streams.iter().filter(|&&s| s != 0) {
                slot(k).mark_use(Target::on(inst.stream_at(s, &default)));
            }
        }
        let ordinal = self.rt.ordinal(device)?;
        let backend = self.rt.backend();
        let first_seq = self.rt.next_seqs(fp.launches.len() as u64);
        if let Some(f) = &fp.frozen {
            let streams: Vec<_> = (0..inst.streams.len().max(1)).map(|s| inst.stream_at(s, &default).id()).collect();
            // Node-indexed; a node without an event is never named by a step.
            let events: Vec<EventId> =
                inst.done.iter().map(|e| e.as_ref().map_or(EventId(u64::MAX), |e| e.id())).collect();
            let run = FrozenRun { steps: &fp.run_steps, streams: &streams, events: &events, addrs: &addrs, first_seq };
            if backend.launch_frozen_run(ordinal, f, run)? {
                return self.finish_fast(inst, fp, inputs, per_run).map(Some);
            }
        }
        for step in &fp.steps {
            match step {
                Step::Wait { stream, node } => {
                    if let Some(ev) = &inst.done[*node] {
                        inst.stream_at(*stream, &default).wait(ev)?;
                    }
                }
                Step::Record { stream, node } => {
                    if let Some(ev) = &inst.done[*node] {
                        ev.record_queued(inst.stream_at(*stream, &default))?;
                    }
                }
                Step::Launch { stream, nodes, units } => {
                    let stream = inst.stream_at(*stream, &default);
                    let start = Instant::now();
                    let seq = first_seq + nodes.start as u64;
                    match &fp.frozen {
                        Some(f) => backend.launch_frozen(ordinal, f, nodes.clone(), &addrs, seq, stream.id())?,
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
                                    (l.kernel.clone(), args)
                                })
                                .collect();
                            backend.launch_batch(ordinal, batch, stream.id())?;
                        }
                    }
                    if !stream.is_async() {
                        backend.synchronize_stream(ordinal, stream.id())?;
                        self.rt.record_busy(device, units, start.elapsed(), nodes.len() as u64);
                    }
                }
            }
        }
        self.finish_fast(inst, fp, inputs, per_run).map(Some)
    }

    /// The end of a frozen run: the schedule's streams waited for, the outputs.
    fn finish_fast(
        &self,
        inst: &Instance,
        fp: &FastPlan,
        inputs: &[&Tensor],
        per_run: Vec<Tensor>,
    ) -> Result<Vec<Tensor>> {
        for s in &inst.streams {
            s.synchronize()?;
        }
        Ok(fp
            .outputs
            .iter()
            .map(|o| match o {
                OutputSrc::Input(i) => inputs[*i].clone(),
                OutputSrc::Constant(t) => t.clone(),
                OutputSrc::PerRun(j) => per_run[*j].clone(),
            })
            .collect())
    }
}
