//! Aligned host allocations and the table that checks every address handed to the
//! backend (safety rules (M1) and (M2) of the `Backend` contract).

use crate::error::CpuError;
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

struct Allocation {
    layout: Layout,
    /// Queued launches currently using this allocation.
    pins: usize,
    /// `free` was called; the memory goes back once `pins` reaches 0.
    freed: bool,
}

/// All live allocations of one logical device.
#[derive(Default)]
pub struct AllocTable {
    map: Mutex<BTreeMap<u64, Allocation>>,
    device: usize,
}

/// Keeps a set of allocations alive while a launch uses them; unpins on drop.
pub struct Pins {
    table: Arc<AllocTable>,
    bases: Vec<u64>,
}

impl Drop for Pins {
    fn drop(&mut self) {
        let mut m = self.table.lock();
        for b in &self.bases {
            let release = match m.get_mut(b) {
                Some(a) => {
                    a.pins -= 1;
                    a.freed && a.pins == 0
                }
                None => false,
            };
            if release {
                if let Some(a) = m.remove(b) {
                    dealloc(*b, a.layout);
                }
            }
        }
    }
}

fn dealloc(base: u64, layout: Layout) {
    // SAFETY: `base` was returned by `std::alloc::alloc` with exactly this layout (it is
    // the key of the entry that stored the layout) and is removed from the table here, so
    // it is deallocated once.
    unsafe { std::alloc::dealloc(base as *mut u8, layout) }
}

impl AllocTable {
    pub fn new(device: usize) -> AllocTable {
        AllocTable { map: Mutex::new(BTreeMap::new()), device }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Allocation>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates `bytes` aligned to `align` (power of two).
    pub fn alloc(&self, bytes: usize, align: usize) -> Result<u64, CpuError> {
        if bytes == 0 {
            return Err(CpuError::BadRequest("zero-byte allocation".into()));
        }
        let layout = Layout::from_size_align(bytes, align)
            .map_err(|e| CpuError::BadRequest(format!("{bytes} bytes aligned to {align}: {e}")))?;
        // SAFETY: the layout has a non-zero size (checked above).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(CpuError::AllocFailed { bytes, align });
        }
        self.lock().insert(p as u64, Allocation { layout, pins: 0, freed: false });
        Ok(p as u64)
    }

    /// Frees an allocation, or defers it until the launches using it are done.
    pub fn free(&self, base: u64) -> Result<(), CpuError> {
        let mut m = self.lock();
        match m.get_mut(&base) {
            Some(a) if !a.freed => {
                if a.pins == 0 {
                    if let Some(a) = m.remove(&base) {
                        dealloc(base, a.layout);
                    }
                } else {
                    a.freed = true;
                }
                Ok(())
            }
            _ => Err(CpuError::BadAddress { device: self.device, addr: base, len: 0 }),
        }
    }

    /// Checks that `addr .. addr + len` lies in one live allocation; returns its base.
    fn check(m: &BTreeMap<u64, Allocation>, device: usize, addr: u64, len: usize) -> Result<u64, CpuError> {
        let bad = CpuError::BadAddress { device, addr, len };
        let (&base, a) = m.range(..=addr).next_back().ok_or(bad.clone())?;
        let end = addr.checked_add(len as u64).ok_or(bad.clone())?;
        if a.freed || end > base + a.layout.size() as u64 {
            return Err(bad);
        }
        Ok(base)
    }

    /// Verifies every `(addr, len)` range and pins the allocations they fall in.
    /// Empty ranges (`len == 0`) are not checked.
    pub fn pin(self: &Arc<Self>, ranges: &[(u64, usize)]) -> Result<Pins, CpuError> {
        let mut m = self.lock();
        let mut bases = Vec::with_capacity(ranges.len());
        for &(addr, len) in ranges {
            if len == 0 {
                continue;
            }
            bases.push(Self::check(&m, self.device, addr, len)?);
        }
        for b in &bases {
            if let Some(a) = m.get_mut(b) {
                a.pins += 1;
            }
        }
        Ok(Pins { table: self.clone(), bases })
    }

    /// Bytes currently allocated.
    pub fn allocated_bytes(&self) -> usize {
        self.lock().values().map(|a| a.layout.size()).sum()
    }
}

impl Drop for AllocTable {
    fn drop(&mut self) {
        let m = std::mem::take(&mut *self.lock());
        for (b, a) in m {
            dealloc(b, a.layout);
        }
    }
}
