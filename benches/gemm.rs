//! GEMM throughput per implementation tier at the BERT shapes and 1024³.
//!
//! `cargo bench --bench gemm` (add `-- fast` to run only the high-performance tier).
//! The same-run comparison against OpenBLAS is `npurt bench gemm --peer numpy`.

use divan::{Bencher, counter::ItemsCount};
use npurt::{DType, Op, RuntimeConfig, Tensor, Tier};

fn main() {
    divan::main();
}

/// (m, k, n, batch): 512x1024x1024, 512x1024x4096, 512x4096x1024, 16x(512x64x512), 1024^3.
const SHAPES: &[(usize, usize, usize, usize)] =
    &[(512, 1024, 1024, 1), (512, 1024, 4096, 1), (512, 4096, 1024, 1), (512, 64, 512, 16), (1024, 1024, 1024, 1)];

fn setup(tier: Tier, s: (usize, usize, usize, usize)) -> (npurt::Runtime, Tensor, Tensor, Tensor) {
    let cfg = RuntimeConfig { forced_tier: Some(tier), ..RuntimeConfig::default() };
    let rt = npurt::Runtime::with_config(cfg).unwrap();
    let (m, k, n, b) = s;
    let (ad, bd, cd) =
        if b == 1 { (vec![m, k], vec![k, n], vec![m, n]) } else { (vec![b, m, k], vec![b, k, n], vec![b, m, n]) };
    let fill = |d: Vec<usize>| {
        let n: usize = d.iter().product();
        let v: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        rt.from_slice(&v, d, 0).unwrap()
    };
    let (a, bb) = (fill(ad), fill(bd));
    let c = rt.empty(DType::F32, cd, 0).unwrap();
    (rt, a, bb, c)
}

fn run(bencher: Bencher, tier: Tier, s: (usize, usize, usize, usize)) {
    let (rt, a, b, c) = setup(tier, s);
    let op = Op::MatMul { trans_a: false, trans_b: false };
    let flops = 2 * s.0 * s.1 * s.2 * s.3;
    // Counter in FLOPs: divan prints items/s, i.e. FLOP/s.
    bencher.counter(ItemsCount::new(flops)).bench_local(|| rt.execute(&op, &[&a, &b], &[&c]).unwrap());
}

fn shape_name(i: usize) -> String {
    let (m, k, n, b) = SHAPES[i];
    if b == 1 { format!("{m}x{k}x{n}") } else { format!("{b}x{m}x{k}x{n}") }
}

#[divan::bench(args = 0..5, sample_count = 15, sample_size = 1)]
fn fast(bencher: Bencher, i: usize) {
    let _ = shape_name(i);
    run(bencher, Tier::HighPerformance, SHAPES[i]);
}

#[divan::bench(args = 0..5, sample_count = 5, sample_size = 1)]
fn generic(bencher: Bencher, i: usize) {
    run(bencher, Tier::Generic, SHAPES[i]);
}

/// The reference tier is plain f64 loops: measured on 1024^3 only (a few seconds each).
#[divan::bench(sample_count = 2, sample_size = 1)]
fn reference_1024(bencher: Bencher) {
    run(bencher, Tier::Reference, SHAPES[4]);
}
