//! `npurt bench bert --compare-ort`: npurt, ONNX Runtime and OpenVINO on the same BERT,
//! timed alternately in one run.
//!
//! Every contender is a child process that keeps its model loaded and warmed up and times
//! one inference per `run` line on its stdin: npurt as `npurt bench bert --serve`, ONNX
//! Runtime as `bench/peers/ort_bert.py --serve` (one process per variant and thread
//! count), OpenVINO as `bench/peers/openvino_bert.py --serve` on the same ONNX file (one
//! per thread count; skipped with a message when OpenVINO is not installed). Rounds visit the contenders in rotating order with a short pause between runs,
//! so load from other jobs on a shared machine falls on all of them alike; each child
//! reports its own peak RSS when told to quit.

use super::common::median;
use super::gemm::{time_gemm, time_gemm_bf16};
use crate::progress;
use crate::values::{Csv, list, positive};
use clap::Args;
use indicatif::ProgressBar;
use npurt::{Error, Precision, Result, RuntimeConfig, Tier};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The options of `npurt bench bert --compare-ort`.
#[derive(Args)]
#[command(next_help_heading = "With --compare-ort")]
pub struct OrtArgs {
    /// The models and sequence lengths to compare, as MODEL:SEQ,...
    #[arg(long, value_name = "MODEL:SEQ,...", default_value = "bert-large:512,bert-large:128,bert-base:128",
          value_parser = parse_pairs, requires = "compare_ort")]
    pairs: Pairs,
    /// npurt's precisions, one contender each (f32, bf16, int8)
    #[arg(long, value_name = "P,...", default_value = "f32", value_parser = parse_precisions, requires = "compare_ort")]
    precisions: Precisions,
    /// ONNX Runtime's graphs, one contender each per thread count: unfused, fused, or ep (the
    /// unfused graph with npurt's ONNX Runtime EP, libnpurt_ort_ep.so, one contender per
    /// precision too)
    #[arg(long, value_name = "V,...", default_value = "unfused,fused", value_parser = parse_variants,
          requires = "compare_ort")]
    ort_variants: Csv,
    /// ONNX Runtime's intra-op thread counts
    #[arg(long, value_name = "N,...", default_value = "2", value_parser = parse_counts, requires = "compare_ort")]
    ort_threads: Csv,
    /// OpenVINO's thread counts (INFERENCE_NUM_THREADS), one contender each; `none` for
    /// no OpenVINO contender
    #[arg(long, value_name = "N,...|none", default_value = "2", value_parser = parse_counts_or_none,
          requires = "compare_ort")]
    openvino_threads: Csv,
    /// OpenVINO's INFERENCE_PRECISION_HINT values (f32, bf16), one contender each per thread
    /// count; int8: the model quantised by NNCF (bench/peers/openvino_bert.py)
    #[arg(long, value_name = "P,...", default_value = "f32", value_parser = parse_precisions,
          requires = "compare_ort")]
    openvino_precisions: Precisions,
    /// Pause before each timed run, milliseconds
    #[arg(long, value_name = "MS", default_value = "200", requires = "compare_ort")]
    pause_ms: u64,
    /// Keep the ONNX models built in the temporary work directory
    #[arg(long, requires = "compare_ort")]
    keep: bool,
    /// Where the ONNX models are built (and kept; default: a temporary directory)
    #[arg(long, value_name = "DIR", requires = "compare_ort")]
    ort_workdir: Option<PathBuf>,
}

/// `--pairs`: (model, sequence length) per pair.
#[derive(Clone)]
struct Pairs(Vec<(String, usize)>);

fn parse_pairs(s: &str) -> std::result::Result<Pairs, String> {
    let pair = |p: &str| {
        let (m, seq) = p.split_once(':').ok_or_else(|| format!("expected MODEL:SEQ, got {p:?}"))?;
        let seq = positive(seq).map_err(|e| format!("{p:?}: sequence length: {e}"))?;
        Ok((m.trim().to_string(), seq))
    };
    list(s)?.0.iter().map(|p| pair(p)).collect::<std::result::Result<_, String>>().map(Pairs)
}

#[derive(Clone)]
struct Precisions(Vec<Precision>);

fn parse_precisions(s: &str) -> std::result::Result<Precisions, String> {
    let one = |p: &String| Precision::parse(p).ok_or_else(|| format!("{p:?}: expected f32, bf16 or int8"));
    list(s)?.0.iter().map(one).collect::<std::result::Result<_, String>>().map(Precisions)
}

fn parse_variants(s: &str) -> std::result::Result<Csv, String> {
    let v = list(s)?;
    match v.0.iter().find(|x| !matches!(x.as_str(), "unfused" | "fused" | "ep")) {
        Some(bad) => Err(format!("{bad:?}: expected unfused, fused or ep")),
        None => Ok(v),
    }
}

fn parse_counts(s: &str) -> std::result::Result<Csv, String> {
    let v = list(s)?;
    for x in &v.0 {
        positive(x).map_err(|e| format!("{x:?}: {e}"))?;
    }
    Ok(v)
}

fn parse_counts_or_none(s: &str) -> std::result::Result<Csv, String> {
    if s.trim() == "none" { Ok(Csv(Vec::new())) } else { parse_counts(s) }
}

/// The row-name prefix of the EP contenders (ONNX Runtime running the unfused graph with
/// npurt's execution provider), followed by the precision; these rows are not ORT's own.
const EP_ROW: &str = "ORT+EP ";

/// The record marker of both peer scripts (openvino_bert.py speaks ort_bert.py's protocol).
const ORT_MARK: &str = "@@ORT_BERT_RESULT ";

/// A running contender and what it has reported.
struct Contender {
    name: String,
    is_npurt: bool,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    ready: serde_json::Value,
    times: Vec<f64>,
    /// Lines the child prints besides its records are echoed around this bar.
    pb: ProgressBar,
}

impl Contender {
    fn spawn(name: String, is_npurt: bool, mut cmd: Command, pb: &ProgressBar) -> Result<Contender> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| Error::io(format!("{name}: cannot start"), e))?;
        let stdin = child.stdin.take().ok_or_else(|| Error::format(format!("{name}: no stdin")))?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| Error::format(format!("{name}: no stdout")))?);
        let (ready, times, pb) = (serde_json::Value::Null, Vec::new(), pb.clone());
        let mut c = Contender { name, is_npurt, child, stdin, stdout, ready, times, pb };
        c.ready = c.record()?;
        Ok(c)
    }

    /// The next result record on the child's stdout; other lines are echoed.
    fn record(&mut self) -> Result<serde_json::Value> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                let st = self.child.wait().ok();
                return Err(Error::format(format!("{} ended without a result (exit status {st:?})", self.name)));
            }
            let body = if self.is_npurt {
                Some(line.trim())
            } else {
                line.trim().strip_prefix(ORT_MARK.trim()).map(str::trim)
            };
            if let Some(v) = body.filter(|b| b.starts_with('{')).and_then(|b| serde_json::from_str(b.trim()).ok()) {
                return Ok(v);
            }
            self.pb.suspend(|| println!("  | {}", line.trim_end()));
        }
    }

    fn send(&mut self, cmd: &str) -> Result<()> {
        writeln!(self.stdin, "{cmd}")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// One timed inference, milliseconds.
    fn run_once(&mut self) -> Result<f64> {
        self.send("run")?;
        let v = self.record()?;
        let ms = v["ms"].as_f64().ok_or_else(|| Error::format(format!("{}: unexpected reply {v}", self.name)))?;
        self.times.push(ms);
        Ok(ms)
    }

    /// Asks the child to quit; returns its final record (peak memory).
    fn finish(mut self) -> Result<(String, Vec<f64>, serde_json::Value, serde_json::Value)> {
        self.send("quit")?;
        let last = self.record()?;
        let _ = self.child.wait();
        Ok((self.name, self.times, self.ready, last))
    }
}

fn ort_script() -> Result<PathBuf> {
    peer_script("ort_bert.py", "NPURT_ORT_SCRIPT")
}

/// `bench/peers/NAME`: from `env`, the working directory, or the source tree.
fn peer_script(name: &str, env: &str) -> Result<PathBuf> {
    let rel = Path::new("bench/peers").join(name);
    let candidates = [
        std::env::var_os(env).map(PathBuf::from),
        Some(rel.clone()),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join(&rel)),
    ];
    candidates.into_iter().flatten().find(|p| p.exists()).ok_or_else(|| {
        Error::Unsupported(format!("{} not found (run from the repository root or set {env})", rel.display()))
    })
}

/// Whether `python3` can import `module`.
fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn mib(b: Option<u64>) -> String {
    b.map_or("?".into(), |b| format!("{:.0}", b as f64 / (1u64 << 20) as f64))
}

/// What every model/sequence pair runs with, settled before the first measurement.
struct Setup<'a> {
    base: &'a RuntimeConfig,
    args: &'a OrtArgs,
    rounds: usize,
    /// This binary, started as the npurt contenders.
    exe: PathBuf,
    /// bench/peers/ort_bert.py.
    script: PathBuf,
    /// bench/peers/openvino_bert.py, where OpenVINO contenders were asked for and can run.
    ov_script: Option<PathBuf>,
    /// OpenVINO's thread counts; empty where it does not run.
    ov_threads: &'a [String],
    /// Where the ONNX models are built.
    workdir: PathBuf,
}

impl<'a> Setup<'a> {
    fn new(base: &'a RuntimeConfig, rounds: usize, args: &'a OrtArgs) -> Result<Setup<'a>> {
        let script = ort_script()?;
        let mut ov_threads: &[String] = &args.openvino_threads.0;
        let ov_script = if ov_threads.is_empty() {
            None
        } else if !python_has("openvino") {
            println!("OpenVINO is not installed for python3 (pip install openvino): its contenders are skipped");
            ov_threads = &[];
            None
        } else {
            Some(peer_script("openvino_bert.py", "NPURT_OPENVINO_SCRIPT")?)
        };
        let workdir = args
            .ort_workdir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join(format!("npurt-ort-{}", std::process::id())));
        let exe = std::env::current_exe()?;
        Ok(Setup { base, args, rounds, exe, script, ov_script, ov_threads, workdir })
    }

    /// The contenders of one pair: npurt per precision, ORT per variant and thread count (the
    /// EP variant per precision too), OpenVINO per thread count.
    fn contenders(&self) -> usize {
        let args = self.args;
        let per_variant = |v: &String| if v == "ep" { args.precisions.0.len() } else { 1 };
        let ort: usize = args.ort_variants.0.iter().map(per_variant).sum();
        args.precisions.0.len()
            + ort * args.ort_threads.0.len()
            + self.ov_threads.len() * args.openvino_precisions.0.len()
    }

    /// The line naming the contenders, the rounds and the host's load.
    fn print_header(&self) {
        let (precisions, ort_variants, ort_threads) =
            (&self.args.precisions.0, &self.args.ort_variants.0, &self.args.ort_threads.0);
        let ov_threads = self.ov_threads;
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "npurt vs ONNX Runtime{}, alternated: {} rounds per pair, npurt {}, ORT {} x {} threads{}; load average {}",
            if ov_threads.is_empty() { "" } else { " and OpenVINO" },
            self.rounds,
            precisions.iter().map(|p| p.name()).collect::<Vec<_>>().join("/"),
            ort_variants.join("/"),
            ort_threads.join("/"),
            if ov_threads.is_empty() {
                String::new()
            } else {
                let ov_precisions = self.args.openvino_precisions.0.iter().map(|p| p.name()).collect::<Vec<_>>();
                format!(", OpenVINO {} x {} threads", ov_precisions.join("/"), ov_threads.join("/"))
            },
            load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        );
    }
}

/// What the BERT figures are put against, measured in the same run on the same machine.
struct Ceilings {
    /// GFLOP/s of the f32 GEMM at 512x1024x4096, best of three medians.
    f32: f64,
    /// The same on the bf16 unit, 0 where there is none.
    bf16: f64,
    /// See [`cpu_fma_peak`].
    fma: Option<backend_cpu::peak::Peak>,
}

pub fn run(base: &RuntimeConfig, rounds: usize, json: Option<&str>, args: &OrtArgs) -> Result<()> {
    let setup = Setup::new(base, rounds, args)?;
    setup.print_header();
    let per_pair = rounds.saturating_mul(setup.contenders());
    let pb = progress::bar(3 + args.pairs.0.len().saturating_mul(per_pair) as u64, "GEMM ceiling");
    let ceilings = measure_ceilings(base, &pb)?;
    let fma_gflops = ceilings.fma.as_ref().map(|p| p.gflops);
    let mut doc = Vec::new();
    let result: Result<()> = args.pairs.0.iter().try_for_each(|(model, seq)| {
        let finished = run_pair(&setup, model, *seq, &pb)?;
        pb.suspend(|| report(model, *seq, (ceilings.f32, ceilings.bf16), fma_gflops, &finished, &mut doc));
        Ok(())
    });
    pb.finish_and_clear();
    if !args.keep && args.ort_workdir.is_none() {
        let _ = std::fs::remove_dir_all(&setup.workdir);
    }
    result?;
    if let Some(path) = json {
        let j = serde_json::json!({"gemm_ceiling_gflops": ceilings.f32, "gemm_ceiling_bf16_gflops": ceilings.bf16,
            "fma_peak_gflops": fma_gflops, "rounds": rounds, "pairs": doc});
        crate::outputs::write_json(path, &j)?;
        println!("wrote {path}");
    }
    Ok(())
}

/// The GEMM ceiling (best of three medians: a ceiling, so the least disturbed measurement)
/// and the FMA peak, printed.
fn measure_ceilings(base: &RuntimeConfig, pb: &ProgressBar) -> Result<Ceilings> {
    let shape = (512, 1024, 4096, 1);
    let mut ceiling = 0f64;
    let mut ceiling_bf16 = 0f64;
    for _ in 0..3 {
        ceiling = ceiling.max(time_gemm(base, Tier::HighPerformance, shape, 9)?);
        ceiling_bf16 = ceiling_bf16.max(time_gemm_bf16(base, shape, 9).unwrap_or(0.0));
        pb.inc(1);
    }
    let fma_peak = cpu_fma_peak(base)?;
    pb.suspend(|| {
        println!(
            "measured GEMM ceiling (npurt, 512x1024x4096, best of 3 medians of 9): f32 {ceiling:.1} GFLOP/s{}",
            if ceiling_bf16 > 0.0 { format!(", bf16 {ceiling_bf16:.1} GFLOP/s") } else { String::new() }
        );
        match &fma_peak {
            Some(p) => println!(
                "measured FMA peak (npurt bench peak: {}, {} threads, best of 3 medians of 5 runs of 100 ms): {:.1} \
                 GFLOP/s; \"peak\" = model FLOPs over the median time, as a share of it",
                p.isa.name(),
                p.threads,
                p.gflops
            ),
            None => println!("no FMA peak: npurt does not run on the CPU's FMA path here (\"peak\" column empty)"),
        }
    });
    Ok(Ceilings { f32: ceiling, bf16: ceiling_bf16, fma: fma_peak })
}

/// One model at one sequence length: its ONNX models built where missing, every contender
/// started, `rounds` rounds alternated between them, and what each reported.
fn run_pair(setup: &Setup, model: &str, seq: usize, pb: &ProgressBar) -> Result<Vec<Finished>> {
    pb.set_message(format!("{model} seq {seq}"));
    let dir = setup.workdir.join(model);
    if !dir.join("fused.onnx").exists() || !dir.join("unfused.onnx").exists() {
        build_onnx_models(&setup.script, model, seq, &dir, pb)?;
    }
    let mut cs = spawn_contenders(setup, model, seq, &dir, pb)?;
    let pause = Duration::from_millis(setup.args.pause_ms);
    for r in 0..setup.rounds {
        for i in 0..cs.len() {
            let n = cs.len();
            std::thread::sleep(pause);
            cs[(i + r) % n].run_once()?;
            pb.inc(1);
        }
    }
    cs.into_iter().map(Contender::finish).collect()
}

/// Exports `model` at `seq` (fused and unfused) into `dir` with ort_bert.py.
fn build_onnx_models(script: &Path, model: &str, seq: usize, dir: &Path, pb: &ProgressBar) -> Result<()> {
    pb.suspend(|| println!("building {model} for ONNX Runtime in {} ...", dir.display()));
    let st = Command::new("python3")
        .arg(script)
        .args(["--model", model, "--seq", &seq.to_string(), "--build", "--workdir"])
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| Error::io("python3", e))?;
    if !st.success() {
        return Err(Error::format(format!("building the ONNX models for {model} failed ({st})")));
    }
    Ok(())
}

/// Starts every contender of one pair, each waiting for its first "run".
fn spawn_contenders(setup: &Setup, model: &str, seq: usize, dir: &Path, pb: &ProgressBar) -> Result<Vec<Contender>> {
    let (base, args) = (setup.base, setup.args);
    let mut cs = Vec::new();
    for p in &args.precisions.0 {
        let mut cmd = Command::new(&setup.exe);
        let (seq, p) = (seq.to_string(), p.name());
        cmd.args(["bench", "bert", "--serve", "--model", model, "--seq", &seq, "--precision", p]);
        // The options this process runs under, whether from the command line or the environment.
        cmd.args(["--backend", base.backend.as_deref().unwrap_or("auto")]);
        cmd.args(["--impl", base.forced_tier.map_or("auto", |t| t.name())]);
        cmd.args(["--devices", &base.cpu_devices.to_string()]);
        cs.push(Contender::spawn(format!("npurt {p}"), true, cmd, pb)?);
    }
    for v in &args.ort_variants.0 {
        // The EP variant runs once per npurt precision (the EP's `precision` option).
        let precisions: Vec<Option<&str>> =
            if v == "ep" { args.precisions.0.iter().map(|p| Some(p.name())).collect() } else { vec![None] };
        for t in &args.ort_threads.0 {
            for p in &precisions {
                let mut cmd = Command::new("python3");
                cmd.arg(&setup.script).args(["--model", model, "--seq", &seq.to_string(), "--serve", "--variant", v]);
                cmd.args(["--child-threads", t, "--workdir"]).arg(dir);
                let name = match p {
                    Some(p) => {
                        cmd.args(["--ep-precision", p]);
                        format!("{EP_ROW}{p}")
                    }
                    None => format!("ORT {v} x{t}"),
                };
                cs.push(Contender::spawn(name, false, cmd, pb)?);
            }
        }
    }
    if let Some(ov) = &setup.ov_script {
        for t in setup.ov_threads {
            for p in &args.openvino_precisions.0 {
                let mut cmd = Command::new("python3");
                cmd.arg(ov).args(["--model", model, "--seq", &seq.to_string(), "--serve"]);
                cmd.args(["--precision", p.name(), "--child-threads", t, "--workdir"]).arg(dir);
                // The f32 row keeps its old name, which earlier JSON files and docs use.
                let name = match p.name() {
                    "f32" => format!("OpenVINO x{t}"),
                    other => format!("OpenVINO {other} x{t}"),
                };
                cs.push(Contender::spawn(name, false, cmd, pb)?);
            }
        }
    }
    Ok(cs)
}

type Finished = (String, Vec<f64>, serde_json::Value, serde_json::Value);

/// The FMA peak (`npurt bench peak`) of the path and thread count npurt's contenders run
/// on, measured now: what "% of the peak" end to end refers to. `None` where npurt does
/// not run on the CPU (another backend requested, or present for `auto`) or on a path
/// without FMA.
fn cpu_fma_peak(base: &RuntimeConfig) -> Result<Option<backend_cpu::peak::Peak>> {
    // The backend the contenders will open (`auto`: the best one present), opened and
    // dropped here only to learn which it is.
    let on_cpu = npurt::open_backend(base).is_ok_and(|b| b.name() == "cpu");
    let isa = backend_cpu::features::select(None).map_err(|e| Error::backend("cpu", e))?.isa;
    if !on_cpu || backend_cpu::peak::accumulators(isa).is_none() {
        return Ok(None);
    }
    let threads = base.threads.unwrap_or(backend_cpu::features::get().cores).max(1);
    // Best of three medians, as for the GEMM ceiling: a ceiling, so the least disturbed
    // measurement (one median of 5 × 100 ms read 186 of 234 GFLOP/s under a burst of load).
    let mut best: Option<backend_cpu::peak::Peak> = None;
    for _ in 0..3 {
        let p = super::peak::measure(isa, threads, 5, 100)?;
        if best.as_ref().is_none_or(|b| p.gflops > b.gflops) {
            best = Some(p);
        }
    }
    Ok(best)
}

fn report(
    model: &str,
    seq: usize,
    ceilings: (f64, f64),
    fma_peak: Option<f64>,
    fin: &[Finished],
    doc: &mut Vec<serde_json::Value>,
) {
    println!("{model} seq {seq}:");
    println!(
        "  {:<18} {:>10} {:>18} {:>9} {:>9} {:>8} {:>6}",
        "contender", "median ms", "min..max ms", "RSS MiB", "GFLOP/s", "ceiling", "peak"
    );
    let mut rows = Vec::new();
    // Same model on both sides: npurt's FLOP count serves for ORT's rows too.
    let model_flops = fin.iter().find_map(|f| f.2["flops"].as_f64());
    for (name, times, ready, last) in fin {
        let med = median(&mut times.clone());
        let (lo, hi) = times.iter().fold((f64::MAX, 0f64), |(a, b), &t| (a.min(t), b.max(t)));
        let rss = last["vmhwm_bytes"].as_u64().or(last["rss_peak_bytes"].as_u64());
        let flops = ready["flops"].as_f64().or(model_flops);
        let gf = flops.map(|f| f / (med / 1e3) / 1e9);
        // Against the ceiling of the unit that runs the products (bf16 for npurt bf16).
        let ceiling = if name.ends_with("bf16") && ceilings.1 > 0.0 { ceilings.1 } else { ceilings.0 };
        let of_peak = gf.zip(fma_peak).map(|(g, p)| 100.0 * g / p);
        println!(
            "  {:<18} {:>10.1} {:>18} {:>9} {:>9} {:>8} {:>6}",
            name,
            med,
            format!("{lo:.1}..{hi:.1}"),
            mib(rss),
            gf.map_or("".into(), |g| format!("{g:.1}")),
            gf.map_or("".into(), |g| format!("{:.0}%", 100.0 * g / ceiling)),
            of_peak.map_or("".into(), |v| format!("{v:.0}%")),
        );
        rows.push(serde_json::json!({"contender": name, "median_ms": med, "times_ms": times,
            "peak_rss_bytes": rss, "gflops": gf, "pct_of_fma_peak": of_peak, "ready": ready}));
    }
    // The fastest row of a peer at one precision (the bf16 rows name their precision).
    let fastest = |prefix: &str, bf16: bool| {
        fin.iter()
            .filter(|f| f.0.starts_with(prefix) && !f.0.starts_with(EP_ROW) && f.0.contains("bf16") == bf16)
            .filter(|f| !f.0.contains("int8"))
            .min_by(|a, b| median(&mut a.1.clone()).total_cmp(&median(&mut b.1.clone())))
    };
    // OpenVINO's fastest int8 row (the model NNCF quantised).
    let best_ov_int8 = fin
        .iter()
        .filter(|f| f.0.starts_with("OpenVINO") && f.0.contains("int8"))
        .min_by(|a, b| median(&mut a.1.clone()).total_cmp(&median(&mut b.1.clone())));
    // (median ratio, median of the per-round ratios) of npurt's times over a peer's.
    let ratio_to = |f: &Finished, peer: &Finished| {
        let ratio = median(&mut f.1.clone()) / median(&mut peer.1.clone());
        let mut paired: Vec<f64> = f.1.iter().zip(&peer.1).map(|(a, b)| a / b).collect();
        (ratio, median(&mut paired))
    };
    let (best_ort, best_ov, best_ov_bf16) =
        (fastest("ORT", false), fastest("OpenVINO", false), fastest("OpenVINO", true));
    let faster_peer = [best_ort, best_ov]
        .into_iter()
        .flatten()
        .min_by(|a, b| median(&mut a.1.clone()).total_cmp(&median(&mut b.1.clone())));
    // One ratio of `f` over `peer`, printed with what the peer is, and recorded under `keys`
    // (its name, the ratio of medians, the median of the per-round ratios).
    let put = |r: &mut serde_json::Map<String, serde_json::Value>,
               f: &Finished,
               peer: &Finished,
               what: &str,
               keys: [&str; 3]| {
        let (ratio, paired) = ratio_to(f, peer);
        println!("  ratio {} / {} ({what}): {ratio:.2} (median of per-round ratios {paired:.2})", f.0, peer.0);
        r.insert(keys[0].into(), peer.0.clone().into());
        r.insert(keys[1].into(), ratio.into());
        r.insert(keys[2].into(), paired.into());
    };
    let mut ratios = Vec::new();
    for f in fin.iter().filter(|f| f.0.starts_with("npurt")) {
        let mut r = serde_json::Map::new();
        r.insert("npurt".into(), f.0.clone().into());
        if let Some(best) = best_ort {
            put(&mut r, f, best, "ORT's best", ["ort", "ratio", "paired_ratio"]);
        }
        if let (Some(peer), true) = (faster_peer, best_ov.is_some()) {
            put(&mut r, f, peer, "the faster f32 peer", ["peer", "peer_ratio", "peer_paired_ratio"]);
        }
        // bf16 against bf16: OpenVINO's default on a CPU with AMX or AVX-512-BF16.
        if let (Some(peer), true) = (best_ov_bf16, f.0.ends_with("bf16")) {
            put(&mut r, f, peer, "OpenVINO at bf16", ["openvino_bf16", "bf16_ratio", "bf16_paired_ratio"]);
        }
        // int8 against int8: OpenVINO running the model NNCF quantised.
        if let (Some(peer), true) = (best_ov_int8, f.0.ends_with("int8")) {
            put(&mut r, f, peer, "OpenVINO at int8", ["openvino_int8", "int8_ratio", "int8_paired_ratio"]);
        }
        ratios.push(serde_json::Value::Object(r));
    }
    // The EP against npurt alone at its precision (what going through ORT costs) and against
    // ORT's best.
    for f in fin.iter().filter(|f| f.0.starts_with(EP_ROW)) {
        let mut r = serde_json::Map::new();
        r.insert("ep".into(), f.0.clone().into());
        let own = format!("npurt {}", &f.0[EP_ROW.len()..]);
        if let Some(npurt) = fin.iter().find(|g| g.0 == own) {
            put(&mut r, f, npurt, "the EP's overhead", ["npurt", "npurt_ratio", "npurt_paired_ratio"]);
        }
        if let Some(best) = best_ort {
            put(&mut r, f, best, "ORT's best", ["ort", "ratio", "paired_ratio"]);
        }
        ratios.push(serde_json::Value::Object(r));
    }
    doc.push(serde_json::json!({"model": model, "seq": seq, "rows": rows, "ratios": ratios}));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(name: &str, times: &[f64], flops: Option<f64>) -> Finished {
        let ready = serde_json::json!({ "flops": flops });
        (name.to_string(), times.to_vec(), ready, serde_json::json!({}))
    }

    /// Each row's share of the FMA peak is its GFLOP/s (the model's FLOPs over its median
    /// time) over the peak; without a peak it is null, and the ratios are unchanged.
    #[test]
    fn rows_carry_their_share_of_the_fma_peak() {
        // 2 GFLOP: 10 ms is 200 GFLOP/s, 20 ms is 100.
        let fin =
            [finished("npurt f32", &[10.0, 12.0, 9.0], Some(2e9)), finished("ORT fused x2", &[20.0, 20.0, 21.0], None)];
        for (peak, want) in [(Some(250.0), [Some(80.0), Some(40.0)]), (None, [None, None])] {
            let mut doc = Vec::new();
            report("m", 32, (200.0, 0.0), peak, &fin, &mut doc);
            let rows = doc[0]["rows"].as_array().unwrap();
            let got: Vec<Option<f64>> = rows.iter().map(|r| r["pct_of_fma_peak"].as_f64()).collect();
            for (g, w) in got.iter().zip(want) {
                match (g, w) {
                    (Some(g), Some(w)) => assert!((g - w).abs() < 1e-9, "{got:?}"),
                    (None, None) => {}
                    _ => panic!("{got:?} against {want:?}"),
                }
            }
            assert!((doc[0]["ratios"][0]["ratio"].as_f64().unwrap() - 0.5).abs() < 1e-9);
        }
    }

    /// An EP row is put against npurt at its precision and against ORT's own best, and is
    /// not taken for ORT's best itself.
    #[test]
    fn ep_rows_are_compared_with_npurt_and_ort_alone() {
        let fin = [
            finished("npurt f32", &[10.0, 10.0, 10.0], Some(2e9)),
            finished("ORT unfused x2", &[30.0, 30.0, 30.0], None),
            finished("ORT+EP f32", &[11.0, 11.0, 11.0], None),
        ];
        let mut doc = Vec::new();
        report("m", 32, (200.0, 0.0), None, &fin, &mut doc);
        let ratios = doc[0]["ratios"].as_array().unwrap();
        assert_eq!(ratios[0]["ort"], "ORT unfused x2", "the EP row is not ORT's best");
        let ep = ratios.iter().find(|r| r["ep"] == "ORT+EP f32").unwrap();
        assert!((ep["npurt_ratio"].as_f64().unwrap() - 1.1).abs() < 1e-9);
        assert!((ep["ratio"].as_f64().unwrap() - 11.0 / 30.0).abs() < 1e-9);
    }

    /// npurt f32 is put against the faster f32 peer, never OpenVINO's bf16 row, and npurt
    /// bf16 against OpenVINO's fastest bf16 row.
    #[test]
    fn each_precision_is_put_against_its_own_peers() {
        let fin = [
            finished("npurt f32", &[10.0, 10.0, 10.0], None),
            finished("npurt bf16", &[6.0, 6.0, 6.0], None),
            finished("ORT fused x2", &[12.0, 12.0, 12.0], None),
            finished("OpenVINO x2", &[8.0, 8.0, 8.0], None),
            finished("OpenVINO bf16 x1", &[5.0, 5.0, 5.0], None),
            finished("OpenVINO bf16 x2", &[4.0, 4.0, 4.0], None),
        ];
        let mut doc = Vec::new();
        report("m", 32, (200.0, 0.0), None, &fin, &mut doc);
        let ratios = doc[0]["ratios"].as_array().unwrap();
        let f32_row = ratios.iter().find(|r| r["npurt"] == "npurt f32").unwrap();
        assert_eq!(f32_row["peer"], "OpenVINO x2");
        assert!((f32_row["peer_ratio"].as_f64().unwrap() - 10.0 / 8.0).abs() < 1e-9);
        assert!(f32_row.get("openvino_bf16").is_none(), "{f32_row:?}");
        let bf16_row = ratios.iter().find(|r| r["npurt"] == "npurt bf16").unwrap();
        assert_eq!(bf16_row["openvino_bf16"], "OpenVINO bf16 x2");
        assert!((bf16_row["bf16_ratio"].as_f64().unwrap() - 6.0 / 4.0).abs() < 1e-9);
    }
}
