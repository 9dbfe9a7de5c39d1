//! acl-emu: a stand-in for the CANN libraries, for tests. **Test infrastructure, never a
//! fallback.**
//!
//! Built as a `cdylib`, it exports — with the exact C signatures `acl-sys` declares
//! (checked at compile time below) — the ACL runtime and aclnn symbols `backend-acl`
//! uses, and computes on the host with backend-cpu's reference kernels:
//!
//! * streams are asynchronous in-order queues (one worker thread each); events order
//!   them; `aclrtSynchronize*` wait and report the first asynchronous error;
//! * device memory is reserved address space with no access rights (`mmap(PROT_NONE)`):
//!   a host dereference of a device pointer crashes; the emulator translates addresses
//!   to host buffers internally;
//! * the aclnn protocol is enforced with the real codes: launch without phase 1, a
//!   one-shot executor launched twice, a workspace smaller than asked, unaligned
//!   addresses, BF16 (and aclnnExp, FP32 cube math without cubeMathType 1) on the 910;
//! * knobs: `ACL_EMU_DEVICES` (1), `ACL_EMU_MEMORY` (1G per device), `ACL_EMU_SOC`
//!   (`Ascend910A`), `ACL_EMU_WORKSPACE` (4K), `ACL_EMU_FAIL=aclrtMalloc:3:207001,...`
//!   (the 3rd call of aclrtMalloc fails with 207001); the same at run time through
//!   `aclEmuConfigure("devices=2;memory=64M;fail=...")`;
//! * `aclEmuCounters` reports outstanding allocations, streams, events, executors and
//!   descriptors; `aclEmuCallCount(name)` how often a symbol was called.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

pub mod ops;
pub mod state;

use acl_sys::codes::*;
use acl_sys::*;
use ops::{Executor, Src, TensorDesc, desc, int_array, scalar};
use runtime::{GeluApprox, Op};
use state::*;
use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

pub use state::Counters;

fn status(r: std::thread::Result<R<()>>) -> i32 {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(Fail(code, msg))) => {
            log::debug!("acl-emu: {code}: {msg}");
            set_error(&msg);
            code
        }
        Err(_) => {
            set_error("acl-emu: internal panic");
            ACL_ERROR_INTERNAL_ERROR
        }
    }
}

/// Runs `f` with the tables locked, after counting the call and applying fault rules.
fn guard(name: &'static str, f: impl FnOnce(&mut Tables) -> R<()>) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        let mut t = lock(&emu().t);
        t.enter(name)?;
        f(&mut t)
    })))
}

/// Like [`guard`] but `f` locks by itself (for calls that block).
fn guard_unlocked(name: &'static str, f: impl FnOnce() -> R<()>) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        lock(&emu().t).enter(name)?;
        f()
    })))
}

/// For constructors returning a handle: NULL on failure.
fn guard_handle<T>(name: &'static str, f: impl FnOnce(&mut Tables) -> R<u64>) -> *mut T {
    let mut h = 0u64;
    let code = guard(name, |t| {
        h = f(t)?;
        Ok(())
    });
    if code != 0 { std::ptr::null_mut() } else { h as usize as *mut T }
}

/// Writes an out-parameter.
///
/// # Safety
/// `p` is NULL or valid for a write of `T` (the C API's contract for out-pointers).
unsafe fn put<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "output pointer is NULL");
    }
    // SAFETY: non-NULL and valid for writes per this function's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Copies `n` values from a C array.
///
/// # Safety
/// `p` is NULL (only allowed with `n == 0`) or valid for reads of `n` values.
unsafe fn read_array<T: Copy>(p: *const T, n: u64) -> R<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return fail(ACLNN_ERR_PARAM_NULLPTR, "array pointer is NULL");
    }
    // SAFETY: non-NULL and valid for `n` reads per this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec())
}

fn h(p: *const c_void) -> u64 {
    p as usize as u64
}

// ================================================================= init, errors ====

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclInit(_configPath: *const c_char) -> aclError {
    guard("aclInit", |t| {
        if t.initialized {
            return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit was already called");
        }
        t.initialized = true;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalize() -> aclError {
    guard("aclFinalize", |t| {
        if !t.initialized {
            return fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize without aclInit");
        }
        t.initialized = false;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    ERRMSG.with(|e| {
        let mut e = e.borrow_mut();
        let pending = e.0.take();
        e.1 = pending;
        e.1.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
    })
}

// ================================================================= device ====

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetDevice(deviceId: i32) -> aclError {
    guard("aclrtSetDevice", |t| {
        if !t.initialized {
            return fail(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
        }
        if deviceId < 0 || deviceId as usize >= t.mem.len() {
            return fail(
                ACL_ERROR_RT_INVALID_DEVICEID,
                format!("device {deviceId} does not exist ({} devices)", t.mem.len()),
            );
        }
        *t.device_refs.entry(deviceId).or_insert(0) += 1;
        CURRENT.with(|c| c.set(Some(deviceId)));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtResetDevice(deviceId: i32) -> aclError {
    guard_unlocked("aclrtResetDevice", || {
        // The last reset takes the default stream out of the tables; its queued work
        // (copies, fills, kernels) locks the tables, so it is drained after unlocking.
        let stream = {
            let mut t = lock(&emu().t);
            match t.device_refs.get_mut(&deviceId) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    if *n == 0 {
                        t.device_refs.remove(&deviceId);
                        t.default_streams.remove(&deviceId)
                    } else {
                        None
                    }
                }
                _ => return fail(ACL_ERROR_RT_INVALID_DEVICEID, format!("device {deviceId} was not set")),
            }
        };
        if let Some(s) = stream {
            if let Err(Fail(code, msg)) = s.synchronize() {
                log::warn!("acl-emu: aclrtResetDevice({deviceId}): unreported default-stream failure {code}: {msg}");
            }
            s.shutdown();
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDevice(deviceId: *mut i32) -> aclError {
    guard("aclrtGetDevice", |t| {
        let d = t.current()?;
        // SAFETY: C contract: `deviceId` is NULL or writable.
        unsafe { put(deviceId, d) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> aclError {
    guard("aclrtGetDeviceCount", |t| {
        if !t.initialized {
            return fail(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
        }
        if t.mem.is_empty() {
            return fail(ACL_ERROR_RT_NO_DEVICE, "no device (ACL_EMU_DEVICES=0)");
        }
        // SAFETY: C contract: `count` is NULL or writable.
        unsafe { put(count, t.mem.len() as u32) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetSocName() -> *const c_char {
    let r = catch_unwind(|| {
        let mut t = lock(&emu().t);
        if let Err(Fail(_, m)) = t.enter("aclrtGetSocName") {
            set_error(&m);
            return std::ptr::null();
        }
        t.soc_c.as_ptr()
    });
    r.unwrap_or(std::ptr::null())
}

/// Per-SoC figures of the platform ini files (facts §F).
fn soc_cores(soc: &str) -> (i64, i64, i64) {
    match soc {
        "Ascend910A" | "Ascend910ProA" | "Ascend910PremiumA" => (32, 0, 32 << 20),
        "Ascend910B" | "Ascend910ProB" => (30, 0, 32 << 20),
        "Ascend910B1" | "Ascend910B2" => (24, 48, 192 << 20),
        "Ascend910B3" => (20, 40, 192 << 20),
        "Ascend910B4" => (20, 40, 96 << 20),
        _ => (1, 1, 1 << 20),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetDeviceCapability(deviceId: u32, deviceInfo: aclDeviceInfo, value: *mut i64) -> aclError {
    guard("aclGetDeviceCapability", |t| {
        if deviceId as usize >= t.mem.len() {
            return fail(ACL_ERROR_RT_INVALID_DEVICEID, format!("device {deviceId} does not exist"));
        }
        let (cube, vector, l2) = soc_cores(&t.cfg.soc);
        let v = match deviceInfo {
            ACL_DEVICE_INFO_AI_CORE_NUM => cube,
            ACL_DEVICE_INFO_VECTOR_CORE_NUM => vector,
            ACL_DEVICE_INFO_L2_SIZE => l2,
            _ => return fail(ACL_ERROR_INVALID_PARAM, format!("aclDeviceInfo {}", deviceInfo.0)),
        };
        // SAFETY: C contract: `value` is NULL or writable.
        unsafe { put(value, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeDevice() -> aclError {
    guard_unlocked("aclrtSynchronizeDevice", || {
        let streams: Vec<_> = {
            let mut t = lock(&emu().t);
            let d = t.current()?;
            let mut v: Vec<_> = t.streams.values().filter(|s| s.device == d).cloned().collect();
            v.push(t.stream(0)?);
            v
        };
        let mut first = Ok(());
        for s in streams {
            if let Err(e) = s.synchronize() {
                first = first.and(Err(e));
            }
        }
        first
    })
}

// ================================================================= context ====

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetCurrentContext(context: *mut aclrtContext) -> aclError {
    guard("aclrtGetCurrentContext", |t| {
        let d = t.current()?;
        // SAFETY: C contract: `context` is NULL or writable.
        unsafe { put(context, (TAG_CONTEXT | d as u64) as usize as aclrtContext) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetCurrentContext(context: aclrtContext) -> aclError {
    guard("aclrtSetCurrentContext", |t| {
        let v = h(context);
        let d = (v & 0xFFFF) as i32;
        if v & !0xFFFF != TAG_CONTEXT || d as usize >= t.mem.len() || !t.device_refs.contains_key(&d) {
            return fail(ACL_ERROR_RT_PARAM_INVALID, format!("{v:#x} is not a live context"));
        }
        CURRENT.with(|c| c.set(Some(d)));
        Ok(())
    })
}

// ================================================================= streams ====

fn create_stream(t: &mut Tables, out: *mut aclrtStream) -> R<()> {
    let d = t.current()?;
    let hd = emu().handle(TAG_STREAM);
    let s = EmuStream::new(d, format!("acl-emu:{d}/stream{hd:#x}"))?;
    // SAFETY: C contract: `out` is NULL or writable (checked by `put`).
    unsafe { put(out, hd as usize as aclrtStream) }?;
    t.streams.insert(hd, s);
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStream(stream: *mut aclrtStream) -> aclError {
    guard("aclrtCreateStream", |t| create_stream(t, stream))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamWithConfig(stream: *mut aclrtStream, priority: u32, flag: u32) -> aclError {
    guard("aclrtCreateStreamWithConfig", |t| {
        if priority != 0 {
            log::debug!("acl-emu: stream priority {priority} ignored (reserved)");
        }
        if flag & !0x3f != 0 {
            return fail(ACL_ERROR_INVALID_PARAM, format!("unknown stream flags {flag:#x}"));
        }
        create_stream(t, stream)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyStream(stream: aclrtStream) -> aclError {
    guard_unlocked("aclrtDestroyStream", || {
        let s = {
            let mut t = lock(&emu().t);
            t.streams.remove(&h(stream)).ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, "unknown stream".into()))?
        };
        let _ = s.synchronize();
        s.shutdown();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError {
    guard_unlocked("aclrtSynchronizeStream", || {
        let s = lock(&emu().t).stream(h(stream))?;
        s.synchronize()
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamQuery(stream: aclrtStream, status: *mut aclrtStreamStatus) -> aclError {
    guard("aclrtStreamQuery", |t| {
        let s = t.stream(h(stream))?;
        let v = if s.is_idle() { ACL_STREAM_STATUS_COMPLETE } else { ACL_STREAM_STATUS_NOT_READY };
        // SAFETY: C contract: `status` is NULL or writable.
        unsafe { put(status, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError {
    guard("aclrtStreamWaitEvent", |t| {
        let ev = t.event(h(event))?;
        let s = t.stream(h(stream))?;
        let target = lock(&ev.state).recorded;
        s.submit(Box::new(move || {
            ev.wait_for(target);
            Ok(())
        }))
    })
}

// ================================================================= events ====

fn create_event(t: &mut Tables, out: *mut aclrtEvent) -> R<()> {
    t.current()?;
    let hd = emu().handle(TAG_EVENT);
    // SAFETY: C contract: `out` is NULL or writable (checked by `put`).
    unsafe { put(out, hd as usize as aclrtEvent) }?;
    t.events.insert(hd, Default::default());
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError {
    guard("aclrtCreateEvent", |t| create_event(t, event))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError {
    guard("aclrtCreateEventWithFlag", |t| {
        if flag & !0x7f != 0 {
            return fail(ACL_ERROR_INVALID_PARAM, format!("unknown event flags {flag:#x}"));
        }
        create_event(t, event)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDestroyEvent(event: aclrtEvent) -> aclError {
    guard("aclrtDestroyEvent", |t| {
        t.events.remove(&h(event)).map(|_| ()).ok_or_else(|| Fail(ACL_ERROR_RT_PARAM_INVALID, "unknown event".into()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    guard("aclrtRecordEvent", |t| {
        let ev = t.event(h(event))?;
        let s = t.stream(h(stream))?;
        let generation = {
            let mut g = lock(&ev.state);
            g.recorded += 1;
            g.recorded
        };
        s.submit(Box::new(move || {
            ev.complete(generation);
            Ok(())
        }))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) -> aclError {
    guard("aclrtQueryEventStatus", |t| {
        let ev = t.event(h(event))?;
        let g = lock(&ev.state);
        let v = if g.reached >= g.recorded {
            ACL_EVENT_RECORDED_STATUS_COMPLETE
        } else {
            ACL_EVENT_RECORDED_STATUS_NOT_READY
        };
        // SAFETY: C contract: `status` is NULL or writable.
        unsafe { put(status, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError {
    guard_unlocked("aclrtSynchronizeEvent", || {
        let ev = lock(&emu().t).event(h(event))?;
        let target = lock(&ev.state).recorded;
        ev.wait_for(target);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtEventElapsedTime(ms: *mut f32, startEvent: aclrtEvent, endEvent: aclrtEvent) -> aclError {
    guard("aclrtEventElapsedTime", |t| {
        let time = |e: aclrtEvent| -> R<std::time::Instant> {
            let ev = t.event(h(e))?;
            let g = lock(&ev.state);
            match g.time {
                Some(x) if g.reached >= g.recorded && g.recorded > 0 => Ok(x),
                _ => fail(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "event not recorded or not complete"),
            }
        };
        let (a, b) = (time(startEvent)?, time(endEvent)?);
        let v = if b >= a { (b - a).as_secs_f64() * 1e3 } else { -((a - b).as_secs_f64() * 1e3) };
        // SAFETY: C contract: `ms` is NULL or writable.
        unsafe { put(ms, v as f32) }
    })
}

// ================================================================= memory ====

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
        unsafe { do_copy(t, h(dst), h(src), count as u64, dd, sd) }
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
        }))
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
        }))
    })
}

// ================================================================= aclnn basics ====

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateTensor(
    viewDims: *const i64,
    viewDimsNum: u64,
    dataType: aclDataType,
    stride: *const i64,
    offset: i64,
    format: aclFormat,
    _storageDims: *const i64,
    _storageDimsNum: u64,
    tensorData: *mut c_void,
) -> *mut aclTensor {
    guard_handle("aclCreateTensor", |t| {
        if viewDimsNum > 8 {
            return fail(ACLNN_ERR_PARAM_INVALID, "more than 8 dims");
        }
        if format.name().is_none() {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("unknown format {}", format.0));
        }
        // SAFETY: C contract: the arrays hold viewDimsNum values (stride may be NULL).
        let dims = unsafe { read_array(viewDims, viewDimsNum) }?;
        let strides = if stride.is_null() {
            let mut s = vec![1i64; dims.len()];
            for i in (0..dims.len().saturating_sub(1)).rev() {
                s[i] = s[i + 1] * dims[i + 1].max(1);
            }
            s
        } else {
            // SAFETY: as above.
            unsafe { read_array(stride, viewDimsNum) }?
        };
        let d = TensorDesc { dims, strides, offset, dtype: dataType, addr: h(tensorData) };
        let hd = emu().handle(TAG_TENSOR);
        t.tensors.insert(hd, d);
        Ok(hd)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyTensor(tensor: *const aclTensor) -> aclnnStatus {
    guard("aclDestroyTensor", |t| {
        if tensor.is_null() {
            return Ok(());
        }
        t.tensors
            .remove(&h(tensor.cast()))
            .map(|_| ())
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, "unknown aclTensor".into()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateScalar(value: *mut c_void, dataType: aclDataType) -> *mut aclScalar {
    guard_handle("aclCreateScalar", |t| {
        if value.is_null() {
            return fail(ACLNN_ERR_PARAM_NULLPTR, "value is NULL");
        }
        // SAFETY: C contract: `value` points to a host value of `dataType`.
        let v = unsafe {
            match dataType {
                ACL_FLOAT => (value as *const f32).read_unaligned() as f64,
                ACL_DOUBLE => (value as *const f64).read_unaligned(),
                ACL_FLOAT16 => half::f16::from_bits((value as *const u16).read_unaligned()).to_f64(),
                ACL_INT32 => (value as *const i32).read_unaligned() as f64,
                ACL_INT64 => (value as *const i64).read_unaligned() as f64,
                ACL_INT8 => (value as *const i8).read_unaligned() as f64,
                ACL_UINT8 => (value as *const u8).read_unaligned() as f64,
                _ => return fail(ACLNN_ERR_PARAM_INVALID, format!("scalar type {} not emulated", dataType.0)),
            }
        };
        let hd = emu().handle(TAG_SCALAR);
        t.scalars.insert(hd, (dataType, v));
        Ok(hd)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyScalar(scalar: *const aclScalar) -> aclnnStatus {
    guard("aclDestroyScalar", |t| {
        if scalar.is_null() {
            return Ok(());
        }
        t.scalars
            .remove(&h(scalar.cast()))
            .map(|_| ())
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, "unknown aclScalar".into()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateIntArray(value: *const i64, size: u64) -> *mut aclIntArray {
    guard_handle("aclCreateIntArray", |t| {
        // SAFETY: C contract: `value` holds `size` values.
        let v = unsafe { read_array(value, size) }?;
        let hd = emu().handle(TAG_INTARRAY);
        t.int_arrays.insert(hd, v);
        Ok(hd)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyIntArray(array: *const aclIntArray) -> aclnnStatus {
    guard("aclDestroyIntArray", |t| {
        if array.is_null() {
            return Ok(());
        }
        t.int_arrays
            .remove(&h(array.cast()))
            .map(|_| ())
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, "unknown aclIntArray".into()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclSetAclOpExecutorRepeatable(executor: *mut aclOpExecutor) -> aclnnStatus {
    guard("aclSetAclOpExecutorRepeatable", |t| match t.executors.get_mut(&h(executor.cast())) {
        Some(e) => {
            e.repeatable = true;
            Ok(())
        }
        None => fail(ACLNN_ERR_INNER_NULLPTR, "executor is NULL or unknown"),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyAclOpExecutor(executor: *mut aclOpExecutor) -> aclnnStatus {
    guard("aclDestroyAclOpExecutor", |t| {
        let k = h(executor.cast());
        match t.executors.get(&k) {
            Some(e) if e.repeatable => {
                t.executors.remove(&k);
                Ok(())
            }
            Some(_) => fail(ACLNN_ERR_PARAM_INVALID, "aclDestroyAclOpExecutor on an executor that is not repeatable"),
            None => fail(ACLNN_ERR_INNER_NULLPTR, "executor is NULL or unknown"),
        }
    })
}

// ================================================================= aclnn operators ====

fn ex(phase2: &'static str, op: Op, inputs: Vec<Src>, outputs: Vec<(u64, TensorDesc)>, ws: u64) -> Executor {
    Executor {
        phase2,
        op,
        inputs,
        outputs,
        workspace: ws,
        repeatable: false,
        device: 0,
        fp16_compute: false,
        index_check: None,
    }
}

fn tsrc(t: &Tables, p: *const aclTensor, what: &str) -> R<Src> {
    let k = h(p.cast());
    Ok(Src::Tensor(k, desc(t, k, what)?))
}

fn tout(t: &Tables, p: *const aclTensor, what: &str) -> R<(u64, TensorDesc)> {
    let k = h(p.cast());
    Ok((k, desc(t, k, what)?))
}

/// Writes the phase-1 results.
///
/// # Safety
/// Both pointers are NULL or writable.
unsafe fn finish(t: &mut Tables, e: Executor, ws: *mut u64, exec: *mut *mut aclOpExecutor) -> R<()> {
    if ws.is_null() || exec.is_null() {
        return fail(ACLNN_ERR_PARAM_NULLPTR, "workspaceSize or executor is NULL");
    }
    let size = e.workspace;
    let k = ops::create(t, e)?;
    // SAFETY: non-NULL (checked) and writable per this function's contract.
    unsafe {
        put(ws, size)?;
        put(exec, k as usize as *mut aclOpExecutor)
    }
}

fn is_f32(s: &Src) -> bool {
    matches!(s, Src::Tensor(_, d) if d.dtype == ACL_FLOAT)
}

/// cubeMathType rules (facts §D): on the 910, FP32 needs 1 (computed as FP16); 3 is A2 only.
fn cube_rules(t: &Tables, name: &str, e: &mut Executor, cube: i8) -> R<()> {
    if !(0..=4).contains(&cube) {
        return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: cubeMathType {cube} is not valid"));
    }
    let f32_in = e.inputs.iter().any(is_f32);
    if t.cfg.is_910() {
        if cube == acl_sys::cube_math::USE_HF32 {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("{name}: cubeMathType 3 (HF32) is not supported on {}", t.cfg.soc),
            );
        }
        if f32_in && cube == acl_sys::cube_math::KEEP_DTYPE {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("{name}: FP32 with cubeMathType 0 is not supported on {} (use 1: FP16 compute)", t.cfg.soc),
            );
        }
        e.fp16_compute = f32_in && cube != acl_sys::cube_math::USE_FP32_ADD;
    } else {
        e.fp16_compute = f32_in && cube == acl_sys::cube_math::USE_FP16;
    }
    Ok(())
}

macro_rules! phase2 {
    ($($name:ident),* $(,)?) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            workspace: *mut c_void,
            workspaceSize: u64,
            executor: *mut aclOpExecutor,
            stream: aclrtStream,
        ) -> aclnnStatus {
            guard(stringify!($name), |t| ops::launch(t, stringify!($name), h(workspace), workspaceSize, h(executor.cast()), h(stream)))
        }
    )*};
}

phase2!(
    aclnnMatmul,
    aclnnBatchMatMul,
    aclnnMm,
    aclnnAddmm,
    aclnnAdd,
    aclnnSub,
    aclnnMul,
    aclnnDiv,
    aclnnRelu,
    aclnnGelu,
    aclnnGeluV2,
    aclnnTanh,
    aclnnErf,
    aclnnExp,
    aclnnSqrt,
    aclnnSoftmax,
    aclnnLayerNorm,
    aclnnPermute,
    aclnnIndexSelect,
    aclnnEmbedding,
    aclnnCast,
    aclnnMean,
    aclnnReduceSum,
    aclnnInplaceCopy,
    aclnnMuls,
    aclnnAdds,
);

fn matmul_like(
    name: &'static str,
    rank: Option<usize>,
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cube: i8,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    let p1: &'static str = match name {
        "aclnnMatmul" => "aclnnMatmulGetWorkspaceSize",
        "aclnnBatchMatMul" => "aclnnBatchMatMulGetWorkspaceSize",
        _ => "aclnnMmGetWorkspaceSize",
    };
    guard(p1, |t| {
        let a = tsrc(t, self_, "self")?;
        let b = tsrc(t, mat2, "mat2")?;
        if let (Some(r), Src::Tensor(_, da), Src::Tensor(_, db)) = (rank, &a, &b) {
            if da.dims.len() != r || db.dims.len() != r {
                return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: operands must be {r}-D"));
            }
        }
        let o = tout(t, out, "out")?;
        let mut e = ex(name, Op::MatMul { trans_a: false, trans_b: false }, vec![a, b], vec![o], t.cfg.workspace);
        cube_rules(t, name, &mut e, cube)?;
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMatmulGetWorkspaceSize(
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cubeMathType: i8,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    matmul_like("aclnnMatmul", None, self_, mat2, out, cubeMathType, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnBatchMatMulGetWorkspaceSize(
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cubeMathType: i8,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    matmul_like("aclnnBatchMatMul", Some(3), self_, mat2, out, cubeMathType, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMmGetWorkspaceSize(
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cubeMathType: i8,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    matmul_like("aclnnMm", Some(2), self_, mat2, out, cubeMathType, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAddmmGetWorkspaceSize(
    self_: *const aclTensor,
    mat1: *const aclTensor,
    mat2: *const aclTensor,
    beta: *const aclScalar,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    cubeMathType: i8,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnAddmmGetWorkspaceSize", |t| {
        let c = tsrc(t, self_, "self")?;
        let a = tsrc(t, mat1, "mat1")?;
        let b = tsrc(t, mat2, "mat2")?;
        let beta = scalar(t, h(beta.cast()), "beta")? as f32;
        let alpha = scalar(t, h(alpha.cast()), "alpha")? as f32;
        let o = tout(t, out, "out")?;
        let op = Op::Gemm { trans_a: false, trans_b: false, alpha, beta };
        let mut e = ex("aclnnAddmm", op, vec![a, b, c], vec![o], t.cfg.workspace);
        cube_rules(t, "aclnnAddmm", &mut e, cubeMathType)?;
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

fn binary(
    name: &'static str,
    op: Op,
    self_: *const aclTensor,
    other: *const aclTensor,
    alpha: Option<*const aclScalar>,
    out: *mut aclTensor,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    let p1: &'static str = match name {
        "aclnnAdd" => "aclnnAddGetWorkspaceSize",
        "aclnnSub" => "aclnnSubGetWorkspaceSize",
        "aclnnMul" => "aclnnMulGetWorkspaceSize",
        _ => "aclnnDivGetWorkspaceSize",
    };
    guard(p1, |t| {
        let a = tsrc(t, self_, "self")?;
        let b = tsrc(t, other, "other")?;
        if let Some(al) = alpha {
            let v = scalar(t, h(al.cast()), "alpha")?;
            if v != 1.0 {
                return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: alpha {v} != 1 is not emulated"));
            }
        }
        let o = tout(t, out, "out")?;
        if matches!(op, Op::Div) && o.1.meta()?.dtype.is_int() {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnDiv is true division: an integer out is not deducible");
        }
        let e = ex(name, op, vec![a, b], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAddGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnAdd", Op::Add, self_, other, Some(alpha), out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnSubGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnSub", Op::Sub, self_, other, Some(alpha), out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMulGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnMul", Op::Mul, self_, other, None, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnDivGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnDiv", Op::Div, self_, other, None, out, workspaceSize, executor)
}

fn unary(
    p1: &'static str,
    name: &'static str,
    op: Op,
    self_: *const aclTensor,
    out: *const aclTensor,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(p1, |t| {
        if name == "aclnnExp" && t.cfg.is_910() {
            return fail(ACLNN_ERR_INNER_FIND_KERNEL_ERROR, format!("aclnnExp has no kernel for {}", t.cfg.soc));
        }
        let a = tsrc(t, self_, "self")?;
        let o = tout(t, out, "out")?;
        let e = ex(name, op, vec![a], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

macro_rules! unary_export {
    ($($p1:ident => $name:ident, $op:expr;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $p1(
            self_: *const aclTensor,
            out: *mut aclTensor,
            workspaceSize: *mut u64,
            executor: *mut *mut aclOpExecutor,
        ) -> aclnnStatus {
            unary(stringify!($p1), stringify!($name), $op, self_, out, workspaceSize, executor)
        }
    )*};
}

unary_export! {
    aclnnGeluGetWorkspaceSize => aclnnGelu, Op::Gelu(GeluApprox::Tanh);
    aclnnTanhGetWorkspaceSize => aclnnTanh, Op::Tanh;
    aclnnErfGetWorkspaceSize => aclnnErf, Op::Erf;
    aclnnExpGetWorkspaceSize => aclnnExp, Op::Exp;
    aclnnSqrtGetWorkspaceSize => aclnnSqrt, Op::Sqrt;
}

/// Relu's `out` is `const aclTensor *` in the header.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnReluGetWorkspaceSize(
    self_: *const aclTensor,
    out: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    unary("aclnnReluGetWorkspaceSize", "aclnnRelu", Op::Relu, self_, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnGeluV2GetWorkspaceSize(
    x: *const aclTensor,
    approximate: i64,
    y: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    let op = match approximate {
        0 => Op::Gelu(GeluApprox::Erf),
        1 => Op::Gelu(GeluApprox::Tanh),
        _ => {
            set_error("aclnnGeluV2: approximate must be 0 or 1");
            return ACLNN_ERR_PARAM_INVALID;
        }
    };
    unary("aclnnGeluV2GetWorkspaceSize", "aclnnGeluV2", op, x, y, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMulsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnMulsGetWorkspaceSize", |t| {
        let a = tsrc(t, self_, "self")?;
        let f = scalar(t, h(other.cast()), "other")? as f32;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnMuls", Op::Scale { factor: f }, vec![a], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAddsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnAddsGetWorkspaceSize", |t| {
        let a = tsrc(t, self_, "self")?;
        let v = scalar(t, h(other.cast()), "other")?;
        let al = scalar(t, h(alpha.cast()), "alpha")?;
        let Src::Tensor(_, ad) = &a else { return fail(ACLNN_ERR_PARAM_INVALID, "self") };
        let dt = ad.meta()?.dtype;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnAdds", Op::Add, vec![a, Src::Fill(dt, Vec::new(), v * al)], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnSoftmaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnSoftmaxGetWorkspaceSize", |t| {
        let a = tsrc(t, self_, "self")?;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnSoftmax", Op::Softmax { axis: dim as isize }, vec![a], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnLayerNormGetWorkspaceSize(
    input: *const aclTensor,
    normalizedShape: *const aclIntArray,
    weightOptional: *const aclTensor,
    biasOptional: *const aclTensor,
    eps: f64,
    out: *mut aclTensor,
    meanOutOptional: *mut aclTensor,
    rstdOutOptional: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnLayerNormGetWorkspaceSize", |t| {
        let x = tsrc(t, input, "input")?;
        let Src::Tensor(_, xd) = &x else { return fail(ACLNN_ERR_PARAM_INVALID, "input") };
        let ns = int_array(t, h(normalizedShape.cast()), "normalizedShape")?;
        let last = *xd.dims.last().unwrap_or(&0);
        if ns.len() != 1 || ns[0] != last {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnLayerNorm: only normalizedShape = [last dim] is emulated");
        }
        if !meanOutOptional.is_null() || !rstdOutOptional.is_null() {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnLayerNorm: mean/rstd outputs are not emulated");
        }
        let dt = xd.meta()?.dtype;
        let d = last.max(0) as usize;
        let w = if weightOptional.is_null() { Src::Fill(dt, vec![d], 1.0) } else { tsrc(t, weightOptional, "weight")? };
        let b = if biasOptional.is_null() { Src::Fill(dt, vec![d], 0.0) } else { tsrc(t, biasOptional, "bias")? };
        let o = tout(t, out, "out")?;
        let e = ex("aclnnLayerNorm", Op::LayerNorm { eps: eps as f32 }, vec![x, w, b], vec![o], t.cfg.workspace);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnPermuteGetWorkspaceSize(
    self_: *const aclTensor,
    dims: *const aclIntArray,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnPermuteGetWorkspaceSize", |t| {
        let x = tsrc(t, self_, "self")?;
        let Src::Tensor(_, xd) = &x else { return fail(ACLNN_ERR_PARAM_INVALID, "self") };
        let r = xd.dims.len() as i64;
        let perm = int_array(t, h(dims.cast()), "dims")?
            .into_iter()
            .map(|p| if p < 0 { p + r } else { p })
            .map(|p| usize::try_from(p).map_err(|_| Fail(ACLNN_ERR_PARAM_INVALID, "dims out of range".into())))
            .collect::<R<Vec<usize>>>()?;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnPermute", Op::Permute { perm }, vec![x], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

fn gather_like(
    p1: &'static str,
    name: &'static str,
    data: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    out: *const aclTensor,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(p1, |t| {
        let x = tsrc(t, data, "self")?;
        let Src::Tensor(_, xd) = &x else { return fail(ACLNN_ERR_PARAM_INVALID, "self") };
        let r = xd.dims.len() as i64;
        let axis = if dim < 0 { dim + r } else { dim };
        if axis < 0 || axis >= r {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: dim {dim} out of range"));
        }
        let n = xd.dims[axis as usize].max(0) as usize;
        let i = tsrc(t, index, "index")?;
        if name == "aclnnIndexSelect" {
            if let Src::Tensor(_, id) = &i {
                if id.dims.len() > 1 {
                    return fail(ACLNN_ERR_PARAM_INVALID, "aclnnIndexSelect: index must be 0-D or 1-D");
                }
            }
        }
        let o = tout(t, out, "out")?;
        let mut e = ex(name, Op::Gather { axis: axis as usize }, vec![x, i], vec![o], 0);
        e.index_check = Some((1, n));
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnIndexSelectGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    gather_like("aclnnIndexSelectGetWorkspaceSize", "aclnnIndexSelect", self_, dim, index, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnEmbeddingGetWorkspaceSize(
    weight: *const aclTensor,
    indices: *const aclTensor,
    out: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    gather_like("aclnnEmbeddingGetWorkspaceSize", "aclnnEmbedding", weight, 0, indices, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnCastGetWorkspaceSize(
    self_: *const aclTensor,
    dtype: aclDataType,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnCastGetWorkspaceSize", |t| {
        let x = tsrc(t, self_, "self")?;
        let to = ops::dtype_of(dtype)
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, format!("cast to {} not emulated", dtype.0)))?;
        if t.cfg.is_910() && dtype == ACL_BF16 {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnCast: BF16 is not supported on {}", t.cfg.soc));
        }
        let o = tout(t, out, "out")?;
        let e = ex("aclnnCast", Op::Cast { to }, vec![x], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

fn reduce(
    p1: &'static str,
    name: &'static str,
    mean: bool,
    self_: *const aclTensor,
    dims: *const aclIntArray,
    keep: bool,
    dtype: aclDataType,
    out: *mut aclTensor,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(p1, |t| {
        let x = tsrc(t, self_, "self")?;
        let axes: Vec<isize> = int_array(t, h(dims.cast()), "dim")?.into_iter().map(|a| a as isize).collect();
        let o = tout(t, out, "out")?;
        if o.1.dtype != dtype {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: dtype {} differs from out", dtype.0));
        }
        let op = if mean { Op::ReduceMean { axes, keepdims: keep } } else { Op::ReduceSum { axes, keepdims: keep } };
        let e = ex(name, op, vec![x], vec![o], t.cfg.workspace);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMeanGetWorkspaceSize(
    self_: *const aclTensor,
    dim: *const aclIntArray,
    keepDim: bool,
    dtype: aclDataType,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    reduce("aclnnMeanGetWorkspaceSize", "aclnnMean", true, self_, dim, keepDim, dtype, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnReduceSumGetWorkspaceSize(
    self_: *const aclTensor,
    dims: *const aclIntArray,
    keepDims: bool,
    dtype: aclDataType,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    reduce(
        "aclnnReduceSumGetWorkspaceSize",
        "aclnnReduceSum",
        false,
        self_,
        dims,
        keepDims,
        dtype,
        out,
        workspaceSize,
        executor,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnInplaceCopyGetWorkspaceSize(
    selfRef: *mut aclTensor,
    src: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnInplaceCopyGetWorkspaceSize", |t| {
        let s = tsrc(t, src, "src")?;
        let o = tout(t, selfRef, "selfRef")?;
        let (Src::Tensor(_, sd), od) = (&s, &o.1) else { return fail(ACLNN_ERR_PARAM_INVALID, "src") };
        if sd.dims != od.dims {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnInplaceCopy: broadcasting is not emulated");
        }
        let op = if sd.dtype == od.dtype { Op::Copy } else { Op::Cast { to: od.meta()?.dtype } };
        let e = ex("aclnnInplaceCopy", op, vec![s], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

// ================================================================= control ====

/// Reconfigures the emulator: `key=value;...` with keys `devices`, `memory`, `soc`,
/// `fail`, `workspace`. Call counts are reset. Changing devices, memory or the SoC
/// requires that nothing is outstanding (returns ACL_ERROR_INVALID_PARAM otherwise).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclEmuConfigure(spec: *const c_char) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        if spec.is_null() {
            return fail(ACL_ERROR_INVALID_PARAM, "spec is NULL");
        }
        // SAFETY: C contract: a NUL-terminated string.
        let s = unsafe { CStr::from_ptr(spec) }.to_string_lossy().into_owned();
        let mut t = lock(&emu().t);
        let mut cfg = t.cfg.clone();
        cfg.apply(&s).map_err(|e| Fail(ACL_ERROR_INVALID_PARAM, format!("aclEmuConfigure: {e}")))?;
        let structural = cfg.devices != t.cfg.devices || cfg.capacity != t.cfg.capacity || cfg.soc != t.cfg.soc;
        if structural {
            let c = t.counters();
            let busy = c.device_allocations + c.host_allocations + c.streams + c.events + c.executors + c.descriptors;
            if busy > 0 {
                return fail(ACL_ERROR_INVALID_PARAM, format!("aclEmuConfigure: {busy} objects outstanding ({c:?})"));
            }
            let initialized = t.initialized;
            let refs = std::mem::take(&mut t.device_refs);
            let mut nt = Tables::new(cfg)?;
            nt.initialized = initialized;
            nt.device_refs = refs.into_iter().filter(|(d, _)| (*d as usize) < nt.mem.len()).collect();
            let old = std::mem::replace(&mut *t, nt);
            // Dropping the old default streams joins their workers, whose queued jobs lock
            // the tables: only after unlocking.
            drop(t);
            drop(old);
        } else {
            t.cfg = cfg;
            t.calls.clear();
        }
        Ok(())
    })))
}

/// Writes the outstanding-object counters.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclEmuCounters(out: *mut Counters) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        let c = lock(&emu().t).counters();
        // SAFETY: C contract: NULL or writable.
        unsafe { put(out, c) }
    })))
}

/// How many times `name` was called since the last configuration.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclEmuCallCount(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: C contract: a NUL-terminated string.
    let n = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    lock(&emu().t).calls.get(&n).copied().unwrap_or(0)
}

/// The exported symbols have exactly the types acl-sys declares.
const _: () = {
    macro_rules! same {
        ($($f:ident),* $(,)?) => { $( let _: pfn::$f = $f; )* };
    }
    same!(
        aclInit,
        aclFinalize,
        aclGetRecentErrMsg,
        aclrtSetDevice,
        aclrtResetDevice,
        aclrtGetDevice,
        aclrtGetDeviceCount,
        aclrtGetSocName,
        aclGetDeviceCapability,
        aclrtSynchronizeDevice,
        aclrtGetCurrentContext,
        aclrtSetCurrentContext,
        aclrtCreateStream,
        aclrtCreateStreamWithConfig,
        aclrtDestroyStream,
        aclrtSynchronizeStream,
        aclrtStreamQuery,
        aclrtStreamWaitEvent,
        aclrtCreateEvent,
        aclrtCreateEventWithFlag,
        aclrtDestroyEvent,
        aclrtRecordEvent,
        aclrtQueryEventStatus,
        aclrtSynchronizeEvent,
        aclrtEventElapsedTime,
        aclrtMalloc,
        aclrtFree,
        aclrtGetMemInfo,
        aclrtMallocHost,
        aclrtFreeHost,
        aclrtMemcpy,
        aclrtMemcpyAsync,
        aclrtMemset,
        aclrtMemsetAsync,
        aclCreateTensor,
        aclDestroyTensor,
        aclCreateScalar,
        aclDestroyScalar,
        aclCreateIntArray,
        aclDestroyIntArray,
        aclSetAclOpExecutorRepeatable,
        aclDestroyAclOpExecutor,
        aclnnMatmulGetWorkspaceSize,
        aclnnMatmul,
        aclnnBatchMatMulGetWorkspaceSize,
        aclnnBatchMatMul,
        aclnnMmGetWorkspaceSize,
        aclnnMm,
        aclnnAddmmGetWorkspaceSize,
        aclnnAddmm,
        aclnnAddGetWorkspaceSize,
        aclnnAdd,
        aclnnSubGetWorkspaceSize,
        aclnnSub,
        aclnnMulGetWorkspaceSize,
        aclnnMul,
        aclnnDivGetWorkspaceSize,
        aclnnDiv,
        aclnnReluGetWorkspaceSize,
        aclnnRelu,
        aclnnGeluGetWorkspaceSize,
        aclnnGelu,
        aclnnGeluV2GetWorkspaceSize,
        aclnnGeluV2,
        aclnnTanhGetWorkspaceSize,
        aclnnTanh,
        aclnnErfGetWorkspaceSize,
        aclnnErf,
        aclnnExpGetWorkspaceSize,
        aclnnExp,
        aclnnSqrtGetWorkspaceSize,
        aclnnSqrt,
        aclnnSoftmaxGetWorkspaceSize,
        aclnnSoftmax,
        aclnnLayerNormGetWorkspaceSize,
        aclnnLayerNorm,
        aclnnPermuteGetWorkspaceSize,
        aclnnPermute,
        aclnnIndexSelectGetWorkspaceSize,
        aclnnIndexSelect,
        aclnnEmbeddingGetWorkspaceSize,
        aclnnEmbedding,
        aclnnCastGetWorkspaceSize,
        aclnnCast,
        aclnnMeanGetWorkspaceSize,
        aclnnMean,
        aclnnReduceSumGetWorkspaceSize,
        aclnnReduceSum,
        aclnnInplaceCopyGetWorkspaceSize,
        aclnnInplaceCopy,
        aclnnMulsGetWorkspaceSize,
        aclnnMuls,
        aclnnAddsGetWorkspaceSize,
        aclnnAdds,
    );
};

/// Names of the ACL/aclnn symbols this library exports (for tests and docs).
pub const EXPORTED: &[&str] = &[
    "aclInit",
    "aclFinalize",
    "aclGetRecentErrMsg",
    "aclrtSetDevice",
    "aclrtResetDevice",
    "aclrtGetDevice",
    "aclrtGetDeviceCount",
    "aclrtGetSocName",
    "aclGetDeviceCapability",
    "aclrtSynchronizeDevice",
    "aclrtGetCurrentContext",
    "aclrtSetCurrentContext",
    "aclrtCreateStream",
    "aclrtCreateStreamWithConfig",
    "aclrtDestroyStream",
    "aclrtSynchronizeStream",
    "aclrtStreamQuery",
    "aclrtStreamWaitEvent",
    "aclrtCreateEvent",
    "aclrtCreateEventWithFlag",
    "aclrtDestroyEvent",
    "aclrtRecordEvent",
    "aclrtQueryEventStatus",
    "aclrtSynchronizeEvent",
    "aclrtEventElapsedTime",
    "aclrtMalloc",
    "aclrtFree",
    "aclrtGetMemInfo",
    "aclrtMallocHost",
    "aclrtFreeHost",
    "aclrtMemcpy",
    "aclrtMemcpyAsync",
    "aclrtMemset",
    "aclrtMemsetAsync",
    "aclCreateTensor",
    "aclDestroyTensor",
    "aclCreateScalar",
    "aclDestroyScalar",
    "aclCreateIntArray",
    "aclDestroyIntArray",
    "aclSetAclOpExecutorRepeatable",
    "aclDestroyAclOpExecutor",
];
