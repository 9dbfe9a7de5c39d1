//! A graph compiled in `int8` runs its Linear layers as dynamic int8 products where the
//! CPU has AMX-INT8 or AVX-512-VNNI (outputs within the quantisation error of f32, not
//! equal to them, and no warning), and in f32 with exactly one warning naming the missing
//! unit where it has neither (or its ISA is forced below AVX-512).

mod common;

use backend_cpu::Isa;
use backend_cpu::kernels::gemm_i8::{MAX_K, Path};
use runtime::graph::{Graph, HostTensor};
use runtime::{DType, Op, Precision};

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
    let c = common::compile(isa, Some(threads), precision, &graph(m, k, n))?;
    let xt = c.rt.from_slice(&values(m * k, 1), [m, k], 0).unwrap();
    let out = c.cg.run(&[&xt]).unwrap();
    Some((out[0].to_ndarray::<f32>().unwrap().iter().copied().collect(), c.warned))
}

#[test]
fn int8_runs_where_the_cpu_has_an_int8_unit_and_warns_once_where_not() {
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

/// A weight deeper than the int8 products take (`MAX_K`) is not an error at compile time:
/// its Linear runs in f32 (what `prepack_int8`'s `Ok(None)` promises), with its f32 result.
#[test]
fn a_weight_deeper_than_int8_takes_runs_in_f32() {
    let k = MAX_K + 1;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, k]);
    let w = g.constant("w", HostTensor::from_vec([3, k], values(3 * k, 5)).unwrap());
    let y = g.op("fc", Op::Linear, &[x, w]).unwrap();
    g.output(y);
    let run = |precision| {
        let c = common::compile(Isa::Avx512, Some(2), precision, &g)?;
        let xt = c.rt.from_slice(&values(2 * k, 6), [2, k], 0).unwrap();
        let out = c.cg.run(&[&xt]).unwrap();
        Some(out[0].to_ndarray::<f32>().unwrap().iter().copied().collect::<Vec<f32>>())
    };
    let Some(f32_out) = run(Precision::F32) else { return };
    if Path::best(backend_cpu::features::forced(Isa::Avx512).unwrap()).is_none() {
        println!("SKIP: this CPU has no int8 unit (no int8 weight is packed anyway)");
        return;
    }
    let i8_out = run(Precision::Int8).expect("compiles in int8");
    assert_eq!(i8_out, f32_out, "the deep Linear runs in f32");
}
