//! Raw device allocations and their entry in the device's allocation table (rules (M1)
//! and (M2) of the `Backend` contract, checked by
//! [`runtime::backend::allocations::AllocTable`]), and host<->device copies through
//! pinned, double-buffered staging buffers; device-to-device copies and fills, checked
//! here and queued on a stream by `stream.rs`.

use crate::error::{CudaError, drv, lock};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, result};
use runtime::backend::allocations::{AllocTable, CopyError, CopyRanges, Release};
use std::sync::{Arc, Mutex, MutexGuard};

/// Alignment `cuMemAlloc` guarantees.
pub const DRIVER_ALIGNMENT: usize = 256;

/// The label of device `ordinal` in allocation-table errors (`cuda:0`).
pub fn device_label(ordinal: usize) -> String {
    format!("cuda:{ordinal}")
}

/// Gives a block of the allocation table back to the driver (`cuMemFree`) in the
/// device's context. The table's record of a block is the raw pointer `cuMemAlloc`
/// returned (the block's base is that pointer rounded up to the requested alignment).
pub struct CudaRelease {
    ctx: Arc<CudaContext>,
    device: usize,
}

impl CudaRelease {
    pub fn new(ctx: Arc<CudaContext>, device: usize) -> CudaRelease {
        CudaRelease { ctx, device }
    }
}

impl Release for CudaRelease {
    type Record = u64;

    fn release(&self, _base: u64, _size: usize, raw: u64) {
        if let Err(e) = self.ctx.bind_to_thread() {
            log::error!("cuda:{}: binding the context to free {raw:#x}: {e}", self.device);
            return;
        }
        // SAFETY: `raw` came from `cuMemAlloc` in `alloc`, its table entry was removed
        // just before (so it is freed once), and no queued work uses it (pins == 0).
        if let Err(e) = unsafe { result::free_sync(raw) } {
            log::error!("cuda:{}: cuMemFree({raw:#x}) failed: {e}", self.device);
        }
    }
}

/// Allocates `bytes` (> 0) aligned to `align` (a power of two) with `cuMemAlloc` in the
/// table's device and records the block in `table`; returns its base.
pub fn alloc(table: &AllocTable<CudaRelease>, bytes: usize, align: usize) -> Result<u64, CudaError> {
    if bytes == 0 {
        return Err(CudaError::BadRequest("zero-byte allocation".into()));
    }
    if !align.is_power_of_two() {
        return Err(CudaError::BadRequest(format!("alignment {align} is not a power of two")));
    }
    let align = align.max(DRIVER_ALIGNMENT);
    let extra = align - DRIVER_ALIGNMENT;
    let total = bytes
        .checked_add(extra)
        .ok_or_else(|| CudaError::BadRequest(format!("{bytes} bytes aligned to {align} overflow")))?;
    let r = table.releaser();
    r.ctx.bind_to_thread().map_err(|e| CudaError::driver("cuCtxSetCurrent", e, None))?;
    // SAFETY: a plain allocation of `total` > 0 bytes in the current context.
    let raw = unsafe { result::malloc_sync(total) }
        .map_err(|e| CudaError::driver("cuMemAlloc", e, Some((r.device, bytes))))?;
    let base = (raw + align as u64 - 1) & !(align as u64 - 1);
    if base + bytes as u64 > raw + total as u64 {
        r.release(base, total, raw);
        return Err(CudaError::BadRequest(format!("driver returned a misaligned block {raw:#x}")));
    }
    table.insert(base, bytes, raw)?;
    Ok(base)
}

/// `Backend::copy_to_device` of a non-empty `src`: into the range at `dst`, checked and
/// pinned for the copy, through the device's staging buffer.
pub(crate) fn upload(
    table: &Arc<AllocTable<CudaRelease>>,
    copies: &HostCopies,
    src: &[u8],
    dst: u64,
) -> Result<(), CudaError> {
    let _pins = table.pin(&[(dst, src.len())])?;
    copies.upload(src, dst)
}

/// `Backend::copy_to_host` of a non-empty `dst`, once its stream was synchronised: the
/// range at `src`, checked and pinned for the copy, through the staging buffer.
pub(crate) fn download(
    table: &Arc<AllocTable<CudaRelease>>,
    copies: &HostCopies,
    src: u64,
    dst: &mut [u8],
) -> Result<(), CudaError> {
    let _pins = table.pin(&[(src, dst.len())])?;
    copies.download(src, dst)
}

/// The opening checks of `Backend::copy_on_device` ([`AllocTable::check_copy`]):
/// `None` for a copy of zero bytes, both ranges otherwise.
pub(crate) fn check_copy(
    table: &AllocTable<CudaRelease>,
    src: u64,
    dst: u64,
    bytes: usize,
) -> Result<Option<CopyRanges>, CudaError> {
    table.check_copy(src, dst, bytes).map_err(|e| match e {
        CopyError::Overlap => CudaError::BadRequest("device copy ranges overlap".into()),
        CopyError::BadAddress(e) => e.into(),
    })
}

/// The device-to-device copy of `c`, for `Device::enqueue_bytes`, which pins both
/// ranges before it runs.
pub(crate) fn copy_async(c: CopyRanges) -> impl FnOnce(&CudaStream) -> Result<(), CudaError> {
    move |s| {
        // SAFETY: both ranges passed `check_copy` (inside live allocations, not
        // overlapping) and `enqueue_bytes` pinned them before queuing this.
        unsafe { result::memcpy_dtod_async(c.dst, c.src, c.bytes, s.cu_stream()) }.map_err(drv("cuMemcpyDtoDAsync"))
    }
}

/// A fill of `bytes` at `dst` with `value` (`Backend::memset`), for
/// `Device::enqueue_bytes`, which checks and pins the range before it runs.
pub(crate) fn fill_async(dst: u64, value: u8, bytes: usize) -> impl FnOnce(&CudaStream) -> Result<(), CudaError> {
    move |s| {
        // SAFETY: the range was validated and pinned by `enqueue_bytes`.
        unsafe { result::memset_d8_async(dst, value, bytes, s.cu_stream()) }.map_err(drv("cuMemsetD8Async"))
    }
}

/// A page-locked host buffer for asynchronous copies.
pub struct Pinned {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is plain host memory owned by this value; access goes through
// `&mut self` (the staging mutex), so moving it between threads is sound.
unsafe impl Send for Pinned {}

impl Pinned {
    pub fn new(ctx: Arc<CudaContext>, len: usize) -> Result<Pinned, CudaError> {
        ctx.bind_to_thread().map_err(|e| CudaError::driver("cuCtxSetCurrent", e, None))?;
        // SAFETY: allocates `len` > 0 bytes of pinned host memory (flags 0: portable off,
        // not mapped, not write-combined).
        let p = unsafe { result::malloc_host(len, 0) }.map_err(|e| CudaError::driver("cuMemHostAlloc", e, None))?;
        Ok(Pinned { ptr: p as *mut u8, len, ctx })
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// The buffer as bytes (only while no copy into or out of it is in flight).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `len` bytes owned by this value; `&mut self` makes the
        // slice the only reference, and callers synchronise in-flight copies first.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from `cuMemHostAlloc` and is freed once, here; no copy uses it
        // any more (every copy is synchronised before its call returns).
        if let Err(e) = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) } {
            log::error!("cuMemFreeHost failed: {e}");
        }
    }
}

/// A pinned buffer split in two halves, each with the event of the last copy through it.
struct Staging {
    buf: Pinned,
    events: [CudaEvent; 2],
}

/// A device's path for host<->device copies: the pinned staging buffer (made on first
/// use; pageable copies when it cannot be made) and the stream the copies run on.
pub(crate) struct HostCopies {
    staging: Mutex<Option<Staging>>,
    staging_bytes: usize,
    copy_stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    ordinal: usize,
}

impl HostCopies {
    pub(crate) fn new(
        ctx: Arc<CudaContext>,
        ordinal: usize,
        staging_bytes: usize,
        copy_stream: Arc<CudaStream>,
    ) -> Self {
        HostCopies { staging: Mutex::new(None), staging_bytes, copy_stream, ctx, ordinal }
    }

    fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))
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
    pub(crate) fn upload(&self, src: &[u8], dst: u64) -> std::result::Result<(), CudaError> {
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
    pub(crate) fn download(&self, src: u64, dst: &mut [u8]) -> std::result::Result<(), CudaError> {
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
