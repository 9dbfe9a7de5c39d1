//! A run over the caller's host buffers ([`CompiledGraph::run_host`]): where the device's
//! memory is host memory, the buffers are lent to it for the run
//! ([`Backend::with_host_ranges`](crate::Backend::with_host_ranges)) and the frozen launches
//! read the inputs and write the outputs in place; whatever cannot be lent is copied.

use super::OutputSrc;
use crate::backend::{DevicePtr, HostRange};
use crate::error::{Error, Result};
use crate::graph::exec::CompiledGraph;
use crate::op::TensorMeta;
use crate::tensor::Tensor;

/// What a [`CompiledGraph::run_host`] did with the caller's buffers. `Send + Sync`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostRun {
    /// Inputs the run read in place.
    pub lent_inputs: usize,
    /// Outputs the run wrote in place.
    pub lent_outputs: usize,
    /// Bytes copied between the caller's buffers and npurt's memory: the inputs staged
    /// in and the outputs copied out. 0 when every buffer was used in place.
    pub copied_bytes: usize,
}

/// How each buffer of one run is used.
struct Choice {
    /// Per input, whether it is lent.
    inputs: Vec<bool>,
    /// Per output, whether it is lent (it is then per-run output `j`, written in place).
    outputs: Vec<bool>,
}

impl CompiledGraph {
    /// Runs the graph on host buffers: `inputs[i]` holds graph input `i`'s elements and
    /// `outputs[k]` receives graph output `k`'s, each exactly its meta's bytes, in the
    /// element type's little-endian bytes, dense. Every launch that touches them has
    /// finished when this returns, and no tensor over them outlives the call.
    ///
    /// Where the device's memory is host memory (the CPU backend), the buffers are lent to
    /// it for the run and used in place: the frozen launches read the inputs and write the
    /// outputs, with no copy. A buffer is copied instead (counted in
    /// [`HostRun::copied_bytes`]) when it cannot be used in place: an input that the graph
    /// updates in place (it is the caller's, read only) or that shares bytes with an
    /// input lent before it, a buffer not aligned to the device's `min_alignment` (nor its
    /// element size), an output that is a graph input or a constant returned as it is;
    /// every output when the graph does not run frozen. The whole run is staged when the
    /// backend refuses the loan (a buffer another run has lent at the same moment: one
    /// input fed to concurrent runs). Elsewhere (Ascend, CUDA, or a backend that lends
    /// nothing) the inputs are staged into device tensors and the outputs copied out, one
    /// copy each way.
    pub fn run_host(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<HostRun> {
        let metas = self.check_host_buffers(inputs, outputs)?;
        let choice = self.choose_lent(inputs, outputs)?;
        let mut stats = HostRun {
            lent_inputs: choice.inputs.iter().filter(|&&b| b).count(),
            lent_outputs: choice.outputs.iter().filter(|&&b| b).count(),
            copied_bytes: 0,
        };
        // The lent buffers go to the backend, in order: inputs, then outputs; the others
        // stay here to be copied.
        let mut ranges: Vec<HostRange<'_>> = Vec::new();
        let mut copy_out: Vec<Option<&mut [u8]>> = Vec::with_capacity(outputs.len());
        for (b, &lent) in inputs.iter().zip(&choice.inputs) {
            if lent {
                ranges.push(HostRange::Read(b));
            }
        }
        for (b, &lent) in outputs.iter_mut().zip(&choice.outputs) {
            if lent {
                ranges.push(HostRange::Write(b));
                copy_out.push(None);
            } else {
                copy_out.push(Some(&mut **b));
            }
        }
        if ranges.is_empty() {
            stats.copied_bytes = self.run_lent(inputs, &metas, &choice, &[], &mut copy_out)?;
            return Ok(stats);
        }
        let ordinal = self.rt.ordinal(self.options.device)?;
        let (mut copied, mut ran) = (0, false);
        let r = self.rt.backend().with_host_ranges(ordinal, &mut ranges, &mut |ptrs| {
            ran = true;
            copied = self.run_lent(inputs, &metas, &choice, ptrs, &mut copy_out)?;
            Ok(())
        });
        drop((ranges, copy_out));
        match r {
            Ok(()) => {
                stats.copied_bytes = copied;
                Ok(stats)
            }
            // Nothing was lent (a host-memory backend that lends nothing, the trait's
            // default; or a buffer another run lends at this moment, e.g. one input array
            // fed to concurrent runs): staged.
            Err(why) if !ran => {
                log::debug!("compiled graph: host buffers staged: {why}");
                let none = Choice { inputs: vec![false; inputs.len()], outputs: vec![false; outputs.len()] };
                let mut all: Vec<Option<&mut [u8]>> = outputs.iter_mut().map(|b| Some(&mut **b)).collect();
                let copied_bytes = self.run_lent(inputs, &metas, &none, &[], &mut all)?;
                Ok(HostRun { lent_inputs: 0, lent_outputs: 0, copied_bytes })
            }
            Err(e) => Err(e),
        }
    }

    /// The graph's input and output metas, once the buffers are checked against them.
    fn check_host_buffers(
        &self,
        inputs: &[&[u8]],
        outputs: &[&mut [u8]],
    ) -> Result<(Vec<TensorMeta>, Vec<TensorMeta>)> {
        let g = &self.graph;
        let check = |what: &str, ids: &[crate::graph::ir::ValueId], lens: Vec<usize>| -> Result<Vec<TensorMeta>> {
            if ids.len() != lens.len() {
                return Err(Error::invalid("Graph", format!("expects {} {what}s, got {}", ids.len(), lens.len())));
            }
            let mut metas = Vec::with_capacity(ids.len());
            for (i, (id, len)) in ids.iter().zip(lens).enumerate() {
                let m = g.meta(*id).clone();
                let bytes = m.shape.checked_bytes(what, m.dtype)?;
                if bytes != len {
                    let name = &g.value(*id).name;
                    return Err(Error::invalid(
                        "Graph",
                        format!("{what} {i} ({name:?}) is {m}, {bytes} bytes; the buffer given has {len}"),
                    ));
                }
                metas.push(m);
            }
            Ok(metas)
        };
        let ins = check("input", &g.inputs, inputs.iter().map(|b| b.len()).collect())?;
        let outs = check("output", &g.outputs, outputs.iter().map(|b| b.len()).collect())?;
        Ok((ins, outs))
    }

    /// Which buffers this run lends to the device (see [`run_host`](Self::run_host)).
    fn choose_lent(&self, inputs: &[&[u8]], outputs: &[&mut [u8]]) -> Result<Choice> {
        let g = &self.graph;
        let info = self.rt.device_info(self.options.device)?;
        let fits = |ptr: *const u8, len: usize, size: usize| {
            info.host_shared && len > 0 && (ptr as usize).is_multiple_of(info.min_alignment.max(size).max(1))
        };
        let written = self.inputs_written_in_place();
        let mut lent_in = vec![false; inputs.len()];
        for (i, b) in inputs.iter().enumerate() {
            let span = (b.as_ptr() as u64, b.len());
            let shared = inputs[..i]
                .iter()
                .zip(&lent_in)
                .any(|(o, &l)| l && crate::backend::allocations::overlaps(span, (o.as_ptr() as u64, o.len())));
            lent_in[i] = fits(b.as_ptr(), b.len(), g.meta(g.inputs[i]).dtype.size()) && !written[i] && !shared;
        }
        let mut lent_out = vec![false; outputs.len()];
        if self.runs_frozen {
            let (sources, _) = self.output_sources();
            let mut seen = Vec::new();
            for (k, (src, b)) in sources.iter().zip(outputs).enumerate() {
                if let OutputSrc::PerRun(j) = src
                    && !seen.contains(j)
                {
                    seen.push(*j);
                    lent_out[k] = fits(b.as_ptr(), b.len(), g.meta(g.outputs[k]).dtype.size());
                }
            }
        }
        Ok(Choice { inputs: lent_in, outputs: lent_out })
    }

    /// Per graph input, whether an in-place op of the graph writes it.
    fn inputs_written_in_place(&self) -> Vec<bool> {
        let g = &self.graph;
        let mut written = vec![false; g.inputs.len()];
        for n in &g.nodes {
            for &(j, _) in n.op.in_place() {
                let Some(v) = n.inputs.get(j) else { continue };
                let root = self.aliases.get(v).unwrap_or(v);
                if let Some(i) = g.inputs.iter().position(|x| x == root) {
                    written[i] = true;
                }
            }
        }
        written
    }

    /// The run itself, inside the loan (`ptrs`: the lent buffers' addresses, inputs then
    /// outputs, as [`run_host`](Self::run_host) ordered them): each input a tensor over
    /// its lent range or a staged copy, the frozen launches into the lent outputs, the
    /// other outputs copied into `copy_out`. Returns the bytes copied.
    fn run_lent(
        &self,
        inputs: &[&[u8]],
        metas: &(Vec<TensorMeta>, Vec<TensorMeta>),
        choice: &Choice,
        ptrs: &[DevicePtr],
        copy_out: &mut [Option<&mut [u8]>],
    ) -> Result<usize> {
        let device = self.options.device;
        let mut copied = 0usize;
        let mut next = ptrs.iter().copied();
        let mut tensors = Vec::with_capacity(inputs.len());
        for ((b, m), &lent) in inputs.iter().zip(&metas.0).zip(&choice.inputs) {
            let t = if lent {
                let p = next.next().ok_or_else(|| Error::invalid("Graph", "a lent input has no address"))?;
                self.rt.lent_tensor(device, p, m)?
            } else {
                let t = self.rt.empty(m.dtype, m.shape.clone(), device)?;
                t.copy_from_bytes(b)?;
                copied += b.len();
                t
            };
            tensors.push(t);
        }
        let refs: Vec<&Tensor> = tensors.iter().collect();
        let outs = if choice.outputs.iter().any(|&l| l) {
            let mut lent_out: Vec<Option<DevicePtr>> = Vec::with_capacity(choice.outputs.len());
            for &l in &choice.outputs {
                lent_out.push(if l { next.next() } else { None });
            }
            self.run_into_lent(&refs, &metas.1, &lent_out)?
        } else {
            self.run(&refs)?
        };
        for ((t, dst), l) in outs.iter().zip(copy_out.iter_mut()).zip(&choice.outputs) {
            if let (Some(dst), false) = (dst, *l) {
                t.copy_to_bytes(dst)?;
                copied += dst.len();
            }
        }
        Ok(copied)
    }

    /// A frozen run whose per-run outputs are the lent ranges in `lent` (by graph output)
    /// where given, new tensors elsewhere.
    fn run_into_lent(
        &self,
        inputs: &[&Tensor],
        metas: &[TensorMeta],
        lent: &[Option<DevicePtr>],
    ) -> Result<Vec<Tensor>> {
        let device = self.options.device;
        let lease = self.lease()?;
        let inst = lease.get();
        let Some(plan) = inst.frozen.as_ref() else {
            return Err(Error::invalid("Graph", "an output lent to a graph that does not run frozen"));
        };
        let mut per_run: Vec<Option<Tensor>> = vec![None; plan.per_run.len()];
        for ((src, p), m) in plan.outputs.iter().zip(lent).zip(metas) {
            if let (OutputSrc::PerRun(j), Some(p)) = (src, p) {
                per_run[*j] = Some(self.rt.lent_tensor(device, *p, m)?);
            }
        }
        let per_run = per_run
            .into_iter()
            .zip(&plan.per_run)
            .map(|(t, m)| t.map_or_else(|| self.rt.empty(m.dtype, m.shape.clone(), device), Ok))
            .collect::<Result<Vec<_>>>()?;
        let outs = self.run_frozen_over(inst, plan, inputs, per_run)?;
        lease.finish();
        Ok(outs)
    }
}
