//! The bookkeeping every backend needs for rules (M1)–(M3) of the [`crate::Backend`]
//! contract, written once: the table of a device's live allocations, the pins that keep
//! an allocation alive while queued work uses it, and the overlap check of a launch's
//! operands.
//!
//! The table does not allocate: a backend allocates, then [`AllocTable::insert`]s the
//! block with whatever it needs to give it back (a `Layout`, the driver's raw pointer).
//! The table calls [`Release::release`] exactly once per inserted block: when it is freed
//! and unpinned, or when the table is dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use thiserror::Error;

/// How a backend gives a block back to its allocator.
///
/// The table calls `release` once per block it was given, after the block was freed
/// and no [`Pins`] hold it any more (or when the table is dropped), never while the
/// table's lock is held. `release` is therefore free to call the driver.
pub trait Release: Send + Sync {
    /// What the backend keeps per block to give it back.
    type Record: Send;
    fn release(&self, base: u64, size: usize, record: Self::Record);
}

/// An address range that is not inside one live allocation of the device, or a free of
/// an address that is not a live allocation's base.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("address range {addr:#x}+{len} is not inside a live allocation of {device}")]
pub struct BadAddress {
    pub device: String,
    pub addr: u64,
    pub len: usize,
}

struct Entry<R> {
    size: usize,
    /// Queued launches currently using this block.
    pins: usize,
    /// `free` was called; the block goes back once `pins` reaches 0.
    freed: bool,
    /// `None` for a lent range ([`AllocTable::lend`]): nothing to give back.
    record: Option<R>,
    /// A lent range that may only be read ([`AllocTable::check_writable`]).
    read_only: bool,
    /// A lent range's end, signalled when the entry leaves the table
    /// ([`AllocTable::lend_tracked`]).
    loan: Option<Arc<LoanEnd>>,
}

impl<R> Entry<R> {
    /// Called once the entry has left the table: wakes whoever waits for its loan's end.
    fn gone(&self) {
        if let Some(l) = &self.loan {
            l.finish();
        }
    }
}

/// The end of one loan ([`AllocTable::lend_tracked`]): [`LoanEnd::wait`] returns once the
/// lent range has left the table (its loan ended and the last launch pinning it is done),
/// waking on that range's own last unpin rather than polling the table. `Send + Sync`.
#[derive(Debug, Default)]
pub struct LoanEnd {
    gone: Mutex<bool>,
    cv: Condvar,
}

impl LoanEnd {
    fn finish(&self) {
        *self.gone.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }

    /// Blocks until the range has left the table. Call it only after
    /// [`AllocTable::end_loan`] succeeded for the range (or the table is dropping):
    /// before that the range may stay lent for ever.
    pub fn wait(&self) {
        let g = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        drop(self.cv.wait_while(g, |gone| !*gone).unwrap_or_else(|p| p.into_inner()));
    }

    /// True once the range has left the table.
    pub fn is_gone(&self) -> bool {
        *self.gone.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The live allocations of one device, keyed by base address.
///
/// `Send + Sync`: every method takes `&self` and holds one internal lock for the
/// duration of its bookkeeping; concurrent `insert`, `free`, `pin` and `locate` calls
/// from many threads are serialised and each sees a consistent table.
pub struct AllocTable<R: Release> {
    map: Mutex<BTreeMap<u64, Entry<R::Record>>>,
    device: String,
    releaser: R,
}

/// Keeps the allocations of one launch alive; unpins them on drop (and releases the
/// ones that were freed meanwhile). `Send + Sync`.
pub struct Pins<R: Release> {
    table: Arc<AllocTable<R>>,
    bases: Vec<u64>,
}

impl<R: Release> AllocTable<R> {
    /// An empty table for the device labelled `device` (e.g. `cpu:0`).
    pub fn new(device: impl Into<String>, releaser: R) -> AllocTable<R> {
        AllocTable { map: Mutex::new(BTreeMap::new()), device: device.into(), releaser }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Entry<R::Record>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bad(&self, addr: u64, len: usize) -> BadAddress {
        BadAddress { device: self.device.clone(), addr, len }
    }

    /// The releaser given to [`new`](Self::new).
    pub fn releaser(&self) -> &R {
        &self.releaser
    }

    /// Records a block of `size` usable bytes at `base`, just allocated by the backend.
    /// A `base` already in the table (which an allocator never hands out twice) is
    /// refused, and `record` is released at once.
    pub fn insert(&self, base: u64, size: usize, record: R::Record) -> Result<(), BadAddress> {
        let mut m = self.lock();
        if m.contains_key(&base) {
            drop(m);
            self.releaser.release(base, size, record);
            return Err(self.bad(base, size));
        }
        m.insert(base, Entry { size, pins: 0, freed: false, record: Some(record), read_only: false, loan: None });
        Ok(())
    }

    /// Frees the block at `base`: released now, or once the launches pinning it are done.
    pub fn free(&self, base: u64) -> Result<(), BadAddress> {
        let mut m = self.lock();
        let now = match m.get_mut(&base) {
            Some(e) if !e.freed && e.record.is_some() => {
                e.freed = true;
                e.pins == 0
            }
            _ => return Err(self.bad(base, 0)),
        };
        let taken = if now { m.remove(&base) } else { None };
        drop(m);
        if let Some(Entry { size, record: Some(r), .. }) = taken {
            self.releaser.release(base, size, r);
        }
        Ok(())
    }

    fn locate_in(&self, m: &BTreeMap<u64, Entry<R::Record>>, addr: u64, len: usize) -> Result<u64, BadAddress> {
        let (&base, e) = m.range(..=addr).next_back().ok_or_else(|| self.bad(addr, len))?;
        let end = addr.checked_add(len as u64).ok_or_else(|| self.bad(addr, len))?;
        let limit = base.checked_add(e.size as u64).ok_or_else(|| self.bad(addr, len))?;
        if e.freed || end > limit {
            return Err(self.bad(addr, len));
        }
        Ok(base)
    }

    /// The base of the live block that holds all of `addr .. addr + len` (rule M1).
    pub fn locate(&self, addr: u64, len: usize) -> Result<u64, BadAddress> {
        let m = self.lock();
        self.locate_in(&m, addr, len)
    }

    /// Checks every `(addr, len)` range (rule M1) and pins the blocks they fall in
    /// (rule M2) until the returned [`Pins`] is dropped. Empty ranges are not checked.
    /// Nothing is pinned when any range fails.
    pub fn pin(self: &Arc<Self>, ranges: &[(u64, usize)]) -> Result<Pins<R>, BadAddress> {
        self.pin_writing(ranges, &[])
    }

    /// Usable bytes of the live (not yet freed) blocks.
    pub fn allocated_bytes(&self) -> usize {
        self.lock().values().filter(|e| !e.freed).map(|e| e.size).sum()
    }

    /// Blocks in the table, including freed ones still pinned.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Why [`AllocTable::lend`] or [`AllocTable::end_loan`] refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LoanError {
    #[error("a lent range {addr:#x}+{len} of {device} is empty or runs past the address space")]
    Empty { device: String, addr: u64, len: usize },
    #[error("the lent range {addr:#x}+{len} overlaps memory {device} already holds (an allocation or a live loan)")]
    Overlap { device: String, addr: u64, len: usize },
    #[error("{addr:#x} is not the start of a range lent to {device} (its loan ended, or it never began)")]
    NotLent { device: String, addr: u64 },
}

/// Lent ranges: host memory the backend did not allocate (an application's buffers),
/// recorded for a while so that copies, launches and host mappings may name it like an
/// allocation (rules M1, M2). A lent range releases nothing when it goes.
impl<R: Release> AllocTable<R> {
    /// Records `size` bytes at `base`, lent by their owner; `writable` says whether work
    /// may write them. Refused when the range is empty, wraps the address space, or
    /// overlaps a block or a lent range in the table.
    pub fn lend(&self, base: u64, size: usize, writable: bool) -> Result<(), LoanError> {
        self.lend_tracked(base, size, writable).map(drop)
    }

    /// [`lend`](Self::lend), returning the loan's [`LoanEnd`]: after
    /// [`end_loan`](Self::end_loan), its `wait` returns once the last pin of this range
    /// is gone.
    pub fn lend_tracked(&self, base: u64, size: usize, writable: bool) -> Result<Arc<LoanEnd>, LoanError> {
        let device = || self.device.clone();
        let end = base.checked_add(size as u64).filter(|_| size > 0).ok_or_else(|| LoanError::Empty {
            device: device(),
            addr: base,
            len: size,
        })?;
        let mut m = self.lock();
        let before = m.range(..end).next_back().is_some_and(|(&b, e)| b.saturating_add(e.size as u64) > base);
        if before {
            return Err(LoanError::Overlap { device: device(), addr: base, len: size });
        }
        let end = Arc::new(LoanEnd::default());
        m.insert(
            base,
            Entry { size, pins: 0, freed: false, record: None, read_only: !writable, loan: Some(end.clone()) },
        );
        Ok(end)
    }

    /// Ends the loan of the range at `base`: no new pin is taken on it from now on, and it
    /// leaves the table once the launches pinning it are done ([`AllocTable::holds`] says
    /// when). Refused for an address that is not a lent range's base.
    pub fn end_loan(&self, base: u64) -> Result<(), LoanError> {
        let mut m = self.lock();
        match m.get_mut(&base) {
            Some(e) if e.record.is_none() && !e.freed => {
                e.freed = true;
                if e.pins == 0
                    && let Some(e) = m.remove(&base)
                {
                    e.gone();
                }
                Ok(())
            }
            _ => Err(LoanError::NotLent { device: self.device.clone(), addr: base }),
        }
    }

    /// True while an entry (a block, or a lent range still pinned) starts at `base`.
    pub fn holds(&self, base: u64) -> bool {
        self.lock().contains_key(&base)
    }

    /// Refuses a non-empty range that lies in a read-only lent range: the destination of a
    /// copy or fill, a launch's output, or a host mapping (which hands out `&mut` bytes).
    pub fn check_writable(&self, ranges: &[(u64, usize)]) -> Result<(), BadAddress> {
        let m = self.lock();
        self.check_writable_in(&m, ranges)
    }

    fn check_writable_in(
        &self,
        m: &BTreeMap<u64, Entry<R::Record>>,
        ranges: &[(u64, usize)],
    ) -> Result<(), BadAddress> {
        for &(addr, len) in ranges.iter().filter(|r| r.1 > 0) {
            let hit = m
                .range(..=addr)
                .next_back()
                .is_some_and(|(&b, e)| e.read_only && addr < b.saturating_add(e.size as u64));
            if hit {
                return Err(self.bad(addr, len));
            }
        }
        Ok(())
    }

    /// [`pin`](Self::pin) of `reads` and `writes` together, refusing (as
    /// [`check_writable`](Self::check_writable)) a write range in a read-only lent range,
    /// all under one hold of the table's lock: no loan can begin or end between the
    /// check and the pin. Nothing is pinned when any range fails.
    pub fn pin_writing(
        self: &Arc<Self>,
        reads: &[(u64, usize)],
        writes: &[(u64, usize)],
    ) -> Result<Pins<R>, BadAddress> {
        let mut m = self.lock();
        self.check_writable_in(&m, writes)?;
        let mut bases = Vec::with_capacity(reads.len() + writes.len());
        for &(addr, len) in reads.iter().chain(writes) {
            if len > 0 {
                bases.push(self.locate_in(&m, addr, len)?);
            }
        }
        for b in &bases {
            if let Some(e) = m.get_mut(b) {
                e.pins += 1;
            }
        }
        Ok(Pins { table: self.clone(), bases })
    }
}

impl<R: Release> Drop for Pins<R> {
    fn drop(&mut self) {
        let mut done = Vec::new();
        {
            let mut m = self.table.lock();
            for b in &self.bases {
                let last = match m.get_mut(b) {
                    Some(e) => {
                        e.pins = e.pins.saturating_sub(1);
                        e.freed && e.pins == 0
                    }
                    None => false,
                };
                if last && let Some(e) = m.remove(b) {
                    done.push((*b, e));
                }
            }
        }
        for (base, e) in done {
            e.gone();
            if let Some(r) = e.record {
                self.table.releaser.release(base, e.size, r);
            }
        }
    }
}

impl<R: Release> Drop for AllocTable<R> {
    fn drop(&mut self) {
        let m = std::mem::take(&mut *self.lock());
        for (base, e) in m {
            e.gone();
            if let Some(r) = e.record {
                self.releaser.release(base, e.size, r);
            }
        }
    }
}

/// Why [`AllocTable::check_copy`] refused a device-to-device copy.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CopyError {
    #[error("device copy ranges overlap")]
    Overlap,
    #[error(transparent)]
    BadAddress(#[from] BadAddress),
}

/// The two operands of a device-to-device copy that passed [`AllocTable::check_copy`]:
/// each address with the base of the live allocation holding its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRanges {
    pub src: u64,
    pub src_base: u64,
    pub dst: u64,
    pub dst_base: u64,
    pub bytes: usize,
}

impl CopyRanges {
    /// Both ranges as `(start, len)`, for [`AllocTable::pin`].
    pub fn ranges(&self) -> [(u64, usize); 2] {
        [(self.src, self.bytes), (self.dst, self.bytes)]
    }
}

impl<R: Release> AllocTable<R> {
    /// The opening checks of every backend's `Backend::copy_on_device`, written once:
    /// `Ok(None)` for a copy of zero bytes (nothing to do), [`CopyError::Overlap`] when
    /// the two ranges share a byte, [`CopyError::BadAddress`] when either range is not
    /// inside one live allocation of this table; otherwise both ranges with the bases
    /// of their allocations.
    pub fn check_copy(&self, src: u64, dst: u64, bytes: usize) -> Result<Option<CopyRanges>, CopyError> {
        if bytes == 0 {
            return Ok(None);
        }
        if overlaps((src, bytes), (dst, bytes)) {
            return Err(CopyError::Overlap);
        }
        let src_base = self.locate(src, bytes)?;
        let dst_base = self.locate(dst, bytes)?;
        Ok(Some(CopyRanges { src, src_base, dst, dst_base, bytes }))
    }
}

/// True when two non-empty byte ranges `(start, len)` share a byte.
pub fn overlaps(a: (u64, usize), b: (u64, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0.saturating_add(b.1 as u64) && b.0 < a.0.saturating_add(a.1 as u64)
}

/// Rule M3: with `ranges` = a launch's inputs then its outputs (`n_inputs` of them
/// inputs), the index of the first output that overlaps another operand, if any.
/// `skip(i)` leaves operand `i` out of the check (operands patched per run, whose
/// addresses are not known yet).
pub fn overlapping_output(ranges: &[(u64, usize)], n_inputs: usize, skip: impl Fn(usize) -> bool) -> Option<usize> {
    (n_inputs..ranges.len())
        .find(|&i| !skip(i) && ranges.iter().enumerate().any(|(j, r)| j != i && !skip(j) && overlaps(ranges[i], *r)))
        .map(|i| i - n_inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Count(AtomicUsize, Mutex<Vec<u64>>);
    impl Release for Arc<Count> {
        type Record = u64;
        fn release(&self, base: u64, _size: usize, record: u64) {
            assert_eq!(base, record, "the record stored with the block comes back");
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1.lock().unwrap().push(base);
        }
    }

    fn table() -> (Arc<AllocTable<Arc<Count>>>, Arc<Count>) {
        let c = Arc::new(Count::default());
        (Arc::new(AllocTable::new("test:0", c.clone())), c)
    }

    #[test]
    fn ranges_must_lie_in_one_live_block() {
        let (t, _) = table();
        t.insert(0x1000, 256, 0x1000).unwrap();
        t.insert(0x2000, 16, 0x2000).unwrap();
        assert_eq!(t.locate(0x1000, 256), Ok(0x1000));
        assert_eq!(t.locate(0x10f0, 16), Ok(0x1000));
        assert!(t.locate(0x10f0, 17).is_err(), "runs past the block");
        assert!(t.locate(0x0fff, 1).is_err(), "before every block");
        assert!(t.locate(0x1100, 1).is_err(), "in the gap");
        assert!(t.locate(u64::MAX, 2).is_err(), "end overflows");
        let e = t.locate(0x1100, 4).unwrap_err();
        assert_eq!(e.to_string(), "address range 0x1100+4 is not inside a live allocation of test:0");
        assert!(t.insert(0x1000, 8, 0x1000).is_err(), "a base already in the table");
    }

    #[test]
    fn a_pinned_block_is_released_after_its_last_pin() {
        let (t, c) = table();
        t.insert(0x1000, 64, 0x1000).unwrap();
        let p1 = t.pin(&[(0x1000, 64), (0x1010, 0)]).unwrap();
        let p2 = t.pin(&[(0x1020, 8)]).unwrap();
        t.free(0x1000).unwrap();
        assert!(t.free(0x1000).is_err(), "a second free is refused");
        assert!(t.pin(&[(0x1000, 1)]).is_err(), "a freed block cannot be pinned");
        assert_eq!(t.allocated_bytes(), 0);
        assert_eq!(t.len(), 1, "still held by the pins");
        drop(p1);
        assert_eq!(c.0.load(Ordering::SeqCst), 0);
        drop(p2);
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn a_failed_pin_pins_nothing_and_drop_releases_the_rest() {
        let (t, c) = table();
        t.insert(0x1000, 64, 0x1000).unwrap();
        t.insert(0x2000, 64, 0x2000).unwrap();
        assert!(t.pin(&[(0x1000, 8), (0x3000, 8)]).is_err());
        t.free(0x1000).unwrap();
        assert_eq!(c.0.load(Ordering::SeqCst), 1, "no pin was left behind");
        drop(t);
        assert_eq!(*c.1.lock().unwrap(), vec![0x1000, 0x2000]);
    }

    #[test]
    fn concurrent_pins_and_frees_release_each_block_once() {
        let (t, c) = table();
        std::thread::scope(|s| {
            for th in 0..4u64 {
                let t = t.clone();
                s.spawn(move || {
                    for i in 0..200u64 {
                        let base = 0x10_0000 * (th + 1) + i * 0x100;
                        t.insert(base, 0x100, base).unwrap();
                        let p = t.pin(&[(base, 0x100)]).unwrap();
                        t.free(base).unwrap();
                        drop(p);
                    }
                });
            }
        });
        assert_eq!(c.0.load(Ordering::SeqCst), 800);
        assert!(t.is_empty());
    }

    #[test]
    fn a_lent_range_is_used_like_a_block_and_released_without_freeing() {
        let (t, c) = table();
        t.insert(0x1000, 64, 0x1000).unwrap();
        assert!(matches!(t.lend(0x1020, 8, true), Err(LoanError::Overlap { .. })), "inside a block");
        assert!(matches!(t.lend(0x0ff8, 16, true), Err(LoanError::Overlap { .. })), "runs into a block");
        assert!(matches!(t.lend(0x3000, 0, true), Err(LoanError::Empty { .. })));
        assert!(matches!(t.lend(u64::MAX - 2, 8, true), Err(LoanError::Empty { .. })));
        t.lend(0x2000, 32, false).unwrap();
        t.lend(0x2020, 32, true).unwrap();
        assert!(matches!(t.lend(0x201f, 2, true), Err(LoanError::Overlap { .. })), "two live loans");
        assert_eq!(t.locate(0x2008, 8), Ok(0x2000));
        assert!(t.locate(0x2018, 16).is_err(), "runs from one loan into the next");
        assert!(t.check_writable(&[(0x2020, 32), (0x1000, 64), (0x2000, 0)]).is_ok());
        assert!(t.check_writable(&[(0x2010, 4)]).is_err(), "read-only");
        assert!(t.free(0x2000).is_err(), "a loan is not freed like a block");
        let p = t.pin(&[(0x2000, 32)]).unwrap();
        t.end_loan(0x2000).unwrap();
        assert!(matches!(t.end_loan(0x2000), Err(LoanError::NotLent { .. })), "ended twice");
        assert!(t.pin(&[(0x2000, 4)]).is_err(), "no pin after the loan ended");
        assert!(t.holds(0x2000), "still pinned");
        drop(p);
        assert!(!t.holds(0x2000));
        t.end_loan(0x2020).unwrap();
        assert!(!t.holds(0x2020));
        assert!(matches!(t.end_loan(0x1000), Err(LoanError::NotLent { .. })), "a block is not a loan");
        drop(t);
        assert_eq!(*c.1.lock().unwrap(), vec![0x1000], "only the block was released");
    }

    #[test]
    fn a_write_pin_checks_read_only_loans_under_the_same_lock() {
        let (t, _) = table();
        t.insert(0x1000, 64, 0x1000).unwrap();
        t.lend(0x2000, 32, false).unwrap();
        assert!(t.pin_writing(&[(0x2000, 32)], &[(0x2010, 4)]).is_err(), "a write into a read-only loan");
        assert!(t.pin_writing(&[(0x2000, 8)], &[(0x1000, 8), (0x3000, 8)]).is_err(), "outside every block");
        t.end_loan(0x2000).unwrap();
        assert!(!t.holds(0x2000), "the failed pins left nothing pinned");
        let p = t.pin_writing(&[], &[(0x1000, 64)]).unwrap();
        t.free(0x1000).unwrap();
        assert!(t.holds(0x1000), "pinned for the write");
        drop(p);
        assert!(t.is_empty());
    }

    #[test]
    fn a_loan_end_wakes_on_its_own_last_unpin() {
        let (t, _) = table();
        let a = t.lend_tracked(0x2000, 32, true).unwrap();
        let b = t.lend_tracked(0x3000, 32, true).unwrap();
        let pa = t.pin(&[(0x2000, 8)]).unwrap();
        let pb = t.pin(&[(0x3000, 8)]).unwrap();
        t.end_loan(0x2000).unwrap();
        t.end_loan(0x3000).unwrap();
        assert!(!a.is_gone() && !b.is_gone(), "both still pinned");
        std::thread::scope(|s| {
            let waiter = s.spawn(|| a.wait());
            drop(pa);
            waiter.join().unwrap();
        });
        assert!(a.is_gone() && !b.is_gone(), "only the unpinned loan ended");
        drop(pb);
        assert!(b.is_gone());
        // A loan ended with no pin leaves at once; one still lent ends with the table.
        let c = t.lend_tracked(0x4000, 8, false).unwrap();
        t.end_loan(0x4000).unwrap();
        c.wait();
        let d = t.lend_tracked(0x5000, 8, false).unwrap();
        drop(t);
        d.wait();
    }

    #[test]
    fn outputs_may_not_overlap_other_operands() {
        assert!(overlaps((0, 8), (4, 8)));
        assert!(!overlaps((0, 8), (8, 8)));
        assert!(!overlaps((0, 0), (0, 8)), "empty ranges overlap nothing");
        let r = [(0, 16), (16, 16), (32, 16), (8, 4)];
        assert_eq!(overlapping_output(&r, 2, |_| false), Some(1), "output 1 overlaps input 0");
        assert_eq!(overlapping_output(&r, 2, |i| i == 3), None);
        assert_eq!(overlapping_output(&r[..3], 2, |_| false), None);
    }
}
