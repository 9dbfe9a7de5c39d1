//! `npurt bench bert`: BERT latency, memory and utilisation, per configuration of the
//! ablation (each in a process of its own), with an optional chart and trace; the other
//! BERT benchmarks (`--accuracy`, `--concurrent`, `--compare-ort`, `--serve`) are chosen
//! by a flag and live in modules of their own. Over acl-emu, each configuration also
//! reports what the emulator counted during its last timed run, and that run's modelled
//! device latency.

use super::common::{CONFIGS, Model, Prepared, peak_rss, prepare, utilisation};
use super::emulator::{EmulatorRun, emulator_json, emulator_read, emulator_reset};
use super::{accuracy, compare_ort, concurrent, serve};
use crate::outputs::{self, output_file};
use crate::values::positive;
use crate::{chart, progress};
use clap::{ArgGroup, Args};
use npurt::{Error, Result, RuntimeConfig, Tensor};
use runtime::graph::RunProfile;
use std::time::{Duration, Instant};

/// `npurt bench bert [--model M] [--seq S] [--batch B] [--runs N] [MODE] [options]`
#[derive(Args)]
#[command(group(ArgGroup::new("mode").args(["accuracy", "concurrent", "compare_ort", "serve", "config"])))]
pub struct BertArgs {
    /// The model: a preset with random weights (bert-large, bert-base, minilm-l6, tiny),
    /// a Hugging Face directory (config.json, and model.safetensors when present) or a
    /// config.json file
    #[arg(long, value_name = "NAME|DIR", default_value = "bert-large", conflicts_with = "compare_ort")]
    model: String,
    /// Tokens per sequence
    #[arg(long, value_name = "S", default_value = "512", value_parser = positive, allow_negative_numbers = true, conflicts_with = "compare_ort")]
    seq: usize,
    /// Sequences per run
    #[arg(long, value_name = "B", default_value = "1", value_parser = positive, allow_negative_numbers = true, conflicts_with = "compare_ort")]
    batch: usize,
    /// Timed runs after the warm-ups (--concurrent: runs per thread; --compare-ort: rounds
    /// per pair)
    #[arg(long, value_name = "N", default_value = "5", value_parser = positive, allow_negative_numbers = true)]
    runs: usize,
    /// The ablation: none, +pool, +reuse, +parallel, +mapping (cumulative), instead of
    /// the full configuration (+mapping) alone
    #[arg(long, conflicts_with = "mode")]
    ablation: bool,
    /// Write the results as JSON to FILE
    #[arg(long, value_name = "FILE", conflicts_with_all = ["serve", "config"], value_parser = output_file)]
    json: Option<String>,
    /// Write a bar chart of latency and peak RSS per configuration to FILE (PNG)
    #[arg(long, value_name = "FILE", conflicts_with = "mode", value_parser = output_file)]
    chart: Option<String>,
    /// Write a Chrome trace of one run of the last configuration to FILE (open it in
    /// https://ui.perfetto.dev)
    #[arg(long, value_name = "FILE", conflicts_with = "mode", value_parser = output_file)]
    trace: Option<String>,
    /// With --trace: time and GFLOP/s of the costliest op kinds
    #[arg(long, requires = "trace")]
    profile: bool,
    /// N threads run one compiled graph at once (--runs each); every output is checked
    /// against a serial run of its input
    #[arg(long, value_name = "N", value_parser = positive, allow_negative_numbers = true)]
    concurrent: Option<usize>,
    /// The final hidden states with bf16 weights against f32, on the same weights
    #[arg(long)]
    accuracy: bool,
    /// npurt, ONNX Runtime (bench/peers/ort_bert.py) and OpenVINO
    /// (bench/peers/openvino_bert.py, when installed) kept loaded and timed alternately on
    /// the same models; the ratios per pair
    #[arg(long)]
    compare_ort: bool,
    /// One configuration of the ablation, printed as one JSON line (the child process
    /// that --ablation starts per configuration)
    #[arg(long, value_name = "CONFIG", help_heading = CHILD,
          value_parser = clap::builder::PossibleValuesParser::new(CONFIGS.iter().copied()))]
    config: Option<String>,
    /// Compile and warm up, then time one run per `run` line on standard input, one JSON
    /// line per reply (the child process of --compare-ort)
    #[arg(long, help_heading = CHILD)]
    serve: bool,
    #[command(flatten)]
    ort: compare_ort::OrtArgs,
}

/// The help heading of the options for the child processes that benchmarks start.
const CHILD: &str = "Child processes (started by --ablation and --compare-ort)";

pub fn run(base: RuntimeConfig, args: BertArgs) -> Result<()> {
    if args.compare_ort {
        return compare_ort::run(&base, args.runs, args.json.as_deref(), &args.ort);
    }
    let bm = Model::open(&args.model)?;
    let (batch, seq, runs) = (args.batch, args.seq, args.runs);
    if args.config.is_some() || args.serve {
        // A child process: its standard output is the parent's to read.
        log::info!("BERT {}: {}", args.model, bm.weights_origin);
    } else {
        // The first line says where the weights come from, random ones above all.
        println!("BERT {}: {}", args.model, bm.weights_origin);
    }
    if args.accuracy {
        return accuracy::run(&base, &bm, batch, seq, args.json.as_deref());
    }
    if args.serve {
        return serve::run(&base, &bm, batch, seq);
    }
    if let Some(threads) = args.concurrent {
        return concurrent::run(&base, &bm, &args.model, batch, seq, runs, threads, args.json.as_deref());
    }
    // Child mode: one configuration, one JSON line (a fresh process per configuration, so
    // peak RSS belongs to that configuration alone).
    if let Some(c) = &args.config {
        let r = run_one(&base, c, &bm, batch, seq, runs)?;
        println!("{}", to_json(&r));
        return Ok(());
    }
    latency(&base, &args, &bm)
}

struct BertRun {
    name: String,
    median: Duration,
    min: Duration,
    max: Duration,
    pool_peak: usize,
    rss_peak: Option<u64>,
    arena: Option<(usize, usize)>,
    /// Device bytes the backend holds beyond the arena for the frozen launches.
    backend_held: usize,
    streams: usize,
    util: Vec<(String, f64, f64)>,
    /// The precision the graph was compiled with (`auto` resolved for the device).
    precision: &'static str,
    /// Nodes on a device backend's host tier: (node, op, why).
    host_tier: Vec<runtime::graph::HostTierNode>,
    profile: RunProfile,
    /// What acl-emu counted and modelled during the last timed run (`None`: not over it).
    emulator: Option<EmulatorRun>,
}

/// The emulator's line under a row of the table, from a child's JSON; `None` when the
/// configuration did not run over acl-emu.
fn emulator_text(v: &serde_json::Value) -> Option<String> {
    let e = v.get("emulator").filter(|e| e.is_object())?;
    let n = |k: &str| e[k].as_u64().unwrap_or(0);
    let kib = |k: &str| e[k].as_u64().unwrap_or(0) as f64 / 1024.0;
    Some(format!(
        "{:<10} acl-emu, last timed run: aclnn {} phase-1 + {} phase-2 calls; H2D {} copies ({:.1} KiB), D2H {} ({:.1} KiB), D2D {} ({:.1} KiB); {} allocations, {} synchronisations, {} replays; modelled latency {:.3} ms (modelled, not measured); roofline bound {:.3} ms, latency / bound {}",
        "",
        n("phase1_calls"),
        n("phase2_calls"),
        n("h2d_copies"),
        kib("h2d_bytes"),
        n("d2h_copies"),
        kib("d2h_bytes"),
        n("d2d_copies"),
        kib("d2d_bytes"),
        n("allocations"),
        n("synchronizations"),
        n("replays"),
        e["modelled_latency_ms"].as_f64().unwrap_or(f64::NAN),
        e["roofline_ms"].as_f64().unwrap_or(f64::NAN),
        e["latency_over_roofline"].as_f64().map_or("-".into(), |r| format!("{r:.2}")),
    ))
}

/// Untimed runs before the timed ones: one plain, one profiled, then plain ones.
const WARM_UPS: usize = 4;

fn run_one(base: &RuntimeConfig, cname: &str, bm: &Model, batch: usize, seq: usize, runs: usize) -> Result<BertRun> {
    let Prepared { rt, cg, inputs } = prepare(base, cname, bm, batch, seq)?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    // The profile is of the second run: the first touches the arena's pages for the first
    // time (on BERT-Large s512, 6.7 ms for each of its first eight nodes on Emerald Rapids).
    drop(cg.run(&refs)?);
    let (_, profile) = cg.run_profiled(&refs)?; // warm-up, profiled (node by node)
    // Two plain warm-ups, so that the timed runs are the steady state: the first records
    // a device backend's executors (frozen launches), the second captures the graph where
    // the backend captures.
    for _ in 0..WARM_UPS - 2 {
        drop(cg.run(&refs)?);
    }
    let mut times = Vec::new();
    let mut emulator = None;
    let runs = runs.max(1);
    for i in 0..runs {
        // The emulator's counters cover the last timed run alone (read before its outputs
        // are dropped).
        let last = i + 1 == runs && emulator_reset(&rt)?;
        let t0 = Instant::now();
        let out = cg.run(&refs)?;
        // A run on an asynchronous default stream (Ascend, CUDA) returns once queued.
        rt.synchronize(0)?;
        let t = t0.elapsed();
        if last {
            emulator = emulator_read(&rt)?;
        }
        drop(out);
        times.push(t);
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
        backend_held: cg.arena_stats().backend_bytes,
        streams: cg.schedule().streams,
        util: utilisation(&rt, &profile),
        precision: cg.options().precision.name(),
        host_tier: cg.host_tier().to_vec(),
        profile,
        emulator,
    })
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
        "backend_held_bytes": r.backend_held,
        "streams": r.streams,
        "precision": r.precision,
        "host_tier_nodes": r.host_tier.len(),
        "host_tier": r.host_tier.iter().map(|h| serde_json::json!({"node": h.node, "op": h.op, "reason": h.reason})).collect::<Vec<_>>(),
        "utilisation": r.util.iter().map(|(u, c, b)| serde_json::json!({"unit": u, "compute": c, "bandwidth": b})).collect::<Vec<_>>(),
        "emulator": r.emulator.as_ref().map(emulator_json),
    })
}

/// A row of the table, as a child printed it; `None` when a field is missing.
fn row_text(v: &serde_json::Value) -> Option<String> {
    let util = v["utilisation"]
        .as_array()?
        .iter()
        .map(|u| format!("{} {:.0}%", u["unit"].as_str().unwrap_or("?"), u["compute"].as_f64().unwrap_or(0.0) * 100.0))
        .collect::<Vec<_>>()
        .join(", ");
    let (min, max) = (v["min_ms"].as_f64()?, v["max_ms"].as_f64()?);
    let arena = v["arena_bytes"].as_u64().zip(v["load_bytes"].as_u64());
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let held = match v["backend_held_bytes"].as_u64() {
        Some(b) if b > 0 => format!("; the backend holds {:.0} MiB more for the frozen launches", mib(b)),
        _ => String::new(),
    };
    Some(format!(
        "{:<10} {:>10.1} {:>16} {:>10.0} {:>10} {:>12} {:>7}  {}{held}",
        v["config"].as_str()?,
        v["median_ms"].as_f64()?,
        format!("{min:.0}..{max:.0}"),
        mib(v["pool_peak_bytes"].as_u64()?),
        v["rss_peak_bytes"].as_u64().map_or("?".into(), |r| format!("{:.0}", mib(r))),
        arena.map_or("-".into(), |(a, l)| format!("{:.3}", a as f64 / l.max(1) as f64)),
        v["streams"].as_u64()?,
        util
    ))
}

/// The table: one child process per configuration, then the JSON, chart and trace asked for.
fn latency(base: &RuntimeConfig, args: &BertArgs, bm: &Model) -> Result<()> {
    let (model, batch, seq, runs) = (&args.model, args.batch, args.seq, args.runs);
    let bc = &bm.config;
    let configs: Vec<&str> = if args.ablation { CONFIGS.to_vec() } else { vec!["+mapping"] };
    println!(
        "BERT {model} (hidden {}, {} layers), batch {batch}, seq {seq}, {} parameters; {runs} runs after {WARM_UPS} warm-ups; backend {}; precision {}",
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
    let exe = std::env::current_exe().map_err(|e| Error::io("the path of this executable", e))?;
    let pb = progress::bar((configs.len() + usize::from(args.trace.is_some())) as u64, "BERT configurations");
    let mut rows = Vec::new();
    for c in &configs {
        pb.set_message(format!("configuration {c}"));
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["bench", "bert", "--model", model, "--seq", &seq.to_string(), "--batch", &batch.to_string()]);
        cmd.args(["--runs", &runs.to_string(), "--config", c, "--precision", base.precision.name()]);
        // The options this process runs under, whether from the command line or the environment.
        cmd.args(["--backend", base.backend.as_deref().unwrap_or("auto")]);
        cmd.args(["--impl", base.forced_tier.map_or("auto", |t| t.name())]);
        cmd.args(["--devices", &base.cpu_devices.to_string()]);
        let o = cmd.output().map_err(|e| Error::io(exe.display().to_string(), e))?;
        if !o.status.success() {
            return Err(Error::format(format!("configuration {c} failed: {}", String::from_utf8_lossy(&o.stderr))));
        }
        let line = String::from_utf8_lossy(&o.stdout);
        let v: serde_json::Value =
            serde_json::from_str(line.trim()).map_err(|e| Error::format_from(format!("{c}: {line}"), e))?;
        if let Some(row) = row_text(&v) {
            pb.suspend(|| println!("{row}"));
        }
        if let Some(line) = emulator_text(&v) {
            pb.suspend(|| println!("{line}"));
        }
        if let Some(nodes) = v["host_tier"].as_array().filter(|a| !a.is_empty()) {
            pb.suspend(|| {
                println!("{:<10} {} node(s) on the host tier:", "", nodes.len());
                for h in nodes {
                    let field = |k: &str| h[k].as_str().unwrap_or("?").to_string();
                    println!("{:<12} {} ({}): {}", "", field("node"), field("op"), field("reason"));
                }
            });
        }
        pb.inc(1);
        rows.push(v);
    }
    let trace = match &args.trace {
        Some(path) => {
            pb.set_message("trace");
            let r = run_one(base, configs.last().copied().unwrap_or("+mapping"), bm, batch, seq, 1)?;
            pb.inc(1);
            Some((path, r))
        }
        None => None,
    };
    pb.finish_and_clear();
    if let Some(path) = &args.json {
        let doc = serde_json::json!({"model": model, "batch": batch, "seq": seq, "runs": runs, "rows": rows});
        outputs::write_json(path, &doc)?;
        println!("wrote {path}");
    }
    if let Some(path) = &args.chart {
        write_chart(path, &format!("BERT {model} seq {seq}: ablation"), &rows)?;
        println!("wrote {path}");
    }
    if let Some((path, r)) = trace {
        outputs::write(path, r.profile.chrome_trace())?;
        println!("wrote {path} ({} nodes; open in https://ui.perfetto.dev)", r.profile.nodes.len());
        if args.profile {
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

/// Latency and peak RSS per configuration, each on its own scale.
fn write_chart(path: &str, title: &str, rows: &[serde_json::Value]) -> Result<()> {
    let labels: Vec<String> = rows.iter().map(|r| r["config"].as_str().unwrap_or("?").to_string()).collect();
    let series = [
        chart::Series {
            name: "latency".into(),
            unit: "ms".into(),
            values: rows.iter().map(|r| r["median_ms"].as_f64().unwrap_or(f64::NAN)).collect(),
        },
        chart::Series {
            name: "peak RSS".into(),
            unit: "MiB".into(),
            values: rows
                .iter()
                .map(|r| r["rss_peak_bytes"].as_f64().unwrap_or(f64::NAN) / (1u64 << 20) as f64)
                .collect(),
        },
    ];
    let png =
        chart::bar_chart_png(title, &labels, &series, 900, 500).map_err(|e| Error::format(format!("{path}: {e}")))?;
    outputs::write(path, png)
}
