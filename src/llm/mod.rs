//! Decoder LLMs (Llama, Qwen2) on an npurt runtime: the sampler, the paged KV cache's
//! block manager and the tokenizer with streaming detokenisation.

pub mod blocks;
pub mod sampler;
pub mod tokenizer;

pub use blocks::{BlockError, BlockManager, SeqId};
pub use sampler::{Sampler, SamplingParams, argmax};
pub use tokenizer::{LlmTokenizer, StreamDecoder};

/// Why a sequence stopped. `Send + Sync`, plain data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It produced a stop token (kept in `token_ids`, left out of `text`).
    Stop,
    /// It reached `max_new_tokens` (or the model's position limit).
    Length,
}

/// One prompt's result. `Send + Sync`, plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The generated text (special tokens left out).
    pub text: String,
    /// The generated ids only (the prompt excluded).
    pub token_ids: Vec<u32>,
    pub finish_reason: FinishReason,
}
