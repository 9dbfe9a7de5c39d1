//! Device memory: `aclrtMalloc` blocks recorded in the device's allocation table
//! (`runtime::backend::allocations`, contract rule M1), and every copy: synchronous
//! host copies, and device-to-device copies on a stream ([`check_copy`], [`d2d`]).
//!
//! Blocks start 64-byte aligned (aclrtMalloc's guarantee); larger alignments
//! over-allocate, so a block's address in the table (the user's) may differ from the
//! raw address `aclrtFree` takes, which the table keeps as the block's record. The table
//! gives a block back through [`AclRelease`]. `aclrtFree` does not wait for queued work
//! (`acl/acl_rt.h`): callers synchronise the device's busy streams before freeing (M2).
//!
//! Host copies are synchronous `aclrtMemcpy` from pageable memory: asynchronous copies
//! are only safe from pinned buffers (`aclrtMemcpyAsync`, `acl/acl_rt.h`; older CANN
//! documentation says pageable memory may fail unpredictably, newer says the call then
//! completes synchronously).

use crate::error::AclBackendError;
use acl_sys::{AclError, Api, aclrtStream, result};
use runtime::DevicePtr;
use runtime::backend::allocations::{AllocTable, BadAddress, CopyError, CopyRanges, Release};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

type BResult<T> = std::result::Result<T, AclBackendError>;

/// A device's allocation table: user address -> (usable bytes, raw aclrtMalloc address).
pub(crate) type Allocations = AllocTable<AclRelease>;

/// A block whose `aclrtFree` failed twice.
struct Unreleased {
    /// The block's address in the table.
    base: u64,
    raw: u64,
    /// The failure, until the `free` that caused it reports it.
    err: Option<AclError>,
}

/// Gives a block back with `aclrtFree` (retried once). A block that still cannot be
/// freed is kept: its `free` reports the failure, and the device's teardown tries again.
pub(crate) struct AclRelease {
    api: Arc<Api>,
    failed: Mutex<Vec<Unreleased>>,
}

impl AclRelease {
    pub(crate) fn new(api: Arc<Api>) -> AclRelease {
        AclRelease { api, failed: Mutex::new(Vec::new()) }
    }

    fn failed(&self) -> MutexGuard<'_, Vec<Unreleased>> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The unreported failure of the block at `base`, if its release failed.
    fn take_failure(&self, base: u64) -> Option<AclError> {
        self.failed().iter_mut().find(|u| u.base == base && u.err.is_some()).and_then(|u| u.err.take())
    }

    /// Tries once more to free every block whose release failed (device teardown).
    pub(crate) fn retry_failed(&self) {
        let failed = std::mem::take(&mut *self.failed());
        for u in failed {
            if let Err(e) = free_raw(&self.api, u.raw) {
                log::error!("acl: a block at {:#x} could not be freed: {e}", u.base);
            }
        }
    }
}

impl Drop for AclRelease {
    fn drop(&mut self) {
        for u in self.failed().iter() {
            log::error!("acl: the block at {:#x} was never freed", u.base);
        }
    }
}

impl Release for AclRelease {
    type Record = u64;
    fn release(&self, base: u64, _size: usize, raw: u64) {
        if let Err(err) = free_raw(&self.api, raw) {
            self.failed().push(Unreleased { base, raw, err: Some(err) });
        }
    }
}

/// `aclrtMalloc` of at least one byte on the current device; failures name `op`.
pub(crate) fn malloc(api: &Api, op: Option<&'static str>, bytes: usize) -> BResult<u64> {
    let p = result::malloc(api, bytes.max(1), acl_sys::ACL_MEM_MALLOC_HUGE_FIRST)
        .map_err(|e| AclBackendError::call(op, e))?;
    Ok(p as u64)
}

/// `aclrtFree`, retried once (teardown must not leak on one transient failure).
fn free_raw(api: &Api, raw: u64) -> Result<(), AclError> {
    // SAFETY: `raw` came from aclrtMalloc, is freed once, and no queued work uses it
    // (callers synchronise the streams that may use it first).
    let first = unsafe { result::free(api, raw as *mut c_void) };
    let Err(e) = first else { return Ok(()) };
    log::warn!("acl: {e}; retrying once");
    // SAFETY: as above; the first attempt failed, so the block is still ours.
    unsafe { result::free(api, raw as *mut c_void) }
}

/// [`free_raw`] for blocks outside the table (stream workspaces and scratch buffers).
pub(crate) fn free(api: &Api, raw: u64) -> BResult<()> {
    Ok(free_raw(api, raw)?)
}

/// Refuses an allocation request the device cannot represent.
pub(crate) fn check_request(bytes: usize, align: usize) -> BResult<()> {
    if bytes == 0 || !align.is_power_of_two() {
        return Err(AclBackendError::BadRequest(format!("allocation of {bytes} bytes aligned to {align}")));
    }
    Ok(())
}

/// A block of `bytes` aligned to `align` on device `device` (bound to the thread),
/// recorded in `allocs`. Out of device memory is `runtime::Error::OutOfMemory`.
pub(crate) fn alloc(
    api: &Api,
    allocs: &Allocations,
    device: usize,
    bytes: usize,
    align: usize,
) -> runtime::Result<DevicePtr> {
    // aclrtMalloc starts are 64-byte aligned; larger alignments over-allocate.
    let extra = if align > 64 { align } else { 0 };
    let total = bytes.checked_add(extra).ok_or_else(|| AclBackendError::BadRequest("size overflow".into()))?;
    let raw = malloc(api, None, total).map_err(|e| match e.code() {
        Some(acl_sys::codes::ACL_ERROR_RT_MEMORY_ALLOCATION) | Some(acl_sys::codes::ACL_ERROR_RT_DEVICE_OOM) => {
            runtime::Error::OutOfMemory {
                device: format!("acl:{device}"),
                requested: bytes,
                stats: Box::default(),
                source: Some(Arc::new(e)),
            }
        }
        _ => e.into(),
    })?;
    let user = if extra > 0 { raw.div_ceil(align as u64) * align as u64 } else { raw };
    allocs.insert(user, bytes, raw).map_err(AclBackendError::from)?;
    Ok(DevicePtr(user))
}

/// Whether `ptr` is the start of a live block of device `device` (what `free` takes).
pub(crate) fn check_block(allocs: &Allocations, device: usize, ptr: DevicePtr) -> BResult<()> {
    if allocs.locate(ptr.0, 0) != Ok(ptr.0) {
        return Err(BadAddress { device: format!("acl:{device}"), addr: ptr.0, len: 0 }.into());
    }
    Ok(())
}

/// The opening checks of a device-to-device copy ([`AllocTable::check_copy`]): `None` for
/// zero bytes; overlapping ranges are a bad request, a range outside the live
/// allocations a bad address.
pub(crate) fn check_copy(allocs: &Allocations, src: u64, dst: u64, bytes: usize) -> BResult<Option<CopyRanges>> {
    allocs.check_copy(src, dst, bytes).map_err(|e| match e {
        CopyError::Overlap => AclBackendError::BadRequest("device copy ranges overlap".into()),
        CopyError::BadAddress(b) => b.into(),
    })
}

/// A stream-ordered device-to-device copy of checked ranges ([`check_copy`]): a DMA copy
/// (`aclrtMemcpyAsync`) when both ends are 64-byte aligned, which returns true (the
/// caller marks the stream as having queued work); else `unaligned(src, dst)`, each end
/// given as (allocation base, byte offset), for a byte-typed aclnnInplaceCopy from the
/// bases (aclnn takes 32-byte aligned addresses only), which returns false.
pub(crate) fn d2d(
    api: &Api,
    stream: aclrtStream,
    r: &CopyRanges,
    unaligned: impl FnOnce((u64, u64), (u64, u64)) -> BResult<()>,
) -> BResult<bool> {
    if r.src.is_multiple_of(64) && r.dst.is_multiple_of(64) {
        d2d_async(api, r.src, r.dst, r.bytes, stream)?;
        return Ok(true);
    }
    unaligned((r.src_base, r.src - r.src_base), (r.dst_base, r.dst - r.dst_base))?;
    Ok(false)
}

/// Frees the block at `ptr` (its streams were synchronised by the caller); a failed
/// `aclrtFree` is reported here.
pub(crate) fn free_block(allocs: &Allocations, ptr: DevicePtr) -> BResult<()> {
    allocs.free(ptr.0)?;
    match allocs.releaser().take_failure(ptr.0) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Host to device, synchronously, into a range inside one live block.
pub(crate) fn copy_to_device(api: &Api, allocs: &Allocations, src: &[u8], dst: DevicePtr) -> BResult<()> {
    allocs.locate(dst.0, src.len())?;
    h2d(api, src, dst.0)
}

/// Device to host, synchronously, from a range inside one live block (queued work that
/// writes it has been waited for by the caller).
pub(crate) fn copy_to_host(api: &Api, allocs: &Allocations, src: DevicePtr, dst: &mut [u8]) -> BResult<()> {
    allocs.locate(src.0, dst.len())?;
    d2h(api, src.0, dst)
}

/// `aclrtMemcpy` host to device; `dst .. + src.len()` is validated device memory.
pub(crate) fn h2d(api: &Api, src: &[u8], dst: u64) -> BResult<()> {
    // SAFETY: the destination range is validated device memory (callers); the source is
    // a live host slice of that length.
    Ok(unsafe {
        result::memcpy(
            api,
            dst as *mut c_void,
            src.len(),
            src.as_ptr().cast(),
            src.len(),
            acl_sys::ACL_MEMCPY_HOST_TO_DEVICE,
        )
    }?)
}

/// `aclrtMemcpy` device to host; `src .. + dst.len()` is validated device memory.
pub(crate) fn d2h(api: &Api, src: u64, dst: &mut [u8]) -> BResult<()> {
    // SAFETY: the source range is validated device memory (callers); the destination is
    // an exclusively borrowed host slice of that length.
    Ok(unsafe {
        result::memcpy(
            api,
            dst.as_mut_ptr().cast(),
            dst.len(),
            src as *const c_void,
            dst.len(),
            acl_sys::ACL_MEMCPY_DEVICE_TO_HOST,
        )
    }?)
}

/// A stream-ordered device-to-device copy of `bytes` between validated, 64-byte
/// aligned ranges (the on-chip rule of `aclrtMemcpyAsync`, `acl/acl_rt.h`).
fn d2d_async(api: &Api, src: u64, dst: u64, bytes: usize, stream: aclrtStream) -> BResult<()> {
    // SAFETY: both ranges are validated device memory (callers), 64-byte aligned, and
    // stay allocated while the copy is queued (frees synchronise the stream first); the
    // stream is live.
    Ok(unsafe {
        result::memcpy_async(
            api,
            dst as *mut c_void,
            bytes,
            src as *const c_void,
            bytes,
            acl_sys::ACL_MEMCPY_DEVICE_TO_DEVICE,
            stream,
        )
    }?)
}

/// A stream-ordered fill of a validated device range. A release without
/// `aclrtMemsetAsync` gives [`AclError::Missing`] (inside `AclBackendError::Call`).
pub(crate) fn memset_async(api: &Api, dst: u64, value: u8, bytes: usize, stream: aclrtStream) -> BResult<()> {
    // SAFETY: the range is validated device memory that stays allocated while the fill
    // is queued; the stream is live.
    Ok(unsafe { result::memset_async(api, dst as *mut c_void, bytes, value as i32, bytes, stream) }?)
}

/// A synchronous fill of a validated device range (earlier work on the stream that
/// orders it has finished: callers synchronise first).
pub(crate) fn memset(api: &Api, dst: u64, value: u8, bytes: usize) -> BResult<()> {
    // SAFETY: the range is validated device memory.
    Ok(unsafe { result::memset(api, dst as *mut c_void, bytes, value as i32, bytes) }?)
}

/// Free bytes of the bound device's HBM.
pub(crate) fn free_bytes(api: &Api) -> Option<u64> {
    result::get_mem_info(api, acl_sys::ACL_HBM_MEM).ok().map(|(free, _)| free as u64)
}

/// Device memory for the intermediates of a frozen plan's recorded nodes on one stream.
///
/// A recorded executor keeps the addresses of its op's intermediates for its whole life,
/// but the intermediates themselves are dead once the op has run, and the nodes of one
/// stream run one after another. So every node takes its intermediates from the start of
/// the same chain of blocks ([`rewind`](Self::rewind), then [`take`](Self::take)): the
/// stream needs as much as its largest node, not the sum over its nodes.
///
/// `Send`, not `Sync`: one plan's mutex guards it.
#[derive(Default)]
pub(crate) struct Intermediates {
    /// (address, bytes) of each block, in the order nodes take them.
    blocks: Vec<(u64, usize)>,
    /// The block and the offset in it of the next intermediate of the current node.
    cursor: (usize, usize),
}

impl Intermediates {
    /// Starts a node: its intermediates may reuse everything earlier nodes took.
    pub(crate) fn rewind(&mut self) {
        self.cursor = (0, 0);
    }

    /// `bytes` (512-byte aligned) for an intermediate of the current node, apart from the
    /// node's earlier ones; a new block when none left fits.
    pub(crate) fn take(&mut self, api: &Api, op: &'static str, bytes: usize) -> BResult<u64> {
        let bytes = bytes
            .max(1)
            .checked_next_multiple_of(512)
            .ok_or_else(|| AclBackendError::BadRequest(format!("{op}: an intermediate of {bytes} bytes")))?;
        loop {
            let (b, off) = self.cursor;
            match self.blocks.get(b) {
                Some(&(ptr, size)) if size - off >= bytes => {
                    self.cursor.1 += bytes;
                    return Ok(ptr + off as u64);
                }
                Some(_) => self.cursor = (b + 1, 0),
                None => {
                    // Blocks of at least 1 MiB, so that small intermediates share one.
                    let size = bytes.max(1 << 20);
                    let ptr = malloc(api, Some(op), size)?;
                    self.blocks.push((ptr, size));
                }
            }
        }
    }

    /// Device bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.1).sum()
    }

    /// Frees the blocks; no queued work may use them any more (the caller synchronised
    /// the stream).
    pub(crate) fn release(self, api: &Api) {
        for (p, _) in self.blocks {
            if let Err(e) = free(api, p) {
                log::error!("acl: freeing a frozen plan's intermediates: {e}");
            }
        }
    }
}
