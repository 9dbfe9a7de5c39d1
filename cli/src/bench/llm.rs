//! `npurt bench llm`: a decoder LLM's prefill and decode speed, from a model directory or
//! a preset of random weights. Decode at batch 1 reads every weight once per token, so
//! it is bounded by memory bandwidth: the report gives the share of the machine's
//! measured copy bandwidth that the weight reads reach.

use super::emulator::{EmulatorRun, emulator_read, emulator_reset, generation_json};
use crate::values::positive;
use clap::Args;
use npurt::llm::{Llm, LlmOptions, SamplingParams};
use npurt::{Result, Runtime, RuntimeConfig};
use std::time::{Duration, Instant};

/// `npurt bench llm --model DIR|PRESET --prompt-len P --gen G [--batch B] [--json F]`
#[derive(Args)]
pub struct LlmArgs {
    /// A Llama, Qwen2 or Qwen3 model directory, or a preset of random weights: llama-tiny,
    /// qwen2-0.5b, qwen3-0.6b
    #[arg(long, value_name = "DIR|PRESET")]
    model: String,
    /// Prompt tokens per sequence
    #[arg(long, value_name = "P", value_parser = positive)]
    prompt_len: usize,
    /// Tokens generated per sequence, at least 2: prefill gives the first, decode steps the rest (stop tokens ignored)
    #[arg(long = "gen", value_name = "G", value_parser = at_least_two)]
    new_tokens: usize,
    /// Sequences generated together
    #[arg(long, value_name = "B", default_value = "1", value_parser = positive)]
    batch: usize,
    /// Seed of the preset's weights and of the prompt's tokens
    #[arg(long, value_name = "S", default_value = "0")]
    seed: u64,
    /// Also write the figures as JSON to FILE
    #[arg(long, value_name = "FILE", value_parser = crate::outputs::output_file)]
    json: Option<String>,
    /// The KV caches' dtype: f32, f16 or bf16 (default: the precision's, f16 at f16, bf16
    /// at bf16, f32 otherwise)
    #[arg(long, value_name = "DTYPE", value_parser = kv_cache_dtype)]
    kv_cache: Option<npurt::DType>,
    /// After the timed call, profile one decode step (node by node) and write it as a
    /// Chrome trace to FILE (open it in https://ui.perfetto.dev)
    #[arg(long, value_name = "FILE", value_parser = crate::outputs::output_file)]
    trace: Option<String>,
    /// With --trace: time, GFLOP/s and GB/s of the decode step's costliest op kinds
    #[arg(long, requires = "trace")]
    profile: bool,
}

fn kv_cache_dtype(s: &str) -> std::result::Result<npurt::DType, String> {
    match npurt::DType::parse(s) {
        Some(d @ (npurt::DType::F32 | npurt::DType::F16 | npurt::DType::BF16)) => Ok(d),
        _ => Err(format!("{s:?}: the KV cache is f32, f16 or bf16")),
    }
}

/// The best of five copies of a 256 MiB buffer, in bytes moved (read + write) per second.
fn copy_bandwidth() -> f64 {
    let n = 256 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t.elapsed());
        std::hint::black_box(&mut dst);
    }
    2.0 * n as f64 / best.as_secs_f64().max(1e-9)
}

/// One generation's prefill time (call start to the first token of every sequence) and
/// decode time (from there to the last token); over acl-emu also the emulator's counters
/// at the end of prefill and at the end of the call.
struct Timed {
    prefill: Duration,
    decode: Duration,
    emulated: Option<(EmulatorRun, EmulatorRun)>,
}

fn timed(rt: &Runtime, llm: &Llm, prompts: &[Vec<u32>], new_tokens: usize) -> Result<Timed> {
    let params =
        SamplingParams { max_new_tokens: new_tokens, stop_token_ids: Some(vec![]), ..SamplingParams::default() };
    let emulating = emulator_reset(rt)?;
    let t0 = Instant::now();
    let (mut firsts, mut prefill, mut at_prefill) = (0, Duration::ZERO, None);
    llm.generate_ids_stream(prompts, &params, |_| {
        firsts += 1;
        if firsts == prompts.len() {
            prefill = t0.elapsed();
            if emulating {
                at_prefill = emulator_read(rt)?;
            }
        }
        Ok(())
    })?;
    let decode = t0.elapsed().saturating_sub(prefill);
    let emulated = match (at_prefill, if emulating { emulator_read(rt)? } else { None }) {
        (Some(p), Some(end)) => Some((p, end)),
        _ => None,
    };
    Ok(Timed { prefill, decode, emulated })
}

pub fn run(config: RuntimeConfig, a: LlmArgs) -> Result<()> {
    let rt = Runtime::with_config(config)?;
    let options = LlmOptions {
        max_batch: a.batch,
        max_seq_len: Some(a.prompt_len + a.new_tokens),
        kv_cache_dtype: a.kv_cache,
        ..LlmOptions::default()
    };
    let t = Instant::now();
    let llm = if npurt::models::llama::LlamaConfig::preset(&a.model).is_some() {
        Llm::preset(&rt, &a.model, a.seed, options)?
    } else {
        Llm::from_dir_with(&rt, &a.model, options)?
    };
    let load = t.elapsed();
    let vocab = llm.config().vocab_size as u64;
    let mut state = a.seed | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % vocab) as u32
    };
    let prompts: Vec<Vec<u32>> = (0..a.batch).map(|_| (0..a.prompt_len).map(|_| next()).collect()).collect();
    // The first call compiles the prefill and decode buckets; the second is timed.
    let t = Instant::now();
    timed(&rt, &llm, &prompts, a.new_tokens.min(2))?;
    let compile = t.elapsed();
    let Timed { prefill, decode, emulated } = timed(&rt, &llm, &prompts, a.new_tokens)?;
    let steps = a.new_tokens - 1;
    let per_token = decode.as_secs_f64() / steps as f64;
    let tokens_per_s = (a.batch * a.new_tokens.saturating_sub(1)) as f64 / decode.as_secs_f64().max(1e-9);
    // The weights a decode step reads, in the dtype the device holds them in (the share of
    // f32 bytes the compiled constants take: 1 in f32, about 1/2 with bf16 / f16 weights).
    let (host, device) = (llm.weight_bytes(), llm.shared_constant_bytes());
    let stored = if device > 0 { (device as f64 / host as f64).min(1.0) } else { 1.0 };
    let weights = (llm.weight_bytes_per_token() as f64 * stored) as usize;
    let bandwidth = copy_bandwidth();
    let share = weights as f64 / per_token.max(1e-12) / bandwidth;
    let kv_mib = llm.kv_cache_bytes() as f64 / 1048576.0;
    println!(
        "model {} on {}: batch {}, prompt {} tokens, {} generated",
        a.model,
        rt.backend_name(),
        a.batch,
        a.prompt_len,
        a.new_tokens
    );
    println!("  load {:.1} ms, first call (compiles) {:.1} ms", load.as_secs_f64() * 1e3, compile.as_secs_f64() * 1e3);
    println!("  prefill          {:>10.2} ms", prefill.as_secs_f64() * 1e3);
    println!("  decode per token {:>10.3} ms ({tokens_per_s:.1} tokens/s)", per_token * 1e3);
    println!("  KV cache         {kv_mib:>10.3} MiB ({})", llm.cache_shape().dtype);
    println!(
        "  weights {:.1} MiB per token at {:.1} GB/s copy bandwidth: {:.1} % of it",
        weights as f64 / 1048576.0,
        bandwidth / 1e9,
        share * 100.0
    );
    // Over acl-emu: the modelled (not measured) device time, and the aclnn calls of prefill
    // and of each decode step (phase 1: GetWorkspaceSize, phase 2: launches).
    let modelled = emulated.map(|(p, end)| generation_json(&p, &end, steps));
    // A model-only emulator (ACL_EMU_COMPUTE=0) computes nothing: say so beside its figures.
    let mut modelled = modelled;
    let model_only = modelled.is_some() && emulator_model_only();
    if let Some(m) = modelled.as_mut() {
        m["model_only"] = serde_json::Value::Bool(model_only);
    }
    if model_only {
        println!(
            "  acl-emu is model-only (ACL_EMU_COMPUTE=0): its kernels computed nothing, so the tokens are meaningless \
             and the host times above are not a device's; the modelled figures and call counts below are those of a \
             computing run"
        );
    }
    if let Some(m) = &modelled {
        println!(
            "  acl-emu, modelled (not measured): prefill {:.3} ms, decode {:.4} ms per token; aclnn calls: prefill {} + {}, per decode step {} phase-1 + {} phase-2",
            m["prefill_ms"].as_f64().unwrap_or(0.0),
            m["decode_ms_per_token"].as_f64().unwrap_or(0.0),
            m["prefill_phase1_calls"],
            m["prefill_phase2_calls"],
            m["decode_phase1_calls_per_step"],
            m["decode_phase2_calls_per_step"],
        );
    }
    if let Some(path) = &a.trace {
        trace_decode(&rt, &llm, &prompts, path, a.profile)?;
    }
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "model": a.model, "backend": rt.backend_name(), "batch": a.batch,
            "prompt_len": a.prompt_len, "gen": a.new_tokens,
            "prefill_ms": prefill.as_secs_f64() * 1e3, "decode_ms_per_token": per_token * 1e3,
            "tokens_per_s": tokens_per_s, "kv_cache_mib": kv_mib,
            "kv_cache_dtype": llm.cache_shape().dtype.name(), "weight_bytes": weights,
            "copy_bandwidth_gbs": bandwidth / 1e9, "bandwidth_share": share,
            "modelled": modelled,
        });
        crate::outputs::write_json(path, &doc)?;
    }
    Ok(())
}

/// One more generation of three tokens (prefill, then two decode steps) with decode
/// profiling on: the second step's per-node timings written as a Chrome trace to `path`,
/// and with `table` the costliest op kinds printed.
fn trace_decode(rt: &Runtime, llm: &Llm, prompts: &[Vec<u32>], path: &str, table: bool) -> Result<()> {
    llm.set_decode_profiling(true);
    let r = timed(rt, llm, prompts, 3);
    let profile = llm.last_decode_profile();
    llm.set_decode_profiling(false);
    r?;
    let Some(p) = profile else {
        return Err(npurt::Error::invalid("bench llm --trace", "no decode step was profiled"));
    };
    crate::outputs::write(path, p.chrome_trace())?;
    println!(
        "wrote {path} (one decode step, {} nodes, {:.3} ms node by node; open in https://ui.perfetto.dev)",
        p.nodes.len(),
        p.total.as_secs_f64() * 1e3
    );
    if table {
        // The bytes of the nodes `by_op` put under key `k` ("op [implementation]").
        let bytes = |k: &str| {
            p.nodes.iter().filter(|n| format!("{} [{}]", n.op, n.implementation) == k).map(|n| n.bytes).sum::<u64>()
        };
        for (k, d, f, c) in p.by_op().iter().take(12) {
            let s = d.as_secs_f64().max(1e-12);
            println!(
                "  {k:<46} {c:>4} nodes {:>9.3} ms {:>8.1} GFLOP/s {:>7.1} GB/s",
                s * 1e3,
                *f as f64 / s / 1e9,
                bytes(k) as f64 / s / 1e9
            );
        }
    }
    Ok(())
}

/// Whether acl-emu was told to model without computing (`ACL_EMU_COMPUTE` 0, off or false,
/// as the emulator reads it).
fn emulator_model_only() -> bool {
    std::env::var("ACL_EMU_COMPUTE")
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "off" | "false"))
}

/// `--gen`: a decode figure needs at least one decode step after prefill's token.
fn at_least_two(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 2 => Ok(n),
        _ => Err("expected a count >= 2 (prefill makes the first token; decode is timed from the second)".into()),
    }
}
