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
mod launch;
pub mod memory;
pub mod stream;

pub use error::CpuError;
pub use launch::Fault;

use launch::overlaps;
use memory::AllocTable;
use runtime::{Backend, DeviceInfo, DevicePtr, EventId, KernelInfo, LaunchArgs, Result, StreamId, UnitInfo};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stream::{CpuEvent, Job, WorkQueue};

/// The id of every device's default (synchronous) stream.
pub const DEFAULT_STREAM: StreamId = StreamId(0);

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
    faults: launch::Faults,
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
        Ok(CpuBackend { devices, table: kernels::table(features), features, faults: Default::default() })
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
}

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
        let ev = self.event(device, event)?;
        // A record that is not queued leaves the event as it was: nothing may wait for a
        // generation that no stream will reach.
        match self.queue(device, stream)? {
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

    /// Validates every launch in full and pins its fixed operands for the life of the
    /// plan; `launch_frozen` then checks only the per-run addresses.
    fn freeze(&self, device: usize, launches: &[runtime::FrozenLaunch]) -> Result<Option<runtime::Frozen>> {
        self.freeze_launches(device, launches)
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
        self.launch_frozen_at(device, frozen, nodes, addrs, first_seq, stream)
    }

    fn launch_batch(&self, device: usize, launches: Vec<(KernelInfo, LaunchArgs)>, stream: StreamId) -> Result<()> {
        self.launch_batch_at(device, launches, stream)
    }
}
