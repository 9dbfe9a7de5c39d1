//! The NVIDIA GPU backend of npurt, on `cudarc` with dynamic loading.
//!
//! * Probing ([`CudaBackend::probe`]) opens the driver library itself (`libloading`),
//!   resolves every driver entry point the backend uses and calls `cuInit` before any
//!   cudarc call; NVRTC and cuBLAS are checked the same way. Whatever cudarc could still
//!   panic on is contained with `catch_unwind`. A machine without a GPU gets
//!   [`CudaError::NotAvailable`] ("CUDA not available: <reason>").
//! * Memory: raw `cuMemAlloc` allocations under the runtime's caching pool, checked by an
//!   allocation table ([`memory`]); host copies go through pinned, double-buffered
//!   staging buffers.
//! * Streams and events are CUDA streams (non-blocking) and events; the default stream
//!   is a dedicated stream that the runtime synchronises after every launch.
//! * Kernels ([`kernels`]): cuBLAS for MatMul / Gemm / Linear (tensor cores = the "Cube"
//!   unit; f32 SIMT unless tf32 is allowed), and NVRTC kernels generated per op, dtype
//!   and tier ([`source`]) for everything, compiled once per process and cached.

pub mod error;
pub mod info;
pub mod kernels;
mod launch;
pub mod memory;
pub mod nvrtc;
pub mod plan;
pub mod probe;
pub mod source;

pub use error::CudaError;
pub use info::CudaDeviceInfo;

use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, result};
use error::guard;
use memory::{AllocTable, Pinned, Pins};
use runtime::{Backend, DType, DeviceInfo, DevicePtr, EventId, KernelInfo, LaunchArgs, Result, StreamId, Tier};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The id of every device's default stream.
pub const DEFAULT_STREAM: StreamId = StreamId(0);

/// How the CUDA backend is set up.
#[derive(Clone, Debug)]
pub struct CudaConfig {
    /// Let f32 matrix products use tf32 tensor cores (reported in the kernel name).
    pub allow_tf32: bool,
    /// Size of each device's pinned staging buffer (split in two for double buffering).
    pub staging_bytes: usize,
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig { allow_tf32: false, staging_bytes: 8 << 20 }
    }
}

impl CudaConfig {
    /// Defaults with `NPURT_CUDA_TF32=1` (allow tf32) applied.
    pub fn from_env() -> CudaConfig {
        let tf32 = std::env::var("NPURT_CUDA_TF32").is_ok_and(|v| matches!(v.as_str(), "1" | "on" | "true" | "yes"));
        CudaConfig { allow_tf32: tf32, ..CudaConfig::default() }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Work queued on a stream whose memory must stay alive until it finishes (rule M2).
pub(crate) struct Inflight {
    /// Completes when the work is done (user streams); `None` on the default stream,
    /// whose work is released at its next synchronisation.
    done: Option<CudaEvent>,
    _pins: Pins,
}

pub(crate) struct StreamState {
    pub(crate) cu: Arc<CudaStream>,
    pub(crate) label: String,
    inflight: Mutex<VecDeque<Inflight>>,
    /// The last op queued and its submission number, for asynchronous error messages.
    last: Mutex<(String, u64)>,
    /// A kernel that reports through the device error word was queued since the last check.
    check_error_word: AtomicBool,
}

pub(crate) struct Staging {
    buf: Pinned,
    events: [CudaEvent; 2],
}

pub(crate) struct BlasHandle(pub(crate) cudarc::cublas::sys::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread as long as calls on it are not
// concurrent; it only ever lives inside a `Mutex`.
unsafe impl Send for BlasHandle {}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `cublasCreate` and is destroyed once, here.
        let _ = unsafe { cudarc::cublas::result::destroy_handle(self.0) };
    }
}

pub(crate) struct Device {
    pub(crate) ordinal: usize,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) info: CudaDeviceInfo,
    pub(crate) table: Arc<AllocTable>,
    streams: Mutex<HashMap<u64, Arc<StreamState>>>,
    events: Mutex<HashMap<u64, Arc<CudaEvent>>>,
    next_id: AtomicU64,
    modules: Mutex<HashMap<(Tier, DType), Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    pub(crate) blas: Option<Mutex<BlasHandle>>,
    pub(crate) tf32_allowed: bool,
    staging: Mutex<Option<Staging>>,
    staging_bytes: usize,
    copy_stream: Arc<CudaStream>,
    /// 4 bytes of device memory kernels set on a data-dependent failure (bad gather index).
    pub(crate) error_word: u64,
    /// Spare completion events for user-stream launches.
    spare_events: Mutex<Vec<CudaEvent>>,
}

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.ctx.synchronize();
        lock(&self.streams).clear();
        // SAFETY: the error word was allocated by `cuMemAlloc` in `open` and is freed once;
        // the device was synchronised above, so no kernel still writes it.
        let _ = unsafe { result::free_sync(self.error_word) };
    }
}

fn drv(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::driver(call, e, None)
}

impl Device {
    fn open(
        ordinal: usize,
        cfg: &CudaConfig,
        blas: bool,
        driver_version: i32,
    ) -> std::result::Result<Device, CudaError> {
        let ctx = CudaContext::new(ordinal).map_err(drv("cuDevicePrimaryCtxRetain"))?;
        let attr = |a| ctx.attribute(a).unwrap_or(0).max(0) as u32;
        let cc = ctx.compute_capability().map_err(drv("cuDeviceGetAttribute"))?;
        let info = CudaDeviceInfo::from_attributes(
            ordinal,
            ctx.name().map_err(drv("cuDeviceGetName"))?,
            cc,
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
            ctx.total_mem().map_err(drv("cuDeviceTotalMem"))? as u64,
            driver_version,
        );
        let default = ctx.new_stream().map_err(drv("cuStreamCreate"))?;
        let copy_stream = ctx.new_stream().map_err(drv("cuStreamCreate"))?;
        // SAFETY: a 4-byte allocation in the context bound by `new_stream` above, zeroed
        // synchronously before any kernel can see it.
        let error_word = unsafe {
            let w = result::malloc_sync(4).map_err(drv("cuMemAlloc"))?;
            result::memset_d8_sync(w, 0, 4).map_err(drv("cuMemsetD8"))?;
            w
        };
        let blas = if blas {
            match guard("cublasCreate", || {
                ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))?;
                cudarc::cublas::result::create_handle().map_err(|e| CudaError::cublas("cublasCreate", e))
            }) {
                Ok(h) => Some(Mutex::new(BlasHandle(h))),
                Err(e) => {
                    log::warn!("cuda:{ordinal}: {e}; matrix products fall back to the NVRTC kernels");
                    None
                }
            }
        } else {
            None
        };
        let mut streams = HashMap::new();
        streams.insert(
            DEFAULT_STREAM.0,
            Arc::new(StreamState {
                cu: default,
                label: format!("cuda:{ordinal}/default"),
                inflight: Mutex::new(VecDeque::new()),
                last: Mutex::new((String::new(), 0)),
                check_error_word: AtomicBool::new(false),
            }),
        );
        Ok(Device {
            ordinal,
            table: Arc::new(AllocTable::new(ordinal, ctx.clone())),
            ctx,
            info,
            streams: Mutex::new(streams),
            events: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            blas,
            tf32_allowed: cfg.allow_tf32,
            staging: Mutex::new(None),
            staging_bytes: cfg.staging_bytes.max(1 << 16),
            copy_stream,
            error_word,
            spare_events: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn bind(&self) -> std::result::Result<(), CudaError> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))
    }

    pub(crate) fn stream(&self, s: StreamId) -> std::result::Result<Arc<StreamState>, CudaError> {
        lock(&self.streams).get(&s.0).cloned().ok_or(CudaError::NoStream(s.0, self.ordinal))
    }

    fn event(&self, e: EventId) -> std::result::Result<Arc<CudaEvent>, CudaError> {
        lock(&self.events).get(&e.0).cloned().ok_or(CudaError::NoEvent(e.0, self.ordinal))
    }

    /// The function `name` of the (`tier`, `dtype`) module, compiling and loading the
    /// module on first use (CUBIN for the device, PTX as a fallback).
    pub(crate) fn function(
        &self,
        tier: Tier,
        dtype: DType,
        name: &str,
    ) -> std::result::Result<CudaFunction, CudaError> {
        if let Some(f) = lock(&self.functions).get(name) {
            return Ok(f.clone());
        }
        let module = {
            let mut mods = lock(&self.modules);
            match mods.get(&(tier, dtype)) {
                Some(m) => m.clone(),
                None => {
                    let m = self.load_module(tier, dtype)?;
                    mods.insert((tier, dtype), m.clone());
                    m
                }
            }
        };
        let f = guard("cuModuleGetFunction", || module.load_function(name).map_err(drv("cuModuleGetFunction")))?;
        lock(&self.functions).insert(name.to_string(), f.clone());
        Ok(f)
    }

    fn load_module(&self, tier: Tier, dtype: DType) -> std::result::Result<Arc<CudaModule>, CudaError> {
        let cc = self.info.compute_capability;
        let mut errors = Vec::new();
        let attempts = [(cc, nvrtc::Output::Cubin), (cc, nvrtc::Output::Ptx), ((8, 0), nvrtc::Output::Ptx)];
        for (arch, out) in attempts {
            if arch > cc {
                continue;
            }
            let img = match nvrtc::module_image(arch, tier, dtype, out) {
                Ok(i) => i,
                Err(e) => {
                    errors.push(format!("{out:?} sm_{}{}: {e}", arch.0, arch.1));
                    continue;
                }
            };
            let ptx = match out {
                nvrtc::Output::Cubin => cudarc::nvrtc::Ptx::from_binary(img.bytes.clone()),
                nvrtc::Output::Ptx => {
                    cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(&img.bytes).trim_end_matches('\0').to_string())
                }
            };
            match guard("cuModuleLoadData", || self.ctx.load_module(ptx).map_err(drv("cuModuleLoadData"))) {
                Ok(m) => return Ok(m),
                Err(e) => errors.push(format!("loading {out:?} sm_{}{}: {e}", arch.0, arch.1)),
            }
        }
        Err(CudaError::Nvrtc { module: source::module_name(tier, dtype), log: errors.join("; ") })
    }

    /// Keeps `pins` alive until the work just queued on `st` has finished.
    pub(crate) fn retire(
        &self,
        st: &StreamState,
        user: bool,
        pins: Pins,
        op: &str,
        seq: u64,
    ) -> std::result::Result<(), CudaError> {
        let done = if user {
            let ev = match lock(&self.spare_events).pop() {
                Some(e) => e,
                None => {
                    self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(drv("cuEventCreate"))?
                }
            };
            ev.record(&st.cu).map_err(drv("cuEventRecord"))?;
            Some(ev)
        } else {
            None
        };
        lock(&st.inflight).push_back(Inflight { done, _pins: pins });
        *lock(&st.last) = (op.to_string(), seq);
        Ok(())
    }

    /// Releases the memory of finished work on every stream.
    fn reap(&self) {
        let streams: Vec<Arc<StreamState>> = lock(&self.streams).values().cloned().collect();
        for st in streams {
            let mut q = lock(&st.inflight);
            while let Some(front) = q.front() {
                let finished = match &front.done {
                    Some(ev) => ev.try_is_complete().unwrap_or(false),
                    None => false,
                };
                if !finished {
                    break;
                }
                if let Some(Inflight { done: Some(ev), .. }) = q.pop_front() {
                    lock(&self.spare_events).push(ev);
                }
            }
        }
    }

    /// Waits for `st`, releases its queued memory and reports the first failure.
    fn sync_stream(&self, st: &StreamState, user: bool) -> Result<()> {
        self.bind()?;
        let r = st.cu.synchronize();
        let drained: Vec<Inflight> = lock(&st.inflight).drain(..).collect();
        let mut spare = lock(&self.spare_events);
        for f in drained {
            if let Some(ev) = f.done {
                spare.push(ev);
            }
        }
        drop(spare);
        let (op, seq) = lock(&st.last).clone();
        let fail = |msg: String| -> runtime::Error {
            if user {
                runtime::Error::Async { op: op.clone(), stream: st.label.clone(), seq, msg }
            } else {
                runtime::Error::Backend { backend: "cuda", msg: format!("{op} (submission #{seq}): {msg}") }
            }
        };
        if let Err(e) = r {
            return Err(fail(CudaError::driver("cuStreamSynchronize", e, None).to_string()));
        }
        if st.check_error_word.swap(false, Ordering::AcqRel) {
            let mut word = [0i32; 1];
            // SAFETY: the error word is a live 4-byte device allocation owned by this
            // device; `word` is a 4-byte host buffer.
            let read = unsafe { result::memcpy_dtoh_sync(&mut word, self.error_word) };
            if read.is_ok() && word[0] != 0 {
                // SAFETY: as above; resets the word for the next check.
                let _ = unsafe { result::memset_d8_sync(self.error_word, 0, 4) };
                return Err(fail("an index is out of range for the gathered axis".into()));
            }
        }
        Ok(())
    }

    fn staging(&self) -> Option<MutexGuard<'_, Option<Staging>>> {
        let mut g = lock(&self.staging);
        if g.is_none() {
            let made = Pinned::new(self.ctx.clone(), self.staging_bytes).and_then(|buf| {
                let ev =
                    || self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(drv("cuEventCreate"));
                Ok(Staging { buf, events: [ev()?, ev()?] })
            });
            match made {
                Ok(s) => *g = Some(s),
                Err(e) => {
                    log::warn!("cuda:{}: no pinned staging buffer ({e}); copying from pageable memory", self.ordinal);
                    return None;
                }
            }
        }
        Some(g)
    }

    /// Host to device through the pinned buffer, double buffered; synchronous.
    fn upload(&self, src: &[u8], dst: u64) -> std::result::Result<(), CudaError> {
        self.bind()?;
        let Some(mut g) = self.staging() else {
            // SAFETY: `dst .. dst + len` was validated and pinned by the caller; the copy is
            // synchronous, so `src` outlives it.
            return unsafe { result::memcpy_htod_sync(dst, src) }.map_err(drv("cuMemcpyHtoD"));
        };
        let Some(st) = g.as_mut() else { return Err(CudaError::BadRequest("staging buffer vanished".into())) };
        let half = st.buf.len() / 2;
        let base = st.buf.as_ptr();
        let cs = self.copy_stream.cu_stream();
        for (k, chunk) in src.chunks(half).enumerate() {
            let slot = k % 2;
            if k >= 2 {
                st.events[slot].synchronize().map_err(drv("cuEventSynchronize"))?;
            }
            // SAFETY: `base + slot * half` has `half` >= chunk.len() bytes of the pinned
            // buffer; the copy that last read this half has completed (event above).
            let host = unsafe { base.add(slot * half) };
            // SAFETY: distinct buffers (pageable source, pinned destination), length checked.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), host, chunk.len()) };
            // SAFETY: the device range lies inside the validated destination; the pinned
            // half stays untouched until its event completes.
            unsafe {
                cudarc::driver::sys::cuMemcpyHtoDAsync_v2(
                    dst + (k * half) as u64,
                    host as *const std::ffi::c_void,
                    chunk.len(),
                    cs,
                )
                .result()
                .map_err(drv("cuMemcpyHtoDAsync"))?;
            }
            st.events[slot].record(&self.copy_stream).map_err(drv("cuEventRecord"))?;
        }
        self.copy_stream.synchronize().map_err(drv("cuStreamSynchronize"))
    }

    /// Device to host through the pinned buffer, double buffered; synchronous.
    fn download(&self, src: u64, dst: &mut [u8]) -> std::result::Result<(), CudaError> {
        self.bind()?;
        let Some(mut g) = self.staging() else {
            // SAFETY: the source range was validated and pinned by the caller; synchronous.
            return unsafe { result::memcpy_dtoh_sync(dst, src) }.map_err(drv("cuMemcpyDtoH"));
        };
        let Some(st) = g.as_mut() else { return Err(CudaError::BadRequest("staging buffer vanished".into())) };
        let half = st.buf.len() / 2;
        let base = st.buf.as_ptr();
        let cs = self.copy_stream.cu_stream();
        let n = dst.len();
        let chunks = n.div_ceil(half);
        let drain = |k: usize, dst: &mut [u8], st: &Staging| -> std::result::Result<(), CudaError> {
            let slot = k % 2;
            st.events[slot].synchronize().map_err(drv("cuEventSynchronize"))?;
            let (lo, hi) = (k * half, ((k + 1) * half).min(n));
            // SAFETY: the copy into this half has completed (event above); the lengths match.
            unsafe { std::ptr::copy_nonoverlapping(base.add(slot * half), dst[lo..hi].as_mut_ptr(), hi - lo) };
            Ok(())
        };
        for k in 0..chunks {
            let slot = k % 2;
            let (lo, hi) = (k * half, ((k + 1) * half).min(n));
            // SAFETY: the source range lies inside the validated allocation; the pinned half
            // was drained (below, one step behind) before being reused.
            unsafe {
                cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
                    base.add(slot * half) as *mut std::ffi::c_void,
                    src + lo as u64,
                    hi - lo,
                    cs,
                )
                .result()
                .map_err(drv("cuMemcpyDtoHAsync"))?;
            }
            st.events[slot].record(&self.copy_stream).map_err(drv("cuEventRecord"))?;
            if k >= 1 {
                drain(k - 1, dst, st)?;
            }
        }
        if chunks > 0 {
            drain(chunks - 1, dst, st)?;
        }
        Ok(())
    }
}

/// The CUDA backend: every visible GPU.
pub struct CudaBackend {
    devices: Vec<Device>,
    kernels: &'static [kernels::Entry],
    infos: Vec<KernelInfo>,
    cfg: CudaConfig,
    driver: probe::DriverFacts,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").field("devices", &self.devices.len()).field("driver", &self.driver).finish()
    }
}

impl CudaBackend {
    /// Opens every GPU with the configuration from the environment; `Err` (never a panic)
    /// when there is no usable driver, device or NVRTC.
    pub fn probe() -> std::result::Result<CudaBackend, CudaError> {
        Self::probe_with(CudaConfig::from_env())
    }

    pub fn probe_with(cfg: CudaConfig) -> std::result::Result<CudaBackend, CudaError> {
        let driver = probe::check_driver()?;
        nvrtc::available()?;
        let blas = match probe::check_library("cublas", probe::REQUIRED_CUBLAS_SYMBOLS) {
            Ok(_) => true,
            Err(e) => {
                log::warn!("{e}; matrix products use the NVRTC kernels");
                false
            }
        };
        let mut devices = Vec::with_capacity(driver.devices);
        for ord in 0..driver.devices {
            let d = guard("device setup", || Device::open(ord, &cfg, blas, driver.version))
                .map_err(|e| CudaError::NotAvailable(format!("cuda:{ord}: {e}")))?;
            devices.push(d);
        }
        let has_blas = devices.iter().all(|d| d.blas.is_some());
        let kernels = kernels::table(has_blas, cfg.allow_tf32);
        if cfg.allow_tf32 {
            log::info!("cuda: tf32 tensor cores allowed for f32 matrix products (NPURT_CUDA_TF32)");
        }
        log::info!(
            "cuda backend: {} device(s) ({}), driver {}.{}",
            devices.len(),
            devices.iter().map(|d| d.info.name.as_str()).collect::<Vec<_>>().join(", "),
            driver.version / 1000,
            (driver.version % 1000) / 10
        );
        Ok(CudaBackend { infos: kernels.iter().map(|e| e.info).collect(), devices, kernels, cfg, driver })
    }

    pub fn config(&self) -> &CudaConfig {
        &self.cfg
    }

    /// The driver library, version and device count found by probing.
    pub fn driver(&self) -> &probe::DriverFacts {
        &self.driver
    }

    /// Everything known about device `d` (peaks per unit, compute capability, ...).
    pub fn device_details(&self, d: usize) -> std::result::Result<&CudaDeviceInfo, CudaError> {
        Ok(&self.dev(d)?.info)
    }

    pub(crate) fn dev(&self, d: usize) -> std::result::Result<&Device, CudaError> {
        self.devices.get(d).ok_or(CudaError::NoDevice(d))
    }

    /// Queues a byte copy or fill on `stream`, keeping its memory alive (rule M2). The
    /// default stream waits for it before returning, as on the CPU.
    fn enqueue_bytes(
        &self,
        device: usize,
        stream: StreamId,
        ranges: &[(u64, usize)],
        what: &str,
        go: impl FnOnce(&CudaStream) -> std::result::Result<(), CudaError>,
    ) -> Result<()> {
        let dev = self.dev(device)?;
        let st = dev.stream(stream)?;
        let pins = dev.table.pin(ranges)?;
        dev.bind()?;
        go(&st.cu)?;
        let user = stream != DEFAULT_STREAM;
        dev.retire(&st, user, pins, what, 0)?;
        if !user {
            dev.sync_stream(&st, false)?;
        }
        Ok(())
    }
}

fn overlaps(a: (u64, usize), b: (u64, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 as u64 && b.0 < a.0 + a.1 as u64
}

// SAFETY: every address is validated against the device's allocation table and the
// allocations queued work uses are pinned until an event (or a synchronisation) shows the
// work finished (M1, M2); launches refuse overlapping outputs (M3); unknown stream and
// event ids are errors (M4); driver, NVRTC and cuBLAS failures are returned as values and
// panics inside cudarc are contained (M5). Kernels only touch the validated operand ranges:
// each generated kernel indexes within the shapes and strides the launch computed from
// the very layouts that were validated.
unsafe impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }
    fn device_count(&self) -> usize {
        self.devices.len()
    }
    fn device_info(&self, device: usize) -> Result<DeviceInfo> {
        let d = self.dev(device)?;
        Ok(DeviceInfo {
            name: format!(
                "{} (sm_{}{}, {} SMs)",
                d.info.name, d.info.compute_capability.0, d.info.compute_capability.1, d.info.sm_count
            ),
            memory_bytes: d.info.memory_bytes,
            units: d.info.units(),
            host_shared: false,
            min_alignment: memory::DRIVER_ALIGNMENT,
        })
    }
    fn memory_free(&self, device: usize) -> Option<u64> {
        let d = self.dev(device).ok()?;
        d.ctx.mem_get_info().ok().map(|(free, _)| free as u64)
    }

    fn alloc(&self, device: usize, bytes: usize, align: usize) -> Result<DevicePtr> {
        let d = self.dev(device)?;
        d.reap();
        Ok(DevicePtr(d.table.alloc(bytes, align)?))
    }
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        let d = self.dev(device)?;
        d.reap();
        Ok(d.table.free(ptr.0)?)
    }
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let d = self.dev(device)?;
        let _pins = d.table.pin(&[(dst.0, src.len())])?;
        Ok(d.upload(src, dst.0)?)
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        self.synchronize_stream(device, stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        let d = self.dev(device)?;
        let _pins = d.table.pin(&[(src.0, dst.len())])?;
        Ok(d.download(src.0, dst)?)
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
            return Err(CudaError::BadRequest("device copy ranges overlap".into()).into());
        }
        self.enqueue_bytes(device, stream, &[(src.0, bytes), (dst.0, bytes)], "copy", |s| {
            // SAFETY: both ranges were validated and pinned by `enqueue_bytes` and do not
            // overlap (checked above).
            unsafe { result::memcpy_dtod_async(dst.0, src.0, bytes, s.cu_stream()) }.map_err(drv("cuMemcpyDtoDAsync"))
        })
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.enqueue_bytes(device, stream, &[(dst.0, bytes)], "memset", |s| {
            // SAFETY: the range was validated and pinned by `enqueue_bytes`.
            unsafe { result::memset_d8_async(dst.0, value, bytes, s.cu_stream()) }.map_err(drv("cuMemsetD8Async"))
        })
    }
    fn map_host(&self, device: usize, _ptr: DevicePtr, _len: usize, _f: &mut dyn FnMut(&mut [u8])) -> Result<bool> {
        self.dev(device)?;
        Ok(false)
    }

    fn default_stream(&self, _device: usize) -> StreamId {
        DEFAULT_STREAM
    }
    fn create_stream(&self, device: usize) -> Result<StreamId> {
        let d = self.dev(device)?;
        d.bind()?;
        let cu = d.ctx.new_stream().map_err(drv("cuStreamCreate"))?;
        let id = d.next_id.fetch_add(1, Ordering::Relaxed);
        let st = StreamState {
            cu,
            label: format!("cuda:{device}/stream{id}"),
            inflight: Mutex::new(VecDeque::new()),
            last: Mutex::new((String::new(), 0)),
            check_error_word: AtomicBool::new(false),
        };
        lock(&d.streams).insert(id, Arc::new(st));
        Ok(StreamId(id))
    }
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        if stream == DEFAULT_STREAM {
            return Ok(());
        }
        let d = self.dev(device)?;
        let st = lock(&d.streams).remove(&stream.0).ok_or(CudaError::NoStream(stream.0, device))?;
        if let Err(e) = d.sync_stream(&st, true) {
            log::warn!("destroying {}: unreported failure: {e}", st.label);
        }
        Ok(())
    }
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        let d = self.dev(device)?;
        let st = d.stream(stream)?;
        d.sync_stream(&st, stream != DEFAULT_STREAM)
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        let d = self.dev(device)?;
        let all: Vec<(u64, Arc<StreamState>)> = lock(&d.streams).iter().map(|(k, v)| (*k, v.clone())).collect();
        let mut first = Ok(());
        for (id, st) in all {
            if let Err(e) = d.sync_stream(&st, id != DEFAULT_STREAM.0) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    fn create_event(&self, device: usize) -> Result<EventId> {
        let d = self.dev(device)?;
        let ev = d.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("cuEventCreate"))?;
        let id = d.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&d.events).insert(id, Arc::new(ev));
        Ok(EventId(id))
    }
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()> {
        let d = self.dev(device)?;
        lock(&d.events).remove(&event.0).ok_or(CudaError::NoEvent(event.0, device))?;
        Ok(())
    }
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()> {
        let d = self.dev(device)?;
        let (ev, st) = (d.event(event)?, d.stream(stream)?);
        ev.record(&st.cu).map_err(drv("cuEventRecord"))?;
        Ok(())
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        let d = self.dev(device)?;
        let (ev, st) = (d.event(event)?, d.stream(stream)?);
        st.cu.wait(&ev).map_err(drv("cuStreamWaitEvent"))?;
        Ok(())
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        let d = self.dev(device)?;
        let ev = d.event(event)?;
        d.bind()?;
        Ok(ev.try_is_complete().map_err(drv("cuEventQuery"))?)
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        let d = self.dev(device)?;
        let ev = d.event(event)?;
        ev.synchronize().map_err(drv("cuEventSynchronize"))?;
        Ok(())
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        let d = self.dev(device)?;
        let (a, b) = (d.event(start)?, d.event(end)?);
        let ms = a.elapsed_ms(&b).map_err(drv("cuEventElapsedTime"))?;
        Ok(Duration::from_secs_f64((ms.max(0.0) as f64) / 1e3))
    }

    fn kernels(&self) -> &[KernelInfo] {
        &self.infos
    }

    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        let entry = self
            .kernels
            .get(kernel.id)
            .filter(|e| e.info.name == kernel.name)
            .ok_or_else(|| CudaError::BadRequest(format!("kernel {} is not a CUDA kernel", kernel.name)))?;
        let d = self.dev(device)?;
        let st = d.stream(stream)?;
        let n_in = args.inputs.len();
        let ranges = args.validate(&entry.info)?;
        for (i, o) in ranges[n_in..].iter().enumerate() {
            if ranges[..n_in + i].iter().any(|r| overlaps(*o, *r)) {
                return Err(
                    CudaError::BadRequest(format!("{}: output {i} overlaps another operand", kernel.name)).into()
                );
            }
        }
        if args.outputs.iter().any(|o| !o.layout.is_contiguous()) {
            return Err(CudaError::BadRequest(format!("{}: outputs must be contiguous", kernel.name)).into());
        }
        let pins = d.table.pin(&ranges)?;
        d.bind()?;
        let user = stream != DEFAULT_STREAM;
        if user {
            d.reap();
        }
        let ran = guard("kernel launch", || d.run(entry, &args, &st));
        // Part of the work may have been queued even when a later step failed: keep the
        // memory alive until the stream says it is done, in every case (M2).
        d.retire(&st, user, pins, args.op.name(), args.seq)?;
        ran.map_err(|e| runtime::Error::Backend {
            backend: "cuda",
            msg: format!("{} (submission #{}): {}: {e}", args.op.name(), args.seq, kernel.name),
        })
    }
}
