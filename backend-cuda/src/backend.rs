//! The [`runtime::Backend`] implementation of [`CudaBackend`]: each method delegates to
//! the device records (`device.rs`), memory (`memory.rs`), streams and events
//! (`stream.rs`) or the launch path (`launch.rs`).

use crate::device::{CudaBackend, DEFAULT_STREAM};
use crate::error::CudaError;
use crate::memory;
use runtime::{Backend, DeviceInfo, DevicePtr, EventId, KernelInfo, LaunchArgs, Result, StreamId};
use std::time::Duration;

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
        let _pins = d.table.pin(&[(dst.0, src.len())]).map_err(CudaError::from)?;
        Ok(d.copies.upload(src, dst.0)?)
    }
    fn copy_to_host(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        self.synchronize_stream(device, stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        let d = self.dev(device)?;
        let _pins = d.table.pin(&[(src.0, dst.len())]).map_err(CudaError::from)?;
        Ok(d.copies.download(src.0, dst)?)
    }
    fn copy_on_device(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        self.copy_bytes(device, src, dst, bytes, stream)
    }
    fn memset(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        self.fill_bytes(device, dst, value, bytes, stream)
    }
    fn map_host(&self, device: usize, _ptr: DevicePtr, _len: usize, _f: &mut dyn FnMut(&mut [u8])) -> Result<bool> {
        self.dev(device)?;
        Ok(false)
    }

    fn default_stream(&self, _device: usize) -> StreamId {
        DEFAULT_STREAM
    }
    fn create_stream(&self, device: usize) -> Result<StreamId> {
        self.new_stream(device)
    }
    fn destroy_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.remove_stream(device, stream)
    }
    fn synchronize_stream(&self, device: usize, stream: StreamId) -> Result<()> {
        self.sync_stream_of(device, stream)
    }
    fn synchronize_device(&self, device: usize) -> Result<()> {
        self.sync_device(device)
    }

    fn create_event(&self, device: usize) -> Result<EventId> {
        self.new_event(device)
    }
    fn destroy_event(&self, device: usize, event: EventId) -> Result<()> {
        self.remove_event(device, event)
    }
    fn record_event(&self, device: usize, event: EventId, stream: StreamId) -> Result<()> {
        self.record(device, event, stream)
    }
    fn wait_event(&self, device: usize, stream: StreamId, event: EventId) -> Result<()> {
        self.wait(device, stream, event)
    }
    fn query_event(&self, device: usize, event: EventId) -> Result<bool> {
        self.query(device, event)
    }
    fn synchronize_event(&self, device: usize, event: EventId) -> Result<()> {
        self.sync_event(device, event)
    }
    fn elapsed(&self, device: usize, start: EventId, end: EventId) -> Result<Duration> {
        self.event_elapsed(device, start, end)
    }

    fn kernels(&self) -> &[KernelInfo] {
        self.kernels.infos()
    }

    fn launch(&self, device: usize, kernel: &KernelInfo, args: LaunchArgs, stream: StreamId) -> Result<()> {
        self.launch_kernel(device, kernel, args, stream)
    }
}
