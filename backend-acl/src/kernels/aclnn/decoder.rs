//! The decoder-LLM row ops: RmsNorm, AddRmsNorm, Silu and SwiGlu. On Atlas A2/A3 the fused
//! operators of ops-nn: aclnnRmsNorm (`aclnnop/aclnn_rms_norm.h`), aclnnAddRmsNorm
//! (`aclnn_add_rms_norm.h`) and aclnnSwiGlu (`aclnn_swi_glu.h`), with their FLOAT rstd
//! output in the scratch buffer. CANN's docs give the 910 family ("Atlas training
//! products") no kernel for those, so there they are composed of operators it has, every
//! one of them repeatable (no aclnnCat, no aclnnInplaceCopy), so that frozen plans record
//! them:
//!
//! * RmsNorm as a LayerNorm of the row `[x, -x]`: its mean is 0 and its variance is
//!   `mean(x²)`, so the first half of the normalised row is `x / sqrt(mean(x²) + eps)`;
//!   `x` and `-x` go into the two halves of a scratch row (aclnnMuls by 1 and aclnnNeg with
//!   strided outputs), aclnnLayerNorm without weight and bias normalises it, and aclnnMul
//!   by the weight (or aclnnMuls by 1) takes the first half into the output. The statistics
//!   are those of aclnnLayerNorm, formed in FLOAT for every dtype;
//! * AddRmsNorm as aclnnAdd into the sum output, then that RmsNorm of the sum;
//! * SwiGlu as aclnnSilu of the gate (a strided view of x's first half) and aclnnMul by
//!   the up half.
//!
//! Silu is aclnnSilu on every SoC; RmsNorm without a weight takes the composition on every
//! SoC (the fused operators require gamma).

use super::call::BResult;
use super::call::{Call, View, align512};
use super::elementwise::{add_sub, mul_div, muls, unary};
use acl_sys::result::aclnn as nn;
use runtime::{DType, Op};

/// Half `second` (0: the first) of `v`'s last axis, as a strided view (no copy).
fn half(v: &View, second: bool) -> View {
    let mut h = v.clone();
    let last = h.dims.len() - 1;
    let n = h.dims[last] / 2;
    h.dims[last] = n;
    if second {
        h.offset += n * h.strides[last];
    }
    h
}

/// `[rows, d]` of a contiguous `[.., d]` operand.
fn rows(v: &View) -> (usize, usize) {
    let d = v.dims.last().copied().unwrap_or(1).max(1);
    (v.dims.iter().product::<usize>() / d, d)
}

/// RmsNorm of `x` (weight `w`) into `out`: aclnnRmsNorm with a weight on A2/A3, else the
/// LayerNorm composition.
pub(super) fn rms_norm(c: &mut Call, is_910: bool, x: &View, w: Option<&View>, eps: f32, out: &View) -> BResult<()> {
    match w {
        Some(w) if !is_910 => {
            let rstd = rstd_scratch(c, x)?;
            let (tx, tw, to, tr) = (c.tensor(x)?, c.tensor(w)?, c.output(out)?, c.output(&rstd)?);
            // SAFETY: live descriptors owned by `c`.
            let p1 = unsafe { nn::rms_norm_get_workspace_size(c.api, tx, tw, eps as f64, to, tr) };
            c.run(p1, nn::rms_norm)
        }
        _ => rms_composed(c, x, w, eps, out),
    }
}

/// AddRmsNorm: `y = rmsnorm(x + r) * w` into `y`, the sum into `sum`.
pub(super) fn add_rms_norm(
    c: &mut Call,
    is_910: bool,
    (x, r, w): (&View, &View, &View),
    eps: f32,
    (y, sum): (&View, &View),
) -> BResult<()> {
    if is_910 {
        add_sub(c, false, x, r, sum)?;
        return rms_composed(c, sum, Some(w), eps, y);
    }
    let rstd = rstd_scratch(c, x)?;
    let (tx, tr, tw) = (c.tensor(x)?, c.tensor(r)?, c.tensor(w)?);
    let (ty, ts, tsum) = (c.output(y)?, c.output(&rstd)?, c.output(sum)?);
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::add_rms_norm_get_workspace_size(c.api, tx, tr, tw, eps as f64, ty, ts, tsum) };
    c.run(p1, nn::add_rms_norm)
}

/// The FLOAT rstd output `[.., 1]` of the fused norms, in the scratch buffer (unread).
fn rstd_scratch(c: &mut Call, x: &View) -> BResult<View> {
    let (n, _) = rows(x);
    let mut dims = x.dims.clone();
    if let Some(l) = dims.last_mut() {
        *l = 1;
    }
    Ok(View::contiguous(c.scratch(align512(n * 4))?, DType::F32, &dims))
}

/// RmsNorm as the LayerNorm of `[x, -x]` (see the module docs).
fn rms_composed(c: &mut Call, x: &View, w: Option<&View>, eps: f32, out: &View) -> BResult<()> {
    let (n, d) = rows(x);
    let bytes = align512(n * 2 * d * x.dtype.size());
    let base = c.scratch(2 * bytes)?;
    let (pair, normed) =
        (View::contiguous(base, x.dtype, &[n, 2 * d]), View::contiguous(base + bytes as u64, x.dtype, &[n, 2 * d]));
    let x2 = x.reshaped(&[n, d]);
    muls(c, &x2, 1.0, &half(&pair, false))?;
    unary(c, &Op::Neg, &x2, &half(&pair, true))?;
    let (tp, tn) = (c.tensor(&pair)?, c.output(&normed)?);
    let (tw, tb) = (c.absent(false), c.absent(false));
    let shape = c.ints(&[2 * d as i64])?;
    let null = std::ptr::null_mut();
    // SAFETY: live descriptors owned by `c`; weight, bias, mean and rstd are optional (NULL).
    let p1 = unsafe { nn::layer_norm_get_workspace_size(c.api, tp, shape, tw, tb, eps as f64, tn, null, null) };
    c.run(p1, nn::layer_norm)?;
    let first = half(&normed, false);
    let o = out.reshaped(&[n, d]);
    match w {
        Some(w) => mul_div(c, false, &first, w, &o),
        None => muls(c, &first, 1.0, &o),
    }
}

/// SwiGlu: one input (gate first along the last axis) or gate and up apart.
pub(super) fn swiglu(c: &mut Call, is_910: bool, x: &View, up: Option<&View>, out: &View) -> BResult<()> {
    let (gate, up) = match up {
        Some(u) => (x.clone(), u.clone()),
        None if !is_910 => {
            let (tx, to) = (c.tensor(x)?, c.output(out)?);
            // SAFETY: live descriptors owned by `c`.
            let p1 = unsafe { nn::swi_glu_get_workspace_size(c.api, tx, -1, to) };
            return c.run(p1, nn::swi_glu);
        }
        None => (half(x, false), half(x, true)),
    };
    let s = c.scratch(align512(out.dims.iter().product::<usize>() * out.dtype.size()))?;
    let act = View::contiguous(s, out.dtype, &out.dims);
    unary(c, &Op::Silu, &gate, &act)?;
    mul_div(c, false, &act, &up, out)
}
