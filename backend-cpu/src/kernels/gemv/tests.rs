//! The small-m Linear against f64 sums on every path this CPU has (the others print why
//! they are skipped), every weight layout, m 1..=8, n not a multiple of a panel, odd k,
//! bias and accumulation on and off, 1 and 2 threads.

use super::driver::gemv;
use super::weight::{MAX_M, Weight, WeightData};
use crate::features::Isa;
use crate::features::{self, CpuFeatures};
use crate::kernels::gemm_bf16::PackedWeight;
use crate::kernels::gemm_packed::PackedBLayout;
use crate::kernels::gemm_packed::pack_b;
use half::{bf16, f16};
use runtime::KernelError;

/// The paths to test: each ISA this CPU runs, and AVX2 without F16C (its row-major
/// weights take the scalar kernels).
fn paths() -> Vec<(String, CpuFeatures)> {
    let mut v = Vec::new();
    for isa in Isa::ALL {
        match features::forced(isa) {
            Ok(f) => {
                v.push((format!("{isa} (avx512bf16 {})", f.avx512bf16), f.clone()));
                if isa == Isa::Avx2Fma && f.f16c {
                    v.push(("avx2 without f16c".into(), CpuFeatures { f16c: false, ..f.clone() }));
                }
            }
            Err(e) => println!("SKIP {isa}: {e}"),
        }
    }
    v
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0).collect()
}

/// `(acc ? c0 : 0) + bias + x · wᵀ` in f64, with the weight as `wf` (already widened) and
/// x rounded by `round`; also the sum of magnitudes (for the tolerance).
#[allow(clippy::too_many_arguments)]
fn reference(
    m: usize,
    n: usize,
    k: usize,
    x: &[f32],
    wf: &[f32],
    bias: Option<&[f32]>,
    c0: &[f32],
    acc: bool,
    round: fn(f32) -> f32,
) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let mut s = if acc { c0[i * n + j] as f64 } else { 0.0 } + bias.map_or(0.0, |b| b[j] as f64);
            let mut mag = s.abs();
            for p in 0..k {
                let t = round(x[i * k + p]) as f64 * wf[j * k + p] as f64;
                s += t;
                mag += t.abs();
            }
            out.push((s, mag));
        }
    }
    out
}

/// A layout to test: its name, the weight, the weight widened to f32, how x is rounded,
/// the tolerance.
type Case<'a> = (&'a str, WeightData<'a>, &'a [f32], fn(f32) -> f32, f64);

/// Runs every layout at one shape on one path and checks the results.
fn check_shape(name: &str, f: &CpuFeatures, m: usize, n: usize, k: usize) {
    let x = values(m * k, 1);
    let w32 = values(n * k, 2);
    let w16: Vec<f16> = w32.iter().map(|&v| f16::from_f32(v)).collect();
    let wb: Vec<bf16> = w32.iter().map(|&v| bf16::from_f32(v)).collect();
    let w16f: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
    let wbf: Vec<f32> = wb.iter().map(|v| v.to_f32()).collect();
    let layout = PackedBLayout::for_cpu(f.isa, k, n);
    let mut packed = vec![0f32; layout.len()];
    pack_b(&layout, &w32, 1, k, &mut packed).unwrap();
    let pw = PackedWeight::pack(&wb, n, k).unwrap();
    let bias = values(n, 3);
    let c0 = values(m * n, 4);
    let exact: fn(f32) -> f32 = |v| v;
    let to_bf16: fn(f32) -> f32 = |v| bf16::from_f32(v).to_f32();
    let cases: [Case<'_>; 5] = [
        ("f32 rows", WeightData::F32(&w32), &w32, exact, 1e-6),
        ("f16 rows", WeightData::F16(&w16), &w16f, exact, 1e-6),
        ("bf16 rows", WeightData::Bf16(&wb), &wbf, exact, 1e-6),
        ("f32 packed", WeightData::F32Packed(&layout, &packed), &w32, exact, 1e-6),
        ("bf16 packed", WeightData::Bf16Packed(&pw), &wbf, to_bf16, 1e-5),
    ];
    for (what, data, wf, round, tol) in cases {
        let w = Weight { n, k, data };
        for (acc, bias) in [(false, None), (true, None), (false, Some(&bias[..])), (true, Some(&bias[..]))] {
            let want = reference(m, n, k, &x, wf, bias, &c0, acc, round);
            for threads in [1, 2] {
                let mut c = c0.clone();
                gemv(f, m, &x, &w, bias, &mut c, acc, threads).unwrap();
                for (e, (&got, &(s, mag))) in c.iter().zip(&want).enumerate() {
                    let ok = (got as f64 - s).abs() <= tol * (1.0 + mag);
                    assert!(
                        ok,
                        "{name} {what} {m}x{n}x{k} acc={acc} bias={} t={threads} [{e}]: {got} vs {s}",
                        bias.is_some()
                    );
                }
            }
        }
    }
}

#[test]
fn matches_f64_at_edge_shapes_on_every_path() {
    // n not a multiple of 32 (or 16, 8, 4), odd and tiny k, one shape past the bytes at
    // which the product goes parallel (so that 2 threads split it).
    let shapes = [(1, 1), (33, 7), (70, 301), (37, 16), (130, 64), (5, 33), (517, 257)];
    for (name, f) in paths() {
        println!("path {name}");
        for m in 1..=MAX_M {
            for &(n, k) in &shapes {
                check_shape(&name, &f, m, n, k);
            }
        }
    }
}

#[test]
fn empty_and_bad_operands() {
    let f = features::get();
    let w = vec![1f32; 6];
    let wt = Weight { n: 2, k: 3, data: WeightData::F32(&w) };
    let mut c = vec![7f32; 18];
    // m = 0 and k = 0 are no work (k = 0: c is bias, or kept when accumulating).
    gemv(f, 0, &[], &wt, None, &mut c, false, 2).unwrap();
    assert_eq!(c[0], 7.0);
    let w0 = Weight { n: 2, k: 0, data: WeightData::F32(&[]) };
    gemv(f, 1, &[], &w0, Some(&[1.0, 2.0]), &mut c, false, 1).unwrap();
    assert_eq!(&c[..2], &[1.0, 2.0]);
    let err = |r: Result<(), KernelError>| r.expect_err("bad operands must be refused").to_string();
    println!("{}", err(gemv(f, 9, &[0.0; 27], &wt, None, &mut c, false, 1)));
    println!("{}", err(gemv(f, 2, &[0.0; 5], &wt, None, &mut c, false, 1)));
    println!("{}", err(gemv(f, 1, &[0.0; 3], &wt, Some(&[1.0]), &mut c, false, 1)));
    println!("{}", err(gemv(f, 1, &[0.0; 3], &wt, None, &mut [0.0], false, 1)));
    let short = Weight { n: 3, k: 3, data: WeightData::F32(&w) };
    println!("{}", err(gemv(f, 1, &[0.0; 3], &short, None, &mut c, false, 1)));
    // A packed B made for another shape (or path) is refused, not misread.
    let layout = PackedBLayout::for_cpu(f.isa, 3, 4);
    let packed = vec![0f32; layout.len()];
    let other = Weight { n: 2, k: 3, data: WeightData::F32Packed(&layout, &packed) };
    println!("{}", err(gemv(f, 1, &[0.0; 3], &other, None, &mut c, false, 1)));
    if f.isa != Isa::Scalar {
        let scalar_layout = PackedBLayout::for_cpu(Isa::Scalar, 3, 2);
        let packed = vec![0f32; scalar_layout.len()];
        let other = Weight { n: 2, k: 3, data: WeightData::F32Packed(&scalar_layout, &packed) };
        println!("{}", err(gemv(f, 1, &[0.0; 3], &other, None, &mut c, false, 1)));
    }
}

/// Weight bytes streamed per second by each layout at a decode step's shapes (a reading,
/// not a check: `cargo test -p backend-cpu --lib gemv::tests::stream_rate -- --ignored
/// --nocapture`).
#[test]
#[ignore = "a timing to read, not a check"]
fn stream_rate() {
    let f = features::get();
    let (n, k) = (32768, 896);
    let w32 = values(n * k, 2);
    let wb: Vec<bf16> = w32.iter().map(|&v| bf16::from_f32(v)).collect();
    let layout = PackedBLayout::for_cpu(f.isa, k, n);
    let mut packed = vec![0f32; layout.len()];
    pack_b(&layout, &w32, 1, k, &mut packed).unwrap();
    let pw = PackedWeight::pack(&wb, n, k).unwrap();
    let x = values(MAX_M * k, 1);
    let mut c = vec![0f32; MAX_M * n];
    let cases = [
        ("f32 rows", WeightData::F32(&w32)),
        ("bf16 rows", WeightData::Bf16(&wb)),
        ("f32 packed", WeightData::F32Packed(&layout, &packed)),
        ("bf16 packed", WeightData::Bf16Packed(&pw)),
    ];
    for (what, data) in cases {
        let w = Weight { n, k, data };
        for m in [1, 8] {
            for threads in [1, 2] {
                let mut t: Vec<f64> = (0..7)
                    .map(|_| {
                        let t0 = std::time::Instant::now();
                        gemv(f, m, &x, &w, None, &mut c, false, threads).unwrap();
                        t0.elapsed().as_secs_f64()
                    })
                    .collect();
                t.sort_by(f64::total_cmp);
                println!("{what:12} m={m} t={threads}: {:6.1} GB/s", w.bytes() as f64 / t[3] / 1e9);
            }
        }
    }
}

/// The column ranges the threads share cover the columns once, in whole panels, and any
/// half or quarter of them (rayon gives a thread a contiguous run) holds its share within
/// one panel: 28 panels (qwen2-0.5b's 896 columns) once ran as 7 ranges of 4, 16 against 12.
#[test]
fn column_ranges_are_whole_panels_spread_evenly() {
    use super::driver::EvenSplit;
    for (n, align, max) in
        [(896, 32, 8), (1152, 32, 8), (896, 4, 8), (100, 32, 8), (5, 4, 8), (151_936, 32, 8), (1, 1, 4)]
    {
        let r = EvenSplit::new(n, align, max);
        let units = n.div_ceil(align);
        assert!(r.count >= 1 && r.count <= max.min(units), "{n}/{align}: {} ranges", r.count);
        assert_eq!((r.start(0), r.start(r.count)), (0, n));
        let sizes: Vec<usize> = (0..r.count).map(|t| r.start(t + 1) - r.start(t)).collect();
        assert!((0..r.count).all(|t| r.start(t).is_multiple_of(align)), "{n}/{align}: {sizes:?}");
        let panels: Vec<usize> = sizes.iter().map(|s| s.div_ceil(align)).collect();
        let (lo, hi) = (panels.iter().min().unwrap(), panels.iter().max().unwrap());
        assert!(hi - lo <= 1, "{n}/{align}: {panels:?}");
        for parts in [2, 4] {
            if r.count.is_multiple_of(parts) {
                let per = r.count / parts;
                for p in 0..parts {
                    let got: usize = panels[p * per..(p + 1) * per].iter().sum();
                    assert!(
                        got.abs_diff(units / parts) <= 1,
                        "{n}/{align}: part {p} of {parts} has {got} of {units}: {panels:?}"
                    );
                }
            }
        }
    }
}

/// [`stream_rate`] from memory: each layout's weight about 1 GiB (past any L3), two threads,
/// against a plain two-thread read of the same bytes (a reading, not a check: `cargo test
/// --release -p backend-cpu --lib gemv::tests::stream_rate_from_memory -- --ignored
/// --nocapture`). Rounds alternate the layouts; medians.
#[test]
#[ignore = "a timing to read, not a check"]
fn stream_rate_from_memory() {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn sum256(x: &[f32]) -> f32 {
        let mut acc = [0f32; 64];
        for c in x.chunks_exact(64) {
            for l in 0..64 {
                acc[l] += c[l];
            }
        }
        acc.iter().sum()
    }
    fn sum(f: &CpuFeatures, x: &[f32]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if f.isa != Isa::Scalar {
            // SAFETY: AVX2 was detected (every vector path has it).
            return unsafe { sum256(x) };
        }
        x.iter().sum()
    }
    use rayon::prelude::*;
    let f = features::get();
    let (n, k) = (300_000, 896);
    let w32 = values(n * k, 2);
    let layout = PackedBLayout::for_cpu(f.isa, k, n);
    let mut packed = vec![0f32; layout.len()];
    pack_b(&layout, &w32, 1, k, &mut packed).unwrap();
    let wb: Vec<bf16> = w32.iter().map(|&v| bf16::from_f32(v)).collect();
    let pw = PackedWeight::pack(&wb, n, k).unwrap();
    let x = values(k, 1);
    let mut c = vec![0f32; n];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let cases = [
        ("f32 rows", WeightData::F32(&w32)),
        ("f32 packed", WeightData::F32Packed(&layout, &packed)),
        ("bf16 rows", WeightData::Bf16(&wb)),
        ("bf16 packed", WeightData::Bf16Packed(&pw)),
    ];
    let mut rates = vec![Vec::new(); cases.len() + 1];
    for _ in 0..7 {
        for (rate, (_, data)) in rates.iter_mut().zip(&cases) {
            let w = Weight { n, k, data: *data };
            let t0 = std::time::Instant::now();
            pool.install(|| gemv(f, 1, &x, &w, None, &mut c, false, 2).unwrap());
            rate.push(w.bytes() as f64 / t0.elapsed().as_secs_f64() / 1e9);
        }
        let t0 = std::time::Instant::now();
        let s: f32 = pool.install(|| packed.par_chunks(packed.len().div_ceil(2)).map(|h| sum(f, h)).sum());
        rates[cases.len()].push((packed.len() * 4) as f64 / t0.elapsed().as_secs_f64() / 1e9);
        assert!(s.is_finite());
    }
    let names = cases.iter().map(|c| c.0).chain(["plain read, no prefetch"]);
    for (name, mut r) in names.zip(rates) {
        r.sort_by(f64::total_cmp);
        println!("{name:12} m=1 t=2, from memory: {:5.1} GB/s (median of 7; {:.1}..{:.1})", r[3], r[0], r[6]);
    }
}
