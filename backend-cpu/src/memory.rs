//! Aligned host allocations, recorded in each device's allocation table (the core's
//! [`AllocTable`](allocations::AllocTable), rules (M1) and (M2) of the `Backend`
//! contract) with the `Layout` that gives them back, and the copies, fills and host
//! mappings checked against that table.

use crate::CpuBackend;
use crate::error::CpuError;
use runtime::backend::allocations::{self, CopyError, Release};
use runtime::{Backend, DevicePtr, Result, StreamId};
use std::alloc::Layout;

/// Gives a host block back to the global allocator.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostMemory;

impl Release for HostMemory {
    type Record = Layout;

    fn release(&self, base: u64, _size: usize, layout: Layout) {
        // SAFETY: the table releases each block it was given exactly once, and [`alloc`]
        // gives it only blocks returned by `std::alloc::alloc` with exactly this layout,
        // stored as the block's record.
        unsafe { std::alloc::dealloc(base as *mut u8, layout) }
    }
}

/// All live allocations of one logical device.
pub type Table = allocations::AllocTable<HostMemory>;

/// Keeps the allocations of a queued copy or launch alive; unpins them on drop.
pub type Pins = allocations::Pins<HostMemory>;

/// An empty table for device `cpu:{device}`.
pub fn table(device: usize) -> Table {
    Table::new(format!("cpu:{device}"), HostMemory)
}

/// Allocates `bytes` aligned to `align` (power of two) and records the block in `table`.
pub fn alloc(table: &Table, bytes: usize, align: usize) -> std::result::Result<u64, CpuError> {
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
    table.insert(p as u64, bytes, layout)?;
    Ok(p as u64)
}

/// A device-to-device copy that [`Table::check_copy`] refused, as the backend's error.
fn copy_error(e: CopyError) -> CpuError {
    match e {
        CopyError::Overlap => CpuError::BadRequest("device copy ranges overlap".into()),
        CopyError::BadAddress(e) => e.into(),
    }
}

impl CpuBackend {
    /// `Backend::copy_to_device`: `src` into the checked range at `dst`, now.
    pub(crate) fn copy_in(&self, device: usize, src: &[u8], dst: DevicePtr) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let _pins = self.dev(device)?.table.pin(&[(dst.0, src.len())]).map_err(CpuError::from)?;
        // SAFETY: the destination range was validated and pinned just above; `src` is a
        // distinct host slice (device memory is never handed out as a Rust reference
        // outside a kernel or `map_host` call).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len()) };
        Ok(())
    }

    /// `Backend::copy_to_host`: the checked range at `src` into `dst`, once `stream` has
    /// finished its queued work.
    pub(crate) fn copy_out(&self, device: usize, src: DevicePtr, dst: &mut [u8], stream: StreamId) -> Result<()> {
        if let Some(q) = self.queue(device, stream)? {
            q.queue.synchronize()?;
        }
        if dst.is_empty() {
            return Ok(());
        }
        let _pins = self.dev(device)?.table.pin(&[(src.0, dst.len())]).map_err(CpuError::from)?;
        // SAFETY: the source range was validated and pinned just above; `dst` is a
        // distinct, exclusively borrowed host slice.
        unsafe { std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// `Backend::copy_on_device`: run now (default stream) or queued, the ranges pinned
    /// until it has run.
    pub(crate) fn copy_within(
        &self,
        device: usize,
        src: DevicePtr,
        dst: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()> {
        let table = &self.dev(device)?.table;
        let Some(c) = table.check_copy(src.0, dst.0, bytes).map_err(copy_error)? else { return Ok(()) };
        let pins = table.pin(&c.ranges()).map_err(CpuError::from)?;
        self.submit(
            device,
            stream,
            Box::new(move || {
                let _pins = pins;
                // SAFETY: both ranges passed `check_copy` (inside live allocations, not
                // overlapping) and were pinned when the copy was queued.
                unsafe { std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.0 as *mut u8, bytes) };
                Ok(())
            }),
        )
    }

    /// `Backend::memset`: run now (default stream) or queued, the range pinned until it
    /// has run.
    pub(crate) fn fill(&self, device: usize, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let pins = self.dev(device)?.table.pin(&[(dst.0, bytes)]).map_err(CpuError::from)?;
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

    /// `Backend::map_host`: `f` on the checked range, after the device's queued work.
    pub(crate) fn map_range(
        &self,
        device: usize,
        ptr: DevicePtr,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool> {
        self.synchronize_device(device)?;
        if len == 0 {
            f(&mut []);
            return Ok(true);
        }
        let _pins = self.dev(device)?.table.pin(&[(ptr.0, len)]).map_err(CpuError::from)?;
        // SAFETY: the range was validated and is pinned for the duration of `f`; device
        // work queued before this call has finished (synchronised above).
        let bytes = unsafe { std::slice::from_raw_parts_mut(ptr.0 as *mut u8, len) };
        f(bytes);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::sync::Arc;

    #[test]
    fn a_freed_block_goes_back_after_its_last_pin_and_bad_addresses_keep_their_source() {
        let t = Arc::new(table(3));
        let a = alloc(&t, 100, 64).unwrap();
        assert_eq!(a % 64, 0);
        let pins = t.pin(&[(a, 100)]).unwrap();
        t.free(a).unwrap();
        assert_eq!(t.len(), 1, "still pinned");
        let e = CpuError::from(t.free(a).unwrap_err());
        assert_eq!(e.to_string(), format!("address range {a:#x}+0 is not inside a live allocation of cpu:3"));
        assert!(e.source().is_some_and(|s| s.is::<allocations::BadAddress>()));
        drop(pins);
        assert!(t.is_empty());
        assert!(matches!(alloc(&t, 0, 16), Err(CpuError::BadRequest(_))));
        assert!(matches!(alloc(&t, 16, 3), Err(CpuError::BadRequest(_))));
    }
}
