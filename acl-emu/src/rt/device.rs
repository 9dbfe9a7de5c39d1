//! Devices: selection and reset, count, SoC name and capabilities, device-wide
//! synchronization.

use crate::error::{Fail, fail};
use crate::ffi::{guard, guard_unlocked, put};
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use std::ffi::c_char;
use std::panic::catch_unwind;

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

/// Per-SoC figures of CANN's platform description files (`platform_config/<SoC>.ini`).
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
        for s in &streams {
            if let Err(e) = s.synchronize() {
                first = first.and(Err(e));
            }
        }
        let at = streams.iter().map(|s| s.clock.load(std::sync::atomic::Ordering::Relaxed)).max().unwrap_or(0);
        lock(&emu().t).timeline.host_waits(at);
        first
    })
}
