//! `npurt bench gemm`: f32 GEMM at the BERT shapes, per tier, with the weight prepacked
//! and on the bf16 unit, optionally against OpenBLAS through NumPy in the same run.

use super::common::median;
use crate::cli::progress;
use crate::cli::values::positive;
use clap::{Args, ValueEnum};
use npurt::{DType, Error, Op, Result, Runtime, RuntimeConfig, Tensor, Tier};
use std::collections::BTreeMap;
use std::time::Instant;

/// `npurt bench gemm [--peer numpy] [--runs N] [--all-tiers]`
#[derive(Args)]
pub struct GemmArgs {
    /// Time a peer in the same run, before and after npurt
    #[arg(long, value_name = "PEER")]
    peer: Option<Peer>,
    /// Timed runs per shape (the median is reported)
    #[arg(long, value_name = "N", default_value = "9", value_parser = positive, allow_negative_numbers = true)]
    runs: usize,
    /// The generic tier too, next to the high-performance one
    #[arg(long)]
    all_tiers: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Peer {
    /// OpenBLAS through NumPy (bench/peers/numpy_gemm.py)
    Numpy,
}

/// A GEMM shape `(m, k, n, batch)`.
pub type Shape = (usize, usize, usize, usize);

/// BERT-Large s512 (m = 512, hidden 1024, ffn 4096, 16 heads of 64), BERT-base s128
/// (m = 128, hidden 768, ffn 3072) and 1024³.
const SHAPES: &[Shape] = &[
    (512, 1024, 1024, 1),
    (512, 1024, 4096, 1),
    (512, 4096, 1024, 1),
    (512, 64, 512, 16),
    (128, 768, 768, 1),
    (128, 768, 3072, 1),
    (128, 3072, 768, 1),
    (1024, 1024, 1024, 1),
];

fn shape_name(s: Shape) -> String {
    if s.3 == 1 { format!("{}x{}x{}", s.0, s.1, s.2) } else { format!("{}x{}x{}x{}", s.3, s.0, s.1, s.2) }
}

/// GFLOP/s of an eager f32 MatMul on `tier`, the median of `runs` after one warm-up.
pub fn time_gemm(cfg: &RuntimeConfig, tier: Tier, s: Shape, runs: usize) -> Result<f64> {
    let rt = Runtime::with_config(RuntimeConfig { forced_tier: Some(tier), ..cfg.clone() })?;
    let (m, k, n, b) = s;
    let dims = |r: usize, c: usize| if b == 1 { vec![r, c] } else { vec![b, r, c] };
    let fill = |d: Vec<usize>| -> Result<Tensor> {
        let len: usize = d.iter().product();
        let v: Vec<f32> = (0..len).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        rt.from_slice(&v, d, 0)
    };
    let (a, bb) = (fill(dims(m, k))?, fill(dims(k, n))?);
    let c = rt.empty(DType::F32, dims(m, n), 0)?;
    let op = Op::MatMul { trans_a: false, trans_b: false };
    rt.execute(&op, &[&a, &bb], &[&c])?;
    let mut t = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        rt.execute(&op, &[&a, &bb], &[&c])?;
        t.push(t0.elapsed().as_secs_f64());
    }
    let flops = 2.0 * (m * k * n * b) as f64;
    Ok(flops / median(&mut t) / 1e9)
}

/// The bf16 unit on a Linear-shaped product (`x[m×k] · wᵀ`, `w` packed once, as a
/// compiled graph does); `None` where the CPU has no AVX-512-BF16 or the shape is batched.
pub fn time_gemm_bf16(cfg: &RuntimeConfig, s: Shape, runs: usize) -> Option<f64> {
    use npurt::cpu::kernels::gemm_bf16;
    let (m, k, n, b) = s;
    if b != 1 || !gemm_bf16::available() {
        return None;
    }
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let w: Vec<npurt::bf16> =
        (0..n * k).map(|i| npurt::bf16::from_f32(((i * 104_729) % 1000) as f32 / 1000.0 - 0.5)).collect();
    let pw = gemm_bf16::PackedWeight::pack(&w, n, k).ok()?;
    let mut c = vec![0f32; m * n];
    let threads = cfg.threads.unwrap_or(npurt::cpu::features::get().cores);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok()?;
    pool.install(|| {
        gemm_bf16::gemm(m, &x, &pw, &mut c, false, threads).ok()?;
        let mut t = Vec::new();
        for _ in 0..runs {
            let t0 = Instant::now();
            gemm_bf16::gemm(m, &x, &pw, &mut c, false, threads).ok()?;
            t.push(t0.elapsed().as_secs_f64());
        }
        Some(2.0 * (m * k * n) as f64 / median(&mut t) / 1e9)
    })
}

/// The f32 Linear-shaped product (`x[m×k] · wᵀ`) with the weight packed once, as a
/// compiled graph runs it; `None` for batched shapes.
fn time_gemm_prepacked(cfg: &RuntimeConfig, s: Shape, runs: usize) -> Option<f64> {
    use npurt::cpu::kernels::gemm_packed;
    let (m, k, n, b) = s;
    if b != 1 {
        return None;
    }
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5).collect();
    let layout = gemm_packed::PackedBLayout::new(k, n);
    let mut packed = vec![0f32; layout.len()];
    gemm_packed::pack_b(&layout, &w, 1, k, &mut packed).ok()?;
    let mut c = vec![0f32; m * n];
    let threads = cfg.threads.unwrap_or(npurt::cpu::features::get().cores);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok()?;
    pool.install(|| {
        let mut once = || gemm_packed::sgemm_prepacked(m, 1.0, &x, k, 1, &layout, &packed, None, &mut c, n, threads);
        once();
        let mut t = Vec::new();
        for _ in 0..runs {
            let t0 = Instant::now();
            once();
            t.push(t0.elapsed().as_secs_f64());
        }
        Some(2.0 * (m * k * n) as f64 / median(&mut t) / 1e9)
    })
}

/// Runs bench/peers/numpy_gemm.py and returns GFLOP/s per shape name.
fn numpy_peer(runs: usize) -> Result<(BTreeMap<String, f64>, String)> {
    let script = std::path::Path::new("bench/peers/numpy_gemm.py");
    if !script.exists() {
        return Err(Error::Unsupported("bench/peers/numpy_gemm.py not found (run from the repository root)".into()));
    }
    let out_json = std::env::temp_dir().join(format!("npurt-numpy-{}.json", std::process::id()));
    let o = std::process::Command::new("python3")
        .arg(script)
        .arg("--repeat")
        .arg(runs.to_string())
        .arg("--json")
        .arg(&out_json)
        .env_remove("OPENBLAS_CORETYPE")
        .output()
        .map_err(|e| Error::io("python3", e))?;
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    if !o.status.success() {
        return Err(Error::format(format!("numpy peer failed: {}{}", text, String::from_utf8_lossy(&o.stderr))));
    }
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json)?).map_err(|e| Error::format_from("numpy peer", e))?;
    let _ = std::fs::remove_file(&out_json);
    let mut m = BTreeMap::new();
    if let Some(arr) = j.get("results").and_then(|r| r.as_array()) {
        for r in arr {
            if let (Some(name), Some(g)) =
                (r.get("shape").and_then(|s| s.as_str()), r.get("gflops").and_then(|g| g.as_f64()))
            {
                m.insert(name.to_string(), g);
            }
        }
    }
    let blas = text
        .lines()
        .filter(|l| l.to_lowercase().contains("openblas") || l.contains("kernel") || l.contains("architecture"))
        .collect::<Vec<_>>()
        .join("; ");
    Ok((m, blas))
}

pub fn run(cfg: RuntimeConfig, args: GemmArgs) -> Result<()> {
    let runs = args.runs;
    let numpy = args.peer == Some(Peer::Numpy);
    let tiers: Vec<Tier> =
        if args.all_tiers { vec![Tier::HighPerformance, Tier::Generic] } else { vec![Tier::HighPerformance] };
    let f = npurt::cpu::features::get();
    println!("GEMM f32, median of {runs} runs, {} threads, ISA {:?}", cfg.threads.unwrap_or(f.cores), f.isa);
    let steps = (tiers.len() + 2) * SHAPES.len() + if numpy { 2 } else { 0 };
    let pb = progress::bar(steps as u64, "GEMM");
    // Peer before and after ours, so drift on a shared machine shows up.
    let peer = |pb: &indicatif::ProgressBar| -> Result<Option<(BTreeMap<String, f64>, String)>> {
        if !numpy {
            return Ok(None);
        }
        pb.set_message("NumPy/OpenBLAS");
        let r = numpy_peer(runs)?;
        pb.inc(1);
        Ok(Some(r))
    };
    let p1 = peer(&pb)?;
    let mut ours: Vec<Vec<f64>> = Vec::new();
    for &t in &tiers {
        pb.set_message(format!("npurt {t}"));
        ours.push(SHAPES.iter().map(|&s| time_gemm(&cfg, t, s, runs).inspect(|_| pb.inc(1))).collect::<Result<_>>()?);
    }
    pb.set_message("f32 prepacked");
    let pre: Vec<Option<f64>> =
        SHAPES.iter().map(|&s| time_gemm_prepacked(&cfg, s, runs)).inspect(|_| pb.inc(1)).collect();
    pb.set_message("bf16");
    let bf16: Vec<Option<f64>> = SHAPES.iter().map(|&s| time_gemm_bf16(&cfg, s, runs)).inspect(|_| pb.inc(1)).collect();
    let p2 = peer(&pb)?;
    pb.finish_and_clear();
    if let Some((_, blas)) = &p1 {
        println!("peer: NumPy/OpenBLAS ({blas})");
    }
    print!("{:<18}", "shape");
    for t in &tiers {
        print!(" {:>14}", format!("npurt {t}"));
    }
    print!(" {:>15}", "f32 prepacked");
    if p1.is_some() {
        print!(" {:>14} {:>8} {:>8}", "OpenBLAS", "ratio", "pre/BLAS");
    }
    let has_bf16 = bf16.iter().any(Option::is_some);
    if has_bf16 {
        print!(" {:>14}", "npurt bf16");
    }
    println!();
    for (i, &s) in SHAPES.iter().enumerate() {
        let name = shape_name(s);
        print!("{name:<18}");
        for o in &ours {
            print!(" {:>10.1} GF/s", o[i]);
        }
        match pre[i] {
            Some(g) => print!(" {g:>10.1} GF/s"),
            None => print!(" {:>15}", "-"),
        }
        if let (Some((a, _)), Some((b, _))) = (&p1, &p2) {
            let mut v: Vec<f64> = [a.get(&name), b.get(&name)].into_iter().flatten().copied().collect();
            let peer_g = median(&mut v);
            print!(" {:>10.1} GF/s {:>7.2}x", peer_g, ours[0][i] / peer_g);
            match pre[i] {
                Some(g) => print!(" {:>7.2}x", g / peer_g),
                None => print!(" {:>8}", "-"),
            }
        }
        if has_bf16 {
            match bf16[i] {
                Some(g) => print!(" {g:>10.1} GF/s"),
                None => print!(" {:>14}", "-"),
            }
        }
        println!();
    }
    Ok(())
}
