//! The plain data the engine and the [`Llm`](super::Llm) facade share.

/// Why a sequence stopped. `Send + Sync`, plain data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It produced a stop token (kept in `token_ids`, left out of `text`).
    Stop,
    /// It reached `max_new_tokens` (or the end of the position table).
    Length,
}

/// How an [`Llm`](super::Llm) is laid out on its device. `Send + Sync`, plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlmOptions {
    /// Device of the runtime.
    pub device: usize,
    /// Token slots per KV-cache block (default 16).
    pub block_size: usize,
    /// Sequences decoded together at most (default 8).
    pub max_batch: usize,
    /// Tokens a sequence holds at most, prompt included (default 2048, capped at
    /// `max_position_embeddings`).
    pub max_seq_len: Option<usize>,
    /// Blocks in the KV cache (default: `max_batch` sequences of `max_seq_len`).
    pub num_blocks: Option<usize>,
    /// The KV caches' dtype (f32, f16 or bf16); default: the runtime's precision's, f16 at
    /// f16, bf16 at bf16, f32 otherwise ([`CacheShape::dtype_for`]).
    ///
    /// [`CacheShape::dtype_for`]: crate::models::llama::CacheShape::dtype_for
    pub kv_cache_dtype: Option<runtime::DType>,
}

impl Default for LlmOptions {
    fn default() -> Self {
        LlmOptions {
            device: 0,
            block_size: 16,
            max_batch: 8,
            max_seq_len: None,
            num_blocks: None,
            kv_cache_dtype: None,
        }
    }
}
