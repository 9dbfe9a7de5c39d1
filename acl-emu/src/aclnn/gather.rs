//! Gathers along an axis: aclnnIndexSelect and aclnnEmbedding.

use crate::aclnn::basics::{ex, finish, phase2, tout, tsrc};
use crate::descriptors::Src;
use crate::error::fail;
use crate::ffi::guard;
use acl_sys::codes::*;
use acl_sys::*;
use runtime::Op;

phase2!(aclnnIndexSelect, aclnnEmbedding);

fn gather_like(
    p1: &'static str,
    name: &'static str,
    data: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    out: *const aclTensor,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(p1, |t| {
        let x = tsrc(t, data, "self")?;
        let Src::Tensor(_, xd) = &x else { return fail(ACLNN_ERR_PARAM_INVALID, "self") };
        let r = xd.dims.len() as i64;
        let axis = if dim < 0 { dim + r } else { dim };
        if axis < 0 || axis >= r {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: dim {dim} out of range"));
        }
        let n = xd.dims[axis as usize].max(0) as usize;
        let i = tsrc(t, index, "index")?;
        if name == "aclnnIndexSelect"
            && let Src::Tensor(_, id) = &i
            && id.dims.len() > 1
        {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnIndexSelect: index must be 0-D or 1-D");
        }
        let o = tout(t, out, "out")?;
        let mut e = ex(name, Op::Gather { axis: axis as usize }, vec![x, i], vec![o], 0);
        e.index_check = Some((1, n));
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnIndexSelectGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    index: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    gather_like("aclnnIndexSelectGetWorkspaceSize", "aclnnIndexSelect", self_, dim, index, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnEmbeddingGetWorkspaceSize(
    weight: *const aclTensor,
    indices: *const aclTensor,
    out: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    gather_like("aclnnEmbeddingGetWorkspaceSize", "aclnnEmbedding", weight, 0, indices, out, workspaceSize, executor)
}
