//! Running a compiled graph: through its arena's frozen plan when it has one, otherwise
//! node by node (also every profiled or poisoned run).

use super::arena::{Instance, Slot};
use super::exec::{CompiledGraph, in_node};
use super::ir::ValueId;
use super::profile::{NodeProfile, RunProfile};
use crate::error::{Error, Result};
use crate::report::ExecReport;
use crate::stream::{Event, Stream, Target};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::time::Instant;

impl CompiledGraph {
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
        self.check_inputs(inputs)?;
        let lease = self.lease()?;
        let inst = lease.get();
        if let Some(plan) = inst.frozen.as_ref().filter(|_| !profile && !poison)
            && let Some(outs) = self.run_frozen(inst, plan, inputs)?
        {
            lease.finish();
            return Ok((outs, None));
        }
        let g = &self.graph;
        let mut vals = self.bind_values(inst, inputs)?;
        let default = self.rt.default_stream(self.options.device)?;
        // Make user streams wait for work queued before the run (e.g. input uploads).
        let start_ev = if profile || !inst.streams.is_empty() { Some(default.record_queued()?) } else { None };
        if let Some(ev) = &start_ev {
            for s in &inst.streams {
                s.wait(ev)?;
            }
        }
        let t0 = Instant::now();
        let run = NodeRun { inst, default: &default, profile, poison };
        let mut marks: Vec<NodeMark> = Vec::new();
        for &nid in &self.schedule.order {
            self.run_node(&run, &mut vals, nid.0, &mut marks)?;
        }
        for s in &inst.streams {
            s.synchronize()?;
        }
        let total = t0.elapsed();
        let prof = match (profile, &start_ev) {
            (true, Some(start)) => Some(self.profile_of(marks, start, total)),
            _ => None,
        };
        let outs = g.outputs.iter().map(|o| vals[o].clone()).collect();
        drop(vals);
        lease.finish();
        Ok((outs, prof))
    }

    /// The inputs must be as many, and each of the dtype and shape, as the graph's.
    fn check_inputs(&self, inputs: &[&Tensor]) -> Result<()> {
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
        Ok(())
    }

    /// The tensor of every value a node-by-node run starts with: inputs, constants, the
    /// arena's intermediates (or new ones) and new outputs.
    fn bind_values(&self, inst: &Instance, inputs: &[&Tensor]) -> Result<HashMap<ValueId, Tensor>> {
        let g = &self.graph;
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
            if !vals.contains_key(o) && !self.aliases.contains_key(o) {
                let m = g.meta(*o);
                vals.insert(*o, self.rt.empty(m.dtype, m.shape.clone(), device)?);
            }
        }
        Ok(vals)
    }

    /// Node `node` of a node-by-node run, on its stream after the events it waits for.
    fn run_node(
        &self,
        run: &NodeRun<'_>,
        vals: &mut HashMap<ValueId, Tensor>,
        node: usize,
        marks: &mut Vec<NodeMark>,
    ) -> Result<()> {
        let inst = run.inst;
        let n = &self.graph.nodes[node];
        let stream = inst.stream_at(self.schedule.stream_of[node], run.default);
        for p in &self.schedule.waits[node] {
            if let Some(ev) = &inst.done[p.0] {
                stream.wait(ev)?;
            }
        }
        if self.is_view(n) {
            let out = n.outputs[0];
            let view = self.view(&vals[&n.inputs[0]], out, stream)?;
            vals.insert(out, view);
        } else {
            // An in-place output is its input's tensor (updated by the launch).
            for &(i, o) in n.op.in_place() {
                let t = vals[&n.inputs[i]].clone();
                vals.insert(n.outputs[o], t);
            }
            let ins: Vec<&Tensor> = n.inputs.iter().map(|v| &vals[v]).collect();
            let outs: Vec<&Tensor> = n.outputs.iter().map(|v| &vals[v]).collect();
            let before = if run.profile { Some(stream.record_queued()?) } else { None };
            let mut target = Target::on(stream);
            target.threads = self.threads[node];
            target.prepacked = self.prepacked[node].as_ref();
            let report = self.rt.execute_at(target, &n.op, &ins, &outs).map_err(|e| in_node(e, &n.name))?;
            if let Some(before) = before {
                marks.push(NodeMark { node, before, after: stream.record_queued()?, report });
            }
            if run.poison {
                self.poison_after(node, vals, stream)?;
            }
        }
        if let Some(ev) = &inst.done[node] {
            ev.record_queued(stream)?;
        }
        Ok(())
    }

    /// View `out` of `src` (a reshape that runs no kernel).
    fn view(&self, src: &Tensor, out: ValueId, stream: &Stream) -> Result<Tensor> {
        let dims: Vec<isize> = self.graph.meta(out).shape.dims().iter().map(|&d| d as isize).collect();
        if src.is_contiguous() {
            return src.reshape(&dims);
        }
        // A strided graph input: the view needs its elements in order first.
        let dense = self.rt.empty(src.dtype(), src.shape().clone(), self.options.device)?;
        self.rt.execute_at(Target::on(stream), &crate::op::Op::Copy, &[src], &[&dense])?;
        dense.reshape(&dims)
    }

    /// Overwrites the intermediates `node` reads last with all bits set, on its stream.
    fn poison_after(&self, node: usize, vals: &HashMap<ValueId, Tensor>, stream: &Stream) -> Result<()> {
        for (v, last) in &self.last_reader {
            if *last == node
                && let Some(t) = vals.get(v)
            {
                t.fill_byte(0xFF, Target::on(stream))?;
            }
        }
        Ok(())
    }

    /// The profile of a run from the events around its nodes.
    fn profile_of(&self, marks: Vec<NodeMark>, start: &Event, total: std::time::Duration) -> RunProfile {
        let nodes = marks
            .into_iter()
            .map(|m| {
                let n = &self.graph.nodes[m.node];
                NodeProfile {
                    name: n.name.clone(),
                    op: n.op.name(),
                    implementation: m.report.implementation,
                    unit: m.report.unit,
                    stream: self.schedule.stream_of[m.node],
                    start: m.before.elapsed_since(start).unwrap_or_default(),
                    elapsed: m.after.elapsed_since(&m.before).unwrap_or_default(),
                    flops: m.report.flops,
                    bytes: m.report.bytes,
                }
            })
            .collect();
        RunProfile { total, nodes }
    }
}

/// What every node of a node-by-node run shares.
struct NodeRun<'a> {
    inst: &'a Instance,
    default: &'a Stream,
    profile: bool,
    poison: bool,
}

/// The events recorded around one node of a profiled run, and its launch's report.
struct NodeMark {
    node: usize,
    before: Event,
    after: Event,
    report: ExecReport,
}
