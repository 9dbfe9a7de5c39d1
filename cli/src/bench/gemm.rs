//! `npurt bench gemm`: f32 GEMM at the BERT shapes, per tier, with the weight prepacked
//! and on the bf16 unit, optionally against OpenBLAS through NumPy in the same run; every
//! f32 figure also as a percentage of the FMA peak measured at the start (`bench peak`), or
//! with `--paired` right after each timed run, on a host whose load moves within seconds;
//! every bf16 figure as a percentage of the peak of the unit the bf16 product runs on (AMX
//! tiles, else AVX-512-BF16 dot products, or the FMA path where the weights widen into it)
//! measured at the start. The global `--precision` picks the columns: `f32`
//! the f32 ones, `bf16` the bf16 one, otherwise (`auto`, the default) both; `int8` times
//! the int8 product against bf16 instead (`gemm_i8.rs`).

use super::common::median;
use super::peak::parse_isa;
use crate::progress;
use crate::values::positive;
use backend_cpu::Isa;
use backend_cpu::features::CpuFeatures;
use clap::{Args, ValueEnum};
use npurt::{DType, Error, Op, Result, Runtime, RuntimeConfig, Tensor, Tier};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// `npurt bench gemm [--precision f32|bf16] [--peer numpy] [--runs N] [--all-tiers] [--isa ISA] [--peak GFLOPS] [--paired] [--shape MxKxN]... [--json FILE]`
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
    /// Run npurt's kernels on this path even where the CPU has a wider one: avx512, avx2 or
    /// scalar (default: NPURT_CPU_ISA, else the widest)
    #[arg(long, value_name = "ISA", value_parser = parse_isa)]
    isa: Option<Isa>,
    /// The FMA peak (GFLOP/s, all threads) the percentages refer to, instead of measuring
    /// it at the start of the run
    #[arg(long, value_name = "GFLOPS", value_parser = positive_f64, allow_negative_numbers = true)]
    peak: Option<f64>,
    /// Follow each timed f32 run by a measurement of the FMA peak (same path and threads,
    /// as long as the run, at least 20 ms), and report the median over the runs of each
    /// run's share of the peak measured right after it: the figure that holds on a host
    /// whose other load comes and goes
    #[arg(long, conflicts_with = "peak")]
    paired: bool,
    /// Only this shape of the table (MxKxN, or BxMxKxN for a batched one; repeatable),
    /// e.g. to profile one product
    #[arg(long = "shape", value_name = "SHAPE", value_parser = parse_shape)]
    shapes: Vec<Shape>,
    /// Also write the figures as JSON to FILE
    #[arg(long, value_name = "FILE", value_parser = crate::outputs::output_file)]
    json: Option<String>,
}

/// A shape of [`SHAPES`], named as the table prints it.
fn parse_shape(s: &str) -> std::result::Result<Shape, String> {
    let s = s.trim();
    SHAPES.iter().copied().find(|&sh| shape_name(sh) == s).ok_or_else(|| {
        let names: Vec<String> = SHAPES.iter().map(|&sh| shape_name(sh)).collect();
        format!("not a shape of the table; one of {}", names.join(", "))
    })
}

fn positive_f64(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err("expected a positive number".into()),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Peer {
    /// OpenBLAS through NumPy (bench/peers/numpy_gemm.py)
    Numpy,
}

/// A GEMM shape `(m, k, n, batch)`.
pub type Shape = (usize, usize, usize, usize);

/// BERT-Large s512 (m = 512, hidden 1024, ffn 4096, 16 heads of 64), BERT-base s128
/// (m = 128, hidden 768, ffn 3072), MiniLM-L6 s32 (m = 32, hidden 384, ffn 1536) and 1024³.
const SHAPES: &[Shape] = &[
    (512, 1024, 1024, 1),
    (512, 1024, 4096, 1),
    (512, 4096, 1024, 1),
    (512, 64, 512, 16),
    (128, 768, 768, 1),
    (128, 768, 3072, 1),
    (128, 3072, 768, 1),
    (32, 384, 384, 1),
    (32, 384, 1536, 1),
    (32, 1536, 384, 1),
    (1024, 1024, 1024, 1),
];

fn shape_name(s: Shape) -> String {
    if s.3 == 1 { format!("{}x{}x{}", s.0, s.1, s.2) } else { format!("{}x{}x{}x{}", s.3, s.0, s.1, s.2) }
}

/// What follows each timed run with `--paired`: the FMA peak on this path and threads.
#[derive(Clone, Copy)]
struct Probe {
    isa: Isa,
    threads: usize,
}

/// One column's figure at one shape: GFLOP/s (the median of the runs) and, when paired,
/// the median over the runs of each run's share of the peak measured right after it (%).
#[derive(Clone, Copy)]
struct Figure {
    gflops: f64,
    paired_pct: Option<f64>,
}

/// Times `runs` calls of `once` (after one warm-up) doing `flops` each, each followed by a
/// peak measurement when `probe` is given (and then preceded by an untimed call, so that it
/// runs back to back as in a model, not on workers the peak loop left asleep).
fn sample(runs: usize, flops: f64, probe: Option<Probe>, mut once: impl FnMut() -> Result<()>) -> Result<Figure> {
    once()?;
    let (mut t, mut pct) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        if probe.is_some() {
            once()?;
        }
        let t0 = Instant::now();
        once()?;
        let dt = t0.elapsed().as_secs_f64().max(1e-12);
        t.push(dt);
        if let Some(p) = probe {
            let ms = ((dt * 1e3).ceil() as usize).max(20);
            let peak = super::peak::measure(p.isa, p.threads, 1, ms)?;
            pct.push(100.0 * flops / dt / 1e9 / peak.gflops);
        }
    }
    Ok(Figure { gflops: flops / median(&mut t) / 1e9, paired_pct: probe.map(|_| median(&mut pct)) })
}

/// GFLOP/s of an eager f32 MatMul on `tier`, the median of `runs` after one warm-up.
pub fn time_gemm(cfg: &RuntimeConfig, tier: Tier, s: Shape, runs: usize) -> Result<f64> {
    let rt = Runtime::with_config(RuntimeConfig { forced_tier: Some(tier), ..cfg.clone() })?;
    Ok(time_gemm_on(&rt, s, runs, None)?.gflops)
}

/// The runtime an eager column runs on: the configured backend, or the CPU backend forced
/// to `isa`.
fn eager_runtime(cfg: &RuntimeConfig, tier: Tier, isa: Option<Isa>) -> Result<runtime::Runtime> {
    let cfg = RuntimeConfig { forced_tier: Some(tier), ..cfg.clone() };
    match isa {
        None => Ok(Runtime::with_config(cfg)?.inner().clone()),
        Some(isa) => {
            let c =
                backend_cpu::CpuConfig { devices: cfg.cpu_devices, threads: cfg.threads, isa: Some(isa), pin: None };
            let b = backend_cpu::CpuBackend::new(c)?;
            runtime::Runtime::with_backend(Arc::new(b), cfg)
        }
    }
}

/// [`time_gemm`] on `rt`, each run followed by `probe`.
fn time_gemm_on(rt: &runtime::Runtime, s: Shape, runs: usize, probe: Option<Probe>) -> Result<Figure> {
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
    let flops = 2.0 * (m * k * n * b) as f64;
    sample(runs, flops, probe, || rt.execute(&op, &[&a, &bb], &[&c]).map(drop))
}

/// The bf16 unit on a Linear-shaped product (`x[m×k] · wᵀ`, `w` packed once, as a
/// compiled graph does); `None` where the CPU has no AVX-512-BF16, the CPU backend is
/// forced below AVX-512, or the shape is batched.
pub fn time_gemm_bf16(cfg: &RuntimeConfig, s: Shape, runs: usize) -> Option<f64> {
    use backend_cpu::kernels::gemm_bf16;
    let (m, k, n, b) = s;
    let below_avx512 = backend_cpu::features::select(None).map_or(true, |f| f.isa < Isa::Avx512);
    if b != 1 || !gemm_bf16::available() || below_avx512 {
        return None;
    }
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let w: Vec<npurt::bf16> =
        (0..n * k).map(|i| npurt::bf16::from_f32(((i * 104_729) % 1000) as f32 / 1000.0 - 0.5)).collect();
    let pw = gemm_bf16::PackedWeight::pack(&w, n, k).ok()?;
    // The output 64-byte aligned, as the runtime's buffers are (its pool's alignment).
    let mut c_buf = vec![0f32; m * n + 16];
    let off = c_buf.as_ptr().align_offset(64).min(16);
    let c = &mut c_buf[off..off + m * n];
    let threads = cfg.threads.unwrap_or(backend_cpu::features::get().cores);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok()?;
    pool.install(|| {
        let f = backend_cpu::features::get();
        let once = || gemm_bf16::gemm(f, m, &x, &pw, c, false, threads).map_err(|e| Error::backend("cpu", e));
        sample(runs, 2.0 * (m * k * n) as f64, None, once).ok().map(|f| f.gflops)
    })
}

/// The f32 Linear-shaped product (`x[m×k] · wᵀ`) with the weight packed once, as a
/// compiled graph runs it, on the micro-kernel of `isa`, each run followed by `probe`;
/// `None` for batched shapes.
fn time_gemm_prepacked(cfg: &RuntimeConfig, isa: Isa, s: Shape, runs: usize, probe: Option<Probe>) -> Option<Figure> {
    use backend_cpu::kernels::blas;
    use backend_cpu::kernels::gemm_packed::{self, BMatrix, Sgemm, Strided};
    let (m, k, n, b) = s;
    if b != 1 {
        return None;
    }
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5).collect();
    let layout = gemm_packed::PackedBLayout::for_cpu(isa, k, n);
    let mut packed = vec![0f32; layout.len()];
    gemm_packed::pack_b(&layout, &w, 1, k, &mut packed).ok()?;
    let mut c = vec![0f32; m * n];
    let threads = cfg.threads.unwrap_or(backend_cpu::features::get().cores);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok()?;
    pool.install(|| {
        sample(runs, 2.0 * (m * k * n) as f64, probe, || {
            let (a, b) = (Strided { data: &x, rs: k, cs: 1 }, BMatrix::Packed { layout: &layout, data: &packed });
            let g = Sgemm { isa, m, n, k, alpha: 1.0, a, b, beta: 0.0, bias: None, c: &mut c, ldc: n, threads };
            blas::sgemm(g).map_err(|e| Error::backend("cpu", e))
        })
        .ok()
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

/// The peak the percentages refer to: `--peak`, else measured now on `isa` and `threads`
/// (`None` on the scalar path, which has no FMA loop).
fn reference_peak(args: &GemmArgs, isa: Isa, threads: usize) -> Result<Option<(f64, &'static str)>> {
    if let Some(p) = args.peak {
        return Ok(Some((p, "given")));
    }
    if backend_cpu::peak::accumulators(isa).is_none() {
        return Ok(None);
    }
    let p = super::peak::measure(isa, threads, 5, 100)?;
    Ok(Some((p.gflops, "measured")))
}

/// `GF/s (pct %)` of one figure, 21 characters wide: the share of the paired peak where
/// the figure has one, else of `peak`.
fn cell(g: Option<Figure>, peak: Option<f64>) -> String {
    match (g, peak) {
        (Some(Figure { gflops, paired_pct: Some(pct) }), _) => format!("{gflops:>8.1} GF/s ({pct:>3.0} %)"),
        (Some(Figure { gflops, .. }), Some(p)) => format!("{gflops:>8.1} GF/s ({:>3.0} %)", 100.0 * gflops / p),
        (Some(Figure { gflops, .. }), None) => format!("{gflops:>8.1} GF/s       "),
        (None, _) => format!("{:>21}", "-"),
    }
}

/// A figure without a paired peak.
fn plain(gflops: f64) -> Figure {
    Figure { gflops, paired_pct: None }
}

/// A row of the JSON document: one variant at one shape.
fn json_row(s: Shape, variant: &str, isa: Option<Isa>, fig: Figure, peak: Option<f64>) -> serde_json::Value {
    let flops = 2.0 * (s.0 * s.1 * s.2 * s.3) as f64;
    let gflops = fig.gflops;
    serde_json::json!({
        "shape": shape_name(s),
        "m": s.0, "k": s.1, "n": s.2, "batch": s.3,
        "variant": variant,
        "isa": isa.map(Isa::name),
        "gflops": gflops,
        "median_ms": flops / gflops / 1e6,
        "pct_of_peak": peak.map(|p| 100.0 * gflops / p),
        "pct_of_peak_paired": fig.paired_pct,
    })
}

pub fn run(cfg: RuntimeConfig, args: GemmArgs) -> Result<()> {
    if cfg.precision == npurt::Precision::Int8 {
        let shapes: &[Shape] = if args.shapes.is_empty() { SHAPES } else { &args.shapes };
        let bf16 = |s: Shape| time_gemm_bf16(&cfg, s, args.runs);
        return super::gemm_i8::run(&cfg, shapes, args.runs, args.json.as_deref(), &bf16);
    }
    let plan = plan(&cfg, &args)?;
    let columns = measure(&cfg, &plan)?;
    let rows = print_table(&plan, &columns);
    if let Some(path) = &args.json {
        write_json(path, &plan, args.peak.is_some(), rows)?;
    }
    Ok(())
}

/// What the run measures on and against, settled (and printed) before the timings.
struct Plan<'a> {
    runs: usize,
    numpy: bool,
    features: &'static CpuFeatures,
    isa: Isa,
    threads: usize,
    tiers: Vec<Tier>,
    shapes: &'a [Shape],
    /// One runtime per tier, for the eager columns.
    eager: Vec<runtime::Runtime>,
    on_cpu: bool,
    /// The f32 columns are timed.
    f32: bool,
    /// The bf16 column is timed.
    bf16: bool,
    /// The FMA peak the f32 percentages refer to.
    peak: Option<f64>,
    /// The bf16 unit's peak (all threads) the bf16 percentages refer to, and the unit.
    bf16_peak: Option<(f64, &'static str)>,
    /// [`Plan::peak`] where the eager columns run on the CPU.
    eager_peak: Option<f64>,
    probe: Option<Probe>,
}

/// The peer's GFLOP/s per shape name and its BLAS configuration line.
type PeerFigures = (BTreeMap<String, f64>, String);

/// The figures of every column: the peer before and after ours, then one column per tier,
/// the prepacked one and the bf16 one.
struct Columns {
    peer_before: Option<PeerFigures>,
    peer_after: Option<PeerFigures>,
    ours: Vec<Vec<Figure>>,
    prepacked: Vec<Option<Figure>>,
    bf16: Vec<Option<f64>>,
}

/// Settles the tiers, ISA, threads, shapes and peak, and prints the header lines.
fn plan<'a>(cfg: &RuntimeConfig, args: &'a GemmArgs) -> Result<Plan<'a>> {
    let runs = args.runs;
    let numpy = args.peer == Some(Peer::Numpy);
    let only = cfg.precision;
    let f32 = only != npurt::Precision::Bf16;
    let tiers: Vec<Tier> = match (f32, args.all_tiers) {
        (false, _) => Vec::new(),
        (true, true) => vec![Tier::HighPerformance, Tier::Generic],
        (true, false) => vec![Tier::HighPerformance],
    };
    let f = backend_cpu::features::select(args.isa).map_err(backend_cpu::CpuError::from)?;
    let isa = f.isa;
    let bf16 = only != npurt::Precision::F32 && isa == Isa::Avx512 && f.avx512bf16;
    if only == npurt::Precision::Bf16 && !bf16 {
        let why = f.slow_precision(DType::BF16).unwrap_or_else(|| "the bf16 unit is not in use".into());
        return Err(Error::Unsupported(format!("no bf16 GEMM to time here: {why}")));
    }
    let threads = cfg.threads.unwrap_or(f.cores);
    let shapes: &[Shape] = if args.shapes.is_empty() { SHAPES } else { &args.shapes };
    let eager: Vec<runtime::Runtime> = tiers.iter().map(|&t| eager_runtime(cfg, t, args.isa)).collect::<Result<_>>()?;
    let on_cpu = eager.iter().all(|rt| rt.backend_name() == "cpu");
    let forced = if f.forced { format!(" (forced; the CPU runs up to {})", f.widest) } else { String::new() };
    let what = match (f32, bf16) {
        (true, true) => "f32 and bf16",
        (false, _) => "bf16",
        (true, false) => "f32",
    };
    println!("GEMM {what}, median of {runs} runs, {threads} threads, ISA {isa}{forced}");
    let peak = if f32 { reference_peak(args, isa, threads)? } else { None };
    match peak {
        Some((p, how)) => {
            println!("FMA peak ({how}, {isa}, {threads} threads): {p:.1} GFLOP/s; (%) of f32 = share of it")
        }
        None if f32 => println!("no FMA peak on the {isa} path (give --peak GFLOPS for percentages)"),
        None => {}
    }
    let peak = peak.map(|p| p.0);
    let bf16_peak =
        if bf16 { super::peak::bf16_peak(f, threads, 5, 100)?.map(|p| (p.gflops, p.unit.name())) } else { None };
    if let Some((p, unit)) = bf16_peak {
        println!("bf16 peak (measured, {unit}, {threads} threads): {p:.1} GFLOP/s; (%) of bf16 = share of it");
    }
    let probe = (args.paired && backend_cpu::peak::accumulators(isa).is_some()).then_some(Probe { isa, threads });
    if probe.is_some() {
        println!(
            "--paired: (%) of the f32 columns = median over the runs of each run's share of the FMA peak measured right after it"
        );
    }
    if !on_cpu {
        println!("eager columns run on the {} backend: no percentage of the CPU's peak", eager[0].backend_name());
    }
    let eager_peak = if on_cpu { peak } else { None };
    Ok(Plan {
        runs,
        numpy,
        features: f,
        isa,
        threads,
        tiers,
        shapes,
        eager,
        on_cpu,
        f32,
        bf16,
        peak,
        bf16_peak,
        eager_peak,
        probe,
    })
}

/// Times every column at every shape, the peer (when asked for) before and after ours, so
/// that drift on a shared machine shows up.
fn measure(cfg: &RuntimeConfig, plan: &Plan) -> Result<Columns> {
    let (runs, isa, shapes) = (plan.runs, plan.isa, plan.shapes);
    let steps = (plan.tiers.len() + 2) * shapes.len() + if plan.numpy { 2 } else { 0 };
    let pb = progress::bar(steps as u64, "GEMM");
    let peer = |pb: &indicatif::ProgressBar| -> Result<Option<PeerFigures>> {
        if !plan.numpy {
            return Ok(None);
        }
        pb.set_message("NumPy/OpenBLAS");
        let r = numpy_peer(runs)?;
        pb.inc(1);
        Ok(Some(r))
    };
    let peer_before = peer(&pb)?;
    let mut ours: Vec<Vec<Figure>> = Vec::new();
    let eager_probe = plan.probe.filter(|_| plan.on_cpu);
    for (t, rt) in plan.tiers.iter().zip(&plan.eager) {
        pb.set_message(format!("npurt {t}"));
        ours.push(
            shapes
                .iter()
                .map(|&s| time_gemm_on(rt, s, runs, eager_probe).inspect(|_| pb.inc(1)))
                .collect::<Result<_>>()?,
        );
    }
    pb.set_message("f32 prepacked");
    let prepacked: Vec<Option<Figure>> = shapes
        .iter()
        .map(|&s| if plan.f32 { time_gemm_prepacked(cfg, isa, s, runs, plan.probe) } else { None })
        .inspect(|_| pb.inc(1))
        .collect();
    pb.set_message("bf16");
    let bf16: Vec<Option<f64>> = if plan.bf16 {
        shapes.iter().map(|&s| time_gemm_bf16(cfg, s, runs)).inspect(|_| pb.inc(1)).collect()
    } else {
        shapes.iter().map(|_| None).inspect(|_| pb.inc(1)).collect()
    };
    let peer_after = peer(&pb)?;
    pb.finish_and_clear();
    Ok(Columns { peer_before, peer_after, ours, prepacked, bf16 })
}

/// Prints the table, one row per shape, and returns the JSON rows of its figures.
fn print_table(plan: &Plan, cols: &Columns) -> Vec<serde_json::Value> {
    let (isa, peak, eager_peak) = (plan.isa, plan.peak, plan.eager_peak);
    let (p1, p2, ours, pre, bf16) = (&cols.peer_before, &cols.peer_after, &cols.ours, &cols.prepacked, &cols.bf16);
    if let Some((_, blas)) = p1 {
        println!("peer: NumPy/OpenBLAS ({blas})");
    }
    print!("{:<18}", "shape");
    for t in &plan.tiers {
        print!(" {:>21}", format!("npurt {t}"));
    }
    if plan.f32 {
        print!(" {:>21}", "f32 prepacked");
    }
    if p1.is_some() {
        print!(" {:>21} {:>8} {:>8}", "OpenBLAS", "ratio", "pre/BLAS");
    }
    let has_bf16 = bf16.iter().any(Option::is_some);
    if has_bf16 {
        print!(" {:>21}", "npurt bf16");
    }
    println!();
    let mut rows = Vec::new();
    for (i, &s) in plan.shapes.iter().enumerate() {
        let name = shape_name(s);
        print!("{name:<18}");
        for (t, o) in plan.tiers.iter().zip(ours) {
            print!(" {}", cell(Some(o[i]), eager_peak));
            let variant = if *t == Tier::HighPerformance { "fast" } else { "generic" };
            rows.push(json_row(s, variant, plan.on_cpu.then_some(isa), o[i], eager_peak));
        }
        if plan.f32 {
            print!(" {}", cell(pre[i], peak));
        }
        if let Some(g) = pre[i] {
            rows.push(json_row(s, "prepacked", Some(isa), g, peak));
        }
        if let (Some((a, _)), Some((b, _))) = (p1, p2) {
            let mut v: Vec<f64> = [a.get(&name), b.get(&name)].into_iter().flatten().copied().collect();
            let peer_g = median(&mut v);
            match ours.first() {
                Some(o) => print!(" {} {:>7.2}x", cell(Some(plain(peer_g)), peak), o[i].gflops / peer_g),
                None => print!(" {} {:>8}", cell(Some(plain(peer_g)), peak), "-"),
            }
            match pre[i] {
                Some(g) => print!(" {:>7.2}x", g.gflops / peer_g),
                None => print!(" {:>8}", "-"),
            }
            rows.push(json_row(s, "openblas", None, plain(peer_g), peak));
        }
        if has_bf16 {
            // bf16 against the bf16 unit's own measured peak.
            let (bpeak, unit) = (plan.bf16_peak.map(|p| p.0), plan.bf16_peak.map_or(isa.name(), |p| p.1));
            print!(" {}", cell(bf16[i].map(plain), bpeak));
            if let Some(g) = bf16[i] {
                let mut row = json_row(s, "bf16", Some(isa), plain(g), bpeak);
                row["unit"] = unit.into();
                rows.push(row);
            }
        }
        println!();
    }
    rows
}

/// Writes the run's settings and `rows` as the JSON document of `--json`.
fn write_json(path: &str, plan: &Plan, peak_given: bool, rows: Vec<serde_json::Value>) -> Result<()> {
    let doc = serde_json::json!({
        "cpu": plan.features.model,
        "isa": plan.isa.name(),
        "isa_forced": plan.features.forced,
        "threads": plan.threads,
        "runs": plan.runs,
        "peak_gflops": plan.peak,
        "bf16_peak_gflops": plan.bf16_peak.map(|p| p.0),
        "bf16_peak_unit": plan.bf16_peak.map(|p| p.1),
        "peak_source": if peak_given { "given" } else { "measured" },
        "paired": plan.probe.is_some(),
        "rows": rows,
    });
    crate::outputs::write_json(path, &doc)
}
