//! A run through a frozen plan: the per-run addresses patched in, consecutive launches
//! of a stream queued as one submission (or the whole run handed to the backend).

use super::{FrozenPlan, OutputSrc};
use crate::backend::{DevicePtr, EventId, FrozenLaunch, FrozenRun, FrozenStep, LaunchArgs};
use crate::error::Result;
use crate::graph::arena::Instance;
use crate::graph::exec::CompiledGraph;
use crate::stream::{Stream, Target};
use crate::tensor::Tensor;
use crate::utilisation::UnitCounts;
use std::ops::Range;
use std::time::Instant;

impl CompiledGraph {
    /// A run through a frozen plan: per-run addresses patched in, consecutive launches of
    /// a stream queued as one submission. `None` when the inputs need the node-by-node
    /// path (an input that is strided, or not on this runtime's device: that path
    /// materialises or reports it).
    pub(in crate::graph) fn run_frozen(
        &self,
        inst: &Instance,
        plan: &FrozenPlan,
        inputs: &[&Tensor],
    ) -> Result<Option<Vec<Tensor>>> {
        let device = self.options.device;
        if inputs.iter().any(|t| !t.is_contiguous() || t.device() != device || !self.rt.owns(t)) {
            return Ok(None);
        }
        let per_run: Vec<Tensor> =
            plan.per_run.iter().map(|m| self.rt.empty(m.dtype, m.shape.clone(), device)).collect::<Result<_>>()?;
        self.run_frozen_over(inst, plan, inputs, per_run).map(Some)
    }

    /// A frozen run into `per_run` (one tensor per per-run output, contiguous, of its
    /// meta, on the graph's device): what [`run_frozen`](Self::run_frozen) does once it
    /// has its outputs. The inputs are contiguous tensors of this runtime's device.
    pub(super) fn run_frozen_over(
        &self,
        inst: &Instance,
        plan: &FrozenPlan,
        inputs: &[&Tensor],
        per_run: Vec<Tensor>,
    ) -> Result<Vec<Tensor>> {
        let device = self.options.device;
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
        for (k, streams) in plan.slot_streams.iter().enumerate() {
            slot(k).mark_use(Target::on(first));
            for &s in streams.iter().filter(|&&s| s != 0) {
                slot(k).mark_use(Target::on(inst.stream_at(s, &default)));
            }
        }
        let ordinal = self.rt.ordinal(device)?;
        let first_seq = self.rt.next_seqs(plan.launches.len() as u64);
        if let Some(f) = &plan.backend_form {
            let streams: Vec<_> = (0..inst.streams.len().max(1)).map(|s| inst.stream_at(s, &default).id()).collect();
            // Node-indexed; a node without an event is never named by a step.
            let events: Vec<EventId> =
                inst.done.iter().map(|e| e.as_ref().map_or(EventId(u64::MAX), |e| e.id())).collect();
            let run = FrozenRun { steps: &plan.steps, streams: &streams, events: &events, addrs: &addrs, first_seq };
            if self.rt.backend().launch_frozen_run(ordinal, f, run)? {
                return self.finish_frozen(inst, plan, inputs, per_run);
            }
        }
        let run = StepRun { inst, plan, default: &default, ordinal, addrs: &addrs, first_seq };
        for (step, units) in plan.steps.iter().zip(&plan.step_units) {
            match step {
                FrozenStep::Wait { stream, event } => {
                    if let Some(ev) = &inst.done[*event] {
                        inst.stream_at(*stream, &default).wait(ev)?;
                    }
                }
                FrozenStep::Record { stream, event } => {
                    if let Some(ev) = &inst.done[*event] {
                        ev.record_queued(inst.stream_at(*stream, &default))?;
                    }
                }
                FrozenStep::Launch { stream, nodes } => self.launch_step(&run, *stream, nodes.clone(), units)?,
            }
        }
        self.finish_frozen(inst, plan, inputs, per_run)
    }

    /// One `Launch` step of a run submitted by itself: the backend's own form of the plan
    /// or, without one, the launches patched and queued as a batch.
    fn launch_step(&self, run: &StepRun<'_>, stream: usize, nodes: Range<usize>, units: &UnitCounts) -> Result<()> {
        let backend = self.rt.backend();
        let stream = run.inst.stream_at(stream, run.default);
        let start = Instant::now();
        let seq = run.first_seq + nodes.start as u64;
        match &run.plan.backend_form {
            Some(f) => backend.launch_frozen(run.ordinal, f, nodes.clone(), run.addrs, seq, stream.id())?,
            None => {
                let batch = run.plan.launches[nodes.clone()]
                    .iter()
                    .enumerate()
                    .map(|(i, l)| (l.kernel.clone(), patched_args(l, run.addrs, seq + i as u64)))
                    .collect();
                backend.launch_batch(run.ordinal, batch, stream.id())?;
            }
        }
        if !stream.is_async() {
            backend.synchronize_stream(run.ordinal, stream.id())?;
            self.rt.record_busy(self.options.device, units, start.elapsed(), nodes.len() as u64);
        }
        Ok(())
    }

    /// The end of a frozen run: the schedule's streams waited for, the outputs.
    fn finish_frozen(
        &self,
        inst: &Instance,
        plan: &FrozenPlan,
        inputs: &[&Tensor],
        per_run: Vec<Tensor>,
    ) -> Result<Vec<Tensor>> {
        for s in &inst.streams {
            s.synchronize()?;
        }
        Ok(plan
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

/// What every step of a run submitted step by step shares.
struct StepRun<'a> {
    inst: &'a Instance,
    plan: &'a FrozenPlan,
    default: &'a Stream,
    ordinal: usize,
    /// The run's address of each slot.
    addrs: &'a [DevicePtr],
    /// The sequence number of the plan's first launch in this run.
    first_seq: u64,
}

/// A frozen launch's arguments with this run's addresses patched in and sequence `seq`.
fn patched_args(l: &FrozenLaunch, addrs: &[DevicePtr], seq: u64) -> LaunchArgs {
    let mut args = l.args.clone();
    args.seq = seq;
    let n_in = args.inputs.len();
    for &(op, k) in &l.patches {
        let a = if op < n_in { &mut args.inputs[op] } else { &mut args.outputs[op - n_in] };
        a.ptr = addrs[k];
    }
    args
}
