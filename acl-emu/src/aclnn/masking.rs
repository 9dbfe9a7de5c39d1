//! The operators the Ascend backend needs to give fully masked attention rows the
//! reference's answer (0, where softmax of an all -inf row is NaN): aclnnAmax (maximum
//! over dims), aclnnEqScalar (element == scalar, bool out) and
//! aclnnInplaceMaskedFillScalar (value where a bool mask is true).
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
use runtime::reference::operands::{
    broadcast_strides, gather_offsets, load_f64, load_i64, numel, store_f64, store_i64,
};
use runtime::reference::{In, Out};
use runtime::{DType, KernelError, KernelResult, Shape, TensorMeta};

phase2!(aclnnAmax, aclnnEqScalar, aclnnInplaceMaskedFillScalar);

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

/// `v` as a value of `dt` (the op compares in self's dtype when self is floating).
fn round_to(dt: DType, v: f64) -> f64 {
    match dt {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// Output shapes of a non-`Op` kernel (phase 1), or why the operands do not fit.
pub(crate) fn infer(k: &Kernel, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>, String> {
    match (k, inputs) {
        (Kernel::Amax { axes, keep }, [x]) => {
            let dims: Vec<usize> = x
                .shape
                .dims()
                .iter()
                .enumerate()
                .filter_map(|(i, &d)| match (axes.contains(&i), keep) {
                    (false, _) => Some(d),
                    (true, true) => Some(1),
                    (true, false) => None,
                })
                .collect();
            Ok(vec![TensorMeta::new(x.dtype, dims)])
        }
        (Kernel::EqScalar { out, .. }, [x]) => Ok(vec![TensorMeta::new(*out, x.shape.clone())]),
        (Kernel::MaskedFill { .. }, [s, m]) => match Shape::broadcast(&s.shape, &m.shape) {
            Some(b) if b == s.shape => Ok(vec![s.clone()]),
            _ => Err(format!("mask {:?} does not broadcast to selfRef {:?}", m.shape.dims(), s.shape.dims())),
        },
        _ => Err(format!("{} operands do not fit {k:?}", inputs.len())),
    }
}

/// Computes a non-`Op` kernel on contiguous inputs into contiguous outputs.
pub(crate) fn run(k: &Kernel, ins: &[In], outs: &mut [Out]) -> KernelResult {
    let n_outs = outs.len();
    let ([x, rest @ ..], [o]) = (ins, outs) else {
        return Err(KernelError::Internal(format!("{} inputs, {n_outs} outputs for {k:?}", ins.len())));
    };
    match (k, rest) {
        (Kernel::Amax { axes, .. }, []) => amax(x, axes, o),
        (Kernel::EqScalar { value, .. }, []) => {
            let eq: Vec<f64> = if x.dtype.is_float() {
                load_f64(x)?.into_iter().map(|a| f64::from(u8::from(a == *value))).collect()
            } else {
                // Integers and bools compare exactly; a value with a fraction equals none.
                let iv = (value.fract() == 0.0).then_some(*value as i64);
                load_i64(x)?.into_iter().map(|a| f64::from(u8::from(Some(a) == iv))).collect()
            };
            store_f64(o, &eq)
        }
        (Kernel::MaskedFill { value }, [m]) => {
            let es = x.dtype.size();
            let n = x.numel();
            o.bytes[..n * es].copy_from_slice(&x.bytes[..n * es]);
            let fill = le_bytes(x.dtype, *value);
            let at = gather_offsets(x.dims, &broadcast_strides(m.dims, x.dims));
            for (i, &mi) in at.iter().enumerate() {
                if m.bytes[mi] != 0 {
                    o.bytes[i * es..(i + 1) * es].copy_from_slice(&fill);
                }
            }
            Ok(())
        }
        _ => Err(KernelError::Internal(format!("{} inputs for {k:?}", ins.len()))),
    }
}

/// The maximum over `axes`: NaN wins (as torch.amax); integers and bools exactly.
fn amax(x: &In, axes: &[usize], o: &mut Out) -> KernelResult {
    // Each input element's position in the output: reduced axes get stride 0.
    let kept: Vec<usize> = x.dims.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let ks = Shape::new(kept.clone()).contiguous_strides();
    let map: Vec<usize> = (0..x.dims.len()).map(|i| if axes.contains(&i) { 0 } else { ks[i] }).collect();
    let at = gather_offsets(x.dims, &map);
    let m = numel(&kept);
    if x.dtype.is_int() {
        let mut acc = vec![i64::MIN; m];
        for (v, &j) in load_i64(x)?.into_iter().zip(&at) {
            acc[j] = acc[j].max(v);
        }
        store_i64(o, &acc)
    } else {
        let mut acc = vec![f64::NEG_INFINITY; m];
        for (v, &j) in load_f64(x)?.into_iter().zip(&at) {
            // Once NaN, `acc < v` is false for every v: NaN stays.
            if v.is_nan() || acc[j] < v {
                acc[j] = v;
            }
        }
        store_f64(o, &acc)
    }
}

/// One element of `dt` holding `v` (a bool holds `v != 0`).
fn le_bytes(dt: DType, v: f64) -> Vec<u8> {
    match dt {
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f64(v).to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        DType::I32 => (v as i32).to_le_bytes().to_vec(),
        DType::I64 => (v as i64).to_le_bytes().to_vec(),
        DType::U8 => vec![u8::from(v != 0.0)],
    }
}
