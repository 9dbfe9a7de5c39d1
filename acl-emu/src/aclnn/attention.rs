//! aclnnFlashAttentionScore: fused attention on the Atlas A2/A3 training SoCs (the operator
//! registers kernels for `ascend910b` and `ascend910_93` only; the 910 family has none).
//!
//! Phase 1 checks what hicann/ops-transformer's op_api (`aclnn_flash_attention_score.cpp`),
//! its tiling and its docs (`docs/aclnnFlashAttentionScore.md`) check, with the same
//! codes, in the same order where it matters: the required pointers (161001); every output
//! empty = nothing to do; q, k, v of one dtype and pse of theirs; headNum, the layout and
//! its rank, D of q and k equal and not below v's; then the documented ranges, the pse
//! shapes the tiling accepts, keepProb in (0, 1], sparseMode 0..=6, innerPrecise 0..=2, and
//! the outputs' dtypes and shapes; last the SoC (no kernel: 561003). What the emulator does
//! not compute is refused as "not emulated" (161002): layouts other than BNSD, dropout, the
//! reserved padding mask, boolean attention masks other than sparseMode 3's causal one
//! (rightDownCausal: query `i` sees keys `j <= i + S2 - S1`), prefix sparsity and pse
//! compressed to its last 1024 rows. Phase 2 queues [`Kernel::FlashAttention`], which computes
//! `softmax(scaleValue * (pse + q·kᵀ)) · v` with the softmax row maxima and sums.
//!
//! A repeatable executor's address setters count the prototype's tensors: inputs query 0,
//! key 1, value 2, realShiftOptional 3 (dropout, padding and attention masks 4, 5, 6, never
//! given here); outputs softmaxMaxOut 0, softmaxSumOut 1, softmaxOutOut 2 (reserved, never
//! written), attentionOutOut 3 (see [`crate::aclnn::executor`]).

use crate::aclnn::basics::{desc, ex, finish, phase2};
use crate::descriptors::{Kernel, Src, TensorDesc};
use crate::error::{R, fail};
use crate::ffi::guard;
use crate::ffi::h;
use crate::kernel::FA_STAT_WIDTH;
use crate::state::Tables;
use acl_sys::codes::*;
use acl_sys::*;
use std::ffi::{CStr, c_char};

phase2!(aclnnFlashAttentionScore);

/// Most query heads, largest head dim (the docs' limits, also checked by the op_api).
const MAX_HEADS: i64 = 256;
const MAX_HEAD_DIM: i64 = 768;
/// Rows of a pse compressed to the last rows (ALiBi), which the emulator does not expand.
const PSE_COMPRESSED_ROWS: i64 = 1024;

/// The (handle, descriptor) of a required tensor argument (NULL: 161001).
fn tensor(t: &Tables, p: *const aclTensor, what: &str) -> R<(u64, TensorDesc)> {
    let k = h(p.cast());
    Ok((k, desc(t, k, what)?))
}

/// The descriptor of an optional tensor argument, `None` when NULL.
fn optional(t: &Tables, p: *const aclTensor, what: &str) -> R<Option<(u64, TensorDesc)>> {
    if p.is_null() { Ok(None) } else { tensor(t, p, what).map(Some) }
}

fn invalid<T>(msg: String) -> R<T> {
    fail(ACLNN_ERR_PARAM_INVALID, format!("aclnnFlashAttentionScore: {msg}"))
}

fn not_emulated<T>(what: &str) -> R<T> {
    invalid(format!("{what} is not emulated by acl-emu"))
}

/// The BNSD sizes of one attention: batch, query heads, query rows, key/value heads and rows.
#[derive(Clone, Copy)]
struct Bnsd {
    b: i64,
    n1: i64,
    s1: i64,
    n2: i64,
    s2: i64,
}

/// q, k and v share one data type, pse (when given) theirs; headNum is positive.
fn check_types(q: &TensorDesc, k: &TensorDesc, v: &TensorDesc, pse: Option<&TensorDesc>, head_num: i64) -> R<()> {
    if q.dtype != k.dtype || k.dtype != v.dtype {
        return invalid(format!(
            "the data types of query ({}), key ({}) and value ({}) differ",
            q.dtype.0, k.dtype.0, v.dtype.0
        ));
    }
    if let Some(p) = pse
        && p.dtype != q.dtype
    {
        return invalid(format!("pse data type {} differs from query's {}", p.dtype.0, q.dtype.0));
    }
    if head_num <= 0 {
        return invalid(format!("headNum must be > 0, got {head_num}"));
    }
    Ok(())
}

/// The layout is BNSD (the only one emulated) with a 4-D query, key and value.
fn check_layout(layout: &str, q: &TensorDesc, k: &TensorDesc, v: &TensorDesc) -> R<()> {
    match (layout, q.dims.len()) {
        ("BNSD", 4) => {}
        ("BSH" | "SBH" | "TND", 3) | ("BSND", 4) => return not_emulated(&format!("inputLayout {layout}")),
        _ => return invalid(format!("inputLayout {layout:?} with {}-D query is not supported", q.dims.len())),
    }
    if k.dims.len() != 4 || v.dims.len() != 4 {
        return invalid(format!("key {:?} and value {:?} must be BNSD like query", k.dims, v.dims));
    }
    Ok(())
}

/// The head dims, the query's data type and the docs' constraints on the shapes of 4-D q, k, v.
fn check_shapes(q: &TensorDesc, k: &TensorDesc, v: &TensorDesc, head_num: i64) -> R<Bnsd> {
    let (b, n1, s1, d) = (q.dims[0], q.dims[1], q.dims[2], q.dims[3]);
    let (n2, s2, dv) = (k.dims[1], k.dims[2], v.dims[3]);
    if k.dims[3] != d {
        return invalid(format!("the D dims of query ({d}) and key ({}) must be equal", k.dims[3]));
    }
    if d < dv {
        return invalid(format!("the D dim of key ({d}) must not be below value's ({dv})"));
    }
    if d > MAX_HEAD_DIM {
        return invalid(format!("head dim must be <= {MAX_HEAD_DIM}, got {d}"));
    }
    // The docs' constraints on the shapes.
    if ![ACL_FLOAT16, ACL_BF16, ACL_FLOAT].contains(&q.dtype) {
        q.meta()?;
        return invalid(format!("query data type {} is not FLOAT16, BFLOAT16 or FLOAT", q.dtype.0));
    }
    if k.dims[0] != b || v.dims[0] != b || v.dims[1] != n2 || v.dims[2] != s2 {
        return invalid(format!("key {:?} and value {:?} must agree except in D, and B with query", k.dims, v.dims));
    }
    if head_num != n1 {
        return invalid(format!("headNum {head_num} is not query's N axis {n1}"));
    }
    if n1 > MAX_HEADS || n2 == 0 || n1 % n2 != 0 {
        return invalid(format!("query heads {n1} must be in [1, {MAX_HEADS}] and a multiple of key's {n2}"));
    }
    Ok(Bnsd { b, n1, s1, n2, s2 })
}

/// The optional arguments the emulator refuses or range-checks: keepProb and the dropout
/// mask, the reserved padding mask, the attention mask, prefix sparsity, sparseMode and
/// innerPrecise.
struct Options {
    keep_prob: f64,
    drop_mask: *const aclTensor,
    padding_mask: *const aclTensor,
    atten_mask: *const aclTensor,
    prefix: *const aclIntArray,
    sparse_mode: i64,
    inner_precise: i64,
}

/// Checks the options; true when they ask for rightDownCausal (sparseMode 3 with its
/// 2048×2048 attention mask, the one mask the emulator computes with: it reads the mask's
/// shape and dtype, not its contents, which that mode fixes as true above the diagonal).
fn check_options(t: &Tables, o: &Options) -> R<bool> {
    if !(o.keep_prob > 0.0 && o.keep_prob <= 1.0) {
        return invalid(format!("keepProb must be in (0, 1], got {}", o.keep_prob));
    }
    if o.keep_prob < 1.0 || !o.drop_mask.is_null() {
        return not_emulated("dropout (keepProb < 1 or a dropMask)");
    }
    if !o.padding_mask.is_null() {
        return invalid("paddingMaskOptional is reserved: pass NULL".into());
    }
    let mask = optional(t, o.atten_mask, "attenMaskOptional")?;
    if let Some((_, m)) = &mask {
        if m.dtype != ACL_BOOL && m.dtype != ACL_UINT8 {
            return invalid(format!("attenMask data type {} is not BOOL or UINT8", m.dtype.0));
        }
        if o.sparse_mode != 3 || m.dims != [CAUSAL_MASK, CAUSAL_MASK] {
            return not_emulated("attenMaskOptional other than sparseMode 3's 2048x2048 causal mask");
        }
    } else if o.sparse_mode == 3 {
        return invalid("sparseMode 3 (rightDownCausal) needs the 2048x2048 attenMaskOptional".into());
    }
    if !o.prefix.is_null() {
        return not_emulated("prefixOptional (sparse modes 5 and 6)");
    }
    if !(0..=6).contains(&o.sparse_mode) {
        return invalid(format!("sparseMode must be 0..=6, got {}", o.sparse_mode));
    }
    if !(0..=2).contains(&o.inner_precise) {
        return invalid(format!("innerPrecise must be 0, 1 or 2, got {}", o.inner_precise));
    }
    Ok(mask.is_some())
}

/// The side of the compressed causal mask sparseMode 3 takes.
const CAUSAL_MASK: i64 = 2048;

/// pse is [B or 1, N, Sq or 1, Skv]; the compressed (ALiBi) form is not emulated.
fn check_pse(pd: &[i64], s: Bnsd, q: &TensorDesc) -> R<()> {
    if pd.len() != 4 || (pd[0] != 1 && pd[0] != s.b) || pd[1] != s.n1 || pd[3] != s.s2 {
        return invalid(format!("pse {pd:?} is none of [B or 1, N, Sq or 1, Skv] for query {:?}", q.dims));
    }
    if pd[2] != s.s1 && pd[2] != 1 {
        if pd[2] == PSE_COMPRESSED_ROWS && s.s1 > PSE_COMPRESSED_ROWS {
            return not_emulated("pse compressed to its last 1024 rows");
        }
        return invalid(format!("pse {pd:?}: its third dim must be Sq ({}) or 1", s.s1));
    }
    Ok(())
}

/// softmaxMaxOut and softmaxSumOut are FLOAT [B, N, Sq, FA_STAT_WIDTH].
fn check_stats(mx: &TensorDesc, sm: &TensorDesc, s: Bnsd) -> R<()> {
    let stats = [s.b, s.n1, s.s1, FA_STAT_WIDTH as i64];
    for (what, dsc) in [("softmaxMaxOut", mx), ("softmaxSumOut", sm)] {
        if dsc.dtype != ACL_FLOAT || dsc.dims != stats {
            return invalid(format!("{what} must be FLOAT {stats:?}, got type {} {:?}", dsc.dtype.0, dsc.dims));
        }
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnFlashAttentionScoreGetWorkspaceSize(
    query: *const aclTensor,
    key: *const aclTensor,
    value: *const aclTensor,
    realShiftOptional: *const aclTensor,
    dropMaskOptional: *const aclTensor,
    paddingMaskOptional: *const aclTensor,
    attenMaskOptional: *const aclTensor,
    prefixOptional: *const aclIntArray,
    scaleValue: f64,
    keepProb: f64,
    _preTokens: i64,
    _nextTokens: i64,
    headNum: i64,
    inputLayout: *mut c_char,
    innerPrecise: i64,
    sparseMode: i64,
    softmaxMaxOut: *const aclTensor,
    softmaxSumOut: *const aclTensor,
    softmaxOutOut: *const aclTensor,
    attentionOutOut: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnFlashAttentionScoreGetWorkspaceSize", |t| {
        let required = [query, key, value, softmaxMaxOut, softmaxSumOut, attentionOutOut];
        if required.iter().any(|p| p.is_null())
            || inputLayout.is_null()
            || workspaceSize.is_null()
            || executor.is_null()
        {
            return fail(
                ACLNN_ERR_PARAM_NULLPTR,
                "aclnnFlashAttentionScore: query, key, value, inputLayout, softmaxMaxOut, softmaxSumOut, \
                 attentionOutOut, workspaceSize and executor must not be NULL",
            );
        }
        let (hq, q) = tensor(t, query, "query")?;
        let (hk, k) = tensor(t, key, "key")?;
        let (hv, v) = tensor(t, value, "value")?;
        let (hmx, mx) = tensor(t, softmaxMaxOut, "softmaxMaxOut")?;
        let (hsm, sm) = tensor(t, softmaxSumOut, "softmaxSumOut")?;
        let (ho, o) = tensor(t, attentionOutOut, "attentionOutOut")?;
        // Reserved and never written; a given descriptor must still be a live one.
        optional(t, softmaxOutOut, "softmaxOutOut")?;
        if mx.numel() == 0 && sm.numel() == 0 && o.numel() == 0 {
            let e = ex(
                "aclnnFlashAttentionScore",
                Kernel::FlashAttention { scale: 0.0, heads: 0, kv_heads: 0, causal: false },
                vec![],
                vec![],
                0,
            );
            // SAFETY: C contract: out-pointers are writable (checked non-NULL above).
            return unsafe { finish(t, e, workspaceSize, executor) };
        }
        let pse = optional(t, realShiftOptional, "realShiftOptional")?;
        check_types(&q, &k, &v, pse.as_ref().map(|(_, p)| p), headNum)?;
        // SAFETY: C contract: a non-NULL inputLayout is a NUL-terminated string.
        let layout = unsafe { CStr::from_ptr(inputLayout) }.to_string_lossy().to_ascii_uppercase();
        check_layout(&layout, &q, &k, &v)?;
        let s = check_shapes(&q, &k, &v, headNum)?;
        let options = Options {
            keep_prob: keepProb,
            drop_mask: dropMaskOptional,
            padding_mask: paddingMaskOptional,
            atten_mask: attenMaskOptional,
            prefix: prefixOptional,
            sparse_mode: sparseMode,
            inner_precise: innerPrecise,
        };
        let causal = check_options(t, &options)?;
        let mut inputs = vec![Src::Tensor(hq, q.clone()), Src::Tensor(hk, k), Src::Tensor(hv, v)];
        if let Some((hp, p)) = pse {
            check_pse(&p.dims, s, &q)?;
            inputs.push(Src::Tensor(hp, p));
        }
        check_stats(&mx, &sm, s)?;
        if !t.cfg.is_a2_or_a3() {
            return fail(
                ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
                format!("aclnnFlashAttentionScore has no kernel for {} (Atlas A2/A3 training only)", t.cfg.soc),
            );
        }
        let kernel =
            Kernel::FlashAttention { scale: scaleValue, heads: s.n1 as usize, kv_heads: s.n2 as usize, causal };
        let outputs = vec![(hmx, mx), (hsm, sm), (ho, o)];
        let e = ex("aclnnFlashAttentionScore", kernel, inputs, outputs, t.cfg.workspace);
        // SAFETY: C contract: out-pointers are writable (checked non-NULL above).
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}
