//! Pieces the benchmarks share: statistics, peak memory, the BERT model `--model` names,
//! the ablation's configurations and a compiled BERT with its inputs.

use npurt::models::bert::{self, BertConfig, Weights};
use npurt::models::safetensors::SafetensorsFile;
use npurt::{Error, Optimizations, Result, Runtime, RuntimeConfig, Tensor, Tier};
use runtime::graph::{CompileOptions, CompiledGraph, RunProfile};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The median of `v` (the upper one of an even count; 0 when empty); sorts `v`.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Peak resident set size of this process (VmHWM), bytes.
pub fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(l.split_whitespace().nth(1)?.parse::<u64>().ok()?.saturating_mul(1024))
}

/// The seed's ablation, cumulative.
pub const CONFIGS: &[&str] = &["none", "+pool", "+reuse", "+parallel", "+mapping"];

/// The runtime configuration of one step of the ablation.
pub fn config_for(base: &RuntimeConfig, name: &str) -> Result<RuntimeConfig> {
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

/// Whether the runtime's backend has kernels of the generic tier.
fn has_generic_tier(rt: &Runtime) -> bool {
    rt.kernels().iter().any(|k| k.tier == Tier::Generic)
}

/// The seed of the random weights a model without a weights file runs on.
const RANDOM_SEED: u64 = 42;

/// The model `--model` names: a preset (random weights), or a Hugging Face directory
/// (`config.json`, and `model.safetensors` when present: its weights, memory-mapped) or a
/// `config.json` file (random weights).
pub struct Model {
    pub config: BertConfig,
    file: Option<Arc<SafetensorsFile>>,
    /// Where the weights come from, in words ("random weights ..." or "weights from ...").
    pub weights_origin: String,
}

impl Model {
    /// The model `model` names. A directory's `model.safetensors` is used when anything is
    /// at that path: one that cannot be read (a broken link, a directory, a device) is an
    /// error naming it, not a silent fall back to random weights.
    pub fn open(model: &str) -> Result<Model> {
        let random = |why: String| format!("random weights (seed {RANDOM_SEED}): {why}");
        if let Some(config) = BertConfig::preset(model) {
            let weights_origin = random(format!("{model} is a preset"));
            return Ok(Model { config, file: None, weights_origin });
        }
        if model.is_empty() {
            return Err(Error::Config(
                "--model: an empty name; expected a preset (bert-large, bert-base, minilm-l6, tiny), a model \
                 directory or a config.json file"
                    .into(),
            ));
        }
        let p = std::path::Path::new(model);
        let file = if p.is_dir() { p.join("config.json") } else { p.to_path_buf() };
        let config = BertConfig::from_file(file)?;
        let st = p.join("model.safetensors");
        if !p.is_dir() {
            let weights_origin = random(format!("{model} is a config.json file"));
            return Ok(Model { config, file: None, weights_origin });
        }
        if std::fs::symlink_metadata(&st).is_err() {
            let weights_origin = random(format!("{model} has no model.safetensors"));
            return Ok(Model { config, file: None, weights_origin });
        }
        log::info!("weights from {}", st.display());
        let file = Some(Arc::new(SafetensorsFile::open(&st)?));
        Ok(Model { config, file, weights_origin: format!("weights from {}", st.display()) })
    }

    /// Random weights from a fixed seed unless the directory has its own.
    fn weights(&self) -> Weights {
        match &self.file {
            Some(f) => Weights::File(f.clone()),
            None => Weights::Random(RANDOM_SEED),
        }
    }
}

/// Per unit of device 0: (label, compute utilisation, bandwidth utilisation) over a
/// profiled run, each a fraction of the unit's nominal peak.
pub fn utilisation(rt: &Runtime, p: &RunProfile) -> Vec<(String, f64, f64)> {
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
pub struct Prepared {
    pub rt: Runtime,
    pub cg: CompiledGraph,
    pub inputs: Vec<Tensor>,
}

/// BERT compiled under the ablation step `cname`, with at most
/// [`runtime::graph::DEFAULT_MAX_ARENAS`] runs in flight at once.
pub fn prepare(base: &RuntimeConfig, cname: &str, bm: &Model, batch: usize, seq: usize) -> Result<Prepared> {
    prepare_with(base, cname, bm, batch, seq, runtime::graph::DEFAULT_MAX_ARENAS)
}

/// [`prepare`] with at most `max_arenas` runs of the graph in flight at once.
pub fn prepare_with(
    base: &RuntimeConfig,
    cname: &str,
    bm: &Model,
    batch: usize,
    seq: usize,
    max_arenas: usize,
) -> Result<Prepared> {
    let mut cfg = config_for(base, cname)?;
    let mut rt = Runtime::with_config(cfg.clone())?;
    if cfg.forced_tier == Some(Tier::Generic) && base.forced_tier.is_none() && !has_generic_tier(&rt) {
        // A device whose kernels are all its own (Ascend's aclnn) has no portable tier:
        // "default" mapping there means its kernels without fusion.
        log::info!("{cname}: {} has no generic kernels; running its own, unfused", rt.backend_name());
        cfg.forced_tier = None;
        rt = Runtime::with_config(cfg.clone())?;
    }
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
pub fn bert_inputs(rt: &Runtime, bm: &Model, batch: usize, seq: usize, seed: usize) -> Result<Vec<Tensor>> {
    let bc = &bm.config;
    // Token ids past BERT's special tokens (101..) where the vocabulary has room, else any id.
    let (first, span) = if bc.vocab_size > 101 { (101, bc.vocab_size - 101) } else { (0, bc.vocab_size.max(1)) };
    let n =
        batch.checked_mul(seq).ok_or_else(|| Error::Overflow { what: format!("batch {batch} x seq {seq} tokens") })?;
    let ids: Vec<i64> = (0..n)
        .map(|i| (first + (i.wrapping_mul(7919).wrapping_add(seed.wrapping_mul(104_729))) % span) as i64)
        .collect();
    let tt = vec![0i64; n];
    let pad = (seed % 4).min(seq.saturating_sub(1));
    let mask: Vec<f32> = (0..n).map(|i| if i >= n - pad { 0.0 } else { 1.0 }).collect();
    Ok(vec![
        rt.from_slice(&ids, [batch, seq], 0)?,
        rt.from_slice(&tt, [batch, seq], 0)?,
        rt.from_slice(&mask, [batch, seq], 0)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_picks_the_middle() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
    }

    #[test]
    fn the_ablation_adds_one_optimisation_per_step() {
        let base = RuntimeConfig::default();
        let none = config_for(&base, "none").unwrap();
        assert!(!none.optimizations.memory_pool && !none.optimizations.hardware_mapping);
        assert_eq!(none.forced_tier, Some(Tier::Generic));
        let all = config_for(&base, "+mapping").unwrap();
        assert!(all.optimizations.memory_pool && all.optimizations.memory_reuse);
        assert!(all.optimizations.parallel_scheduling && all.optimizations.hardware_mapping);
        assert_eq!(all.forced_tier, None);
        assert!(config_for(&base, "+bogus").is_err());
    }
}
