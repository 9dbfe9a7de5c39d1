//! The conformance suite's fixed cases on extreme values ([`extreme_cases`]): the answers
//! docs/OPS.md states for ±inf, NaN, signed zeros, magnitudes near a dtype's limits, fully
//! masked attention rows, integer overflow and out-of-range casts.

use super::*;

/// Fixed cases on extreme values for `dtype` (see docs/OPS.md for the answers every tier
/// must give): ±inf, NaN, signed zeros, magnitudes near the dtype's limits, exp's overflow
/// and underflow thresholds, fully masked or NaN attention rows, integer overflow and
/// division by zero and -1, float-to-integer casts out of range.
pub fn extreme_cases(dtype: DType) -> Vec<Case> {
    if dtype.is_int() {
        return extreme_int(dtype);
    }
    let f = dtype;
    // The largest magnitude that is comfortably finite in the dtype.
    let big = if dtype == DType::F16 { 6.0e4 } else { 3.0e38 };
    let mut out = Vec::new();
    extreme_elementwise(&mut out, f, big);
    extreme_rows(&mut out, f, big);
    extreme_products(&mut out, f);
    extreme_attention(&mut out, f);
    extreme_casts_and_gather(&mut out, f);
    crate::conformance_rope::extreme_cases(&mut out, fixed, f);
    out
}

/// Integer extremes: overflow, division by zero and by -1, narrowing casts; u8 wrapping.
fn extreme_int(dtype: DType) -> Vec<Case> {
    let f = dtype;
    let mut out = Vec::new();
    if dtype == DType::U8 {
        out.push(fixed(Op::Cast { to: DType::I32 }, vec![(f, vec![3], vec![0.0, 128.0, 255.0])], 1));
        // Wrapping mod 256, truncating division, x / 0 = 0.
        let a = vec![255.0, 0.0, 200.0, 7.0, 0.0, 255.0, 128.0];
        let b = vec![1.0, 1.0, 100.0, 0.0, 0.0, 255.0, 2.0];
        for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
            out.push(fixed(op, vec![(f, vec![7], a.clone()), (f, vec![7], b.clone())], 1));
        }
        out.push(fixed(Op::Div, vec![(f, vec![3], vec![9.0, 0.0, 255.0]), (f, vec![], vec![0.0])], 1));
        return out;
    }
    // i64::MAX is not an f64; 2^63 saturates to it on upload.
    let (lo, hi) =
        if dtype == DType::I32 { (i32::MIN as f64, i32::MAX as f64) } else { (-(2f64.powi(63)), 2f64.powi(63)) };
    let a = vec![hi, lo, hi, lo, lo, lo, 7.0, -7.0, 7.0, 0.0, hi, -1.0];
    let b = vec![1.0, -1.0, hi, lo, 1.0, 0.0, 0.0, 2.0, -2.0, 0.0, -1.0, lo];
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        out.push(fixed(op, vec![(f, vec![12], a.clone()), (f, vec![12], b.clone())], 1));
    }
    // Broadcast scalar divisor -1 and 0.
    for d in [-1.0, 0.0] {
        out.push(fixed(Op::Div, vec![(f, vec![4], vec![lo, hi, 0.0, -5.0]), (f, vec![], vec![d])], 1));
    }
    let narrow = vec![2f64.powi(31), 2f64.powi(40) + 5.0, -1.0, 300.0, -200.0, lo, 256.0];
    for to in [DType::I32, DType::I64, DType::U8, DType::F32, DType::F16, DType::BF16] {
        out.push(fixed(Op::Cast { to }, vec![(f, vec![7], narrow.clone())], 1));
    }
    out
}

/// The unary ops on ±inf, NaN, signed zeros, the dtype's big values and exp's thresholds;
/// the binary ones on every pair of a few of them.
fn extreme_elementwise(out: &mut Vec<Case>, f: DType, big: f64) {
    let specials = vec![
        INF, -INF, NAN, 0.0, -0.0, big, -big, 1.0, -1.0, 10.0, -10.0, 20.0, -20.0, 88.5, 88.72, 88.73, 89.0, -87.0,
        -87.5, -100.0, -104.0, 1e-30, -1e-30, 0.5, -0.5, 3.0, -3.0, 9.5,
    ];
    let n = specials.len();
    for op in [
        Op::Relu,
        Op::Gelu(GeluApprox::Erf),
        Op::Gelu(GeluApprox::Tanh),
        Op::Tanh,
        Op::Erf,
        Op::Exp,
        Op::Sqrt,
        Op::Neg,
        Op::Sigmoid,
        Op::Scale { factor: -1.75 },
    ] {
        out.push(fixed(op, vec![(f, vec![n], specials.clone())], 1));
    }
    out.extend(crate::decoder_cases::extreme_gates(f, &specials).into_iter().map(|(o, i, a)| fixed(o, i, a)));
    // Every pair of a few specials: inf - inf, 0 / 0, x / -0, big * big, NaN anywhere.
    let few = [INF, -INF, NAN, 0.0, -0.0, 1.0, -1.0, big, -big];
    let (a, b): (Vec<f64>, Vec<f64>) = few.iter().flat_map(|&x| few.iter().map(move |&y| (x, y))).unzip();
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Pow, Op::Equal] {
        out.push(fixed(op, vec![(f, vec![a.len()], a.clone()), (f, vec![b.len()], b.clone())], 1));
    }
    // Pow's own special values: a negative base to a fractional power, underflow,
    // overflow, and odd/even integer powers of negative bases.
    let (a, b) = (
        vec![-8.0, -2.0, -2.0, 2.0, 10.0, 10.0, -0.0, 0.0, 4.0],
        vec![1.0 / 3.0, 3.0, 2.0, -200.0, 40.0, 0.5, -3.0, -2.0, -0.5],
    );
    out.push(fixed(Op::Pow, vec![(f, vec![a.len()], a), (f, vec![b.len()], b)], 1));
}

/// Softmax, LayerNorm, AddLayerNorm, BiasGelu and the reductions on rows of extremes.
fn extreme_rows(out: &mut Vec<Case>, f: DType, big: f64) {
    let dtype = f;
    // Softmax rows: all -inf, a NaN, a +inf, huge spread, some -inf, all NaN, equal huge.
    let rows: Vec<f64> = vec![
        -INF, -INF, -INF, -INF, 1.0, NAN, 2.0, 3.0, INF, 1.0, 2.0, -INF, big, -big, 0.0, 1.0, -INF, 0.0, -INF, 1.0,
        NAN, NAN, NAN, NAN, big, big, big, big,
    ];
    for axis in [-1, 0] {
        out.push(fixed(Op::Softmax { axis }, vec![(f, vec![7, 4], rows.clone())], 7));
    }
    // A row longer than the vector lanes: all -inf, then all NaN.
    let mut long = vec![-INF; 17];
    long.extend([NAN; 17]);
    out.push(fixed(Op::Softmax { axis: -1 }, vec![(f, vec![2, 17], long)], 17));
    // LayerNorm: huge values whose naive f32 mean overflows, inf, NaN, ±1e30 (big where the
    // dtype holds it), a constant row.
    let mid = if dtype == DType::F16 { 3.0e4 } else { 1e30 };
    let ln_rows: Vec<f64> =
        vec![big, big, -big, 1.0, INF, 1.0, 2.0, 3.0, NAN, 1.0, 2.0, 3.0, mid, -mid, mid, -mid, 5.0, 5.0, 5.0, 5.0];
    let (g, bt) = (vec![1.0, 2.0, 0.5, -1.0], vec![0.0, 1.0, -1.0, 0.5]);
    for eps in [1e-5, 0.0] {
        out.push(fixed(
            Op::LayerNorm { eps },
            vec![(f, vec![5, 4], ln_rows.clone()), (f, vec![4], g.clone()), (f, vec![4], bt.clone())],
            4,
        ));
    }
    if dtype == DType::F32 {
        // |mean| >> std: 1e7 + 1..4 needs the mean to better than f32 resolution.
        let x = vec![1e7 + 1.0, 1e7 + 2.0, 1e7 + 3.0, 1e7 + 4.0];
        out.push(fixed(
            Op::LayerNorm { eps: 1e-5 },
            vec![(f, vec![1, 4], x), (f, vec![4], g.clone()), (f, vec![4], bt.clone())],
            4,
        ));
    }
    // AddLayerNorm and BiasGelu form the sum in f32: with f32 operands it overflows to inf.
    let (sum_a, sum_b) = if dtype == DType::F16 {
        (vec![1.0, INF, NAN, 2.0, -INF, 1.0, 2.0, 3.0], vec![INF, 1.0, 1.0, NAN, 1.0, 1.0, 1.0, 1.0])
    } else {
        (vec![big, big, -big, 1.0, -big, 1.0, 2.0, 3.0], vec![0.0, 0.0, 0.0, 0.0, -big, 0.0, 0.0, 0.0])
    };
    out.push(fixed(
        Op::AddLayerNorm { eps: 1e-5 },
        vec![(f, vec![2, 4], sum_a.clone()), (f, vec![2, 4], sum_b), (f, vec![4], g), (f, vec![4], bt)],
        4,
    ));
    out.extend(crate::decoder_cases::extreme_rms(f, big, mid, &sum_a).into_iter().map(|(o, i, a)| fixed(o, i, a)));
    let bias = if dtype == DType::F16 { vec![INF, NAN, -INF, 0.0] } else { vec![-big, big, NAN, INF] };
    for approx in [GeluApprox::Erf, GeluApprox::Tanh] {
        out.push(fixed(Op::BiasGelu(approx), vec![(f, vec![2, 4], sum_a.clone()), (f, vec![4], bias.clone())], 1));
    }
    // Reductions: f64 accumulation (big + big - big = big), NaN and inf - inf.
    let red = vec![big, big, -big, NAN, 1.0, 2.0, INF, -INF, 1.0, INF, 1.0, big];
    for (axes, keepdims) in [(vec![], false), (vec![-1], true), (vec![0], false)] {
        out.push(fixed(Op::ReduceSum { axes: axes.clone(), keepdims }, vec![(f, vec![4, 3], red.clone())], 12));
        out.push(fixed(Op::ReduceMean { axes, keepdims }, vec![(f, vec![4, 3], red.clone())], 12));
    }
}

/// MatMul, Gemm and Linear with inf * 0, NaN rows, alpha = 0 and beta = 0.
fn extreme_products(out: &mut Vec<Case>, f: DType) {
    // Products: inf * 0 = NaN, NaN rows; Gemm's alpha = 0 still multiplies, beta = 0
    // leaves a NaN c unread.
    let a = vec![INF, 1.0, 2.0, 1.0, 2.0, 3.0, NAN, 1.0, 1.0];
    let b = vec![0.0, 1.0, 1.0, 1.0, 1.0, -1.0];
    let mm = |op: Op, extra: Option<Vec<f64>>| {
        let mut ins = vec![(f, vec![3, 3], a.clone()), (f, vec![3, 2], b.clone())];
        if let Some(c) = extra {
            ins.push((f, vec![2], c));
        }
        fixed(op, ins, 3)
    };
    out.push(mm(Op::MatMul { trans_a: false, trans_b: false }, None));
    out.push(mm(Op::Gemm { trans_a: false, trans_b: false, alpha: 0.0, beta: 1.0 }, Some(vec![1.0, 2.0])));
    out.push(mm(Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 0.0 }, Some(vec![NAN, INF])));
    out.push(fixed(
        Op::Linear,
        vec![(f, vec![3, 3], a.clone()), (f, vec![2, 3], b.clone()), (f, vec![2], vec![INF, -1.0])],
        3,
    ));
}

/// Attention with fully masked, NaN and infinite rows, an infinite V, a NaN key and scale 0.
fn extreme_attention(out: &mut Vec<Case>, f: DType) {
    // Attention, q/k/v [1, 1, 4, 2] (t = 3 keys): a float mask with a row all -inf (0
    // output), a NaN row, a +inf row (NaN) and BERT's -10000 (finite); then with an
    // infinite V (the fully masked row is still 0).
    let q = vec![0.5, -1.0, 1.0, 0.25, -0.5, 0.75, 1.5, -0.25];
    let k = vec![0.25, 0.5, -1.0, 1.0, 0.75, -0.5];
    let v = vec![1.0, -2.0, 0.5, 3.0, -1.5, 0.25];
    let fmask = vec![-INF, -INF, -INF, 0.0, NAN, 0.0, INF, 0.0, 0.0, -1e4, 0.0, -1e4];
    let att = |q: &[f64], k: &[f64], v: &[f64], m: (DType, Vec<f64>), scale: Option<f32>| {
        let ins = vec![
            (f, vec![1, 1, 4, 2], q.to_vec()),
            (f, vec![1, 1, 3, 2], k.to_vec()),
            (f, vec![1, 1, 3, 2], v.to_vec()),
            (m.0, vec![1, 1, 4, 3], m.1),
        ];
        fixed(Op::Attention { scale, layout: AttentionLayout::Bnsd, causal: false }, ins, 6)
    };
    out.push(att(&q, &k, &v, (f, fmask.clone()), None));
    let mut v_inf = v.clone();
    v_inf[0] = INF;
    out.push(att(&q, &k, &v_inf, (f, fmask), None));
    // A u8 mask adds -inf: a NaN key masked out still makes its rows NaN; row 0 all masked.
    let umask = vec![0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0];
    let mut k_nan = k.clone();
    k_nan[2] = NAN;
    out.push(att(&q, &k, &v, (DType::U8, umask.clone()), Some(0.5)));
    out.push(att(&q, &k_nan, &v, (DType::U8, umask.clone()), Some(0.5)));
    // scale = 0 multiplies: an infinite q gives NaN scores (0 * inf), the others uniform.
    let mut q_inf = q.clone();
    q_inf[2] = INF;
    out.push(att(&q_inf, &k, &v, (DType::U8, vec![1.0; 12]), Some(0.0)));
}

/// Float casts out of range, and Gather at both ends of the valid index range.
fn extreme_casts_and_gather(out: &mut Vec<Case>, f: DType) {
    // Casts out of range: float to integer saturates (NaN -> 0), to floats overflows to inf.
    let casts = vec![NAN, INF, -INF, 3e9, -3e9, 2.5, -2.5, -0.0, 255.9, 256.0, -1.0, 1e20, -1e20, 7e4, 1e-8];
    for to in [DType::I32, DType::I64, DType::U8, DType::F32, DType::F16, DType::BF16] {
        out.push(fixed(Op::Cast { to }, vec![(f, vec![casts.len()], casts.clone())], 1));
    }
    // Gather at both ends of the valid index range, negative ones included.
    let data: Vec<f64> = (0..12).map(|i| i as f64).collect();
    for it in [DType::I32, DType::I64] {
        out.push(fixed(
            Op::Gather { axis: 1 },
            vec![(f, vec![3, 4], data.clone()), (it, vec![5], vec![-4.0, -1.0, 0.0, 3.0, -2.0])],
            1,
        ));
    }
}
