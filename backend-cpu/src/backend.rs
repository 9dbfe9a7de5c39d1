//! [`CpuBackend`], its devices, and its implementation of the [`Backend`] trait: each
//! method looks up the device record (`device.rs`) and delegates to it, to the copies,
//! fills and host mappings of [`memory`](crate::memory), or to its launches (`launch.rs`);
//! streams and events are the [`stream`](crate::stream) queues and events each device
//! record holds.

use crate::config::CpuConfig;
use crate::device::{Device, Shared};
use crate::error::{CpuError, lock};
use crate::fault::{Fault, Faults};
use crate::stream::{CpuEvent, DEFAULT_STREAM, Job, UserStream};
use crate::{features, kernels, memory};
use runtime::{Backend, DeviceInfo, DevicePtr, EventId, KernelInfo, LaunchArgs, Result, StreamId, UnitInfo};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The CPU backend.
pub struct CpuBackend {
    devices: Vec<Device>,
    table: &'static kernels::Table,
    features: &'static features::CpuFeatures,
    faults: Arc<Faults>,
}

impl CpuBackend {
    /// The backend with `cfg.devices` logical devices over the host's cores.
    pub fn new(cfg: CpuConfig) -> std::result::Result<CpuBackend, CpuError> {
        if cfg.devices == 0 {
            return Err(CpuError::BadRequest("at least one CPU device is needed".into()));
        }
        Self::check_env()?;
        let features = features::select(cfg.isa)?;
        if features.forced {
            log::info!("cpu backend: ISA forced to {} (the CPU runs up to {})", features.isa, features.widest);
        }
        let threads = cfg.threads.unwrap_or(features.cores).max(1);
        let pin = match cfg.pin {
            Some(p) => Some(p),
            None => crate::affinity::pin_from_env()?,
        };
        let pins = crate::affinity::plan(pin, cfg.devices, threads);
        if pin == Some(true) && pins.is_none() {
            log::warn!("cpu backend: pinning was asked for, but the allowed CPUs cannot be read here");
        }
        let (table, faults) = (kernels::table(features), Arc::new(Faults::default()));
        let mut devices = Vec::with_capacity(cfg.devices);
        for d in 0..cfg.devices {
            let cpus = pins.as_ref().and_then(|p| p.get(d)).cloned();
            let shared = Shared { kernels: table, features, faults: faults.clone() };
            devices.push(Device::new(d, threads, cpus, shared)?);
        }
        log::debug!(
            "cpu backend: {} device(s), {threads} thread(s) each, ISA {}, workers {}",
            cfg.devices,
            features.isa,
            pins.as_ref().map_or("not pinned".to_string(), |p| format!("pinned to CPUs {p:?}"))
        );
        Ok(CpuBackend { devices, table, features, faults })
    }

    /// Reads every `NPURT_*` variable of the CPU backend (`NPURT_CPU_ISA`, `NPURT_CPU_PIN`,
    /// `NPURT_AMX`, `NPURT_GEMM`), whether or not `CpuConfig` overrides it: a value that is
    /// not UTF-8, is empty or is unknown is an error naming the variable, never ignored.
    pub fn check_env() -> std::result::Result<(), CpuError> {
        features::isa_from_env()?;
        crate::affinity::pin_from_env()?;
        features::amx_from_env()?;
        kernels::blas::packed_from_env()?;
        Ok(())
    }

    /// The CPU features detected at start-up with the instruction-set path in use (forced
    /// or detected), which chose the kernels.
    pub fn features(&self) -> &'static features::CpuFeatures {
        self.features
    }

    /// Device `d`'s record.
    pub(crate) fn dev(&self, d: usize) -> std::result::Result<&Device, CpuError> {
        self.devices.get(d).ok_or(CpuError::NoDevice(d))
    }

    /// Makes the `nth` launch (1-based, counted from this call, in submission order) of a
    /// kernel whose name starts with `kernel_prefix` fail with `fault` when it runs.
    /// Launches of a batch and of a compiled graph count one by one. For tests of failure
    /// handling; rules that have fired are forgotten.
    pub fn inject_fault(&self, kernel_prefix: &str, nth: u64, fault: Fault) {
        self.faults.arm(kernel_prefix, nth, fault);
    }
}

/// Devices of at most this many threads run a compiled graph on one stream by default
/// ([`Backend::graph_streams`]); above it, small nodes leave threads idle that a second
/// stream can use.
pub const ONE_STREAM_MAX_THREADS: usize = 4;

// SAFETY: every method validates its addresses against the device's allocation table
// and pins what queued work uses (contract rules M1, M2), launches refuse overlapping
// outputs (M3), unknown handles are errors (M4), kernel failures and panics are returned
// as values (M5), and every launch is checked against its op and kernel (M6, in
// `launch`). Unsynchronised access to one buffer from two streams is a data race on
// the user's side, exactly as on a GPU; the runtime's stream-aware pool never creates one.
unsafe impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn device_count(&self) -> usize {
        self.devices.len()
    }
    fn device_info(&self, device: usize) -> Result<DeviceInfo> {
        let dev = self.dev(device)?;
        let f = self.features;
        let hz = f.mhz * 1e6;
        let cores = dev.threads.min(f.cores) as f64;
        let bw = cores * 10e9;
        let src = format!("{cores} cores x {:.0} MHz x lanes x 2 FMA pipes x 2 flops; 10 GB/s per core assumed", f.mhz);
        let unit = |unit, lanes: f64, fma: f64| UnitInfo {
            unit,
            peak_flops: cores * hz * lanes * fma,
            peak_bytes_per_s: bw,
            source: src.clone(),
        };
        Ok(DeviceInfo {
            name: format!("cpu:{device} ({})", f.model),
            memory_bytes: f.mem_total,
            units: {
                let mut u = vec![
                    unit(f.matrix_unit(), f.lanes(), 4.0),
                    unit(f.vector_unit(), f.lanes(), 4.0),
                    unit(f.baseline_unit(), 4.0, 2.0),
                    unit(f.scalar_unit(), 1.0, 2.0),
                ];
                if f.avx512bf16 {
                    let (per_cycle, how) = f.bf16_flops_per_cycle();
                    u.push(UnitInfo {
                        unit: f.bf16_unit(),
                        peak_flops: cores * hz * per_cycle,
                        peak_bytes_per_s: bw,
                        source: format!("{cores} cores x {:.0} MHz x {how}", f.mhz),
                    });
                }
                u
            },
            host_shared: true,
            min_alignment: 16,
        })
    }
    fn memory_free(&self, _device: usize) -> Option<u64> {
        features::mem_available()
    }
    /// One stream on a device of up to [`ONE_STREAM_MAX_THREADS`] threads: there, every
    /// product of a BERT-sized graph already has an item per thread, and a second stream
    /// only adds hand-offs (MiniLM-L6 s32 on 2 threads: 20 % slower on two streams).
    fn graph_streams(&self, device: usize) -> Option<usize> {
        let threads = self.dev(device).ok()?.threads;
        (threads <= ONE_STREAM_MAX_THREADS).then_some(1)
    }

    fn slow_precision(&self, _device: usize, dtype: runtime::DType) -> Option<String> {
        self.features.slow_precision(dtype)
    }

    fn alloc(&self, device: usize, bytes: usize, align: usize) -> Result<DevicePtr> {
        let a = memory::alloc(&self.dev(device)?.table, bytes, align.max(16))?;
        Ok(DevicePtr(a))
    }
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        Ok(self.dev(device)?.table.free(ptr.0).map_err(CpuError::from)?)
    }
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        Ok(memory::copy_in(&self.dev(device)?.table, src, dst.0)?)
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        let dev = self.dev(device)?;
        if let Some(q) = dev.queue(stream)? {
            q.queue.synchronize()?;
        }
        Ok(memory::copy_out(&dev.table, src.0, dst)?)
    }
    fn copy_on_device(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        let dev = self.dev(device)?;
        match memory::copy_on_device(&dev.table, src.0, dst.0, bytes)? {
            Some(job) => dev.submit(stream, job),
            None => Ok(()),
        }
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        let dev = self.dev(device)?;
        match memory::fill(&dev.table, dst.0, value, bytes)? {
            Some(job) => dev.submit(stream, job),
            None => Ok(()),
        }
    }
    fn map_host(&self, device: usize, ptr: DevicePtr, len: usize, f: &mut dyn FnMut(&mut [u8])) -> Result<bool> {
        self.synchronize_device(device)?;
        memory::map(&self.dev(device)?.table, ptr.0, len, f)?;
        Ok(true)
    }

    fn default_stream(&self, _device: usize) -> StreamId {
        DEFAULT_STREAM
    }
    fn create_stream(&self, device: usize) -> Result<StreamId> {
        let dev = self.dev(device)?;
        let id = dev.next_id.fetch_add(1, Ordering::Relaxed);
        let s = UserStream::new(device, id)?;
        lock(&dev.streams).insert(id, Arc::new(s));
        Ok(StreamId(id))
    }
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        if stream == DEFAULT_STREAM {
            return Ok(());
        }
        let q = lock(&self.dev(device)?.streams).remove(&stream.0).ok_or(CpuError::NoStream(stream.0, device))?;
        let r = q.queue.synchronize();
        q.queue.shutdown();
        if let Err(e) = &r {
            log::warn!("destroying cpu:{device}/stream{}: unreported failure: {e}", stream.0);
        }
        Ok(())
    }
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        match self.dev(device)?.queue(stream)? {
            None => Ok(()),
            Some(q) => q.queue.synchronize(),
        }
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        let qs: Vec<Arc<UserStream>> = lock(&self.dev(device)?.streams).values().cloned().collect();
        let mut first = Ok(());
        for q in qs {
            if let Err(e) = q.queue.wait_all()
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    fn create_event(&self, device: usize) -> Result<EventId> {
        let dev = self.dev(device)?;
        let id = dev.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&dev.events).insert(id, Arc::new(CpuEvent::default()));
        Ok(EventId(id))
    }
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()> {
        lock(&self.dev(device)?.events).remove(&event.0).ok_or(CpuError::NoEvent(event.0, device))?;
        Ok(())
    }
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()> {
        let dev = self.dev(device)?;
        let ev = dev.event(event)?;
        // A record that is not queued leaves the event as it was: nothing may wait for a
        // generation that no stream will reach.
        match dev.queue(stream)? {
            None => ev.record_now(),
            Some(q) => ev.record_with(|generation| {
                let ev = ev.clone();
                let job: Job = Box::new(move || {
                    ev.complete(generation);
                    Ok(())
                });
                q.queue.submit(job).map(drop)
            })?,
        }
        Ok(())
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        let dev = self.dev(device)?;
        let ev = dev.event(event)?;
        let target = ev.target();
        dev.submit(
            stream,
            Box::new(move || {
                ev.wait_for(target);
                Ok(())
            }),
        )
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        Ok(self.dev(device)?.event(event)?.is_complete())
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        let ev = self.dev(device)?.event(event)?;
        ev.wait_for(ev.target());
        Ok(())
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        let dev = self.dev(device)?;
        let (s, e) = (dev.event(start)?, dev.event(end)?);
        match (s.time(), e.time()) {
            (Some(a), Some(b)) => Ok(b.saturating_duration_since(a)),
            (None, _) => Err(CpuError::EventNotReady(start.0).into()),
            (_, None) => Err(CpuError::EventNotReady(end.0).into()),
        }
    }

    fn kernels(&self) -> &[KernelInfo] {
        self.table.infos()
    }

    /// Packs a Linear's constant weight once for the kernel that will run it: a bf16 weight
    /// into the bf16 kernel's panels, an f32 weight into the f32 GEMM's panels. The packed
    /// bytes are stored in place of the weight when they are as many (`n` fills whole
    /// panels, as BERT-sized layers do); otherwise a bf16 weight's panels are kept beside it
    /// and an f32 weight is packed per call.
    fn prepack(
        &self,
        kernel: &KernelInfo,
        _op: &runtime::Op,
        inputs: &[runtime::TensorMeta],
        constants: &[Option<&[u8]>],
    ) -> Result<Option<runtime::Prepack>> {
        use runtime::DType;
        let (Some(Some(bytes)), Some(meta)) = (constants.get(1), inputs.get(1)) else { return Ok(None) };
        let linear = matches!(kernel.op, runtime::OpKind::Linear | runtime::OpKind::LinearGelu);
        if !linear || meta.shape.rank() != 2 {
            return Ok(None);
        }
        let (n, k) = (meta.shape.dims()[0], meta.shape.dims()[1]);
        let kname = kernel.name.clone();
        let backend_err = move |source| -> runtime::Error { CpuError::Kernel { kernel: kname.clone(), source }.into() };
        if kernel.unit == self.features.bf16_unit() && meta.dtype == DType::BF16 {
            let w: Vec<half::bf16> = bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]])).collect();
            let packed = kernels::gemm_bf16::PackedWeight::pack(&w, n, k).map_err(backend_err)?;
            drop(w);
            if packed.bytes() == bytes.len() {
                // Same size (n fills whole panels, k even): stored in place of the weight.
                let relayout = packed.words_slice().iter().flat_map(|x| x.to_le_bytes()).collect();
                log::debug!("prepacked a bf16 weight [{n}, {k}] in place");
                return Ok(Some(runtime::Prepack {
                    prepacked: runtime::Prepacked(Arc::new(kernels::gemm_bf16::PackedInPlace { n, k })),
                    relayout: vec![(1, relayout)],
                }));
            }
            log::debug!("prepacked a bf16 weight [{n}, {k}] ({} bytes beside it)", packed.bytes());
            return Ok(Some(runtime::Prepack::new(Arc::new(packed))));
        }
        let f32_fast = kernel.tier == runtime::Tier::HighPerformance && kernel.unit == self.features.matrix_unit();
        if f32_fast && meta.dtype == DType::F32 && kernels::blas::use_packed() {
            let layout = kernels::gemm_packed::PackedBLayout::for_cpu(self.features.isa, k, n);
            if layout.len() != n * k || bytes.len() != n * k * 4 {
                log::debug!("f32 weight [{n}, {k}] does not fill whole panels; packed per call");
                return Ok(None);
            }
            let w: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            let mut packed = vec![0f32; layout.len()];
            // The weight is [n, k] row-major: B = wᵀ has strides (1, k).
            kernels::gemm_packed::pack_b(&layout, &w, 1, k, &mut packed).map_err(backend_err)?;
            drop(w);
            let relayout = packed.iter().flat_map(|x| x.to_le_bytes()).collect();
            log::debug!("prepacked an f32 weight [{n}, {k}] in place");
            return Ok(Some(runtime::Prepack {
                prepacked: runtime::Prepacked(Arc::new(layout)),
                relayout: vec![(1, relayout)],
            }));
        }
        Ok(None)
    }

    /// A Linear's constant f32 weight quantised per output channel and packed for the int8
    /// kernels (`kernels::gemm_i8`), where this CPU has AMX-INT8 or AVX-512-VNNI and the
    /// node runs on the fast tier's f32 Linear. The f32 weight stays beside it (read by
    /// nothing once the node runs in int8). A weight holding ±inf or NaN is declined.
    fn prepack_int8(
        &self,
        _device: usize,
        kernel: &KernelInfo,
        _op: &runtime::Op,
        inputs: &[runtime::TensorMeta],
        constants: &[Option<&[u8]>],
    ) -> Result<Option<runtime::Prepack>> {
        use kernels::gemm_i8::{PackedI8, Path};
        let (Some(Some(bytes)), Some(meta), Some(x)) = (constants.get(1), inputs.get(1), inputs.first()) else {
            return Ok(None);
        };
        let f32_fast = kernel.tier == runtime::Tier::HighPerformance && kernel.unit == self.features.matrix_unit();
        let linear = matches!(kernel.op, runtime::OpKind::Linear | runtime::OpKind::LinearGelu);
        if !linear || !f32_fast || Path::best(self.features).is_none() {
            return Ok(None);
        }
        if meta.shape.rank() != 2 || meta.dtype != runtime::DType::F32 || x.dtype != runtime::DType::F32 {
            return Ok(None);
        }
        let (n, k) = (meta.shape.dims()[0], meta.shape.dims()[1]);
        if n.checked_mul(k).and_then(|e| e.checked_mul(4)) != Some(bytes.len()) {
            return Ok(None);
        }
        if k > kernels::gemm_i8::MAX_K {
            // Past the depth whose i32 sums stay exact: this Linear runs in f32.
            log::info!("int8: a weight [{n}, {k}] is deeper than {}; its Linear runs in f32", kernels::gemm_i8::MAX_K);
            return Ok(None);
        }
        let w: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let kname = kernel.name.clone();
        let packed = PackedI8::quantise(&w, n, k)
            .map_err(|source| -> runtime::Error { CpuError::Kernel { kernel: kname, source }.into() })?;
        let Some(packed) = packed else {
            log::info!("int8: a weight [{n}, {k}] holds inf or NaN; its Linear runs in f32");
            return Ok(None);
        };
        log::debug!("int8: weight [{n}, {k}] quantised per channel ({} bytes)", packed.bytes());
        Ok(Some(runtime::Prepack::new(Arc::new(packed))))
    }

    fn int8_missing(&self, _device: usize) -> Option<String> {
        kernels::gemm_i8::missing(self.features)
    }

    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        let dev = self.dev(device)?;
        let p = dev.prepare_launch(kernel, args, stream)?;
        dev.enqueue(stream, p)
    }

    /// Validates every launch in full and pins its fixed operands for the life of the
    /// plan; `launch_frozen` then checks only the per-run addresses.
    /// The CPU has no graph capture: `_capture` is ignored.
    fn freeze(
        &self,
        device: usize,
        launches: &[runtime::FrozenLaunch],
        _capture: runtime::GraphCapture,
    ) -> Result<Option<runtime::Frozen>> {
        self.dev(device)?.freeze_launches(launches)
    }

    fn launch_frozen(
        &self,
        device: usize,
        frozen: &runtime::Frozen,
        nodes: std::ops::Range<usize>,
        addrs: &[DevicePtr],
        first_seq: u64,
        stream: StreamId,
    ) -> Result<()> {
        self.dev(device)?.launch_frozen_at(frozen, nodes, addrs, first_seq, stream)
    }

    fn launch_batch(&self, device: usize, launches: Vec<(KernelInfo, LaunchArgs)>, stream: StreamId) -> Result<()> {
        self.dev(device)?.launch_batch_at(launches, stream)
    }

    /// Lends the ranges through the device's allocation table (`memory::lend`); they leave
    /// it once no launch pins them.
    fn with_host_ranges(
        &self,
        device: usize,
        ranges: &mut [runtime::HostRange<'_>],
        f: &mut dyn FnMut(&[DevicePtr]) -> Result<()>,
    ) -> Result<()> {
        let dev = self.dev(device)?;
        memory::lend(&dev.table, ranges, f)
    }
}
