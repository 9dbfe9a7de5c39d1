//! Element-wise operators on the Vector unit: aclnnAdd / aclnnAdds / aclnnSub
//! (`aclnn_add.h`, `aclnn_sub.h`), aclnnMul / aclnnMuls / aclnnDiv, aclnnPowTensorTensor, aclnnEqTensor, aclnnSWhere, aclnnGelu / aclnnGeluV2,
//! aclnnRelu, aclnnTanh, aclnnErf, aclnnExp, aclnnSqrt and aclnnCast (`aclnnop/` headers
//! of ops-nn and ops-math).

use super::call::BResult;
use super::call::acl_dtype;
use super::call::{Call, View};
use super::recorded::Phase2;
use acl_sys::result::aclnn as nn;
use runtime::{DType, GeluApprox, Op};

pub(super) fn add_sub(c: &mut Call, sub: bool, x: &View, y: &View, out: &View) -> BResult<()> {
    let (tx, ty, to) = (c.tensor(x)?, c.tensor(y)?, c.output(out)?);
    let al = c.scalar_for(x.dtype, 1.0)?;
    if sub {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::sub_get_workspace_size(c.api, tx, ty, al, to) };
        c.run(p1, nn::sub)
    } else {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::add_get_workspace_size(c.api, tx, ty, al, to) };
        c.run(p1, nn::add)
    }
}

pub(super) fn mul_div(c: &mut Call, div: bool, x: &View, y: &View, out: &View) -> BResult<()> {
    let (tx, ty, to) = (c.tensor(x)?, c.tensor(y)?, c.output(out)?);
    if div {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::div_get_workspace_size(c.api, tx, ty, to) };
        c.run(p1, nn::div)
    } else {
        // SAFETY: live descriptors owned by `c`.
        let p1 = unsafe { nn::mul_get_workspace_size(c.api, tx, ty, to) };
        c.run(p1, nn::mul)
    }
}

/// `x ^ y` with broadcasting (aclnnPowTensorTensor).
pub(super) fn pow(c: &mut Call, x: &View, y: &View, out: &View) -> BResult<()> {
    let (tx, ty, to) = (c.tensor(x)?, c.tensor(y)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::pow_tensor_tensor_get_workspace_size(c.api, tx, ty, to) };
    c.run(p1, nn::pow_tensor_tensor)
}

/// `x == y` with broadcasting into a u8 output (aclnnEqTensor).
pub(super) fn eq(c: &mut Call, x: &View, y: &View, out: &View) -> BResult<()> {
    let (tx, ty, to) = (c.tensor(x)?, c.tensor(y)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::eq_tensor_get_workspace_size(c.api, tx, ty, to) };
    c.run(p1, nn::eq_tensor)
}

/// `condition ? x : y` with broadcasting, a UINT8 condition (aclnnSWhere).
pub(super) fn s_where(c: &mut Call, cond: &View, x: &View, y: &View, out: &View) -> BResult<()> {
    let (tc, tx, ty, to) = (c.tensor(cond)?, c.tensor(x)?, c.tensor(y)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::s_where_get_workspace_size(c.api, tc, tx, ty, to) };
    c.run(p1, nn::s_where)
}

pub(super) fn muls(c: &mut Call, x: &View, factor: f32, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let s = c.scalar_f32(factor)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::muls_get_workspace_size(c.api, tx, s, to) };
    c.run(p1, nn::muls)
}

/// `out = x + v` for a scalar `v` (aclnnAdds, alpha 1).
pub(super) fn adds(c: &mut Call, x: &View, v: f64, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let (sv, one) = (c.scalar_for(x.dtype, v)?, c.scalar_for(x.dtype, 1.0)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::adds_get_workspace_size(c.api, tx, sv, one, to) };
    c.run(p1, nn::adds)
}

pub(super) fn gelu(c: &mut Call, x: &View, approx: GeluApprox, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    match approx {
        GeluApprox::Tanh => {
            // SAFETY: live descriptors owned by `c`.
            let p1 = unsafe { nn::gelu_get_workspace_size(c.api, tx, to) };
            c.run(p1, nn::gelu)
        }
        GeluApprox::Erf => {
            // SAFETY: live descriptors owned by `c`; approximate 0 = erf.
            let p1 = unsafe { nn::gelu_v2_get_workspace_size(c.api, tx, 0, to) };
            c.run(p1, nn::gelu_v2)
        }
    }
}

/// Relu, Tanh, Erf, Exp, Sqrt, Neg, Sigmoid or Silu.
pub(super) fn unary(c: &mut Call, op: &Op, x: &View, out: &View) -> BResult<()> {
    let (tx, to) = (c.tensor(x)?, c.output(out)?);
    let (p1, p2): (_, Phase2) = match op {
        // SAFETY: live descriptors owned by `c`.
        Op::Relu => (unsafe { nn::relu_get_workspace_size(c.api, tx, to) }, nn::relu),
        // SAFETY: as above.
        Op::Tanh => (unsafe { nn::tanh_get_workspace_size(c.api, tx, to) }, nn::tanh),
        // SAFETY: as above.
        Op::Erf => (unsafe { nn::erf_get_workspace_size(c.api, tx, to) }, nn::erf),
        // SAFETY: as above.
        Op::Exp => (unsafe { nn::exp_get_workspace_size(c.api, tx, to) }, nn::exp),
        // SAFETY: as above.
        Op::Neg => (unsafe { nn::neg_get_workspace_size(c.api, tx, to) }, nn::neg),
        // SAFETY: as above.
        Op::Sigmoid => (unsafe { nn::sigmoid_get_workspace_size(c.api, tx, to) }, nn::sigmoid),
        // SAFETY: as above.
        Op::Silu => (unsafe { nn::silu_get_workspace_size(c.api, tx, to) }, nn::silu),
        // SAFETY: as above.
        _ => (unsafe { nn::sqrt_get_workspace_size(c.api, tx, to) }, nn::sqrt),
    };
    c.run(p1, p2)
}

pub(super) fn cast(c: &mut Call, x: &View, to: DType, out: &View) -> BResult<()> {
    let (tx, tout) = (c.tensor(x)?, c.output(out)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::cast_get_workspace_size(c.api, tx, acl_dtype(to), tout) };
    c.run(p1, nn::cast)
}
