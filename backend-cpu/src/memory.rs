//! Aligned host allocations, recorded in each device's allocation table (the core's
//! [`AllocTable`](allocations::AllocTable), rules (M1) and (M2) of the `Backend`
//! contract) with the record ([`Block`]) that gives them back, and the copies, fills and host
//! mappings checked against that table.

use crate::error::CpuError;
use crate::stream::Job;
use runtime::backend::allocations::{self, CopyError, Release};
use runtime::{DevicePtr, HostRange};
use std::alloc::Layout;
use std::sync::Arc;

/// Gives a host block back: to the global allocator, or (a large block on Linux) to the
/// kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostMemory;

/// How a block was obtained, kept as its record in the table so that it goes back the
/// same way. Plain data: `Send + Sync`.
#[derive(Clone, Copy, Debug)]
pub enum Block {
    /// From `std::alloc::alloc` with this layout.
    Heap(Layout),
    /// A private anonymous mapping of its own (`mmap`), `len` bytes from `start`.
    Mapped { start: usize, len: usize },
}

impl Release for HostMemory {
    type Record = Block;

    fn release(&self, base: u64, _size: usize, block: Block) {
        match block {
            // SAFETY: the table releases each block it was given exactly once, and
            // [`alloc`] records `Heap` only for blocks returned by `std::alloc::alloc`
            // with exactly this layout.
            Block::Heap(layout) => unsafe { std::alloc::dealloc(base as *mut u8, layout) },
            Block::Mapped { start, len } => unmap(start, len),
        }
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
    if bytes >= HUGE_PAGE
        && let Some((p, block)) = map_huge(bytes, align)
    {
        table.insert(p, bytes, block)?;
        return Ok(p);
    }
    let layout = Layout::from_size_align(bytes, align)
        .map_err(|e| CpuError::BadRequest(format!("{bytes} bytes aligned to {align}: {e}")))?;
    // SAFETY: the layout has a non-zero size (checked above).
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        return Err(CpuError::AllocFailed { bytes, align });
    }
    table.insert(p as u64, bytes, Block::Heap(layout))?;
    Ok(p as u64)
}

/// Blocks of at least this size get a mapping of their own that starts on a 2 MiB
/// boundary and asks for transparent huge pages before any page is touched: weights and
/// activations streamed by the kernels then cost one TLB entry per 2 MiB instead of 512,
/// and the hardware prefetchers are not stopped at every 4 KiB page boundary.
///
/// The mapping must be fresh. A block from the global allocator may reuse memory that an
/// earlier, freed block had already faulted in as 4 KiB pages (glibc serves blocks up to
/// its dynamic mmap threshold, 32 MiB, from such memory), and `madvise` does not convert
/// pages that are already there. Before this, about a quarter of qwen2-0.5b's f32 weights
/// sat on 4 KiB pages, and the decode kernel streams a packed weight 14–17 % slower from
/// those (AMD EPYC Zen 3, AVX2, two threads: 24.7–25.1 against 28.2–29.4 GB/s, medians of
/// 40 alternated calls over four 35 MB weights of each kind).
const HUGE_PAGE: usize = 2 << 20;

/// A fresh private anonymous mapping of `bytes` (≥ [`HUGE_PAGE`]) aligned to `align` and
/// to 2 MiB, advised to use transparent huge pages; `None` where the system has no such
/// mapping or refuses it (the caller falls back to the global allocator).
#[cfg(target_os = "linux")]
fn map_huge(bytes: usize, align: usize) -> Option<(u64, Block)> {
    // SAFETY: sysconf reads a constant of the system.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|p| p.is_power_of_two())?;
    let align = align.max(HUGE_PAGE).max(page);
    let used = bytes.checked_next_multiple_of(page)?;
    // Over-map by the alignment, then give back the ends outside the aligned block.
    let len = used.checked_add(align)?;
    // SAFETY: a new private anonymous mapping at an address of the kernel's choosing;
    // it touches no existing memory.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        log::debug!("mmap of {len} bytes: {}", std::io::Error::last_os_error());
        return None;
    }
    let raw = raw as usize;
    let start = raw.next_multiple_of(align);
    // Both ends are whole pages of the mapping just made (4 KiB or, on some arm64
    // kernels, 64 KiB): mmap returns a page-aligned address, `align` is a multiple of the
    // page, and `used` is whole pages.
    unmap(raw, start - raw);
    unmap(start + used, raw + len - (start + used));
    let huge = bytes & !(HUGE_PAGE - 1);
    // SAFETY: `[start, start + huge)` lies in the mapping just made (huge ≤ used) and no
    // page of it has been touched; MADV_HUGEPAGE changes no contents and no rights.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, huge, libc::MADV_HUGEPAGE) };
    if rc != 0 {
        log::debug!("madvise(MADV_HUGEPAGE) of {huge} bytes: {}", std::io::Error::last_os_error());
    }
    Some((start as u64, Block::Mapped { start, len: used }))
}

#[cfg(not(target_os = "linux"))]
fn map_huge(_bytes: usize, _align: usize) -> Option<(u64, Block)> {
    None
}

/// Unmaps `[start, start + len)`, whole pages of a mapping made by [`map_huge`] (nothing
/// for `len` 0). A failure is logged: the range stays mapped, which leaks but is safe.
fn unmap(start: usize, len: usize) {
    if len == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the range is whole pages of a mapping `map_huge` made, which no live
        // block or reference covers any more (the table released it, or it was never
        // handed out).
        let rc = unsafe { libc::munmap(start as *mut libc::c_void, len) };
        if rc != 0 {
            log::warn!("munmap of {len} bytes at {start:#x}: {}", std::io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = start;
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
        // A block of 2 MiB or more starts on a huge-page boundary (or a larger alignment
        // asked for), and goes back the way it came.
        let big = alloc(&t, HUGE_PAGE + 100, 64).unwrap();
        assert_eq!(big % HUGE_PAGE as u64, 0);
        let wide = alloc(&t, HUGE_PAGE, 8 * HUGE_PAGE).unwrap();
        assert_eq!(wide % (8 * HUGE_PAGE) as u64, 0);
        t.free(big).unwrap();
        t.free(wide).unwrap();
        assert!(t.is_empty());
    }

    /// Pages of `[p, p + len)` resident in memory (Linux `mincore`).
    #[cfg(target_os = "linux")]
    fn resident_pages(p: u64, len: usize) -> usize {
        let pages = len.div_ceil(4096);
        let mut v = vec![0u8; pages];
        // SAFETY: `[p, p + len)` is a live mapped block of the caller's; `v` has one byte
        // per page.
        let rc = unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        v.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// A large block is never memory an earlier block had faulted in (which would keep
    /// its 4 KiB pages whatever the advice), and where the kernel gives transparent
    /// huge pages on request, its whole 2 MiB pages are huge ones once written.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_blocks_are_fresh_mappings_backed_by_huge_pages() {
        let t = table(0);
        let len = 3 * HUGE_PAGE + 4096;
        for _ in 0..3 {
            let a = alloc(&t, len, 4096).unwrap();
            assert_eq!(resident_pages(a, len), 0, "a new block of {len} bytes came with resident pages");
            // SAFETY: `[a, a + len)` is the block just allocated, owned by this test.
            unsafe { std::ptr::write_bytes(a as *mut u8, 1, len) };
            assert_eq!(resident_pages(a, len), len / 4096);
            t.free(a).unwrap();
        }
        let policy = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if !(policy.contains("[madvise]") || policy.contains("[always]")) {
            println!("skipped the huge-page check: transparent huge pages are {:?} here", policy.trim());
            return;
        }
        let fallbacks = || -> Option<u64> {
            let s = std::fs::read_to_string("/proc/vmstat").ok()?;
            s.lines().find_map(|l| l.strip_prefix("thp_fault_fallback ")).and_then(|v| v.trim().parse().ok())
        };
        let before = fallbacks();
        let a = alloc(&t, len, 64).unwrap();
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(a as *mut u8, 1, len) };
        let huge_kib = huge_kib_at(a);
        t.free(a).unwrap();
        if huge_kib < 3 * 2048 && fallbacks() != before {
            println!("skipped the huge-page check: the kernel fell back to small pages (no free huge page)");
            return;
        }
        assert!(huge_kib >= 3 * 2048, "{huge_kib} KiB of huge pages under a block of {len} bytes");
    }

    /// `AnonHugePages` (KiB) of the mapping of this process that contains `addr`.
    #[cfg(target_os = "linux")]
    fn huge_kib_at(addr: u64) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((lo, hi)) = line.split_whitespace().next().and_then(|r| r.split_once('-'))
                && let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
                continue;
            }
            if inside && let Some(v) = line.strip_prefix("AnonHugePages:") {
                return v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            }
        }
        0
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
