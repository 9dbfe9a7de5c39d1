//! Generic tier: portable code over `ndarray` (f32 compute for floating dtypes; f64 for
//! sums that must not overflow: reductions and LayerNorm's statistics), no explicit SIMD
//! and no threads.

use super::common::*;
use ndarray::{Array2, ArrayD, ArrayView2, Axis, IxDyn, Zip};
use runtime::{AttentionLayout, DType, GeluApprox, Op};

fn arr(x: &In) -> Result<ArrayD<f32>, KernelError> {
    let v = load_f32(x)?.into_owned();
    Ok(ArrayD::from_shape_vec(IxDyn(x.dims), v)?)
}

fn put(o: &mut Out, a: ArrayD<f32>) -> KResult {
    let a = a.as_standard_layout().into_owned();
    let s = a.as_slice().ok_or("non-contiguous result")?;
    store_f32(o, s)
}

fn mat(x: &ArrayD<f32>, batch_off: usize, r: usize, c: usize, t: bool) -> Result<Array2<f32>, KernelError> {
    let s = x.as_slice().ok_or("non-contiguous operand")?;
    let v = ArrayView2::from_shape((r, c), &s[batch_off..batch_off + r * c])?;
    Ok(if t { v.t().to_owned() } else { v.to_owned() })
}

fn gelu(x: f32, approx: GeluApprox) -> f32 {
    match approx {
        GeluApprox::Erf => gelu_erf_f32(x),
        GeluApprox::Tanh => gelu_tanh_f32(x),
    }
}

/// Mean and variance in f64 (a row of f32 values cannot overflow there: `[3e38, 3e38,
/// -3e38, 1]` normalises to finite values), then `(x - mean) / sqrt(var + eps)` in f64,
/// `* gamma + beta` in f32.
fn layer_norm(mut x: ArrayD<f32>, g: &ArrayD<f32>, b: &ArrayD<f32>, eps: f32) -> ArrayD<f32> {
    let last = Axis(x.ndim() - 1);
    let (Ok(g), Ok(b)) =
        (g.view().into_dimensionality::<ndarray::Ix1>(), b.view().into_dimensionality::<ndarray::Ix1>())
    else {
        return x;
    };
    for mut row in x.lanes_mut(last) {
        let wide = row.mapv(f64::from);
        let d = wide.len().max(1) as f64;
        let mean = wide.sum() / d;
        let var = wide.mapv(|v| (v - mean) * (v - mean)).sum() / d;
        let inv = 1.0 / (var + eps as f64).sqrt();
        Zip::from(&mut row).and(&wide).and(g).and(b).for_each(|v, &w, &g, &b| *v = ((w - mean) * inv) as f32 * g + b);
    }
    x
}

pub fn run(op: &Op, ins: &[In], outs: &mut [Out], _ctx: &Ctx) -> KResult {
    let od = outs[0].dims.to_vec();
    match op {
        Op::MatMul { trans_a, trans_b } => {
            let (a, b) = (arr(&ins[0])?, arr(&ins[1])?);
            let (ad, bd) = (ins[0].dims, ins[1].dims);
            let r = od.len();
            let (m, n) = (od[r - 2], od[r - 1]);
            let batch = &od[..r - 2];
            let oa = gather_offsets(batch, &broadcast_strides(&ad[..ad.len() - 2], batch));
            let ob = gather_offsets(batch, &broadcast_strides(&bd[..bd.len() - 2], batch));
            let (ar, ac) = (ad[ad.len() - 2], ad[ad.len() - 1]);
            let (br, bc) = (bd[bd.len() - 2], bd[bd.len() - 1]);
            let mut out = Vec::with_capacity(numel(&od));
            for (&pa, &pb) in oa.iter().zip(&ob) {
                let am = mat(&a, pa * ar * ac, ar, ac, *trans_a)?;
                let bm = mat(&b, pb * br * bc, br, bc, *trans_b)?;
                let c = am.dot(&bm);
                debug_assert_eq!(c.dim(), (m, n));
                out.extend(c.iter().copied());
            }
            store_f32(&mut outs[0], &out)
        }
        Op::Gemm { trans_a, trans_b, alpha, beta } => {
            let (a, b) = (arr(&ins[0])?, arr(&ins[1])?);
            let (ad, bd) = (ins[0].dims, ins[1].dims);
            let am = mat(&a, 0, ad[0], ad[1], *trans_a)?;
            let bm = mat(&b, 0, bd[0], bd[1], *trans_b)?;
            let mut c = am.dot(&bm) * *alpha;
            // `beta = 0` leaves `c` unread, as in ONNX's reference.
            if let Some(ci) = ins.get(2).filter(|_| *beta != 0.0) {
                let cv = arr(ci)?;
                let cb = cv.broadcast(IxDyn(&od)).ok_or("c does not broadcast")?;
                Zip::from(c.view_mut().into_dyn()).and(&cb).for_each(|x, &y| *x += *beta * y);
            }
            put(&mut outs[0], c.into_dyn())
        }
        Op::Linear | Op::LinearGelu => {
            let (x, w) = (arr(&ins[0])?, arr(&ins[1])?);
            let (n, k) = (ins[1].dims[0], ins[1].dims[1]);
            let m = numel(&ins[0].dims[..ins[0].dims.len() - 1]);
            let xm = mat(&x, 0, m, k, false)?;
            let wm = mat(&w, 0, n, k, true)?;
            let mut y = xm.dot(&wm);
            if let Some(b) = ins.get(2) {
                let bv = arr(b)?;
                y += &bv.view().into_dimensionality::<ndarray::Ix1>()?;
            }
            if matches!(op, Op::LinearGelu) {
                y.mapv_inplace(|v| gelu(v, GeluApprox::Erf));
            }
            store_f32(&mut outs[0], y.as_standard_layout().as_slice().ok_or("layout")?)
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            if ins[0].dtype.is_int() {
                return int_binary(op, &ins[0], &ins[1], &mut outs[0]);
            }
            let (a, b) = (arr(&ins[0])?, arr(&ins[1])?);
            let r = match op {
                Op::Add => &a + &b,
                Op::Sub => &a - &b,
                Op::Mul => &a * &b,
                _ => &a / &b,
            };
            put(&mut outs[0], r)
        }
        Op::Pow => {
            let (a, b) = (arr(&ins[0])?, arr(&ins[1])?);
            let dims = IxDyn(outs[0].dims);
            let (av, bv) = (
                a.broadcast(dims.clone()).ok_or("x does not broadcast")?,
                b.broadcast(dims).ok_or("y does not broadcast")?,
            );
            let r = Zip::from(&av).and(&bv).map_collect(|x, y| x.powf(*y));
            put(&mut outs[0], r)
        }
        Op::Relu
        | Op::Gelu(_)
        | Op::Tanh
        | Op::Erf
        | Op::Exp
        | Op::Sqrt
        | Op::Neg
        | Op::Sigmoid
        | Op::Silu
        | Op::Scale { .. } => {
            let x = arr(&ins[0])?;
            let y = match op {
                // NaN propagates (`f32::max` would turn it into 0).
                Op::Relu => x.mapv(|v| if v < 0.0 { 0.0 } else { v }),
                Op::Gelu(a) => x.mapv(|v| gelu(v, *a)),
                Op::Tanh => x.mapv(f32::tanh),
                Op::Erf => x.mapv(libm::erff),
                Op::Exp => x.mapv(f32::exp),
                Op::Sqrt => x.mapv(f32::sqrt),
                Op::Neg => x.mapv(|v| -v),
                Op::Sigmoid => x.mapv(sigmoid_f32),
                Op::Silu => x.mapv(silu_f32),
                Op::Scale { factor } => x * *factor,
                _ => return Err(KernelError::Internal("not a unary op".into())),
            };
            put(&mut outs[0], y)
        }
        Op::BiasGelu(a) => {
            let (x, b) = (arr(&ins[0])?, arr(&ins[1])?);
            let y = (&x + &b).mapv(|v| gelu(v, *a));
            put(&mut outs[0], y)
        }
        Op::Softmax { axis } => {
            let ax = runtime::Shape::new(ins[0].dims.to_vec()).axis(*axis).ok_or("axis out of range")?;
            let mut x = arr(&ins[0])?;
            for mut lane in x.lanes_mut(Axis(ax)) {
                let m = lane.fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                lane.mapv_inplace(|v| (v - m).exp());
                let s = lane.sum();
                lane.mapv_inplace(|v| v / s);
            }
            put(&mut outs[0], x)
        }
        Op::LayerNorm { eps } => {
            let y = layer_norm(arr(&ins[0])?, &arr(&ins[1])?, &arr(&ins[2])?, *eps);
            put(&mut outs[0], y)
        }
        Op::AddLayerNorm { eps } => {
            let x = arr(&ins[0])? + arr(&ins[1])?;
            let y = layer_norm(x, &arr(&ins[2])?, &arr(&ins[3])?, *eps);
            put(&mut outs[0], y)
        }
        Op::Permute { perm } => {
            // Data movement is exact for every dtype: permute element indices.
            let idx = ArrayD::from_shape_vec(IxDyn(ins[0].dims), (0..ins[0].numel()).collect::<Vec<usize>>())?;
            let p = idx.permuted_axes(IxDyn(perm));
            let src: Vec<usize> = p.iter().copied().collect();
            move_elements(&ins[0], &mut outs[0], &src);
            Ok(())
        }
        Op::Reshape { .. } | Op::Copy => strided_copy(&ins[0], &mut outs[0]),
        Op::Gather { axis } => {
            let n = ins[0].dims[*axis];
            let idx = resolve_indices(&ins[1], n)?;
            let pos = ArrayD::from_shape_vec(IxDyn(ins[0].dims), (0..ins[0].numel()).collect::<Vec<usize>>())?;
            let sel = pos.select(Axis(*axis), &idx);
            let src: Vec<usize> = sel.iter().copied().collect();
            move_elements(&ins[0], &mut outs[0], &src);
            Ok(())
        }
        Op::Cast { .. } => cast(&ins[0], &mut outs[0]),
        // Exact comparison, shared with the other tiers.
        Op::Equal => equal(&ins[0], &ins[1], &mut outs[0]),
        // Whole elements moved, shared with the other tiers.
        Op::Where => select(&ins[0], &ins[1], &ins[2], &mut outs[0]),
        Op::Concat { axis } => concat(ins, &mut outs[0], *axis),
        Op::Slice { starts, ends, axes, steps } => slice(&ins[0], &mut outs[0], starts, ends, axes, steps),
        Op::Expand { .. } => expand(&ins[0], &mut outs[0]),
        Op::ReduceSum { axes, keepdims: _ } | Op::ReduceMean { axes, keepdims: _ } => {
            let shape = runtime::Shape::new(ins[0].dims.to_vec());
            let mut axes = runtime::op::normalise_axes(&shape, axes).ok_or("axes out of range")?;
            // f64 accumulation: a sum of f32 values cannot overflow there, so the result
            // is the exact sum rounded once (`[3e38, 3e38, -3e38]` sums to 3e38).
            let mut x = arr(&ins[0])?.mapv(f64::from);
            axes.sort_unstable();
            let cnt: usize = axes.iter().map(|&a| ins[0].dims[a]).product();
            for &a in axes.iter().rev() {
                x = x.sum_axis(Axis(a));
            }
            if matches!(op, Op::ReduceMean { .. }) {
                // The mean over an empty axis is 0 / 0 = NaN, as in NumPy.
                x.mapv_inplace(|v| v / cnt as f64);
            }
            let v: Vec<f64> = x.iter().copied().collect();
            store_f64(&mut outs[0], &v)
        }
        Op::RmsNorm { .. } | Op::AddRmsNorm { .. } | Op::SwiGlu => super::norm::generic(op, ins, outs),
        Op::Rope { interleaved, layout } => super::rope::rope(ins, &mut outs[0], *interleaved, *layout, false),
        Op::Attention { scale, layout, causal } => {
            // Computed in [B, H, S, D]: tokens-first operands are transposed in and out.
            let swap = *layout == AttentionLayout::Bsnd;
            let bnsd = |x: ArrayD<f32>| {
                if swap { x.permuted_axes(vec![0, 2, 1, 3]).as_standard_layout().into_owned() } else { x }
            };
            let (q, k, v) = (bnsd(arr(&ins[0])?), bnsd(arr(&ins[1])?), bnsd(arr(&ins[2])?));
            let [bsz, h, s, d] = layout.bhsd(ins[0].dims);
            let ([_, hkv, t, _], [_, _, _, dv]) = (layout.bhsd(ins[1].dims), layout.bhsd(ins[2].dims));
            let scale = scale.unwrap_or(1.0 / (d as f32).sqrt());
            // Grouped-query: query head `hh` reads kv head `hh / group`.
            let group = h.checked_div(hkv).unwrap_or(1);
            let kv = |bh: usize| (bh / h) * hkv + (bh % h) / group;
            let sd = IxDyn(&[bsz, h, s, t]);
            let mask = match ins.get(3) {
                Some(m) => {
                    let mv = arr(m)?;
                    let mv = if m.dtype == DType::U8 {
                        mv.mapv(|x| if x == 0.0 { f32::NEG_INFINITY } else { 0.0 })
                    } else {
                        mv
                    };
                    Some(mv.broadcast(sd.clone()).ok_or("mask broadcast")?.to_owned())
                }
                None => None,
            };
            let mut out = Vec::with_capacity(bsz * h * s * dv);
            for bh in 0..bsz * h {
                let qm = mat(&q, bh * s * d, s, d, false)?;
                let km = mat(&k, kv(bh) * t * d, t, d, true)?;
                let vm = mat(&v, kv(bh) * t * dv, t, dv, false)?;
                let mut sc = qm.dot(&km) * scale;
                if let Some(m) = &mask {
                    let ms = m.as_slice().ok_or("layout")?;
                    let mv = ArrayView2::from_shape((s, t), &ms[bh * s * t..(bh + 1) * s * t])?;
                    sc += &mv;
                }
                let mut masked = Vec::new();
                for (i, mut full) in sc.rows_mut().into_iter().enumerate() {
                    // Causal: the keys past the row's own place are left out (weight 0).
                    let seen = if *causal { runtime::reference::causal_keys(i, s, t) } else { t };
                    full.slice_mut(ndarray::s![seen..]).fill(0.0);
                    let mut row = full.slice_mut(ndarray::s![..seen]);
                    let m = row.fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                    if row.iter().any(|x| x.is_nan()) || m == f32::INFINITY {
                        // NaN in, or inf - inf: the softmax is NaN.
                        row.fill(f32::NAN);
                        continue;
                    }
                    if m == f32::NEG_INFINITY {
                        // Every key masked out: the output row is 0 whatever V holds.
                        row.fill(0.0);
                        masked.push(i);
                        continue;
                    }
                    row.mapv_inplace(|x| (x - m).exp());
                    let sum = row.sum();
                    row.mapv_inplace(|x| x / sum);
                }
                let mut y = sc.dot(&vm);
                if *causal {
                    // A key a row does not see has weight 0 there, but `0 · inf` is NaN: a
                    // row with NaN is formed again from the keys it sees only.
                    for (i, mut yr) in y.rows_mut().into_iter().enumerate() {
                        let seen = runtime::reference::causal_keys(i, s, t);
                        if yr.iter().any(|x| x.is_nan()) {
                            let p = sc.row(i);
                            yr.assign(&p.slice(ndarray::s![..seen]).dot(&vm.slice(ndarray::s![..seen, ..])));
                        }
                    }
                }
                for i in masked {
                    y.row_mut(i).fill(0.0);
                }
                out.extend(y.iter().copied());
            }
            if swap {
                let o = ArrayD::from_shape_vec(IxDyn(&[bsz, h, s, dv]), out)?.permuted_axes(vec![0, 2, 1, 3]);
                return put(&mut outs[0], o);
            }
            store_f32(&mut outs[0], &out)
        }
        Op::KvCacheWrite => super::paged::kv_cache_write(ins, outs),
        Op::PagedAttention { scale } => {
            super::paged::paged_attention(ins, &mut outs[0], *scale, crate::features::Isa::Scalar, false)
        }
    }
}
