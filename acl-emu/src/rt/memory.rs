//! Device and pinned host memory: allocation, information, copies and fills, each
//! counted in the run counters and, for copies and fills, costed on the modelled clock.

use crate::error::{Fail, R, fail};
use crate::ffi::{guard, h, put};
use crate::model::CopyDir;
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use std::ffi::c_void;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMalloc(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) -> aclError {
    guard("aclrtMalloc", |t| {
        if size == 0 {
            return fail(ACL_ERROR_INVALID_PARAM, "size must be > 0");
        }
        if policy.name().is_none() {
            return fail(ACL_ERROR_INVALID_PARAM, format!("unknown malloc policy {}", policy.0));
        }
        if devPtr.is_null() {
            return fail(ACL_ERROR_INVALID_PARAM, "devPtr is NULL");
        }
        let d = t.current()? as usize;
        let a = t.mem[d].alloc(size as u64)?;
        t.run.allocations += 1;
        t.run.allocated_bytes += size as u64;
        // SAFETY: C contract: `devPtr` is writable (non-NULL checked above).
        unsafe { put(devPtr, a as usize as *mut c_void) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFree(devPtr: *mut c_void) -> aclError {
    guard("aclrtFree", |t| {
        let a = h(devPtr);
        if a == 0 {
            return fail(ACL_ERROR_INVALID_PARAM, "aclrtFree(NULL)");
        }
        let d =
            t.device_of_addr(a).ok_or_else(|| Fail(ACL_ERROR_INVALID_PARAM, format!("{a:#x} is not device memory")))?;
        t.mem[d].free(a)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemInfo(attr: aclrtMemAttr, free: *mut usize, total: *mut usize) -> aclError {
    guard("aclrtGetMemInfo", |t| {
        if attr.name().is_none() {
            return fail(ACL_ERROR_INVALID_PARAM, format!("unknown memory attribute {}", attr.0));
        }
        let d = t.current()? as usize;
        let m = &t.mem[d];
        // SAFETY: C contract: both are NULL or writable.
        unsafe {
            put(free, (m.capacity - m.used) as usize)?;
            put(total, m.capacity as usize)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) -> aclError {
    guard("aclrtMallocHost", |t| {
        if size == 0 || hostPtr.is_null() {
            return fail(ACL_ERROR_INVALID_PARAM, "size must be > 0 and hostPtr non-NULL");
        }
        let layout = std::alloc::Layout::from_size_align(size, 64)
            .map_err(|e| Fail(ACL_ERROR_INVALID_PARAM, format!("{size} bytes: {e}")))?;
        // SAFETY: non-zero size (checked).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return fail(ACL_ERROR_BAD_ALLOC, "host allocation failed");
        }
        t.host.insert(p as u64, layout);
        t.run.allocations += 1;
        t.run.allocated_bytes += size as u64;
        // SAFETY: C contract: `hostPtr` is writable (non-NULL checked).
        unsafe { put(hostPtr, p as *mut c_void) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreeHost(hostPtr: *mut c_void) -> aclError {
    guard("aclrtFreeHost", |t| match t.host.remove(&h(hostPtr)) {
        Some(l) => {
            // SAFETY: allocated by aclrtMallocHost with this layout, removed from the table once.
            unsafe { std::alloc::dealloc(hostPtr as *mut u8, l) };
            Ok(())
        }
        None => fail(ACL_ERROR_INVALID_PARAM, "not an aclrtMallocHost pointer"),
    })
}

/// Which side of a copy is device memory, checked against `kind`.
fn copy_sides(t: &Tables, dst: u64, src: u64, count: u64, kind: aclrtMemcpyKind) -> R<(bool, bool)> {
    let (dd, sd) = match kind {
        ACL_MEMCPY_HOST_TO_DEVICE => (true, false),
        ACL_MEMCPY_DEVICE_TO_HOST => (false, true),
        ACL_MEMCPY_DEVICE_TO_DEVICE => (true, true),
        ACL_MEMCPY_HOST_TO_HOST => (false, false),
        _ => return fail(ACL_ERROR_INVALID_PARAM, format!("memcpy kind {} not emulated", kind.0)),
    };
    if dd {
        t.check_range(dst, count, "copy destination")?;
    } else if t.device_of_addr(dst).is_some() {
        return fail(ACL_ERROR_INVALID_PARAM, format!("kind {:?} but the destination is device memory", kind.name()));
    }
    if sd {
        t.check_range(src, count, "copy source")?;
    } else if t.device_of_addr(src).is_some() {
        return fail(ACL_ERROR_INVALID_PARAM, format!("kind {:?} but the source is device memory", kind.name()));
    }
    Ok((dd, sd))
}

/// Counts an accepted copy of `n` bytes between the sides `copy_sides` found; its
/// direction for the model (`None` for host to host).
fn count_copy(t: &mut Tables, n: u64, dd: bool, sd: bool) -> Option<CopyDir> {
    let r = &mut t.run;
    let (dir, copies, bytes) = match (dd, sd) {
        (true, false) => (CopyDir::HostToDevice, &mut r.h2d_copies, &mut r.h2d_bytes),
        (false, true) => (CopyDir::DeviceToHost, &mut r.d2h_copies, &mut r.d2h_bytes),
        (true, true) => (CopyDir::DeviceToDevice, &mut r.d2d_copies, &mut r.d2d_bytes),
        (false, false) => return None,
    };
    *copies += 1;
    *bytes += n;
    Some(dir)
}

/// Copies between (translated) device memory and host memory.
///
/// # Safety
/// Host-side pointers are valid for `count` bytes (reads for src, writes for dst).
unsafe fn do_copy(t: &mut Tables, dst: u64, src: u64, count: u64, dd: bool, sd: bool) -> R<()> {
    if count == 0 {
        return Ok(());
    }
    let tmp: Vec<u8> = if sd {
        let d = t.check_range(src, count, "copy source")?;
        t.mem[d]
            .bytes(src, count)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, "source freed".into()))?
    } else {
        // SAFETY: host source valid for `count` reads per this function's contract.
        unsafe { std::slice::from_raw_parts(src as usize as *const u8, count as usize) }.to_vec()
    };
    if dd {
        let d = t.check_range(dst, count, "copy destination")?;
        t.mem[d]
            .bytes_mut(dst, count)
            .ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, "destination freed".into()))?
            .copy_from_slice(&tmp);
    } else {
        // SAFETY: host destination valid for `count` writes per this function's contract.
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst as usize as *mut u8, count as usize) };
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> aclError {
    guard("aclrtMemcpy", |t| {
        if count > destMax {
            return fail(ACL_ERROR_INVALID_PARAM, format!("count {count} > destMax {destMax}"));
        }
        if count > 0 && (dst.is_null() || src.is_null()) {
            return fail(ACL_ERROR_INVALID_PARAM, "NULL pointer");
        }
        t.current()?;
        let (dd, sd) = copy_sides(t, h(dst), h(src), count as u64, kind)?;
        // SAFETY: C contract: host pointers are valid for `count` bytes.
        unsafe { do_copy(t, h(dst), h(src), count as u64, dd, sd) }?;
        if let Some(dir) = count_copy(t, count as u64, dd, sd) {
            let cost = t.soc.copy(dir, count as u64);
            t.timeline.host_runs(cost);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemcpyAsync", |t| {
        if count > destMax {
            return fail(ACL_ERROR_INVALID_PARAM, format!("count {count} > destMax {destMax}"));
        }
        if kind == ACL_MEMCPY_HOST_TO_HOST {
            return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclrtMemcpyAsync HOST_TO_HOST");
        }
        let (d, s, n) = (h(dst), h(src), count as u64);
        let (dd, sd) = copy_sides(t, d, s, n, kind)?;
        if d % 64 != 0 || s % 64 != 0 {
            return fail(
                ACL_ERROR_RT_ADDR_UNALIGNED,
                format!("aclrtMemcpyAsync needs 64-byte aligned addresses ({d:#x}, {s:#x})"),
            );
        }
        if (!dd && !t.is_pinned_host(d, n)) || (!sd && !t.is_pinned_host(s, n)) {
            return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync host memory must come from aclrtMallocHost");
        }
        let st = t.stream(h(stream))?;
        st.submit(Box::new(move || {
            let mut t = lock(&emu().t);
            // SAFETY: the host side is pinned memory from aclrtMallocHost, which the caller
            // keeps alive until the stream has run the copy (the C API's contract).
            unsafe { do_copy(&mut t, d, s, n, dd, sd) }
        }))?;
        if let Some(dir) = count_copy(t, n, dd, sd) {
            let cost = t.soc.copy(dir, n);
            t.timeline.run_on(&st.clock, cost);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemset(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize) -> aclError {
    guard("aclrtMemset", |t| {
        if count > maxCount {
            return fail(ACL_ERROR_INVALID_PARAM, format!("count {count} > maxCount {maxCount}"));
        }
        let a = h(devPtr);
        let d = t.check_range(a, count as u64, "memset destination")?;
        if let Some(b) = t.mem[d].bytes_mut(a, count as u64) {
            b.fill(value as u8);
        }
        let cost = t.soc.fill(count as u64);
        t.timeline.host_runs(cost);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemsetAsync(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
    stream: aclrtStream,
) -> aclError {
    guard("aclrtMemsetAsync", |t| {
        if count > maxCount {
            return fail(ACL_ERROR_INVALID_PARAM, format!("count {count} > maxCount {maxCount}"));
        }
        let (a, n) = (h(devPtr), count as u64);
        t.check_range(a, n, "memset destination")?;
        let st = t.stream(h(stream))?;
        st.submit(Box::new(move || {
            let mut t = lock(&emu().t);
            let d = t.check_range(a, n, "memset destination")?;
            if let Some(b) = t.mem[d].bytes_mut(a, n) {
                b.fill(value as u8);
            }
            Ok(())
        }))?;
        let cost = t.soc.fill(n);
        t.timeline.run_on(&st.clock, cost);
        Ok(())
    })
}
