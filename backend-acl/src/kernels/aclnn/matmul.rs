//! Matrix products on the Cube: aclnnMatmul (`aclnnop/aclnn_matmul.h`) and aclnnAddmm
//! (`aclnnop/aclnn_addmm.h`), with the cubeMathType a dtype needs on the SoC.
//!
//! Every operator in the op-mapping files: the descriptors passed to phase 1 are owned by
//! the `Call` and live until it drops, after phase 2 returned; optional outputs are NULL
//! where the operator documents them so.

use super::call::BResult;
use super::call::{Call, View};
use acl_sys::result::aclnn as nn;
use runtime::DType;

pub(super) fn cube_math(is_910: bool, d: DType) -> i8 {
    if d == DType::F32 && is_910 {
        acl_sys::cube_math::ALLOW_FP32_DOWN_PRECISION
    } else {
        acl_sys::cube_math::KEEP_DTYPE
    }
}

pub(super) fn matmul(c: &mut Call, a: &View, bm: &View, out: &View, cube: i8) -> BResult<()> {
    let (ta, tb, to) = (c.tensor(a)?, c.tensor(bm)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::matmul_get_workspace_size(c.api, ta, tb, to, cube) };
    c.run(p1, nn::matmul)
}

pub(super) fn addmm(
    c: &mut Call,
    bias: &View,
    a: &View,
    bm: &View,
    beta: f32,
    alpha: f32,
    out: &View,
    cube: i8,
) -> BResult<()> {
    let (tc, ta, tb, to) = (c.tensor(bias)?, c.tensor(a)?, c.tensor(bm)?, c.output(out)?);
    let (sb, sa) = (c.scalar_f32(beta)?, c.scalar_f32(alpha)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::addmm_get_workspace_size(c.api, tc, ta, tb, sb, sa, to, cube) };
    c.run(p1, nn::addmm)
}
