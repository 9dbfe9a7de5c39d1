//! aclnnIncreFlashAttentionV4: the fused decode attention of Atlas A2/A3 (its docs list the
//! A2/A3 and inference SoCs, not the Atlas training SoCs, the 910 family: phase 1 fails
//! there with 561003, no kernel).
//!
//! Only the paged form is emulated (hicann/ops-transformer,
//! `attention/incre_flash_attention/docs/aclnnIncreFlashAttentionV4.md`, "page attention"):
//! query BSH `[B, 1, N·D]` (one query row per sequence), key and value each a tensor list of
//! one member, the whole cache `[blocknum, blockSize, KV_N·D]`, blocktable INT32
//! `[B, maxBlockNumPerSeq]`, blockSize a multiple of 16 (FLOAT16, BFLOAT16) at most 512,
//! actualSeqLengths one length per batch (at most maxBlockNumPerSeq·blockSize), an
//! optional attenMask BOOL, INT8 or UINT8 `[B, S]`, `[B, 1, S]` or `[B, 1, 1, S]` with
//! `S >= maxBlockNumPerSeq·blockSize` (1 = masked), query, caches and attentionOut of one
//! dtype, FLOAT16 or BFLOAT16, and blocknum not below the blocks the lengths need, summed
//! over the batch. Everything else (pseShift, the quantisation inputs,
//! kvPaddingSize, the other layouts, non-paged lists) is refused as not emulated (161002).
//! The docs' bounds: B <= 65536, N <= 256, D <= 512, numHeads a multiple of
//! numKeyValueHeads (0: equal).
//!
//! Phase 2 queues [`Kernel::IncreFlash`]: for each sequence `b` and head `h` the positions
//! `p < actualSeqLengths[b]`, the block of `p` read through the table (an id outside
//! `[0, blocknum)` fails the launch: an AI Core exception), scores `scale · q·k`, a masked
//! position's score replaced by -inf, the softmax in f64 and the product with the values,
//! where a masked position contributes `0 · v` (so a NaN value there still makes the row
//! NaN, as a kernel that multiplies by a zero weight would). A row with no position to
//! attend to is NaN (0 / 0): the docs do not say what the hardware writes there.
//!
//! A repeatable executor's setters: inputs counted over the prototype's tensors (the
//! actualSeqLengths array not counted): query 0, key 1 and value 2 (tensor lists: their
//! members through `aclSetDynamicInputTensorAddr`, irIndex 1 and 2, relativeIndex 0),
//! pseShift 3, attenMask 4, the seven quantisation tensors 5..=11, blocktable 12,
//! kvPaddingSize 13; output attentionOut 0 (see [`crate::aclnn::executor`]).
//!
//! The kernel and its modelled cost are in [`crate::ifa_kernel`]: the Cube for the two products, the Vector units for the
//! softmax, the caches read for every position the lengths cover.

use crate::aclnn::basics::{desc, ex, finish, int_array, phase2, tensor_list};
use crate::descriptors::{Kernel, Src, TensorDesc};
use crate::error::{R, fail};
use crate::ffi::{guard, h};
use crate::ifa_kernel::IncreFlash;
use crate::state::Tables;
use acl_sys::codes::*;
use acl_sys::*;
use std::ffi::{CStr, c_char};

phase2!(aclnnIncreFlashAttentionV4);

const OP: &str = "aclnnIncreFlashAttentionV4";

fn invalid<T>(msg: String) -> R<T> {
    fail(ACLNN_ERR_PARAM_INVALID, format!("{OP}: {msg}"))
}

fn not_emulated<T>(what: &str) -> R<T> {
    invalid(format!("{what} is not emulated by acl-emu"))
}

/// The one member of a paged key or value list.
fn member(t: &Tables, list: *const aclTensorList, what: &str) -> R<(u64, TensorDesc)> {
    match tensor_list(t, h(list.cast()), what)?.as_slice() {
        [Src::Tensor(k, d)] => Ok((*k, d.clone())),
        l => not_emulated(&format!("{what} as a list of {} tensors (only the paged form's one)", l.len())),
    }
}

/// The scalar attributes of a call.
struct Attrs {
    heads: i64,
    kv_heads: i64,
    block_size: i64,
    inner_precise: i64,
}

/// Checks the operands against the docs (see the module documentation); the kernel.
fn check(
    q: &TensorDesc,
    kc: &TensorDesc,
    vc: &TensorDesc,
    bt: &TensorDesc,
    mask: Option<&TensorDesc>,
    out: &TensorDesc,
    lens: &[i64],
    a: &Attrs,
) -> R<(usize, usize)> {
    if ![ACL_FLOAT16, ACL_BF16].contains(&q.dtype) || [kc, vc, out].iter().any(|d| d.dtype != q.dtype) {
        return invalid(format!(
            "query, the caches and attentionOut must be one of FLOAT16, BFLOAT16 (query {})",
            q.dtype.0
        ));
    }
    if q.dims.len() != 3 || q.dims[1] != 1 || out.dims != q.dims {
        return invalid(format!("query {:?} and attentionOut {:?} must be BSH [B, 1, H], equal", q.dims, out.dims));
    }
    let kvh = if a.kv_heads == 0 { a.heads } else { a.kv_heads };
    if a.heads <= 0 || a.heads > 256 || kvh <= 0 || a.heads % kvh != 0 || q.dims[2] % a.heads != 0 {
        return invalid(format!("numHeads {} over numKeyValueHeads {} and query {:?}", a.heads, a.kv_heads, q.dims));
    }
    let (b, d) = (q.dims[0], q.dims[2] / a.heads);
    if b > 65536 || d > 512 {
        return invalid(format!("B <= 65536 and D <= 512, got B {b}, D {d}"));
    }
    if a.block_size <= 0 || a.block_size > 512 || a.block_size % 16 != 0 {
        return invalid(format!("blockSize must be a multiple of 16 in 16..=512, got {}", a.block_size));
    }
    if kc.dims.len() != 3 || kc.dims != vc.dims || kc.dims[1] != a.block_size || kc.dims[2] != kvh * d {
        return invalid(format!(
            "the caches {:?} / {:?} must be [blocknum, {}, {}]",
            kc.dims,
            vc.dims,
            a.block_size,
            kvh * d
        ));
    }
    if bt.dtype != ACL_INT32 || bt.dims.len() != 2 || bt.dims[0] != b {
        return invalid(format!("blocktable {:?} must be INT32 [{b}, maxBlockNumPerSeq]", bt.dims));
    }
    let t = bt.dims[1] * a.block_size;
    if lens.len() as i64 != b || lens.iter().any(|&l| l < 0 || l > t) {
        return invalid(format!("actualSeqLengths {lens:?}: {b} lengths in 0..={t}"));
    }
    // The docs: blocknum not below the blocks the lengths need, summed over the batch.
    let needed: i64 = lens.iter().map(|&l| (l + a.block_size - 1) / a.block_size).sum();
    if kc.dims[0] < needed {
        return invalid(format!("blocknum {} is below the {needed} blocks actualSeqLengths {lens:?} need", kc.dims[0]));
    }
    if let Some(m) = mask {
        let shape_ok = match m.dims.as_slice() {
            [mb, s] | [mb, 1, s] | [mb, 1, 1, s] => *mb == b && *s >= t,
            _ => false,
        };
        if ![ACL_BOOL, ACL_INT8, ACL_UINT8].contains(&m.dtype) || !shape_ok {
            return invalid(format!("attenMask {:?} must be BOOL, INT8 or UINT8 [{b}, (1, 1,) S >= {t}]", m.dims));
        }
    }
    if !(0..=1).contains(&a.inner_precise) {
        return invalid(format!("innerPrecise must be 0 or 1, got {}", a.inner_precise));
    }
    Ok((kvh as usize, d as usize))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnIncreFlashAttentionV4GetWorkspaceSize(
    query: *const aclTensor,
    key: *const aclTensorList,
    value: *const aclTensorList,
    pseShift: *const aclTensor,
    attenMask: *const aclTensor,
    actualSeqLengths: *const aclIntArray,
    dequantScale1: *const aclTensor,
    quantScale1: *const aclTensor,
    dequantScale2: *const aclTensor,
    quantScale2: *const aclTensor,
    quantOffset2: *const aclTensor,
    antiquantScale: *const aclTensor,
    antiquantOffset: *const aclTensor,
    blocktable: *const aclTensor,
    kvPaddingSize: *const aclTensor,
    numHeads: i64,
    scaleValue: f64,
    inputLayout: *mut c_char,
    numKeyValueHeads: i64,
    blockSize: i64,
    innerPrecise: i64,
    attentionOut: *const aclTensor,
    workspaceSize: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard("aclnnIncreFlashAttentionV4GetWorkspaceSize", |t| {
        if query.is_null()
            || key.is_null()
            || value.is_null()
            || attentionOut.is_null()
            || inputLayout.is_null()
            || workspaceSize.is_null()
            || executor.is_null()
        {
            return fail(
                ACLNN_ERR_PARAM_NULLPTR,
                format!(
                    "{OP}: query, key, value, inputLayout, attentionOut, workspaceSize and executor must not be NULL"
                ),
            );
        }
        let quant =
            [dequantScale1, quantScale1, dequantScale2, quantScale2, quantOffset2, antiquantScale, antiquantOffset];
        if !pseShift.is_null() || !kvPaddingSize.is_null() || quant.iter().any(|p| !p.is_null()) {
            return not_emulated("pseShift, kvPaddingSize or a quantisation input");
        }
        if blocktable.is_null() || actualSeqLengths.is_null() {
            return not_emulated("the non-paged form (no blocktable or no actualSeqLengths)");
        }
        // SAFETY: C contract: a non-NULL inputLayout is a NUL-terminated string.
        let layout = unsafe { CStr::from_ptr(inputLayout) }.to_string_lossy().to_string();
        if layout != "BSH" {
            return not_emulated(&format!("inputLayout {layout:?} (only BSH)"));
        }
        let q = desc(t, h(query.cast()), "query")?;
        let (hk, kc) = member(t, key, "key")?;
        let (hv, vc) = member(t, value, "value")?;
        let bt = desc(t, h(blocktable.cast()), "blocktable")?;
        let mask = if attenMask.is_null() { None } else { Some(desc(t, h(attenMask.cast()), "attenMask")?) };
        let out = desc(t, h(attentionOut.cast()), "attentionOut")?;
        let lens = int_array(t, h(actualSeqLengths.cast()), "actualSeqLengths")?;
        let a =
            Attrs { heads: numHeads, kv_heads: numKeyValueHeads, block_size: blockSize, inner_precise: innerPrecise };
        let (kvh, _) = check(&q, &kc, &vc, &bt, mask.as_ref(), &out, &lens, &a)?;
        if !t.cfg.is_a2_or_a3() {
            return fail(
                ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
                format!("{OP} has no kernel for {} (not the Atlas training SoCs)", t.cfg.soc),
            );
        }
        let kernel = IncreFlash {
            scale: scaleValue,
            heads: numHeads as usize,
            kv_heads: kvh,
            block_size: blockSize as usize,
            lens: lens.iter().map(|&l| l as usize).collect(),
        };
        let mut inputs = vec![
            Src::Tensor(h(query.cast()), q),
            Src::Tensor(hk, kc),
            Src::Tensor(hv, vc),
            Src::Tensor(h(blocktable.cast()), bt),
        ];
        if let Some(m) = mask {
            inputs.push(Src::Tensor(h(attenMask.cast()), m));
        }
        let e = ex(OP, Kernel::IncreFlash(kernel), inputs, vec![(h(attentionOut.cast()), out)], t.cfg.workspace);
        // SAFETY: C contract: out-pointers are writable (checked non-NULL above).
        unsafe { finish(t, e, workspaceSize, executor) }
    })
}

/// The prototype positions of the executor's inputs (see the module documentation):
/// query 0, blocktable 12, attenMask 4; the lists (1, 2) are set member by member.
pub(crate) fn input_slots(ex: &crate::descriptors::Executor) -> Vec<Option<usize>> {
    let mut v = vec![None; 14];
    if ex.inputs.len() >= 4 {
        v[0] = Some(0);
        v[12] = Some(3);
    }
    if ex.inputs.len() == 5 {
        v[4] = Some(4);
    }
    v
}

/// The executor's input position of member `relative` of the list given as input
/// `ir_index`: key (1) and value (2), one member each.
pub(crate) fn list_member(ir_index: usize, relative: usize) -> Option<usize> {
    matches!((ir_index, relative), (1, 0) | (2, 0)).then_some(ir_index)
}
