//! Matrix products: aclnnMatmul, aclnnBatchMatMul, aclnnMm and aclnnAddmm, with the
//! cubeMathType rules of the SoC.

use crate::aclnn::basics::{ex, finish, phase2, scalar, tout, tsrc};
use crate::descriptors::{Executor, Src};
use crate::error::{R, fail};
use crate::ffi::{guard, h};
use crate::state::*;
use acl_sys::codes::*;
use acl_sys::*;
use runtime::Op;

phase2!(aclnnMatmul, aclnnBatchMatMul, aclnnMm, aclnnAddmm);

fn is_f32(s: &Src) -> bool {
    matches!(s, Src::Tensor(_, d) if d.dtype == ACL_FLOAT)
}

/// cubeMathType rules (`aclnnop/aclnn_matmul.h`, `aclnnMatmulGetWorkspaceSize`, and its
/// operator docs): on the 910, FP32 needs 1 (computed as FP16); 3 is A2 only.
fn cube_rules(t: &Tables, name: &str, e: &mut Executor, cube: i8) -> R<()> {
    if !(0..=4).contains(&cube) {
        return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: cubeMathType {cube} is not valid"));
    }
    let f32_in = e.inputs.iter().any(is_f32);
    if t.cfg.is_910() {
        if cube == acl_sys::cube_math::USE_HF32 {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("{name}: cubeMathType 3 (HF32) is not supported on {}", t.cfg.soc),
            );
        }
        if f32_in && cube == acl_sys::cube_math::KEEP_DTYPE {
            return fail(
                ACLNN_ERR_PARAM_INVALID,
                format!("{name}: FP32 with cubeMathType 0 is not supported on {} (use 1: FP16 compute)", t.cfg.soc),
            );
        }
        e.fp16_compute = f32_in && cube != acl_sys::cube_math::USE_FP32_ADD;
    } else {
        e.fp16_compute = f32_in && cube == acl_sys::cube_math::USE_FP16;
    }
    Ok(())
}

fn matmul_like(
    name: &'static str,
    rank: Option<usize>,
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cube: i8,
    ws: *mut u64,
    exec: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    let p1: &'static str = match name {
        "aclnnMatmul" => "aclnnMatmulGetWorkspaceSize",
        "aclnnBatchMatMul" => "aclnnBatchMatMulGetWorkspaceSize",
        _ => "aclnnMmGetWorkspaceSize",
    };
    guard(p1, |t| {
        let a = tsrc(t, self_, "self")?;
        let b = tsrc(t, mat2, "mat2")?;
        if let (Some(r), Src::Tensor(_, da), Src::Tensor(_, db)) = (rank, &a, &b)
            && (da.dims.len() != r || db.dims.len() != r)
        {
            return fail(ACLNN_ERR_PARAM_INVALID, format!("{name}: operands must be {r}-D"));
        }
        let o = tout(t, out, "out")?;
        let mut e = ex(name, Op::MatMul { trans_a: false, trans_b: false }, vec![a, b], vec![o], t.cfg.workspace);
        cube_rules(t, name, &mut e, cube)?;
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, ws, exec) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMatmulGetWorkspaceSize(
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cubeMathType: i8,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    matmul_like("aclnnMatmul", None, self_, mat2, out, cubeMathType, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnBatchMatMulGetWorkspaceSize(
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cubeMathType: i8,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    matmul_like("aclnnBatchMatMul", Some(3), self_, mat2, out, cubeMathType, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMmGetWorkspaceSize(
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cubeMathType: i8,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    matmul_like("aclnnMm", Some(2), self_, mat2, out, cubeMathType, workspaceSize, executor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAddmmGetWorkspaceSize(
    self_: *const aclTensor,
    mat1: *const aclTensor,
    mat2: *const aclTensor,
    beta: *const aclScalar,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    cubeMathType: i8,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnAddmmGetWorkspaceSize", |t| {
        let c = tsrc(t, self_, "self")?;
        let a = tsrc(t, mat1, "mat1")?;
        let b = tsrc(t, mat2, "mat2")?;
        let beta = scalar(t, h(beta.cast()), "beta")? as f32;
        let alpha = scalar(t, h(alpha.cast()), "alpha")? as f32;
        let o = tout(t, out, "out")?;
        let op = Op::Gemm { trans_a: false, trans_b: false, alpha, beta };
        let mut e = ex("aclnnAddmm", op, vec![a, b, c], vec![o], t.cfg.workspace);
        cube_rules(t, "aclnnAddmm", &mut e, cubeMathType)?;
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}
