//! The fused decoder operators of Atlas A2 over the built libacl_emu.so, driven through
//! acl-sys's result layer: aclnnRmsNorm and aclnnAddRmsNorm (y, the FLOAT rstd `[.., 1]`,
//! and AddRmsNorm's sum xOut), aclnnSwiGlu (the gate is the first half), their checks, and
//! the 910 family's missing kernels (561003, as CANN documents them unsupported on Atlas
//! training products) while aclnnSilu runs there.

use acl_sys::codes::*;
use acl_sys::result::aclnn;
use acl_sys::*;
use npurt_test_support::emu::serial;
use std::ptr::null_mut;

mod common;
use common::Dev;

fn code<T>(r: Result<T, AclError>) -> Option<i32> {
    r.err().and_then(|e| e.code())
}

const X: [f32; 8] = [1.0, -2.0, 3.0, 0.5, 0.0, 4.0, -4.0, 2.0];
const W: [f32; 4] = [1.0, 0.5, 2.0, -1.0];

/// `(x / sqrt(mean(x²) + eps) * w, 1 / sqrt(mean(x²) + eps))` per row of 4.
fn rms(x: &[f32], eps: f64) -> (Vec<f32>, Vec<f32>) {
    let mut y = Vec::new();
    let mut rstd = Vec::new();
    for row in x.chunks(4) {
        let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / 4.0;
        let inv = 1.0 / (ms + eps).sqrt();
        rstd.push(inv as f32);
        y.extend(row.iter().zip(W).map(|(&v, g)| (v as f64 * inv * g as f64) as f32));
    }
    (y, rstd)
}

fn close(got: &[f32], want: &[f32], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-6 * (1.0 + w.abs()), "{what}: element {i}: {g} vs {w}");
    }
}

#[test]
fn the_fused_norms_write_y_rstd_and_the_sum() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("rms-fused", Some("Ascend910B2")) else { return };
    let (x, res, w, y, rstd, sum) = (0, 512, 1024, 1536, 2048, 2560);
    d.put(x, &X);
    d.put(res, &[0.5f32; 8]);
    d.put(w, &W);
    let t = |dims: &[i64], off| d.tensor(dims, ACL_FLOAT, off);
    let (tx, tw, ty, tr) = (t(&[2, 4], x), t(&[4], w), t(&[2, 4], y), t(&[2, 1], rstd));
    // SAFETY: live descriptors over the device allocation.
    let (ws, ex) = unsafe { aclnn::rms_norm_get_workspace_size(&d.api, tx, tw, 1e-6, ty, tr) }.unwrap();
    // SAFETY: the executor of this phase 1, no workspace asked.
    unsafe { aclnn::rms_norm(&d.api, null_mut(), ws, ex, d.stream) }.unwrap();
    let (want_y, want_r) = rms(&X, 1e-6);
    close(&d.get::<f32>(y, 8), &want_y, "aclnnRmsNorm y");
    close(&d.get::<f32>(rstd, 2), &want_r, "aclnnRmsNorm rstd");
    // A rstd that is not FLOAT [2, 1] is refused at phase 1.
    let bad = t(&[2], rstd);
    // SAFETY: as above.
    let r = unsafe { aclnn::rms_norm_get_workspace_size(&d.api, tx, tw, 1e-6, ty, bad) };
    assert_eq!(code(r), Some(ACLNN_ERR_PARAM_INVALID));

    let (tres, ts) = (t(&[2, 4], res), t(&[2, 4], sum));
    // SAFETY: as above.
    let (ws, ex) = unsafe { aclnn::add_rms_norm_get_workspace_size(&d.api, tx, tres, tw, 1e-6, ty, tr, ts) }.unwrap();
    // SAFETY: as above.
    unsafe { aclnn::add_rms_norm(&d.api, null_mut(), ws, ex, d.stream) }.unwrap();
    let s: Vec<f32> = X.iter().map(|v| v + 0.5).collect();
    let (want_y, want_r) = rms(&s, 1e-6);
    close(&d.get::<f32>(sum, 8), &s, "aclnnAddRmsNorm xOut");
    close(&d.get::<f32>(y, 8), &want_y, "aclnnAddRmsNorm y");
    close(&d.get::<f32>(rstd, 2), &want_r, "aclnnAddRmsNorm rstd");
    assert_eq!((ctl.calls("aclnnRmsNorm"), ctl.calls("aclnnAddRmsNorm")), (1, 1));
    d.close();
    assert_eq!(ctl.counters().executors, 0);
}

#[test]
fn swiglu_gates_with_the_first_half() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("swiglu-fused", Some("Ascend910B2")) else { return };
    let (x, out) = (0, 512);
    d.put(x, &X);
    let (tx, to) = (d.tensor(&[2, 4], ACL_FLOAT, x), d.tensor(&[2, 2], ACL_FLOAT, out));
    // SAFETY: live descriptors over the device allocation.
    let (ws, ex) = unsafe { aclnn::swi_glu_get_workspace_size(&d.api, tx, -1, to) }.unwrap();
    // SAFETY: the executor of this phase 1.
    unsafe { aclnn::swi_glu(&d.api, null_mut(), ws, ex, d.stream) }.unwrap();
    let silu = |v: f32| v as f64 / (1.0 + (-v as f64).exp());
    let want: Vec<f32> =
        X.chunks(4).flat_map(|r| [silu(r[0]) * r[2] as f64, silu(r[1]) * r[3] as f64]).map(|v| v as f32).collect();
    close(&d.get::<f32>(out, 4), &want, "aclnnSwiGlu");
    // Only the last axis is emulated.
    let t0 = d.tensor(&[1, 4], ACL_FLOAT, out);
    // SAFETY: as above.
    assert_eq!(code(unsafe { aclnn::swi_glu_get_workspace_size(&d.api, tx, 0, t0) }), Some(ACLNN_ERR_PARAM_INVALID));
    d.close();
    assert_eq!(ctl.counters().executors, 0);
}

#[test]
fn the_910_has_no_fused_kernel_but_has_silu() {
    let _one = serial();
    let Some((d, ctl)) = Dev::open("rms-910", Some("Ascend910A")) else { return };
    let t = |dims: &[i64], off| d.tensor(dims, ACL_FLOAT, off);
    let (tx, tw, ty, tr, ts) = (t(&[2, 4], 0), t(&[4], 512), t(&[2, 4], 1024), t(&[2, 1], 1536), t(&[2, 4], 2048));
    let none = Some(ACLNN_ERR_INNER_FIND_KERNEL_ERROR);
    // SAFETY: live descriptors over the device allocation (no executor is made).
    unsafe {
        assert_eq!(code(aclnn::rms_norm_get_workspace_size(&d.api, tx, tw, 1e-6, ty, tr)), none);
        assert_eq!(code(aclnn::add_rms_norm_get_workspace_size(&d.api, tx, tx, tw, 1e-6, ty, tr, ts)), none);
        assert_eq!(code(aclnn::swi_glu_get_workspace_size(&d.api, tx, -1, t(&[2, 2], 2560))), none);
    }
    d.put(0, &X);
    // SAFETY: as above.
    let (ws, ex) = unsafe { aclnn::silu_get_workspace_size(&d.api, tx, ty) }.unwrap();
    // SAFETY: the executor of this phase 1.
    unsafe { aclnn::silu(&d.api, null_mut(), ws, ex, d.stream) }.unwrap();
    let want: Vec<f32> = X.iter().map(|&v| (v as f64 / (1.0 + (-v as f64).exp())) as f32).collect();
    close(&d.get::<f32>(1024, 8), &want, "aclnnSilu on the 910A");
    d.close();
    assert_eq!(ctl.counters().executors, 0);
}
