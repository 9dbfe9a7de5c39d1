//! `npurt bench peak`: the machine's FMA peak (GFLOP/s), measured the same way on 1 thread
//! and on all threads, per instruction-set path (`backend_cpu::peak`).

use crate::values::positive;
use backend_cpu::Isa;
use backend_cpu::peak::{self, Peak};
use clap::Args;
use npurt::{Error, Result, RuntimeConfig};
use std::time::Duration;

/// `npurt bench peak [--isa avx512|avx2] [--threads N] [--runs N] [--ms MS] [--kernels] [--json FILE]`
#[derive(Args)]
pub struct PeakArgs {
    /// The path to measure: avx512 or avx2 (default: every path this CPU runs)
    #[arg(long, value_name = "ISA", value_parser = parse_isa)]
    isa: Option<Isa>,
    /// The "all threads" count (default: NPURT_THREADS, else every core); 1 thread is
    /// always measured too
    #[arg(long, value_name = "N", value_parser = positive)]
    threads: Option<usize>,
    /// Timed runs per path and thread count (the median is reported)
    #[arg(long, value_name = "N", default_value = "7", value_parser = positive)]
    runs: usize,
    /// Milliseconds per run
    #[arg(long, value_name = "MS", default_value = "200", value_parser = positive)]
    ms: usize,
    /// Also time each GEMM micro-kernel of the path on 1 thread, as a share of the
    /// 1-thread peak: on packed panels in cache, and with B's panels read from memory
    #[arg(long)]
    kernels: bool,
    /// Also write the figures as JSON to FILE
    #[arg(long, value_name = "FILE", value_parser = crate::outputs::output_file)]
    json: Option<String>,
}

/// The buffer B's panels are streamed from by `--kernels` (twice a 32 MiB L3).
const KERNEL_STREAM_BYTES: usize = 64 << 20;

/// `--isa`: `avx512`, `avx2` or `scalar` (as `NPURT_CPU_ISA`).
pub fn parse_isa(s: &str) -> std::result::Result<Isa, String> {
    match Isa::parse(s) {
        Ok(Some(isa)) => Ok(isa),
        Ok(None) => Err("expected avx512, avx2 or scalar".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The peak of `isa` on `threads` threads: `runs` runs of `ms` milliseconds, median.
pub fn measure(isa: Isa, threads: usize, runs: usize, ms: usize) -> Result<Peak> {
    peak::measure(isa, threads, runs, Duration::from_millis(ms as u64)).map_err(|e| Error::backend("cpu", e))
}

/// One row of the JSON document.
pub fn to_json(p: &Peak, mhz: f64) -> serde_json::Value {
    let (lo, hi) = p.runs.iter().fold((f64::MAX, 0f64), |(lo, hi), g| (lo.min(*g), hi.max(*g)));
    serde_json::json!({
        "isa": p.isa.name(),
        "threads": p.threads,
        "accumulators": p.accumulators,
        "gflops": p.gflops,
        "min_gflops": lo,
        "max_gflops": hi,
        "runs_gflops": p.runs,
        "flops_per_cycle_per_thread_at_nominal_mhz": p.gflops * 1e3 / mhz / p.threads as f64,
    })
}

pub fn run(cfg: RuntimeConfig, args: PeakArgs) -> Result<()> {
    let f = backend_cpu::features::get();
    let all = args.threads.or(cfg.threads).unwrap_or(f.cores);
    let isas = match args.isa {
        Some(isa) => vec![isa],
        None => peak::measurable(),
    };
    if isas.is_empty() {
        return Err(Error::Unsupported("this CPU has neither AVX2+FMA nor AVX-512: no FMA peak to measure".into()));
    }
    let mut counts = vec![1];
    if all > 1 {
        counts.push(all);
    }
    println!(
        "FMA peak: {} ({} logical cores, nominal {:.0} MHz), median of {} runs of {} ms",
        f.model, f.cores, f.mhz, args.runs, args.ms
    );
    println!(
        "{:<8} {:>7} {:>6} {:>12} {:>20} {:>14}",
        "ISA", "threads", "accum", "GFLOP/s", "min..max", "flop/cycle/thr"
    );
    let mut rows = Vec::new();
    let mut one_thread = Vec::new();
    for &isa in &isas {
        for &threads in &counts {
            let p = measure(isa, threads, args.runs, args.ms)?;
            if threads == 1 {
                one_thread.push((isa, p.gflops));
            }
            let j = to_json(&p, f.mhz);
            println!(
                "{:<8} {:>7} {:>6} {:>12.1} {:>20} {:>14.1}",
                isa.name(),
                threads,
                format!("{}{}", p.accumulators, if isa == Isa::Avx512 { "z" } else { "y" }),
                p.gflops,
                format!(
                    "{:.1}..{:.1}",
                    j["min_gflops"].as_f64().unwrap_or(0.0),
                    j["max_gflops"].as_f64().unwrap_or(0.0)
                ),
                j["flops_per_cycle_per_thread_at_nominal_mhz"].as_f64().unwrap_or(0.0),
            );
            rows.push(j);
        }
    }
    let kernels = if args.kernels { kernel_table(&one_thread, args.runs, args.ms)? } else { Vec::new() };
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "kernels": kernels,
            "cpu": f.model,
            "cores": f.cores,
            "nominal_mhz": f.mhz,
            "runs": args.runs,
            "ms_per_run": args.ms,
            "rows": rows,
        });
        crate::outputs::write_json(path, &doc)?;
    }
    Ok(())
}

/// `--kernels`: each micro-kernel of every measured path, printed as GFLOP/s and share of
/// that path's 1-thread peak; returns the JSON rows.
fn kernel_table(peaks: &[(Isa, f64)], runs: usize, ms: usize) -> Result<Vec<serde_json::Value>> {
    println!();
    println!("GEMM micro-kernels, 1 thread, one k slice per call, median of {runs} runs of {ms} ms");
    println!("(%) = share of the path's 1-thread FMA peak above; \"B from memory\": each call's B panels come");
    println!("from a new place in a {} MiB buffer", KERNEL_STREAM_BYTES >> 20);
    println!("{:<18} {:>5} {:>10} {:>20} {:>20}", "kernel", "kc", "call", "in cache", "B from memory");
    let share = |g: f64, peak: f64| format!("{g:.1} GF/s ({:>3.0} %)", 100.0 * g / peak);
    let mut rows = Vec::new();
    for &(isa, peak) in peaks {
        let rates = backend_cpu::kernels::gemm_packed::kernel_rates(
            isa,
            Duration::from_millis(ms as u64),
            runs,
            KERNEL_STREAM_BYTES,
        )
        .map_err(|e| Error::backend("cpu", e))?;
        for r in rates {
            println!(
                "{:<18} {:>5} {:>10} {:>20} {:>20}",
                r.kernel,
                r.kc,
                format!("{}x{}", r.rows, r.cols),
                share(r.in_cache_gflops, peak),
                share(r.b_from_memory_gflops, peak)
            );
            rows.push(serde_json::json!({
                "isa": isa.name(),
                "kernel": r.kernel,
                "kc": r.kc,
                "rows": r.rows,
                "cols": r.cols,
                "in_cache_gflops": r.in_cache_gflops,
                "b_from_memory_gflops": r.b_from_memory_gflops,
                "peak_1_thread_gflops": peak,
            }));
        }
    }
    Ok(rows)
}
