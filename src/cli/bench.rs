//! `npurt bench`: GEMM against OpenBLAS (NumPy) and BERT with the seed's ablation.

use super::Common;
use npurt::models::bert::{self, BertConfig, Weights};
use npurt::models::safetensors::SafetensorsFile;
use npurt::{DType, Error, Op, Optimizations, Precision, Result, Runtime, RuntimeConfig, Tensor, Tier};
use runtime::graph::{CompileOptions, CompiledGraph, RunProfile};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(common: Common) -> Result<()> {
    if has(&common.rest, "-h") || has(&common.rest, "--help") {
        println!("{}", super::USAGE);
        return Ok(());
    }
    let mut rest = common.rest.clone().into_iter();
    match rest.next().as_deref() {
        Some("gemm") => gemm(common.config, rest.collect()),
        Some("bert") => bert_cmd(common.config, rest.collect()),
        other => Err(Error::Config(format!("bench: expected `gemm` or `bert`, got {other:?}"))),
    }
}

pub(super) fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}
pub(super) fn has(args: &[String], name: &str) -> bool {
    args.iter().any(|a| a == name)
}

pub(super) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Peak resident set size of this process (VmHWM), bytes.
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(l.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

// ---------------- GEMM ----------------

/// BERT-Large s512 (m = 512, hidden 1024, ffn 4096, 16 heads of 64), BERT-base s128
/// (m = 128, hidden 768, ffn 3072) and 1024³; `(m, k, n, batch)`.
const SHAPES: &[(usize, usize, usize, usize)] = &[
    (512, 1024, 1024, 1),
    (512, 1024, 4096, 1),
    (512, 4096, 1024, 1),
    (512, 64, 512, 16),
    (128, 768, 768, 1),
    (128, 768, 3072, 1),
    (128, 3072, 768, 1),
    (1024, 1024, 1024, 1),
];

fn shape_name(s: (usize, usize, usize, usize)) -> String {
    if s.3 == 1 { format!("{}x{}x{}", s.0, s.1, s.2) } else { format!("{}x{}x{}x{}", s.3, s.0, s.1, s.2) }
}

pub(super) fn time_gemm(cfg: &RuntimeConfig, tier: Tier, s: (usize, usize, usize, usize), runs: usize) -> Result<f64> {
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
pub(super) fn time_gemm_bf16(cfg: &RuntimeConfig, s: (usize, usize, usize, usize), runs: usize) -> Option<f64> {
    use backend_cpu::kernels::gemm_bf16;
    let (m, k, n, b) = s;
    if b != 1 || !gemm_bf16::available() {
        return None;
    }
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let w: Vec<npurt::bf16> =
        (0..n * k).map(|i| npurt::bf16::from_f32(((i * 104_729) % 1000) as f32 / 1000.0 - 0.5)).collect();
    let pw = gemm_bf16::PackedWeight::pack(&w, n, k).ok()?;
    let mut c = vec![0f32; m * n];
    let threads = cfg.threads.unwrap_or(backend_cpu::features::get().cores);
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
pub(super) fn time_gemm_prepacked(cfg: &RuntimeConfig, s: (usize, usize, usize, usize), runs: usize) -> Option<f64> {
    use backend_cpu::kernels::gemm_packed;
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
    let threads = cfg.threads.unwrap_or(backend_cpu::features::get().cores);
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
        return Err(Error::Io("bench/peers/numpy_gemm.py not found (run from the repository root)".into()));
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
        .map_err(|e| Error::Io(format!("python3: {e}")))?;
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    if !o.status.success() {
        return Err(Error::Io(format!("numpy peer failed: {}{}", text, String::from_utf8_lossy(&o.stderr))));
    }
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json)?).map_err(|e| Error::Io(e.to_string()))?;
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

fn gemm(cfg: RuntimeConfig, args: Vec<String>) -> Result<()> {
    let runs: usize = flag(&args, "--runs").and_then(|v| v.parse().ok()).unwrap_or(9);
    let peer = flag(&args, "--peer");
    let tiers: Vec<Tier> = if has(&args, "--all-tiers") {
        vec![Tier::HighPerformance, Tier::Generic]
    } else {
        vec![Tier::HighPerformance]
    };
    let f = backend_cpu::features::get();
    println!("GEMM f32, median of {runs} runs, {} threads, ISA {:?}", cfg.threads.unwrap_or(f.cores), f.isa);
    // Peer before and after ours, so drift on a shared machine shows up.
    let p1 = if peer.as_deref() == Some("numpy") { Some(numpy_peer(runs)?) } else { None };
    let mut ours: Vec<Vec<f64>> = Vec::new();
    for &t in &tiers {
        ours.push(SHAPES.iter().map(|&s| time_gemm(&cfg, t, s, runs)).collect::<Result<_>>()?);
    }
    let pre: Vec<Option<f64>> = SHAPES.iter().map(|&s| time_gemm_prepacked(&cfg, s, runs)).collect();
    let bf16: Vec<Option<f64>> = SHAPES.iter().map(|&s| time_gemm_bf16(&cfg, s, runs)).collect();
    let p2 = if peer.as_deref() == Some("numpy") { Some(numpy_peer(runs)?) } else { None };
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

// ---------------- BERT ----------------

/// The seed's ablation, cumulative.
const CONFIGS: &[&str] = &["none", "+pool", "+reuse", "+parallel", "+mapping"];

fn config_for(base: &RuntimeConfig, name: &str) -> Result<RuntimeConfig> {
    let steps = CONFIGS
        .iter()
        .position(|c| *c == name)
        .ok_or_else(|| Error::Config(format!("unknown configuration {name:?}")))?;
    let mut o = Optimizations::ALL_OFF;
    o.memory_pool = steps >= 1;
    o.memory_reuse = steps >= 2;
    o.parallel_scheduling = steps >= 3;
    o.hardware_mapping = steps >= 4;
    let mut c = base.clone();
    c.optimizations = o;
    c.pool.reuse = true; // the pool's own caching follows `memory_pool`
    if !o.hardware_mapping && c.forced_tier.is_none() {
        c.forced_tier = Some(Tier::Generic);
    }
    Ok(c)
}

/// The model `--model` names: a preset (random weights), or a Hugging Face directory
/// (`config.json`, and `model.safetensors` when present: its weights, memory-mapped) or a
/// `config.json` file (random weights).
pub(super) struct Model {
    pub(super) config: BertConfig,
    file: Option<Arc<SafetensorsFile>>,
}

impl Model {
    /// Random weights from a fixed seed unless the directory has its own.
    fn weights(&self) -> Weights {
        match &self.file {
            Some(f) => Weights::File(f.clone()),
            None => Weights::Random(42),
        }
    }
}

fn bert_model(args: &[String]) -> Result<Model> {
    let model = flag(args, "--model").unwrap_or_else(|| "bert-large".into());
    if let Some(config) = BertConfig::preset(&model) {
        return Ok(Model { config, file: None });
    }
    let p = std::path::Path::new(&model);
    let file = if p.is_dir() { p.join("config.json") } else { p.to_path_buf() };
    let config = BertConfig::from_file(file)?;
    let st = p.join("model.safetensors");
    let file = if p.is_dir() && st.is_file() {
        log::info!("weights from {}", st.display());
        Some(Arc::new(SafetensorsFile::open(&st).map_err(|e| Error::Io(format!("{}: {e}", st.display())))?))
    } else {
        None
    };
    Ok(Model { config, file })
}

struct BertRun {
    name: String,
    median: Duration,
    min: Duration,
    max: Duration,
    pool_peak: usize,
    rss_peak: Option<u64>,
    arena: Option<(usize, usize)>,
    streams: usize,
    util: Vec<(String, f64, f64)>,
    profile: RunProfile,
}

fn utilisation(rt: &Runtime, p: &RunProfile) -> Vec<(String, f64, f64)> {
    let Ok(info) = rt.device_info(0) else { return Vec::new() };
    let mut per: BTreeMap<&str, (f64, f64, f64)> = BTreeMap::new();
    for n in &p.nodes {
        let e = per.entry(n.unit.label).or_default();
        e.0 += n.elapsed.as_secs_f64();
        e.1 += n.flops as f64;
        e.2 += n.bytes as f64;
    }
    per.into_iter()
        .map(|(label, (t, f, b))| {
            let peak = info.units.iter().find(|u| u.unit.label == label);
            let (c, bw) = match peak {
                Some(u) if t > 0.0 => (f / t / u.peak_flops, b / t / u.peak_bytes_per_s),
                _ => (0.0, 0.0),
            };
            (label.to_string(), c, bw)
        })
        .collect()
}

/// A compiled BERT ready to run, with its inputs.
pub(super) struct Prepared {
    pub(super) rt: Runtime,
    pub(super) cg: CompiledGraph,
    pub(super) inputs: Vec<Tensor>,
}

fn prepare(base: &RuntimeConfig, cname: &str, bm: &Model, batch: usize, seq: usize) -> Result<Prepared> {
    prepare_with(base, cname, bm, batch, seq, runtime::graph::DEFAULT_MAX_ARENAS)
}

/// [`prepare`] with at most `max_arenas` runs of the graph in flight at once.
pub(super) fn prepare_with(
    base: &RuntimeConfig,
    cname: &str,
    bm: &Model,
    batch: usize,
    seq: usize,
    max_arenas: usize,
) -> Result<Prepared> {
    let cfg = config_for(base, cname)?;
    let rt = Runtime::with_config(cfg.clone())?;
    let t_build = Instant::now();
    let bg = bert::build(&bm.config, bm.weights(), batch, seq)?;
    let options = CompileOptions { max_arenas, ..CompileOptions::from_config(&cfg, 0) };
    let cg = CompiledGraph::compile_owned(&rt, bg.graph, options)?;
    log::info!("{cname}: built and compiled in {:.2} s", t_build.elapsed().as_secs_f64());
    let inputs = bert_inputs(&rt, bm, batch, seq, 0)?;
    Ok(Prepared { rt, cg, inputs })
}

/// Token ids, token types and attention mask; `seed` varies the ids and pads the end of
/// the last sequence by `seed % 4` tokens (seed 0: no padding).
pub(super) fn bert_inputs(rt: &Runtime, bm: &Model, batch: usize, seq: usize, seed: usize) -> Result<Vec<Tensor>> {
    let bc = &bm.config;
    // Token ids past BERT's special tokens (101..) where the vocabulary has room, else any id.
    let (first, span) = if bc.vocab_size > 101 { (101, bc.vocab_size - 101) } else { (0, bc.vocab_size.max(1)) };
    let n = batch * seq;
    let ids: Vec<i64> = (0..n).map(|i| (first + (i * 7919 + seed * 104_729) % span) as i64).collect();
    let tt = vec![0i64; n];
    let pad = (seed % 4).min(seq.saturating_sub(1));
    let mask: Vec<f32> = (0..n).map(|i| if i >= n - pad { 0.0 } else { 1.0 }).collect();
    Ok(vec![
        rt.from_slice(&ids, [batch, seq], 0)?,
        rt.from_slice(&tt, [batch, seq], 0)?,
        rt.from_slice(&mask, [batch, seq], 0)?,
    ])
}

fn run_one(base: &RuntimeConfig, cname: &str, bm: &Model, batch: usize, seq: usize, runs: usize) -> Result<BertRun> {
    let Prepared { rt, cg, inputs } = prepare(base, cname, bm, batch, seq)?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (_, profile) = cg.run_profiled(&refs)?; // warm-up, profiled
    let mut times = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let out = cg.run(&refs)?;
        drop(out);
        times.push(t0.elapsed());
    }
    times.sort();
    let stats = rt.pool_stats(0)?;
    Ok(BertRun {
        name: cname.to_string(),
        median: times[times.len() / 2],
        min: times[0],
        max: times[times.len() - 1],
        pool_peak: stats.peak_total_bytes,
        rss_peak: peak_rss(),
        arena: cg.memory_plan().map(|p| (p.arena_bytes, p.load_bytes)),
        streams: cg.schedule().streams,
        util: utilisation(&rt, &profile),
        profile,
    })
}

/// `--accuracy`: the final hidden states with bf16 weights against f32 on the same
/// weights and inputs (max |diff|, cosine over all values).
fn accuracy(base: &RuntimeConfig, bm: &Model, batch: usize, seq: usize) -> Result<()> {
    let mut outs = Vec::new();
    for p in [Precision::F32, Precision::Bf16] {
        let cfg = RuntimeConfig { precision: p, ..base.clone() };
        let Prepared { cg, inputs, .. } = prepare(&cfg, "+mapping", bm, batch, seq)?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let (o, profile) = cg.run_profiled(&refs)?;
        let mut units: Vec<&str> = profile.nodes.iter().filter(|n| n.op == "Linear").map(|n| n.unit.label).collect();
        units.dedup();
        println!("precision {}: Linear nodes ran on {}", p.name(), units.join(", "));
        outs.push(o[0].to_ndarray::<f32>()?.iter().copied().collect::<Vec<f32>>());
    }
    let (a, b) = (&outs[0], &outs[1]);
    let max = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    println!(
        "bf16 vs f32 final hidden states ({} values): max |diff| {max:.3e}, cosine {:.6}",
        a.len(),
        dot / (na * nb).max(f64::MIN_POSITIVE)
    );
    Ok(())
}

/// Child mode of `--compare-ort` (see compare.rs): the full configuration, compiled and
/// warmed up, timed once per `run` line on stdin; one JSON line per reply.
fn serve(base: &RuntimeConfig, bm: &Model, batch: usize, seq: usize) -> Result<()> {
    let Prepared { rt, cg, inputs } = prepare(base, "+mapping", bm, batch, seq)?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (_, profile) = cg.run_profiled(&refs)?;
    let flops: u64 = profile.nodes.iter().map(|n| n.flops).sum();
    let say = |v: serde_json::Value| -> Result<()> {
        use std::io::Write;
        let mut o = std::io::stdout().lock();
        writeln!(o, "{v}")?;
        o.flush()?;
        Ok(())
    };
    let units: Vec<String> = utilisation(&rt, &profile).into_iter().map(|(u, _, _)| u).collect();
    say(serde_json::json!({"ready": true, "flops": flops, "units": units}))?;
    for line in std::io::stdin().lines() {
        match line?.trim() {
            "run" => {
                let t0 = Instant::now();
                drop(cg.run(&refs)?);
                say(serde_json::json!({"ms": t0.elapsed().as_secs_f64() * 1e3}))?;
            }
            "quit" => break,
            _ => {}
        }
    }
    let pool = rt.pool_stats(0)?.peak_total_bytes;
    say(serde_json::json!({"vmhwm_bytes": peak_rss(), "pool_peak_bytes": pool}))
}

fn to_json(r: &BertRun) -> serde_json::Value {
    serde_json::json!({
        "config": r.name,
        "median_ms": r.median.as_secs_f64() * 1e3,
        "min_ms": r.min.as_secs_f64() * 1e3,
        "max_ms": r.max.as_secs_f64() * 1e3,
        "pool_peak_bytes": r.pool_peak,
        "rss_peak_bytes": r.rss_peak,
        "arena_bytes": r.arena.map(|a| a.0),
        "load_bytes": r.arena.map(|a| a.1),
        "streams": r.streams,
        "utilisation": r.util.iter().map(|(u, c, b)| serde_json::json!({"unit": u, "compute": c, "bandwidth": b})).collect::<Vec<_>>(),
    })
}

fn from_json(
    v: &serde_json::Value,
) -> Option<(String, f64, f64, f64, u64, Option<u64>, Option<(u64, u64)>, u64, String)> {
    let util = v["utilisation"]
        .as_array()?
        .iter()
        .map(|u| format!("{} {:.0}%", u["unit"].as_str().unwrap_or("?"), u["compute"].as_f64().unwrap_or(0.0) * 100.0))
        .collect::<Vec<_>>()
        .join(", ");
    Some((
        v["config"].as_str()?.to_string(),
        v["median_ms"].as_f64()?,
        v["min_ms"].as_f64()?,
        v["max_ms"].as_f64()?,
        v["pool_peak_bytes"].as_u64()?,
        v["rss_peak_bytes"].as_u64(),
        v["arena_bytes"].as_u64().zip(v["load_bytes"].as_u64()),
        v["streams"].as_u64()?,
        util,
    ))
}

fn print_row(v: &serde_json::Value) {
    let Some((name, med, min, max, pool, rss, arena, streams, util)) = from_json(v) else { return };
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!(
        "{:<10} {:>10.1} {:>16} {:>10.0} {:>10} {:>12} {:>7}  {}",
        name,
        med,
        format!("{min:.0}..{max:.0}"),
        mib(pool),
        rss.map_or("?".into(), |r| format!("{:.0}", mib(r))),
        arena.map_or("-".into(), |(a, l)| format!("{:.3}", a as f64 / l.max(1) as f64)),
        streams,
        util
    );
}

fn bert_cmd(base: RuntimeConfig, args: Vec<String>) -> Result<()> {
    if has(&args, "--compare-ort") {
        return super::compare::run(base, args);
    }
    let bm = bert_model(&args)?;
    let bc = &bm.config;
    let seq: usize = flag(&args, "--seq").and_then(|v| v.parse().ok()).unwrap_or(512);
    let batch: usize = flag(&args, "--batch").and_then(|v| v.parse().ok()).unwrap_or(1);
    let runs: usize = flag(&args, "--runs").and_then(|v| v.parse().ok()).unwrap_or(5).max(1);
    let model = flag(&args, "--model").unwrap_or_else(|| "bert-large".into());
    if has(&args, "--accuracy") {
        return accuracy(&base, &bm, batch, seq);
    }
    if has(&args, "--serve") {
        return serve(&base, &bm, batch, seq);
    }
    if let Some(t) = flag(&args, "--concurrent") {
        let threads: usize = t
            .parse()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Error::Config(format!("--concurrent: expected a thread count >= 1, got {t:?}")))?;
        let json = flag(&args, "--json");
        return super::concurrent::run(&base, &bm, &model, batch, seq, runs, threads, json.as_deref());
    }
    // Child mode: one configuration, one JSON line (a fresh process per configuration, so
    // peak RSS belongs to that configuration alone).
    if let Some(c) = flag(&args, "--config") {
        let r = run_one(&base, &c, &bm, batch, seq, runs)?;
        println!("{}", to_json(&r));
        return Ok(());
    }
    let configs: Vec<&str> = if has(&args, "--ablation") { CONFIGS.to_vec() } else { vec!["+mapping"] };
    println!(
        "BERT {model} (hidden {}, {} layers), batch {batch}, seq {seq}, {} parameters; {runs} runs after 1 warm-up; backend {}; precision {}",
        bc.hidden_size,
        bc.num_hidden_layers,
        bc.parameters(),
        base.backend.as_deref().unwrap_or("auto"),
        base.precision.name()
    );
    println!(
        "{:<10} {:>10} {:>16} {:>10} {:>10} {:>12} {:>7}  utilisation (compute, of nominal peak)",
        "config", "median ms", "spread ms", "pool MiB", "RSS MiB", "arena/LOAD", "streams"
    );
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for c in &configs {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["bench", "bert", "--model", &model, "--seq", &seq.to_string(), "--batch", &batch.to_string()]);
        cmd.args(["--runs", &runs.to_string(), "--config", c, "--precision", base.precision.name()]);
        if let Some(b) = &base.backend {
            cmd.args(["--backend", b]);
        }
        let o = cmd.output()?;
        if !o.status.success() {
            return Err(Error::Io(format!("configuration {c} failed: {}", String::from_utf8_lossy(&o.stderr))));
        }
        let line = String::from_utf8_lossy(&o.stdout);
        let v: serde_json::Value =
            serde_json::from_str(line.trim()).map_err(|e| Error::Io(format!("{c}: {e}: {line}")))?;
        print_row(&v);
        rows.push(v);
    }
    if let Some(path) = flag(&args, "--json") {
        let doc = serde_json::json!({"model": model, "batch": batch, "seq": seq, "runs": runs, "rows": rows});
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap_or_default())?;
        println!("wrote {path}");
    }
    if let Some(path) = flag(&args, "--chart") {
        let labels: Vec<String> = rows.iter().map(|r| r["config"].as_str().unwrap_or("?").to_string()).collect();
        let series = vec![
            super::chart::Series {
                name: "latency".into(),
                unit: "ms".into(),
                values: rows.iter().map(|r| r["median_ms"].as_f64().unwrap_or(f64::NAN)).collect(),
            },
            super::chart::Series {
                name: "peak RSS".into(),
                unit: "MiB".into(),
                values: rows
                    .iter()
                    .map(|r| r["rss_peak_bytes"].as_f64().unwrap_or(f64::NAN) / (1u64 << 20) as f64)
                    .collect(),
            },
        ];
        let png = super::chart::bar_chart_png(&format!("BERT {model} seq {seq}: ablation"), &labels, &series, 900, 500);
        std::fs::write(&path, png)?;
        println!("wrote {path}");
    }
    if let Some(path) = flag(&args, "--trace") {
        let r = run_one(&base, configs.last().copied().unwrap_or("+mapping"), &bm, batch, seq, 1)?;
        std::fs::write(&path, r.profile.chrome_trace())?;
        println!("wrote {path} ({} nodes; open in https://ui.perfetto.dev)", r.profile.nodes.len());
        if has(&args, "--profile") {
            for (k, d, f, c) in r.profile.by_op().iter().take(12) {
                println!(
                    "  {k:<40} {c:>4} nodes {:>9.1} ms {:>8.1} GFLOP/s",
                    d.as_secs_f64() * 1e3,
                    *f as f64 / d.as_secs_f64().max(1e-12) / 1e9
                );
            }
        }
    }
    Ok(())
}
