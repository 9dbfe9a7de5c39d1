//! The conformance suite: every op of the table, on every dtype it accepts and every
//! implementation tier a backend offers, against the reference tier on random shapes
//! (including 0, 1, odd sizes, sizes that are not multiples of the vector width, and
//! broadcasting), plus fixed cases on extreme values ([`extreme_cases`]: ±inf, NaN, huge
//! magnitudes, integer overflow) and inputs every tier must refuse ([`error_cases`]).
//! Written once; each backend's tests call [`run`] with their backend.

use runtime::{
    AttentionLayout, Backend, DType, Element, Error, GeluApprox, Op, Result, Runtime, RuntimeConfig, Tensor, Tier,
    bf16, f16,
};
use std::sync::Arc;

mod case;
mod extreme;
pub use case::Case;
use case::fixed;
pub use extreme::extreme_cases;

/// A disagreement between a tier and the reference.
#[derive(Clone, Debug)]
pub struct Mismatch {
    pub case: String,
    pub tier: Tier,
    pub detail: String,
}

/// What a conformance run did.
#[derive(Debug, Default)]
pub struct Summary {
    pub checked: usize,
    /// `(case, tier, reason)` of combinations the backend declined (no kernel).
    pub skipped: Vec<String>,
    pub mismatches: Vec<Mismatch>,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
}

fn values(rng: &mut Rng, dtype: DType, shape: &[usize], kind: &str) -> Vec<f64> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|_| match (dtype.is_int(), kind) {
            // u8 covers its whole range, so that sums and products wrap.
            (true, "nonzero") if dtype == DType::U8 => rng.uniform(1.0, 256.0).floor(),
            (true, _) if dtype == DType::U8 => rng.uniform(0.0, 256.0).floor(),
            (true, "nonzero") => {
                let v = rng.uniform(1.0, 9.0).floor();
                if rng.next() < 0.5 { -v } else { v }
            }
            (true, _) => rng.uniform(-9.0, 10.0).floor(),
            (false, "positive") => rng.uniform(0.01, 4.0),
            (false, "nonzero") => {
                let v = rng.uniform(0.5, 2.0);
                if rng.next() < 0.5 { -v } else { v }
            }
            (false, _) => rng.uniform(-2.0, 2.0),
        })
        .collect()
}

fn add(out: &mut Vec<Case>, op: Op, shapes: Vec<(DType, Vec<usize>, &str)>, acc: usize, rng: &mut Rng) {
    let inputs = shapes.into_iter().map(|(d, s, k)| {
        let v = values(rng, d, &s, k);
        (d, s, v)
    });
    out.push(Case { op, inputs: inputs.collect(), accumulation: acc });
}

/// Every case of the suite for `dtype`.
pub fn cases(dtype: DType, seed: u64) -> Vec<Case> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut out = Vec::new();
    let f = dtype;
    if dtype.is_float() {
        products(&mut out, f, &mut rng);
        unary(&mut out, f, &mut rng);
        rows(&mut out, f, &mut rng);
        attention(&mut out, f, &mut rng);
        out.extend(crate::decoder_cases::random(f, seed).into_iter().map(|(o, i, a)| fixed(o, i, a)));
        crate::conformance_rope::cases(&mut out, fixed, f, seed);
        for (op, inputs, accumulation) in crate::conformance_paged::cases(f, &mut |d, s| values(&mut rng, d, s, "")) {
            out.push(Case { op, inputs, accumulation });
        }
        for to in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            add(&mut out, Op::Cast { to }, vec![(f, vec![3, 11], "")], 1, &mut rng);
        }
        // LinearGelu from a stream of its own (the other cases' operands unchanged).
        let mut own = Rng(seed.wrapping_mul(0xA076_1D64_78BD_642F) | 1);
        for &(m, k, n) in &[(1, 1, 1), (7, 13, 5), (0, 4, 3), (9, 32, 17), (33, 64, 40)] {
            let ins = vec![(f, vec![m, k], ""), (f, vec![n, k], ""), (f, vec![n], "")];
            add(&mut out, Op::LinearGelu, ins, k, &mut own);
        }
    }
    // Arithmetic with broadcasting (floats and integers, u8 wrapping).
    arithmetic(&mut out, f, &mut rng);
    data_movement(&mut out, f, &mut rng);
    if dtype.is_int() {
        for to in [DType::F32, DType::I64, DType::U8] {
            add(&mut out, Op::Cast { to }, vec![(f, vec![13], "")], 1, &mut rng);
        }
    }
    out.extend(extreme_cases(dtype));
    out
}

/// MatMul (transposed, batched, broadcast), Gemm and Linear on random floats.
fn products(out: &mut Vec<Case>, f: DType, rng: &mut Rng) {
    for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (17, 33, 9), (0, 3, 4), (2, 0, 3), (8, 16, 24), (33, 65, 17)] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a = if ta { vec![k, m] } else { vec![m, k] };
            let b = if tb { vec![n, k] } else { vec![k, n] };
            add(out, Op::MatMul { trans_a: ta, trans_b: tb }, vec![(f, a.clone(), ""), (f, b.clone(), "")], k, rng);
            add(
                out,
                Op::Gemm { trans_a: ta, trans_b: tb, alpha: 0.5, beta: 2.0 },
                vec![(f, a, ""), (f, b, ""), (f, vec![n], "")],
                k,
                rng,
            );
        }
    }
    add(
        out,
        Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 0.0 },
        vec![(f, vec![4, 3], ""), (f, vec![3, 5], "")],
        3,
        rng,
    );
    add(
        out,
        Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 1.0 },
        vec![(f, vec![4, 3], ""), (f, vec![3, 5], ""), (f, vec![4, 1], "")],
        3,
        rng,
    );
    // Batched and broadcast batch dims.
    add(
        out,
        Op::MatMul { trans_a: false, trans_b: false },
        vec![(f, vec![2, 3, 5, 4], ""), (f, vec![4, 6], "")],
        4,
        rng,
    );
    add(
        out,
        Op::MatMul { trans_a: false, trans_b: true },
        vec![(f, vec![1, 5, 4], ""), (f, vec![3, 6, 4], "")],
        4,
        rng,
    );
    add(
        out,
        Op::MatMul { trans_a: true, trans_b: false },
        vec![(f, vec![3, 1, 4, 5], ""), (f, vec![2, 4, 7], "")],
        4,
        rng,
    );
    for &(m, k, n) in &[(1, 1, 1), (7, 13, 5), (0, 4, 3), (4, 0, 3), (9, 32, 17)] {
        add(out, Op::Linear, vec![(f, vec![m, k], ""), (f, vec![n, k], ""), (f, vec![n], "")], k, rng);
        add(out, Op::Linear, vec![(f, vec![2, m, k], ""), (f, vec![n, k], "")], k, rng);
    }
}

/// The unary activations on random floats of shapes from a scalar to past a vector width.
fn unary(out: &mut Vec<Case>, f: DType, rng: &mut Rng) {
    let unary_shapes: Vec<Vec<usize>> =
        vec![vec![], vec![0], vec![1], vec![7], vec![3, 17], vec![2, 3, 33], vec![1031]];
    for s in &unary_shapes {
        for op in [
            Op::Relu,
            Op::Gelu(GeluApprox::Erf),
            Op::Gelu(GeluApprox::Tanh),
            Op::Tanh,
            Op::Erf,
            Op::Exp,
            Op::Neg,
            Op::Sigmoid,
            Op::Scale { factor: -1.75 },
        ] {
            add(out, op, vec![(f, s.clone(), "")], 1, rng);
        }
        add(out, Op::Sqrt, vec![(f, s.clone(), "positive")], 1, rng);
    }
    // Pow: positive bases (a negative one to a fractional power is NaN), broadcasting.
    for (sa, sb) in broadcast_pairs().into_iter().take(6) {
        add(out, Op::Pow, vec![(f, sa, "positive"), (f, sb, "")], 1, rng);
    }
}

/// The row ops on random floats: Softmax, LayerNorm, AddLayerNorm, BiasGelu, ReduceSum and
/// ReduceMean, shape by shape.
fn rows(out: &mut Vec<Case>, f: DType, rng: &mut Rng) {
    for s in [vec![1], vec![5], vec![3, 7], vec![2, 3, 19], vec![4, 0], vec![2, 1, 65]] {
        let r = s.len() as isize;
        for axis in [-1, 0] {
            if axis == 0 && r == 1 {
                continue;
            }
            let acc = s[s.len() - 1].max(1);
            add(out, Op::Softmax { axis }, vec![(f, s.clone(), "")], acc, rng);
        }
        let d = *s.last().unwrap_or(&1);
        add(out, Op::LayerNorm { eps: 1e-5 }, vec![(f, s.clone(), ""), (f, vec![d], ""), (f, vec![d], "")], d, rng);
        add(
            out,
            Op::AddLayerNorm { eps: 1e-3 },
            vec![(f, s.clone(), ""), (f, s.clone(), ""), (f, vec![d], ""), (f, vec![d], "")],
            d,
            rng,
        );
        add(out, Op::BiasGelu(GeluApprox::Erf), vec![(f, s.clone(), ""), (f, vec![d], "")], 1, rng);
        add(out, Op::BiasGelu(GeluApprox::Tanh), vec![(f, s.clone(), ""), (f, vec![d], "")], 1, rng);
        for (axes, keepdims) in [(vec![], false), (vec![-1], true), (vec![0], false)] {
            let acc = s.iter().product::<usize>().max(1);
            add(out, Op::ReduceSum { axes: axes.clone(), keepdims }, vec![(f, s.clone(), "")], acc, rng);
            add(out, Op::ReduceMean { axes, keepdims }, vec![(f, s.clone(), "")], acc, rng);
        }
    }
}

/// Attention, BNSD with no mask, a u8 mask and a float mask, and BSND with a float mask.
fn attention(out: &mut Vec<Case>, f: DType, rng: &mut Rng) {
    // Attention with and without masks; over 128 query rows, a head has several
    // blocks on the CPU's fast tier (per head with K and V packed once where the
    // heads outnumber the threads twice, per block otherwise).
    let shapes =
        [(1, 1, 1, 1, 1), (2, 3, 5, 7, 4), (1, 2, 17, 17, 8), (1, 1, 0, 3, 2), (1, 4, 200, 150, 8), (1, 1, 260, 40, 4)];
    for &(b, h, s, t, d) in &shapes {
        let q = vec![b, h, s, d];
        let k = vec![b, h, t, d];
        add(
            out,
            Op::Attention { scale: None, layout: AttentionLayout::Bnsd, causal: false },
            vec![(f, q.clone(), ""), (f, k.clone(), ""), (f, k.clone(), "")],
            t * d,
            rng,
        );
        let mut mask_vals: Vec<f64> = (0..b * t).map(|i| if i % 3 == 2 { 0.0 } else { 1.0 }).collect();
        if !mask_vals.is_empty() {
            mask_vals[0] = 1.0;
        }
        out.push(Case {
            op: Op::Attention { scale: Some(0.3), layout: AttentionLayout::Bnsd, causal: false },
            inputs: vec![
                (f, q.clone(), values(rng, f, &q, "")),
                (f, k.clone(), values(rng, f, &k, "")),
                (f, k.clone(), values(rng, f, &k, "")),
                (DType::U8, vec![b, 1, 1, t], mask_vals),
            ],
            accumulation: t * d,
        });
        add(
            out,
            Op::Attention { scale: None, layout: AttentionLayout::Bnsd, causal: false },
            vec![(f, q.clone(), ""), (f, k.clone(), ""), (f, k.clone(), ""), (f, vec![s, t], "")],
            t * d,
            rng,
        );
    }
    // Tokens first ([B, S, H, D]: no head split/merge permutes), with a float mask.
    for &(b, h, s, t, d) in &[(2, 3, 5, 7, 4), (1, 4, 17, 17, 8), (1, 4, 140, 140, 8)] {
        let q = vec![b, s, h, d];
        let k = vec![b, t, h, d];
        add(
            out,
            Op::Attention { scale: Some(0.4), layout: AttentionLayout::Bsnd, causal: false },
            vec![(f, q.clone(), ""), (f, k.clone(), ""), (f, k.clone(), ""), (f, vec![b, 1, 1, t], "")],
            t * d,
            rng,
        );
    }
}

/// Operand shapes of the broadcasting binary ops: 0-d, empty, equal, trailing, both sides
/// stretched, one padded; the last two (both stretched at once, a long row) only for the
/// arithmetic ops.
fn broadcast_pairs() -> [(Vec<usize>, Vec<usize>); 8] {
    [
        (vec![], vec![]),
        (vec![0], vec![1]),
        (vec![7], vec![7]),
        (vec![3, 17], vec![17]),
        (vec![2, 1, 5], vec![4, 1]),
        (vec![1], vec![2, 33]),
        (vec![4, 1, 9], vec![1, 3, 9]),
        (vec![1031], vec![1031]),
    ]
}

/// Add, Sub, Mul and Div with broadcasting (floats and integers; divisors nonzero).
fn arithmetic(out: &mut Vec<Case>, f: DType, rng: &mut Rng) {
    for (sa, sb) in broadcast_pairs() {
        for op in [Op::Add, Op::Sub, Op::Mul] {
            add(out, op, vec![(f, sa.clone(), ""), (f, sb.clone(), "")], 1, rng);
        }
        add(out, Op::Div, vec![(f, sa.clone(), ""), (f, sb.clone(), "nonzero")], 1, rng);
    }
}

/// Data movement, every dtype: Permute, Equal, Where, Concat, Slice, Expand, Reshape, Copy
/// and Gather (negative indices too).
fn data_movement(out: &mut Vec<Case>, f: DType, rng: &mut Rng) {
    // Data movement: every dtype.
    for (s, perm) in [
        (vec![2, 3], vec![1, 0]),
        (vec![2, 3, 4], vec![2, 0, 1]),
        (vec![1, 5, 0], vec![1, 2, 0]),
        (vec![2, 3, 4, 5], vec![0, 2, 1, 3]),
    ] {
        add(out, Op::Permute { perm }, vec![(f, s, "")], 1, rng);
    }
    // Equal on every dtype, broadcasting; the second operand partly copies the first so
    // that both answers occur.
    for (sa, sb) in [(vec![], vec![]), (vec![7], vec![7]), (vec![3, 17], vec![17]), (vec![2, 1, 5], vec![4, 1])] {
        let a = values(rng, f, &sa, "");
        let mut b = values(rng, f, &sb, "");
        for (i, v) in b.iter_mut().enumerate().step_by(2) {
            *v = a.get(i).copied().unwrap_or(*v);
        }
        out.push(fixed(Op::Equal, vec![(f, sa, a), (f, sb, b)], 1));
    }
    // Where on every dtype with three-way broadcasting; conditions 0, 1 and other non-zero
    // bytes (all true).
    for (sc, sx, sy) in [
        (vec![], vec![], vec![]),
        (vec![7], vec![7], vec![7]),
        (vec![3, 1], vec![1, 5], vec![3, 5]),
        (vec![2, 1, 4], vec![4], vec![3, 1]),
        (vec![5], vec![], vec![1]),
        (vec![0, 3], vec![1, 3], vec![3]),
    ] {
        let n: usize = sc.iter().product();
        let cv: Vec<f64> = (0..n).map(|_| [0.0, 1.0, 0.0, 2.0, 255.0][(rng.next() * 5.0) as usize % 5]).collect();
        let (xv, yv) = (values(rng, f, &sx, ""), values(rng, f, &sy, ""));
        out.push(fixed(Op::Where, vec![(DType::U8, sc, cv), (f, sx, xv), (f, sy, yv)], 1));
    }
    // Concat of one to three inputs, negative axes and empty blocks included.
    for (shapes, axis) in [
        (vec![vec![3, 4]], 0),
        (vec![vec![2, 3], vec![4, 3]], 0),
        (vec![vec![2, 1, 3], vec![2, 4, 3], vec![2, 0, 3]], -2),
        (vec![vec![5], vec![0], vec![2]], -1),
        (vec![vec![2, 3, 1], vec![2, 3, 2]], 2),
    ] {
        add(out, Op::Concat { axis }, shapes.into_iter().map(|s| (f, s, "")).collect(), 1, rng);
    }
    // Slice: steps forwards and backwards, negative and out-of-range starts and ends,
    // negative axes, axes omitted, empty windows.
    let (lo, hi) = (i64::MIN, i64::MAX);
    for (s, starts, ends, axes, steps) in [
        (vec![10], vec![2], vec![8], vec![], vec![2]),
        (vec![10], vec![-1], vec![-11], vec![0], vec![-1]),
        (vec![3, 5, 4], vec![1, -3], vec![hi, 100], vec![-1, 1], vec![]),
        (vec![4, 6], vec![0], vec![10], vec![], vec![]),
        (vec![4, 6], vec![3, 5], vec![0, -7], vec![0, 1], vec![-2, -3]),
        (vec![5], vec![3], vec![3], vec![], vec![]),
        (vec![2, 3], vec![lo], vec![hi], vec![1], vec![hi]),
        (vec![2, 3, 4], vec![-2, 1], vec![lo, 3], vec![2, 0], vec![-1, 1]),
    ] {
        add(out, Op::Slice { starts, ends, axes, steps }, vec![(f, s, "")], 1, rng);
    }
    // Expand: both ways, from a scalar, to a zero-size dim.
    for (s, shape) in [
        (vec![3, 1], vec![2, 1, 4]),
        (vec![], vec![5]),
        (vec![4], vec![1]),
        (vec![2, 1], vec![0]),
        (vec![1, 3], vec![3, 1]),
    ] {
        add(out, Op::Expand { shape }, vec![(f, s, "")], 1, rng);
    }
    add(out, Op::Reshape { shape: vec![3, -1] }, vec![(f, vec![2, 3, 2], "")], 1, rng);
    add(out, Op::Copy, vec![(f, vec![5, 7], "")], 1, rng);
    for (data, idx, axis) in
        [(vec![10, 4], vec![3], 0), (vec![10, 4], vec![2, 3], 0), (vec![3, 5, 2], vec![4], 1), (vec![6], vec![0], 0)]
    {
        let n = data[axis];
        let iv: Vec<f64> = (0..idx.iter().product::<usize>())
            .map(|_| (rng.next() * n as f64).floor() - if rng.next() < 0.2 { n as f64 } else { 0.0 })
            .collect();
        for it in [DType::I64, DType::I32] {
            out.push(Case {
                op: Op::Gather { axis },
                inputs: vec![(f, data.clone(), values(rng, f, &data, "")), (it, idx.clone(), iv.clone())],
                accumulation: 1,
            });
        }
    }
}

/// Cases every tier must refuse with an error (never a panic, never a result): Gather
/// indices outside `[-n, n)`, Rope positions outside `[0, P)`.
pub fn error_cases(dtype: DType) -> Vec<Case> {
    let data: Vec<f64> = (0..12).map(|i| i as f64).collect();
    let mut out = Vec::new();
    out.extend(crate::conformance_paged::error_cases(dtype).into_iter().map(|(op, ins)| fixed(op, ins, 1)));
    for (it, bad) in [
        (DType::I64, 4.0),
        (DType::I64, -5.0),
        (DType::I64, -(2f64.powi(63))),
        (DType::I64, 2f64.powi(63)),
        (DType::I32, 4.0),
        (DType::I32, -5.0),
        (DType::I32, i32::MIN as f64),
    ] {
        out.push(fixed(
            Op::Gather { axis: 1 },
            vec![(dtype, vec![3, 4], data.clone()), (it, vec![3], vec![0.0, bad, 1.0])],
            1,
        ));
    }
    crate::conformance_rope::error_cases(&mut out, fixed, dtype);
    out
}

fn upload(rt: &Runtime, dtype: DType, shape: &[usize], v: &[f64]) -> Result<Tensor> {
    macro_rules! up {
        ($t:ty) => {{
            let vals: Vec<$t> = v.iter().map(|&x| <$t as Element>::from_f64(x)).collect();
            rt.from_slice(&vals, shape.to_vec(), 0)
        }};
    }
    match dtype {
        DType::F32 => up!(f32),
        DType::F16 => up!(f16),
        DType::BF16 => up!(bf16),
        DType::I32 => up!(i32),
        DType::I64 => up!(i64),
        DType::U8 => up!(u8),
    }
}

/// Reads any tensor back as f64 values.
pub fn download(t: &Tensor) -> Result<Vec<f64>> {
    macro_rules! down {
        ($t:ty) => {
            t.to_ndarray::<$t>()?.iter().map(|v| Element::to_f64(*v)).collect()
        };
    }
    Ok(match t.dtype() {
        DType::F32 => down!(f32),
        DType::F16 => down!(f16),
        DType::BF16 => down!(bf16),
        DType::I32 => down!(i32),
        DType::I64 => down!(i64),
        DType::U8 => down!(u8),
    })
}

/// Tolerance for comparing an output of dtype `d` after accumulating `acc` terms.
pub fn tolerance(d: DType, acc: usize) -> f64 {
    if d.is_int() {
        return 0.0;
    }
    // One rounding of the output plus accumulated f32 error (sqrt growth) and headroom
    // for the fast tier's polynomial exp/erf/tanh (a few f32 ulp).
    let out_eps = d.epsilon();
    let f32_eps = f32::EPSILON as f64;
    2.0 * out_eps + 16.0 * f32_eps * (acc.max(1) as f64).sqrt()
}

/// Runs `case` on a runtime forced to `tier`: `Ok(None)` when no kernel of that tier
/// accepts it.
fn run_case(rt: &Runtime, case: &Case) -> Result<Option<(DType, Vec<f64>)>> {
    let ins: Vec<Tensor> = case.inputs.iter().map(|(d, s, v)| upload(rt, *d, s, v)).collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = ins.iter().collect();
    match rt.run(&case.op, &refs) {
        // Every output, one after another (AddRmsNorm has two of one dtype).
        Ok(outs) => Ok(Some((outs[0].dtype(), crate::conformance_paged::concat(&outs, download)?))),
        Err(Error::NoKernel { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn describe(case: &Case) -> String {
    let ins: Vec<String> = case.inputs.iter().map(|(d, s, _)| format!("{d} {s:?}")).collect();
    format!("{:?} on ({})", case.op, ins.join(", "))
}

/// Runs the whole suite on `backend` for `dtypes`, comparing each tier with the reference.
pub fn run(backend: Arc<dyn Backend>, dtypes: &[DType], seed: u64) -> Result<Summary> {
    let mk = |tier| {
        let cfg = RuntimeConfig { forced_tier: Some(tier), ..RuntimeConfig::default() };
        Runtime::with_backend(backend.clone(), cfg)
    };
    let reference = mk(Tier::Reference)?;
    let tiers: Vec<(Tier, Runtime)> =
        [Tier::Generic, Tier::HighPerformance].into_iter().map(|t| Ok((t, mk(t)?))).collect::<Result<_>>()?;
    let mut summary = Summary::default();
    for &dtype in dtypes {
        for case in error_cases(dtype) {
            let name = describe(&case);
            let tiers_and_ref =
                std::iter::once((Tier::Reference, &reference)).chain(tiers.iter().map(|(t, r)| (*t, r)));
            for (tier, rt) in tiers_and_ref {
                match run_case(rt, &case) {
                    Err(_) => summary.checked += 1,
                    Ok(None) => summary.skipped.push(format!("{name} [{tier}]: no kernel")),
                    Ok(Some(_)) => summary.mismatches.push(Mismatch {
                        case: name.clone(),
                        tier,
                        detail: "returned a result; an error was expected".into(),
                    }),
                }
            }
        }
        for case in cases(dtype, seed) {
            let name = describe(&case);
            let Some((odt, want)) = run_case(&reference, &case)? else {
                if tiers.iter().all(|(_, t)| run_case(t, &case).is_ok_and(|r| r.is_none())) {
                    summary.skipped.push(format!("{name}: no kernel of {} on any tier", backend.name()));
                    continue;
                }
                return Err(Error::Unsupported(format!("{}: the reference tier declined {name}", backend.name())));
            };
            let tol = tolerance(odt, case.accumulation);
            for (tier, rt) in &tiers {
                let got = match run_case(rt, &case) {
                    Ok(Some((_, g))) => g,
                    Ok(None) => {
                        summary.skipped.push(format!("{name} [{tier}]: no kernel"));
                        continue;
                    }
                    Err(e) => {
                        summary.mismatches.push(Mismatch {
                            case: name.clone(),
                            tier: *tier,
                            detail: format!("error: {e}"),
                        });
                        continue;
                    }
                };
                summary.checked += 1;
                if got.len() != want.len() {
                    summary.mismatches.push(Mismatch {
                        case: name.clone(),
                        tier: *tier,
                        detail: format!("{} values, reference has {}", got.len(), want.len()),
                    });
                    continue;
                }
                let bad = got.iter().zip(&want).enumerate().find(|(_, (g, w))| {
                    let (g, w) = (**g, **w);
                    if w.is_nan() || g.is_nan() {
                        return !(w.is_nan() && g.is_nan());
                    }
                    if w.is_infinite() || g.is_infinite() {
                        return g != w;
                    }
                    (g - w).abs() > tol * (1.0 + w.abs())
                });
                if let Some((i, (g, w))) = bad {
                    summary.mismatches.push(Mismatch {
                        case: name.clone(),
                        tier: *tier,
                        detail: format!("element {i}: got {g}, reference {w}, tolerance {tol:.2e}"),
                    });
                }
            }
        }
    }
    Ok(summary)
}
