//! PagedAttention as one `aclnnIncreFlashAttentionV4` (Atlas A2/A3, fp16 and bf16): the
//! operator's paged form, which reads the caches in place through the block table.
//!
//! The operator takes the lengths as `actualSeqLengths`, an `aclIntArray` copied at phase 1,
//! which a recorded executor would keep. So the lengths given to it are constant, every one
//! `T = MB·BS` (the table's reach), and the real lengths, read on the device from the
//! `context_lens` tensor, go in as its `attenMask` (BOOL `[B, 1, 1, T]`, true at
//! `p >= context_lens[b]`, built as the composition builds it): a recorded executor stays
//! valid when the lengths change from step to step, and a warm decode step makes no
//! phase-1 call. Around it, as in the composition:
//! * the lengths are checked on the device (aclnnIndexSelect from `[0, .., T]`, which
//!   refuses one below 0 or above T);
//! * table entries a length does not reach become block 0 (aclnnSWhere; the mask hides
//!   them), and the table then selects itself from `[0, .., NB)` (aclnnIndexSelect), so a
//!   block id outside the cache fails on the device before the operator reads anything;
//! * a sequence of length 0 has every key masked: its rows, whatever the operator writes
//!   there (its docs do not say), are zeroed (aclnnInplaceMaskedFillScalar under the
//!   mask's first column).
//!
//! The caches go in as one-member tensor lists `[NB, BS, KVH·D]` (the docs' (blocknum,
//! blockSize, H)) with the query in layout BSH `[B, 1, H·D]`; the recorded executor patches
//! the lists' members through `aclSetDynamicInputTensorAddr` (irIndex 1 and 2). The masked
//! positions' values are multiplied by a zero weight, not skipped: the cache rows a table
//! reaches must hold finite values (the LLM engine's caches are zero-filled when made).
//! innerPrecise 0 (the high-precision mode), no pseShift, no quantisation, no left padding.

use super::call::{BResult, Call, View};
use super::data::index_select;
use super::elementwise::{add_sub, cast, eq, s_where, unary};
use super::paged::{Bump, arange, bytes, paged_operands};
use super::reduce::zero_rows;
use acl_sys::result::aclnn as nn;
use runtime::{DType, Op};

/// Whether the toolkit exports both symbols of the operator (optional: older operator
/// libraries lack it).
pub(super) fn exported(c: &Call) -> bool {
    c.api.aclnnIncreFlashAttentionV4GetWorkspaceSize().is_ok() && c.api.aclnnIncreFlashAttentionV4().is_ok()
}

/// PagedAttention (see the module documentation) into `out` `[B, H, D]`; `ins`: q
/// `[B, H, D]`, key_cache, value_cache `[NB, BS, KVH, D]`, block_tables `[B, MB]` i32,
/// context_lens `[B]` i32. The kernel's support predicate bounds the shapes.
pub(super) fn paged_attention_fused(c: &mut Call, op: &Op, ins: &[View], out: &View) -> BResult<()> {
    // Checked sizes (T = MB·BS and the scratch below cannot overflow) and a batch of at
    // least 1, shared with the composition.
    let p = paged_operands(c.op, op, ins)?;
    let (q, kc, vc, bt, lens) = (p.q, p.kc, p.vc, p.bt, p.lens);
    let (b, h, d, nb, bs, kvh, mb, t, scale) = (p.b, p.h, p.d, p.nb, p.bs, p.kvh, p.mb, p.t, p.scale);
    let n = (t + 1).max(nb);
    let total = bytes(DType::I32, &[n])
        + bytes(DType::I32, &[b])
        + bytes(DType::F32, &[t + 1])
        + bytes(DType::F32, &[b])
        + 2 * bytes(DType::F32, &[b, mb])
        + 2 * bytes(DType::I32, &[b, mb])
        + bytes(DType::U8, &[b, mb])
        + 2 * bytes(DType::F32, &[b, t])
        + bytes(DType::U8, &[b, t])
        + bytes(DType::U8, &[1]);
    let mut m = Bump { base: c.scratch(total)?, at: 0 };
    let ar = m.take(DType::I32, &[n]);
    let checked = m.take(DType::I32, &[b]);
    let (arf, lf) = (m.take(DType::F32, &[t + 1]), m.take(DType::F32, &[b, 1]));
    let (e, re) = (m.take(DType::F32, &[b, mb]), m.take(DType::F32, &[b, mb]));
    let (ids, table) = (m.take(DType::I32, &[b, mb]), m.take(DType::I32, &[b, mb]));
    let unused = m.take(DType::U8, &[b, mb]);
    let (diff, relu) = (m.take(DType::F32, &[b, t]), m.take(DType::F32, &[b, t]));
    let drop = m.take(DType::U8, &[b, t]);
    let truth = m.take(DType::U8, &[1]);

    // [0, .., max(T, NB - 1)]; the lengths checked against [0, .., T].
    arange(c, &ar, lens, &truth)?;
    let upto_t = ar.reshaped(&[t + 1]);
    index_select(c, &upto_t, 0, &lens.reshaped(&[b]), &checked)?;
    cast(c, &upto_t, DType::F32, &arf)?;
    cast(c, &lens.reshaped(&[b, 1]), DType::F32, &lf)?;
    // unused[b, j] = j·BS - lens[b] >= 0 (relu(x) == x exactly there): block 0 instead.
    let starts = View { dims: vec![1, mb], strides: vec![0, bs], ..arf.clone() };
    add_sub(c, true, &starts, &lf, &e)?;
    unary(c, &Op::Relu, &e, &re)?;
    eq(c, &re, &e, &unused)?;
    let zero = View { dims: vec![1, 1], strides: vec![0, 0], ..ar.clone() };
    s_where(c, &unused, &zero, &bt.reshaped(&[b, mb]), &ids)?;
    // The table selects itself from [0, .., NB): an id outside the cache fails here.
    index_select(c, &ar.reshaped(&[nb]), 0, &ids.reshaped(&[b * mb]), &table.reshaped(&[b * mb]))?;
    // drop[b, p] = p >= lens[b].
    add_sub(c, true, &arf.reshaped(&[1, t]), &lf, &diff)?;
    unary(c, &Op::Relu, &diff, &relu)?;
    eq(c, &relu, &diff, &drop)?;

    // The operator, its tensors created in the prototype's order (the setters count them).
    let o3 = out.reshaped(&[b, 1, h * d]);
    let tq = c.tensor(&q.reshaped(&[b, 1, h * d]))?;
    let tk = c.tensor_list(&[kc.reshaped(&[nb, bs, kvh * d])])?;
    let tv = c.tensor_list(&[vc.reshaped(&[nb, bs, kvh * d])])?;
    let pse = c.absent(false);
    let mask = c.bool_tensor(&drop.reshaped(&[b, 1, 1, t]))?;
    let lengths = c.ints(&vec![t as i64; b])?;
    let quant: Vec<_> = (0..7).map(|_| c.absent(false)).collect();
    let tt = c.tensor(&table)?;
    let padding = c.absent(false);
    let to = c.output(&o3)?;
    // SAFETY: live descriptors and lists owned by `c`; NULL for pseShift, the quantisation
    // inputs and kvPaddingSize, as the operator documents them; the layout is a
    // NUL-terminated string the operator only reads.
    let p1 = unsafe {
        nn::incre_flash_attention_v4_get_workspace_size(
            c.api,
            tq,
            tk,
            tv,
            pse,
            mask,
            lengths,
            quant[0],
            quant[1],
            quant[2],
            quant[3],
            quant[4],
            quant[5],
            quant[6],
            tt,
            padding,
            h as i64,
            f64::from(scale),
            c"BSH".as_ptr().cast_mut(),
            kvh as i64,
            bs as i64,
            0,
            to,
        )
    };
    c.run(p1, nn::incre_flash_attention_v4)?;
    // A zero length masks position 0 (and every other): those rows are 0.
    let first = View { dims: vec![b, 1, 1], strides: vec![t, 0, 0], ..drop.clone() };
    zero_rows(c, &out.reshaped(&[b, h, d]), &first)
}
