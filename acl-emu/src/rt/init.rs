//! `aclInit`, `aclFinalize` and `aclGetRecentErrMsg`.

use crate::error::fail;
use crate::ffi::guard;
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use std::ffi::c_char;

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
