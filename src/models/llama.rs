//! Llama-family decoders (`LlamaForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM`) as
//! two graphs over one copy of the weights: prefill (a batch of right-padded prompts,
//! causal attention on their fresh keys and values) and decode (one token per sequence,
//! paged attention over the KV caches). Both write the new keys and values into the caches, which are graph
//! inputs updated in place (`KvCacheWrite`).
//!
//! Per layer: RmsNorm (AddRmsNorm after the first, carrying the residual) → merged
//! q/k/v Linear → tokens-major heads → (Qwen3: RmsNorm of each q and k head) → Rope on q
//! and k → KvCacheWrite → Attention{causal} (prefill) or PagedAttention (decode) → o_proj → AddRmsNorm → merged gate/up Linear →
//! SwiGlu → down. Then the final norm and the output projection (the embedding table when
//! tied). The constants carry the same names and bytes in every graph, so graphs compiled
//! with one `SharedConstants` hold the weights on the device once.

pub use super::llama_config::{Architecture, LlamaConfig, LlamaConfigError};
pub use super::llama_weights::{LayerWeights, LlamaSource, LlamaWeights, load};
use runtime::graph::{Graph, HostTensor, ValueId};
use runtime::{AttentionLayout, DType, Error, Op, Result};

/// The shape of the paged KV caches: `num_blocks` blocks of `block_size` slots, each
/// sequence's block table `max_blocks` wide, elements of `dtype`. `Send + Sync`, plain data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    pub num_blocks: usize,
    pub block_size: usize,
    pub max_blocks: usize,
    /// The caches' elements: f32, or f16 / bf16 (the keys and values are cast as they are
    /// written, and the decode query to the same dtype for PagedAttention).
    pub dtype: DType,
}

impl CacheShape {
    /// One layer's key (or value) cache: `[num_blocks, block_size, kv_heads, head_dim]`.
    pub fn dims(&self, c: &LlamaConfig) -> [usize; 4] {
        [self.num_blocks, self.block_size, c.num_key_value_heads, c.head_dim]
    }

    /// Bytes of every layer's key and value caches in [`dtype`](Self::dtype) (`None` on
    /// overflow).
    pub fn bytes(&self, c: &LlamaConfig) -> Option<usize> {
        let one = self.dims(c).iter().try_fold(self.dtype.size(), |a, &d| a.checked_mul(d))?;
        one.checked_mul(2)?.checked_mul(c.num_hidden_layers)
    }

    /// The caches' dtype at `precision` (resolved: not `Auto`): f16 and bf16 keep their
    /// caches in that dtype (half the bytes, and the dtype of Ascend's fused decode
    /// attention); every other precision keeps f32.
    pub fn dtype_for(precision: runtime::Precision) -> DType {
        match precision {
            runtime::Precision::F16 => DType::F16,
            runtime::Precision::Bf16 => DType::BF16,
            _ => DType::F32,
        }
    }
}

/// The rotary tables `[positions, head_dim / 2]` of a model, computed once and shared (as
/// the weights) by its graphs. `Send + Sync`.
#[derive(Clone, Debug)]
pub struct RopeTables {
    pub cos: HostTensor,
    pub sin: HostTensor,
}

impl RopeTables {
    /// Tables for positions `0..positions` (at most `max_position_embeddings`).
    pub fn new(c: &LlamaConfig, positions: usize) -> Result<RopeTables> {
        let p = positions.clamp(1, c.max_position_embeddings);
        let (cos, sin) = runtime::op::rope_tables(c.rope_theta, c.head_dim, p, c.rope_scaling);
        Ok(RopeTables {
            cos: HostTensor::from_vec([p, c.head_dim / 2], cos)?,
            sin: HostTensor::from_vec([p, c.head_dim / 2], sin)?,
        })
    }
}

/// Which graph: prefill of `batch` prompts of at most `seq` tokens, or a decode step of
/// `batch` sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Prefill { batch: usize, seq: usize },
    Decode { batch: usize },
}

/// A built graph and what its inputs are. Inputs, in order: `input_ids` (`[B, S]` i64
/// prefill, `[B]` decode), `positions` (`[B, S]` / `[B, 1]` i64), `slots` (`[B·S]` /
/// `[B]` i64, −1 skips), then prefill: `last` (`[B]` i64, the flat index `b·S + len_b − 1`
/// of each row's last real token); decode: `block_tables` (`[B, max_blocks]` i32) and
/// `context_lens` (`[B]` i32); then each layer's key and value caches (of the
/// [`CacheShape`]'s dtype). One output: the logits `[B, vocab]`.
pub struct DecoderGraph {
    pub graph: Graph,
    pub step: Step,
    pub logits: ValueId,
}

struct Builder<'a> {
    g: Graph,
    c: &'a LlamaConfig,
    w: &'a LlamaWeights,
    /// Rows `B` and tokens per row `S` (1 when decoding).
    b: usize,
    s: usize,
    /// The caches' dtype.
    kv: DType,
}

impl Builder<'_> {
    fn constant(&mut self, name: &str, t: &HostTensor) -> ValueId {
        self.g.constant(name, t.clone())
    }

    fn linear(&mut self, name: &str, x: ValueId, w: &HostTensor, bias: Option<&HostTensor>) -> Result<ValueId> {
        let wv = self.constant(&format!("{name}.weight"), w);
        match bias {
            Some(bt) => {
                let bv = self.constant(&format!("{name}.bias"), bt);
                self.g.op(name, Op::Linear, &[x, wv, bv])
            }
            None => self.g.op(name, Op::Linear, &[x, wv]),
        }
    }

    /// `x` (f32) cast to the caches' dtype; `x` itself when that is f32.
    fn narrow_to_cache(&mut self, name: &str, x: ValueId) -> Result<ValueId> {
        match self.kv {
            DType::F32 => Ok(x),
            to => self.g.op(name, Op::Cast { to }, &[x]),
        }
    }

    /// `x` (of the caches' dtype) back in f32; `x` itself when it is f32.
    fn widen_from_cache(&mut self, name: &str, x: ValueId) -> Result<ValueId> {
        match self.kv {
            DType::F32 => Ok(x),
            _ => self.g.op(name, Op::Cast { to: DType::F32 }, &[x]),
        }
    }

    fn reshape(&mut self, name: &str, x: ValueId, dims: &[usize]) -> Result<ValueId> {
        let shape = dims.iter().map(|&d| d as isize).collect();
        self.g.op(name, Op::Reshape { shape }, &[x])
    }

    /// q `[B, S, H, D]`, k and v `[B, S, KVH, D]` from the merged projection `qkv`.
    fn split_heads(&mut self, p: &str, qkv: ValueId) -> Result<[ValueId; 3]> {
        let (h, kvh, d) = (self.c.num_attention_heads, self.c.num_key_value_heads, self.c.head_dim);
        let heads = self.reshape(&format!("{p}.heads"), qkv, &[self.b, self.s, h + 2 * kvh, d])?;
        let mut out = [heads; 3];
        for (i, (name, start, end)) in
            [("q", 0, h), ("k", h, h + kvh), ("v", h + kvh, h + 2 * kvh)].into_iter().enumerate()
        {
            let op = Op::Slice { starts: vec![start as i64], ends: vec![end as i64], axes: vec![2], steps: vec![] };
            out[i] = self.g.op(&format!("{p}.{name}"), op, &[heads])?;
        }
        Ok(out)
    }

    /// Layer `l`'s attention on the normed `x`; `io` holds the positions, slots and the
    /// decode inputs, `caches` the layer's key and value caches.
    fn attention(&mut self, l: usize, x: ValueId, io: &StepInputs, caches: [ValueId; 2]) -> Result<ValueId> {
        let lw = &self.w.layers[l];
        let p = format!("model.layers.{l}.self_attn");
        let (c, b, s) = (self.c, self.b, self.s);
        let qkv = self.linear(&format!("{p}.qkv_proj"), x, &lw.qkv, lw.qkv_bias.as_ref())?;
        let [mut q, mut k, v] = self.split_heads(&p, qkv)?;
        if let Some([qn, kn]) = &lw.qk_norm {
            // Qwen3: each head RMS-normalised over head_dim before the rotation.
            let eps = c.rms_norm_eps;
            let (qn, kn) =
                (self.constant(&format!("{p}.q_norm.weight"), qn), self.constant(&format!("{p}.k_norm.weight"), kn));
            q = self.g.op(&format!("{p}.q_norm"), Op::RmsNorm { eps }, &[q, qn])?;
            k = self.g.op(&format!("{p}.k_norm"), Op::RmsNorm { eps }, &[k, kn])?;
        }
        let rope = Op::Rope { interleaved: false, layout: AttentionLayout::Bsnd };
        let q = self.g.op(&format!("{p}.rope_q"), rope.clone(), &[q, io.cos, io.sin, io.positions])?;
        let k = self.g.op(&format!("{p}.rope_k"), rope, &[k, io.cos, io.sin, io.positions])?;
        let (kvh, d) = (c.num_key_value_heads, c.head_dim);
        let kf = self.reshape(&format!("{p}.k_tokens"), k, &[b * s, kvh, d])?;
        let vf = self.reshape(&format!("{p}.v_tokens"), v, &[b * s, kvh, d])?;
        // The rows written in the caches' dtype (prefill's attention reads them in f32).
        let kf = self.narrow_to_cache(&format!("{p}.k_tokens.cast"), kf)?;
        let vf = self.narrow_to_cache(&format!("{p}.v_tokens.cast"), vf)?;
        let written = self.g.op_multi(
            &format!("{p}.cache_write"),
            Op::KvCacheWrite,
            &[caches[0], caches[1], kf, vf, io.slots],
        )?;
        let ctx = match io.paged {
            None => {
                let op = Op::Attention { scale: None, layout: AttentionLayout::Bsnd, causal: true };
                self.g.op(&format!("{p}.attention"), op, &[q, k, v])?
            }
            Some((tables, lens)) => {
                // The query in the caches' dtype, the context back in f32.
                let q1 = self.reshape(&format!("{p}.q_rows"), q, &[b, c.num_attention_heads, d])?;
                let q1 = self.narrow_to_cache(&format!("{p}.q_rows.cast"), q1)?;
                let op = Op::PagedAttention { scale: None };
                let ctx =
                    self.g.op(&format!("{p}.paged_attention"), op, &[q1, written[0], written[1], tables, lens])?;
                self.widen_from_cache(&format!("{p}.paged_attention.f32"), ctx)?
            }
        };
        let ctx = self.reshape(&format!("{p}.merge"), ctx, &[b, s, c.num_attention_heads * d])?;
        self.linear(&format!("{p}.o_proj"), ctx, &lw.o, lw.o_bias.as_ref())
    }

    fn mlp(&mut self, l: usize, x: ValueId) -> Result<ValueId> {
        let lw = &self.w.layers[l];
        let p = format!("model.layers.{l}.mlp");
        let gu = self.linear(&format!("{p}.gate_up_proj"), x, &lw.gate_up, None)?;
        let act = self.g.op(&format!("{p}.swiglu"), Op::SwiGlu, &[gu])?;
        self.linear(&format!("{p}.down_proj"), act, &lw.down, None)
    }

    /// `rmsnorm(x + residual)` and the new residual; the first layer's has no residual yet.
    fn add_norm(&mut self, name: &str, x: ValueId, residual: Option<ValueId>, w: &HostTensor) -> Result<[ValueId; 2]> {
        let eps = self.c.rms_norm_eps;
        let wv = self.constant(&format!("{name}.weight"), w);
        match residual {
            None => Ok([self.g.op(name, Op::RmsNorm { eps }, &[x, wv])?, x]),
            Some(r) => {
                let out = self.g.op_multi(name, Op::AddRmsNorm { eps }, &[x, r, wv])?;
                Ok([out[0], out[1]])
            }
        }
    }
}

/// The graph inputs every layer reads.
struct StepInputs {
    positions: ValueId,
    slots: ValueId,
    cos: ValueId,
    sin: ValueId,
    /// Decode: the block tables and context lengths.
    paged: Option<(ValueId, ValueId)>,
}

/// Builds the prefill or decode graph of `step` over `weights`, with caches of `cache`.
pub fn build(
    config: &LlamaConfig,
    weights: &LlamaWeights,
    rope: &RopeTables,
    cache: CacheShape,
    step: Step,
) -> Result<DecoderGraph> {
    let c = config;
    c.validate()?;
    let (b, s) = match step {
        Step::Prefill { batch, seq } => (batch, seq),
        Step::Decode { batch } => (batch, 1),
    };
    let rows = b.checked_mul(s).filter(|&r| r >= 1 && s <= c.max_position_embeddings);
    let widest = rows.and_then(|r| r.checked_mul(c.intermediate_size.max(c.vocab_size))?.checked_mul(8));
    if widest.is_none_or(|w| w > isize::MAX as usize) {
        return Err(Error::Config(format!("llm: {step:?} is empty, past the position table, or overflows")));
    }
    if !matches!(cache.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(Error::Config(format!("llm: KV caches are f32, f16 or bf16, not {}", cache.dtype)));
    }
    let mut e = Builder { g: Graph::new(), c, w: weights, b, s, kv: cache.dtype };
    let ids = match step {
        Step::Prefill { .. } => e.g.input("input_ids", DType::I64, [b, s]),
        Step::Decode { .. } => e.g.input("input_ids", DType::I64, [b]),
    };
    let positions = e.g.input("positions", DType::I64, [b, s]);
    let slots = e.g.input("slots", DType::I64, [b * s]);
    let (last, paged) = match step {
        Step::Prefill { .. } => (Some(e.g.input("last", DType::I64, [b])), None),
        Step::Decode { .. } => {
            let tables = e.g.input("block_tables", DType::I32, [b, cache.max_blocks]);
            let lens = e.g.input("context_lens", DType::I32, [b]);
            (None, Some((tables, lens)))
        }
    };
    let dims = cache.dims(c);
    let caches: Vec<[ValueId; 2]> = (0..c.num_hidden_layers)
        .map(|l| {
            [
                e.g.input(&format!("model.layers.{l}.key_cache"), cache.dtype, dims),
                e.g.input(&format!("model.layers.{l}.value_cache"), cache.dtype, dims),
            ]
        })
        .collect();
    let cos = e.constant("rope.cos", &rope.cos);
    let sin = e.constant("rope.sin", &rope.sin);
    let io = StepInputs { positions, slots, cos, sin, paged };

    let table = e.constant("model.embed_tokens.weight", &weights.embed);
    let ids2 = if paged.is_some() { e.reshape("input_ids.rows", ids, &[b, 1])? } else { ids };
    let mut x = e.g.op("model.embed_tokens", Op::Gather { axis: 0 }, &[table, ids2])?;
    let mut residual = None;
    for (l, lw) in weights.layers.iter().enumerate() {
        let [h, r] = e.add_norm(&format!("model.layers.{l}.input_layernorm"), x, residual, &lw.input_norm)?;
        let a = e.attention(l, h, &io, caches[l])?;
        let [h2, r2] = e.add_norm(&format!("model.layers.{l}.post_attention_layernorm"), a, Some(r), &lw.post_norm)?;
        x = e.mlp(l, h2)?;
        residual = Some(r2);
    }
    let [h, _] = e.add_norm("model.norm", x, residual, &weights.norm)?;
    let hidden = c.hidden_size;
    let rows = e.reshape("model.norm.rows", h, &[b * s, hidden])?;
    let rows = match last {
        Some(last) => e.g.op("model.last_tokens", Op::Gather { axis: 0 }, &[rows, last])?,
        None => rows,
    };
    let logits = match &weights.lm_head {
        Some(w) => e.linear("lm_head", rows, w, None)?,
        None => e.g.op("lm_head", Op::Linear, &[rows, table])?,
    };
    let mut g = e.g;
    g.output(logits);
    g.validate()?;
    Ok(DecoderGraph { graph: g, step, logits })
}
