//! Decoder LLMs (Llama, Qwen2) on an npurt runtime: [`Llm`] loads a Hugging Face model
//! directory (or a preset of random weights), and generates with continuous batching over
//! a paged KV cache: prefill and decode graphs compiled once per shape bucket, sharing one
//! copy of the weights on the device.
//!
//! ```no_run
//! let rt = npurt::Runtime::new()?;
//! let llm = npurt::llm::Llm::from_dir(&rt, "path/to/Qwen2-0.5B")?;
//! let out = llm.generate(&["The capital of France is"], &npurt::llm::SamplingParams::greedy(16))?;
//! println!("{}", out[0].text);
//! # Ok::<(), npurt::Error>(())
//! ```

pub mod blocks;
mod engine;
mod options;
pub mod sampler;
pub mod tokenizer;

pub use blocks::{BlockError, BlockManager, SeqId};
pub use options::{FinishReason, LlmOptions};
pub use sampler::{Sampler, SamplingParams, argmax};
pub use tokenizer::{LlmTokenizer, StreamDecoder};

use crate::models::llama::{self, CacheShape, LlamaConfig, LlamaSource, Step};
use engine::{Emitted, Engine, Request};
use runtime::{Error, Result};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// One prompt's result. `Send + Sync`, plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The generated text (special tokens left out; empty without a tokenizer).
    pub text: String,
    /// The generated ids only (the prompt excluded).
    pub token_ids: Vec<u32>,
    pub finish_reason: FinishReason,
}

/// One token as it is generated, given to a streaming callback. `Send + Sync` (borrows).
#[derive(Debug)]
pub struct TokenEvent<'a> {
    /// Which prompt of the call.
    pub prompt: usize,
    pub token_id: u32,
    /// The new text (empty while a character is incomplete, and without a tokenizer).
    pub text: &'a str,
    /// The logits the token was chosen from (prefill's for the first token, then each
    /// decode step's).
    pub logits: &'a [f32],
    /// Set on the prompt's last token.
    pub finish_reason: Option<FinishReason>,
}

/// A decoder LLM on an npurt runtime. `Send + Sync`: calls from several threads take
/// turns on the model (a mutex around its engine), each getting what it would alone.
pub struct Llm {
    engine: Mutex<Engine>,
    tokenizer: Option<LlmTokenizer>,
    config: LlamaConfig,
    eos: Vec<u32>,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llm").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Llm {
    /// Loads a Hugging Face model directory (`config.json`, `model.safetensors` or its
    /// index, `tokenizer.json`, optionally `generation_config.json`) with default options.
    pub fn from_dir(rt: &runtime::Runtime, dir: impl AsRef<Path>) -> Result<Llm> {
        Self::from_dir_with(rt, dir, LlmOptions::default())
    }

    /// [`from_dir`](Self::from_dir) with `options`.
    pub fn from_dir_with(rt: &runtime::Runtime, dir: impl AsRef<Path>, options: LlmOptions) -> Result<Llm> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "not a model directory");
            return Err(Error::io(dir.display().to_string(), missing));
        }
        let config = LlamaConfig::from_file(dir.join("config.json"))?;
        let tokenizer = LlmTokenizer::from_file(dir.join("tokenizer.json"), config.vocab_size)?;
        let mut eos = config.eos_token_ids.clone();
        let gen_path = dir.join("generation_config.json");
        if gen_path.exists() {
            let text = crate::files::read_json_text(&gen_path)?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::format_from(gen_path.display().to_string(), e))?;
            if let Some(o) = v.as_object()
                && let Some(ids) = crate::models::llama_config::eos_ids(o).map_err(|e| e.in_file(&gen_path))?
            {
                eos = ids;
            }
        }
        let source = LlamaSource::from_dir(dir)?;
        let weights = llama::load(&config, source.clone())?;
        Self::new(rt, config, weights, source, Some(tokenizer), eos, &options)
    }

    /// A preset of seeded random weights (`llama-tiny`, `qwen2-0.5b`, `qwen3-0.6b`; see
    /// [`LlamaConfig::preset`]); no tokenizer, so generate from ids.
    pub fn preset(rt: &runtime::Runtime, name: &str, seed: u64, options: LlmOptions) -> Result<Llm> {
        let config = LlamaConfig::preset(name).ok_or_else(|| {
            Error::Config(format!("llm: unknown preset {name:?} (known: {})", LlamaConfig::PRESETS.join(", ")))
        })?;
        let weights = llama::load(&config, LlamaSource::Random(seed))?;
        let eos = config.eos_token_ids.clone();
        Self::new(rt, config, weights, LlamaSource::Random(seed), None, eos, &options)
    }

    fn new(
        rt: &runtime::Runtime,
        config: LlamaConfig,
        weights: llama::LlamaWeights,
        source: LlamaSource,
        tokenizer: Option<LlmTokenizer>,
        eos: Vec<u32>,
        options: &LlmOptions,
    ) -> Result<Llm> {
        rt.device_info(options.device)?;
        let engine = Engine::new(rt, config.clone(), weights, source, options)?;
        Ok(Llm { engine: Mutex::new(engine), tokenizer, config, eos })
    }

    fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }
    /// The tokenizer (`None` for a preset).
    pub fn tokenizer(&self) -> Option<&LlmTokenizer> {
        self.tokenizer.as_ref()
    }
    /// The ids generation stops at by default.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos
    }
    /// The KV caches' shape.
    pub fn cache_shape(&self) -> CacheShape {
        self.engine().cache
    }
    /// Bytes of the KV caches (every layer's keys and values, in the caches' dtype:
    /// [`CacheShape::dtype`]).
    pub fn kv_cache_bytes(&self) -> usize {
        self.cache_shape().bytes(&self.config).unwrap_or(usize::MAX)
    }
    /// Bytes of the weights (merged, f32).
    pub fn weight_bytes(&self) -> usize {
        self.engine().weight_bytes
    }
    /// Bytes of the weights one decode step reads (merged, f32): all of them but an untied
    /// embedding table, of which a step reads one row per sequence.
    pub fn weight_bytes_per_token(&self) -> usize {
        self.engine().weight_bytes_per_token
    }
    /// Bytes of weights held on the host beside the compiled graphs' constants: those read
    /// at load, until the first generation compiles a graph (0 from then on; a later shape
    /// reads them again from their source only while it compiles).
    pub fn host_weight_bytes(&self) -> usize {
        self.engine().host_weight_bytes()
    }
    /// Device bytes of the constants the compiled graphs share (each weight once).
    pub fn shared_constant_bytes(&self) -> usize {
        self.engine().constants.device_bytes()
    }
    /// Graphs compiled so far.
    pub fn compiled_steps(&self) -> Vec<Step> {
        let mut v: Vec<Step> = self.engine().graphs.keys().copied().collect();
        v.sort_by_key(|s| format!("{s:?}"));
        v
    }
    /// From now on (`on`) or no longer, run every decode step node by node and keep its
    /// per-node timings: a step so run is slower (each node waits for the last), so this is
    /// for finding where a step's time goes, not for serving. Like every call on the
    /// model, it waits for a generation running on another thread to end.
    pub fn set_decode_profiling(&self, on: bool) {
        let mut e = self.engine();
        e.profiling = on;
        if !on {
            e.last_decode_profile = None;
        }
    }
    /// The per-node profile of the latest decode step run with profiling on
    /// ([`Llm::set_decode_profiling`]), if any.
    pub fn last_decode_profile(&self) -> Option<runtime::graph::RunProfile> {
        self.engine().last_decode_profile.clone()
    }
    /// Sequences decoded together at most, and tokens per sequence at most.
    pub fn limits(&self) -> (usize, usize) {
        let e = self.engine();
        (e.max_batch, e.max_seq_len)
    }

    /// The ids of `text` as `tokenizer.json` encodes it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .as_ref()
            .ok_or_else(|| Error::Config("llm: this model has no tokenizer (a preset): pass token ids".into()))?
            .encode(text)
    }

    /// Generates a continuation of each prompt.
    pub fn generate(&self, prompts: &[&str], params: &SamplingParams) -> Result<Vec<Generation>> {
        self.generate_stream(prompts, params, |_| Ok(()))
    }

    /// [`generate`](Self::generate) from token ids.
    pub fn generate_ids(&self, prompts: &[Vec<u32>], params: &SamplingParams) -> Result<Vec<Generation>> {
        self.generate_ids_stream(prompts, params, |_| Ok(()))
    }

    /// [`generate`](Self::generate), calling `on_token` with each token as it is chosen
    /// (an error from it stops the call).
    pub fn generate_stream(
        &self,
        prompts: &[&str],
        params: &SamplingParams,
        on_token: impl FnMut(&TokenEvent<'_>) -> Result<()>,
    ) -> Result<Vec<Generation>> {
        let ids = prompts.iter().map(|p| self.encode(p)).collect::<Result<Vec<_>>>()?;
        self.generate_ids_stream(&ids, params, on_token)
    }

    /// [`generate_ids`](Self::generate_ids), streaming as
    /// [`generate_stream`](Self::generate_stream).
    pub fn generate_ids_stream(
        &self,
        prompts: &[Vec<u32>],
        params: &SamplingParams,
        mut on_token: impl FnMut(&TokenEvent<'_>) -> Result<()>,
    ) -> Result<Vec<Generation>> {
        params.validate()?;
        let stops = params.stop_token_ids.clone().unwrap_or_else(|| self.eos.clone());
        let mut requests: Vec<Request> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| Request {
                ids: p.clone(),
                sampler: Sampler::new(params, params.seed.wrapping_add(i as u64)),
                stops: stops.clone(),
                max_new: params.max_new_tokens,
            })
            .collect();
        let mut streams = vec![StreamDecoder::new(); prompts.len()];
        let tok = self.tokenizer.as_ref();
        let mut on = |e: Emitted<'_>| -> Result<()> {
            let mut text = match tok {
                Some(t) if !stops.contains(&e.token) => streams[e.index].push(t, e.token)?.unwrap_or_default(),
                _ => String::new(),
            };
            if let (Some(t), Some(_)) = (tok, e.finish) {
                text.push_str(&streams[e.index].finish(t)?);
            }
            let ev = TokenEvent {
                prompt: e.index,
                token_id: e.token,
                text: &text,
                logits: e.logits,
                finish_reason: e.finish,
            };
            on_token(&ev)
        };
        let done = self.engine().generate(&mut requests, &mut on)?;
        done.into_iter()
            .map(|(token_ids, finish_reason)| {
                let kept: Vec<u32> = token_ids.iter().copied().filter(|t| !stops.contains(t)).collect();
                let text = match tok {
                    Some(t) => t.decode(&kept)?,
                    None => String::new(),
                };
                Ok(Generation { text, token_ids, finish_reason })
            })
            .collect()
    }
}
