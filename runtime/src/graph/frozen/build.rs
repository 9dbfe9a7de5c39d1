//! Building a frozen plan: each node's launch validated once against one arena's buffers,
//! and the submission steps between the streams laid out.

use super::{FrozenPlan, OutputSrc};
use crate::backend::{FrozenLaunch, FrozenStep};
use crate::error::{Error, Result};
use crate::execute::FrozenOperand;
use crate::graph::arena::{Instance, Slot};
use crate::graph::exec::{CompiledGraph, in_node};
use crate::graph::ir::ValueId;
use crate::kernel::Unit;
use crate::op::TensorMeta;
use crate::stream::{Stream, Target};
use crate::tensor::Tensor;
use crate::utilisation::UnitCounts;

impl CompiledGraph {
    /// Validates every node's launch once and lays out the submission steps of a run.
    pub(in crate::graph) fn freeze(&self, inst: &Instance) -> Result<FrozenPlan> {
        let g = &self.graph;
        let device = self.options.device;
        let (outputs, per_run_ids) = self.output_sources();
        let per_run: Vec<TensorMeta> = per_run_ids.iter().map(|v| g.meta(*v).clone()).collect();
        let slots = AddressSlots { inputs: &g.inputs, per_run: &per_run_ids };
        let default = self.rt.default_stream(device)?;
        let mut launches = Vec::new();
        let mut layout = StepLayout::default();
        let mut slot_streams: Vec<Vec<usize>> = vec![Vec::new(); slots.len()];
        for &nid in &self.schedule.order {
            let n = &g.nodes[nid.0];
            let s = if inst.streams.is_empty() { 0 } else { self.schedule.stream_of[nid.0] };
            let waits: Vec<usize> =
                self.schedule.waits[nid.0].iter().filter(|p| inst.done[p.0].is_some()).map(|p| p.0).collect();
            if !waits.is_empty() || layout.is_open_on_another(s) {
                layout.close(launches.len());
            }
            for p in waits {
                layout.push(FrozenStep::Wait { stream: s, event: p }, UnitCounts::default());
            }
            if !self.is_view(n) {
                let node = self.freeze_node(inst, &slots, nid.0, inst.stream_at(s, &default))?;
                for &(_, k) in &node.launch.patches {
                    if !slot_streams[k].contains(&s) {
                        slot_streams[k].push(s);
                    }
                }
                layout.count_launch(s, launches.len(), node.launch.kernel.unit, node.flops, node.bytes);
                launches.push(node.launch);
            }
            if inst.done[nid.0].is_some() {
                layout.close(launches.len());
                layout.push(FrozenStep::Record { stream: s, event: nid.0 }, UnitCounts::default());
            }
        }
        layout.close(launches.len());
        let backend_form = self.rt.backend().freeze(self.rt.ordinal(device)?, &launches, self.options.graph_capture)?;
        let StepLayout { steps, step_units, .. } = layout;
        Ok(FrozenPlan { launches, backend_form, steps, step_units, per_run, outputs, slot_streams })
    }

    /// Where each graph output comes from, and the per-run outputs: the distinct node
    /// outputs among the graph outputs, in order.
    pub(super) fn output_sources(&self) -> (Vec<OutputSrc>, Vec<ValueId>) {
        let g = &self.graph;
        let mut per_run_ids: Vec<ValueId> = Vec::new();
        let mut outputs = Vec::with_capacity(g.outputs.len());
        for o in &g.outputs {
            // A graph output with an alias is an in-place output (Reshapes that are graph
            // outputs are not views), which updates a graph input (compile checks it): the
            // run returns that input's tensor.
            let root = self.aliases.get(o).unwrap_or(o);
            let src = if let Some(i) = g.inputs.iter().position(|x| x == root) {
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
        (outputs, per_run_ids)
    }

    /// What `v` is at run time: a fixed tensor (an arena slot, a constant, or a view of
    /// one) or an address slot.
    fn bind(&self, inst: &Instance, slots: &AddressSlots<'_>, v: ValueId) -> Result<Bound> {
        let g = &self.graph;
        let root = self.aliases.get(&v).copied().unwrap_or(v);
        if let Some(k) = slots.of(root) {
            return Ok(Bound::Slot(k));
        }
        let t = match (self.constants.get(&root), inst.slots.get(&root)) {
            (Some(t), _) | (None, Some(Slot::Arena(t))) => t,
            _ => return Err(Error::invalid("Graph", format!("value {:?} has no fixed buffer", g.value(v).name))),
        };
        if root == v {
            return Ok(Bound::Fixed(t.clone()));
        }
        let dims: Vec<isize> = g.meta(v).shape.dims().iter().map(|&d| d as isize).collect();
        Ok(Bound::Fixed(t.reshape(&dims)?))
    }

    /// Node `node`'s launch validated once for `inst`'s buffers, queued on `stream`.
    fn freeze_node(
        &self,
        inst: &Instance,
        slots: &AddressSlots<'_>,
        node: usize,
        stream: &Stream,
    ) -> Result<FrozenNode> {
        let g = &self.graph;
        let n = &g.nodes[node];
        let bound: Vec<Bound> =
            n.inputs.iter().chain(&n.outputs).map(|v| self.bind(inst, slots, *v)).collect::<Result<_>>()?;
        let metas: Vec<TensorMeta> = n.inputs.iter().chain(&n.outputs).map(|v| g.meta(*v).clone()).collect();
        let operands: Vec<FrozenOperand<'_>> = bound
            .iter()
            .zip(&metas)
            .map(|(b, m)| match b {
                Bound::Fixed(t) => FrozenOperand::Fixed(t),
                Bound::Slot(_) => FrozenOperand::PerRun(m),
            })
            .collect();
        let (ins, outs) = operands.split_at(n.inputs.len());
        let v = self
            .rt
            .freeze_launch(self.options.device, &n.op, ins, outs, self.threads[node], self.prepacked[node].as_ref())
            .map_err(|e| in_node(e, &n.name))?;
        let target = Target::on(stream);
        for b in &bound {
            if let Bound::Fixed(t) = b {
                t.mark_use(target);
            }
        }
        let patches: Vec<(usize, usize)> = bound
            .iter()
            .enumerate()
            .filter_map(|(i, b)| match b {
                Bound::Slot(k) => Some((i, *k)),
                Bound::Fixed(_) => None,
            })
            .collect();
        let launch =
            FrozenLaunch { kernel: v.kernel, args: v.args, patches, label: n.name.clone(), stream: stream.id() };
        Ok(FrozenNode { launch, flops: v.flops, bytes: v.bytes })
    }
}

/// The address slots of a frozen run: the graph inputs in order, then the per-run outputs.
struct AddressSlots<'a> {
    inputs: &'a [ValueId],
    per_run: &'a [ValueId],
}

impl AddressSlots<'_> {
    fn of(&self, v: ValueId) -> Option<usize> {
        self.inputs
            .iter()
            .position(|x| *x == v)
            .or_else(|| self.per_run.iter().position(|x| *x == v).map(|j| self.inputs.len() + j))
    }

    fn len(&self) -> usize {
        self.inputs.len() + self.per_run.len()
    }
}

/// What an operand of a frozen launch is bound to.
enum Bound {
    /// The same tensor on every run.
    Fixed(Tensor),
    /// The run's address in slot `k`.
    Slot(usize),
}

/// A node's frozen launch and its cost.
struct FrozenNode {
    launch: FrozenLaunch,
    flops: u64,
    bytes: u64,
}

/// The steps of a frozen run as they are laid out.
#[derive(Default)]
struct StepLayout {
    steps: Vec<FrozenStep>,
    /// Parallel to `steps` (see [`FrozenPlan::step_units`]).
    step_units: Vec<UnitCounts>,
    /// The batch being built, pushed as one `Launch` step when closed.
    open: Option<OpenBatch>,
}

/// A batch of launches being laid out.
struct OpenBatch {
    stream: usize,
    /// Its first launch.
    start: usize,
    units: UnitCounts,
}

impl StepLayout {
    fn push(&mut self, step: FrozenStep, units: UnitCounts) {
        self.steps.push(step);
        self.step_units.push(units);
    }

    fn is_open_on_another(&self, stream: usize) -> bool {
        self.open.as_ref().is_some_and(|o| o.stream != stream)
    }

    /// Ends the open batch (if any) before launch `end`.
    fn close(&mut self, end: usize) {
        if let Some(OpenBatch { stream, start, units }) = self.open.take() {
            self.push(FrozenStep::Launch { stream, nodes: start..end }, units);
        }
    }

    /// Adds launch `index` to the batch open on `stream` (opening one if none is).
    fn count_launch(&mut self, stream: usize, index: usize, unit: Unit, flops: u64, bytes: u64) {
        let open = self.open.get_or_insert_with(|| OpenBatch { stream, start: index, units: UnitCounts::default() });
        open.units.add(unit, flops, bytes);
    }
}
