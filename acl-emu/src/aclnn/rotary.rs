//! aclnnRotaryPositionEmbedding: the fused rotary embedding of Atlas A2/A3 (its docs list
//! no support for the Atlas training SoCs, the 910 family: phase 1 fails there with
//! 561003, no kernel). `y = x · cos + rotate(x) · sin`, where rotate pairs feature `d` with
//! `d ± D/2` (mode 0, half: `[-x2, x1]`) or `2i` with `2i + 1` (mode 1, interleave:
//! `[-x_odd, x_even]` interleaved); cos and sin have x's last dim and broadcast to x.
//!
//! Phase 1 checks what the docs state for Atlas A2/A3: x 3-D or 4-D of FLOAT, FLOAT16 or
//! BFLOAT16, cos, sin and out of x's dtype, out of x's shape, cos and sin of one shape
//! broadcasting to x, D of all four equal, even and below 896, mode 0 or 1; interleave
//! mode takes cos and sin of one row set for the whole batch (`11SD` / `1S1D`: dims 0 and
//! the head dim 1). Phase 2 queues [`Kernel::Rotary`].

use crate::aclnn::basics::{desc, ex, finish, phase2};
use crate::descriptors::{Kernel, Src, TensorDesc};
use crate::error::{R, fail};
use crate::ffi::{guard, h};
use crate::state::Tables;
use acl_sys::codes::*;
use acl_sys::*;
use runtime::Shape;

phase2!(aclnnRotaryPositionEmbedding);

fn tensor(t: &Tables, p: *const aclTensor, what: &str) -> R<(u64, TensorDesc)> {
    let k = h(p.cast());
    Ok((k, desc(t, k, what)?))
}

fn invalid<T>(msg: String) -> R<T> {
    fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnRotaryPositionEmbedding: {msg}"))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnRotaryPositionEmbeddingGetWorkspaceSize(
    x: *const aclTensor,
    cos: *const aclTensor,
    sin: *const aclTensor,
    mode: i64,
    out: *mut aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnRotaryPositionEmbeddingGetWorkspaceSize", |t| {
        let (hx, xd) = tensor(t, x, "x")?;
        let (hc, cd) = tensor(t, cos, "cos")?;
        let (hs, sd) = tensor(t, sin, "sin")?;
        let (ho, od) = tensor(t, out, "out")?;
        let (xm, cm, sm, om) = (xd.meta()?, cd.meta()?, sd.meta()?, od.meta()?);
        if ![ACL_FLOAT, ACL_FLOAT16, ACL_BF16].contains(&xd.dtype) {
            return invalid(format!("x data type {} is not FLOAT, FLOAT16 or BFLOAT16", xd.dtype.0));
        }
        if cm.dtype != xm.dtype || sm.dtype != xm.dtype || om.dtype != xm.dtype {
            return invalid(format!("cos {cm}, sin {sm} and out {om} must have x's data type ({xm})"));
        }
        let r = xm.shape.rank();
        if !(3..=4).contains(&r) || cm.shape.rank() != r || om.shape != xm.shape || cm.shape != sm.shape {
            return invalid(format!("x {xm}, cos {cm}, sin {sm}, out {om}: 3-D or 4-D, out as x, sin as cos"));
        }
        let d = xm.shape.last();
        if cm.shape.last() != d || d % 2 != 0 || d >= 896 {
            return invalid(format!("D must be even, below 896 and equal in x {xm} and cos {cm}"));
        }
        if Shape::broadcast(&cm.shape, &xm.shape).as_ref() != Some(&xm.shape) {
            return invalid(format!("cos {cm} does not broadcast to x {xm}"));
        }
        match mode {
            0 => {}
            1 if r == 4 && (cm.shape.dims()[0] != 1 || cm.shape.dims()[1].min(cm.shape.dims()[2]) != 1) => {
                return invalid(format!("interleave mode takes cos of one batch row set (11SD / 1S1D), got {cm}"));
            }
            1 => {}
            m => return invalid(format!("mode must be 0 (half) or 1 (interleave) on this SoC, got {m}")),
        }
        if !t.cfg.is_a2_or_a3() {
            return fail(
                ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
                format!("aclnnRotaryPositionEmbedding has no kernel for {} (not the Atlas training SoCs)", t.cfg.soc),
            );
        }
        let inputs = vec![Src::Tensor(hx, xd), Src::Tensor(hc, cd), Src::Tensor(hs, sd)];
        let e = ex("aclnnRotaryPositionEmbedding", Kernel::Rotary { mode }, inputs, vec![(ho, od)], 0);
        // SAFETY: C contract: out-pointers are NULL or writable.
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}
