//! Raw device allocations, the table that checks every address handed to the backend
//! (rules (M1) and (M2) of the `Backend` contract), and pinned host staging buffers.

use crate::error::CudaError;
use cudarc::driver::{CudaContext, result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Alignment `cuMemAlloc` guarantees.
pub const DRIVER_ALIGNMENT: usize = 256;

struct Allocation {
    /// What `cuMemAlloc` returned (the key is this rounded up to the alignment).
    raw: u64,
    /// Usable bytes from the key.
    size: usize,
    /// Queued work currently using this allocation.
    pins: usize,
    /// `free` was called; the memory goes back once `pins` reaches 0.
    freed: bool,
}

/// All live allocations of one device.
pub struct AllocTable {
    map: Mutex<BTreeMap<u64, Allocation>>,
    device: usize,
    ctx: Arc<CudaContext>,
}

/// Keeps a set of allocations alive while queued work uses them; unpins on drop.
pub struct Pins {
    table: Arc<AllocTable>,
    bases: Vec<u64>,
}

impl Drop for Pins {
    fn drop(&mut self) {
        let mut release = Vec::new();
        {
            let mut m = self.table.lock();
            for b in &self.bases {
                let done = match m.get_mut(b) {
                    Some(a) => {
                        a.pins = a.pins.saturating_sub(1);
                        a.freed && a.pins == 0
                    }
                    None => false,
                };
                if done {
                    if let Some(a) = m.remove(b) {
                        release.push(a.raw);
                    }
                }
            }
        }
        for raw in release {
            self.table.release(raw);
        }
    }
}

/// Checks that `addr .. addr + len` lies inside one live block of `m` (keyed by base
/// address; `live_size` gives a block's size, or `None` once it is freed); returns the
/// block's base.
pub fn locate<V>(
    m: &BTreeMap<u64, V>,
    live_size: impl Fn(&V) -> Option<usize>,
    device: usize,
    addr: u64,
    len: usize,
) -> Result<u64, CudaError> {
    let bad = CudaError::BadAddress { device, addr, len };
    let (&base, v) = m.range(..=addr).next_back().ok_or(bad.clone())?;
    let end = addr.checked_add(len as u64).ok_or(bad.clone())?;
    match live_size(v) {
        Some(size) if end <= base + size as u64 => Ok(base),
        _ => Err(bad),
    }
}

impl AllocTable {
    pub fn new(device: usize, ctx: Arc<CudaContext>) -> AllocTable {
        AllocTable { map: Mutex::new(BTreeMap::new()), device, ctx }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Allocation>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, raw: u64) {
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

    /// Allocates `bytes` (> 0) aligned to `align` (a power of two).
    pub fn alloc(&self, bytes: usize, align: usize) -> Result<u64, CudaError> {
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
        self.ctx.bind_to_thread().map_err(|e| CudaError::driver("cuCtxSetCurrent", e, None))?;
        // SAFETY: a plain allocation of `total` > 0 bytes in the current context.
        let raw = unsafe { result::malloc_sync(total) }
            .map_err(|e| CudaError::driver("cuMemAlloc", e, Some((self.device, bytes))))?;
        let base = (raw + align as u64 - 1) & !(align as u64 - 1);
        if base + bytes as u64 > raw + total as u64 {
            self.release(raw);
            return Err(CudaError::BadRequest(format!("driver returned a misaligned block {raw:#x}")));
        }
        self.lock().insert(base, Allocation { raw, size: bytes, pins: 0, freed: false });
        Ok(base)
    }

    /// Frees an allocation, or defers it until the work using it is done.
    pub fn free(&self, base: u64) -> Result<(), CudaError> {
        let raw = {
            let mut m = self.lock();
            match m.get_mut(&base) {
                Some(a) if !a.freed => {
                    if a.pins > 0 {
                        a.freed = true;
                        return Ok(());
                    }
                    m.remove(&base).map(|a| a.raw)
                }
                _ => return Err(CudaError::BadAddress { device: self.device, addr: base, len: 0 }),
            }
        };
        if let Some(raw) = raw {
            self.release(raw);
        }
        Ok(())
    }

    /// Verifies every `(addr, len)` range and pins the allocations they fall in.
    /// Empty ranges are not checked.
    pub fn pin(self: &Arc<Self>, ranges: &[(u64, usize)]) -> Result<Pins, CudaError> {
        let mut m = self.lock();
        let mut bases = Vec::with_capacity(ranges.len());
        for &(addr, len) in ranges {
            if len == 0 {
                continue;
            }
            let base = locate(&m, |a: &Allocation| (!a.freed).then_some(a.size), self.device, addr, len)?;
            bases.push(base);
        }
        for b in &bases {
            if let Some(a) = m.get_mut(b) {
                a.pins += 1;
            }
        }
        Ok(Pins { table: self.clone(), bases })
    }

    /// Bytes currently allocated (including deferred frees).
    pub fn allocated_bytes(&self) -> usize {
        self.lock().values().map(|a| a.size).sum()
    }

    /// Live allocations.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for AllocTable {
    fn drop(&mut self) {
        let m = std::mem::take(&mut *self.lock());
        for (_, a) in m {
            self.release(a.raw);
        }
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
