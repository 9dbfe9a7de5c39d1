//! Every op x dtype x tier against the reference, one test per backend
//! (`<case>::cpu`, `<case>::acl_emu`, `<case>::cuda`); a backend that is absent prints why.

mod common;

use npurt::{Backend, DType};
use std::sync::Arc;

fn check(b: Arc<dyn Backend>, dtypes: &[DType]) {
    let name = b.name();
    let s = npurt_test_support::conformance::run(b, dtypes, 7).expect("conformance run");
    for skip in &s.skipped {
        eprintln!("SKIP {name}: {skip}");
    }
    for m in s.mismatches.iter().take(20) {
        eprintln!("MISMATCH {name} [{}] {}: {}", m.tier, m.case, m.detail);
    }
    assert!(s.checked > 0, "{name}: nothing was checked");
    assert!(s.mismatches.is_empty(), "{name}: {} mismatches in {} checks", s.mismatches.len(), s.checked);
    eprintln!("{name} {dtypes:?}: {} checks, {} skipped, 0 mismatches", s.checked, s.skipped.len());
}

on_every_backend!(conformance_f32, |b| check(b, &[DType::F32]));

on_every_backend!(conformance_f16, |b| check(b, &[DType::F16]));

on_every_backend!(conformance_bf16, |b| check(b, &[DType::BF16]));

on_every_backend!(conformance_integers, |b| check(b, &[DType::I32, DType::I64, DType::U8]));

/// Runs `op` on `ins` (f32 unless given) on `tier`; `None` when the tier has no kernel.
fn on_tier(
    b: &Arc<dyn Backend>,
    tier: npurt::Tier,
    op: &npurt::Op,
    ins: &[(DType, Vec<usize>, Vec<f64>)],
) -> Option<npurt::Result<Vec<f64>>> {
    let cfg = npurt::RuntimeConfig { forced_tier: Some(tier), ..npurt::RuntimeConfig::default() };
    let rt = runtime::Runtime::with_backend(b.clone(), cfg).expect("runtime");
    let up = |(d, s, v): &(DType, Vec<usize>, Vec<f64>)| match d {
        DType::F32 => rt.from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), s.clone(), 0),
        DType::I32 => rt.from_slice(&v.iter().map(|&x| x as i32).collect::<Vec<_>>(), s.clone(), 0),
        DType::U8 => rt.from_slice(&v.iter().map(|&x| x as u8).collect::<Vec<_>>(), s.clone(), 0),
        other => panic!("no upload for {other}"),
    };
    let ts: Vec<npurt::Tensor> = ins.iter().map(|i| up(i).expect("upload")).collect();
    let refs: Vec<&npurt::Tensor> = ts.iter().collect();
    match rt.run(op, &refs) {
        Ok(o) => Some(npurt_test_support::conformance::download(&o[0])),
        Err(npurt::Error::NoKernel { .. }) => None,
        Err(e) => Some(Err(e)),
    }
}

// The documented answers (docs/OPS.md) on extreme inputs, on every tier of every backend
// present: agreement with the reference is not enough, the reference must be right too.
on_every_backend!(extreme_inputs_give_the_documented_answers_on_every_tier, |b: Arc<dyn Backend>| {
    use npurt::{GeluApprox, Op, Tier};
    let bname = b.name();
    let inf = f64::INFINITY;
    let f = |s: &[usize], v: &[f64]| (DType::F32, s.to_vec(), v.to_vec());
    let nan_eq = |g: &[f64], w: &[f64], tol: f64| {
        g.len() == w.len()
            && g.iter()
                .zip(w)
                .all(|(g, w)| (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0))
    };
    // (what, op, inputs as (dtype, dims, values), the documented output)
    type Case = (&'static str, Op, Vec<(DType, Vec<usize>, Vec<f64>)>, Vec<f64>);
    let cases: Vec<Case> = vec![
        ("softmax of all -inf is NaN", Op::Softmax { axis: -1 }, vec![f(&[3], &[-inf, -inf, -inf])], vec![f64::NAN; 3]),
        (
            "layernorm of huge values is finite",
            Op::LayerNorm { eps: 1e-5 },
            vec![f(&[4], &[3e38, 3e38, -3e38, 1.0]), f(&[4], &[1.0; 4]), f(&[4], &[0.0; 4])],
            vec![0.904_534_03, 0.904_534_03, -1.507_556_72, -0.301_511_34],
        ),
        (
            "i32 MIN / -1 wraps, x / 0 is 0",
            Op::Div,
            vec![(DType::I32, vec![3], vec![i32::MIN as f64, 7.0, -7.0]), (DType::I32, vec![3], vec![-1.0, 0.0, 2.0])],
            vec![i32::MIN as f64, 0.0, -3.0],
        ),
        (
            "i32 Add wraps",
            Op::Add,
            vec![(DType::I32, vec![1], vec![i32::MAX as f64]), (DType::I32, vec![1], vec![1.0])],
            vec![i32::MIN as f64],
        ),
        ("relu keeps NaN", Op::Relu, vec![f(&[3], &[f64::NAN, -1.0, 2.0])], vec![f64::NAN, 0.0, 2.0]),
        ("exp at the ends", Op::Exp, vec![f(&[4], &[inf, -inf, 89.0, -200.0])], vec![inf, 0.0, inf, 0.0]),
        ("gelu of -inf is NaN", Op::Gelu(GeluApprox::Erf), vec![f(&[2], &[-inf, inf])], vec![f64::NAN, inf]),
        ("sqrt of a negative is NaN", Op::Sqrt, vec![f(&[2], &[-1.0, inf])], vec![f64::NAN, inf]),
        (
            "pow keeps C's special values",
            Op::Pow,
            vec![
                f(&[6], &[f64::NAN, 1.0, -8.0, 0.0, -0.0, -1.0]),
                f(&[6], &[0.0, f64::NAN, 1.0 / 3.0, -1.0, -1.0, inf]),
            ],
            vec![1.0, 1.0, f64::NAN, inf, -inf, 1.0],
        ),
        (
            "u8 wraps mod 256 and x / 0 is 0",
            Op::Add,
            vec![(DType::U8, vec![3], vec![255.0, 200.0, 7.0]), (DType::U8, vec![3], vec![1.0, 100.0, 0.0])],
            vec![0.0, 44.0, 7.0],
        ),
        (
            "u8 division truncates, x / 0 is 0",
            Op::Div,
            vec![(DType::U8, vec![3], vec![255.0, 7.0, 0.0]), (DType::U8, vec![3], vec![2.0, 0.0, 0.0])],
            vec![127.0, 0.0, 0.0],
        ),
        (
            "equal: NaN is unequal, -0 equals 0",
            Op::Equal,
            vec![f(&[4], &[f64::NAN, 0.0, -inf, 1.0]), f(&[4], &[f64::NAN, -0.0, -inf, 2.0])],
            vec![0.0, 1.0, 1.0, 0.0],
        ),
        (
            "where: a non-zero condition picks x, NaN and -0 pass unchanged",
            Op::Where,
            vec![
                (DType::U8, vec![5], vec![0.0, 1.0, 255.0, 2.0, 0.0]),
                f(&[5], &[1.0, f64::NAN, -0.0, inf, 3.0]),
                f(&[], &[-7.0]),
            ],
            vec![-7.0, f64::NAN, -0.0, inf, -7.0],
        ),
        (
            "concat along a negative axis keeps NaN and -0",
            Op::Concat { axis: -1 },
            vec![f(&[2, 2], &[1.0, f64::NAN, 3.0, 4.0]), f(&[2, 1], &[-0.0, -inf])],
            vec![1.0, f64::NAN, -0.0, 3.0, 4.0, -inf],
        ),
        (
            "slice backwards by 2 from the end, the end clamped",
            Op::Slice { starts: vec![-1], ends: vec![-100], axes: vec![0], steps: vec![-2] },
            vec![f(&[5], &[0.0, 1.0, f64::NAN, 3.0, -0.0])],
            vec![-0.0, f64::NAN, 0.0],
        ),
        (
            "expand broadcasts both ways",
            Op::Expand { shape: vec![1, 3] },
            vec![f(&[2, 1], &[1.0, f64::NAN])],
            vec![1.0, 1.0, 1.0, f64::NAN, f64::NAN, f64::NAN],
        ),
        (
            "paged attention reads its positions through the block table, two heads sharing one kv head",
            Op::PagedAttention { scale: Some(1.0) },
            vec![
                f(&[1, 2, 2], &[2.0, 0.0, 0.0, 0.0]),
                f(&[2, 1, 1, 2], &[0.0, 0.0, 1.0, 0.0]),
                f(&[2, 1, 1, 2], &[0.0, 4.0, 2.0, 0.0]),
                (DType::I32, vec![1, 2], vec![1.0, 0.0]),
                (DType::I32, vec![1], vec![2.0]),
            ],
            vec![1.761_594_2, 0.476_811_7, 1.0, 2.0],
        ),
        (
            "kv cache write skips a negative slot",
            Op::KvCacheWrite,
            vec![
                f(&[2, 1, 1, 1], &[7.0, 8.0]),
                f(&[2, 1, 1, 1], &[5.0, 6.0]),
                f(&[2, 1, 1], &[1.0, f64::NAN]),
                f(&[2, 1, 1], &[-0.0, 3.0]),
                (DType::I32, vec![2], vec![1.0, -1.0]),
            ],
            vec![7.0, 1.0],
        ),
        ("neg flips every sign", Op::Neg, vec![f(&[4], &[0.0, -inf, f64::NAN, 2.5])], vec![-0.0, inf, f64::NAN, -2.5]),
        (
            "sigmoid saturates without NaN",
            Op::Sigmoid,
            vec![f(&[5], &[-inf, inf, f64::NAN, 0.0, -100.0])],
            vec![0.0, 1.0, f64::NAN, 0.5, 3.720_075_976_020_836e-44],
        ),
        (
            "silu of -inf is NaN (-inf * 0), of +inf is +inf",
            Op::Silu,
            vec![f(&[4], &[-inf, inf, f64::NAN, 0.0])],
            vec![f64::NAN, inf, f64::NAN, 0.0],
        ),
        (
            "rmsnorm: a row with inf is NaN throughout, huge rows stay finite",
            Op::RmsNorm { eps: 1e-5 },
            vec![f(&[2, 2], &[inf, 1.0, 3e38, -3e38])],
            vec![f64::NAN, f64::NAN, 1.0, -1.0],
        ),
        ("swiglu: the gate is the first half", Op::SwiGlu, vec![f(&[1, 4], &[0.0, inf, 5.0, 7.0])], vec![0.0, inf]),
        (
            "float to i32 saturates, NaN is 0",
            Op::Cast { to: DType::I32 },
            vec![f(&[4], &[f64::NAN, 3e9, -inf, -2.7])],
            vec![0.0, i32::MAX as f64, i32::MIN as f64, -2.0],
        ),
        (
            "sum accumulates wide",
            Op::ReduceSum { axes: vec![], keepdims: false },
            vec![f(&[3], &[3e38, 3e38, -3e38])],
            vec![3e38],
        ),
        (
            "attention of a fully masked row is 0",
            Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false },
            vec![
                f(&[1, 1, 1, 2], &[1.0, 2.0]),
                f(&[1, 1, 2, 2], &[1.0; 4]),
                f(&[1, 1, 2, 2], &[inf, 1.0, 2.0, 3.0]),
                (DType::U8, vec![1, 1, 1, 2], vec![0.0, 0.0]),
            ],
            vec![0.0, 0.0],
        ),
        (
            "causal attention with more queries than keys: the first row sees none and is 0",
            Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: true },
            vec![f(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]), f(&[1, 1, 1, 2], &[1.0; 2]), f(&[1, 1, 1, 2], &[5.0, -1.0])],
            vec![0.0, 0.0, 5.0, -1.0],
        ),
        (
            "rope turns a pair by its angle",
            Op::Rope { interleaved: false, layout: npurt::AttentionLayout::Bnsd },
            vec![
                f(&[1, 1, 1, 2], &[1.0, 2.0]),
                f(&[2, 1], &[1.0, 0.0]),
                f(&[2, 1], &[0.0, 1.0]),
                (DType::I32, vec![1, 1], vec![1.0]),
            ],
            vec![-2.0, 1.0],
        ),
    ];
    for tier in [Tier::Reference, Tier::Generic, Tier::HighPerformance] {
        for (what, op, ins, want) in &cases {
            let Some(got) = on_tier(&b, tier, op, ins) else {
                eprintln!("SKIP {bname} [{tier}] {what}: no kernel");
                continue;
            };
            let got = got.unwrap_or_else(|e| panic!("{bname} [{tier}] {what}: {e}"));
            assert!(nan_eq(&got, want, 1e-5), "{bname} [{tier}] {what}: got {got:?}, want {want:?}");
        }
        let gather = Op::Gather { axis: 0 };
        let bad = [f(&[3], &[1.0, 2.0, 3.0]), (DType::I32, vec![2], vec![0.0, 3.0])];
        if let Some(r) = on_tier(&b, tier, &gather, &bad) {
            assert!(r.is_err(), "{bname} [{tier}]: gather index 3 of 3 gave {r:?}");
        }
    }
});

/// Every op of the table has a case in the suite (random or extreme inputs, some dtype): an
/// op added to the table without one fails here.
#[test]
fn the_suite_has_a_case_of_every_op_of_the_table() {
    use npurt::OpKind;
    use npurt_test_support::conformance::{cases, extreme_cases};
    let mut seen = std::collections::HashSet::new();
    for d in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8] {
        for c in cases(d, 1).iter().chain(&extreme_cases(d)) {
            seen.insert(c.op.kind());
        }
    }
    let missing: Vec<OpKind> = OpKind::ALL.into_iter().filter(|k| !seen.contains(k)).collect();
    assert!(missing.is_empty(), "no conformance case of {missing:?}");
}
