//! Compositions: the ops aclnn has no single operator for, made of the basic operators of
//! the op-mapping files. Attention (`q · kᵀ`, scale, mask, softmax, `· v`, fully masked
//! rows zeroed), Attention as one aclnnFlashAttentionScore
//! (`aclnnop/aclnn_flash_attention_score.h`, ops-transformer) with the scale and the
//! masked rows handled around it, and Gather through IndexSelect.
//!
//! The composed Attention is grouped-query and causal too. Grouped-query without copying
//! k and v: with `G = H / H_kv` query heads per kv head, q `[B, H, S, D]` is the same
//! memory as `[B, H_kv, G·S, D]`, so each product is one batched product over the kv
//! heads (and the scores, `[B, H, S, T]`, are `[B, H_kv, G·S, T]`). Causal: a bool mask
//! `[S, T]` true past each row's last key (`j > i + T − S`) is built on the device —
//! aclnnTriu of a broadcast 1 with diagonal `T − S + 1`, the 1 made by aclnnEqTensor of a
//! byte with itself — and the scores there are set to -inf (aclnnInplaceMaskedFillScalar,
//! which replaces, so a NaN score a row does not see stays out of it), before the row
//! tests and the softmax.

use super::call::BResult;
use super::call::{Call, View, align512};
use super::data::{index_select, inplace_copy};
use super::elementwise::{add_sub, adds, eq, muls};
use super::matmul::matmul;
use super::norm::softmax;
use super::reduce::{all_minus_inf, zero_rows};
use crate::error::AclBackendError;
use acl_sys::result::aclnn as nn;
use runtime::DType;

/// The operands of a fused Attention.
pub(super) struct Attention<'v> {
    pub(super) q: &'v View,
    pub(super) k: &'v View,
    pub(super) v: &'v View,
    /// Additive, broadcast to the scores.
    pub(super) mask: Option<&'v View>,
    pub(super) scale: f32,
}

/// Where a composed Attention keeps its intermediates (contiguous).
pub(super) struct AttentionScratch {
    /// Two score buffers `[B, H, S, T]`, used in turn.
    pub(super) pair: [View; 2],
    /// The row maxima of the masked scores, `[B, H, S, 1]`.
    pub(super) row_max: View,
    /// Whether a row's scores are all -inf, `[B, H, S, 1]` (bool over u8 storage).
    pub(super) masked: View,
    /// Causal attention: two bytes (`[2]`, u8) for the 1 the mask is cut from, and the mask
    /// `[S, T]` (bool over u8).
    pub(super) causal: Option<(View, View)>,
}

/// Attention composed of aclnn operators: `q · kᵀ` on the Cube (k transposed through its
/// strides, no copy), scaled (aclnnMuls), the mask added (aclnnAdd, broadcast), the
/// softmax over the last axis and the product with v into `out`. A row whose scores are
/// all -inf (every key masked) attends to nothing and is 0, where the softmax alone would
/// give NaN: its row maximum (aclnnAmax) equals -inf (aclnnEqScalar), and those rows of
/// `out` are zeroed (aclnnInplaceMaskedFillScalar). A row with a NaN or +inf score has a
/// NaN or +inf maximum and stays NaN.
pub(super) fn attention(c: &mut Call, a: &Attention, sc: &AttentionScratch, out: &View, cube: i8) -> BResult<()> {
    let pair = &sc.pair;
    // Grouped-query: q, the scores and out as `[B, H_kv, G·S, ..]` (contiguous operands).
    let (b, h, s, hkv) = (a.q.dims[0], a.q.dims[1], a.q.dims[2], a.k.dims[1]);
    let grouped = |v: &View| {
        let mut d = v.dims.clone();
        if hkv != h && hkv != 0 {
            d = vec![b, hkv, (h / hkv) * s, d[3]];
        }
        v.reshaped(&d)
    };
    matmul(c, &grouped(a.q), &a.k.t(true), &grouped(&pair[0]), cube)?;
    muls(c, &pair[0], a.scale, &pair[1])?;
    let mut cur = 1;
    if let Some(m) = a.mask {
        add_sub(c, false, &pair[1], m, &pair[0])?;
        cur = 0;
    }
    if let Some((one, mask)) = &sc.causal {
        causal_mask(c, one, mask)?;
        fill_where(c, &pair[cur], mask, f64::NEG_INFINITY)?;
    }
    all_minus_inf(c, &pair[cur], &sc.row_max, &sc.masked)?;
    softmax(c, &pair[cur], -1, &pair[1 - cur])?;
    matmul(c, &grouped(&pair[1 - cur]), a.v, &grouped(out), cube)?;
    zero_rows(c, out, &sc.masked)
}

/// The causal mask `[S, T]` (bool over u8), true where key `j` is past query `i`'s last,
/// `j > i + T − S`: [`cut_triangle`] with diagonal `T − S + 1`.
fn causal_mask(c: &mut Call, two: &View, mask: &View) -> BResult<()> {
    let (s, t) = (mask.dims[0], mask.dims[1]);
    cut_triangle(c, two, mask, t as i64 - s as i64 + 1)
}

/// The side of the operator's causal attenMask (sparseMode 3).
const CAUSAL_MASK: usize = 2048;

/// `mask` (2-D, bool over u8) true where `j − i >= diagonal`: aclnnTriu of a 1 broadcast
/// to the mask's shape, the 1 being aclnnEqTensor of `two[0]` (any byte equals itself)
/// written to `two[1]`.
fn cut_triangle(c: &mut Call, two: &View, mask: &View, diagonal: i64) -> BResult<()> {
    let (s, t) = (mask.dims[0], mask.dims[1]);
    let mut byte = two.reshaped(&[1]);
    eq(c, &byte, &byte, &{
        let mut o = byte.clone();
        o.offset += 1;
        o
    })?;
    byte.offset += 1;
    let (one, to) = (View { dims: vec![s, t], strides: vec![0, 0], ..byte }, c.bool_output(mask)?);
    let tone = c.bool_tensor(&one)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::triu_get_workspace_size(c.api, tone, diagonal, to) };
    c.run(p1, nn::triu)
}

/// `value` where `mask` (bool over u8, broadcast to `x`) is true, in place
/// (aclnnInplaceMaskedFillScalar).
fn fill_where(c: &mut Call, x: &View, mask: &View, value: f64) -> BResult<()> {
    let (tx, tm) = (c.tensor(x)?, c.bool_tensor(mask)?);
    let v = c.scalar_for(x.dtype, value)?;
    // SAFETY: live descriptors owned by `c`.
    let p1 = unsafe { nn::inplace_masked_fill_scalar_get_workspace_size(c.api, tx, tm, v) };
    c.run(p1, nn::inplace_masked_fill_scalar)
}

/// `m` (broadcastable to `[B, H, S, T]`, at most 4-D) as a 4-D view: leading dims of 1.
pub(super) fn rank4(m: &View) -> View {
    let pad = 4 - m.dims.len().min(4);
    let mut v = m.clone();
    v.dims = std::iter::repeat_n(1, pad).chain(m.dims.iter().copied()).collect();
    v.strides = std::iter::repeat_n(0, pad).chain(m.strides.iter().copied()).collect();
    v
}

/// The last dim of aclnnFlashAttentionScore's softmaxMax and softmaxSum (docs: `[B, N, Sq, 8]`).
pub(super) const FA_STATS: usize = 8;

/// Attention as one aclnnFlashAttentionScore (Atlas A2/A3; layout BNSD, q, k, v as they
/// are, strides included), which computes `softmax(scaleValue * (pse + q·kᵀ)) · v`.
///
/// Its pse is added *before* the scale, where the op table's additive mask is added after
/// it. With a mask, q is scaled instead (aclnnMuls into scratch) and scaleValue is 1, so
/// the mask goes in as it is (no division by the scale that could overflow fp16: BERT's
/// -10000 over 1/8 is -80000), as a view broadcast through zero strides to one of the pse
/// shapes the operator takes, `[B or 1, H, S or 1, T]`. A query row whose keys are all
/// masked (-inf) is 0 on every backend, while the operator's docs do not say what it
/// writes there: such rows are found from the mask itself (its row maxima equal -inf,
/// aclnnAmax and aclnnEqScalar on the mask, not on the scores, which never exist here) and
/// zeroed (aclnnInplaceMaskedFillScalar). Its softmax row maxima and sums (FLOAT
/// `[B, H, S, 8]`) go to scratch; the reserved softmaxOut and the dropout, padding and
/// boolean attention masks are NULL.
///
/// Causal (`causal`: fp16 and bf16, the support predicate keeps f32 on the composition):
/// sparseMode 3 (rightDownCausal, the op table's bottom-right alignment) with the
/// attenMask that mode takes, `[2048, 2048]` bool true above the diagonal, cut on the device
/// by aclnnTriu (diagonal 1) from a broadcast 1 as the composition's mask is; with more
/// queries than keys the first `S − T` rows see no key, and are zeroed through a `[S, 1]`
/// mask cut the same way (diagonal `T − S + 1`).
pub(super) fn flash_attention(c: &mut Call, a: &Attention, out: &View, causal: bool) -> BResult<()> {
    let (b, h, s, d) = (a.q.dims[0], a.q.dims[1], a.q.dims[2], a.q.dims[3]);
    let t = a.k.dims[2];
    let stats = [b, h, s, FA_STATS];
    let stat_bytes = align512(stats.iter().product::<usize>() * DType::F32.size());
    let m4 = a.mask.map(rank4);
    let rows = m4.as_ref().map_or(0, |m| m.dims[..3].iter().product::<usize>());
    let q_bytes = if a.mask.is_some() { align512(b * h * s * d * a.q.dtype.size()) } else { 0 };
    let row_bytes = align512(rows * a.q.dtype.size());
    let fixed = 2 * stat_bytes + q_bytes + row_bytes + align512(rows);
    let causal_bytes = if causal { 512 + CAUSAL_MASK * CAUSAL_MASK + align512(s) } else { 0 };
    let base = c.scratch(fixed + causal_bytes)?;
    // Causal: two bytes for the 1, the operator's mask, the rows that see no key.
    let causal_views = causal.then(|| {
        let at = |off: usize| base + (fixed + off) as u64;
        (
            View::contiguous(at(0), DType::U8, &[2]),
            View::contiguous(at(512), DType::U8, &[CAUSAL_MASK, CAUSAL_MASK]),
            View::contiguous(at(512 + CAUSAL_MASK * CAUSAL_MASK), DType::U8, &[s, 1]),
        )
    });
    let max = View::contiguous(base, DType::F32, &stats);
    let sum = View::contiguous(base + stat_bytes as u64, DType::F32, &stats);
    let mut q = a.q.clone();
    let mut scale = a.scale;
    let mut pse = None;
    if let Some(m) = &m4 {
        let scaled = View::contiguous(base + 2 * stat_bytes as u64, a.q.dtype, &[b, h, s, d]);
        muls(c, a.q, a.scale, &scaled)?;
        (q, scale) = (scaled, 1.0);
        let mut p = m.clone();
        for (axis, full) in [(1, h), (3, t)] {
            if p.dims[axis] == 1 && full != 1 {
                (p.dims[axis], p.strides[axis]) = (full, 0);
            }
        }
        pse = Some(p);
    }
    let (tq, tk, tv) = (c.tensor(&q)?, c.tensor(a.k)?, c.tensor(a.v)?);
    if let Some((one, mask, _)) = &causal_views {
        cut_triangle(c, one, mask, 1)?;
    }
    let tp = match &pse {
        Some(p) => c.tensor(p)?,
        None => c.absent(false),
    };
    let (drop_mask, padding_mask) = (c.absent(false), c.absent(false));
    let atten_mask = match &causal_views {
        Some((_, mask, _)) => c.bool_tensor(mask)?,
        None => c.absent(false),
    };
    let (tmax, tsum) = (c.output(&max)?, c.output(&sum)?);
    let softmax_out = c.absent(true);
    let to = c.output(out)?;
    let attrs = nn::FlashAttentionAttrs {
        scale_value: f64::from(scale),
        keep_prob: 1.0,
        // No sliding window (the defaults torch_npu passes; without an attention mask they
        // have no effect anyway).
        pre_tokens: i64::from(i32::MAX),
        next_tokens: i64::from(i32::MAX),
        head_num: h as i64,
        input_layout: c"BNSD",
        inner_precise: 0,
        // 3: rightDownCausal, with its 2048×2048 mask; 0: no sparsity.
        sparse_mode: if causal { 3 } else { 0 },
    };
    // SAFETY: live descriptors owned by `c`; NULL for the optional masks, the prefix and
    // the reserved softmaxOut, as the operator documents them.
    let p1 = unsafe {
        nn::flash_attention_score_get_workspace_size(
            c.api,
            tq,
            tk,
            tv,
            tp,
            drop_mask,
            padding_mask,
            atten_mask,
            std::ptr::null(),
            &attrs,
            tmax,
            tsum,
            softmax_out,
            to,
        )
    };
    c.run(p1, nn::flash_attention_score)?;
    if let Some((one, _, none_seen)) = &causal_views
        && s > t
    {
        cut_triangle(c, one, none_seen, t as i64 - s as i64 + 1)?;
        zero_rows(c, out, &none_seen.reshaped(&[1, 1, s, 1]))?;
    }
    let Some(m) = m4 else { return Ok(()) };
    let rd: Vec<usize> = m.dims[..3].iter().copied().chain([1]).collect();
    let row_max = View::contiguous(base + (2 * stat_bytes + q_bytes) as u64, m.dtype, &rd);
    let masked = View::contiguous(base + (2 * stat_bytes + q_bytes + row_bytes) as u64, DType::U8, &rd);
    all_minus_inf(c, &m, &row_max, &masked)?;
    zero_rows(c, out, &masked)
}

/// Gather along `axis` through IndexSelect, which needs indices in [0, n) where the op
/// table allows [-n, n). Both ways shift the indices by n (aclnnAdds) first.
///
/// One-shot: selects from the data laid twice along the axis (two aclnnInplaceCopy), in
/// the stream's scratch buffer. Recording: InplaceCopy cannot be repeatable, and the data
/// may change from run to run; instead the shifted indices select, from a constant
/// table `[0, 1, .., n-1, 0, 1, .., n-1]` uploaded once into the recording's memory,
/// the index in [0, n) (a first aclnnIndexSelect), which then selects from the data.
pub(super) fn gather(c: &mut Call, x: &View, idx: &View, axis: usize, out: &View) -> BResult<()> {
    let n = x.dims[axis];
    let ni: usize = idx.dims.iter().product();
    let idx_bytes = align512(ni * idx.dtype.size());
    if c.recording() {
        let table: Vec<u8> = match idx.dtype {
            DType::I32 => (0..2 * n).flat_map(|j| ((j % n.max(1)) as i32).to_le_bytes()).collect(),
            DType::I64 => (0..2 * n).flat_map(|j| ((j % n.max(1)) as i64).to_le_bytes()).collect(),
            d => return Err(AclBackendError::BadRequest(format!("{}: {d} indices", c.op))),
        };
        let t = c.upload(&table)?;
        let s = c.scratch(2 * idx_bytes)?;
        let shifted = View::contiguous(s, idx.dtype, &[ni]);
        let wrapped = View::contiguous(s + idx_bytes as u64, idx.dtype, &[ni]);
        adds(c, &idx.reshaped(&[ni]), n as f64, &shifted)?;
        index_select(c, &View::contiguous(t, idx.dtype, &[2 * n]), 0, &shifted, &wrapped)?;
        return index_select(c, x, axis, &wrapped, out);
    }
    let mut d2 = x.dims.clone();
    d2[axis] = 2 * n;
    let data_bytes = align512(d2.iter().product::<usize>() * x.dtype.size());
    let s = c.scratch(data_bytes + idx_bytes)?;
    let doubled = View::contiguous(s, x.dtype, &d2);
    let mut half = doubled.clone();
    half.dims[axis] = n;
    inplace_copy(c, &half, x)?;
    half.offset = n * doubled.strides[axis];
    inplace_copy(c, &half, x)?;
    let shifted = View::contiguous(s + data_bytes as u64, idx.dtype, &[ni]);
    adds(c, &idx.reshaped(&[ni]), n as f64, &shifted)?;
    index_select(c, &doubled, axis, &shifted, out)
}
