//! Copies into another layout or type: aclnnPermute, aclnnCast and aclnnInplaceCopy.

use crate::aclnn::basics::{ex, finish, int_array, phase2, tout, tsrc};
use crate::descriptors::{Src, dtype_of};
use crate::error::{Fail, R, fail};
use crate::ffi::{guard, h};
use acl_sys::codes::*;
use acl_sys::*;
use runtime::Op;

phase2!(aclnnPermute, aclnnCast, aclnnInplaceCopy);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnPermuteGetWorkspaceSize(
    self_: *const aclTensor,
    dims: *const aclIntArray,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnPermuteGetWorkspaceSize", |t| {
        let x = tsrc(t, self_, "self")?;
        let Src::Tensor(_, xd) = &x else { return fail(ACLNN_ERR_PARAM_INVALID, "self") };
        let r = xd.dims.len() as i64;
        let perm = int_array(t, h(dims.cast()), "dims")?
            .into_iter()
            .map(|p| if p < 0 { p + r } else { p })
            .map(|p| usize::try_from(p).map_err(|_| Fail(ACLNN_ERR_PARAM_INVALID, "dims out of range".into())))
            .collect::<R<Vec<usize>>>()?;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnPermute", Op::Permute { perm }, vec![x], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnCastGetWorkspaceSize(
    self_: *const aclTensor,
    dtype: aclDataType,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnCastGetWorkspaceSize", |t| {
        let x = tsrc(t, self_, "self")?;
        let to = dtype_of(dtype)
            .ok_or_else(|| Fail(ACLNN_ERR_PARAM_INVALID, format!("cast to {} not emulated", dtype.0)))?;
        if t.cfg.is_910() && dtype == ACL_BF16 {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnCast: BF16 is not supported on {}", t.cfg.soc));
        }
        let o = tout(t, out, "out")?;
        let e = ex("aclnnCast", Op::Cast { to }, vec![x], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnInplaceCopyGetWorkspaceSize(
    selfRef: *mut aclTensor,
    src: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnInplaceCopyGetWorkspaceSize", |t| {
        let s = tsrc(t, src, "src")?;
        let o = tout(t, selfRef, "selfRef")?;
        let (Src::Tensor(_, sd), od) = (&s, &o.1) else { return fail(ACLNN_ERR_PARAM_INVALID, "src") };
        if sd.dims != od.dims {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnInplaceCopy: broadcasting is not emulated");
        }
        let op = if sd.dtype == od.dtype { Op::Copy } else { Op::Cast { to: od.meta()?.dtype } };
        let e = ex("aclnnInplaceCopy", op, vec![s], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}
