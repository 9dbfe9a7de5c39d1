//! The reference kernels: plain loops with f64 accumulation, on host memory. The ground
//! truth every other implementation is checked against (correctness over speed), and
//! the host tier of every backend: the CPU backend's reference tier, the Ascend
//! backend's host fallback and acl-emu all run these.
//!
//! Callers give operands that passed [`crate::LaunchArgs::validate`] (or [`crate::Op::infer`]):
//! inputs contiguous except for `Copy`, outputs contiguous.

pub mod math;
pub mod movement;
pub mod norm;
pub mod operands;
pub mod paged;
pub mod rope;

use crate::dtype::DType;
use crate::kernel::{KernelError, KernelResult};
use crate::op::{AttentionLayout, GeluApprox, Op};
use math::*;
use movement::*;
use operands::*;

pub use operands::{In, Out};

/// Runs `op` with plain loops.
pub fn run(op: &Op, ins: &[In], outs: &mut [Out]) -> KernelResult {
    let out_dims = outs[0].dims.to_vec();
    match op {
        Op::MatMul { trans_a, trans_b } => {
            let (a, b) = (load_f64(&ins[0])?, load_f64(&ins[1])?);
            let v = matmul(&a, ins[0].dims, *trans_a, &b, ins[1].dims, *trans_b, &out_dims);
            store_f64(&mut outs[0], &v)
        }
        Op::Gemm { trans_a, trans_b, alpha, beta } => gemm(ins, outs, &out_dims, *trans_a, *trans_b, *alpha, *beta),
        Op::Linear => linear(ins, outs),
        Op::LinearGelu => {
            // The sum rounded to f32 (as BiasGelu's is), then the erf GELU in f64.
            let v: Vec<f64> = linear_values(ins)?.into_iter().map(|y| gelu_erf_f64(y as f32 as f64)).collect();
            store_f64(&mut outs[0], &v)
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Pow => binary(op, ins, outs, &out_dims),
        Op::Equal => equal(&ins[0], &ins[1], &mut outs[0]),
        Op::Where => select(&ins[0], &ins[1], &ins[2], &mut outs[0]),
        Op::Concat { axis } => concat(ins, &mut outs[0], *axis),
        Op::Slice { starts, ends, axes, steps } => slice(&ins[0], &mut outs[0], starts, ends, axes, steps),
        Op::Expand { .. } => expand(&ins[0], &mut outs[0]),
        Op::Relu
        | Op::Gelu(_)
        | Op::Tanh
        | Op::Erf
        | Op::Exp
        | Op::Sqrt
        | Op::Neg
        | Op::Sigmoid
        | Op::Silu
        | Op::Scale { .. } => unary(op, ins, outs),
        Op::Softmax { axis } => softmax(ins, outs, *axis),
        Op::LayerNorm { eps } => {
            let x = load_f64(&ins[0])?;
            let v = layer_norm(&x, &load_f64(&ins[1])?, &load_f64(&ins[2])?, *eps as f64);
            store_f64(&mut outs[0], &v)
        }
        Op::AddLayerNorm { eps } => {
            let mut x = load_f64(&ins[0])?;
            for (a, r) in x.iter_mut().zip(load_f64(&ins[1])?) {
                // The sum is formed in f32, as the fused kernels of every tier form it.
                *a = (*a + r) as f32 as f64;
            }
            let v = layer_norm(&x, &load_f64(&ins[2])?, &load_f64(&ins[3])?, *eps as f64);
            store_f64(&mut outs[0], &v)
        }
        Op::BiasGelu(approx) => {
            let x = load_f64(&ins[0])?;
            let b = load_f64(&ins[1])?;
            let d = b.len().max(1);
            let g = if *approx == GeluApprox::Erf { gelu_erf_f64 } else { gelu_tanh_f64 };
            // `x + bias` is rounded to f32 before GELU, as every tier's fused kernel does.
            let v: Vec<f64> = x.iter().enumerate().map(|(i, &v)| g((v + b[i % d]) as f32 as f64)).collect();
            store_f64(&mut outs[0], &v)
        }
        Op::Permute { perm } => {
            let src = permute_sources(ins[0].dims, perm);
            move_elements(&ins[0], &mut outs[0], &src);
            Ok(())
        }
        Op::Reshape { .. } | Op::Copy => strided_copy(&ins[0], &mut outs[0]),
        Op::Gather { axis } => {
            let idx = resolve_indices(&ins[1], ins[0].dims[*axis])?;
            let src = gather_sources(ins[0].dims, *axis, &idx);
            move_elements(&ins[0], &mut outs[0], &src);
            Ok(())
        }
        Op::Cast { .. } => cast(&ins[0], &mut outs[0]),
        Op::ReduceSum { axes, .. } | Op::ReduceMean { axes, .. } => reduce(op, ins, outs, axes),
        Op::RmsNorm { eps } => norm::rms_norm(ins, outs, *eps),
        Op::AddRmsNorm { eps } => norm::add_rms_norm(ins, outs, *eps),
        Op::SwiGlu => norm::swiglu(ins, outs),
        Op::Attention { scale, layout, causal } => attention(ins, outs, *scale, *layout, *causal),
        Op::Rope { interleaved, layout } => rope::rope(ins, &mut outs[0], *interleaved, *layout),
        Op::KvCacheWrite => paged::kv_cache_write(ins, outs),
        Op::PagedAttention { scale } => paged::paged_attention(ins, &mut outs[0], *scale),
    }
}

/// `alpha · a @ b + beta · c`.
fn gemm(
    ins: &[In],
    outs: &mut [Out],
    out_dims: &[usize],
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
    beta: f32,
) -> KernelResult {
    let (a, b) = (load_f64(&ins[0])?, load_f64(&ins[1])?);
    let mut v = matmul(&a, ins[0].dims, trans_a, &b, ins[1].dims, trans_b, out_dims);
    for x in &mut v {
        *x *= alpha as f64;
    }
    // As ONNX's reference: `beta = 0` leaves `c` unread (a NaN in it stays out).
    if let Some(c) = ins.get(2).filter(|_| beta != 0.0) {
        let cv = load_f64(c)?;
        let offs = gather_offsets(out_dims, &broadcast_strides(c.dims, out_dims));
        for (x, o) in v.iter_mut().zip(offs) {
            *x += beta as f64 * cv[o];
        }
    }
    store_f64(&mut outs[0], &v)
}

/// `x @ weightᵀ + bias`.
fn linear(ins: &[In], outs: &mut [Out]) -> KernelResult {
    store_f64(&mut outs[0], &linear_values(ins)?)
}

/// `x · wᵀ + bias` in f64, row-major `[m, n]`.
fn linear_values(ins: &[In]) -> Result<Vec<f64>, KernelError> {
    let (x, w) = (load_f64(&ins[0])?, load_f64(&ins[1])?);
    let (n, k) = (ins[1].dims[0], ins[1].dims[1]);
    let m = numel(&ins[0].dims[..ins[0].dims.len() - 1]);
    let bias = match ins.get(2) {
        Some(b) => load_f64(b)?,
        None => vec![0.0; n],
    };
    let mut v = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = bias[j];
            for p in 0..k {
                acc += x[i * k + p] * w[j * k + p];
            }
            v[i * n + j] = acc;
        }
    }
    Ok(v)
}

/// Elementwise `Add`, `Sub`, `Mul`, `Div`, `Pow` with broadcasting.
fn binary(op: &Op, ins: &[In], outs: &mut [Out], out_dims: &[usize]) -> KernelResult {
    if ins[0].dtype.is_int() {
        // Exact integer arithmetic, wrapping in the dtype (f64 would round and saturate).
        return int_binary(op, &ins[0], &ins[1], &mut outs[0]);
    }
    let (a, b) = (load_f64(&ins[0])?, load_f64(&ins[1])?);
    let oa = gather_offsets(out_dims, &broadcast_strides(ins[0].dims, out_dims));
    let ob = gather_offsets(out_dims, &broadcast_strides(ins[1].dims, out_dims));
    let v: Vec<f64> = oa
        .iter()
        .zip(&ob)
        .map(|(&i, &j)| {
            let (x, y) = (a[i], b[j]);
            match op {
                Op::Add => x + y,
                Op::Sub => x - y,
                Op::Mul => x * y,
                // C `pow`: `pow(x, ±0) = 1` and `pow(1, y) = 1` even for NaN.
                Op::Pow => x.powf(y),
                _ => x / y,
            }
        })
        .collect();
    store_f64(&mut outs[0], &v)
}

/// Elementwise one-input ops (`Scale` included).
fn unary(op: &Op, ins: &[In], outs: &mut [Out]) -> KernelResult {
    let x = load_f64(&ins[0])?;
    let f: Box<dyn Fn(f64) -> f64> = match op {
        // ONNX `max(0, x)` with NaN propagating (`f64::max` would drop it).
        Op::Relu => Box::new(|v: f64| if v < 0.0 { 0.0 } else { v }),
        Op::Gelu(GeluApprox::Erf) => Box::new(gelu_erf_f64),
        Op::Gelu(GeluApprox::Tanh) => Box::new(gelu_tanh_f64),
        Op::Tanh => Box::new(f64::tanh),
        Op::Erf => Box::new(libm::erf),
        Op::Exp => Box::new(f64::exp),
        Op::Sqrt => Box::new(f64::sqrt),
        Op::Neg => Box::new(|v: f64| -v),
        Op::Sigmoid => Box::new(sigmoid_f64),
        Op::Silu => Box::new(silu_f64),
        Op::Scale { factor } => {
            let f = *factor as f64;
            Box::new(move |v: f64| v * f)
        }
        _ => return Err(KernelError::Internal("not a unary op".into())),
    };
    let v: Vec<f64> = x.into_iter().map(f).collect();
    store_f64(&mut outs[0], &v)
}

/// Softmax along `axis`.
fn softmax(ins: &[In], outs: &mut [Out], axis: isize) -> KernelResult {
    let ax = crate::shape::Shape::new(ins[0].dims.to_vec())
        .axis(axis)
        .ok_or_else(|| KernelError::Internal("axis out of range".into()))?;
    let mut x = load_f64(&ins[0])?;
    let (outer, n, inner) = split_axis(ins[0].dims, ax);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * n + j) * inner + i;
            let m = (0..n).map(|j| x[at(j)]).fold(f64::NEG_INFINITY, f64::max);
            let mut s = 0.0;
            for j in 0..n {
                let e = (x[at(j)] - m).exp();
                x[at(j)] = e;
                s += e;
            }
            for j in 0..n {
                x[at(j)] /= s;
            }
        }
    }
    store_f64(&mut outs[0], &x)
}

/// `ReduceSum` or `ReduceMean` over `axes`.
fn reduce(op: &Op, ins: &[In], outs: &mut [Out], axes: &[isize]) -> KernelResult {
    let shape = crate::shape::Shape::new(ins[0].dims.to_vec());
    let axes =
        crate::op::normalise_axes(&shape, axes).ok_or_else(|| KernelError::Internal("axes out of range".into()))?;
    let x = load_f64(&ins[0])?;
    // Output index: the input index with reduced axes dropped.
    let kept: Vec<usize> = (0..shape.rank()).filter(|a| !axes.contains(a)).collect();
    let kept_dims: Vec<usize> = kept.iter().map(|&a| shape.0[a]).collect();
    let ks = crate::shape::Shape::new(kept_dims).contiguous_strides();
    let mut acc = vec![0.0; outs[0].numel()];
    crate::shape::for_each_index(&shape.0, |lin, idx| {
        let o: usize = kept.iter().zip(&ks).map(|(&a, s)| idx[a] * s).sum();
        acc[o] += x[lin];
    });
    if matches!(op, Op::ReduceMean { .. }) {
        let cnt: usize = axes.iter().map(|&a| shape.0[a]).product();
        for v in &mut acc {
            *v /= cnt as f64;
        }
    }
    store_f64(&mut outs[0], &acc)
}

/// Scaled dot-product attention (f64 softmax per row), grouped-query when k and v hold
/// fewer heads than q; with `causal`, query `i` sees keys `0..causal_keys(i)` only.
fn attention(ins: &[In], outs: &mut [Out], scale: Option<f32>, layout: AttentionLayout, causal: bool) -> KernelResult {
    let (q, k, v) = (load_f64(&ins[0])?, load_f64(&ins[1])?, load_f64(&ins[2])?);
    let [bsz, h, s, d] = layout.bhsd(ins[0].dims);
    let ([_, hkv, t, _], [_, _, _, dv]) = (layout.bhsd(ins[1].dims), layout.bhsd(ins[2].dims));
    // Element offsets of (batch·heads + head, row) in each operand's layout; a query head
    // reads kv head `head / group`.
    let group = h.checked_div(hkv).unwrap_or(1);
    let row_at = |st: [usize; 4], bh: usize, i: usize| (bh / h) * st[0] + (bh % h) * st[1] + i * st[2];
    let kv_at = |st: [usize; 4], bh: usize, j: usize| (bh / h) * st[0] + (bh % h / group) * st[1] + j * st[2];
    let (sq, sk, sv) =
        (layout.strides([bsz, h, s, d]), layout.strides([bsz, hkv, t, d]), layout.strides([bsz, hkv, t, dv]));
    let so = layout.strides([bsz, h, s, dv]);
    let scale = scale.map_or(1.0 / (d as f64).sqrt(), |x| x as f64);
    let score_dims = [bsz, h, s, t];
    let mask = match ins.get(3) {
        Some(m) => Some((m.dtype, load_f64(m)?, gather_offsets(&score_dims, &broadcast_strides(m.dims, &score_dims)))),
        None => None,
    };
    let mut out = vec![0.0; bsz * h * s * dv];
    let mut row = vec![0.0; t];
    for bh in 0..bsz * h {
        for i in 0..s {
            // The keys this query sees: all, or those up to its place bottom-right aligned.
            let seen = if causal { causal_keys(i, s, t) } else { t };
            let row = &mut row[..seen];
            for (j, rj) in row.iter_mut().enumerate() {
                let mut acc = 0.0;
                let (qi, kj) = (row_at(sq, bh, i), kv_at(sk, bh, j));
                for p in 0..d {
                    acc += q[qi + p] * k[kj + p];
                }
                acc *= scale;
                if let Some((dt, m, offs)) = &mask {
                    let mv = m[offs[(bh * s + i) * t + j]];
                    // A u8 mask is additive too: 0 adds -inf (a NaN score stays NaN).
                    acc += if *dt == DType::U8 { if mv == 0.0 { f64::NEG_INFINITY } else { 0.0 } } else { mv };
                }
                *rj = acc;
            }
            let oi = row_at(so, bh, i);
            let o = &mut out[oi..oi + dv];
            let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if row.iter().any(|r| r.is_nan()) || mx == f64::INFINITY {
                // Softmax of a row with NaN, or with +inf (inf - inf), is NaN.
                o.fill(f64::NAN);
                continue;
            }
            if mx == f64::NEG_INFINITY {
                // Every key masked out (or none seen): the row attends to nothing and is 0.
                continue;
            }
            let mut sum = 0.0;
            for r in row.iter_mut() {
                *r = (*r - mx).exp();
                sum += *r;
            }
            for (c, oc) in o.iter_mut().enumerate() {
                let mut acc = 0.0;
                for (j, rj) in row.iter().enumerate() {
                    acc += rj * v[kv_at(sv, bh, j) + c];
                }
                *oc = acc / sum;
            }
        }
    }
    store_f64(&mut outs[0], &out)
}

/// How many keys query `i` of `s` sees in a causal attention over `t` keys: those
/// `j <= i + (t - s)` (aligned bottom-right), clamped to `0..=t`.
pub fn causal_keys(i: usize, s: usize, t: usize) -> usize {
    (i as i128 + t as i128 - s as i128 + 1).clamp(0, t as i128) as usize
}

fn layer_norm(x: &[f64], g: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let d = g.len();
    let mut out = vec![0.0; x.len()];
    if d == 0 {
        return out;
    }
    for (row, o) in x.chunks(d).zip(out.chunks_mut(d)) {
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for i in 0..d {
            o[i] = (row[i] - mean) * inv * g[i] + b[i];
        }
    }
    out
}

/// Batched `op(a) @ op(b)` with broadcast batch dims, f64 accumulation.
pub fn matmul(a: &[f64], ad: &[usize], ta: bool, b: &[f64], bd: &[usize], tb: bool, od: &[usize]) -> Vec<f64> {
    let r = od.len();
    let (m, n) = (od[r - 2], od[r - 1]);
    let (ar, ac) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let (br, bc) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    let k = if ta { ar } else { ac };
    let batch = &od[..r - 2];
    let a_batch: Vec<usize> = ad[..ad.len() - 2].to_vec();
    let b_batch: Vec<usize> = bd[..bd.len() - 2].to_vec();
    let sa = broadcast_strides(&a_batch, batch);
    let sb = broadcast_strides(&b_batch, batch);
    let oa = gather_offsets(batch, &sa);
    let ob = gather_offsets(batch, &sb);
    let mut out = vec![0.0; numel(od)];
    for (bi, (&pa, &pb)) in oa.iter().zip(&ob).enumerate() {
        let a0 = pa * ar * ac;
        let b0 = pb * br * bc;
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for p in 0..k {
                    let av = if ta { a[a0 + p * ac + i] } else { a[a0 + i * ac + p] };
                    let bv = if tb { b[b0 + j * bc + p] } else { b[b0 + p * bc + j] };
                    acc += av * bv;
                }
                out[bi * m * n + i * n + j] = acc;
            }
        }
    }
    out
}
