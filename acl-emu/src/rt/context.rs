//! Contexts: one per device, a handle naming the device bound to the calling thread.

use crate::error::fail;
use crate::ffi::{guard, h, put};
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;

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
