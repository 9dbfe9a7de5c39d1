//! The operators the Ascend backend needs to give fully masked attention rows the
//! reference's answer (0, where softmax of an all -inf row is NaN): aclnnAmax (maximum
//! over dims), aclnnEqScalar (element == scalar, bool out) and
//! aclnnInplaceMaskedFillScalar (value where a bool mask is true); and aclnnTriu (the
//! upper triangle of the last two dims), from which the backend builds causal masks.
//!
//! The runtime has no op for them, so their executors carry a [`Kernel`] computed here.
//! Phase 1 checks what hicann/ops-math's op_api sources check (`aclnn_amax.cpp`,
//! `aclnn_eq_scalar.cpp`, `aclnn_masked_fill_scalar.cpp`), with the same codes; dtypes
//! the emulator cannot hold (INT8, INT16, DOUBLE, ...) fail as "not emulated".

use crate::aclnn::basics::{desc, ex, finish, int_array, phase2, scalar};
use crate::descriptors::{Kernel, Src, TensorDesc};
use crate::error::{R, fail};
use crate::ffi::{guard, h};
use crate::state::Tables;
use acl_sys::codes::*;
use acl_sys::*;
use runtime::DType;

phase2!(aclnnAmax, aclnnEqScalar, aclnnInplaceMaskedFillScalar, aclnnTriu);

/// The (handle, descriptor) of a tensor argument.
fn tensor(t: &Tables, p: *const aclTensor, what: &str) -> R<(u64, TensorDesc)> {
    let k = h(p.cast());
    Ok((k, desc(t, k, what)?))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAmaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: *const aclIntArray,
    keepDim: bool,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnAmaxGetWorkspaceSize", |t| {
        let (hx, x) = tensor(t, self_, "self")?;
        let dims = int_array(t, h(dim.cast()), "dim")?;
        let (ho, o) = tensor(t, out, "out")?;
        // The 910 list (BF16 is refused on the 910 for every operator, in ops::create).
        if ![ACL_FLOAT, ACL_FLOAT16, ACL_BF16, ACL_UINT8, ACL_INT32, ACL_INT64, ACL_BOOL].contains(&x.dtype) {
            x.meta()?;
            return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnAmax: self data type {} is not supported", x.dtype.0));
        }
        if o.dtype != x.dtype {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclnnAmax: out data type {} differs from self's {}", o.dtype.0, x.dtype.0),
            );
        }
        let rank = x.dims.len();
        // A 0-d self takes dims in [-1, 0].
        let n = rank.max(1) as i64;
        let mut axes = Vec::new();
        for &d in &dims {
            if d < -n || d >= n {
                return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnAmax: dim {d} must be in [{}, {}]", -n, n - 1));
            }
            let a = if d < 0 { d + n } else { d } as usize;
            if rank > 0 && x.dims[a] == 0 {
                return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnAmax: reduced dim {a} has size 0"));
            }
            if axes.contains(&a) {
                return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnAmax: dim {a} appears more than once"));
            }
            axes.push(a);
        }
        if rank == 0 {
            axes.clear();
        } else if dims.is_empty() {
            // An empty dim list reduces over every dim.
            axes = (0..rank).collect();
        }
        axes.sort_unstable();
        let ws = if x.numel() == 0 { 0 } else { t.cfg.workspace };
        let e = ex("aclnnAmax", Kernel::Amax { axes, keep: keepDim }, vec![Src::Tensor(hx, x)], vec![(ho, o)], ws);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnEqScalarGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnEqScalarGetWorkspaceSize", |t| {
        let (hx, x) = tensor(t, self_, "self")?;
        let v = scalar(t, h(other.cast()), "other")?;
        let (ho, o) = tensor(t, out, "out")?;
        // Every dtype the emulator holds is in the op's self and out lists; out may be any
        // of them (the BOOL result is cast to it).
        let (xd, od) = (x.meta()?.dtype, o.meta()?.dtype);
        let e = ex(
            "aclnnEqScalar",
            Kernel::EqScalar { value: round_to(xd, v), out: od },
            vec![Src::Tensor(hx, x)],
            vec![(ho, o)],
            0,
        );
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnInplaceMaskedFillScalarGetWorkspaceSize(
    selfRef: *mut aclTensor,
    mask: *const aclTensor,
    value: *const aclScalar,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnInplaceMaskedFillScalarGetWorkspaceSize", |t| {
        let (hs, s) = tensor(t, selfRef, "selfRef")?;
        let (hm, m) = tensor(t, mask, "mask")?;
        let v = scalar(t, h(value.cast()), "value")?;
        // No UINT8 in the op's list (INT8 is in it but not emulated).
        if ![ACL_FLOAT, ACL_FLOAT16, ACL_BF16, ACL_INT32, ACL_INT64, ACL_BOOL].contains(&s.dtype) {
            s.meta()?;
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclnnInplaceMaskedFillScalar: selfRef data type {} is not supported", s.dtype.0),
            );
        }
        if m.dtype != ACL_BOOL {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclnnInplaceMaskedFillScalar: mask must be BOOL ({}), got {}", ACL_BOOL.0, m.dtype.0),
            );
        }
        let e = ex(
            "aclnnInplaceMaskedFillScalar",
            Kernel::MaskedFill { value: v },
            vec![Src::Tensor(hs, s.clone()), Src::Tensor(hm, m)],
            vec![(hs, s)],
            0,
        );
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

/// The upper triangle of self's last two dims (2-D to 8-D), moved into out of the same
/// dtype and shape (hicann/ops-math `aclnn_triu.cpp` checks: every dtype the emulator holds
/// is in its list, BF16 on Atlas A2/A3 only).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnTriuGetWorkspaceSize(
    self_: *const aclTensor,
    diagonal: i64,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnTriuGetWorkspaceSize", |t| {
        let (hx, x) = tensor(t, self_, "self")?;
        let (ho, o) = tensor(t, out, "out")?;
        let (xm, om) = (x.meta()?, o.meta()?);
        if !(2..=8).contains(&x.dims.len()) {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnTriu: self must have 2 to 8 dims, got {:?}", x.dims));
        }
        if xm != om {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnTriu: out {om} differs from self {xm}"));
        }
        let e = ex("aclnnTriu", Kernel::Triu { diagonal }, vec![Src::Tensor(hx, x)], vec![(ho, o)], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

/// `v` as a value of `dt` (the op compares in self's dtype when self is floating).
fn round_to(dt: DType, v: f64) -> f64 {
    match dt {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => v,
    }
}
