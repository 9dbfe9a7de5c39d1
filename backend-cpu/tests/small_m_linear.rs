//! Linear with at most 8 rows (a decode step) takes the small-m path on every forced
//! instruction-set path: eager (weight row-major) and compiled (weight prepacked when it
//! fills whole panels, row-major otherwise), f32 and bf16 weights, against f64 sums. A
//! path this CPU lacks prints `SKIP` with the reason.

use backend_cpu::{CpuBackend, CpuConfig, CpuError, Isa};
use half::bf16;
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor};
use runtime::{DType, Op, Runtime, RuntimeConfig, Tier};
use std::sync::Arc;

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0).collect()
}

fn check(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= tol * (1.0 + w.abs()), "{what}: element {i}: {g} vs {w}");
    }
}

fn run_isa(isa: Isa) {
    let b = match CpuBackend::new(CpuConfig { threads: Some(2), isa: Some(isa), ..CpuConfig::default() }) {
        Ok(b) => Arc::new(b),
        Err(CpuError::Isa(e)) => return println!("SKIP {isa}: {e}"),
        Err(e) => panic!("{isa}: {e}"),
    };
    let bf16_unit = b.features().avx512bf16;
    let cfg = RuntimeConfig { forced_tier: Some(Tier::HighPerformance), ..RuntimeConfig::default() };
    let rt = Runtime::with_backend(b, cfg).unwrap();
    // n = 96 fills whole panels (prepacked when compiled), n = 100 does not; odd k.
    for (m, k, n) in [(1, 64, 96), (3, 64, 100), (8, 77, 96), (5, 200, 100)] {
        let (xv, wv, bv) = (values(m * k, 1), values(n * k, 2), values(n, 3));
        for weight in [DType::F32, DType::BF16] {
            let wb: Vec<bf16> = wv.iter().map(|&v| bf16::from_f32(v)).collect();
            // The bf16 unit multiplies x rounded to bf16; the f32 unit widens the weight.
            let round_x = weight == DType::BF16 && bf16_unit;
            let xr = |v: f32| if round_x { bf16::from_f32(v).to_f64() } else { v as f64 };
            let wr = |j: usize| if weight == DType::BF16 { wb[j].to_f64() } else { wv[j] as f64 };
            let want: Vec<f64> = (0..m * n)
                .map(|e| {
                    let (i, j) = (e / n, e % n);
                    bv[j] as f64 + (0..k).map(|q| xr(xv[i * k + q]) * wr(j * k + q)).sum::<f64>()
                })
                .collect();
            let what = format!("{isa} {weight:?} Linear {m}x{k}x{n}");
            let wt = match weight {
                DType::BF16 => HostTensor::from_vec([n, k], wb.clone()).unwrap(),
                _ => HostTensor::from_vec([n, k], wv.clone()).unwrap(),
            };
            let mut g = Graph::new();
            let x = g.input("x", DType::F32, [m, k]);
            let w = g.constant("w", wt);
            let bias = g.constant("b", HostTensor::from_vec([n], bv.clone()).unwrap());
            let y = g.op("fc", Op::Linear, &[x, w, bias]).unwrap();
            g.output(y);
            let cg =
                CompiledGraph::compile(&rt, &g, CompileOptions::from_config(&RuntimeConfig::default(), 0)).unwrap();
            let xt = rt.from_slice(&xv, [m, k], 0).unwrap();
            let out = cg.run(&[&xt]).unwrap();
            let got: Vec<f32> = out[0].to_ndarray::<f32>().unwrap().iter().copied().collect();
            check(&format!("{what} compiled"), &got, &want, 1e-5);
            // Eager: the weight as it is (row-major), read in place.
            let wt = match weight {
                DType::BF16 => rt.from_slice(&wb, [n, k], 0).unwrap(),
                _ => rt.from_slice(&wv, [n, k], 0).unwrap(),
            };
            let bt = rt.from_slice(&bv, [n], 0).unwrap();
            let out = rt.run(&Op::Linear, &[&xt, &wt, &bt]).unwrap();
            let got: Vec<f32> = out[0].to_ndarray::<f32>().unwrap().iter().copied().collect();
            check(&format!("{what} eager"), &got, &want, 1e-5);
        }
    }
}

#[test]
fn small_m_linear_matches_f64_on_avx512() {
    run_isa(Isa::Avx512)
}

#[test]
fn small_m_linear_matches_f64_on_avx2() {
    run_isa(Isa::Avx2Fma)
}

#[test]
fn small_m_linear_matches_f64_on_scalar() {
    run_isa(Isa::Scalar)
}
