//! High-performance tier: f32 compute (f16/bf16 widened to f32), SIMD code paths
//! selected at run time from the detected CPU features, multi-threaded with rayon.

use super::blas;
use super::common::*;
use super::gemm_packed::{BMatrix, PackedBLayout, Sgemm, Strided};
use super::simd_math::{erf_approx, exp_approx, gelu_erf_approx, sigmoid_approx, softmax_onnx, tanh_approx};
use crate::features::Isa;
use rayon::prelude::*;
use runtime::{GeluApprox, Op};

/// Elements below which a kernel stays on the calling thread (thread hand-off costs more).
const PAR_MIN: usize = 1 << 15;

/// Defines `$name(isa, src, dst)` applying `|$x| $body` element-wise, compiled three
/// times (AVX-512, AVX2+FMA, baseline) and dispatched on the detected ISA. The body sees
/// the const `$fma`: true where the path has fused multiply-adds.
macro_rules! simd_map {
    ($name:ident, <$fma:ident> |$x:ident $(, $cap:ident : $capty:ty)*| $body:expr) => {
        #[allow(unused_variables)]
        pub fn $name(isa: Isa, src: &[f32], dst: &mut [f32] $(, $cap: $capty)*) {
            #[inline(always)]
            fn body<const $fma: bool>(src: &[f32], dst: &mut [f32] $(, $cap: $capty)*) {
                for (d, s) in dst.iter_mut().zip(src) {
                    let $x = *s;
                    *d = $body;
                }
            }
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                fn avx512(src: &[f32], dst: &mut [f32] $(, $cap: $capty)*) { body::<true>(src, dst $(, $cap)*) }
                #[target_feature(enable = "avx2,fma")]
                fn avx2(src: &[f32], dst: &mut [f32] $(, $cap: $capty)*) { body::<true>(src, dst $(, $cap)*) }
                match isa {
                    // SAFETY: `Isa::Avx512` is only chosen when AVX-512F and FMA were
                    // detected on this CPU at run time (features.rs).
                    Isa::Avx512 => return unsafe { avx512(src, dst $(, $cap)*) },
                    // SAFETY: `Isa::Avx2Fma` is only chosen when AVX2 and FMA were detected.
                    Isa::Avx2Fma => return unsafe { avx2(src, dst $(, $cap)*) },
                    Isa::Scalar => {}
                }
            }
            body::<false>(src, dst $(, $cap)*)
        }
    };
}

// `x < 0 ? 0 : x`: NaN propagates, as ONNX `max(0, x)` (`f32::max` would give 0).
simd_map!(relu_map, <F> |x| if x < 0.0 { 0.0 } else { x });
simd_map!(scale_map, <F> |x, f: f32| x * f);
simd_map!(sqrt_map, <F> |x| x.sqrt());
simd_map!(exp_map, <F> |x| exp_approx::<F>(x));
simd_map!(tanh_map, <F> |x| tanh_approx::<F>(x));
simd_map!(neg_map, <F> |x| -x);
simd_map!(sigmoid_map, <F> |x| sigmoid_approx::<F>(x));
simd_map!(silu_map, <F> |x| x * sigmoid_approx::<F>(x));
simd_map!(gelu_tanh_map, <F> |x| 0.5 * x * (1.0 + tanh_approx::<F>(0.797_884_6 * (x + 0.044715 * x * x * x))));
simd_map!(erf_map, <F> |x| erf_approx::<F>(x));
simd_map!(gelu_erf_map, <F> |x| gelu_erf_approx::<F>(x));

/// True when a kernel may fork: it runs inside a thread pool and the work is large.
fn parallel(n: usize) -> bool {
    n >= PAR_MIN && rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1
}

fn par_unary(isa: Isa, src: &[f32], dst: &mut [f32], f: impl Fn(Isa, &[f32], &mut [f32]) + Sync) {
    if !parallel(dst.len()) {
        f(isa, src, dst);
    } else {
        dst.par_chunks_mut(8192).zip(src.par_chunks(8192)).for_each(|(d, s)| f(isa, s, d));
    }
}

/// Applies `f` to each row (`row` elements) of `out`, in parallel when large.
fn par_rows(out: &mut [f32], row: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if row == 0 {
        return;
    }
    if !parallel(out.len()) {
        out.chunks_mut(row).enumerate().for_each(|(i, r)| f(i, r));
    } else {
        out.par_chunks_mut(row).enumerate().for_each(|(i, r)| f(i, r));
    }
}

pub fn run(op: &Op, ins: &[In], outs: &mut [Out], ctx: &Ctx) -> KResult {
    let isa = ctx.features.isa;
    let out_dims = outs[0].dims.to_vec();
    match op {
        Op::MatMul { trans_a, trans_b } => {
            let (a, b) = (load_f32(&ins[0])?, load_f32(&ins[1])?);
            let (ad, bd) = (ins[0].dims, ins[1].dims);
            with_f32_out(&mut outs[0], |c| {
                batched_matmul(isa, &a, ad, *trans_a, &b, bd, *trans_b, &out_dims, 1.0, c, ctx.threads)
            })
        }
        Op::Gemm { trans_a, trans_b, alpha, beta } => {
            let (a, b) = (load_f32(&ins[0])?, load_f32(&ins[1])?);
            let (ad, bd) = (ins[0].dims, ins[1].dims);
            let cin = match ins.get(2) {
                Some(c) if *beta != 0.0 => Some((load_f32(c)?.into_owned(), c.dims.to_vec())),
                _ => None,
            };
            if *alpha == 0.0 {
                // ONNX computes `0 * (A @ B)`, NaN where the product is not finite; the
                // GEMM would skip the product for alpha = 0.
                return gemm_alpha_zero(isa, &a, ad, *trans_a, &b, bd, *trans_b, cin, *beta, &mut outs[0], ctx.threads);
            }
            with_f32_out(&mut outs[0], |c| {
                let n = out_dims[1];
                let acc = if let Some((cv, cd)) = &cin {
                    fill_broadcast(c, cv, cd, &out_dims, *beta);
                    true
                } else {
                    false
                };
                let (m, k) = if *trans_a { (ad[1], ad[0]) } else { (ad[0], ad[1]) };
                let (rsa, csa) = if *trans_a { (1, ad[1]) } else { (ad[1], 1) };
                let (rsb, csb) = if *trans_b { (1, bd[1]) } else { (bd[1], 1) };
                let (a, b) =
                    (Strided { data: &a, rs: rsa, cs: csa }, BMatrix::Strided(Strided { data: &b, rs: rsb, cs: csb }));
                let beta = if acc { 1.0 } else { 0.0 };
                blas::sgemm(Sgemm {
                    isa,
                    m,
                    n,
                    k,
                    alpha: *alpha,
                    a,
                    b,
                    beta,
                    bias: None,
                    c,
                    ldc: n,
                    threads: ctx.threads,
                })
            })
        }
        Op::Linear => {
            // A compiled graph's `int8` precision: the weight quantised at compile time.
            if let Some(w) = ctx.prepacked.as_ref().and_then(|p| p.0.downcast_ref::<super::gemm_i8::PackedI8>()) {
                return super::gemm_i8::linear_node(ins, outs, ctx, w);
            }
            if ins[1].dtype == runtime::DType::F16 {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| {
                    log::warn!(
                        "precision f16 on the CPU: fp16 weights are widened to f32 for each product \
                         (no fp16 arithmetic on this backend); half the weight memory, slower than f32"
                    )
                });
            }
            // At most `gemv::MAX_M` rows (a decode step): the weight streamed once.
            if let Some(r) = super::gemv::linear_f32(ins, outs, ctx) {
                return r;
            }
            if let Some(r) = linear_half(ins, outs, ctx) {
                return r;
            }
            let (x, w) = (load_f32(&ins[0])?, load_f32(&ins[1])?);
            let (n, k) = (ins[1].dims[0], ins[1].dims[1]);
            let m = numel(&ins[0].dims[..ins[0].dims.len() - 1]);
            // A compiled graph's weight may be stored packed (see `CpuBackend::prepack`).
            let packed = ctx.prepacked.as_ref().and_then(|p| p.0.downcast_ref::<PackedBLayout>());
            if let Some(layout) = packed {
                if layout.k != k || layout.n != n || !layout.is_for(isa) || w.len() < layout.len() {
                    return Err(KernelError::Internal(format!(
                        "packed weight {layout:?} does not fit [{n}, {k}] on this CPU"
                    )));
                }
                let bias = match ins.get(2) {
                    Some(b) => Some(load_f32(b)?),
                    None => None,
                };
                return with_f32_out(&mut outs[0], |c| {
                    let (a, b) = (Strided { data: &x, rs: k, cs: 1 }, BMatrix::Packed { layout, data: &w });
                    let bias = bias.as_deref();
                    blas::sgemm(Sgemm {
                        isa,
                        m,
                        n,
                        k,
                        alpha: 1.0,
                        a,
                        b,
                        beta: 0.0,
                        bias,
                        c,
                        ldc: n,
                        threads: ctx.threads,
                    })
                });
            }
            let bias = match ins.get(2) {
                Some(b) => Some(load_f32(b)?.into_owned()),
                None => None,
            };
            with_f32_out(&mut outs[0], |c| {
                if let Some(b) = &bias {
                    par_rows(c, n, |_, r| r.copy_from_slice(b));
                }
                let (a, b) = (Strided { data: &x, rs: k, cs: 1 }, BMatrix::Strided(Strided { data: &w, rs: 1, cs: k }));
                let beta = if bias.is_some() { 1.0 } else { 0.0 };
                blas::sgemm(Sgemm { isa, m, n, k, alpha: 1.0, a, b, beta, bias: None, c, ldc: n, threads: ctx.threads })
            })
        }
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            if ins[0].dtype.is_int() {
                return int_binary(op, &ins[0], &ins[1], &mut outs[0]);
            }
            let (a, b) = (load_f32(&ins[0])?, load_f32(&ins[1])?);
            let (ad, bd) = (ins[0].dims, ins[1].dims);
            // One monomorphised loop per op, so each vectorises.
            with_f32_out(&mut outs[0], |o| {
                match op {
                    Op::Add => binary_f32(&a, ad, &b, bd, o, &out_dims, |x, y| x + y),
                    Op::Sub => binary_f32(&a, ad, &b, bd, o, &out_dims, |x, y| x - y),
                    Op::Mul => binary_f32(&a, ad, &b, bd, o, &out_dims, |x, y| x * y),
                    _ => binary_f32(&a, ad, &b, bd, o, &out_dims, |x, y| x / y),
                }
                Ok(())
            })
        }
        Op::Pow => {
            let (a, b) = (load_f32(&ins[0])?, load_f32(&ins[1])?);
            let (ad, bd) = (ins[0].dims, ins[1].dims);
            with_f32_out(&mut outs[0], |o| {
                binary_f32(&a, ad, &b, bd, o, &out_dims, f32::powf);
                Ok(())
            })
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
            let x = load_f32(&ins[0])?;
            with_f32_out(&mut outs[0], |o| {
                match op {
                    Op::Relu => par_unary(isa, &x, o, relu_map),
                    Op::Scale { factor } => par_unary(isa, &x, o, |i, s, d| scale_map(i, s, d, *factor)),
                    Op::Sqrt => par_unary(isa, &x, o, sqrt_map),
                    Op::Exp => par_unary(isa, &x, o, exp_map),
                    Op::Tanh => par_unary(isa, &x, o, tanh_map),
                    Op::Neg => par_unary(isa, &x, o, neg_map),
                    Op::Sigmoid => par_unary(isa, &x, o, sigmoid_map),
                    Op::Silu => par_unary(isa, &x, o, silu_map),
                    Op::Erf => par_unary(isa, &x, o, erf_map),
                    Op::Gelu(GeluApprox::Erf) => par_unary(isa, &x, o, gelu_erf_map),
                    Op::Gelu(GeluApprox::Tanh) => par_unary(isa, &x, o, gelu_tanh_map),
                    _ => {}
                }
                Ok(())
            })
        }
        Op::LinearGelu => linear_gelu(ins, outs, ctx),
        Op::BiasGelu(approx) => {
            let (x, b) = (load_f32(&ins[0])?, load_f32(&ins[1])?);
            let d = b.len();
            with_f32_out(&mut outs[0], |o| {
                par_rows(o, d, |r, row| {
                    // x + bias into a stack chunk, GELU from there into the row: no allocation.
                    const CHUNK: usize = 512;
                    let mut tmp = [0f32; CHUNK];
                    let src = &x[r * d..(r + 1) * d];
                    for ((dst, s), bb) in row.chunks_mut(CHUNK).zip(src.chunks(CHUNK)).zip(b.chunks(CHUNK)) {
                        let t = &mut tmp[..dst.len()];
                        for ((y, &v), &c) in t.iter_mut().zip(s).zip(bb) {
                            *y = v + c;
                        }
                        match approx {
                            GeluApprox::Erf => gelu_erf_map(isa, t, dst),
                            GeluApprox::Tanh => gelu_tanh_map(isa, t, dst),
                        }
                    }
                });
                Ok(())
            })
        }
        Op::Softmax { axis } => {
            let ax = runtime::Shape::new(ins[0].dims.to_vec()).axis(*axis).ok_or("axis out of range")?;
            let x = load_f32(&ins[0])?;
            let (outer, n, inner) = split_axis(ins[0].dims, ax);
            with_f32_out(&mut outs[0], |o| {
                if inner == 1 {
                    par_rows(o, n, |r, row| softmax_row(isa, &x[r * n..(r + 1) * n], row));
                } else {
                    // Strided softmax: gather each lane, normalise, scatter.
                    let _ = outer;
                    par_rows(o, n * inner, |blk, out_blk| {
                        let src = &x[blk * n * inner..(blk + 1) * n * inner];
                        let mut lane = vec![0f32; n];
                        let mut res = vec![0f32; n];
                        for i in 0..inner {
                            for j in 0..n {
                                lane[j] = src[j * inner + i];
                            }
                            softmax_row(isa, &lane, &mut res);
                            for j in 0..n {
                                out_blk[j * inner + i] = res[j];
                            }
                        }
                    });
                }
                Ok(())
            })
        }
        Op::LayerNorm { eps } => {
            let (x, g, b) = (load_f32(&ins[0])?, load_f32(&ins[1])?, load_f32(&ins[2])?);
            let d = g.len();
            with_f32_out(&mut outs[0], |o| {
                par_rows(o, d, |r, row| layer_norm_row(isa, &x[r * d..(r + 1) * d], None, &g, &b, *eps, row));
                Ok(())
            })
        }
        Op::AddLayerNorm { eps } => {
            let (x, res) = (load_f32(&ins[0])?, load_f32(&ins[1])?);
            let (g, b) = (load_f32(&ins[2])?, load_f32(&ins[3])?);
            let d = g.len();
            with_f32_out(&mut outs[0], |o| {
                par_rows(o, d, |r, row| {
                    layer_norm_row(isa, &x[r * d..(r + 1) * d], Some(&res[r * d..(r + 1) * d]), &g, &b, *eps, row)
                });
                Ok(())
            })
        }
        Op::Permute { perm } => permute(&ins[0], &mut outs[0], perm),
        Op::Reshape { .. } | Op::Copy => strided_copy(&ins[0], &mut outs[0]),
        Op::Gather { axis } => {
            let idx = resolve_indices(&ins[1], ins[0].dims[*axis])?;
            let (_, _, inner) = split_axis(ins[0].dims, *axis);
            let es = ins[0].dtype.size();
            if *axis == 0 {
                // Row gather (embedding lookup): whole rows at a time.
                let rb = inner * es;
                for (i, &r) in idx.iter().enumerate() {
                    outs[0].bytes[i * rb..(i + 1) * rb].copy_from_slice(&ins[0].bytes[r * rb..(r + 1) * rb]);
                }
                return Ok(());
            }
            let src = gather_sources(ins[0].dims, *axis, &idx);
            move_elements(&ins[0], &mut outs[0], &src);
            Ok(())
        }
        Op::Cast { .. } => cast(&ins[0], &mut outs[0]),
        // Exact comparison, shared with the other tiers (memory-bound: no SIMD form).
        Op::Equal => equal(&ins[0], &ins[1], &mut outs[0]),
        // Whole elements moved, shared with the other tiers.
        Op::Where => select(&ins[0], &ins[1], &ins[2], &mut outs[0]),
        Op::Concat { axis } => concat(ins, &mut outs[0], *axis),
        Op::Slice { starts, ends, axes, steps } => slice_runs(&ins[0], &mut outs[0], starts, ends, axes, steps),
        Op::Expand { .. } => expand(&ins[0], &mut outs[0]),
        Op::ReduceSum { axes, .. } | Op::ReduceMean { axes, .. } => {
            let shape = runtime::Shape::new(ins[0].dims.to_vec());
            let axes = runtime::op::normalise_axes(&shape, axes).ok_or("axes out of range")?;
            let x = load_f32(&ins[0])?;
            let mean = matches!(op, Op::ReduceMean { .. });
            // Fast path: reducing a trailing block of axes = row sums.
            let r = shape.rank();
            let trailing = axes.iter().enumerate().all(|(i, &a)| a == r - axes.len() + i);
            with_f32_out(&mut outs[0], |o| {
                if trailing {
                    let row = numel(&shape.0[r - axes.len()..]);
                    let cnt = row.max(1) as f64;
                    if row == 0 {
                        o.fill(if mean { f32::NAN } else { 0.0 });
                        return Ok(());
                    }
                    // f64 sums, divided before rounding: the mean of [3e38, 3e38] is 3e38.
                    let sums: Vec<f32> = x
                        .chunks(row)
                        .map(|c| {
                            let s = c.iter().map(|&v| v as f64).sum::<f64>();
                            (if mean { s / cnt } else { s }) as f32
                        })
                        .collect();
                    o.copy_from_slice(&sums);
                } else {
                    let kept: Vec<usize> = (0..r).filter(|a| !axes.contains(a)).collect();
                    let ks =
                        runtime::Shape::new(kept.iter().map(|&a| shape.0[a]).collect::<Vec<_>>()).contiguous_strides();
                    let mut acc = vec![0f64; o.len()];
                    runtime::shape::for_each_index(&shape.0, |lin, idx| {
                        let oi: usize = kept.iter().zip(&ks).map(|(&a, s)| idx[a] * s).sum();
                        acc[oi] += x[lin] as f64;
                    });
                    let cnt: usize = axes.iter().map(|&a| shape.0[a]).product();
                    for (d, s) in o.iter_mut().zip(acc) {
                        *d = if mean { (s / cnt as f64) as f32 } else { s as f32 };
                    }
                }
                Ok(())
            })
        }
        Op::RmsNorm { .. } | Op::AddRmsNorm { .. } | Op::SwiGlu => super::norm::fast(op, ins, outs, isa),
        Op::Attention { scale, layout, causal } => {
            super::attention::attention(ins, &mut outs[0], *scale, *layout, *causal, ctx)
        }
        Op::Rope { interleaved, layout } => {
            super::rope::rope(ins, &mut outs[0], *interleaved, *layout, ctx.threads > 1)
        }
        Op::KvCacheWrite => super::paged::kv_cache_write(ins, outs),
        Op::PagedAttention { scale } => super::paged::paged_attention(ins, &mut outs[0], *scale, isa, ctx.threads != 1),
    }
}

/// ONNX Softmax of one row: a row with NaN, +inf or only -inf is NaN throughout.
fn softmax_row(isa: Isa, x: &[f32], out: &mut [f32]) {
    out.copy_from_slice(x);
    softmax_onnx(isa, out);
}

/// Above this, `x - mean` of a row might overflow f32 or `1 / std` be subnormal, so the
/// row is normalised in f64.
const LN_F32_LIMIT: f64 = 1e36;

/// `out = LayerNorm(x (+ res))` of one row, compiled per ISA (AVX-512, AVX2+FMA, baseline)
/// and dispatched on `isa`.
fn layer_norm_row(isa: Isa, x: &[f32], res: Option<&[f32]>, g: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        type Row<'a> = (&'a [f32], Option<&'a [f32]>, &'a [f32], &'a [f32]);
        #[target_feature(enable = "avx512f,avx2,fma")]
        fn avx512((x, res, g, b): Row<'_>, eps: f32, out: &mut [f32]) {
            layer_norm_body(x, res, g, b, eps, out)
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2((x, res, g, b): Row<'_>, eps: f32, out: &mut [f32]) {
            layer_norm_body(x, res, g, b, eps, out)
        }
        match isa {
            // SAFETY: `Isa::Avx512` is only chosen when AVX-512F and FMA were detected on
            // this CPU at run time (features.rs).
            Isa::Avx512 => return unsafe { avx512((x, res, g, b), eps, out) },
            // SAFETY: `Isa::Avx2Fma` is only chosen when AVX2 and FMA were detected.
            Isa::Avx2Fma => return unsafe { avx2((x, res, g, b), eps, out) },
            Isa::Scalar => {}
        }
    }
    layer_norm_body(x, res, g, b, eps, out)
}

#[inline(always)]
fn layer_norm_body(x: &[f32], res: Option<&[f32]>, g: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    // Every operand cut to the row's length up front: the loops below then run without
    // bounds checks and vectorise (indexed, they compiled to a vector and a scalar copy
    // behind length tests, and a fifth of their time was in the scalar one).
    let d = x.len();
    let (out, g, b) = (&mut out[..d], &g[..d], &b[..d]);
    match res {
        Some(r) => {
            for ((o, &xi), &ri) in out.iter_mut().zip(x).zip(&r[..d]) {
                *o = xi + ri;
            }
        }
        None => out.copy_from_slice(x),
    }
    let mean = sum_f64(out, |v| v) / d as f64;
    let var = sum_f64(out, |v| (v - mean) * (v - mean)) / d as f64;
    let inv = 1.0 / (var + eps as f64).sqrt();
    // Every |x| is at most |mean| + sqrt(d var); false for NaN and inf too.
    if mean.abs() + (var * d as f64).sqrt() < LN_F32_LIMIT {
        // The mean as f32 plus a correction: `x - mean` stays accurate when |mean| >> std.
        let (hi, inv32) = (mean as f32, inv as f32);
        let lo = (mean - hi as f64) as f32;
        for ((o, &gi), &bi) in out.iter_mut().zip(g).zip(b) {
            *o = ((*o - hi) - lo) * inv32 * gi + bi;
        }
    } else {
        for ((o, &gi), &bi) in out.iter_mut().zip(g).zip(b) {
            *o = ((*o as f64 - mean) * inv) as f32 * gi + bi;
        }
    }
}

/// `sum f(x as f64)` over `x` in sixteen independent f64 lanes (a single running sum is a
/// dependency chain that does not vectorise).
#[inline(always)]
fn sum_f64(x: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    // Sixteen lanes: two AVX-512 (four AVX2) registers of independent sums, so that the
    // adds do not wait on one another.
    const L: usize = 16;
    let mut acc = [0f64; L];
    let mut chunks = x.chunks_exact(L);
    for c in &mut chunks {
        for l in 0..L {
            acc[l] += f(c[l] as f64);
        }
    }
    chunks.remainder().iter().map(|&v| f(v as f64)).sum::<f64>() + acc.iter().sum::<f64>()
}

/// Gemm with `alpha = 0`: `0 * (A @ B) + beta * C`, so a non-finite product gives NaN.
#[allow(clippy::too_many_arguments)]
fn gemm_alpha_zero(
    isa: Isa,
    a: &[f32],
    ad: &[usize],
    ta: bool,
    b: &[f32],
    bd: &[usize],
    tb: bool,
    cin: Option<(Vec<f32>, Vec<usize>)>,
    beta: f32,
    o: &mut Out,
    threads: usize,
) -> KResult {
    let od = o.dims.to_vec();
    with_f32_out(o, |c| {
        batched_matmul(isa, a, ad, ta, b, bd, tb, &od, 1.0, c, threads)?;
        c.iter_mut().for_each(|v| *v *= 0.0);
        if let Some((cv, cd)) = &cin {
            let offs = gather_offsets(&od, &broadcast_strides(cd, &od));
            for (d, off) in c.iter_mut().zip(offs) {
                *d += beta * cv[off];
            }
        }
        Ok(())
    })
}

/// `c[i] = beta * src broadcast to out_dims`.
fn fill_broadcast(c: &mut [f32], src: &[f32], sd: &[usize], od: &[usize], beta: f32) {
    let offs = gather_offsets(od, &broadcast_strides(sd, od));
    for (d, o) in c.iter_mut().zip(offs) {
        *d = beta * src[o];
    }
}

/// Element-wise binary op with NumPy broadcasting and fast paths for equal shapes,
/// a scalar operand and a row vector broadcast over the last axis.
fn binary_f32(
    a: &[f32],
    ad: &[usize],
    b: &[f32],
    bd: &[usize],
    o: &mut [f32],
    od: &[usize],
    f: impl Fn(f32, f32) -> f32 + Sync,
) {
    let n = o.len();
    if n == 0 {
        return;
    }
    let last = *od.last().unwrap_or(&1);
    if a.len() == n && b.len() == n {
        let go = |o: &mut [f32], a: &[f32], b: &[f32]| {
            for ((d, &x), &y) in o.iter_mut().zip(a).zip(b) {
                *d = f(x, y);
            }
        };
        if !parallel(n) {
            go(o, a, b);
        } else {
            o.par_chunks_mut(8192).zip(a.par_chunks(8192).zip(b.par_chunks(8192))).for_each(|(o, (a, b))| go(o, a, b));
        }
    } else if b.len() == 1 && a.len() == n {
        let y = b[0];
        par_rows(o, last.max(1), |r, row| {
            let l = row.len();
            for (d, &x) in row.iter_mut().zip(&a[r * l..r * l + l]) {
                *d = f(x, y);
            }
        });
    } else if a.len() == n && b.len() == last && bd.last() == Some(&last) {
        par_rows(o, last, |r, row| {
            for ((d, &x), &y) in row.iter_mut().zip(&a[r * last..(r + 1) * last]).zip(b) {
                *d = f(x, y);
            }
        });
    } else {
        let oa = gather_offsets(od, &broadcast_strides(ad, od));
        let ob = gather_offsets(od, &broadcast_strides(bd, od));
        for ((d, i), j) in o.iter_mut().zip(oa).zip(ob) {
            *d = f(a[i], b[j]);
        }
    }
}

/// Batched matrix product with broadcast batch dims into the contiguous `c`, on the
/// GEMM of the path `isa`.
#[allow(clippy::too_many_arguments)]
pub fn batched_matmul(
    isa: Isa,
    a: &[f32],
    ad: &[usize],
    ta: bool,
    b: &[f32],
    bd: &[usize],
    tb: bool,
    od: &[usize],
    alpha: f32,
    c: &mut [f32],
    threads: usize,
) -> KResult {
    let r = od.len();
    let (m, n) = (od[r - 2], od[r - 1]);
    let (ar, ac) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let (br, bc) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    let k = if ta { ar } else { ac };
    let batch = &od[..r - 2];
    let oa = gather_offsets(batch, &broadcast_strides(&ad[..ad.len() - 2], batch));
    let ob = gather_offsets(batch, &broadcast_strides(&bd[..bd.len() - 2], batch));
    let (rsa, csa) = if ta { (1, ac) } else { (ac, 1) };
    let (rsb, csb) = if tb { (1, bc) } else { (bc, 1) };
    let nb = oa.len();
    if m * n == 0 {
        return Ok(());
    }
    let one = |bi: usize, cblk: &mut [f32], threads: usize| {
        let a0 = oa[bi] * ar * ac;
        let b0 = ob[bi] * br * bc;
        let sa = Strided { data: &a[a0..a0 + ar * ac], rs: rsa, cs: csa };
        let sb = BMatrix::Strided(Strided { data: &b[b0..b0 + br * bc], rs: rsb, cs: csb });
        blas::sgemm(Sgemm { isa, m, n, k, alpha, a: sa, b: sb, beta: 0.0, bias: None, c: cblk, ldc: n, threads })
    };
    if nb > 1 && threads > 1 && m * n * k < 256 * 256 * 256 {
        // Many small products: one per thread.
        c.par_chunks_mut(m * n).enumerate().try_for_each(|(bi, cb)| one(bi, cb, 1))
    } else {
        c.chunks_mut(m * n).enumerate().try_for_each(|(bi, cb)| one(bi, cb, threads))
    }
}

/// Linear with a row-major f16 or bf16 weight ([`super::linear_widened`]: widened a block
/// of columns at a time, never whole); `None` for any other weight, or one the graph
/// prepacked.
fn linear_half(ins: &[In], outs: &mut [Out], ctx: &Ctx) -> Option<KResult> {
    use super::linear_widened::{HalfWeight, linear};
    if ctx.prepacked.is_some() || ins[1].dims.len() != 2 {
        return None;
    }
    let (n, k) = (ins[1].dims[0], ins[1].dims[1]);
    let len = n.checked_mul(k)?.checked_mul(2)?;
    let bytes = ins[1].bytes.get(..len)?;
    let w = match ins[1].dtype {
        runtime::DType::F16 => HalfWeight::F16(bytemuck::try_cast_slice(bytes).ok()?),
        runtime::DType::BF16 => HalfWeight::Bf16(bytemuck::try_cast_slice(bytes).ok()?),
        _ => return None,
    };
    let m = numel(&ins[0].dims[..ins[0].dims.len().checked_sub(1)?]);
    let mut run = || -> KResult {
        let x = load_f32(&ins[0])?;
        let bias = match ins.get(2) {
            Some(b) => Some(load_f32(b)?),
            None => None,
        };
        let isa = ctx.features.isa;
        with_f32_out(&mut outs[0], |c| linear(isa, &x, w, bias.as_deref(), (m, n, k), c, ctx.threads))
    };
    Some(run())
}

/// LinearGelu with an f32 (or f16, or int8-prepared) weight: the fast Linear with its
/// bias, then the erf GELU over each row of the f32 result in place (the arithmetic of
/// BiasGelu's fast kernel). A half-precision result runs the generic tier, which keeps the
/// sum in f32 before GELU.
fn linear_gelu(ins: &[In], outs: &mut [Out], ctx: &Ctx) -> KResult {
    if outs[0].dtype != runtime::DType::F32 {
        return super::generic::run(&Op::LinearGelu, ins, outs, ctx);
    }
    run(&Op::Linear, ins, outs, ctx)?;
    let n = ins[1].dims[0];
    let o = outs[0].f32s_mut().ok_or_else(|| KernelError::Internal("LinearGelu: f32 output expected".into()))?;
    gelu_rows_in_place(ctx.features.isa, o, n);
    Ok(())
}

/// The erf GELU of every element of `o` (rows of `n`), in place, through a stack chunk.
fn gelu_rows_in_place(isa: Isa, o: &mut [f32], n: usize) {
    par_rows(o, n, |_, row| {
        const CHUNK: usize = 512;
        let mut tmp = [0f32; CHUNK];
        for dst in row.chunks_mut(CHUNK) {
            let t = &mut tmp[..dst.len()];
            t.copy_from_slice(dst);
            gelu_erf_map(isa, t, dst);
        }
    });
}

/// Linear with a bf16 weight on AVX-512-BF16 or AMX (see `gemm_bf16`): `x` rounded to
/// bf16, products accumulated in f32, bias added in f32 in the product's epilogue, and
/// for LinearGelu the erf GELU applied over the finished rows.
pub fn linear_bf16(op: &Op, ins: &[In], outs: &mut [Out], ctx: &Ctx) -> KResult {
    let gelu = matches!(op, Op::LinearGelu);
    // At most `gemv::MAX_M` rows (a decode step): the weight streamed once, never packed per call.
    if let Some(r) = super::gemv::linear_bf16(ins, outs, ctx) {
        r?;
        if gelu {
            let n = ins[1].dims[0];
            let o =
                outs[0].f32s_mut().ok_or_else(|| KernelError::Internal("LinearGelu: f32 output expected".into()))?;
            gelu_rows_in_place(ctx.features.isa, o, n);
        }
        return Ok(());
    }
    linear_bf16_gelu_in(ins, outs, ctx, gelu, false)
}

/// [`linear_bf16`] past its decode-step path; `gelu`: LinearGelu's GELU, in the product's
/// epilogue per finished block where `in_blocks` (measured slower on AMX, see the
/// `fused_gelu_timing` test), else over the finished rows.
fn linear_bf16_gelu_in(ins: &[In], outs: &mut [Out], ctx: &Ctx, gelu: bool, in_blocks: bool) -> KResult {
    let x = load_f32(&ins[0])?;
    let (n, k) = (ins[1].dims[0], ins[1].dims[1]);
    let m = numel(&ins[0].dims[..ins[0].dims.len() - 1]);
    let pre = ctx.prepacked.as_ref();
    let owned;
    let packed = match pre.and_then(|p| p.0.downcast_ref::<super::gemm_bf16::PackedWeight<'static>>()) {
        Some(p) if p.n == n && p.k == k => p,
        // Stored packed in place of the weight (see `CpuBackend::prepack`).
        _ if pre.and_then(|p| p.0.downcast_ref::<super::gemm_bf16::PackedInPlace>())
            == Some(&super::gemm_bf16::PackedInPlace { n, k }) =>
        {
            owned = super::gemm_bf16::PackedWeight::view(ins[1].bytes, n, k)?;
            &owned
        }
        _ => {
            let w: &[half::bf16] = bytemuck::try_cast_slice(&ins[1].bytes[..n * k * 2])
                .map_err(|e| KernelError::misaligned("bf16 weight", e))?;
            owned = super::gemm_bf16::PackedWeight::pack(w, n, k)?;
            &owned
        }
    };
    let bias = match ins.get(2) {
        Some(b) => Some(load_f32(b)?),
        None => None,
    };
    // The bias is added in the product's epilogue (on AMX per block while it is in L1),
    // not copied into the output first and read back.
    let in_blocks = gelu && in_blocks;
    let ep = super::gemm_bf16::Epilogue { bias: bias.as_deref(), gelu: in_blocks, ..Default::default() };
    with_f32_out(&mut outs[0], |c| {
        super::gemm_bf16::gemm_with(ctx.features, m, &x, packed, c, ep, ctx.threads)?;
        if gelu && !in_blocks {
            gelu_rows_in_place(ctx.features.isa, &mut c[..m * n], n);
        }
        Ok(())
    })
}

/// Permute that moves whole rows when the last axis stays last (the attention head
/// split/merge), in parallel for large tensors; element by element otherwise.
fn permute(x: &In, o: &mut Out, perm: &[usize]) -> KResult {
    let r = perm.len();
    let es = x.dtype.size();
    if r == 0 || x.numel() == 0 {
        let n = x.numel() * es;
        o.bytes[..n].copy_from_slice(&x.bytes[..n]);
        return Ok(());
    }
    if perm[r - 1] != r - 1 {
        let src = permute_sources(x.dims, perm);
        move_elements(x, o, &src);
        return Ok(());
    }
    let row = x.dims[r - 1] * es;
    let outer_in: Vec<usize> = x.dims[..r - 1].to_vec();
    let in_strides = runtime::Shape::new(outer_in.clone()).contiguous_strides();
    let out_dims: Vec<usize> = perm[..r - 1].iter().map(|&p| outer_in[p]).collect();
    let src_strides: Vec<usize> = perm[..r - 1].iter().map(|&p| in_strides[p]).collect();
    let rows = numel(&out_dims);
    let copy_rows = |first: usize, chunk: &mut [u8]| {
        let mut idx = vec![0usize; out_dims.len()];
        // Unravel `first` into the output multi-index.
        let mut rem = first;
        for d in (0..out_dims.len()).rev() {
            idx[d] = rem % out_dims[d].max(1);
            rem /= out_dims[d].max(1);
        }
        for dst in chunk.chunks_mut(row) {
            let srow: usize = idx.iter().zip(&src_strides).map(|(i, s)| i * s).sum();
            dst.copy_from_slice(&x.bytes[srow * row..(srow + 1) * row]);
            for d in (0..out_dims.len()).rev() {
                idx[d] += 1;
                if idx[d] < out_dims[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    };
    let out = &mut o.bytes[..rows * row];
    if parallel(rows * row / 4) {
        let per = rows.div_ceil(rayon::current_num_threads() * 4).max(1);
        out.par_chunks_mut(per * row).enumerate().for_each(|(c, chunk)| copy_rows(c * per, chunk));
    } else {
        copy_rows(0, out);
    }
    Ok(())
}

/// ONNX Slice as the other tiers compute it (`runtime::reference::movement::slice`), with a
/// large window of unit steps copied as runs ([`SliceRuns`]) split over the pool's threads:
/// the Q, K and V thirds of a merged projection's output (BERT-base s128: 384 KiB each, 36
/// per run) are read from both cores' caches, where one thread alone copied about 8 GB/s.
fn slice_runs(x: &In, o: &mut Out, starts: &[i64], ends: &[i64], axes: &[isize], steps: &[i64]) -> KResult {
    let w = runtime::op::resolve_slice(x.dims, starts, ends, axes, steps).map_err(KernelError::Internal)?;
    let unit = w.iter().all(|a| a.step == 1) && x.dtype == o.dtype && w.len() == x.dims.len();
    if !unit || !parallel(o.bytes.len() / 4) {
        return slice(x, o, starts, ends, axes, steps);
    }
    let plan = SliceRuns::new(x, &w, o.bytes.len())?;
    let run = plan.run_bytes();
    if run == 0 {
        return Ok(());
    }
    let per = plan.runs().div_ceil(rayon::current_num_threads() * 4).max(1);
    o.bytes.par_chunks_mut(per * run).enumerate().try_for_each(|(c, chunk)| plan.copy(x.bytes, c * per, chunk))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timing aid, not a check (`cargo test --release -p backend-cpu fused_gelu_timing --
    /// --ignored --nocapture`): BERT-base's first feed-forward product (m 128, k 768, n 3072,
    /// a prepacked bf16 weight) as LinearGelu against Linear then BiasGelu, alternated in
    /// one process, medians.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn fused_gelu_timing() {
        use runtime::DType;
        if !super::super::gemm_bf16::available() {
            println!("skipped: this CPU has no AVX-512-BF16");
            return;
        }
        let (m, k, n) = (128, 768, 3072);
        let w: Vec<half::bf16> =
            (0..n * k).map(|i| half::bf16::from_f32(((i * 7 % 31) as f32 - 15.0) / 200.0)).collect();
        let packed = super::super::gemm_bf16::PackedWeight::pack(&w, n, k).unwrap();
        let wb: Vec<u8> = w.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
        let pre = runtime::Prepacked(std::sync::Arc::new(packed));
        let ctx = Ctx { threads: 2, features: crate::features::get(), prepacked: Some(pre) };
        let plain = Ctx { threads: 2, features: crate::features::get(), prepacked: None };
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0).collect();
        let bias = vec![0.1f32; n];
        let (xd, wd, bd, od) = ([m, k], [n, k], [n], [m, n]);
        let st = |d: &[usize]| runtime::Shape::new(d.to_vec()).contiguous_strides();
        let (xs, ws, bs, os) = (st(&xd), st(&wd), st(&bd), st(&od));
        let xin = || In { dtype: DType::F32, dims: &xd, strides: &xs, bytes: bytemuck::cast_slice(&x) };
        let win = || In { dtype: DType::BF16, dims: &wd, strides: &ws, bytes: &wb };
        let bin = || In { dtype: DType::F32, dims: &bd, strides: &bs, bytes: bytemuck::cast_slice(&bias) };
        let (mut o, mut y) = (vec![0f32; m * n], vec![0f32; m * n]);
        let (mut fused, mut pair) = (Vec::new(), Vec::new());
        let mut blocks = Vec::new();
        for _ in 0..41 {
            let t = std::time::Instant::now();
            let mut outs = [Out { dtype: DType::F32, dims: &od, bytes: bytemuck::cast_slice_mut(&mut o) }];
            linear_bf16_gelu_in(&[xin(), win(), bin()], &mut outs, &ctx, true, true).unwrap();
            blocks.push(t.elapsed().as_secs_f64() * 1e6);
            let t = std::time::Instant::now();
            let mut outs = [Out { dtype: DType::F32, dims: &od, bytes: bytemuck::cast_slice_mut(&mut o) }];
            linear_bf16(&Op::LinearGelu, &[xin(), win(), bin()], &mut outs, &ctx).unwrap();
            fused.push(t.elapsed().as_secs_f64() * 1e6);
            let t = std::time::Instant::now();
            let mut outs = [Out { dtype: DType::F32, dims: &od, bytes: bytemuck::cast_slice_mut(&mut y) }];
            linear_bf16(&Op::Linear, &[xin(), win()], &mut outs, &ctx).unwrap();
            let yin = In { dtype: DType::F32, dims: &od, strides: &os, bytes: bytemuck::cast_slice(&y) };
            let mut outs = [Out { dtype: DType::F32, dims: &od, bytes: bytemuck::cast_slice_mut(&mut o) }];
            run(&Op::BiasGelu(GeluApprox::Erf), &[yin, bin()], &mut outs, &plain).unwrap();
            pair.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let med = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "m {m} k {k} n {n}: LinearGelu {:.0} µs (GELU in the AMX blocks {:.0} µs), Linear + BiasGelu {:.0} µs (medians of 41)",
            med(fused),
            med(blocks),
            med(pair)
        );
    }

    /// LinearGelu with a bf16 weight (the epilogue's bias and GELU) gives the bits of the
    /// unfused pair, Linear without its bias then BiasGelu, on the packed product (m = 40)
    /// and on a decode step's streamed weight (m = 3); with an f32 weight it stays within
    /// rounding of that pair.
    /// The threaded Slice copies the same bytes as the reference tier's, for windows cut
    /// on the last, a middle and the first axis, and a whole tensor, in a pool of 3 threads
    /// (runs that do not divide evenly among the chunks), f32 and u8.
    #[test]
    fn threaded_slice_matches_the_reference() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let dims = [3usize, 129, 2304];
        let n: usize = dims.iter().product();
        let vals: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let bytes_u8: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
        let st = runtime::Shape::new(dims.to_vec()).contiguous_strides();
        // (starts, ends, axes)
        let windows: [(&[i64], &[i64], &[isize]); 5] = [
            (&[768], &[1536], &[2]),
            (&[-768], &[i64::MAX], &[-1]),
            (&[5, 0], &[128, 2304], &[1, 2]),
            (&[1], &[3], &[0]),
            (&[0], &[3], &[0]),
        ];
        use runtime::DType;
        for (dt, bytes) in [(DType::F32, bytemuck::cast_slice::<f32, u8>(&vals)), (DType::U8, &bytes_u8[..])] {
            let x = In { dtype: dt, dims: &dims, strides: &st, bytes };
            for (starts, ends, axes) in windows {
                let w = runtime::op::resolve_slice(&dims, starts, ends, axes, &[]).unwrap();
                let od: Vec<usize> = w.iter().map(|a| a.len).collect();
                let len = od.iter().product::<usize>() * dt.size();
                let (mut want, mut got) = (vec![0u8; len], vec![0u8; len]);
                slice(&x, &mut Out { dtype: dt, dims: &od, bytes: &mut want }, starts, ends, axes, &[]).unwrap();
                pool.install(|| {
                    slice_runs(&x, &mut Out { dtype: dt, dims: &od, bytes: &mut got }, starts, ends, axes, &[])
                })
                .unwrap();
                assert!(got == want, "{dt:?} window {starts:?}..{ends:?} on axes {axes:?}");
            }
            // An output of the wrong size is an error, not a short copy.
            let mut short = vec![0u8; 100 * 768 * dt.size()];
            let od = [3, 100, 768];
            let r = pool.install(|| {
                slice_runs(&x, &mut Out { dtype: dt, dims: &od, bytes: &mut short }, &[0], &[768], &[2], &[])
            });
            assert!(r.is_err(), "{dt:?}: a short output is refused");
        }
    }

    #[test]
    fn linear_gelu_matches_linear_then_bias_gelu() {
        use runtime::DType;
        let f = crate::features::get();
        let ctx = Ctx { threads: 2, features: f, prepacked: None };
        let (n, k) = (48, 64);
        let wf: Vec<f32> = (0..n * k).map(|i| ((i * 7 % 31) as f32 - 15.0) / 20.0).collect();
        let wb: Vec<u8> = wf.iter().flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes()).collect();
        let bias: Vec<f32> = (0..n).map(|j| (j as f32 - 20.0) / 10.0).collect();
        let (wd, bd, ws, bs) = ([n, k], [n], [k, 1], [1]);
        for m in [40, 3] {
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0).collect();
            let (xd, od, xs) = ([m, k], [m, n], [k, 1]);
            let xin = || In { dtype: DType::F32, dims: &xd, strides: &xs, bytes: bytemuck::cast_slice(&x) };
            let bin = || In { dtype: DType::F32, dims: &bd, strides: &bs, bytes: bytemuck::cast_slice(&bias) };
            let run_one = |op: &Op, ins: &[In], bf16: bool| -> Vec<f32> {
                let mut o = vec![0f32; m * n];
                let mut outs = [Out { dtype: DType::F32, dims: &od, bytes: bytemuck::cast_slice_mut(&mut o) }];
                if bf16 { linear_bf16(op, ins, &mut outs, &ctx) } else { run(op, ins, &mut outs, &ctx) }.unwrap();
                o
            };
            for bf16 in [true, false] {
                if bf16 && !super::super::gemm_bf16::available() {
                    println!("skipped the bf16 weight: this CPU has no AVX-512-BF16");
                    continue;
                }
                let (wdt, wbytes) = if bf16 { (DType::BF16, &wb[..]) } else { (DType::F32, bytemuck::cast_slice(&wf)) };
                let win = || In { dtype: wdt, dims: &wd, strides: &ws, bytes: wbytes };
                let fused = run_one(&Op::LinearGelu, &[xin(), win(), bin()], bf16);
                let y = run_one(&Op::Linear, &[xin(), win()], bf16);
                let yin = In { dtype: DType::F32, dims: &od, strides: &[n, 1], bytes: bytemuck::cast_slice(&y) };
                let pair = run_one(&Op::BiasGelu(GeluApprox::Erf), &[yin, bin()], false);
                for (i, (a, b)) in fused.iter().zip(&pair).enumerate() {
                    let ok = if bf16 { a.to_bits() == b.to_bits() } else { (a - b).abs() <= 1e-5 * (1.0 + b.abs()) };
                    assert!(ok, "m {m} bf16 {bf16} [{i}]: fused {a} vs pair {b}");
                }
            }
        }
    }

    /// `got` against `e^x` rounded to f32: the same infinity, 0 or nearly where the exact
    /// result is under 2^-125, within 4 ulp elsewhere.
    fn check_exp(x: f32, got: f32) {
        let want = (x as f64).exp() as f32;
        if want.is_infinite() || got.is_infinite() {
            assert_eq!(got, want, "exp({x})");
        } else if want < 2f32.powi(-125) {
            // Results under 2^-125 are flushed to 0.
            assert!(got == 0.0 || (got - want).abs() <= 2f32.powi(-125), "exp({x}) = {got}, want {want}");
        } else {
            assert!(((got - want) / want).abs() <= 4.0 * f32::EPSILON, "exp({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn exp_approx_is_exact_at_the_ends_and_within_ulps_near_them() {
        assert_eq!(exp_approx::<false>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_approx::<false>(f32::INFINITY), f32::INFINITY);
        assert!(exp_approx::<false>(f32::NAN).is_nan());
        assert_eq!(exp_approx::<false>(0.0), 1.0);
        // Every f32 near the overflow and the underflow thresholds, scalar and on the
        // detected ISA's vector path.
        let isa = crate::features::get().isa;
        for (lo, hi) in [(86.0f32, 89.5f32), (-90.0, -85.0), (0.5, 0.75)] {
            let mut xs = Vec::new();
            let mut x = lo;
            while x < hi {
                xs.push(x);
                x = f32::from_bits(if x >= 0.0 { x.to_bits() + 1 } else { x.to_bits() - 1 });
            }
            let mut ys = vec![0f32; xs.len()];
            exp_map(isa, &xs, &mut ys);
            for (&x, &y) in xs.iter().zip(&ys) {
                check_exp(x, exp_approx::<false>(x));
                check_exp(x, y);
            }
        }
    }

    /// erf, tanh and both GELUs on every path this CPU runs (the vector paths use fused
    /// multiply-adds, the baseline does not), against libm in f64, across the branch
    /// points of the approximations (|x| = 0.1 and 0.5) and the saturated ends.
    #[test]
    fn erf_tanh_and_gelu_match_f64_on_every_isa() {
        let f = crate::features::get();
        let mut xs: Vec<f32> = (-6000..=6000).map(|i| i as f32 * 1e-3).collect();
        xs.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            1e-30,
            20.0,
            -20.0,
            0.099_999,
            0.100_001,
            0.499_99,
            0.500_01,
        ]);
        let gelu = |x: f64| 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
        let gelu_t = |x: f64| 0.5 * x * (1.0 + libm::tanh(0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)));
        type Map = fn(Isa, &[f32], &mut [f32]);
        type Case<'a> = (&'a str, Map, &'a dyn Fn(f64) -> f64);
        let cases: [Case; 5] = [
            ("erf", erf_map, &libm::erf),
            ("tanh", tanh_map, &libm::tanh),
            ("sigmoid", sigmoid_map, &sigmoid_f64),
            ("gelu", gelu_erf_map, &gelu),
            ("gelu_tanh", gelu_tanh_map, &gelu_t),
        ];
        let mut checked = Vec::new();
        for isa in Isa::ALL.into_iter().filter(|&i| f.check(i).is_ok()) {
            checked.push(isa);
            for (name, map, want) in &cases {
                let mut ys = vec![0f32; xs.len()];
                map(isa, &xs, &mut ys);
                for (&x, &y) in xs.iter().zip(&ys) {
                    let w = want(x as f64);
                    // erf's rational form is good to ~1.5e-7 absolute; GELU scales it by x/2.
                    let tol = 4e-7 * (1.0 + w.abs()) + 2e-7 * (x as f64).abs();
                    let ok = if w.is_nan() {
                        y.is_nan()
                    } else if w.is_infinite() {
                        y as f64 == w
                    } else {
                        ((y as f64) - w).abs() <= tol
                    };
                    assert!(ok, "{name}({x}) on {isa:?} = {y}, want {w}");
                }
            }
        }
        assert!(checked.contains(&Isa::Scalar) && checked.contains(&f.isa), "{checked:?}");
        // GELU's left tail is small (-6e-9 at -6): computed as `x · erfc/2`, not through
        // `1 + erf`, it keeps a relative accuracy there (through `1 + erf` it was 100 %).
        let tail: Vec<f32> = (0..=5000).map(|i| -1.0 - i as f32 * 1e-3).collect();
        for &isa in &checked {
            let mut ys = vec![0f32; tail.len()];
            gelu_erf_map(isa, &tail, &mut ys);
            for (&x, &y) in tail.iter().zip(&ys) {
                let w = gelu(x as f64);
                assert!(((y as f64 - w) / w).abs() < 1e-2, "gelu({x}) on {isa:?} = {y}, want {w}");
            }
        }
    }

    #[test]
    fn relu_keeps_nan_and_layer_norm_of_huge_rows_is_finite() {
        let isa = crate::features::get().isa;
        let src = [f32::NAN, -1.0, 2.0, f32::NEG_INFINITY, f32::INFINITY];
        let mut dst = [0f32; 5];
        relu_map(isa, &src, &mut dst);
        assert!(dst[0].is_nan());
        assert_eq!(&dst[1..], &[0.0, 2.0, 0.0, f32::INFINITY]);
        let x = [3e38f32, 3e38, -3e38, 1.0];
        for isa in Isa::ALL.into_iter().filter(|&i| crate::features::get().check(i).is_ok()) {
            let mut out = [0f32; 4];
            layer_norm_row(isa, &x, None, &[1.0; 4], &[0.0; 4], 1e-5, &mut out);
            // Mean 7.5e37, std 2.487e38: (x - mean) / std.
            for (o, want) in out.iter().zip([0.904_534, 0.904_534, -1.507_557, -0.301_511]) {
                assert!((o - want).abs() < 1e-5, "{isa:?}: {out:?}");
            }
        }
    }
}
