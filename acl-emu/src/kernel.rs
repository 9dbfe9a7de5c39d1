//! What an aclnn executor computes ([`Kernel`]): a runtime op (through
//! [`crate::compute`]), or one of the aclnn operators the runtime has no op for —
//! aclnnAmax, aclnnEqScalar, aclnnInplaceMaskedFillScalar, aclnnTriu, aclnnFlashAttentionScore,
//! aclnnRmsNorm and aclnnAddRmsNorm (with their rstd output) — computed here.

use runtime::reference::operands::{
    broadcast_strides, gather_offsets, load_f64, load_i64, numel, store_f64, store_i64,
};
use runtime::reference::{In, Out};
use runtime::{DType, KernelError, KernelResult, Op, Shape, TensorMeta};

/// What an executor computes: a runtime op through the reference kernels, or one of the
/// aclnn operators the runtime has no op for, computed by the emulator itself
/// (this module; their aclnn entry points are in [`crate::aclnn::masking`]).
#[derive(Clone, Debug)]
pub enum Kernel {
    Op(Op),
    /// aclnnAmax: the maximum over `axes` (ascending, distinct, in range), NaN
    /// propagating; `keep` keeps them as 1.
    Amax {
        axes: Vec<usize>,
        keep: bool,
    },
    /// aclnnEqScalar: 1 where `self == value` (the scalar rounded to self's dtype), else
    /// 0, written as `out`.
    EqScalar {
        value: f64,
        out: DType,
    },
    /// aclnnInplaceMaskedFillScalar: `value` where the bool mask (broadcast to selfRef)
    /// is true. Inputs `[selfRef, mask]`, output `selfRef`.
    MaskedFill {
        value: f64,
    },
    /// aclnnTriu: over the last two dims (row `i`, column `j`), the elements with
    /// `j - i >= diagonal` kept, the others 0; whole elements are moved.
    Triu {
        diagonal: i64,
    },
    /// aclnnRotaryPositionEmbedding: `x · cos + rotate(x) · sin` with cos and sin (x's
    /// last dim) broadcast to x; `mode` 0 pairs `d` with `d ± D/2`, 1 pairs `2i` with
    /// `2i + 1`. Inputs `[x, cos, sin]`.
    Rotary {
        mode: i64,
    },
    /// aclnnFlashAttentionScore, layout BNSD: `softmax(scale * (pse + q·kᵀ)) · v` per
    /// query head (key/value head `h / (heads / kv_heads)`). Inputs `[q, k, v]` or
    /// `[q, k, v, pse]` (pse `[1 or B, heads, 1 or S, T]`); outputs softmaxMax and
    /// softmaxSum (`[B, heads, S, 8]` FLOAT, each row's value 8 times) and the attention
    /// result `[B, heads, S, Dv]`. No inputs and no outputs: every output was empty.
    FlashAttention {
        scale: f64,
        heads: usize,
        kv_heads: usize,
        /// sparseMode 3 (rightDownCausal): query `i` sees keys `j <= i + T - S`; the scores
        /// of the others are replaced by -inf.
        causal: bool,
    },
    /// aclnnRmsNorm (inputs `[x, gamma]`, outputs `[y, rstd]`) and aclnnAddRmsNorm (inputs
    /// `[x1, x2, gamma]`, outputs `[y, rstd, xOut]`, xOut the sum rounded to x's dtype and
    /// y its norm): the runtime's reference RmsNorm over the last axis (gamma `[D]`, of x's
    /// dtype or FLOAT), rstd FLOAT `[.., 1]` (x's dims with the last one 1).
    RmsNorm {
        eps: f64,
    },
    /// aclnnScatterNdUpdate: `var[indices[i]] = updates[i]`, whole slices moved (`K`, the
    /// indices' last dim, indexes var's first K dims). Inputs `[var, indices, updates]`,
    /// output var (in place). Every index tuple is checked before anything is written: one
    /// outside var fails the launch (the AI Core exception of CANN's unchecked kernel).
    ScatterNd,
    /// aclnnScatterPaKvCache, cacheMode "Norm": the runtime's KvCacheWrite (reference
    /// kernel). Inputs `[key, keyCache, slotMapping, value, valueCache]` (the prototype's
    /// order), outputs the two caches (in place). The docs bound the slots to
    /// `[0, NB·BS)`: a negative one fails the launch like one past the end.
    PaKvCache,
    /// aclnnIncreFlashAttentionV4, paged form (see [`crate::ifa_kernel`]).
    IncreFlash(crate::ifa_kernel::IncreFlash),
}

impl From<Op> for Kernel {
    fn from(op: Op) -> Kernel {
        Kernel::Op(op)
    }
}

impl Kernel {
    /// The outputs the inputs give, or why they are invalid.
    pub fn infer(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>, String> {
        match self {
            Kernel::Op(op) => op.infer(inputs).map_err(|e| e.to_string()),
            k => infer(k, inputs),
        }
    }

    /// Computes the kernel on contiguous inputs into contiguous outputs (a stream job).
    pub fn run(&self, ins: &[In], outs: &mut [Out]) -> KernelResult {
        match self {
            Kernel::Op(op) => crate::compute::run(op, ins, outs),
            k => run_other(k, ins, outs),
        }
    }
}

/// Output shapes of a non-`Op` kernel (phase 1), or why the operands do not fit.
fn infer(k: &Kernel, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>, String> {
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
        (Kernel::Triu { .. }, [x]) if x.shape.rank() >= 2 => Ok(vec![x.clone()]),
        (Kernel::Rotary { .. }, [x, _, _]) => Ok(vec![x.clone()]),
        (Kernel::MaskedFill { .. }, [s, m]) => match Shape::broadcast(&s.shape, &m.shape) {
            Some(b) if b == s.shape => Ok(vec![s.clone()]),
            _ => Err(format!("mask {:?} does not broadcast to selfRef {:?}", m.shape.dims(), s.shape.dims())),
        },
        (Kernel::RmsNorm { .. }, [x, .., g]) if inputs.len() <= 3 => {
            let d = *x.shape.dims().last().unwrap_or(&0);
            let add = inputs.len() == 3;
            if g.shape.dims() != [d] || !(g.dtype == x.dtype || g.dtype == DType::F32) || !x.dtype.is_float() {
                return Err(format!("x {x} and gamma {g}: gamma must be [{d}] of x's dtype or FLOAT (emulated form)"));
            }
            if add && inputs[1] != *x {
                return Err(format!("x1 {x} and x2 {} differ", inputs[1]));
            }
            let mut rd = x.shape.dims().to_vec();
            if let Some(l) = rd.last_mut() {
                *l = 1;
            }
            let mut outs = vec![x.clone(), TensorMeta::new(DType::F32, rd)];
            if add {
                outs.push(x.clone());
            }
            Ok(outs)
        }
        (Kernel::FlashAttention { .. }, []) => Ok(Vec::new()),
        (Kernel::FlashAttention { heads, kv_heads, .. }, [q, k, v, ..]) if inputs.len() <= 4 => {
            let (qd, kd, vd) = (q.shape.dims(), k.shape.dims(), v.shape.dims());
            if qd.len() != 4 || kd.len() != 4 || vd.len() != 4 {
                return Err("query, key and value must be 4-D (BNSD)".into());
            }
            let (b, s, t) = (qd[0], qd[2], kd[2]);
            if qd[1] != *heads || kd[1] != *kv_heads || vd[1] != *kv_heads || kd[0] != b || vd[0] != b || vd[2] != t {
                return Err(format!("query {qd:?}, key {kd:?} and value {vd:?} do not agree"));
            }
            if let Some(p) = inputs.get(3) {
                let pd = p.shape.dims();
                let fits = pd.len() == 4
                    && (pd[0] == 1 || pd[0] == b)
                    && pd[1] == *heads
                    && (pd[2] == 1 || pd[2] == s)
                    && pd[3] == t;
                if !fits {
                    return Err(format!("pse {pd:?} is none of [B|1, {heads}, {s}|1, {t}]"));
                }
            }
            let stats = TensorMeta::new(DType::F32, vec![b, *heads, s, FA_STAT_WIDTH]);
            Ok(vec![stats.clone(), stats, TensorMeta::new(q.dtype, vec![b, *heads, s, vd[3]])])
        }
        (Kernel::ScatterNd, [var, idx, upd]) => {
            let (vd, id, ud) = (var.shape.dims(), idx.shape.dims(), upd.shape.dims());
            let k = id.last().copied().unwrap_or(0);
            let want: Vec<usize> =
                id[..id.len().saturating_sub(1)].iter().chain(&vd[k.min(vd.len())..]).copied().collect();
            if id.is_empty() || k == 0 || k > vd.len() || ud != want.as_slice() {
                return Err(format!("indices {id:?} and updates {ud:?} do not index var {vd:?}"));
            }
            Ok(vec![var.clone()])
        }
        (Kernel::PaKvCache, [_, kc, _, _, vc]) => Ok(vec![kc.clone(), vc.clone()]),
        (Kernel::IncreFlash(f), _) => f.infer(inputs),
        _ => Err(format!("{} operands do not fit {k:?}", inputs.len())),
    }
}

/// The last dim of FlashAttentionScore's softmaxMax and softmaxSum outputs.
pub const FA_STAT_WIDTH: usize = 8;

/// Computes a non-`Op` kernel on contiguous inputs into contiguous outputs.
fn run_other(k: &Kernel, ins: &[In], outs: &mut [Out]) -> KernelResult {
    if let Kernel::FlashAttention { scale, heads, kv_heads, causal } = k {
        return flash_attention(*scale, (*heads, *kv_heads), *causal, ins, outs);
    }
    if let Kernel::RmsNorm { eps } = k {
        return rms_norm(*eps, ins, outs);
    }
    if let Kernel::PaKvCache = k {
        return pa_kv_cache(ins, outs);
    }
    if let Kernel::IncreFlash(f) = k {
        return f.run(ins, outs);
    }
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
        (Kernel::Triu { diagonal }, []) => {
            let (es, r) = (x.dtype.size(), x.dims.len());
            let (rows, cols) = (x.dims[r - 2], x.dims[r - 1]);
            for (e, (src, dst)) in x.bytes.chunks(es).zip(o.bytes.chunks_mut(es)).take(x.numel()).enumerate() {
                let (i, j) = ((e / cols.max(1)) % rows.max(1), e % cols.max(1));
                let keep = j as i64 - i as i64 >= *diagonal;
                if keep { dst.copy_from_slice(src) } else { dst.fill(0) }
            }
            Ok(())
        }
        (Kernel::Rotary { mode }, [c, s]) => {
            let (xv, cv, sv) = (load_f64(x)?, load_f64(c)?, load_f64(s)?);
            let (co, so) = (
                gather_offsets(x.dims, &broadcast_strides(c.dims, x.dims)),
                gather_offsets(x.dims, &broadcast_strides(s.dims, x.dims)),
            );
            let d = *x.dims.last().unwrap_or(&1);
            let half = d / 2;
            let y: Vec<f64> = (0..xv.len())
                .map(|e| {
                    let (row, f) = (e - e % d.max(1), e % d.max(1));
                    let rot = match (*mode, f < half, f % 2 == 0) {
                        (0, true, _) => -xv[row + f + half],
                        (0, false, _) => xv[row + f - half],
                        (_, _, true) => -xv[e + 1],
                        (_, _, false) => xv[e - 1],
                    };
                    xv[e] * cv[co[e]] + rot * sv[so[e]]
                })
                .collect();
            store_f64(o, &y)
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
        (Kernel::ScatterNd, [idx, upd]) => scatter_nd(x, idx, upd, o),
        _ => Err(KernelError::Internal(format!("{} inputs for {k:?}", ins.len()))),
    }
}

/// aclnnScatterNdUpdate (see [`Kernel::ScatterNd`]).
fn scatter_nd(var: &In, idx: &In, upd: &In, o: &mut Out) -> KernelResult {
    let es = var.dtype.size();
    let n = var.numel() * es;
    let k = *idx.dims.last().unwrap_or(&1);
    let row: usize = var.dims[k..].iter().product::<usize>() * es;
    let ids = load_i64(idx)?;
    let mut rows = Vec::with_capacity(ids.len() / k.max(1));
    for t in ids.chunks(k.max(1)) {
        let mut r = 0usize;
        for (&i, &d) in t.iter().zip(var.dims) {
            let u = usize::try_from(i).ok().filter(|&u| u < d);
            r = r * d + u.ok_or(KernelError::IndexOutOfRange { index: i, len: d })?;
        }
        rows.push(r);
    }
    o.bytes[..n].copy_from_slice(&var.bytes[..n]);
    for (i, r) in rows.into_iter().enumerate() {
        o.bytes[r * row..(r + 1) * row].copy_from_slice(&upd.bytes[i * row..(i + 1) * row]);
    }
    Ok(())
}

/// aclnnScatterPaKvCache (see [`Kernel::PaKvCache`]): the caches copied to the outputs,
/// the slots checked against `[0, NB·BS)`, then the reference KvCacheWrite.
fn pa_kv_cache(ins: &[In], outs: &mut [Out]) -> KernelResult {
    let [key, kc, slots, value, vc] = ins else {
        return Err(KernelError::Internal(format!("{} inputs for aclnnScatterPaKvCache", ins.len())));
    };
    let total = kc.dims[0] * kc.dims[1];
    for &s in &load_i64(slots)? {
        if usize::try_from(s).map_or(true, |s| s >= total) {
            return Err(KernelError::IndexOutOfRange { index: s, len: total });
        }
    }
    for (src, o) in [kc, vc].into_iter().zip(outs.iter_mut()) {
        let n = src.numel() * src.dtype.size();
        o.bytes[..n].copy_from_slice(&src.bytes[..n]);
    }
    fn again<'a>(i: &In<'a>) -> In<'a> {
        In { dtype: i.dtype, dims: i.dims, strides: i.strides, bytes: i.bytes }
    }
    let ordered = [again(kc), again(vc), again(key), again(value), again(slots)];
    runtime::reference::run(&Op::KvCacheWrite, &ordered, outs)
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

/// aclnnFlashAttentionScore (BNSD) as its formula reads: each row of scores
/// `scale * (pse + q·kᵀ)` goes through `exp(x - max) / sum` in f64, so a NaN or +inf score
/// makes the row NaN, and so does a row whose scores are all -inf (0 / 0): the docs do not
/// say what the hardware's kernel writes for such a fully masked row (innerPrecise 2 only
/// "computes invalid rows" to avoid a loss of precision), so callers must not rely on it.
fn flash_attention(
    scale: f64,
    (heads, kv_heads): (usize, usize),
    causal: bool,
    ins: &[In],
    outs: &mut [Out],
) -> KernelResult {
    let ([q, k, v, pse @ ..], [mx, sm, o]) = (ins, outs) else {
        return if ins.is_empty() { Ok(()) } else { Err(KernelError::Internal("flash attention operands".into())) };
    };
    let (b, s, d) = (q.dims[0], q.dims[2], q.dims[3]);
    let (t, dv) = (k.dims[2], v.dims[3]);
    let group = heads / kv_heads.max(1);
    let (qv, kv, vv) = (load_f64(q)?, load_f64(k)?, load_f64(v)?);
    let pse = match pse.first() {
        Some(p) => Some((load_f64(p)?, p.dims[0], p.dims[2])),
        None => None,
    };
    let rows = b * heads * s;
    let (mut maxes, mut sums, mut out) =
        (vec![0.0; rows * FA_STAT_WIDTH], vec![0.0; rows * FA_STAT_WIDTH], vec![0.0; rows * dv]);
    let mut row = vec![0.0; t];
    for bi in 0..b {
        for h in 0..heads {
            let kvh = bi * kv_heads + h / group.max(1);
            for i in 0..s {
                let r = (bi * heads + h) * s + i;
                let qr = &qv[r * d..(r + 1) * d];
                for (j, x) in row.iter_mut().enumerate() {
                    let kr = &kv[(kvh * t + j) * d..(kvh * t + j + 1) * d];
                    let dot: f64 = qr.iter().zip(kr).map(|(a, c)| a * c).sum();
                    let bias = pse.as_ref().map_or(0.0, |(p, pb, ps)| {
                        let (pb_i, ps_i) = (if *pb == 1 { 0 } else { bi }, if *ps == 1 { 0 } else { i });
                        p[((pb_i * heads + h) * ps + ps_i) * t + j]
                    });
                    // rightDownCausal replaces the scores past the row's last key.
                    let past = causal && j as i64 > i as i64 + t as i64 - s as i64;
                    *x = if past { f64::NEG_INFINITY } else { scale * (bias + dot) };
                }
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for x in row.iter_mut() {
                    *x = (*x - m).exp();
                    sum += *x;
                }
                for c in 0..dv {
                    let acc: f64 = row.iter().enumerate().map(|(j, p)| p * vv[(kvh * t + j) * dv + c]).sum();
                    out[r * dv + c] = acc / sum;
                }
                maxes[r * FA_STAT_WIDTH..(r + 1) * FA_STAT_WIDTH].fill(m);
                sums[r * FA_STAT_WIDTH..(r + 1) * FA_STAT_WIDTH].fill(sum);
            }
        }
    }
    store_f64(mx, &maxes)?;
    store_f64(sm, &sums)?;
    store_f64(o, &out)
}

/// aclnnRmsNorm / aclnnAddRmsNorm: y by the runtime's reference RmsNorm (of the sum
/// rounded to the dtype, which xOut holds), rstd `1 / sqrt(mean(x²) + eps)` per row.
fn rms_norm(eps: f64, ins: &[In], outs: &mut [Out]) -> KernelResult {
    let (x, g) = match (ins, &mut *outs) {
        ([x, g], [_, _]) => (load_f64(x)?, load_f64(g)?),
        ([a, b, g], [_, _, sum]) => {
            let dt = sum.dtype;
            let v: Vec<f64> = load_f64(a)?
                .iter()
                .zip(load_f64(b)?)
                .map(|(p, q)| runtime::reference::norm::round_to(dt, p + q))
                .collect();
            store_f64(sum, &v)?;
            (v, load_f64(g)?)
        }
        _ => return Err(KernelError::Internal(format!("RmsNorm: {} inputs, {} outputs", ins.len(), outs.len()))),
    };
    let d = g.len();
    let y = runtime::reference::norm::rms_rows(&x, d, Some(&g), eps);
    let rstd: Vec<f64> = if d == 0 {
        Vec::new()
    } else {
        x.chunks(d).map(|r| 1.0 / (r.iter().map(|v| v * v).sum::<f64>() / d as f64 + eps).sqrt()).collect()
    };
    store_f64(&mut outs[0], &y)?;
    store_f64(&mut outs[1], &rstd)
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
