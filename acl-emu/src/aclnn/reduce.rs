//! Reductions over axes: aclnnMean and aclnnReduceSum.

use crate::aclnn::basics::{ex, finish, int_array, phase2, tout, tsrc};
use crate::error::fail;
use crate::ffi::{guard, h};
use acl_sys::codes::*;
use acl_sys::*;
use runtime::Op;

phase2!(aclnnMean, aclnnReduceSum);

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
