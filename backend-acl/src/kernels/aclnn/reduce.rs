//! Reductions: aclnnMean and aclnnReduceSum (`aclnnop/aclnn_mean.h`,
//! `aclnnop/aclnn_reduce_sum.h`), and the row tests of masked attention: aclnnAmax,
//! aclnnEqScalar and aclnnInplaceMaskedFillScalar.

use super::call::BResult;
use super::call::acl_dtype;
use super::call::{Call, View};
use acl_sys::result::aclnn as nn;

pub(super) fn reduce(c: &mut Call, mean: bool, x: &View, axes: &[i64], keep: bool, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let dims = c.ints(axes)?;
    let dt = acl_dtype(out.dtype);
    if mean {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::mean_get_workspace_size(c.api, tx, dims, keep, dt, to) };
        c.run(p1, nn::mean)
    } else {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::reduce_sum_get_workspace_size(c.api, tx, dims, keep, dt, to) };
        c.run(p1, nn::reduce_sum)
    }
}

/// `masked` (bool over u8, `[.., 1]`) = whether the last axis of `x` is all -inf: its
/// maximum `row_max` (`[.., 1]`, x's dtype; NaN propagates) through aclnnAmax, compared
/// with -inf through aclnnEqScalar.
pub(super) fn all_minus_inf(c: &mut Call, x: &View, row_max: &View, masked: &View) -> BResult<()> {
    let (tx, tm) = (c.tensor(x)?, c.output(row_max)?);
    let last = c.ints(&[x.dims.len() as i64 - 1])?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::amax_get_workspace_size(c.api, tx, last, true, tm) };
    c.run(p1, nn::amax)?;
    let (tm, tb) = (c.tensor(row_max)?, c.bool_output(masked)?);
    let ninf = c.scalar_f32(f32::NEG_INFINITY)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::eq_scalar_get_workspace_size(c.api, tm, ninf, tb) };
    c.run(p1, nn::eq_scalar)
}

/// Zeroes the rows of `out` where `masked` (bool over u8, broadcast to `out`) is true
/// (aclnnInplaceMaskedFillScalar).
pub(super) fn zero_rows(c: &mut Call, out: &View, masked: &View) -> BResult<()> {
    // `out` is read and written in place: the prototype lists it as the first input.
    let (to, tb) = (c.tensor(out)?, c.bool_tensor(masked)?);
    let zero = c.scalar_for(out.dtype, 0.0)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::inplace_masked_fill_scalar_get_workspace_size(c.api, to, tb, zero) };
    c.run(p1, nn::inplace_masked_fill_scalar)
}
