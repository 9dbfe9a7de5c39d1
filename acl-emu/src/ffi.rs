//! The C boundary shared by every exported symbol: call guards (call counting, fault
//! injection, status codes, panics caught and reported) and helpers for C pointers.

use crate::error::{Fail, R, fail};
use crate::state::{Tables, emu, lock, set_error};
use acl_sys::codes::*;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The status code of a caught call; a failure's message becomes the thread's pending
/// error text.
pub(crate) fn status(r: std::thread::Result<R<()>>) -> i32 {
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
pub(crate) fn guard(name: &'static str, f: impl FnOnce(&mut Tables) -> R<()>) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        let mut t = lock(&emu().t);
        t.enter(name)?;
        f(&mut t)
    })))
}

/// Like [`guard`], but `f` runs even when the call fails on entry (an injected fault),
/// and is handed that failure: for calls that must leave the state consistent whatever
/// they return (a capture ends even when ending it fails).
pub(crate) fn guard_always(name: &'static str, f: impl FnOnce(&mut Tables, R<()>) -> R<()>) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        let mut t = lock(&emu().t);
        let entry = t.enter(name);
        f(&mut t, entry)
    })))
}

/// Like [`guard`] but `f` locks by itself (for calls that block).
pub(crate) fn guard_unlocked(name: &'static str, f: impl FnOnce() -> R<()>) -> i32 {
    status(catch_unwind(AssertUnwindSafe(|| {
        lock(&emu().t).enter(name)?;
        f()
    })))
}

/// For constructors returning a handle: NULL on failure.
pub(crate) fn guard_handle<T>(name: &'static str, f: impl FnOnce(&mut Tables) -> R<u64>) -> *mut T {
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
pub(crate) unsafe fn put<T>(p: *mut T, v: T) -> R<()> {
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
pub(crate) unsafe fn read_array<T: Copy>(p: *const T, n: u64) -> R<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return fail(ACLNN_ERR_PARAM_NULLPTR, "array pointer is NULL");
    }
    // SAFETY: non-NULL and valid for `n` reads per this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec())
}

/// A C handle or pointer as the emulator's key.
pub(crate) fn h(p: *const c_void) -> u64 {
    p as usize as u64
}
