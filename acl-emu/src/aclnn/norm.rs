//! Normalizations: aclnnSoftmax, aclnnLayerNorm, and the fused RMS norms of Atlas A2/A3
//! (aclnnRmsNorm, aclnnAddRmsNorm: no kernel on the 910 family, as CANN's docs say).

use crate::aclnn::basics::{ex, finish, int_array, phase2, tout, tsrc};
use crate::descriptors::Src;
use crate::error::fail;
use crate::ffi::{guard, h};
use acl_sys::codes::*;
use acl_sys::*;
use runtime::Op;

phase2!(aclnnSoftmax, aclnnLayerNorm, aclnnRmsNorm, aclnnAddRmsNorm);

/// aclnnRmsNorm / aclnnAddRmsNorm's phase 1 on `inputs`, writing `outputs`.
fn rms_norm(
    t: &mut crate::state::Tables,
    name: &'static str,
    inputs: Vec<Src>,
    outputs: Vec<(u64, crate::descriptors::TensorDesc)>,
    eps: f64,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> crate::error::R<()> {
    if t.cfg.is_910() {
        return fail(ACLNN_ERR_INNER_FIND_KERNEL_ERROR, format!("{name} has no kernel for {}", t.cfg.soc));
    }
    let e = ex(name, crate::kernel::Kernel::RmsNorm { eps }, inputs, outputs, 0);
    // SAFETY: C contract: out-pointers are NULL or writable.
    unsafe { finish(t, e, ws, exec) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnRmsNormGetWorkspaceSize(
    x: *const aclTensor,
    gamma: *const aclTensor,
    epsilon: f64,
    yOut: *const aclTensor,
    rstdOut: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnRmsNormGetWorkspaceSize", |t| {
        let ins = vec![tsrc(t, x, "x")?, tsrc(t, gamma, "gamma")?];
        let outs = vec![tout(t, yOut.cast_mut(), "yOut")?, tout(t, rstdOut.cast_mut(), "rstdOut")?];
        rms_norm(t, "aclnnRmsNorm", ins, outs, epsilon, workspaceSize, executor)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAddRmsNormGetWorkspaceSize(
    x1: *const aclTensor,
    x2: *const aclTensor,
    gamma: *const aclTensor,
    epsilon: f64,
    yOut: *const aclTensor,
    rstdOut: *const aclTensor,
    xOut: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnAddRmsNormGetWorkspaceSize", |t| {
        let ins = vec![tsrc(t, x1, "x1")?, tsrc(t, x2, "x2")?, tsrc(t, gamma, "gamma")?];
        let outs = vec![
            tout(t, yOut.cast_mut(), "yOut")?,
            tout(t, rstdOut.cast_mut(), "rstdOut")?,
            tout(t, xOut.cast_mut(), "xOut")?,
        ];
        rms_norm(t, "aclnnAddRmsNorm", ins, outs, epsilon, workspaceSize, executor)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnSoftmaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnSoftmaxGetWorkspaceSize", |t| {
        let a = tsrc(t, self_, "self")?;
        let o = tout(t, out, "out")?;
        let e = ex("aclnnSoftmax", Op::Softmax { axis: dim as isize }, vec![a], vec![o], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnLayerNormGetWorkspaceSize(
    input: *const aclTensor,
    normalizedShape: *const aclIntArray,
    weightOptional: *const aclTensor,
    biasOptional: *const aclTensor,
    eps: f64,
    out: *mut aclTensor,
    meanOutOptional: *mut aclTensor,
    rstdOutOptional: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnLayerNormGetWorkspaceSize", |t| {
        let x = tsrc(t, input, "input")?;
        let Src::Tensor(_, xd) = &x else { return fail(ACLNN_ERR_PARAM_INVALID, "input") };
        let ns = int_array(t, h(normalizedShape.cast()), "normalizedShape")?;
        let last = *xd.dims.last().unwrap_or(&0);
        if ns.len() != 1 || ns[0] != last {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnLayerNorm: only normalizedShape = [last dim] is emulated");
        }
        if !meanOutOptional.is_null() || !rstdOutOptional.is_null() {
            return fail(ACLNN_ERR_PARAM_INVALID, "aclnnLayerNorm: mean/rstd outputs are not emulated");
        }
        let dt = xd.meta()?.dtype;
        let d = last.max(0) as usize;
        let w = if weightOptional.is_null() { Src::Fill(dt, vec![d], 1.0) } else { tsrc(t, weightOptional, "weight")? };
        let b = if biasOptional.is_null() { Src::Fill(dt, vec![d], 0.0) } else { tsrc(t, biasOptional, "bias")? };
        let o = tout(t, out, "out")?;
        let e = ex("aclnnLayerNorm", Op::LayerNorm { eps: eps as f32 }, vec![x, w, b], vec![o], t.cfg.workspace);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}
