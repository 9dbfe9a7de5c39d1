//! A graph compiled in `int8` runs its Linear layers as dynamic int8 products where the
//! CPU has AMX-INT8 or AVX-512-VNNI (outputs within the quantisation error of f32, not
//! equal to them, and no warning), and in f32 with exactly one warning naming the missing
//! unit where it has neither (or its ISA is forced below AVX-512).

use backend_cpu::kernels::gemm_i8::Path;
use backend_cpu::{CpuBackend, CpuConfig, CpuError, Isa};
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor};
use runtime::{DType, Op, Precision, Runtime, RuntimeConfig};
use std::sync::{Arc, Mutex};

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.level() <= log::Level::Warn {
            WARNINGS.lock().unwrap_or_else(|p| p.into_inner()).push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0).collect()
}

/// x [m, k] → Linear (w1 [n, k], bias) → Relu → Linear (w2 [k, n]).
fn graph(m: usize, k: usize, n: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [m, k]);
    let w1 = g.constant("w1", HostTensor::from_vec([n, k], values(n * k, 2)).unwrap());
    let b1 = g.constant("b1", HostTensor::from_vec([n], values(n, 3)).unwrap());
    let w2 = g.constant("w2", HostTensor::from_vec([k, n], values(k * n, 4)).unwrap());
    let h = g.op("fc1", Op::Linear, &[x, w1, b1]).unwrap();
    let r = g.op("relu", Op::Relu, &[h]).unwrap();
    let y = g.op("fc2", Op::Linear, &[r, w2]).unwrap();
    g.output(y);
    g
}

/// The output of `graph` compiled in `precision` on `isa` with `threads`, and the
/// warnings the compile logged about precision.
fn run(
    isa: Isa,
    threads: usize,
    precision: Precision,
    (m, k, n): (usize, usize, usize),
) -> Option<(Vec<f32>, Vec<String>)> {
    let b = match CpuBackend::new(CpuConfig { threads: Some(threads), isa: Some(isa), ..CpuConfig::default() }) {
        Ok(b) => b,
        Err(CpuError::Isa(e)) => {
            println!("SKIP {isa}: {e}");
            return None;
        }
        Err(e) => panic!("{isa}: {e}"),
    };
    let rt = Runtime::with_backend(Arc::new(b), RuntimeConfig::default()).unwrap();
    let options = CompileOptions { precision, ..CompileOptions::from_config(&RuntimeConfig::default(), 0) };
    let before = WARNINGS.lock().unwrap().len();
    let cg = CompiledGraph::compile(&rt, &graph(m, k, n), options).unwrap();
    let warned: Vec<String> =
        WARNINGS.lock().unwrap()[before..].iter().filter(|w| w.contains("precision")).cloned().collect();
    let xt = rt.from_slice(&values(m * k, 1), [m, k], 0).unwrap();
    let out = cg.run(&[&xt]).unwrap();
    Some((out[0].to_ndarray::<f32>().unwrap().iter().copied().collect(), warned))
}

#[test]
fn int8_runs_where_the_cpu_has_an_int8_unit_and_warns_once_where_not() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    for isa in Isa::ALL {
        for threads in [1, 2] {
            for shape in [(1, 67, 33), (5, 130, 70), (40, 96, 200), (128, 256, 96)] {
                let Some((f32_out, w32)) = run(isa, threads, Precision::F32, shape) else { continue };
                let (i8_out, w8) = run(isa, threads, Precision::Int8, shape).unwrap();
                let what = format!("{isa} t{threads} {shape:?}");
                assert!(w32.is_empty(), "{what}: {w32:?}");
                let forced = backend_cpu::features::forced(isa).unwrap();
                if Path::best(forced).is_none() {
                    println!("{what}: no int8 unit; f32 with one warning: {w8:?}");
                    assert_eq!(w8.len(), 1, "{what}: {w8:?}");
                    assert!(w8[0].contains("int8") && w8[0].contains("f32"), "{what}: {}", w8[0]);
                    assert_eq!(i8_out, f32_out, "{what}: the fallback is f32");
                    continue;
                }
                assert!(w8.is_empty(), "{what}: {w8:?}");
                assert_ne!(i8_out, f32_out, "{what}: int8 products differ from f32");
                let dot: f64 = i8_out.iter().zip(&f32_out).map(|(a, b)| *a as f64 * *b as f64).sum();
                let norm = |v: &[f32]| v.iter().map(|a| *a as f64 * *a as f64).sum::<f64>().sqrt();
                let cosine = dot / (norm(&i8_out) * norm(&f32_out));
                let max = f32_out.iter().fold(0f32, |a, b| a.max(b.abs()));
                let err = i8_out.iter().zip(&f32_out).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
                assert!(cosine > 0.999 && err <= 0.03 * max, "{what}: cosine {cosine}, max error {err} of {max}");
            }
        }
    }
}
