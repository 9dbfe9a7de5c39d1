//! Element-wise operators: binary arithmetic (aclnnAdd, aclnnSub, aclnnMul, aclnnDiv,
//! aclnnPowTensorTensor, the comparison aclnnEqTensor and the selection aclnnSWhere),
//! activations and other unary functions (aclnnNeg and aclnnSigmoid among them), and the scalar forms aclnnMuls and aclnnAdds.

use crate::aclnn::basics::{ex, finish, phase2, scalar, tout, tsrc};
use crate::descriptors::Src;
use crate::error::fail;
use crate::ffi::{guard, h};
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use runtime::{GeluApprox, Op};

phase2!(
    aclnnAdd,
    aclnnSub,
    aclnnMul,
    aclnnDiv,
    aclnnPowTensorTensor,
    aclnnEqTensor,
    aclnnSWhere,
    aclnnRelu,
    aclnnGelu,
    aclnnGeluV2,
    aclnnTanh,
    aclnnErf,
    aclnnExp,
    aclnnSqrt,
    aclnnNeg,
    aclnnSigmoid,
    aclnnMuls,
    aclnnAdds,
    aclnnSilu,
    aclnnSwiGlu
);

fn binary(
    name: &'static str,
    op: Op,
    self_: *const aclTensor,
    other: *const aclTensor,
    alpha: Option<*const aclScalar>,
    out: *mut aclTensor,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    let p1: &'static str = match name {
        "aclnnAdd" => "aclnnAddGetWorkspaceSize",
        "aclnnSub" => "aclnnSubGetWorkspaceSize",
        "aclnnMul" => "aclnnMulGetWorkspaceSize",
        "aclnnPowTensorTensor" => "aclnnPowTensorTensorGetWorkspaceSize",
        "aclnnEqTensor" => "aclnnEqTensorGetWorkspaceSize",
        _ => "aclnnDivGetWorkspaceSize",
    };
    guard(p1, |t| {
        let a = tsrc(t, self_, "self")?;
        let b = tsrc(t, other, "other")?;
        if let Some(al) = alpha {
            let v = scalar(t, h(al.cast()), "alpha")?;
            if v != 1.0 {
                return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: alpha {v} != 1 is not emulated"));
            }
        }
        let o = tout(t, out, "out")?;
        if matches!(op, Op::Div) && o.1.meta()?.dtype.is_int() {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnDiv is true division: an integer out is not deducible");
        }
        let e = ex(name, op, vec![a, b], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAddGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnAdd", Op::Add, self_, other, Some(alpha), out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnSubGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnSub", Op::Sub, self_, other, Some(alpha), out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMulGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnMul", Op::Mul, self_, other, None, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnDivGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnDiv", Op::Div, self_, other, None, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnPowTensorTensorGetWorkspaceSize(
    self_: *const aclTensor,
    exponent: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnPowTensorTensor", Op::Pow, self_, exponent, None, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnEqTensorGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    binary("aclnnEqTensor", Op::Equal, self_, other, None, out, workspaceSize, executor)
}

/// `condition ? self : other` with broadcasting; the condition UINT8 (or BOOL, stored
/// alike) as the header documents.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnSWhereGetWorkspaceSize(
    condition: *const aclTensor,
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnSWhereGetWorkspaceSize", |t| {
        let c = tsrc(t, condition, "condition")?;
        let (a, b) = (tsrc(t, self_, "self")?, tsrc(t, other, "other")?);
        let o = tout(t, out, "out")?;
        let e = ex("aclnnSWhere", Op::Where, vec![c, a, b], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

fn unary(
    p1: &'static str,
    name: &'static str,
    op: Op,
    self_: *const aclTensor,
    out: *const aclTensor,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(p1, |t| {
        if name == "aclnnExp" && t.cfg.is_910() {
            return fail(ACLNN_ERR_INNER_FIND_KERNEL_ERROR, format!("aclnnExp has no kernel for {}", t.cfg.soc));
        }
        let a = tsrc(t, self_, "self")?;
        let o = tout(t, out, "out")?;
        let e = ex(name, op, vec![a], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

macro_rules! unary_export {
    ($($p1:ident => $name:ident, $op:expr;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $p1(
            self_: *const aclTensor,
            out: *mut aclTensor,
            workspaceSize: *mut u64,
            executor: *mut *mut aclOpExecutor,
        ) -> aclnnStatus {
            unary(stringify!($p1), stringify!($name), $op, self_, out, workspaceSize, executor)
        }
    )*};
}

unary_export! {
    aclnnGeluGetWorkspaceSize => aclnnGelu, Op::Gelu(GeluApprox::Tanh);
    aclnnTanhGetWorkspaceSize => aclnnTanh, Op::Tanh;
    aclnnErfGetWorkspaceSize => aclnnErf, Op::Erf;
    aclnnExpGetWorkspaceSize => aclnnExp, Op::Exp;
    aclnnSqrtGetWorkspaceSize => aclnnSqrt, Op::Sqrt;
    aclnnNegGetWorkspaceSize => aclnnNeg, Op::Neg;
    aclnnSigmoidGetWorkspaceSize => aclnnSigmoid, Op::Sigmoid;
    aclnnSiluGetWorkspaceSize => aclnnSilu, Op::Silu;
}

/// aclnnSwiGlu: `silu(A) * B`, A and B the halves of x along `dim` (the last axis only is
/// emulated: npurt's SwiGlu). No kernel on the 910 family (Atlas A2/A3 only, per CANN's
/// docs).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnSwiGluGetWorkspaceSize(
    x: *const aclTensor,
    dim: i64,
    out: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnSwiGluGetWorkspaceSize", |t| {
        if t.cfg.is_910() {
            return fail(ACLNN_ERR_INNER_FIND_KERNEL_ERROR, format!("aclnnSwiGlu has no kernel for {}", t.cfg.soc));
        }
        let a = tsrc(t, x, "x")?;
        let Src::Tensor(_, xd) = &a else { return fail(ACLNN_ERR_PARAM_INVALID, "x") };
        let rank = xd.dims.len() as i64;
        if dim != -1 && dim != rank - 1 {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnSwiGlu: dim {dim} is not emulated (last axis only)"));
        }
        let o = tout(t, out.cast_mut(), "out")?;
        let e = ex("aclnnSwiGlu", Op::SwiGlu, vec![a], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

/// Relu's `out` is `const aclTensor *` in the header.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnReluGetWorkspaceSize(
    self_: *const aclTensor,
    out: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    unary("aclnnReluGetWorkspaceSize", "aclnnRelu", Op::Relu, self_, out, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnGeluV2GetWorkspaceSize(
    x: *const aclTensor,
    approximate: i64,
    y: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    let op = match approximate {
        0 => Op::Gelu(GeluApprox::Erf),
        1 => Op::Gelu(GeluApprox::Tanh),
        _ => {
            set_error("aclnnGeluV2: approximate must be 0 or 1");
            return ACLNN_ERR_PARAM_INVALID;
        }
    };
    unary("aclnnGeluV2GetWorkspaceSize", "aclnnGeluV2", op, x, y, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMulsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnMulsGetWorkspaceSize", |t| {
        let a = tsrc(t, self_, "self")?;
        let f = scalar(t, h(other.cast()), "other")? as f32;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnMuls", Op::Scale { factor: f }, vec![a], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAddsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnAddsGetWorkspaceSize", |t| {
        let a = tsrc(t, self_, "self")?;
        let v = scalar(t, h(other.cast()), "other")?;
        let al = scalar(t, h(alpha.cast()), "alpha")?;
        let Src::Tensor(_, ad) = &a else { return fail(ACLNN_ERR_PARAM_INVALID, "self") };
        let dt = ad.meta()?.dtype;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnAdds", Op::Add, vec![a, Src::Fill(dt, Vec::new(), v * al)], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}
