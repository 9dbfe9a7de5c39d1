//! Every instruction-set path of the CPU backend stays covered on a CPU with a wider one:
//! the backend forced to each path (`CpuConfig::isa`, as `NPURT_CPU_ISA` does) runs the
//! conformance suite, multi-threaded GEMMs (eager and with the weight prepacked by a
//! compiled graph) and the element-wise fast kernels against the reference. A path this
//! CPU lacks is refused with a typed error and its test prints `SKIP` with the reason.

use backend_cpu::{CpuBackend, CpuConfig, CpuError, Isa, IsaError};
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor};
use runtime::{Backend, DType, GeluApprox, Op, Runtime, RuntimeConfig, Tensor, Tier};
use std::sync::Arc;

/// The backend forced to `isa` on 2 threads, or `None` (with the reason printed) where
/// this CPU cannot run it.
fn forced(isa: Isa) -> Option<Arc<CpuBackend>> {
    match CpuBackend::new(CpuConfig { threads: Some(2), isa: Some(isa), ..CpuConfig::default() }) {
        Ok(b) => {
            let f = b.features();
            assert_eq!((f.isa, f.forced), (isa, true));
            Some(Arc::new(b))
        }
        Err(CpuError::Isa(e @ IsaError::Unsupported { .. })) => {
            assert!(backend_cpu::features::get().check(isa).is_err());
            println!("SKIP {isa}: {e}");
            None
        }
        Err(e) => panic!("{isa}: unexpected error {e}"),
    }
}

fn runtime(b: &Arc<CpuBackend>, tier: Tier) -> Runtime {
    let cfg = RuntimeConfig { forced_tier: Some(tier), ..RuntimeConfig::default() };
    Runtime::with_backend(b.clone(), cfg).expect("runtime")
}

/// The fast tier's matrix unit label on each path.
fn matrix_label(isa: Isa) -> &'static str {
    match isa {
        Isa::Avx512 => "avx512-fma",
        Isa::Avx2Fma => "avx2-fma",
        Isa::Scalar => "scalar-fma",
    }
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0).collect()
}

fn floats(t: &Tensor) -> Vec<f32> {
    t.to_ndarray::<f32>().expect("f32 output").iter().copied().collect()
}

fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (*g as f64, *w);
        let ok = if w.is_nan() { g.is_nan() } else { (g - w).abs() <= tol * (1.0 + w.abs()) };
        assert!(ok, "{what}: element {i}: {g} vs {w}");
    }
}

fn check_conformance(isa: Isa, dtype: DType) {
    let Some(b) = forced(isa) else { return };
    let s = npurt_test_support::conformance::run(b, &[dtype], 11).expect("conformance run");
    for m in s.mismatches.iter().take(20) {
        eprintln!("MISMATCH {isa} [{}] {}: {}", m.tier, m.case, m.detail);
    }
    assert!(s.checked > 0, "{isa}: nothing was checked");
    assert!(s.mismatches.is_empty(), "{isa} {dtype}: {} mismatches in {} checks", s.mismatches.len(), s.checked);
    println!("{isa} {dtype}: {} checks, {} skipped, 0 mismatches", s.checked, s.skipped.len());
}

macro_rules! per_isa {
    ($($name:ident => $body:expr;)*) => {
        mod avx512 { $( #[test] fn $name() { ($body)(backend_cpu::Isa::Avx512) } )* }
        mod avx2 { $( #[test] fn $name() { ($body)(backend_cpu::Isa::Avx2Fma) } )* }
        mod scalar { $( #[test] fn $name() { ($body)(backend_cpu::Isa::Scalar) } )* }
    };
}

per_isa! {
    conformance_f32 => |isa| super::check_conformance(isa, runtime::DType::F32);
    conformance_f16 => |isa| super::check_conformance(isa, runtime::DType::F16);
    conformance_bf16 => |isa| super::check_conformance(isa, runtime::DType::BF16);
    threaded_matmul_and_gemm_match_the_reference => super::threaded_products;
    prepacked_linear_in_a_compiled_graph_matches_the_reference => super::prepacked_linear;
    element_wise_fast_kernels_match_the_reference => super::element_wise;
    bf16_is_reported_slow_below_avx512 => super::bf16_support;
}

/// MatMul and Gemm large enough to run on both threads, and a batched MatMul, on the
/// forced path's GEMM: the fast tier reports the path's unit and agrees with f64 sums.
fn threaded_products(isa: Isa) {
    let Some(b) = forced(isa) else { return };
    let rt = runtime(&b, Tier::HighPerformance);
    for (m, k, n, batch) in [(150, 200, 170, 1), (97, 61, 33, 1), (64, 48, 80, 3)] {
        let (av, bv) = (values(batch * m * k, 1), values(batch * k * n, 2));
        let dims = |r, c| if batch == 1 { vec![r, c] } else { vec![batch, r, c] };
        let a = rt.from_slice(&av, dims(m, k), 0).unwrap();
        let bt = rt.from_slice(&bv, dims(k, n), 0).unwrap();
        let mut want = vec![0f64; batch * m * n];
        for p in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    want[(p * m + i) * n + j] =
                        (0..k).map(|q| av[(p * m + i) * k + q] as f64 * bv[(p * k + q) * n + j] as f64).sum();
                }
            }
        }
        let (out, r) = rt.run_with_report(&Op::MatMul { trans_a: false, trans_b: false }, &[&a, &bt]).unwrap();
        assert_eq!(r.unit.label, matrix_label(isa), "{isa} MatMul ran on {}", r.implementation);
        assert_close(&format!("{isa} MatMul {batch}x{m}x{k}x{n}"), &floats(&out[0]), &want, 1e-4);
        if batch == 1 {
            let op = Op::Gemm { trans_a: false, trans_b: false, alpha: 0.5, beta: 0.0 };
            let (out, r) = rt.run_with_report(&op, &[&a, &bt]).unwrap();
            assert_eq!(r.unit.label, matrix_label(isa));
            let half: Vec<f64> = want.iter().map(|w| w * 0.5).collect();
            assert_close(&format!("{isa} Gemm {m}x{k}x{n}"), &floats(&out[0]), &half, 1e-4);
        }
    }
}

/// A Linear whose constant weight the backend packs at compile time for the forced path
/// (n = 96 fills whole panels of every path), and one it packs per call (n = 100).
fn prepacked_linear(isa: Isa) {
    let Some(b) = forced(isa) else { return };
    let rt = runtime(&b, Tier::HighPerformance);
    // The packed layout is the forced path's micro-kernel's, not the widest one's.
    let fast_linear = b
        .kernels()
        .iter()
        .find(|k| k.op == runtime::OpKind::Linear && k.unit.label == matrix_label(isa))
        .expect("fast Linear kernel");
    let metas = [
        runtime::TensorMeta { dtype: DType::F32, shape: [4, 64].into() },
        runtime::TensorMeta { dtype: DType::F32, shape: [96, 64].into() },
    ];
    let w: Vec<u8> = values(96 * 64, 9).iter().flat_map(|x| x.to_le_bytes()).collect();
    let p = b.prepack(fast_linear, &Op::Linear, &metas, &[None, Some(&w)]).unwrap().expect("a packed weight");
    let layout = p.prepacked.0.downcast_ref::<backend_cpu::kernels::gemm_packed::PackedBLayout>().expect("f32 layout");
    for other in Isa::ALL {
        assert_eq!(layout.is_for(other), other == isa, "{isa}: layout {layout:?} is for {other}?");
    }
    for (m, k, n) in [(70, 200, 96), (70, 200, 100)] {
        let (xv, wv, bv) = (values(m * k, 3), values(n * k, 4), values(n, 5));
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [m, k]);
        let w = g.constant("w", HostTensor::from_vec([n, k], wv.clone()).unwrap());
        let bias = g.constant("b", HostTensor::from_vec([n], bv.clone()).unwrap());
        let y = g.op("fc", Op::Linear, &[x, w, bias]).unwrap();
        g.output(y);
        let options = CompileOptions::from_config(&RuntimeConfig::default(), 0);
        let cg = CompiledGraph::compile(&rt, &g, options).unwrap();
        let xt = rt.from_slice(&xv, [m, k], 0).unwrap();
        let (out, prof) = cg.run_profiled(&[&xt]).unwrap();
        let units: Vec<&str> = prof.nodes.iter().filter(|n| n.op == "Linear").map(|n| n.unit.label).collect();
        assert_eq!(units, [matrix_label(isa)], "{isa}");
        let want: Vec<f64> = (0..m * n)
            .map(|e| {
                let (i, j) = (e / n, e % n);
                bv[j] as f64 + (0..k).map(|q| xv[i * k + q] as f64 * wv[j * k + q] as f64).sum::<f64>()
            })
            .collect();
        assert_close(&format!("{isa} Linear {m}x{k}x{n}"), &floats(&out[0]), &want, 1e-4);
        // Twice: the frozen run reads the packed weight again.
        let again = cg.run(&[&xt]).unwrap();
        assert_eq!(floats(&again[0]), floats(&out[0]));
    }
}

/// The SIMD element-wise kernels on lengths that leave a tail after every vector width
/// and that run in parallel chunks, and the row softmax and RmsNorm, against the reference
/// tier.
fn element_wise(isa: Isa) {
    let Some(b) = forced(isa) else { return };
    let (fast, reference) = (runtime(&b, Tier::HighPerformance), runtime(&b, Tier::Reference));
    let ops = [
        Op::Relu,
        Op::Exp,
        Op::Tanh,
        Op::Erf,
        Op::Sqrt,
        Op::Neg,
        Op::Sigmoid,
        Op::Scale { factor: -1.5 },
        Op::Gelu(GeluApprox::Erf),
        Op::Gelu(GeluApprox::Tanh),
        Op::Softmax { axis: -1 },
        Op::Silu,
        Op::RmsNorm { eps: 1e-5 },
    ];
    for len in [37, 1003, 40_001] {
        let mut v = values(len, 6);
        v.iter_mut().step_by(7).for_each(|x| *x *= 40.0);
        let pos: Vec<f32> = v.iter().map(|x| x.abs()).collect();
        for op in &ops {
            let src = if matches!(op, Op::Sqrt) { &pos } else { &v };
            // The row ops also over several rows (40 001 = 13 x 3077).
            let rows = matches!(op, Op::Softmax { .. } | Op::RmsNorm { .. });
            let shape = if rows && len == 40_001 { vec![13, 3077] } else { vec![len] };
            let t = fast.from_slice(src, shape.clone(), 0).unwrap();
            let (got, r) = fast.run_with_report(op, &[&t]).unwrap();
            assert_eq!(r.tier, Tier::HighPerformance, "{isa} {op:?}");
            let want = reference.run(op, &[&reference.from_slice(src, shape, 0).unwrap()]).unwrap();
            let want: Vec<f64> = floats(&want[0]).iter().map(|x| *x as f64).collect();
            assert_close(&format!("{isa} {op:?} on {len}"), &floats(&got[0]), &want, 2e-5);
        }
    }
}

/// Below AVX-512 the bf16 kernel declines and the backend says why bf16 is slow; on
/// AVX-512 it is native exactly where the CPU has AVX-512-BF16 (or AMX-BF16).
fn bf16_support(isa: Isa) {
    let Some(b) = forced(isa) else { return };
    let f = b.features();
    let note = b.slow_precision(0, DType::BF16);
    let has_bf16 = backend_cpu::features::get().avx512bf16;
    match (isa, has_bf16) {
        (Isa::Avx512, true) => assert_eq!(note, None),
        (Isa::Avx512, false) => assert!(note.as_deref().is_some_and(|n| n.contains("no AVX-512-BF16")), "{note:?}"),
        (_, true) => assert!(note.as_deref().is_some_and(|n| n.contains("forced to")), "{note:?}"),
        (_, false) => assert!(note.is_some(), "{isa}"),
    }
    assert_eq!(f.avx512bf16 || f.amx_bf16, note.is_none());
    assert_eq!(b.slow_precision(0, DType::F32), None);
}

#[test]
fn an_unknown_isa_name_is_a_typed_error() {
    assert_eq!(Isa::parse("sse9"), Err(IsaError::Unknown("sse9".into())));
    assert_eq!(Isa::parse(" AVX2 "), Ok(Some(Isa::Avx2Fma)));
    assert_eq!(Isa::parse("auto"), Ok(None));
    for isa in Isa::ALL {
        assert_eq!(Isa::parse(isa.name()), Ok(Some(isa)));
    }
}

#[test]
fn the_widest_path_is_the_default_and_scalar_always_runs() {
    let f = backend_cpu::features::get();
    assert!(!f.forced);
    assert_eq!(f.isa, f.widest);
    assert!(f.check(Isa::Scalar).is_ok());
    for isa in Isa::ALL {
        // A path is runnable exactly when it is no wider than the widest detected.
        assert_eq!(f.check(isa).is_ok(), isa <= f.widest, "{isa}");
    }
    println!("widest path on this CPU: {}", f.widest);
}

/// The bf16 product with AMX left unused (as on a CPU without AMX), on AVX-512-BF16 dot
/// products and on the FMA kernel with the weight widened (`bf16_on_fma`, taken where
/// `vdpbf16ps` runs at half the FMA rate), on one and two threads, at BERT-like and ragged
/// shapes, against f64 on the bf16 weight and x (rounded to bf16 except on the FMA path);
/// and the AMX path on the same shapes where this CPU has it.
#[test]
fn the_bf16_product_runs_on_avx512_bf16_without_amx() {
    use backend_cpu::kernels::gemm_bf16::{PackedWeight, gemm};
    use half::bf16;
    if !backend_cpu::features::get().avx512bf16 {
        println!("SKIP: this CPU has no AVX-512-BF16");
        return;
    }
    let no_amx = backend_cpu::features::without_amx();
    assert!(!no_amx.amx_bf16 && no_amx.avx512bf16);
    use backend_cpu::features::CpuFeatures;
    let dot = |half_rate| -> &'static CpuFeatures {
        Box::leak(Box::new(CpuFeatures { bf16_dot_half_rate: half_rate, ..no_amx.clone() }))
    };
    let mut paths = vec![dot(false)];
    if no_amx.isa == Isa::Avx512 {
        paths.push(dot(true));
    }
    if backend_cpu::features::get().amx_bf16 {
        paths.push(backend_cpu::features::get());
    } else {
        println!("AMX path: not on this CPU");
    }
    for f in paths {
        for (m, k, n) in [(32, 384, 96), (37, 130, 70), (128, 64, 64)] {
            let (xv, wv) = (values(m * k, 1), values(n * k, 2));
            let w: Vec<bf16> = wv.iter().map(|&v| bf16::from_f32(v)).collect();
            let pw = PackedWeight::pack(&w, n, k).unwrap();
            let want: Vec<f64> = (0..m * n)
                .map(|e| {
                    let (i, j) = (e / n, e % n);
                    let x = |q: usize| {
                        let v = xv[i * k + q];
                        if f.bf16_on_fma() { v as f64 } else { bf16::from_f32(v).to_f64() }
                    };
                    (0..k).map(|q| x(q) * w[j * k + q].to_f64()).sum::<f64>()
                })
                .collect();
            for threads in [1, 2] {
                let mut c = vec![0f32; m * n];
                gemm(f, m, &xv, &pw, &mut c, false, threads).unwrap();
                let what = format!("bf16 {m}x{k}x{n} amx={} fma={} threads={threads}", f.amx_bf16, f.bf16_on_fma());
                assert_close(&what, &c, &want, 1e-4 * (k as f64).sqrt());
            }
        }
    }
}
