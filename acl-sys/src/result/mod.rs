//! The thin checked layer over the raw table: one function per ACL call npurt makes.
//!
//! Each function resolves its symbol in the [`Api`] (a missing one is
//! [`AclError::Missing`]), calls it, turns a failure status into [`AclError::Status`]
//! carrying the code, the C function's name and the text of `aclGetRecentErrMsg`
//! (copied at once, when that symbol resolves), and hands out-parameters back as return
//! values. Parameters are those of the C prototype (`acl/acl_rt.h`, `aclnn/acl_meta.h`,
//! `aclnnop/aclnn_*.h`), in order,
//! minus the out-parameters. No policy lives here: no retries, no fallbacks between
//! optional and required symbols, no device selection.
//!
//! * this module: errors, init, devices, contexts, streams, events, memory (`acl/acl.h`,
//!   `acl/acl_rt.h`);
//! * [`aclnn`]: tensor / scalar / int-array descriptors, executors and the two phases of
//!   every operator (`aclnn/acl_meta.h`, `aclnnop/aclnn_*.h`);
//! * [`capture`]: stream capture into model runtime instances and their replay;
//! * [`emulator`]: acl-emu's run counters and modelled clock (absent on a real host).
//!
//! # Safety
//!
//! A function is `unsafe` when it takes a raw pointer or a handle (`aclrtStream`,
//! `aclrtEvent`, `aclrtContext`, descriptor and executor pointers are all raw
//! pointers). Its contract is the C function's own, as CANN's headers and documentation
//! state it: every handle is live and belongs to the calling thread's
//! current device, every pointer is valid for the bytes or elements the call reads or
//! writes, for as long as the call (or, for stream-ordered calls, the queued work) uses
//! it. Each function's `# Safety` section names what is particular to it.

// Parameters keep the C prototypes' names.
#![allow(non_snake_case)]

pub mod aclnn;
pub mod capture;
pub mod emulator;

use crate::codes;
use crate::types::*;
use crate::{AclError, Api};
use std::ffi::{CStr, c_char, c_void};

/// `Ok` for status 0, else [`AclError::Status`] naming `call`, with the recent message.
pub fn check(api: &Api, call: &'static str, code: i32) -> Result<(), AclError> {
    if code == codes::ACL_SUCCESS {
        return Ok(());
    }
    Err(AclError::Status { code, name: codes::name(code), call, message: recent_error_message(api) })
}

/// `aclGetRecentErrMsg()`, copied (the library reuses its buffer at the next call);
/// `None` when the symbol is missing, or the text is NULL or empty.
pub fn recent_error_message(api: &Api) -> Option<String> {
    let f = api.aclGetRecentErrMsg().ok()?;
    // SAFETY: `aclGetRecentErrMsg` takes no arguments and returns NULL or a
    // NUL-terminated string owned by the library, valid until its next call on this
    // thread; it is copied before anything else runs.
    let p = unsafe { f() };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the contract above.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    if s.is_empty() { None } else { Some(s) }
}

// ---------------------------------------------------------------- A.1 init ----

/// `aclInit(configPath)`. A repeated initialisation is `ACL_ERROR_REPEAT_INITIALIZE`
/// (100002), which the caller may treat as success.
///
/// # Safety
/// `configPath` is NULL (no configuration) or a NUL-terminated path.
pub unsafe fn init(api: &Api, configPath: *const c_char) -> Result<(), AclError> {
    let f = api.aclInit()?;
    // SAFETY: the caller's contract on `configPath`.
    let code = unsafe { f(configPath) };
    check(api, "aclInit", code)
}

// -------------------------------------------------------------- A.2 device ----

/// `aclrtGetDeviceCount(&count)`.
pub fn get_device_count(api: &Api) -> Result<u32, AclError> {
    let f = api.aclrtGetDeviceCount()?;
    let mut count = 0u32;
    // SAFETY: a valid out-pointer.
    let code = unsafe { f(&mut count) };
    check(api, "aclrtGetDeviceCount", code)?;
    Ok(count)
}

/// `aclrtSetDevice(deviceId)`: binds the calling thread to the device (and adds one
/// reference to it, undone by [`reset_device`]).
pub fn set_device(api: &Api, deviceId: i32) -> Result<(), AclError> {
    let f = api.aclrtSetDevice()?;
    // SAFETY: a plain integer argument; an unknown id is an error status.
    let code = unsafe { f(deviceId) };
    check(api, "aclrtSetDevice", code)
}

/// `aclrtResetDevice(deviceId)`: drops one reference taken by [`set_device`]; the last
/// one releases every resource of the device.
///
/// # Safety
/// When this is the last reference, nothing made on the device (streams, events,
/// memory, its default context) is used afterwards.
pub unsafe fn reset_device(api: &Api, deviceId: i32) -> Result<(), AclError> {
    let f = api.aclrtResetDevice()?;
    // SAFETY: the caller's contract on the device's resources.
    let code = unsafe { f(deviceId) };
    check(api, "aclrtResetDevice", code)
}

/// `aclrtGetSocName()`, copied; NULL is [`AclError::Null`].
pub fn get_soc_name(api: &Api) -> Result<String, AclError> {
    let f = api.aclrtGetSocName()?;
    // SAFETY: no arguments; returns NULL or a library-owned NUL-terminated string.
    let p = unsafe { f() };
    if p.is_null() {
        return Err(AclError::Null { call: "aclrtGetSocName", message: recent_error_message(api) });
    }
    // SAFETY: non-NULL and NUL-terminated; copied at once.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `aclrtGetDeviceInfo(deviceId, attr, &value)` (optional symbol).
pub fn get_device_info(api: &Api, deviceId: u32, attr: aclrtDevAttr) -> Result<i64, AclError> {
    let f = api.aclrtGetDeviceInfo()?;
    let mut value = 0i64;
    // SAFETY: plain integer arguments and a valid out-pointer.
    let code = unsafe { f(deviceId, attr, &mut value) };
    check(api, "aclrtGetDeviceInfo", code)?;
    Ok(value)
}

/// `aclGetDeviceCapability(deviceId, deviceInfo, &value)`.
pub fn get_device_capability(api: &Api, deviceId: u32, deviceInfo: aclDeviceInfo) -> Result<i64, AclError> {
    let f = api.aclGetDeviceCapability()?;
    let mut value = 0i64;
    // SAFETY: plain integer arguments and a valid out-pointer.
    let code = unsafe { f(deviceId, deviceInfo, &mut value) };
    check(api, "aclGetDeviceCapability", code)?;
    Ok(value)
}

// ------------------------------------------------------------- A.3 context ----

/// `aclrtGetCurrentContext(&context)`: the calling thread's current context.
pub fn get_current_context(api: &Api) -> Result<aclrtContext, AclError> {
    let f = api.aclrtGetCurrentContext()?;
    let mut context: aclrtContext = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let code = unsafe { f(&mut context) };
    check(api, "aclrtGetCurrentContext", code)?;
    Ok(context)
}

/// `aclrtSetCurrentContext(context)`: binds the calling thread to the context's device.
///
/// # Safety
/// `context` is a live context (a device's default context stays live until the
/// device's last [`reset_device`]).
pub unsafe fn set_current_context(api: &Api, context: aclrtContext) -> Result<(), AclError> {
    let f = api.aclrtSetCurrentContext()?;
    // SAFETY: the caller's contract on `context`.
    let code = unsafe { f(context) };
    check(api, "aclrtSetCurrentContext", code)
}

// -------------------------------------------------------------- A.4 stream ----

/// `aclrtCreateStream(&stream)` on the current device.
pub fn create_stream(api: &Api) -> Result<aclrtStream, AclError> {
    let f = api.aclrtCreateStream()?;
    let mut stream: aclrtStream = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let code = unsafe { f(&mut stream) };
    check(api, "aclrtCreateStream", code)?;
    Ok(stream)
}

/// `aclrtCreateStreamWithConfig(&stream, priority, flag)` (optional symbol).
pub fn create_stream_with_config(api: &Api, priority: u32, flag: u32) -> Result<aclrtStream, AclError> {
    let f = api.aclrtCreateStreamWithConfig()?;
    let mut stream: aclrtStream = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the integers are checked by the callee.
    let code = unsafe { f(&mut stream, priority, flag) };
    check(api, "aclrtCreateStreamWithConfig", code)?;
    Ok(stream)
}

/// `aclrtDestroyStream(stream)`.
///
/// # Safety
/// `stream` is live, has no queued work that is still needed, and is not used again
/// after this returns `Ok`.
pub unsafe fn destroy_stream(api: &Api, stream: aclrtStream) -> Result<(), AclError> {
    let f = api.aclrtDestroyStream()?;
    // SAFETY: the caller's contract on `stream`.
    let code = unsafe { f(stream) };
    check(api, "aclrtDestroyStream", code)
}

/// `aclrtSynchronizeStream(stream)`: waits for the stream's queued work; an
/// asynchronous failure of that work is reported here.
///
/// # Safety
/// `stream` is a live stream of the current device.
pub unsafe fn synchronize_stream(api: &Api, stream: aclrtStream) -> Result<(), AclError> {
    let f = api.aclrtSynchronizeStream()?;
    // SAFETY: the caller's contract on `stream`.
    let code = unsafe { f(stream) };
    check(api, "aclrtSynchronizeStream", code)
}

/// `aclrtStreamWaitEvent(stream, event)`: later work on `stream` waits for `event`.
///
/// # Safety
/// `stream` and `event` are live handles of the current device.
pub unsafe fn stream_wait_event(api: &Api, stream: aclrtStream, event: aclrtEvent) -> Result<(), AclError> {
    let f = api.aclrtStreamWaitEvent()?;
    // SAFETY: the caller's contract on both handles.
    let code = unsafe { f(stream, event) };
    check(api, "aclrtStreamWaitEvent", code)
}

// --------------------------------------------------------------- A.5 event ----

/// `aclrtCreateEvent(&event)`.
pub fn create_event(api: &Api) -> Result<aclrtEvent, AclError> {
    let f = api.aclrtCreateEvent()?;
    let mut event: aclrtEvent = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let code = unsafe { f(&mut event) };
    check(api, "aclrtCreateEvent", code)?;
    Ok(event)
}

/// `aclrtCreateEventWithFlag(&event, flag)` (optional symbol; flags of §B.4).
pub fn create_event_with_flag(api: &Api, flag: u32) -> Result<aclrtEvent, AclError> {
    let f = api.aclrtCreateEventWithFlag()?;
    let mut event: aclrtEvent = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the flags are checked by the callee.
    let code = unsafe { f(&mut event, flag) };
    check(api, "aclrtCreateEventWithFlag", code)?;
    Ok(event)
}

/// `aclrtDestroyEvent(event)` (a recorded, pending event may be destroyed).
///
/// # Safety
/// `event` is live and not used again after this returns `Ok`.
pub unsafe fn destroy_event(api: &Api, event: aclrtEvent) -> Result<(), AclError> {
    let f = api.aclrtDestroyEvent()?;
    // SAFETY: the caller's contract on `event`.
    let code = unsafe { f(event) };
    check(api, "aclrtDestroyEvent", code)
}

/// `aclrtRecordEvent(event, stream)`.
///
/// # Safety
/// `event` and `stream` are live handles of the current device.
pub unsafe fn record_event(api: &Api, event: aclrtEvent, stream: aclrtStream) -> Result<(), AclError> {
    let f = api.aclrtRecordEvent()?;
    // SAFETY: the caller's contract on both handles.
    let code = unsafe { f(event, stream) };
    check(api, "aclrtRecordEvent", code)
}

/// `aclrtQueryEventStatus(event, &status)` (optional symbol): COMPLETE is 1.
///
/// # Safety
/// `event` is a live event.
pub unsafe fn query_event_status(api: &Api, event: aclrtEvent) -> Result<aclrtEventRecordedStatus, AclError> {
    let f = api.aclrtQueryEventStatus()?;
    let mut status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    // SAFETY: the caller's contract on `event`; a valid out-pointer.
    let code = unsafe { f(event, &mut status) };
    check(api, "aclrtQueryEventStatus", code)?;
    Ok(status)
}

/// `aclrtQueryEvent(event, &status)` (deprecated, optional symbol): COMPLETE is 0.
///
/// # Safety
/// `event` is a live event.
pub unsafe fn query_event(api: &Api, event: aclrtEvent) -> Result<aclrtEventStatus, AclError> {
    let f = api.aclrtQueryEvent()?;
    let mut status = ACL_EVENT_STATUS_NOT_READY;
    // SAFETY: the caller's contract on `event`; a valid out-pointer.
    let code = unsafe { f(event, &mut status) };
    check(api, "aclrtQueryEvent", code)?;
    Ok(status)
}

/// `aclrtSynchronizeEvent(event)`: waits until the recorded event has completed.
///
/// # Safety
/// `event` is a live event.
pub unsafe fn synchronize_event(api: &Api, event: aclrtEvent) -> Result<(), AclError> {
    let f = api.aclrtSynchronizeEvent()?;
    // SAFETY: the caller's contract on `event`.
    let code = unsafe { f(event) };
    check(api, "aclrtSynchronizeEvent", code)
}

/// `aclrtEventElapsedTime(&ms, startEvent, endEvent)`: milliseconds between two
/// recorded events (the C out-pointer comes first).
///
/// # Safety
/// Both events are live.
pub unsafe fn event_elapsed_time(api: &Api, startEvent: aclrtEvent, endEvent: aclrtEvent) -> Result<f32, AclError> {
    let f = api.aclrtEventElapsedTime()?;
    let mut ms = 0f32;
    // SAFETY: a valid out-pointer; the caller's contract on both events.
    let code = unsafe { f(&mut ms, startEvent, endEvent) };
    check(api, "aclrtEventElapsedTime", code)?;
    Ok(ms)
}

// ------------------------------------------------------- A.6 device memory ----

/// `aclrtMalloc(&devPtr, size, policy)` on the current device (the start is 64-byte
/// aligned; out of memory is `ACL_ERROR_RT_MEMORY_ALLOCATION` or `ACL_ERROR_RT_DEVICE_OOM`).
pub fn malloc(api: &Api, size: usize, policy: aclrtMemMallocPolicy) -> Result<*mut c_void, AclError> {
    let f = api.aclrtMalloc()?;
    let mut devPtr: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; size and policy are checked by the callee.
    let code = unsafe { f(&mut devPtr, size, policy) };
    check(api, "aclrtMalloc", code)?;
    Ok(devPtr)
}

/// `aclrtFree(devPtr)`: releases at once, without waiting for queued work.
///
/// # Safety
/// `devPtr` came from [`malloc`], is freed once, and no queued or later work uses it.
pub unsafe fn free(api: &Api, devPtr: *mut c_void) -> Result<(), AclError> {
    let f = api.aclrtFree()?;
    // SAFETY: the caller's contract on `devPtr`.
    let code = unsafe { f(devPtr) };
    check(api, "aclrtFree", code)
}

/// `aclrtGetMemInfo(attr, &free, &total)` of the current device: `(free, total)` bytes.
pub fn get_mem_info(api: &Api, attr: aclrtMemAttr) -> Result<(usize, usize), AclError> {
    let f = api.aclrtGetMemInfo()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers; `attr` is checked by the callee.
    let code = unsafe { f(attr, &mut free, &mut total) };
    check(api, "aclrtGetMemInfo", code)?;
    Ok((free, total))
}

// -------------------------------------------------------- A.8 copy / set ----

/// `aclrtMemcpy(dst, destMax, src, count, kind)`: a synchronous copy (it does not wait
/// for queued work that writes `src`).
///
/// # Safety
/// `dst` is valid for `destMax` bytes and `src` for `count` bytes (`count <= destMax`)
/// on the sides `kind` names; host ranges stay borrowed for the call.
pub unsafe fn memcpy(
    api: &Api,
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> Result<(), AclError> {
    let f = api.aclrtMemcpy()?;
    // SAFETY: the caller's contract on both ranges.
    let code = unsafe { f(dst, destMax, src, count, kind) };
    check(api, "aclrtMemcpy", code)
}

/// `aclrtMemcpyAsync(dst, destMax, src, count, kind, stream)`: a stream-ordered copy.
///
/// # Safety
/// As [`memcpy`], for as long as the queued copy runs; `stream` is live; addresses are
/// 64-byte aligned for on-chip device-to-device copies and host memory is pinned.
pub unsafe fn memcpy_async(
    api: &Api,
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> Result<(), AclError> {
    let f = api.aclrtMemcpyAsync()?;
    // SAFETY: the caller's contract on both ranges and the stream.
    let code = unsafe { f(dst, destMax, src, count, kind, stream) };
    check(api, "aclrtMemcpyAsync", code)
}

/// `aclrtMemset(devPtr, maxCount, value, count)`: a synchronous fill.
///
/// # Safety
/// `devPtr` is device (or ACL host) memory valid for `maxCount >= count` bytes.
pub unsafe fn memset(
    api: &Api,
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
) -> Result<(), AclError> {
    let f = api.aclrtMemset()?;
    // SAFETY: the caller's contract on the range.
    let code = unsafe { f(devPtr, maxCount, value, count) };
    check(api, "aclrtMemset", code)
}

/// `aclrtMemsetAsync(devPtr, maxCount, value, count, stream)` (a stream-ordered fill).
///
/// # Safety
/// As [`memset`], for as long as the queued fill runs; `stream` is live.
pub unsafe fn memset_async(
    api: &Api,
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
    stream: aclrtStream,
) -> Result<(), AclError> {
    let f = api.aclrtMemsetAsync()?;
    // SAFETY: the caller's contract on the range and the stream.
    let code = unsafe { f(devPtr, maxCount, value, count, stream) };
    check(api, "aclrtMemsetAsync", code)
}

#[cfg(test)]
mod tests;
