//! `npurt generate`: text from a decoder LLM's Hugging Face model directory, streamed to
//! standard output as it is generated.

use clap::Args;
use npurt::llm::{Llm, SamplingParams};
use npurt::{Error, Result, Runtime, RuntimeConfig};
use std::io::Write;

/// `npurt generate --model-dir DIR [--max-new-tokens N] [--temperature T] [--top-k K]
/// [--top-p P] [--seed S] "prompt"`
#[derive(Args)]
pub struct GenerateArgs {
    /// A Llama, Qwen2 or Qwen3 model directory (config.json, model.safetensors or its index,
    /// tokenizer.json, optionally generation_config.json)
    #[arg(long, value_name = "DIR", value_parser = crate::outputs::input_path)]
    model_dir: String,
    /// Tokens to generate at most (generation also stops at the model's EOS)
    #[arg(long, value_name = "N", default_value = "64")]
    max_new_tokens: usize,
    /// 0 = greedy; otherwise the softmax temperature
    #[arg(long, value_name = "T", default_value = "0")]
    temperature: f32,
    /// Sample from the K most likely tokens only (0 = all)
    #[arg(long, value_name = "K", default_value = "0")]
    top_k: usize,
    /// Sample from the most likely tokens up to probability P (1 = all)
    #[arg(long, value_name = "P", default_value = "1")]
    top_p: f32,
    /// Seed of the draws
    #[arg(long, value_name = "S", default_value = "0")]
    seed: u64,
    /// The prompt, encoded exactly as tokenizer.json says
    #[arg(value_name = "PROMPT")]
    prompt: String,
}

pub fn run(config: RuntimeConfig, a: GenerateArgs) -> Result<()> {
    let rt = Runtime::with_config(config)?;
    let llm = Llm::from_dir(&rt, &a.model_dir)?;
    let params = SamplingParams {
        max_new_tokens: a.max_new_tokens,
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        seed: a.seed,
        stop_token_ids: None,
    };
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| Error::io("standard output", e);
    llm.generate_stream(&[a.prompt.as_str()], &params, |ev| {
        out.write_all(ev.text.as_bytes()).map_err(io)?;
        out.flush().map_err(io)
    })?;
    writeln!(out).map_err(io)
}
