//! The conformance suite: every op of the table, on every dtype it accepts and every
//! implementation tier a backend offers, against the reference tier on random shapes
//! (including 0, 1, odd sizes, sizes that are not multiples of the vector width, and
//! broadcasting). Written once; each backend's tests call [`run`] with their backend.

use crate::{Backend, DType, Error, GeluApprox, Op, Result, RuntimeConfig, Tensor, Tier};
use runtime::Runtime;
use std::sync::Arc;

/// One case: an op and its host inputs (dtype, shape, values as f64).
#[derive(Clone, Debug)]
pub struct Case {
    pub op: Op,
    pub inputs: Vec<(DType, Vec<usize>, Vec<f64>)>,
    /// Longest accumulation in the op (matmul K, softmax axis, norm width), for tolerances.
    pub accumulation: usize,
}

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
        for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (17, 33, 9), (0, 3, 4), (2, 0, 3), (8, 16, 24), (33, 65, 17)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a = if ta { vec![k, m] } else { vec![m, k] };
                let b = if tb { vec![n, k] } else { vec![k, n] };
                add(
                    &mut out,
                    Op::MatMul { trans_a: ta, trans_b: tb },
                    vec![(f, a.clone(), ""), (f, b.clone(), "")],
                    k,
                    &mut rng,
                );
                add(
                    &mut out,
                    Op::Gemm { trans_a: ta, trans_b: tb, alpha: 0.5, beta: 2.0 },
                    vec![(f, a, ""), (f, b, ""), (f, vec![n], "")],
                    k,
                    &mut rng,
                );
            }
        }
        add(
            &mut out,
            Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 0.0 },
            vec![(f, vec![4, 3], ""), (f, vec![3, 5], "")],
            3,
            &mut rng,
        );
        add(
            &mut out,
            Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 1.0 },
            vec![(f, vec![4, 3], ""), (f, vec![3, 5], ""), (f, vec![4, 1], "")],
            3,
            &mut rng,
        );
        // Batched and broadcast batch dims.
        add(
            &mut out,
            Op::MatMul { trans_a: false, trans_b: false },
            vec![(f, vec![2, 3, 5, 4], ""), (f, vec![4, 6], "")],
            4,
            &mut rng,
        );
        add(
            &mut out,
            Op::MatMul { trans_a: false, trans_b: true },
            vec![(f, vec![1, 5, 4], ""), (f, vec![3, 6, 4], "")],
            4,
            &mut rng,
        );
        add(
            &mut out,
            Op::MatMul { trans_a: true, trans_b: false },
            vec![(f, vec![3, 1, 4, 5], ""), (f, vec![2, 4, 7], "")],
            4,
            &mut rng,
        );
        for &(m, k, n) in &[(1, 1, 1), (7, 13, 5), (0, 4, 3), (4, 0, 3), (9, 32, 17)] {
            add(&mut out, Op::Linear, vec![(f, vec![m, k], ""), (f, vec![n, k], ""), (f, vec![n], "")], k, &mut rng);
            add(&mut out, Op::Linear, vec![(f, vec![2, m, k], ""), (f, vec![n, k], "")], k, &mut rng);
        }
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
                Op::Scale { factor: -1.75 },
            ] {
                add(&mut out, op, vec![(f, s.clone(), "")], 1, &mut rng);
            }
            add(&mut out, Op::Sqrt, vec![(f, s.clone(), "positive")], 1, &mut rng);
        }
        for s in [vec![1], vec![5], vec![3, 7], vec![2, 3, 19], vec![4, 0], vec![2, 1, 65]] {
            let r = s.len() as isize;
            for axis in [-1, 0] {
                if axis == 0 && r == 1 {
                    continue;
                }
                let acc = s[s.len() - 1].max(1);
                add(&mut out, Op::Softmax { axis }, vec![(f, s.clone(), "")], acc, &mut rng);
            }
            let d = *s.last().unwrap_or(&1);
            add(
                &mut out,
                Op::LayerNorm { eps: 1e-5 },
                vec![(f, s.clone(), ""), (f, vec![d], ""), (f, vec![d], "")],
                d,
                &mut rng,
            );
            add(
                &mut out,
                Op::AddLayerNorm { eps: 1e-3 },
                vec![(f, s.clone(), ""), (f, s.clone(), ""), (f, vec![d], ""), (f, vec![d], "")],
                d,
                &mut rng,
            );
            add(&mut out, Op::BiasGelu(GeluApprox::Erf), vec![(f, s.clone(), ""), (f, vec![d], "")], 1, &mut rng);
            add(&mut out, Op::BiasGelu(GeluApprox::Tanh), vec![(f, s.clone(), ""), (f, vec![d], "")], 1, &mut rng);
            for (axes, keepdims) in [(vec![], false), (vec![-1], true), (vec![0], false)] {
                let acc = s.iter().product::<usize>().max(1);
                add(&mut out, Op::ReduceSum { axes: axes.clone(), keepdims }, vec![(f, s.clone(), "")], acc, &mut rng);
                add(&mut out, Op::ReduceMean { axes, keepdims }, vec![(f, s.clone(), "")], acc, &mut rng);
            }
        }
        // Attention with and without masks.
        for &(b, h, s, t, d) in &[(1, 1, 1, 1, 1), (2, 3, 5, 7, 4), (1, 2, 17, 17, 8), (1, 1, 0, 3, 2)] {
            let q = vec![b, h, s, d];
            let k = vec![b, h, t, d];
            add(
                &mut out,
                Op::Attention { scale: None },
                vec![(f, q.clone(), ""), (f, k.clone(), ""), (f, k.clone(), "")],
                t * d,
                &mut rng,
            );
            let mut mask_vals: Vec<f64> = (0..b * t).map(|i| if i % 3 == 2 { 0.0 } else { 1.0 }).collect();
            if !mask_vals.is_empty() {
                mask_vals[0] = 1.0;
            }
            out.push(Case {
                op: Op::Attention { scale: Some(0.3) },
                inputs: vec![
                    (f, q.clone(), values(&mut rng, f, &q, "")),
                    (f, k.clone(), values(&mut rng, f, &k, "")),
                    (f, k.clone(), values(&mut rng, f, &k, "")),
                    (DType::U8, vec![b, 1, 1, t], mask_vals),
                ],
                accumulation: t * d,
            });
            add(
                &mut out,
                Op::Attention { scale: None },
                vec![(f, q.clone(), ""), (f, k.clone(), ""), (f, k.clone(), ""), (f, vec![s, t], "")],
                t * d,
                &mut rng,
            );
        }
        for to in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            add(&mut out, Op::Cast { to }, vec![(f, vec![3, 11], "")], 1, &mut rng);
        }
    }
    // Arithmetic with broadcasting (floats and integers).
    if dtype != DType::U8 {
        for (sa, sb) in [
            (vec![], vec![]),
            (vec![0], vec![1]),
            (vec![7], vec![7]),
            (vec![3, 17], vec![17]),
            (vec![2, 1, 5], vec![4, 1]),
            (vec![1], vec![2, 33]),
            (vec![4, 1, 9], vec![1, 3, 9]),
            (vec![1031], vec![1031]),
        ] {
            for op in [Op::Add, Op::Sub, Op::Mul] {
                add(&mut out, op, vec![(f, sa.clone(), ""), (f, sb.clone(), "")], 1, &mut rng);
            }
            add(&mut out, Op::Div, vec![(f, sa.clone(), ""), (f, sb.clone(), "nonzero")], 1, &mut rng);
        }
    }
    // Data movement: every dtype.
    for (s, perm) in [
        (vec![2, 3], vec![1, 0]),
        (vec![2, 3, 4], vec![2, 0, 1]),
        (vec![1, 5, 0], vec![1, 2, 0]),
        (vec![2, 3, 4, 5], vec![0, 2, 1, 3]),
    ] {
        add(&mut out, Op::Permute { perm }, vec![(f, s, "")], 1, &mut rng);
    }
    add(&mut out, Op::Reshape { shape: vec![3, -1] }, vec![(f, vec![2, 3, 2], "")], 1, &mut rng);
    add(&mut out, Op::Copy, vec![(f, vec![5, 7], "")], 1, &mut rng);
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
                inputs: vec![(f, data.clone(), values(&mut rng, f, &data, "")), (it, idx.clone(), iv.clone())],
                accumulation: 1,
            });
        }
    }
    if dtype.is_int() {
        for to in [DType::F32, DType::I64, DType::U8] {
            add(&mut out, Op::Cast { to }, vec![(f, vec![13], "")], 1, &mut rng);
        }
    }
    out
}

fn upload(rt: &Runtime, dtype: DType, shape: &[usize], v: &[f64]) -> Result<Tensor> {
    macro_rules! up {
        ($t:ty) => {{
            let vals: Vec<$t> = v.iter().map(|&x| <$t as crate::Element>::from_f64(x)).collect();
            rt.from_slice(&vals, shape.to_vec(), 0)
        }};
    }
    match dtype {
        DType::F32 => up!(f32),
        DType::F16 => up!(half::f16),
        DType::BF16 => up!(half::bf16),
        DType::I32 => up!(i32),
        DType::I64 => up!(i64),
        DType::U8 => up!(u8),
    }
}

/// Reads any tensor back as f64 values.
pub fn download(t: &Tensor) -> Result<Vec<f64>> {
    macro_rules! down {
        ($t:ty) => {
            t.to_ndarray::<$t>()?.iter().map(|v| crate::Element::to_f64(*v)).collect()
        };
    }
    Ok(match t.dtype() {
        DType::F32 => down!(f32),
        DType::F16 => down!(half::f16),
        DType::BF16 => down!(half::bf16),
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
        Ok(outs) => Ok(Some((outs[0].dtype(), download(&outs[0])?))),
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
        for case in cases(dtype, seed) {
            let name = describe(&case);
            let Some((odt, want)) = run_case(&reference, &case)? else {
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
