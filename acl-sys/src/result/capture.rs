//! Stream capture into model runtime instances (`aclmdlRI*`): work queued on a stream
//! between `aclmdlRICaptureBegin` and `aclmdlRICaptureEnd` is recorded instead of run,
//! and replayed by `aclmdlRIExecuteAsync`. Every symbol here is optional (older CANN
//! releases lack them): a missing one is [`AclError::Missing`].

use super::check;
use crate::types::*;
use crate::{AclError, Api};

/// `aclmdlRICaptureBegin(stream, mode)`.
///
/// # Safety
/// `stream` is a live stream of the current device, not already being captured.
pub unsafe fn capture_begin(api: &Api, stream: aclrtStream, mode: aclmdlRICaptureMode) -> Result<(), AclError> {
    let f = api.aclmdlRICaptureBegin()?;
    // SAFETY: the caller's contract on `stream`; `mode` is any i32 (checked by the callee).
    let code = unsafe { f(stream, mode) };
    check(api, "aclmdlRICaptureBegin", code)
}

/// `aclmdlRICaptureGetInfo(stream, &status, &modelRI)`: whether `stream` is being
/// captured, and into which instance.
///
/// # Safety
/// `stream` is a live stream of the current device.
pub unsafe fn capture_get_info(api: &Api, stream: aclrtStream) -> Result<(aclmdlRICaptureStatus, aclmdlRI), AclError> {
    let f = api.aclmdlRICaptureGetInfo()?;
    let mut status = aclmdlRICaptureStatus::default();
    let mut ri: aclmdlRI = std::ptr::null_mut();
    // SAFETY: the caller's contract on `stream`; both out-pointers are valid.
    let code = unsafe { f(stream, &mut status, &mut ri) };
    check(api, "aclmdlRICaptureGetInfo", code)?;
    Ok((status, ri))
}

/// `aclmdlRICaptureEnd(stream, &modelRI)`: the instance recorded since
/// [`capture_begin`], to be released with [`destroy`].
///
/// # Safety
/// `stream` is a live stream of the current device that this thread is capturing.
pub unsafe fn capture_end(api: &Api, stream: aclrtStream) -> Result<aclmdlRI, AclError> {
    let f = api.aclmdlRICaptureEnd()?;
    let mut ri: aclmdlRI = std::ptr::null_mut();
    // SAFETY: the caller's contract on `stream`; `ri` is a valid out-pointer.
    let code = unsafe { f(stream, &mut ri) };
    check(api, "aclmdlRICaptureEnd", code)?;
    Ok(ri)
}

/// `aclmdlRIExecuteAsync(modelRI, stream)`: queues a replay on `stream`.
///
/// # Safety
/// `modelRI` is a live instance and `stream` a live stream of the current device; every
/// buffer the recorded work touches stays valid until the replay has run.
pub unsafe fn execute_async(api: &Api, modelRI: aclmdlRI, stream: aclrtStream) -> Result<(), AclError> {
    let f = api.aclmdlRIExecuteAsync()?;
    // SAFETY: the caller's contract on both handles and the recorded buffers.
    let code = unsafe { f(modelRI, stream) };
    check(api, "aclmdlRIExecuteAsync", code)
}

/// `aclmdlRIDestroy(modelRI)`.
///
/// # Safety
/// `modelRI` is live, no queued replay of it is still needed, and it is not used again
/// after this returns `Ok`.
pub unsafe fn destroy(api: &Api, modelRI: aclmdlRI) -> Result<(), AclError> {
    let f = api.aclmdlRIDestroy()?;
    // SAFETY: the caller's contract on `modelRI`.
    let code = unsafe { f(modelRI) };
    check(api, "aclmdlRIDestroy", code)
}
