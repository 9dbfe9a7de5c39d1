//! `npurt bench peak`: the machine's FMA peak (GFLOP/s), measured the same way on 1 thread
//! and on all threads, per instruction-set path, and the bf16 peaks of the AMX tile unit and
//! the AVX-512-BF16 dot product where the CPU has them (`backend_cpu::peak`).

use crate::values::positive;
use backend_cpu::Isa;
use backend_cpu::peak::{self, Peak, PeakUnit};
use clap::Args;
use npurt::{Error, Result, RuntimeConfig};
use std::time::Duration;

/// `npurt bench peak [--isa avx512|avx2] [--unit U]... [--threads N] [--runs N] [--ms MS] [--kernels] [--json FILE]`
#[derive(Args)]
pub struct PeakArgs {
    /// The FMA path to measure: avx512 or avx2 (default: every path this CPU runs; with
    /// --isa and no --unit, only that path)
    #[arg(long, value_name = "ISA", value_parser = parse_isa)]
    isa: Option<Isa>,
    /// A unit to measure (repeatable): amx-bf16, avx512-bf16, or an FMA path (avx512,
    /// avx2); default: every FMA path and every bf16 unit this CPU has
    #[arg(long = "unit", value_name = "UNIT", value_parser = parse_unit)]
    units: Vec<PeakUnit>,
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

/// `--unit`: a name of `PeakUnit::name`.
fn parse_unit(s: &str) -> std::result::Result<PeakUnit, String> {
    PeakUnit::parse(s).ok_or_else(|| "expected amx-bf16, avx512-bf16, avx512 or avx2".into())
}

/// The peak of `isa` on `threads` threads: `runs` runs of `ms` milliseconds, median.
pub fn measure(isa: Isa, threads: usize, runs: usize, ms: usize) -> Result<Peak> {
    measure_unit(PeakUnit::Fma(isa), threads, runs, ms)
}

/// The peak of `unit` on `threads` threads: `runs` runs of `ms` milliseconds, median.
pub fn measure_unit(unit: PeakUnit, threads: usize, runs: usize, ms: usize) -> Result<Peak> {
    peak::measure_unit(unit, threads, runs, Duration::from_millis(ms as u64)).map_err(|e| Error::backend("cpu", e))
}

/// The unit the bf16 GEMM runs on where the features `f` allow it (AMX tiles, else
/// AVX-512-BF16 dot products, or the FMA path where the weights widen into it:
/// `CpuFeatures::bf16_on_fma`), measured on `threads` threads; `None` where none runs.
pub fn bf16_peak(
    f: &backend_cpu::features::CpuFeatures,
    threads: usize,
    runs: usize,
    ms: usize,
) -> Result<Option<Peak>> {
    let unit = if f.amx_bf16 {
        PeakUnit::AmxBf16
    } else if f.bf16_on_fma() {
        // The bf16 products run on the FMA kernel here, their weights widened.
        PeakUnit::Fma(f.isa)
    } else if f.avx512bf16 {
        PeakUnit::Avx512Bf16
    } else {
        return Ok(None);
    };
    measure_unit(unit, threads, runs, ms).map(Some)
}

/// One row of the JSON document.
pub fn to_json(p: &Peak, mhz: f64) -> serde_json::Value {
    let (lo, hi) = p.runs.iter().fold((f64::MAX, 0f64), |(lo, hi), g| (lo.min(*g), hi.max(*g)));
    serde_json::json!({
        "unit": p.unit.name(),
        "isa": p.isa.name(),
        "threads": p.threads,
        "accumulators": p.accumulators,
        "gflops": p.gflops,
        "min_gflops": lo,
        "max_gflops": hi,
        "runs_gflops": p.runs,
        "flops_per_cycle_per_thread_at_nominal_mhz": p.gflops * 1e3 / mhz / p.threads as f64,
        "flops_per_iteration": p.unit.flops_per_iteration(),
    })
}

pub fn run(cfg: RuntimeConfig, args: PeakArgs) -> Result<()> {
    let f = backend_cpu::features::get();
    let all = args.threads.or(cfg.threads).unwrap_or(f.cores);
    let (isas, bf16_units) = units(&args);
    if isas.is_empty() && bf16_units.is_empty() {
        return Err(Error::Unsupported("this CPU has neither AVX2+FMA nor AVX-512: no FMA peak to measure".into()));
    }
    let mut counts = vec![1];
    if all > 1 {
        counts.push(all);
    }
    println!(
        "Peaks: {} ({} logical cores, nominal {:.0} MHz), median of {} runs of {} ms",
        f.model, f.cores, f.mhz, args.runs, args.ms
    );
    println!(
        "{:<12} {:>7} {:>6} {:>12} {:>20} {:>14}",
        "unit", "threads", "accum", "GFLOP/s", "min..max", "flop/cycle/thr"
    );
    let mut one_thread = Vec::new();
    let mut rows = Vec::new();
    for &isa in &isas {
        for &threads in &counts {
            let p = measure(isa, threads, args.runs, args.ms)?;
            if threads == 1 {
                one_thread.push((isa, p.gflops));
            }
            rows.push(print_row(&p, f.mhz));
        }
    }
    let mut bf16_rows = Vec::new();
    let mut bf16_one_thread = Vec::new();
    for &unit in &bf16_units {
        for &threads in &counts {
            let p = measure_unit(unit, threads, args.runs, args.ms)?;
            if threads == 1 {
                bf16_one_thread.push((unit, p.gflops));
            }
            bf16_rows.push(print_row(&p, f.mhz));
        }
    }
    let kernels = if args.kernels { kernel_table(&one_thread, args.runs, args.ms)? } else { Vec::new() };
    let bf16_kernels = if args.kernels && !bf16_one_thread.is_empty() {
        bf16_kernel_table(&bf16_one_thread, args.runs, args.ms)
    } else {
        Vec::new()
    };
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "kernels": kernels,
            "cpu": f.model,
            "cores": f.cores,
            "nominal_mhz": f.mhz,
            "runs": args.runs,
            "ms_per_run": args.ms,
            "rows": rows,
            "bf16_rows": bf16_rows,
            "bf16_kernels": bf16_kernels,
        });
        crate::outputs::write_json(path, &doc)?;
    }
    Ok(())
}

/// The FMA paths and the bf16 units a run measures. A bf16 unit named by `--unit` that the
/// CPU lacks is kept, so that measuring it fails with the reason.
fn units(args: &PeakArgs) -> (Vec<Isa>, Vec<PeakUnit>) {
    if args.units.is_empty() {
        return match args.isa {
            Some(isa) => (vec![isa], Vec::new()),
            None => (peak::measurable(), peak::measurable_bf16()),
        };
    }
    let mut isas: Vec<Isa> = args.isa.into_iter().collect();
    let mut bf16 = Vec::new();
    for &u in &args.units {
        match u {
            PeakUnit::Fma(isa) if !isas.contains(&isa) => isas.push(isa),
            PeakUnit::Fma(_) => {}
            u if !bf16.contains(&u) => bf16.push(u),
            _ => {}
        }
    }
    (isas, bf16)
}

/// Prints one measured peak as a table row and returns its JSON row.
fn print_row(p: &Peak, mhz: f64) -> serde_json::Value {
    let j = to_json(p, mhz);
    let suffix = match p.unit {
        PeakUnit::Fma(Isa::Avx512) | PeakUnit::Avx512Bf16 => "z",
        PeakUnit::AmxBf16 => "t",
        PeakUnit::Fma(_) => "y",
    };
    println!(
        "{:<12} {:>7} {:>6} {:>12.1} {:>20} {:>14.1}",
        p.unit.name(),
        p.threads,
        format!("{}{suffix}", p.accumulators),
        p.gflops,
        format!("{:.1}..{:.1}", j["min_gflops"].as_f64().unwrap_or(0.0), j["max_gflops"].as_f64().unwrap_or(0.0)),
        j["flops_per_cycle_per_thread_at_nominal_mhz"].as_f64().unwrap_or(0.0),
    );
    j
}

/// `--kernels` for the bf16 units: the bf16 GEMM's micro-kernel on 1 thread, in cache, as a
/// share of the unit's 1-thread peak; returns the JSON rows.
fn bf16_kernel_table(peaks: &[(PeakUnit, f64)], runs: usize, ms: usize) -> Vec<serde_json::Value> {
    use backend_cpu::kernels::gemm_bf16;
    println!();
    println!("bf16 GEMM micro-kernels, 1 thread, A and B packed and in cache, median of {runs} runs of {ms} ms");
    println!("(%) = share of the unit's 1-thread peak above");
    println!("{:<18} {:>5} {:>10} {:>20}", "kernel", "kc", "call", "in cache");
    let mut rows = Vec::new();
    for &(unit, peak) in peaks {
        let Some(r) = gemm_bf16::kernel_rate(unit == PeakUnit::AmxBf16, Duration::from_millis(ms as u64), runs) else {
            continue;
        };
        let g = r.in_cache_gflops;
        println!(
            "{:<18} {:>5} {:>10} {:>20}",
            r.kernel,
            r.kc,
            format!("{}x{}", r.rows, r.cols),
            format!("{g:.1} GF/s ({:>3.0} %)", 100.0 * g / peak)
        );
        rows.push(serde_json::json!({
            "unit": unit.name(),
            "kernel": r.kernel,
            "kc": r.kc,
            "rows": r.rows,
            "cols": r.cols,
            "in_cache_gflops": g,
            "peak_1_thread_gflops": peak,
        }));
    }
    rows
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
