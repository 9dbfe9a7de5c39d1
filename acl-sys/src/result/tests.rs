//! The result layer over fake functions put into the table's entries (no CANN needed).

use super::*;
use crate::LoadError;
use std::cell::Cell;
use std::ffi::c_char;

thread_local! {
    /// What the fake `aclGetRecentErrMsg` returns on this thread (0 = NULL, 1 = "", 2 = text).
    static MESSAGE: Cell<u8> = const { Cell::new(2) };
    static CALLS: Cell<u32> = const { Cell::new(0) };
}

unsafe extern "C" fn recent_msg() -> *const c_char {
    CALLS.with(|c| c.set(c.get() + 1));
    match MESSAGE.with(Cell::get) {
        0 => std::ptr::null(),
        1 => c"".as_ptr(),
        _ => c"EE9999: device memory exhausted".as_ptr(),
    }
}

unsafe extern "C" fn malloc_oom(dev_ptr: *mut *mut c_void, _size: usize, _policy: aclrtMemMallocPolicy) -> aclError {
    // SAFETY: the layer passes a valid out-pointer; a failing call may still write it.
    unsafe { *dev_ptr = 0xdead as *mut c_void };
    codes::ACL_ERROR_RT_MEMORY_ALLOCATION
}

unsafe extern "C" fn malloc_ok(dev_ptr: *mut *mut c_void, size: usize, _policy: aclrtMemMallocPolicy) -> aclError {
    // SAFETY: the layer passes a valid out-pointer.
    unsafe { *dev_ptr = (0x1000 + size) as *mut c_void };
    0
}

unsafe extern "C" fn mem_info(_attr: aclrtMemAttr, free: *mut usize, total: *mut usize) -> aclError {
    // SAFETY: the layer passes valid out-pointers.
    unsafe {
        *free = 3;
        *total = 8;
    }
    0
}

unsafe extern "C" fn soc_null() -> *const c_char {
    std::ptr::null()
}

unsafe extern "C" fn soc_name() -> *const c_char {
    c"Ascend910A".as_ptr()
}

unsafe extern "C" fn relu_ws(
    _x: *const aclTensor,
    _out: *const aclTensor,
    ws: *mut u64,
    ex: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    // SAFETY: the layer passes valid out-pointers.
    unsafe {
        *ws = 4096;
        *ex = 0x40 as *mut aclOpExecutor;
    }
    0
}

unsafe extern "C" fn relu_bad(_w: *mut c_void, _n: u64, _ex: *mut aclOpExecutor, _s: aclrtStream) -> aclnnStatus {
    codes::ACLNN_ERR_PARAM_INVALID
}

unsafe extern "C" fn tensor_null(
    _d: *const i64,
    _n: u64,
    _t: aclDataType,
    _s: *const i64,
    _o: i64,
    _f: aclFormat,
    _sd: *const i64,
    _sn: u64,
    _p: *mut c_void,
) -> *mut aclTensor {
    std::ptr::null_mut()
}

fn api_with_messages() -> Api {
    let api = Api::for_tests();
    assert!(api.slots.aclGetRecentErrMsg.set(Ok(recent_msg)).is_ok());
    api
}

#[test]
fn a_failure_status_carries_code_call_and_the_copied_message() {
    let api = api_with_messages();
    assert!(api.slots.aclrtMalloc.set(Ok(malloc_oom)).is_ok());
    MESSAGE.with(|m| m.set(2));
    let e = malloc(&api, 64, ACL_MEM_MALLOC_HUGE_FIRST).unwrap_err();
    assert_eq!(
        e,
        AclError::Status {
            code: 207001,
            name: "ACL_ERROR_RT_MEMORY_ALLOCATION",
            call: "aclrtMalloc",
            message: Some("EE9999: device memory exhausted".into()),
        }
    );
    assert_eq!(
        e.to_string(),
        "aclrtMalloc returned 207001 (ACL_ERROR_RT_MEMORY_ALLOCATION): EE9999: device memory exhausted"
    );
}

#[test]
fn null_or_empty_messages_are_absent() {
    let api = api_with_messages();
    for (mode, want) in [(0u8, None), (1, None), (2, Some("EE9999: device memory exhausted"))] {
        MESSAGE.with(|m| m.set(mode));
        assert_eq!(recent_error_message(&api).as_deref(), want, "mode {mode}");
        let e = check(&api, "aclrtFree", 507899).unwrap_err();
        assert_eq!(e.message(), want);
        assert_eq!(e.code(), Some(507899));
    }
}

#[test]
fn success_reads_no_message_and_out_parameters_come_back() {
    let api = api_with_messages();
    assert!(api.slots.aclrtMalloc.set(Ok(malloc_ok)).is_ok());
    assert!(api.slots.aclrtGetMemInfo.set(Ok(mem_info)).is_ok());
    assert!(api.slots.aclrtGetSocName.set(Ok(soc_name)).is_ok());
    CALLS.with(|c| c.set(0));
    assert_eq!(malloc(&api, 24, ACL_MEM_MALLOC_HUGE_FIRST).unwrap() as usize, 0x1018);
    assert_eq!(get_mem_info(&api, ACL_HBM_MEM).unwrap(), (3, 8));
    assert_eq!(get_soc_name(&api).unwrap(), "Ascend910A");
    assert_eq!(check(&api, "aclrtFree", 0), Ok(()));
    assert_eq!(CALLS.with(Cell::get), 0, "aclGetRecentErrMsg is read only after a failure");
}

#[test]
fn a_missing_symbol_is_the_load_error() {
    // The test program exports no CANN symbol, and aclGetRecentErrMsg is missing too.
    let api = Api::for_tests();
    let e = create_stream(&api).unwrap_err();
    assert!(
        matches!(&e, AclError::Missing(LoadError::SymbolMissing { symbol, .. }) if symbol == "aclrtCreateStream"),
        "{e:?}"
    );
    assert!(e.is_missing() && e.to_string().contains("aclrtCreateStream"), "{e}");
    // A symbol of a library that did not load: that library's load error.
    // SAFETY: the call fails at symbol resolution; nothing is dereferenced.
    let e = unsafe { aclnn::destroy_tensor(&api, std::ptr::null()) }.unwrap_err();
    assert!(matches!(e, AclError::Missing(LoadError::LibraryNotFound { .. })), "{e:?}");
    // Without aclGetRecentErrMsg a failure has no message.
    assert_eq!(check(&api, "aclrtMalloc", 207001).unwrap_err().message(), None);
}

#[test]
fn pointer_calls_returning_null_are_errors() {
    let api = api_with_messages();
    MESSAGE.with(|m| m.set(2));
    assert!(api.slots.aclrtGetSocName.set(Ok(soc_null)).is_ok());
    let e = get_soc_name(&api).unwrap_err();
    assert_eq!(e, AclError::Null { call: "aclrtGetSocName", message: Some("EE9999: device memory exhausted".into()) });
    assert!(api.slots.aclCreateTensor.set(Ok(tensor_null)).is_ok());
    let dims = [2i64];
    // SAFETY: the fake reads nothing; the arrays are valid anyway.
    let e = unsafe {
        aclnn::create_tensor(
            &api,
            dims.as_ptr(),
            1,
            ACL_FLOAT,
            dims.as_ptr(),
            0,
            ACL_FORMAT_ND,
            dims.as_ptr(),
            1,
            0x40 as _,
        )
    }
    .unwrap_err();
    assert_eq!((e.code(), e.call()), (Some(codes::ACLNN_ERR_INNER_NULLPTR), Some("aclCreateTensor")));
}

#[test]
fn both_phases_name_their_call() {
    let api = api_with_messages();
    assert!(api.slots.aclnnReluGetWorkspaceSize.set(Ok(relu_ws)).is_ok());
    assert!(api.slots.aclnnRelu.set(Ok(relu_bad)).is_ok());
    // SAFETY: the fakes dereference nothing but the layer's own out-pointers.
    let (ws, ex) = unsafe { aclnn::relu_get_workspace_size(&api, std::ptr::null(), std::ptr::null()) }.unwrap();
    assert_eq!((ws, ex as usize), (4096, 0x40));
    // SAFETY: as above.
    let e = unsafe { aclnn::relu(&api, std::ptr::null_mut(), ws, ex, std::ptr::null_mut()) }.unwrap_err();
    assert_eq!((e.code(), e.call()), (Some(codes::ACLNN_ERR_PARAM_INVALID), Some("aclnnRelu")));
    assert!(e.to_string().starts_with("aclnnRelu returned 161002 (ACLNN_ERR_PARAM_INVALID)"), "{e}");
}
