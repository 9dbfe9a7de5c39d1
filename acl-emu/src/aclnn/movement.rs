//! Data movement between shapes: aclnnCat (a tensor list joined along one dim).

use crate::aclnn::basics::{ex, finish, phase2, tensor_list, tout};
use crate::error::fail;
use crate::ffi::{guard, h};
use acl_sys::codes::*;
use acl_sys::*;
use runtime::Op;

phase2!(aclnnCat);

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
