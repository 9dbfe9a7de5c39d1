//! `npurt bench bert --accuracy`: the final hidden states with fp16 or bf16 weights, or
//! int8 Linear products (`--precision`; bf16 when it names f32 or auto) against f32 on the same weights and
//! inputs (max |diff|, cosine over all values), printed and, with `--json FILE`, written
//! as `{"precision", "cosine", "max_abs_diff", "values"}`.

use super::common::{Model, Prepared, prepare};
use crate::progress;
use npurt::{Precision, Result, RuntimeConfig, Tensor};

pub fn run(base: &RuntimeConfig, bm: &Model, batch: usize, seq: usize, json: Option<&str>) -> Result<()> {
    let low = match base.precision {
        p @ (Precision::F16 | Precision::Bf16 | Precision::Int8) => p,
        Precision::F32 | Precision::Auto => Precision::Bf16,
    };
    let pb = progress::bar(2, "accuracy");
    let mut outs = Vec::new();
    for p in [Precision::F32, low] {
        pb.set_message(format!("precision {}", p.name()));
        let cfg = RuntimeConfig { precision: p, ..base.clone() };
        let Prepared { cg, inputs, .. } = prepare(&cfg, "+mapping", bm, batch, seq)?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let (o, profile) = cg.run_profiled(&refs)?;
        let mut units: Vec<&str> = profile.nodes.iter().filter(|n| n.op == "Linear").map(|n| n.unit.label).collect();
        units.dedup();
        pb.suspend(|| println!("precision {}: Linear nodes ran on {}", p.name(), units.join(", ")));
        if p == Precision::Int8 && cfg.backend.as_deref().is_none_or(|b| b == "cpu") {
            let f = backend_cpu::features::get();
            let unit = backend_cpu::kernels::gemm_i8::Path::best(f).map_or("none (f32)", |u| u.name());
            pb.suspend(|| println!("precision int8: the CPU's int8 unit is {unit}"));
        }
        outs.push(o[0].to_ndarray::<f32>()?.iter().copied().collect::<Vec<f32>>());
        pb.inc(1);
    }
    pb.finish_and_clear();
    let (a, b) = (&outs[0], &outs[1]);
    let max = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let cosine = dot / (na * nb).max(f64::MIN_POSITIVE);
    println!(
        "{} vs f32 final hidden states ({} values): max |diff| {max:.3e}, cosine {cosine:.6}",
        low.name(),
        a.len()
    );
    if let Some(path) = json {
        let doc = serde_json::json!({
            "precision": low.name(),
            "cosine": cosine,
            "max_abs_diff": max,
            "values": a.len(),
        });
        crate::outputs::write_json(path, &doc)?;
    }
    Ok(())
}
