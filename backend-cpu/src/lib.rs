//! The host CPU backend of npurt.
//!
//! Each logical device owns aligned host allocations (checked by an allocation table),
//! a synchronous default stream that runs kernels on the calling thread, user streams
//! served in order by one worker thread each, events, and a rayon pool sized by the
//! configured thread cap for intra-op parallelism. Kernels come in three tiers; see
//! [`kernels`].

pub mod error;
pub mod features;
pub mod kernels;
pub mod memory;
pub mod stream;

pub use error::CpuError;

use kernels::common::{Ctx, In, Out};
use memory::AllocTable;
use runtime::{Backend, DeviceInfo, DevicePtr, EventId, KernelInfo, LaunchArgs, Result, StreamId, UnitInfo};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stream::{CpuEvent, Job, WorkQueue};

/// The id of every device's default (synchronous) stream.
pub const DEFAULT_STREAM: StreamId = StreamId(0);

/// Output elements below which a default-stream launch runs inline without entering the
/// device's thread pool (the hand-off costs more than the work).
const INLINE_MAX_BYTES: u64 = 1 << 18;

/// How the CPU backend presents the host.
#[derive(Clone, Debug)]
pub struct CpuConfig {
    /// Logical devices (they share the host's cores and memory).
    pub devices: usize,
    /// Worker threads per device for intra-op parallelism (`None` = all cores).
    pub threads: Option<usize>,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig { devices: 1, threads: None }
    }
}

/// A user stream: its queue and a one-thread pool for launches whose thread budget is 1
/// (so concurrent graph nodes do not oversubscribe the cores).
struct UserStream {
    queue: WorkQueue,
    solo: Arc<rayon::ThreadPool>,
}

struct CpuDevice {
    table: Arc<AllocTable>,
    streams: Mutex<HashMap<u64, Arc<UserStream>>>,
    events: Mutex<HashMap<u64, Arc<CpuEvent>>>,
    next_id: AtomicU64,
    pool: Arc<rayon::ThreadPool>,
    threads: usize,
}

/// The CPU backend.
pub struct CpuBackend {
    devices: Vec<CpuDevice>,
    table: &'static kernels::Table,
    features: &'static features::CpuFeatures,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl CpuBackend {
    pub fn new(cfg: CpuConfig) -> std::result::Result<CpuBackend, CpuError> {
        if cfg.devices == 0 {
            return Err(CpuError::BadRequest("at least one CPU device is needed".into()));
        }
        let features = features::get();
        let threads = cfg.threads.unwrap_or(features.cores).max(1);
        let mut devices = Vec::with_capacity(cfg.devices);
        for d in 0..cfg.devices {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(move |i| format!("npurt-cpu{d}-w{i}"))
                .build()
                .map_err(|e| CpuError::BadRequest(format!("thread pool: {e}")))?;
            devices.push(CpuDevice {
                table: Arc::new(AllocTable::new(d)),
                streams: Mutex::new(HashMap::new()),
                events: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                pool: Arc::new(pool),
                threads,
            });
        }
        log::debug!("cpu backend: {} device(s), {threads} thread(s) each, ISA {:?}", cfg.devices, features.isa);
        Ok(CpuBackend { devices, table: kernels::table(features), features })
    }

    pub fn features(&self) -> &'static features::CpuFeatures {
        self.features
    }

    fn dev(&self, d: usize) -> std::result::Result<&CpuDevice, CpuError> {
        self.devices.get(d).ok_or(CpuError::NoDevice(d))
    }

    fn queue(&self, d: usize, s: StreamId) -> std::result::Result<Option<Arc<UserStream>>, CpuError> {
        if s == DEFAULT_STREAM {
            return Ok(None);
        }
        let dev = self.dev(d)?;
        lock(&dev.streams).get(&s.0).cloned().map(Some).ok_or(CpuError::NoStream(s.0, d))
    }

    fn event(&self, d: usize, e: EventId) -> std::result::Result<Arc<CpuEvent>, CpuError> {
        lock(&self.dev(d)?.events).get(&e.0).cloned().ok_or(CpuError::NoEvent(e.0, d))
    }

    /// Runs `job` now (default stream) or queues it (user stream).
    fn submit(&self, d: usize, s: StreamId, job: Job) -> Result<()> {
        match self.queue(d, s)? {
            None => job(),
            Some(q) => {
                q.queue.submit(job)?;
                Ok(())
            }
        }
    }

    /// Byte range of an operand inside its allocation.
    fn range(arg: &runtime::TensorArg) -> (u64, usize) {
        let es = arg.dtype.size();
        let start = arg.ptr.0 + (arg.layout.offset * es) as u64;
        let len = if arg.layout.numel() == 0 { 0 } else { (arg.layout.span() - arg.layout.offset) * es };
        (start, len)
    }
}

fn run_kernel(f: kernels::KernelFn, args: &LaunchArgs, ctx: &Ctx) -> std::result::Result<(), String> {
    let mut ins = Vec::with_capacity(args.inputs.len());
    let mut outs = Vec::with_capacity(args.outputs.len());
    let range = |_, a: &runtime::TensorArg| CpuBackend::range(a);
    run_kernel_at(f, &args.op, &args.inputs, &args.outputs, range, ctx, &mut ins, &mut outs)
}

/// Runs `f` on operands whose byte ranges `range(operand index, operand)` gives (inputs
/// first, then outputs). Every range must have been validated and pinned by the caller.
/// `ins` and `outs` are scratch space (empty before and after), so that a run of many
/// launches can reuse one allocation.
#[allow(clippy::too_many_arguments)]
fn run_kernel_at<'a>(
    f: kernels::KernelFn,
    op: &runtime::Op,
    inputs: &'a [runtime::TensorArg],
    outputs: &'a [runtime::TensorArg],
    range: impl Fn(usize, &runtime::TensorArg) -> (u64, usize),
    ctx: &Ctx,
    ins: &mut Vec<In<'a>>,
    outs: &mut Vec<Out<'a>>,
) -> std::result::Result<(), String> {
    let n_in = inputs.len();
    ins.extend(inputs.iter().enumerate().map(|(i, a)| {
        let (start, len) = range(i, a);
        In {
            dtype: a.dtype,
            dims: a.layout.dims(),
            strides: &a.layout.strides,
            bytes: if len == 0 {
                // An empty slice with 8-byte alignment, so typed views of it work.
                bytemuck::cast_slice::<u64, u8>(&[])
            } else {
                // `launch` (or `freeze` and `launch_frozen`) checked that no output overlaps.
                // SAFETY: that check also put `start .. start + len` inside a live allocation
                // of this device, pinned until this job finishes; the bytes are only read.
                unsafe { std::slice::from_raw_parts(start as *const u8, len) }
            },
        }
    }));
    outs.extend(outputs.iter().enumerate().map(|(i, a)| {
        let (start, len) = range(n_in + i, a);
        Out {
            dtype: a.dtype,
            dims: a.layout.dims(),
            bytes: if len == 0 {
                bytemuck::cast_slice_mut::<u64, u8>(&mut [])
            } else {
                // SAFETY: as for inputs, plus: outputs overlap neither each other nor
                // any input (checked in `launch`), so this is the only reference.
                unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) }
            },
        }
    }));
    let r = if outs.iter().any(|o| o.bytes.len() < o.numel() * o.dtype.size()) {
        Err("output operand is not contiguous".into())
    } else {
        f(op, ins, outs, ctx)
    };
    // No view of the operands outlives the launch.
    ins.clear();
    outs.clear();
    r
}

fn overlaps(a: (u64, usize), b: (u64, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 as u64 && b.0 < a.0 + a.1 as u64
}

// SAFETY: every method validates its addresses against the device's allocation table
// and pins what queued work uses (contract rules M1, M2), launches refuse overlapping
// outputs (M3), unknown handles are errors (M4), and kernel failures are returned as
// values (M5). Unsynchronised access to one buffer from two streams is a data race on
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

    fn alloc(&self, device: usize, bytes: usize, align: usize) -> Result<DevicePtr> {
        let a = self.dev(device)?.table.alloc(bytes, align.max(16))?;
        Ok(DevicePtr(a))
    }
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        Ok(self.dev(device)?.table.free(ptr.0)?)
    }
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let _pins = self.dev(device)?.table.pin(&[(dst.0, src.len())])?;
        // SAFETY: the destination range was validated and pinned just above; `src` is a
        // distinct host slice (device memory is never handed out as a Rust reference
        // outside a kernel or `map_host` call).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len()) };
        Ok(())
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        if let Some(q) = self.queue(device, stream)? {
            q.queue.synchronize()?;
        }
        if dst.is_empty() {
            return Ok(());
        }
        let _pins = self.dev(device)?.table.pin(&[(src.0, dst.len())])?;
        // SAFETY: the source range was validated and pinned just above; `dst` is a
        // distinct, exclusively borrowed host slice.
        unsafe { std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
    fn copy_on_device(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        if overlaps((src.0, bytes), (dst.0, bytes)) {
            return Err(CpuError::BadRequest("device copy ranges overlap".into()).into());
        }
        let pins = self.dev(device)?.table.pin(&[(src.0, bytes), (dst.0, bytes)])?;
        self.submit(
            device,
            stream,
            Box::new(move || {
                let _pins = pins;
                // SAFETY: both ranges were validated and pinned when the copy was queued
                // and they do not overlap (checked above).
                unsafe { std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.0 as *mut u8, bytes) };
                Ok(())
            }),
        )
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let pins = self.dev(device)?.table.pin(&[(dst.0, bytes)])?;
        self.submit(
            device,
            stream,
            Box::new(move || {
                let _pins = pins;
                // SAFETY: the range was validated and pinned when the fill was queued.
                unsafe { std::ptr::write_bytes(dst.0 as *mut u8, value, bytes) };
                Ok(())
            }),
        )
    }
    fn map_host(&self, device: usize, ptr: DevicePtr, len: usize, f: &mut dyn FnMut(&mut [u8])) -> Result<bool> {
        self.synchronize_device(device)?;
        if len == 0 {
            f(&mut []);
            return Ok(true);
        }
        let _pins = self.dev(device)?.table.pin(&[(ptr.0, len)])?;
        // SAFETY: the range was validated and is pinned for the duration of `f`; device
        // work queued before this call has finished (synchronised above).
        let bytes = unsafe { std::slice::from_raw_parts_mut(ptr.0 as *mut u8, len) };
        f(bytes);
        Ok(true)
    }

    fn default_stream(&self, _device: usize) -> StreamId {
        DEFAULT_STREAM
    }
    fn create_stream(&self, device: usize) -> Result<StreamId> {
        let dev = self.dev(device)?;
        let id = dev.next_id.fetch_add(1, Ordering::Relaxed);
        let queue = WorkQueue::new(format!("cpu:{device}/stream{id}"))?;
        let solo = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(move |_| format!("npurt-cpu{device}-s{id}"))
            .build()
            .map_err(|e| CpuError::BadRequest(format!("thread pool: {e}")))?;
        lock(&dev.streams).insert(id, Arc::new(UserStream { queue, solo: Arc::new(solo) }));
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
        match self.queue(device, stream)? {
            None => Ok(()),
            Some(q) => q.queue.synchronize(),
        }
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        let qs: Vec<Arc<UserStream>> = lock(&self.dev(device)?.streams).values().cloned().collect();
        let mut first = Ok(());
        for q in qs {
            if let Err(e) = q.queue.synchronize() {
                if first.is_ok() {
                    first = Err(e);
                }
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
        let ev = self.event(device, event)?;
        let generation = ev.begin_record();
        self.submit(
            device,
            stream,
            Box::new(move || {
                ev.complete(generation);
                Ok(())
            }),
        )
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        let ev = self.event(device, event)?;
        let target = ev.target();
        self.submit(
            device,
            stream,
            Box::new(move || {
                ev.wait_for(target);
                Ok(())
            }),
        )
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        Ok(self.event(device, event)?.is_complete())
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        let ev = self.event(device, event)?;
        ev.wait_for(ev.target());
        Ok(())
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        let (s, e) = (self.event(device, start)?, self.event(device, end)?);
        match (s.time(), e.time()) {
            (Some(a), Some(b)) => Ok(b.saturating_duration_since(a)),
            (None, _) => Err(CpuError::EventNotReady(start.0).into()),
            (_, None) => Err(CpuError::EventNotReady(end.0).into()),
        }
    }

    fn kernels(&self) -> &[KernelInfo] {
        &self.table.infos
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
        if kernel.op != runtime::OpKind::Linear || meta.shape.rank() != 2 {
            return Ok(None);
        }
        let (n, k) = (meta.shape.dims()[0], meta.shape.dims()[1]);
        let backend_err = |msg: String| runtime::Error::Backend { backend: "cpu", msg };
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
            let layout = kernels::gemm_packed::PackedBLayout::new(k, n);
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

    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        let p = self.prepare_launch(device, kernel, args, stream)?;
        self.enqueue(device, stream, p)
    }

    /// Validates every launch's fixed operands and pins their allocations for the life of
    /// the plan; `launch_frozen` then checks only the per-run addresses.
    fn freeze(&self, device: usize, launches: &[runtime::FrozenLaunch]) -> Result<Option<runtime::Frozen>> {
        let dev = self.dev(device)?;
        let bad = |msg: String| -> runtime::Error { CpuError::BadRequest(msg).into() };
        let mut nodes = Vec::with_capacity(launches.len());
        let mut fixed: Vec<(u64, usize)> = Vec::new();
        let mut extent: Vec<usize> = Vec::new();
        for l in launches {
            let (kernel, args) = (&l.kernel, &l.args);
            let f = self.kernel_fn(kernel)?;
            let n_in = args.inputs.len();
            let n_ops = n_in + args.outputs.len();
            let ranges: Vec<(u64, usize)> = args.inputs.iter().chain(&args.outputs).map(Self::range).collect();
            let mut patched = vec![false; n_ops];
            for &(op, k) in &l.patches {
                if op >= n_ops || patched[op] {
                    return Err(bad(format!("{}: bad patch of operand {op}", kernel.name)));
                }
                patched[op] = true;
                // A patched operand's range is relative to its per-run address.
                let a = if op < n_in { &args.inputs[op] } else { &args.outputs[op - n_in] };
                if a.ptr != DevicePtr::NULL {
                    return Err(bad(format!("{}: patched operand {op} has an address", kernel.name)));
                }
                let (off, len) = ranges[op];
                let end = usize::try_from(off)
                    .ok()
                    .and_then(|o| o.checked_add(len))
                    .ok_or_else(|| bad(format!("{}: operand {op} is out of range", kernel.name)))?;
                if extent.len() <= k {
                    extent.resize(k + 1, 0);
                }
                extent[k] = extent[k].max(end);
            }
            // Fixed operands: outputs overlap no other fixed operand (patched ones are
            // checked per run), and all lie in live allocations (pinned below).
            for (i, o) in ranges.iter().enumerate().skip(n_in) {
                if !patched[i] && ranges[..i].iter().enumerate().any(|(j, r)| !patched[j] && overlaps(*o, *r)) {
                    return Err(bad(format!("{}: output {} overlaps another operand", kernel.name, i - n_in)));
                }
            }
            fixed.extend(ranges.iter().enumerate().filter(|(i, _)| !patched[*i]).map(|(_, r)| *r));
            let out_bytes: u64 = ranges[n_in..].iter().map(|o| o.1 as u64).sum();
            let (inline, threads) = self.placement(dev, &args.op, args.threads, out_bytes);
            nodes.push(FrozenNode {
                f,
                kernel: kernel.name,
                args: args.clone(),
                ranges,
                patches: l.patches.clone(),
                inline,
                ctx: Ctx { threads, features: self.features, prepacked: args.prepacked.clone() },
            });
        }
        let pins = dev.table.pin(&fixed)?;
        Ok(Some(runtime::Frozen(Arc::new(CpuFrozen { device, table: dev.table.clone(), nodes, extent, _pins: pins }))))
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
        let dev = self.dev(device)?;
        let bad = |msg: &str| -> runtime::Error { CpuError::BadRequest(msg.into()).into() };
        let fz = frozen.0.clone().downcast::<CpuFrozen>().map_err(|_| bad("not a frozen plan of the CPU backend"))?;
        if fz.device != device || !Arc::ptr_eq(&fz.table, &dev.table) {
            return Err(bad("the frozen plan belongs to another device"));
        }
        if nodes.start > nodes.end || nodes.end > fz.nodes.len() || addrs.len() < fz.extent.len() {
            return Err(bad("frozen launch: node range or address table does not fit the plan"));
        }
        // Per-run addresses: each covers every operand patched from it (slots beyond
        // `extent` patch nothing).
        let slots: Vec<(u64, usize)> = addrs.iter().zip(&fz.extent).map(|(a, &e)| (a.0, e)).collect();
        let pins = dev.table.pin(&slots)?;
        // Outputs of nodes with patched operands must not overlap their other operands.
        let mut ranges = Vec::new();
        for n in &fz.nodes[nodes.clone()] {
            if n.patches.is_empty() {
                continue;
            }
            n.ranges_into(addrs, &mut ranges);
            let n_in = n.args.inputs.len();
            for (i, o) in ranges.iter().enumerate().skip(n_in) {
                if ranges.iter().enumerate().any(|(j, r)| j != i && overlaps(*o, *r)) {
                    return Err(CpuError::BadRequest(format!(
                        "{}: output {} overlaps another operand",
                        n.kernel,
                        i - n_in
                    ))
                    .into());
                }
            }
        }
        match self.queue(device, stream)? {
            None => {
                let r = fz.run(nodes, addrs, first_seq, stream, &dev.pool, None);
                drop(pins);
                r
            }
            Some(q) => {
                let addrs = addrs.to_vec();
                let pool = dev.pool.clone();
                let solo = q.solo.clone();
                q.queue.submit(Box::new(move || {
                    let _pins = pins;
                    fz.run(nodes, &addrs, first_seq, stream, &pool, Some(&solo))
                }))?;
                Ok(())
            }
        }
    }

    fn launch_batch(&self, device: usize, launches: Vec<(KernelInfo, LaunchArgs)>, stream: StreamId) -> Result<()> {
        let mut jobs = Vec::with_capacity(launches.len());
        for (k, a) in launches {
            jobs.push(self.prepare_launch(device, &k, a, stream)?);
        }
        // One submission for the whole batch: the worker runs the jobs back to back and
        // reports the first failure.
        self.submit(
            device,
            stream,
            Box::new(move || {
                let mut first = Ok(());
                for j in jobs {
                    if let Err(e) = j.run() {
                        if first.is_ok() {
                            first = Err(e);
                        }
                    }
                }
                first
            }),
        )
    }
}

/// A validated launch, ready to run on the calling thread or to be queued.
struct Prepared {
    f: kernels::KernelFn,
    args: LaunchArgs,
    ctx: Ctx,
    kernel: &'static str,
    device: usize,
    stream: StreamId,
    pool: Option<Arc<rayon::ThreadPool>>,
    _pins: memory::Pins,
}

impl Prepared {
    fn run(self) -> Result<()> {
        let r = match &self.pool {
            Some(p) => p.install(|| run_kernel(self.f, &self.args, &self.ctx)),
            None => run_kernel(self.f, &self.args, &self.ctx),
        };
        r.map_err(|msg| kernel_error(self.kernel, &self.args.op, self.args.seq, self.device, self.stream, msg))
    }
}

/// The error of a failed kernel: returned directly on the default stream, reported at
/// the next synchronisation on a user stream.
fn kernel_error(
    kernel: &str,
    op: &runtime::Op,
    seq: u64,
    device: usize,
    stream: StreamId,
    msg: String,
) -> runtime::Error {
    let msg = format!("{kernel}: {msg}");
    let op = op.name();
    if stream == DEFAULT_STREAM {
        runtime::Error::Backend { backend: "cpu", msg: format!("{op} (submission #{seq}): {msg}") }
    } else {
        runtime::Error::Async { op: op.to_string(), stream: format!("cpu:{device}/stream{}", stream.0), seq, msg }
    }
}

/// A compiled graph's launches, validated once by `freeze`.
struct CpuFrozen {
    device: usize,
    table: Arc<AllocTable>,
    nodes: Vec<FrozenNode>,
    /// Bytes from each per-run address that the operands patched with it reach.
    extent: Vec<usize>,
    /// The allocations of the fixed operands, pinned for as long as the plan lives.
    _pins: memory::Pins,
}

struct FrozenNode {
    f: kernels::KernelFn,
    kernel: &'static str,
    args: LaunchArgs,
    /// Operand byte ranges (inputs, then outputs); a patched operand's start is its
    /// offset from the per-run address.
    ranges: Vec<(u64, usize)>,
    /// `(operand, address slot)`.
    patches: Vec<(usize, usize)>,
    inline: bool,
    ctx: Ctx,
}

impl FrozenNode {
    /// The operand ranges of this node for per-run addresses `addrs` (in `out`).
    fn ranges_into(&self, addrs: &[DevicePtr], out: &mut Vec<(u64, usize)>) {
        out.clear();
        out.extend_from_slice(&self.ranges);
        for &(op, k) in &self.patches {
            // No overflow: `launch_frozen` pinned `addrs[k] .. addrs[k] + extent[k]`, which
            // covers `offset + len` of every operand patched from slot k.
            out[op].0 += addrs[k].0;
        }
    }
}

impl CpuFrozen {
    /// Runs `nodes` in order on the calling thread; stops at the first failure.
    fn run(
        &self,
        nodes: std::ops::Range<usize>,
        addrs: &[DevicePtr],
        first_seq: u64,
        stream: StreamId,
        pool: &rayon::ThreadPool,
        solo: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let mut ranges = Vec::new();
        let (mut ins, mut outs) = (Vec::new(), Vec::new());
        for (i, n) in self.nodes[nodes].iter().enumerate() {
            n.ranges_into(addrs, &mut ranges);
            let ranges = &ranges;
            let mut go = || {
                let (a, o) = (&n.args.inputs, &n.args.outputs);
                run_kernel_at(n.f, &n.args.op, a, o, |j, _| ranges[j], &n.ctx, &mut ins, &mut outs)
            };
            let r = if n.inline {
                go()
            } else if n.ctx.threads == 1 {
                match solo {
                    Some(p) => p.install(go),
                    None => go(),
                }
            } else {
                pool.install(go)
            };
            r.map_err(|msg| kernel_error(n.kernel, &n.args.op, first_seq + i as u64, self.device, stream, msg))?;
        }
        Ok(())
    }
}

impl CpuBackend {
    /// Validates a launch: the kernel is ours, every operand lies in a live allocation
    /// (which is pinned), and no output overlaps another operand.
    fn prepare_launch(
        &self,
        device: usize,
        kernel: &KernelInfo,
        args: LaunchArgs,
        stream: StreamId,
    ) -> Result<Prepared> {
        let dev = self.dev(device)?;
        let f = self.kernel_fn(kernel)?;
        let n_in = args.inputs.len();
        let ranges: Vec<(u64, usize)> = args.inputs.iter().chain(&args.outputs).map(Self::range).collect();
        for (i, o) in ranges[n_in..].iter().enumerate() {
            if ranges[..n_in + i].iter().any(|r| overlaps(*o, *r)) {
                return Err(
                    CpuError::BadRequest(format!("{}: output {i} overlaps another operand", kernel.name)).into()
                );
            }
        }
        let pins = dev.table.pin(&ranges)?;
        let out_bytes: u64 = ranges[n_in..].iter().map(|o| o.1 as u64).sum();
        let (inline, threads) = self.placement(dev, &args.op, args.threads, out_bytes);
        let pool = if inline {
            None
        } else if threads == 1 {
            self.queue(device, stream)?.map(|q| q.solo.clone())
        } else {
            Some(dev.pool.clone())
        };
        let prepacked = args.prepacked.clone();
        Ok(Prepared {
            f,
            args,
            ctx: Ctx { threads, features: self.features, prepacked },
            kernel: kernel.name,
            device,
            stream,
            pool,
            _pins: pins,
        })
    }

    /// This backend's function for `kernel`.
    fn kernel_fn(&self, kernel: &KernelInfo) -> Result<kernels::KernelFn> {
        Ok(*self
            .table
            .fns
            .get(kernel.id)
            .filter(|_| self.table.infos.get(kernel.id).is_some_and(|k| k.name == kernel.name))
            .ok_or_else(|| CpuError::BadRequest(format!("kernel {} is not a CPU kernel", kernel.name)))?)
    }

    /// Where a launch runs: `(inline, threads)`. Small launches run on the submitting
    /// thread (stream worker or caller); larger ones enter the device pool, or the
    /// stream's one-thread pool when the budget is 1.
    fn placement(&self, dev: &CpuDevice, op: &runtime::Op, budget: usize, out_bytes: u64) -> (bool, usize) {
        let threads = if budget == 0 { dev.threads } else { budget.min(dev.threads) };
        let matrix = matches!(
            op.kind(),
            runtime::OpKind::MatMul | runtime::OpKind::Gemm | runtime::OpKind::Linear | runtime::OpKind::Attention
        );
        let inline = dev.threads == 1 || (out_bytes <= INLINE_MAX_BYTES && !matrix);
        (inline, if inline { 1 } else { threads })
    }

    fn enqueue(&self, device: usize, stream: StreamId, p: Prepared) -> Result<()> {
        match self.queue(device, stream)? {
            None => p.run(),
            Some(q) => {
                q.queue.submit(Box::new(move || p.run()))?;
                Ok(())
            }
        }
    }
}
