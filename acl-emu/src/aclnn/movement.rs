//! Data movement between shapes: aclnnCat (a tensor list joined along one dim),
//! aclnnSlice (one dim, forward steps) and aclnnExpand (broadcast to a size).

use crate::aclnn::basics::{ex, finish, int_array, phase2, tensor_list, tout, tsrc};
use crate::error::fail;
use crate::ffi::{guard, h};
use acl_sys::codes::*;
use acl_sys::*;
use runtime::Op;

phase2!(aclnnCat, aclnnSlice, aclnnExpand);

/// `tensors` joined along `dim` (negative counts from the end) into `out`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnCatGetWorkspaceSize(
    tensors: *const aclTensorList,
    dim: i64,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnCatGetWorkspaceSize", |t| {
        let ins = tensor_list(t, h(tensors.cast()), "tensors")?;
        if ins.is_empty() {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnCat: tensors is empty");
        }
        let axis = isize::try_from(dim).unwrap_or(isize::MAX);
        let o = tout(t, out, "out")?;
        let e = ex("aclnnCat", Op::Concat { axis }, ins, vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

/// `[start, end)` of `dim` (negative counts from the end) every `step` (positive) into
/// `out`, the bounds clamped as the operator's documentation gives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnSliceGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    start: i64,
    end: i64,
    step: i64,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnSliceGetWorkspaceSize", |t| {
        if step <= 0 {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnSlice: step {step} must be positive"));
        }
        let x = tsrc(t, self_, "self")?;
        let o = tout(t, out, "out")?;
        let axis = isize::try_from(dim).unwrap_or(isize::MAX);
        let op = Op::Slice { starts: vec![start], ends: vec![end], axes: vec![axis], steps: vec![step] };
        let e = ex("aclnnSlice", op, vec![x], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

/// `self` broadcast to `size` (non-negative dims) into `out`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnExpandGetWorkspaceSize(
    self_: *const aclTensor,
    size: *const aclIntArray,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnExpandGetWorkspaceSize", |t| {
        let x = tsrc(t, self_, "self")?;
        let shape = int_array(t, h(size.cast()), "size")?
            .into_iter()
            .map(usize::try_from)
            .collect::<Result<Vec<usize>, _>>()
            .or_else(|_| fail(ACLNN_ERR_PARAM_INVALID, "aclnnExpand: a negative size is not emulated"))?;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnExpand", Op::Expand { shape }, vec![x], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}
