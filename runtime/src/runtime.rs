//! The runtime: devices, pools, streams, tensors and eager execution over one backend.

use crate::backend::{Backend, DeviceInfo, LaunchArgs, StreamId};
use crate::config::{HwMapping, RuntimeConfig};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::kernel::{self, KernelInfo, KernelQuery};
use crate::op::{Op, TensorMeta};
use crate::pool::{Pool, PoolStats};
use crate::report::{ExecReport, Profile, Utilisation};
use crate::shape::{Layout, Shape};
use crate::stream::{self, Event, Stream, StreamInner, StreamScope};
use crate::tensor::{Storage, Tensor};
use ndarray::ArrayViewD;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) struct DeviceCtx {
    /// The backend's index of this device.
    pub(crate) ordinal: usize,
    pub(crate) info: DeviceInfo,
    pub(crate) pool: Pool,
    pub(crate) default_stream: StreamId,
    pub(crate) user_streams: AtomicUsize,
    /// `backend:index`.
    pub(crate) label: Arc<str>,
    /// `backend:index/default`.
    pub(crate) default_label: Arc<str>,
}

/// Where an execution goes: the device's default stream or a user stream.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) device: usize,
    pub(crate) id: StreamId,
    pub(crate) user: Option<&'a Stream>,
    /// Intra-op thread budget (0 = all).
    pub(crate) threads: usize,
    /// What the backend prepared for this node when its graph was compiled.
    pub(crate) prepacked: Option<&'a crate::backend::Prepacked>,
}

impl<'a> Target<'a> {
    pub(crate) fn on(stream: &'a Stream) -> Target<'a> {
        Target {
            device: stream.device(),
            id: stream.id(),
            user: stream.is_async().then_some(stream),
            threads: 0,
            prepacked: None,
        }
    }
}

impl Target<'_> {
    fn is_async(&self) -> bool {
        self.user.is_some()
    }
}

pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) config: RuntimeConfig,
    pub(crate) devices: Vec<DeviceCtx>,
    pub(crate) seq: AtomicU64,
    pub(crate) profile: Mutex<Profile>,
    /// Kernel indices per op kind in preference order for the configured mapping.
    pub(crate) preference: Vec<Vec<usize>>,
}

impl Inner {
    pub(crate) fn device(&self, d: usize) -> Result<&DeviceCtx> {
        self.devices.get(d).ok_or_else(|| {
            Error::Device(format!(
                "device {d} does not exist ({} has {} visible)",
                self.backend.name(),
                self.devices.len()
            ))
        })
    }
}

/// Memory figures of one device.
#[derive(Clone, Debug)]
pub struct MemoryInfo {
    /// Device memory size.
    pub total_bytes: u64,
    /// Free according to the system/driver, when known.
    pub system_free_bytes: Option<u64>,
    /// Bytes the pool holds from the system.
    pub pool_bytes: usize,
    /// Bytes in tensors.
    pub used_bytes: usize,
}

/// An operand of a compiled node as [`Runtime::freeze_launch`] sees it.
pub(crate) enum Operand<'a> {
    /// The same tensor on every run (an arena slot, a constant or a view of one).
    Fixed(&'a Tensor),
    /// A tensor that changes from run to run (a graph input or output).
    PerRun(&'a TensorMeta),
}

impl Operand<'_> {
    fn meta(&self) -> TensorMeta {
        match self {
            Operand::Fixed(t) => t.meta(),
            Operand::PerRun(m) => (*m).clone(),
        }
    }
}

/// One op with its operands, for [`Runtime::execute_batch`].
#[derive(Clone, Debug)]
pub struct Task {
    pub op: Op,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
}

/// Entry point: owns one backend's visible devices. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runtime({}, {} devices)", self.inner.backend.name(), self.inner.devices.len())
    }
}

impl Runtime {
    /// A runtime over `backend` with `config` (validated here).
    pub fn with_backend(backend: Arc<dyn Backend>, config: RuntimeConfig) -> Result<Runtime> {
        config.validate()?;
        let n = backend.device_count();
        let visible: Vec<usize> = match &config.devices {
            Some(list) => {
                for &d in list {
                    if d >= n {
                        return Err(Error::Config(format!(
                            "device {d} requested but {} has {n} devices",
                            backend.name()
                        )));
                    }
                }
                list.clone()
            }
            None => (0..n).collect(),
        };
        if visible.is_empty() {
            return Err(Error::Device(format!("{} has no devices", backend.name())));
        }
        let mut devices = Vec::new();
        for (logical, &ordinal) in visible.iter().enumerate() {
            let info = backend.device_info(ordinal)?;
            let mut pcfg = config.pool.clone();
            pcfg.reuse = pcfg.reuse && config.optimizations.memory_reuse;
            if pcfg.limit_bytes.is_none() && info.memory_bytes > 0 {
                pcfg.limit_bytes = Some(info.memory_bytes as usize);
            }
            let pool = Pool::new(backend.clone(), ordinal, pcfg, config.optimizations.memory_pool)?;
            devices.push(DeviceCtx {
                ordinal,
                default_stream: backend.default_stream(ordinal),
                info,
                pool,
                user_streams: AtomicUsize::new(0),
                label: format!("{}:{logical}", backend.name()).into(),
                default_label: format!("{}:{logical}/default", backend.name()).into(),
            });
        }
        log::info!(
            "npurt runtime on {} with {} device(s): {}",
            backend.name(),
            devices.len(),
            devices.iter().map(|d| d.info.name.as_str()).collect::<Vec<_>>().join(", ")
        );
        let mapping = if config.optimizations.hardware_mapping { config.hw_mapping } else { HwMapping::Auto };
        let preference: Vec<Vec<usize>> =
            crate::op::OpKind::ALL.iter().map(|&k| kernel::preference_order(backend.kernels(), k, mapping)).collect();
        Ok(Runtime {
            inner: Arc::new(Inner {
                backend,
                config,
                devices,
                seq: AtomicU64::new(0),
                profile: Mutex::new(Profile::default()),
                preference,
            }),
        })
    }

    pub fn backend_name(&self) -> &'static str {
        self.inner.backend.name()
    }
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }
    pub fn device_count(&self) -> usize {
        self.inner.devices.len()
    }
    pub fn device_info(&self, device: usize) -> Result<&DeviceInfo> {
        Ok(&self.inner.device(device)?.info)
    }
    /// `backend:index`, e.g. `cpu:0`.
    pub fn device_label(&self, device: usize) -> String {
        self.inner.devices.get(device).map_or_else(|| format!("?:{device}"), |d| d.label.to_string())
    }
    pub fn supports_zero_copy(&self, device: usize) -> bool {
        self.inner.devices.get(device).is_some_and(|d| d.info.host_shared)
    }
    pub fn kernels(&self) -> &[KernelInfo] {
        self.inner.backend.kernels()
    }

    // ---- memory ----

    pub fn pool_stats(&self, device: usize) -> Result<PoolStats> {
        Ok(self.inner.device(device)?.pool.stats())
    }
    /// Returns cached pool memory to the system; the bytes released.
    pub fn release_cached(&self, device: usize) -> Result<usize> {
        Ok(self.inner.device(device)?.pool.release_cached())
    }
    pub fn memory_info(&self, device: usize) -> Result<MemoryInfo> {
        let d = self.inner.device(device)?;
        let s = d.pool.stats();
        Ok(MemoryInfo {
            total_bytes: d.info.memory_bytes,
            system_free_bytes: self.inner.backend.memory_free(d.ordinal),
            pool_bytes: s.total_bytes,
            used_bytes: s.in_use_bytes,
        })
    }

    /// An uninitialised tensor on `device`.
    pub fn empty(&self, dtype: DType, shape: impl Into<Shape>, device: usize) -> Result<Tensor> {
        let scoped = stream::current_for(&self.inner).filter(|s| s.device() == device);
        match &scoped {
            Some(s) => self.empty_for(dtype, shape.into(), Target::on(s)),
            None => {
                let d = self.inner.device(device)?;
                self.empty_for(
                    dtype,
                    shape.into(),
                    Target { device, id: d.default_stream, user: None, threads: 0, prepacked: None },
                )
            }
        }
    }

    /// Allocates for use on `target`. A block may come back from work still queued on
    /// that stream, so the stream is recorded as a user of the new buffer: host access
    /// (copies, views) then waits for it first.
    pub(crate) fn empty_for(&self, dtype: DType, shape: Shape, target: Target<'_>) -> Result<Tensor> {
        let device = target.device;
        let d = self.inner.device(device)?;
        let bytes = shape.checked_bytes("tensor", dtype)?;
        let block = d.pool.alloc(bytes, target.id)?;
        let t = Tensor {
            storage: Arc::new(Storage {
                rt: self.inner.clone(),
                device,
                block,
                bytes: block.size,
                uses: Mutex::new(Vec::new()),
            }),
            dtype,
            layout: Arc::new(Layout::contiguous(shape)),
        };
        if target.user.is_some() {
            t.storage.mark_use(target);
        }
        Ok(t)
    }

    /// Allocates a buffer the host fills before any stream uses it: it never reuses a
    /// block still pending on a stream (that would make the host write race the stream).
    fn empty_host(&self, dtype: DType, shape: Shape, device: usize) -> Result<Tensor> {
        let d = self.inner.device(device)?;
        self.empty_for(dtype, shape, Target { device, id: d.default_stream, user: None, threads: 0, prepacked: None })
    }

    /// A zero-filled tensor.
    pub fn zeros(&self, dtype: DType, shape: impl Into<Shape>, device: usize) -> Result<Tensor> {
        let t = self.empty_host(dtype, shape.into(), device)?;
        if t.nbytes() > 0 {
            let d = self.inner.device(device)?;
            let s = d.default_stream;
            self.inner.backend.memset(d.ordinal, t.storage.block.ptr, 0, t.nbytes(), s)?;
        }
        Ok(t)
    }

    /// Copies a host array into a new tensor on `device`.
    pub fn from_ndarray<T: Element, D: ndarray::Dimension>(
        &self,
        a: &ndarray::ArrayBase<impl ndarray::Data<Elem = T>, D>,
        device: usize,
    ) -> Result<Tensor> {
        let t = self.empty_host(T::DTYPE, a.shape().to_vec().into(), device)?;
        let v: ArrayViewD<'_, T> = a.view().into_dyn();
        t.copy_from_ndarray(&v)?;
        Ok(t)
    }

    /// A tensor from a flat slice and a shape.
    pub fn from_slice<T: Element>(&self, data: &[T], shape: impl Into<Shape>, device: usize) -> Result<Tensor> {
        let shape = shape.into();
        shape.checked_bytes("tensor", T::DTYPE)?;
        let a = ndarray::ArrayViewD::from_shape(ndarray::IxDyn(shape.dims()), data)
            .map_err(|e| Error::invalid("Tensor", format!("{} values do not fill {shape}: {e}", data.len())))?;
        self.from_ndarray(&a, device)
    }

    /// Copies a tensor to another device (through the host when the backend needs to).
    pub fn to_device(&self, t: &Tensor, device: usize) -> Result<Tensor> {
        let src = if t.is_contiguous() { t.clone() } else { self.run(&Op::Copy, &[t])?.remove(0) };
        src.storage.settle()?;
        let out = self.empty_host(t.dtype, t.shape().clone(), device)?;
        let n = src.nbytes();
        if n > 0 {
            let mut host = vec![0u8; n];
            let sd = self.inner.device(src.device())?;
            self.inner.backend.copy_to_host(
                sd.ordinal,
                src.storage.block.ptr.offset(src.layout.offset * src.dtype.size()),
                &mut host,
                sd.default_stream,
            )?;
            let dd = self.inner.device(device)?;
            self.inner.backend.copy_to_device(dd.ordinal, &host, out.storage.block.ptr)?;
        }
        Ok(out)
    }

    // ---- streams and events ----

    /// The synchronous default stream of `device`.
    pub fn default_stream(&self, device: usize) -> Result<Stream> {
        let d = self.inner.device(device)?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                rt: self.inner.clone(),
                device,
                id: d.default_stream,
                user: false,
                label: d.default_label.clone(),
            }),
        })
    }

    /// A new asynchronous user stream on `device` (at most `max_streams` alive).
    pub fn stream(&self, device: usize) -> Result<Stream> {
        let d = self.inner.device(device)?;
        let max = self.inner.config.max_streams;
        if d.user_streams.fetch_add(1, Ordering::Relaxed) >= max {
            d.user_streams.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Device(format!("{}: max_streams ({max}) user streams already exist", d.label)));
        }
        let id = match self.inner.backend.create_stream(d.ordinal) {
            Ok(id) => id,
            Err(e) => {
                d.user_streams.fetch_sub(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        Ok(Stream {
            inner: Arc::new(StreamInner {
                rt: self.inner.clone(),
                device,
                id,
                user: true,
                label: format!("{}/stream{}", d.label, id.0).into(),
            }),
        })
    }

    /// Makes `stream` this thread's current stream for this runtime until the guard drops.
    pub fn stream_scope(&self, stream: &Stream) -> StreamScope {
        StreamScope::enter(stream)
    }

    /// The scoped current stream for `device`, or its default stream.
    pub fn current_stream(&self, device: usize) -> Result<Stream> {
        match stream::current_for(&self.inner).filter(|s| s.device() == device) {
            Some(s) => Ok(s),
            None => self.default_stream(device),
        }
    }

    pub fn event(&self, device: usize) -> Result<Event> {
        Event::new_on(&self.inner, device)
    }

    /// Waits for all work on `device`.
    pub fn synchronize(&self, device: usize) -> Result<()> {
        let d = self.inner.device(device)?;
        self.inner.backend.synchronize_device(d.ordinal).map_err(|e| self.relabel(device, e))
    }

    /// Rewrites a backend's stream label (`backend:ordinal/...`) to the runtime's
    /// (`backend:logical/...`) in asynchronous errors.
    pub(crate) fn relabel(&self, device: usize, e: Error) -> Error {
        relabel_async(&self.inner, device, e)
    }

    /// Waits for all work on every device.
    pub fn synchronize_all(&self) -> Result<()> {
        for d in 0..self.device_count() {
            self.synchronize(d)?;
        }
        Ok(())
    }

    // ---- execution ----

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
        let (kernel, args, flops, bytes, temps) = self.prepare(target, op, inputs, outputs)?;
        let dev = &self.inner.devices[target.device];
        let seq = args.seq;
        let start = Instant::now();
        self.inner.backend.launch(dev.ordinal, &kernel, args, target.id)?;
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
            implementation: kernel.name,
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
            let (kernel, args, flops, bytes, temps) = self.prepare(target, &t.op, &ins, &outs)?;
            held.extend(temps);
            reports.push(ExecReport {
                op: t.op.name(),
                implementation: kernel.name,
                tier: kernel.tier,
                device: dev.label.clone(),
                unit: kernel.unit,
                stream: self.stream_label(target),
                seq: args.seq,
                elapsed: None,
                flops,
                bytes,
            });
            launches.push((kernel, args));
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
        self.select_for(op, inputs, &outputs)
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
        self.inner.backend.prepack(&kernel, op, inputs, constants)
    }

    fn select_for(&self, op: &Op, inputs: &[TensorMeta], outputs: &[TensorMeta]) -> Result<KernelInfo> {
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
        .copied()
    }

    fn prepare(
        &self,
        target: Target<'_>,
        op: &Op,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
    ) -> Result<(KernelInfo, LaunchArgs, u64, u64, Vec<Tensor>)> {
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
        for (i, t) in inputs.iter().enumerate() {
            if !Arc::ptr_eq(&t.storage.rt, &self.inner) || t.device() != dev {
                return Err(Error::invalid(
                    name,
                    format!(
                        "input {i} ({}) is on {} but the stream is {stream}",
                        t.meta(),
                        self.device_label(t.device())
                    ),
                ));
            }
        }
        for (i, t) in outputs.iter().enumerate() {
            if !Arc::ptr_eq(&t.storage.rt, &self.inner) || t.device() != dev {
                return Err(Error::invalid(
                    name,
                    format!(
                        "output {i} ({}) is on {} but the stream is {stream}",
                        t.meta(),
                        self.device_label(t.device())
                    ),
                ));
            }
        }
        // Aliasing: an output may not overlap an input or another output.
        for (i, o) in outputs.iter().enumerate() {
            let overlaps = |t: &Tensor| t.overlaps(o);
            if let Some(j) = inputs.iter().position(|t| overlaps(t)) {
                return Err(Error::invalid(
                    name,
                    format!(
                        "output {i} ({}) overlaps input {j} ({}); in-place execution is not supported",
                        o.meta(),
                        inputs[j].meta()
                    ),
                ));
            }
            if let Some(j) = outputs.iter().enumerate().position(|(j, t)| j != i && overlaps(t)) {
                return Err(Error::invalid(name, format!("outputs {i} and {j} overlap")));
            }
        }
        // Kernels other than Copy read dense operands: materialise strided views first.
        let mut owned = Vec::new();
        if !matches!(op, Op::Copy) {
            for t in inputs {
                if !t.is_contiguous() {
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
            .map(|(i, t)| match owned.get(i) {
                Some(Some(c)) => {
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
        Ok((kernel, args, flops, bytes, owned.into_iter().flatten().collect()))
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
        inputs: &[Operand<'_>],
        outputs: &[Operand<'_>],
        threads: usize,
        prepacked: Option<&crate::backend::Prepacked>,
    ) -> Result<(KernelInfo, LaunchArgs, u64, u64)> {
        let name = op.name();
        let in_metas: Vec<TensorMeta> = inputs.iter().map(Operand::meta).collect();
        let out_metas = op.infer(&in_metas)?;
        check_output_metas(name, &out_metas, outputs.iter().map(Operand::meta))?;
        let fixed = inputs.iter().chain(outputs).filter_map(|o| match o {
            Operand::Fixed(t) => Some(*t),
            Operand::PerRun(_) => None,
        });
        for t in fixed {
            if !Arc::ptr_eq(&t.storage.rt, &self.inner) || t.device() != device {
                return Err(Error::invalid(name, format!("operand {} is not on device {device}", t.meta())));
            }
            if !t.is_contiguous() {
                return Err(Error::invalid(name, format!("operand {} is not contiguous", t.meta())));
            }
        }
        for (i, o) in outputs.iter().enumerate() {
            let Operand::Fixed(o) = o else { continue };
            let overlaps = |x: &Operand<'_>| matches!(x, Operand::Fixed(t) if t.overlaps(o));
            if inputs.iter().any(overlaps) || outputs.iter().enumerate().any(|(j, x)| j != i && overlaps(x)) {
                return Err(Error::invalid(name, format!("output {i} ({}) overlaps another operand", o.meta())));
            }
        }
        let kernel = self.select_for(op, &in_metas, &out_metas)?;
        let arg = |o: &Operand<'_>| match o {
            Operand::Fixed(t) => t.arg(),
            Operand::PerRun(m) => crate::backend::TensorArg {
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
        Ok((kernel, args, flops, bytes))
    }

    /// Reserves `n` consecutive launch sequence numbers; returns the first.
    pub(crate) fn next_seqs(&self, n: u64) -> u64 {
        self.inner.seq.fetch_add(n, Ordering::Relaxed) + 1
    }

    /// Adds timed work to the utilisation counters of `device`.
    pub(crate) fn record_busy(
        &self,
        device: usize,
        units: &[(crate::kernel::Unit, u64, u64, u64)],
        busy: std::time::Duration,
        launches: u64,
    ) {
        if launches == 0 {
            return;
        }
        let mut prof = self.inner.profile.lock().unwrap_or_else(|p| p.into_inner());
        for &(unit, n, flops, bytes) in units {
            let e = prof.units.entry((device, unit.label)).or_insert((unit, Default::default()));
            e.1.busy += busy.mul_f64(n as f64 / launches as f64);
            e.1.flops += flops;
            e.1.bytes += bytes;
            e.1.launches += n;
        }
    }

    /// Per-unit utilisation from the timed executions so far, against each unit's peak.
    pub fn utilisation(&self) -> Vec<Utilisation> {
        let prof = self.inner.profile.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for ((device, _label), (unit, totals)) in prof.units.iter() {
            let Some(d) = self.inner.devices.get(*device) else {
                continue;
            };
            let peak = d.info.units.iter().find(|u| u.unit.label == unit.label);
            let secs = totals.busy.as_secs_f64();
            let (compute, bandwidth, method) = match (peak, secs > 0.0) {
                (Some(p), true) => (
                    (totals.flops as f64 / secs / p.peak_flops).min(1.0),
                    (totals.bytes as f64 / secs / p.peak_bytes_per_s).min(1.0),
                    format!("op FLOP/byte counts over measured time vs nominal peak ({})", p.source),
                ),
                _ => (0.0, 0.0, "no peak known for this unit".to_string()),
            };
            out.push(Utilisation {
                device: d.label.to_string(),
                unit: *unit,
                totals: totals.clone(),
                compute,
                bandwidth,
                method,
            });
        }
        out
    }

    /// Clears the utilisation counters.
    pub fn reset_profile(&self) {
        *self.inner.profile.lock().unwrap_or_else(|p| p.into_inner()) = Profile::default();
    }
}

pub(crate) fn relabel_async(inner: &Inner, device: usize, e: Error) -> Error {
    match (e, inner.devices.get(device)) {
        (Error::Async { op, stream, seq, msg }, Some(d)) => {
            let backend_prefix = format!("{}:{}/", inner.backend.name(), d.ordinal);
            let stream = match stream.strip_prefix(&backend_prefix) {
                Some(rest) => format!("{}/{rest}", d.label),
                None => stream,
            };
            Error::Async { op, stream, seq, msg }
        }
        (e, _) => e,
    }
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
