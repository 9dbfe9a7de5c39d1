//! `npurt bench bert --concurrent N`: N threads run one compiled BERT at once, each on
//! inputs of its own; every output is checked against a serial run of the same input.

use super::common::{Model, Prepared, bert_inputs, prepare_with};
use crate::progress;
use npurt::{Result, RuntimeConfig, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Largest |difference| between a concurrent and the serial output that still counts as
/// the same result (hidden states are layer-normalised, of order 1).
const TOLERANCE: f32 = 1e-4;

fn host(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_ndarray::<f32>()?.iter().copied().collect())
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    base: &RuntimeConfig,
    bm: &Model,
    model: &str,
    batch: usize,
    seq: usize,
    runs: usize,
    threads: usize,
    json: Option<&str>,
) -> Result<()> {
    let Prepared { rt, cg, inputs } = prepare_with(base, "+mapping", bm, batch, seq, threads)?;
    let total = threads
        .checked_mul(runs)
        .ok_or_else(|| npurt::Error::Config(format!("--concurrent {threads} × --runs {runs} overflows")))?;
    drop(cg.run(&inputs.iter().collect::<Vec<_>>())?); // warm-up
    let pb = progress::bar(total.saturating_mul(2) as u64, "serial runs");
    // Inputs and serial outputs, one per run (seed = run number).
    let mut cases = Vec::with_capacity(total);
    let t_serial = Instant::now();
    for seed in 0..total {
        let ins = bert_inputs(&rt, bm, batch, seq, seed)?;
        let out = host(&cg.run(&ins.iter().collect::<Vec<_>>())?[0])?;
        cases.push((ins, out));
        pb.inc(1);
    }
    let serial_s = t_serial.elapsed().as_secs_f64();
    pb.set_message(format!("{threads} threads at once"));
    let mismatches = AtomicUsize::new(0);
    let t0 = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (cases, cg, mismatches, pb) = (&cases, &cg, &mismatches, &pb);
                s.spawn(move || -> Result<()> {
                    for r in 0..runs {
                        let (ins, want) = &cases[r * threads + t];
                        let got = host(&cg.run(&ins.iter().collect::<Vec<_>>())?[0])?;
                        let d = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                        if got.len() != want.len() || d.is_nan() || d > TOLERANCE {
                            log::warn!("thread {t} run {r}: max |diff| {d:e} from the serial run");
                            mismatches.fetch_add(1, Ordering::Relaxed);
                        }
                        pb.inc(1);
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err(npurt::Error::Config("a benchmark thread panicked".into()))))
            .collect()
    });
    let wall = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    results.into_iter().collect::<Result<Vec<()>>>()?;
    let mismatches = mismatches.into_inner();
    let runs_per_s = total as f64 / wall.max(1e-12);
    let serial_per_s = total as f64 / serial_s.max(1e-12);
    let arenas = cg.arena_stats();
    println!(
        "BERT {model}, batch {batch}, seq {seq}, backend {}, precision {}: {threads} threads × {runs} runs on one compiled graph",
        rt.backend_name(),
        base.precision.name()
    );
    println!(
        "concurrent: {runs_per_s:.2} runs/s (serial {serial_per_s:.2} runs/s, ×{:.2}); arenas {} (peak {}, {:.1} MiB); mismatches: {mismatches}",
        runs_per_s / serial_per_s.max(1e-12),
        arenas.arenas,
        arenas.peak,
        arenas.bytes as f64 / (1u64 << 20) as f64
    );
    if let Some(path) = json {
        let doc = serde_json::json!({
            "model": model, "batch": batch, "seq": seq, "runs": runs, "backend": rt.backend_name(),
            "concurrent": {
                "threads": threads, "runs": total, "mismatches": mismatches, "runs_per_s": runs_per_s,
                "serial_runs_per_s": serial_per_s, "arenas": arenas.arenas, "arena_peak": arenas.peak,
                "arena_bytes": arenas.bytes,
            },
        });
        crate::outputs::write_json(path, &doc)?;
        println!("wrote {path}");
    }
    if mismatches > 0 {
        let msg = format!("{mismatches} of {total} concurrent runs differ from the serial run");
        return Err(npurt::Error::backend_msg(rt.backend_name(), msg));
    }
    Ok(())
}
