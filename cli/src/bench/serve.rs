//! `npurt bench bert --serve`: the child process of `--compare-ort` (see compare_ort.rs).
//! The full configuration, compiled and warmed up, timed once per `run` line on standard
//! input; one JSON line per reply, and the peak memory on `quit`.

use super::common::{Model, Prepared, peak_rss, prepare, utilisation};
use npurt::{Result, RuntimeConfig, Tensor};
use std::io::Write;
use std::time::Instant;

pub fn run(base: &RuntimeConfig, bm: &Model, batch: usize, seq: usize) -> Result<()> {
    let Prepared { rt, cg, inputs } = prepare(base, "+mapping", bm, batch, seq)?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (_, profile) = cg.run_profiled(&refs)?;
    let flops: u64 = profile.nodes.iter().map(|n| n.flops).sum();
    let say = |v: serde_json::Value| -> Result<()> {
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
