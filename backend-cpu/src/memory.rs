//! Aligned host allocations, recorded in each device's allocation table (the core's
//! [`AllocTable`](allocations::AllocTable), rules (M1) and (M2) of the `Backend`
//! contract) with the `Layout` that gives them back, and the copies, fills and host
//! mappings checked against that table.

use crate::error::CpuError;
use crate::stream::Job;
use runtime::backend::allocations::{self, CopyError, Release};
use runtime::{DevicePtr, HostRange};
use std::alloc::Layout;
use std::sync::Arc;

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
    if !align.is_power_of_two() {
        return Err(CpuError::BadRequest(format!("{bytes} bytes aligned to {align}: not a power of two")));
    }
    let huge = bytes >= HUGE_PAGE;
    let align = if huge { align.max(HUGE_PAGE) } else { align };
    let layout = Layout::from_size_align(bytes, align)
        .map_err(|e| CpuError::BadRequest(format!("{bytes} bytes aligned to {align}: {e}")))?;
    // SAFETY: the layout has a non-zero size (checked above).
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        return Err(CpuError::AllocFailed { bytes, align });
    }
    if huge {
        advise_huge_pages(p, bytes);
    }
    table.insert(p as u64, bytes, layout)?;
    Ok(p as u64)
}

/// Blocks of at least this size start on a 2 MiB boundary and ask for transparent huge
/// pages: weights and activations streamed by the GEMMs then cost one TLB entry per 2 MiB
/// instead of 512, and the speed no longer depends on where the allocator placed them
/// (the f32 macro-kernel with B streamed from a 256 MiB buffer, one thread, thread CPU
/// time on Sapphire Rapids: 2-3 % faster on huge pages at 32 and 128 rows,
/// `gemm_packed::rate` test `streaming_b_against_plain_b`).
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back `[p, p + bytes)` with transparent huge pages where its policy is
/// `madvise` (a hint: a refusal is logged, never an error).
fn advise_huge_pages(p: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        let len = bytes & !(HUGE_PAGE - 1);
        // SAFETY: `[p, p + len)` lies inside the block just allocated (len ≤ bytes) and
        // `p` is 2 MiB-aligned; MADV_HUGEPAGE changes no contents and no mapping rights.
        let rc = unsafe { libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE) };
        if rc != 0 {
            log::debug!("madvise(MADV_HUGEPAGE) of {len} bytes: {}", std::io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, bytes);
}

/// A device-to-device copy that [`Table::check_copy`] refused, as the backend's error.
fn copy_error(e: CopyError) -> CpuError {
    match e {
        CopyError::Overlap => CpuError::BadRequest("device copy ranges overlap".into()),
        CopyError::BadAddress(e) => e.into(),
    }
}

/// `Backend::copy_to_device`: `src` into the checked range at `dst`, now.
pub(crate) fn copy_in(table: &Arc<Table>, src: &[u8], dst: u64) -> Result<(), CpuError> {
    if src.is_empty() {
        return Ok(());
    }
    let _pins = table.pin_writing(&[], &[(dst, src.len())])?;
    // SAFETY: the destination range was validated and pinned just above; `src` is a
    // distinct host slice (device memory is never handed out as a Rust reference
    // outside a kernel or `map_host` call).
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
    Ok(())
}

/// `Backend::copy_to_host`, once the stream has finished its queued work: the checked
/// range at `src` into `dst`.
pub(crate) fn copy_out(table: &Arc<Table>, src: u64, dst: &mut [u8]) -> Result<(), CpuError> {
    if dst.is_empty() {
        return Ok(());
    }
    let _pins = table.pin(&[(src, dst.len())])?;
    // SAFETY: the source range was validated and pinned just above; `dst` is a
    // distinct, exclusively borrowed host slice.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
    Ok(())
}

/// `Backend::copy_on_device`: the copy as a job to run now (default stream) or to queue,
/// its ranges checked by [`Table::check_copy`] and pinned until it has run; `None` for
/// zero bytes.
pub(crate) fn copy_on_device(table: &Arc<Table>, src: u64, dst: u64, bytes: usize) -> Result<Option<Job>, CpuError> {
    let Some(c) = table.check_copy(src, dst, bytes).map_err(copy_error)? else { return Ok(None) };
    let pins = table.pin_writing(&[(c.src, bytes)], &[(c.dst, bytes)])?;
    Ok(Some(Box::new(move || {
        let _pins = pins;
        // SAFETY: both ranges passed `check_copy` (inside live allocations, not
        // overlapping) and were pinned when the copy was queued.
        unsafe { std::ptr::copy_nonoverlapping(c.src as *const u8, c.dst as *mut u8, c.bytes) };
        Ok(())
    })))
}

/// `Backend::memset`: the fill as a job to run now (default stream) or to queue, the
/// range pinned until it has run; `None` for zero bytes.
pub(crate) fn fill(table: &Arc<Table>, dst: u64, value: u8, bytes: usize) -> Result<Option<Job>, CpuError> {
    if bytes == 0 {
        return Ok(None);
    }
    let pins = table.pin_writing(&[], &[(dst, bytes)])?;
    Ok(Some(Box::new(move || {
        let _pins = pins;
        // SAFETY: the range was validated and pinned when the fill was queued.
        unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
        Ok(())
    })))
}

/// `Backend::map_host`, once the device's queued work has finished: `f` on the checked
/// range.
pub(crate) fn map(table: &Arc<Table>, ptr: u64, len: usize, f: &mut dyn FnMut(&mut [u8])) -> Result<(), CpuError> {
    if len == 0 {
        f(&mut []);
        return Ok(());
    }
    let _pins = table.pin_writing(&[], &[(ptr, len)])?;
    // SAFETY: the range was validated and is pinned for the duration of `f`; device
    // work queued before this call has finished (the caller synchronised).
    let bytes = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
    f(bytes);
    Ok(())
}

/// `Backend::with_host_ranges`: lends `ranges` to the device (`table`) while `f` runs.
/// The ranges leave the table before this returns, even when `f` fails or panics: the
/// guard's drop ends each loan (no new pin from then on) and waits for the launches still
/// pinning one (work queued by `f` on a user stream and not synchronised, say).
pub(crate) fn lend(
    table: &Arc<Table>,
    ranges: &mut [HostRange<'_>],
    f: &mut dyn FnMut(&[DevicePtr]) -> runtime::Result<()>,
) -> runtime::Result<()> {
    // Lent one by one: a range overlapping an earlier one is refused as overlapping a live
    // loan, and the guard ends the loans made so far.
    let mut loan = Loan { table, loans: Vec::with_capacity(ranges.len()) };
    let mut ptrs = Vec::with_capacity(ranges.len());
    for r in ranges.iter_mut() {
        // A written range's address comes from its exclusive borrow, so that the writes
        // made through it later are derived from a pointer that may write.
        let (base, len, writable) = match r {
            HostRange::Read(b) => (b.as_ptr() as u64, b.len(), false),
            HostRange::Write(b) => (b.as_mut_ptr() as u64, b.len(), true),
        };
        if len == 0 {
            ptrs.push(DevicePtr::NULL);
            continue;
        }
        let end = table.lend_tracked(base, len, writable).map_err(CpuError::from)?;
        loan.loans.push((base, end));
        ptrs.push(DevicePtr(base));
    }
    let r = f(&ptrs);
    drop(loan);
    r
}

/// The ranges of one `lend` call: their loans end when it drops, once no launch pins them.
struct Loan<'a> {
    table: &'a Arc<Table>,
    loans: Vec<(u64, Arc<allocations::LoanEnd>)>,
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        let mut ended = Vec::with_capacity(self.loans.len());
        for (b, end) in self.loans.drain(..) {
            match self.table.end_loan(b) {
                Ok(()) => ended.push(end),
                Err(e) => log::error!("ending a host loan: {e}"),
            }
        }
        // A pin is held by a launch while it runs (or waits in a queue): the range is
        // touched by no one once its last pin is gone, which wakes this loan's waiter
        // (and no other loan's).
        for end in ended {
            end.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

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
        // A block of 2 MiB or more starts on a huge-page boundary, and goes back with the
        // layout it was given.
        let big = alloc(&t, HUGE_PAGE + 100, 64).unwrap();
        assert_eq!(big % HUGE_PAGE as u64, 0);
        t.free(big).unwrap();
        assert!(t.is_empty());
    }
    #[test]
    fn host_ranges_are_lent_for_the_call_only_and_read_ranges_are_never_written() {
        use runtime::{Backend, StreamId};
        let b = crate::CpuBackend::new(crate::CpuConfig::default()).unwrap();
        let input = vec![7u8; 64];
        let mut output = vec![0u8; 64];
        let s = b.default_stream(0);
        let mut seen = Vec::new();
        let mut ranges = [HostRange::Read(&input), HostRange::Write(&mut output), HostRange::Read(&[])];
        b.with_host_ranges(0, &mut ranges, &mut |p| {
            seen = p.to_vec();
            assert_eq!(p[2], DevicePtr::NULL, "an empty range has no address");
            let (i, o) = (p[0], p[1]);
            // The lent ranges are memory of the device: a queued copy reads one and writes the other.
            b.copy_on_device(0, i, o, 64, s)?;
            let mut back = [0u8; 8];
            b.copy_to_host(0, o.offset(8), &mut back, s)?;
            assert_eq!(back, [7; 8]);
            // The input is only read.
            assert!(b.copy_to_device(0, &[1, 2], i).is_err(), "a copy into a read range");
            assert!(b.memset(0, i, 0, 4, s).is_err(), "a fill of a read range");
            assert!(b.copy_on_device(0, o, i, 8, s).is_err(), "a device copy into a read range");
            assert!(b.map_host(0, i, 4, &mut |_| {}).is_err(), "a mutable mapping of a read range");
            assert!(b.map_host(0, o, 4, &mut |m| m[0] = 9)?, "the written range maps");
            // A range that is not the lent bytes.
            assert!(b.copy_to_host(0, o.offset(60), &mut [0u8; 8], s).is_err(), "past the range");
            Ok(())
        })
        .unwrap();
        assert_eq!(output[0], 9);
        assert_eq!(&output[1..], &input[1..]);
        // After the call the addresses are no memory of the device.
        let mut back = [0u8; 4];
        assert!(b.copy_to_host(0, seen[0], &mut back, StreamId(0)).is_err(), "the loan ended");
        assert!(b.copy_to_host(0, seen[1], &mut back, StreamId(0)).is_err(), "the loan ended");
        // A failing `f` still ends the loans, and its error comes back.
        let e = b
            .with_host_ranges(0, &mut [HostRange::Read(&input)], &mut |_| Err(runtime::Error::Unsupported("f".into())))
            .unwrap_err();
        assert!(matches!(e, runtime::Error::Unsupported(_)), "{e}");
        // Overlapping ranges, or a range inside an allocation, are refused; nothing stays lent.
        let e = b
            .with_host_ranges(0, &mut [HostRange::Read(&input), HostRange::Read(&input[8..16])], &mut |_| Ok(()))
            .unwrap_err();
        assert!(e.to_string().contains("overlaps memory cpu:0 already holds"), "{e}");
        let a = b.alloc(0, 64, 64).unwrap();
        b.with_host_ranges(0, &mut [HostRange::Read(&input)], &mut |_| Ok(())).unwrap();
        b.map_host(0, a, 64, &mut |m| {
            let inner = &m[8..16];
            let e = b.with_host_ranges(0, &mut [HostRange::Read(inner)], &mut |_| Ok(())).unwrap_err();
            assert!(e.to_string().contains("overlaps"), "{e}");
        })
        .unwrap();
        b.free(0, a).unwrap();
    }

    #[test]
    fn a_loan_ends_only_after_the_queued_work_that_pins_it_has_run() {
        use runtime::Backend;
        let b = crate::CpuBackend::new(crate::CpuConfig::default()).unwrap();
        let s = b.create_stream(0).unwrap();
        let dst = b.alloc(0, 1 << 20, 64).unwrap();
        for round in 0..20u8 {
            let input = vec![round; 1 << 20];
            let mut output = vec![0u8; 1 << 20];
            b.with_host_ranges(0, &mut [HostRange::Read(&input), HostRange::Write(&mut output)], &mut |p| {
                // Queued on a user stream and not synchronised: the loans stay until both copies ran.
                b.copy_on_device(0, p[0], dst, 1 << 20, s)?;
                b.copy_on_device(0, dst, p[1], 1 << 20, s)?;
                Ok(())
            })
            .unwrap();
            assert!(output.iter().all(|&x| x == round), "round {round}: the queued copies had run");
        }
        b.destroy_stream(0, s).unwrap();
        b.free(0, dst).unwrap();
    }
}
