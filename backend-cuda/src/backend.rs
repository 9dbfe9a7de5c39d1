//! [`CudaBackend`], one [`Device`] per visible GPU opened by probing, and its
//! [`runtime::Backend`] implementation: each method delegates to the device record
//! (`device.rs`), memory (`memory.rs`), streams and events (`stream.rs`) or the launch
//! path (`launch.rs`).

use crate::config::CudaConfig;
use crate::device::{DEFAULT_STREAM, Device};
use crate::error::{CudaError, guard};
use crate::info::CudaDeviceInfo;
use crate::kernels::{self, Impl};
use crate::{memory, nvrtc, probe};
use runtime::{Backend, DeviceInfo, DevicePtr, EventId, KernelInfo, KernelTable, LaunchArgs, Result, StreamId};
use std::time::Duration;

/// The CUDA backend: every visible GPU.
pub struct CudaBackend {
    pub(crate) devices: Vec<Device>,
    pub(crate) kernels: &'static KernelTable<Impl>,
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
        Self::probe_with(CudaConfig::from_env()?)
    }

    /// Opens every GPU with configuration `cfg`; `Err` (never a panic) when there is no
    /// usable driver, device or NVRTC.
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
        Ok(CudaBackend { devices, kernels, cfg, driver })
    }

    /// The configuration the backend was opened with.
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
        Ok(DevicePtr(memory::alloc(&d.table, bytes, align)?))
    }
    fn free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        let d = self.dev(device)?;
        d.reap();
        Ok(d.table.free(ptr.0).map_err(CudaError::from)?)
    }
    fn copy_to_device(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let d = self.dev(device)?;
        Ok(memory::upload(&d.table, &d.copies, src, dst.0)?)
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        self.synchronize_stream(device, stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        let d = self.dev(device)?;
        Ok(memory::download(&d.table, &d.copies, src.0, dst)?)
    }
    fn copy_on_device(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        let d = self.dev(device)?;
        let Some(c) = memory::check_copy(&d.table, src.0, dst.0, bytes)? else { return Ok(()) };
        d.enqueue_bytes(stream, &c.ranges(), "copy", memory::copy_async(c))
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.dev(device)?.enqueue_bytes(stream, &[(dst.0, bytes)], "memset", memory::fill_async(dst.0, value, bytes))
    }
    fn map_host(&self, device: usize, _ptr: DevicePtr, _len: usize, _f: &mut dyn FnMut(&mut [u8])) -> Result<bool> {
        self.dev(device)?;
        Ok(false)
    }

    fn default_stream(&self, _device: usize) -> StreamId {
        DEFAULT_STREAM
    }
    fn create_stream(&self, device: usize) -> Result<StreamId> {
        self.dev(device)?.new_stream()
    }
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.dev(device)?.remove_stream(stream)
    }
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.dev(device)?.sync_stream_of(stream)
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        self.dev(device)?.sync_device()
    }

    fn create_event(&self, device: usize) -> Result<EventId> {
        self.dev(device)?.new_event()
    }
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()> {
        self.dev(device)?.remove_event(event)
    }
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()> {
        self.dev(device)?.record(event, stream)
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        self.dev(device)?.wait(stream, event)
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        self.dev(device)?.query(event)
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        self.dev(device)?.sync_event(event)
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        self.dev(device)?.event_elapsed(start, end)
    }

    fn kernels(&self) -> &[KernelInfo] {
        self.kernels.infos()
    }

    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        self.dev(device)?.launch_kernel(self.kernels, kernel, args, stream)
    }
}
