//! The per-device record: each GPU's context, allocation table, streams and events,
//! compiled modules, cuBLAS handle, staging buffer and error word ([`Device`]), with the
//! records of its streams and of the work queued on them.

use crate::config::CudaConfig;
use crate::error::{CudaError, drv, guard, lock};
use crate::info::CudaDeviceInfo;
use crate::kernels::source;
use crate::memory::{self, CudaRelease, HostCopies};
use crate::nvrtc;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, result};
use runtime::backend::allocations::{AllocTable, Pins};
use runtime::{DType, StreamId, Tier};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

/// The id of every device's default stream.
pub const DEFAULT_STREAM: StreamId = StreamId(0);

/// Work queued on a stream whose memory must stay alive until it finishes (rule M2).
pub(crate) struct Inflight {
    /// Completes when the work is done (user streams); `None` on the default stream,
    /// whose work is released at its next synchronisation.
    pub(crate) done: Option<CudaEvent>,
    pub(crate) _pins: Pins<CudaRelease>,
}

/// One stream of a device, the work queued on it and what its next synchronisation checks.
pub(crate) struct StreamState {
    pub(crate) cu: Arc<CudaStream>,
    pub(crate) label: String,
    pub(crate) inflight: Mutex<VecDeque<Inflight>>,
    /// The last op queued and its submission number, for asynchronous error messages.
    pub(crate) last: Mutex<(String, u64)>,
    /// A kernel that reports through the device error word was queued since the last check.
    pub(crate) check_error_word: AtomicBool,
}

impl StreamState {
    /// A stream with nothing queued yet, labelled `label` in error messages.
    pub(crate) fn new(cu: Arc<CudaStream>, label: String) -> StreamState {
        StreamState {
            cu,
            label,
            inflight: Mutex::new(VecDeque::new()),
            last: Mutex::new((String::new(), 0)),
            check_error_word: AtomicBool::new(false),
        }
    }
}

/// A cuBLAS handle of the device's context.
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

/// Everything one GPU owns: its context, allocation table, streams and events, compiled
/// modules, cuBLAS handle, staging buffer and error word.
pub(crate) struct Device {
    pub(crate) ordinal: usize,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) info: CudaDeviceInfo,
    pub(crate) table: Arc<AllocTable<CudaRelease>>,
    pub(crate) streams: Mutex<HashMap<u64, Arc<StreamState>>>,
    pub(crate) events: Mutex<HashMap<u64, Arc<CudaEvent>>>,
    pub(crate) next_id: AtomicU64,
    modules: Mutex<HashMap<(Tier, DType), Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    pub(crate) blas: Option<Mutex<BlasHandle>>,
    pub(crate) tf32_allowed: bool,
    /// The pinned staging buffer and copy stream of host copies.
    pub(crate) copies: HostCopies,
    /// 4 bytes of device memory kernels set on a data-dependent failure (bad gather index).
    pub(crate) error_word: u64,
    /// Spare completion events for user-stream launches.
    pub(crate) spare_events: Mutex<Vec<CudaEvent>>,
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

impl Device {
    /// Opens GPU `ordinal`: its primary context, default and copy streams, error word and
    /// (with `blas`) cuBLAS handle.
    pub(crate) fn open(
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
        streams.insert(DEFAULT_STREAM.0, Arc::new(StreamState::new(default, format!("cuda:{ordinal}/default"))));
        let copies = HostCopies::new(ctx.clone(), ordinal, cfg.staging_bytes.max(1 << 16), copy_stream);
        Ok(Device {
            ordinal,
            table: Arc::new(AllocTable::new(memory::device_label(ordinal), CudaRelease::new(ctx.clone(), ordinal))),
            ctx,
            info,
            streams: Mutex::new(streams),
            events: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            blas,
            tf32_allowed: cfg.allow_tf32,
            copies,
            error_word,
            spare_events: Mutex::new(Vec::new()),
        })
    }

    /// Makes the device's context current on the calling thread.
    pub(crate) fn bind(&self) -> std::result::Result<(), CudaError> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))
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
}
