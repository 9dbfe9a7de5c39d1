//! Normalisations over the last axis: aclnnSoftmax (`aclnnop/aclnn_softmax.h`) and
//! aclnnLayerNorm (`aclnnop/aclnn_layer_norm.h`).

use super::call::BResult;
use super::call::{Call, View};
use acl_sys::result::aclnn as nn;

pub(super) fn softmax(c: &mut Call, x: &View, axis: i64, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::softmax_get_workspace_size(c.api, tx, axis, to) };
    c.run(p1, nn::softmax)
}

pub(super) fn layer_norm(c: &mut Call, x: &View, g: &View, be: &View, eps: f32, out: &View) -> BResult<()> {
    let d = *x.dims.last().unwrap_or(&0) as i64;
    let (tx, tg, tb, to) = (c.tensor(x)?, c.tensor(g)?, c.tensor(be)?, c.output(out)?);
    let ns = c.ints(&[d])?;
    let null = std::ptr::null_mut();
    // SAFETY: live descriptors owned by `c`; mean and rstd outputs are optional (NULL).
    let p1 = unsafe { nn::layer_norm_get_workspace_size(c.api, tx, ns, tg, tb, eps as f64, to, null, null) };
    c.run(p1, nn::layer_norm)
}
