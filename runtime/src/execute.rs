//! Eager execution: validating an op's operands, choosing its kernel and launching it on
//! a stream, one op or a batch at a time; and the same validation done once for a
//! compiled graph's frozen launches.

use crate::backend::LaunchArgs;
use crate::error::{Error, Result};
use crate::kernel::{self, KernelInfo, KernelQuery};
use crate::op::{Op, TensorMeta};
use crate::report::ExecReport;
use crate::runtime::{Runtime, Task};
use crate::shape::Layout;
use crate::stream::Target;
use crate::stream::{self, Stream};
use crate::tensor::Tensor;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Runtime {
    /// Validates `op` on these inputs and returns the output metas.
    pub fn infer(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<TensorMeta>> {
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
        op.infer(&metas)
    }

    /// Runs `op` on the current stream (synchronous on the default stream, queued on a
    /// user stream), writing into `outputs`.
    pub fn execute(&self, op: &Op, inputs: &[&Tensor], outputs: &[&Tensor]) -> Result<ExecReport> {
        let device = inputs.first().or(outputs.first()).map_or(0, |t| t.device());
        match stream::current_for(&self.inner).filter(|s| s.device() == device) {
            Some(s) => self.execute_on(&s, op, inputs, outputs),
            None => {
                let d = self.inner.device(device)?;
                self.execute_at(
                    Target { device, id: d.default_stream, user: None, threads: 0, prepacked: None },
                    op,
                    inputs,
                    outputs,
                )
            }
        }
    }

    /// Allocates the outputs, runs `op` on the current stream and returns them.
    pub fn run(&self, op: &Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(self.run_with_report(op, inputs)?.0)
    }

    /// [`Runtime::run`] that also returns the report.
    pub fn run_with_report(&self, op: &Op, inputs: &[&Tensor]) -> Result<(Vec<Tensor>, ExecReport)> {
        let device = inputs.first().map_or(0, |t| t.device());
        let metas = self.infer(op, inputs)?;
        let outs: Vec<Tensor> =
            metas.into_iter().map(|m| self.empty(m.dtype, m.shape, device)).collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = outs.iter().collect();
        let r = self.execute(op, inputs, &refs)?;
        Ok((outs, r))
    }

    /// Runs `op` on `stream`.
    pub fn execute_on(&self, stream: &Stream, op: &Op, inputs: &[&Tensor], outputs: &[&Tensor]) -> Result<ExecReport> {
        if !stream.same_runtime(&self.inner) {
            return Err(Error::invalid(op.name(), format!("{stream} belongs to another runtime")));
        }
        let target = Target::on(stream);
        self.execute_at(target, op, inputs, outputs)
    }

    fn stream_label(&self, t: Target<'_>) -> Arc<str> {
        match t.user {
            Some(s) => s.inner.label.clone(),
            None => self.inner.devices[t.device].default_label.clone(),
        }
    }

    pub(crate) fn execute_at(
        &self,
        target: Target<'_>,
        op: &Op,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
    ) -> Result<ExecReport> {
        let Prepared { kernel, args, flops, bytes, temps } = self.prepare(target, op, inputs, outputs)?;
        let dev = &self.inner.devices[target.device];
        let seq = args.seq;
        let start = Instant::now();
        self.inner.backend.launch(dev.ordinal, kernel, args, target.id)?;
        let elapsed = if target.is_async() {
            None
        } else {
            self.inner.backend.synchronize_stream(dev.ordinal, target.id)?;
            Some(start.elapsed())
        };
        for t in inputs.iter().chain(outputs) {
            t.storage.mark_use(target);
        }
        drop(temps);
        let report = ExecReport {
            op: op.name(),
            implementation: kernel.name.clone(),
            tier: kernel.tier,
            device: dev.label.clone(),
            unit: kernel.unit,
            stream: self.stream_label(target),
            seq,
            elapsed,
            flops,
            bytes,
        };
        if elapsed.is_some() {
            self.inner.profile.lock().unwrap_or_else(|p| p.into_inner()).record(target.device, &report);
        }
        Ok(report)
    }

    /// Validates every task, then submits them together on the current stream of the
    /// first task's device. Nothing is submitted if any task is invalid.
    pub fn execute_batch(&self, tasks: &[Task]) -> Result<Vec<ExecReport>> {
        let Some(first) = tasks.first() else {
            return Ok(Vec::new());
        };
        let device = first.inputs.first().or(first.outputs.first()).map_or(0, |t| t.device());
        let stream = self.current_stream(device)?;
        let target = Target::on(&stream);
        let mut launches = Vec::with_capacity(tasks.len());
        let mut reports = Vec::with_capacity(tasks.len());
        let mut held = Vec::new();
        let dev = &self.inner.devices[device];
        for t in tasks {
            let ins: Vec<&Tensor> = t.inputs.iter().collect();
            let outs: Vec<&Tensor> = t.outputs.iter().collect();
            let Prepared { kernel, args, flops, bytes, temps } = self.prepare(target, &t.op, &ins, &outs)?;
            held.extend(temps);
            reports.push(ExecReport {
                op: t.op.name(),
                implementation: kernel.name.clone(),
                tier: kernel.tier,
                device: dev.label.clone(),
                unit: kernel.unit,
                stream: self.stream_label(target),
                seq: args.seq,
                elapsed: None,
                flops,
                bytes,
            });
            launches.push((kernel.clone(), args));
        }
        let start = Instant::now();
        self.inner.backend.launch_batch(dev.ordinal, launches, stream.id())?;
        for t in tasks {
            for x in t.inputs.iter().chain(&t.outputs) {
                x.storage.mark_use(target);
            }
        }
        drop(held);
        if !stream.is_async() {
            self.inner.backend.synchronize_stream(dev.ordinal, stream.id())?;
            let per = start.elapsed() / tasks.len() as u32;
            for r in &mut reports {
                r.elapsed = Some(per);
            }
        }
        Ok(reports)
    }

    /// Picks the kernel `execute` would use, without running anything.
    pub fn select_kernel(&self, op: &Op, inputs: &[TensorMeta]) -> Result<KernelInfo> {
        let outputs = op.infer(inputs)?;
        self.select_for(op, inputs, &outputs).cloned()
    }

    /// The device time `op` would take on `device` with the kernel `execute` would pick,
    /// by the backend's model of its device ([`crate::Backend::modelled_cost`]); `None`
    /// where the backend has no model, or the op is invalid or has no kernel.
    pub fn modelled_cost(&self, device: usize, op: &Op, inputs: &[TensorMeta]) -> Option<std::time::Duration> {
        let outputs = op.infer(inputs).ok()?;
        let kernel = self.select_for(op, inputs, &outputs).ok()?;
        let ordinal = self.inner.device(device).ok()?.ordinal;
        self.inner.backend.modelled_cost(ordinal, kernel, op, inputs, &outputs)
    }

    /// Lets the backend prepare a compiled node's constant inputs for the kernel that
    /// `execute` will choose (see [`Backend::prepack`]).
    pub(crate) fn prepack(
        &self,
        op: &Op,
        inputs: &[TensorMeta],
        constants: &[Option<&[u8]>],
    ) -> Result<Option<crate::backend::Prepack>> {
        let outputs = op.infer(inputs)?;
        let kernel = self.select_for(op, inputs, &outputs)?;
        self.inner.backend.prepack(kernel, op, inputs, constants)
    }

    /// [`crate::Backend::prepack_int8`] for the kernel `op` selects on `device`.
    pub(crate) fn prepack_int8(
        &self,
        device: usize,
        op: &Op,
        inputs: &[TensorMeta],
        constants: &[Option<&[u8]>],
    ) -> Result<Option<crate::backend::Prepack>> {
        let outputs = op.infer(inputs)?;
        let kernel = self.select_for(op, inputs, &outputs)?;
        let ordinal = self.inner.device(device)?.ordinal;
        self.inner.backend.prepack_int8(ordinal, kernel, op, inputs, constants)
    }

    /// The chosen kernel, borrowed from the backend's table (no copy per launch).
    fn select_for(&self, op: &Op, inputs: &[TensorMeta], outputs: &[TensorMeta]) -> Result<&KernelInfo> {
        let q = KernelQuery { op, inputs, outputs };
        let kind = op.kind();
        let order =
            crate::op::OpKind::ALL.iter().position(|k| *k == kind).map_or(&[][..], |i| &self.inner.preference[i]);
        kernel::select_in_order(
            self.inner.backend.name(),
            self.inner.backend.kernels(),
            order,
            &q,
            self.inner.config.forced_tier,
        )
    }

    fn prepare(&self, target: Target<'_>, op: &Op, inputs: &[&Tensor], outputs: &[&Tensor]) -> Result<Prepared<'_>> {
        let name = op.name();
        let in_metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
        let out_metas = op.infer(&in_metas)?;
        check_output_metas(name, &out_metas, outputs.iter().map(|t| t.meta()))?;
        for (i, t) in outputs.iter().enumerate() {
            if !t.is_contiguous() {
                return Err(Error::invalid(name, format!("output {i} ({}) must be contiguous", t.meta())));
            }
        }
        let dev = target.device;
        let stream = self.stream_label(target);
        let operands = inputs.iter().enumerate().map(|(i, t)| ("input", i, t));
        for (what, i, t) in operands.chain(outputs.iter().enumerate().map(|(i, t)| ("output", i, t))) {
            if let Some(msg) = self.misplaced(t, dev, &stream) {
                return Err(Error::invalid(name, format!("{what} {i} ({}) {msg}", t.meta())));
            }
        }
        // Aliasing: an output may not overlap an input or another output, except the
        // in-place pairs of the op given the same memory; one given separate memory gets
        // the input's elements copied in first and is then updated in place.
        let pairs = op.in_place();
        let mut copy_in: Vec<(usize, usize)> = Vec::new();
        for (i, o) in outputs.iter().enumerate() {
            for (j, t) in inputs.iter().enumerate() {
                let paired = pairs.contains(&(j, i));
                if paired && same_memory(t, o) {
                    continue;
                }
                if t.overlaps(o) {
                    let why = if paired {
                        "; an in-place output must be exactly its input's memory (the same tensor) or separate from it"
                    } else {
                        "; in-place execution is not supported"
                    };
                    return Err(Error::invalid(
                        name,
                        format!("output {i} ({}) overlaps input {j} ({}){why}", o.meta(), inputs[j].meta()),
                    ));
                }
                if paired {
                    copy_in.push((j, i));
                }
            }
            if let Some(j) = outputs.iter().enumerate().position(|(j, t)| j != i && t.overlaps(o)) {
                return Err(Error::invalid(name, format!("outputs {i} and {j} overlap")));
            }
        }
        for &(j, i) in &copy_in {
            self.execute_at(target, &Op::Copy, &[inputs[j]], &[outputs[i]])?;
        }
        // Kernels other than Copy read dense operands: materialise strided views first
        // (an in-place input is read through its output).
        let mut owned = Vec::new();
        if !matches!(op, Op::Copy) {
            for (j, t) in inputs.iter().enumerate() {
                if !t.is_contiguous() && !pairs.iter().any(|p| p.0 == j) {
                    let c = self.empty_for(t.dtype, t.shape().clone(), target)?;
                    self.execute_at(target, &Op::Copy, &[t], &[&c])?;
                    owned.push(Some(c));
                } else {
                    owned.push(None);
                }
            }
        }
        let kernel = self.select_for(op, &in_metas, &out_metas)?;
        let in_args = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| match (owned.get(i), pairs.iter().find(|p| p.0 == i)) {
                (_, Some(&(_, o))) => outputs[o].arg(),
                (Some(Some(c)), None) => {
                    c.storage.mark_use(target);
                    c.arg()
                }
                _ => t.arg(),
            })
            .collect();
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let args = LaunchArgs {
            op: op.clone(),
            inputs: in_args,
            outputs: outputs.iter().map(|t| t.arg()).collect(),
            workspace: None,
            seq,
            threads: target.threads,
            prepacked: target.prepacked.cloned(),
        };
        let flops = op.flops(&in_metas, &out_metas);
        let bytes = op.bytes(&in_metas, &out_metas);
        // The caller drops the temporaries after queueing the launch, so their release
        // events come after it on the stream.
        Ok(Prepared { kernel, args, flops, bytes, temps: owned.into_iter().flatten().collect() })
    }

    /// Validates one launch of a compiled graph's node once, the way [`prepare`] does on
    /// every eager launch, and returns its kernel and launch template. Fixed operands are
    /// checked in full (device, runtime, contiguity, overlap); a per-run operand only by
    /// its metadata, and its template operand is contiguous at a placeholder address. An
    /// error means the node cannot be frozen (e.g. a strided fixed input).
    pub(crate) fn freeze_launch(
        &self,
        device: usize,
        op: &Op,
        inputs: &[FrozenOperand<'_>],
        outputs: &[FrozenOperand<'_>],
        threads: usize,
        prepacked: Option<&crate::backend::Prepacked>,
    ) -> Result<ValidatedLaunch> {
        let name = op.name();
        let in_metas: Vec<TensorMeta> = inputs.iter().map(FrozenOperand::meta).collect();
        let out_metas = op.infer(&in_metas)?;
        check_output_metas(name, &out_metas, outputs.iter().map(FrozenOperand::meta))?;
        let fixed = inputs.iter().chain(outputs).filter_map(|o| match o {
            FrozenOperand::Fixed(t) => Some(*t),
            FrozenOperand::PerRun(_) => None,
        });
        for t in fixed {
            if !Arc::ptr_eq(&t.storage.rt, &self.inner) || t.device() != device {
                return Err(Error::invalid(name, format!("operand {} is not on device {device}", t.meta())));
            }
            if !t.is_contiguous() {
                return Err(Error::invalid(name, format!("operand {} is not contiguous", t.meta())));
            }
        }
        // An in-place pair is one memory: both fixed and the same, or both per run (from
        // one address slot, which the caller patches into both).
        let pairs = op.in_place();
        for &(j, i) in pairs {
            let same = match (inputs.get(j), outputs.get(i)) {
                (Some(FrozenOperand::Fixed(a)), Some(FrozenOperand::Fixed(b))) => same_memory(a, b),
                (Some(FrozenOperand::PerRun(_)), Some(FrozenOperand::PerRun(_))) => true,
                _ => false,
            };
            if !same {
                return Err(Error::invalid(name, format!("output {i} must be input {j}'s memory (updated in place)")));
            }
        }
        for (i, o) in outputs.iter().enumerate() {
            let FrozenOperand::Fixed(o) = o else { continue };
            let overlaps = |j: usize, x: &FrozenOperand<'_>| {
                !pairs.contains(&(j, i)) && matches!(x, FrozenOperand::Fixed(t) if t.overlaps(o))
            };
            if inputs.iter().enumerate().any(|(j, x)| overlaps(j, x))
                || outputs
                    .iter()
                    .enumerate()
                    .any(|(j, x)| j != i && matches!(x, FrozenOperand::Fixed(t) if t.overlaps(o)))
            {
                return Err(Error::invalid(name, format!("output {i} ({}) overlaps another operand", o.meta())));
            }
        }
        let kernel = self.select_for(op, &in_metas, &out_metas)?;
        let arg = |o: &FrozenOperand<'_>| match o {
            FrozenOperand::Fixed(t) => t.arg(),
            FrozenOperand::PerRun(m) => crate::backend::TensorArg {
                ptr: crate::backend::DevicePtr::NULL,
                dtype: m.dtype,
                layout: Arc::new(Layout::contiguous(m.shape.clone())),
            },
        };
        let args = LaunchArgs {
            op: op.clone(),
            inputs: inputs.iter().map(arg).collect(),
            outputs: outputs.iter().map(arg).collect(),
            workspace: None,
            seq: 0,
            threads,
            prepacked: prepacked.cloned(),
        };
        let flops = op.flops(&in_metas, &out_metas);
        let bytes = op.bytes(&in_metas, &out_metas);
        Ok(ValidatedLaunch { kernel: kernel.clone(), args, flops, bytes })
    }

    /// Reserves `n` consecutive launch sequence numbers; returns the first.
    pub(crate) fn next_seqs(&self, n: u64) -> u64 {
        self.inner.seq.fetch_add(n, Ordering::Relaxed) + 1
    }

    /// The backend's index of logical device `device`.
    pub(crate) fn ordinal(&self, device: usize) -> Result<usize> {
        Ok(self.inner.device(device)?.ordinal)
    }

    /// Why `t` cannot be an operand of a launch on `device` (whose stream is `stream`):
    /// it belongs to another runtime (both are named by their labels, which may be the
    /// same, e.g. two `cpu:0`), or is on another device of this one; `None` when it can.
    fn misplaced(&self, t: &Tensor, device: usize, stream: &str) -> Option<String> {
        if !t.runtime_is(&self.inner) {
            let theirs = t
                .storage
                .rt
                .devices
                .get(t.device())
                .map_or_else(|| format!("device {}", t.device()), |d| d.label.to_string());
            return Some(format!(
                "belongs to another runtime (its {theirs}), not to this runtime's {stream}; a tensor is used only by \
                 the runtime that made it (copy it through the host)"
            ));
        }
        (t.device() != device).then(|| format!("is on {} but the stream is {stream}", self.device_label(t.device())))
    }

    /// True when `t` was allocated by this runtime (or a clone of it), or is a view of a
    /// host range lent to this runtime's device for a scoped run (`crate::lent`).
    pub(crate) fn owns(&self, t: &Tensor) -> bool {
        t.runtime_is(&self.inner)
    }
}

/// True when two tensors are the same view of one buffer (an in-place pair).
fn same_memory(a: &Tensor, b: &Tensor) -> bool {
    let (x, y) = (a.arg(), b.arg());
    a.shares_storage(b) && x.ptr == y.ptr && x.dtype == y.dtype && *x.layout == *y.layout
}

/// The outputs a launch was given must be as many, and each of the dtype and shape, that
/// the op infers.
fn check_output_metas(
    name: &'static str,
    expected: &[TensorMeta],
    given: impl ExactSizeIterator<Item = TensorMeta>,
) -> Result<()> {
    if given.len() != expected.len() {
        return Err(Error::invalid(name, format!("expects {} outputs, got {}", expected.len(), given.len())));
    }
    for (i, (g, m)) in given.zip(expected).enumerate() {
        if g != *m {
            return Err(Error::invalid(name, format!("output {i} must be {m}, got {g}")));
        }
    }
    Ok(())
}

/// A launch validated by `prepare`: its kernel, arguments and cost, and the temporaries
/// (dense copies of strided inputs) to drop once the launch is queued.
struct Prepared<'k> {
    kernel: &'k KernelInfo,
    args: LaunchArgs,
    flops: u64,
    bytes: u64,
    temps: Vec<Tensor>,
}

/// A compiled node's launch validated once by [`Runtime::freeze_launch`]: its kernel, the
/// launch template and its cost.
pub(crate) struct ValidatedLaunch {
    pub(crate) kernel: KernelInfo,
    pub(crate) args: LaunchArgs,
    pub(crate) flops: u64,
    pub(crate) bytes: u64,
}

/// An operand of a compiled node as [`Runtime::freeze_launch`] sees it.
pub(crate) enum FrozenOperand<'a> {
    /// The same tensor on every run (an arena slot, a constant or a view of one).
    Fixed(&'a Tensor),
    /// A tensor that changes from run to run (a graph input or output).
    PerRun(&'a TensorMeta),
}

impl FrozenOperand<'_> {
    pub(crate) fn meta(&self) -> TensorMeta {
        match self {
            FrozenOperand::Fixed(t) => t.meta(),
            FrozenOperand::PerRun(m) => (*m).clone(),
        }
    }
}
