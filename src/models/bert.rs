//! BERT encoders (BERT-Large, BERT-base, MiniLM, ...) as graphs, from a Hugging Face
//! `config.json` and `.safetensors` weights, or seeded random weights.
//!
//! The graph is built from primitive ops (Linear, MatMul, Scale, Add, Softmax, LayerNorm,
//! GELU); the fusion pass turns the attention, bias+GELU and residual+LayerNorm patterns
//! into fused ops when hardware mapping is on.

use runtime::graph::{Graph, HostTensor, ValueId};
use runtime::{DType, Error, GeluApprox, Op, Result};
use std::collections::HashMap;
use std::path::Path;

/// The fields of a Hugging Face BERT `config.json` the encoder needs.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f32,
}

impl BertConfig {
    pub fn bert_large() -> BertConfig {
        BertConfig {
            vocab_size: 30522,
            hidden_size: 1024,
            num_hidden_layers: 24,
            num_attention_heads: 16,
            intermediate_size: 4096,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
        }
    }
    pub fn bert_base() -> BertConfig {
        BertConfig {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            ..Self::bert_large()
        }
    }
    /// sentence-transformers/all-MiniLM-L6-v2.
    pub fn minilm_l6() -> BertConfig {
        BertConfig {
            hidden_size: 384,
            num_hidden_layers: 6,
            num_attention_heads: 12,
            intermediate_size: 1536,
            ..Self::bert_large()
        }
    }
    /// A tiny configuration for tests.
    pub fn tiny() -> BertConfig {
        BertConfig {
            vocab_size: 50,
            hidden_size: 32,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            intermediate_size: 64,
            max_position_embeddings: 64,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
        }
    }
    /// `bert-large`, `bert-base`, `minilm-l6`, `tiny`.
    pub fn preset(name: &str) -> Option<BertConfig> {
        match name {
            "bert-large" => Some(Self::bert_large()),
            "bert-base" => Some(Self::bert_base()),
            "minilm-l6" | "minilm" => Some(Self::minilm_l6()),
            "tiny" => Some(Self::tiny()),
            _ => None,
        }
    }

    /// Parses a Hugging Face `config.json`.
    pub fn from_json(text: &str) -> Result<BertConfig> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::Io(format!("config.json: {e}")))?;
        let get = |k: &str| -> Result<usize> {
            v.get(k)
                .and_then(|x| x.as_u64())
                .map(|x| x as usize)
                .ok_or_else(|| Error::Io(format!("config.json: missing {k}")))
        };
        let act = v.get("hidden_act").and_then(|a| a.as_str()).unwrap_or("gelu");
        if act != "gelu" {
            return Err(Error::Unsupported(format!("config.json: hidden_act {act:?} (only gelu)")));
        }
        let c = BertConfig {
            vocab_size: get("vocab_size")?,
            hidden_size: get("hidden_size")?,
            num_hidden_layers: get("num_hidden_layers")?,
            num_attention_heads: get("num_attention_heads")?,
            intermediate_size: get("intermediate_size")?,
            max_position_embeddings: get("max_position_embeddings")?,
            type_vocab_size: get("type_vocab_size").unwrap_or(2),
            layer_norm_eps: v.get("layer_norm_eps").and_then(|x| x.as_f64()).unwrap_or(1e-12) as f32,
        };
        if c.num_attention_heads == 0 || c.hidden_size % c.num_attention_heads != 0 {
            return Err(Error::Io(format!(
                "config.json: hidden_size {} is not a multiple of num_attention_heads {}",
                c.hidden_size, c.num_attention_heads
            )));
        }
        Ok(c)
    }

    pub fn from_file(path: impl AsRef<Path>) -> Result<BertConfig> {
        let p = path.as_ref();
        let text = std::fs::read_to_string(p).map_err(|e| Error::Io(format!("{}: {e}", p.display())))?;
        BertConfig::from_json(&text)
    }

    /// Parameters of the encoder.
    pub fn parameters(&self) -> usize {
        let h = self.hidden_size;
        let emb = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * h + 2 * h;
        let layer = 4 * (h * h + h) + 2 * (h * self.intermediate_size) + self.intermediate_size + h + 4 * h;
        emb + self.num_hidden_layers * layer
    }
}

/// Where the weights come from.
pub enum Weights {
    /// Hugging Face names (`embeddings.word_embeddings.weight`, `encoder.layer.0...`),
    /// with or without a `bert.` prefix.
    Named(HashMap<String, HostTensor>),
    /// Normal with std 0.02 (LayerNorm gamma 1), from this seed.
    Random(u64),
}

/// A deterministic normal generator (xorshift + Box-Muller).
struct Normal(u64);
impl Normal {
    fn next_u(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn fill(&mut self, n: usize, std: f32) -> Vec<f32> {
        let mut v = Vec::with_capacity(n + 1);
        while v.len() < n {
            let (u1, u2) = (self.next_u(), self.next_u());
            let r = (-2.0 * u1.ln()).sqrt();
            let t = std::f64::consts::TAU * u2;
            v.push((r * t.cos()) as f32 * std);
            v.push((r * t.sin()) as f32 * std);
        }
        v.truncate(n);
        v
    }
}

/// Fills `n` normal values in parallel chunks (deterministic for a seed).
fn random_normal(seed: u64, n: usize, std: f32) -> Vec<f32> {
    const CHUNK: usize = 1 << 20;
    let chunks = n.div_ceil(CHUNK).max(1);
    let mut out = vec![0f32; n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(chunks);
    std::thread::scope(|s| {
        let mut parts: Vec<(usize, &mut [f32])> = out.chunks_mut(CHUNK).enumerate().collect();
        let per = parts.len().div_ceil(threads.max(1));
        while !parts.is_empty() {
            let take = per.min(parts.len());
            let batch: Vec<(usize, &mut [f32])> = parts.drain(..take).collect();
            s.spawn(move || {
                for (i, c) in batch {
                    let mut g = Normal((seed ^ 0x9E37_79B9_7F4A_7C15).wrapping_mul(i as u64 * 2 + 1) | 1);
                    let v = g.fill(c.len(), std);
                    c.copy_from_slice(&v);
                }
            });
        }
    });
    out
}

struct WeightSource {
    named: Option<HashMap<String, HostTensor>>,
    seed: u64,
    counter: u64,
}

impl WeightSource {
    fn get(&mut self, name: &str, shape: &[usize], kind: Init) -> Result<HostTensor> {
        self.counter += 1;
        if let Some(m) = &self.named {
            let alt = name.replace(".weight", ".gamma").replace(".bias", ".beta");
            let t = m
                .get(name)
                .or_else(|| m.get(&format!("bert.{name}")))
                .or_else(|| {
                    if name.contains("LayerNorm") {
                        m.get(&alt).or_else(|| m.get(&format!("bert.{alt}")))
                    } else {
                        None
                    }
                })
                .ok_or_else(|| Error::Io(format!("weights: {name} is missing")))?;
            if t.shape.dims() != shape {
                return Err(Error::Io(format!("weights: {name} is {:?}, expected {shape:?}", t.shape.dims())));
            }
            return Ok(t.clone());
        }
        let n: usize = shape.iter().product();
        let v = match kind {
            Init::Normal => {
                random_normal(self.seed.wrapping_add(self.counter.wrapping_mul(0x2545_F491_4F6C_DD1D)), n, 0.02)
            }
            Init::Ones => vec![1.0; n],
        };
        HostTensor::from_vec(shape.to_vec(), v)
    }
}

#[derive(Clone, Copy)]
enum Init {
    Normal,
    Ones,
}

/// The built graph and the ids of its inputs.
pub struct BertGraph {
    pub graph: Graph,
    pub config: BertConfig,
    pub batch: usize,
    pub seq: usize,
    /// `[batch, seq]` i64 token ids.
    pub input_ids: ValueId,
    /// `[batch, seq]` i64 segment ids.
    pub token_type_ids: ValueId,
    /// `[batch, seq]` f32: 1 for real tokens, 0 for padding.
    pub attention_mask: ValueId,
    /// `[batch, seq, hidden]` last hidden state.
    pub output: ValueId,
}

/// Builds the encoder for `batch` sequences of `seq` tokens.
pub fn build(config: &BertConfig, weights: Weights, batch: usize, seq: usize) -> Result<BertGraph> {
    let c = config;
    if seq == 0 || batch == 0 || seq > c.max_position_embeddings {
        return Err(Error::Config(format!(
            "batch {batch} x seq {seq}: need batch >= 1 and 1 <= seq <= {}",
            c.max_position_embeddings
        )));
    }
    let (h, nh) = (c.hidden_size, c.num_attention_heads);
    let dh = h / nh;
    let mut w = match weights {
        Weights::Named(m) => WeightSource { named: Some(m), seed: 0, counter: 0 },
        Weights::Random(seed) => WeightSource { named: None, seed, counter: 0 },
    };
    let mut g = Graph::new();
    let ids = g.input("input_ids", DType::I64, [batch, seq]);
    let tt = g.input("token_type_ids", DType::I64, [batch, seq]);
    let mask = g.input("attention_mask", DType::F32, [batch, seq]);
    // Embeddings.
    let we = g.constant(
        "embeddings.word_embeddings.weight",
        w.get("embeddings.word_embeddings.weight", &[c.vocab_size, h], Init::Normal)?,
    );
    let pe = g.constant(
        "embeddings.position_embeddings.weight",
        w.get("embeddings.position_embeddings.weight", &[c.max_position_embeddings, h], Init::Normal)?,
    );
    let te = g.constant(
        "embeddings.token_type_embeddings.weight",
        w.get("embeddings.token_type_embeddings.weight", &[c.type_vocab_size, h], Init::Normal)?,
    );
    let pos = g.constant("position_ids", HostTensor::from_vec([seq], (0..seq as i64).collect())?);
    let x_w = g.op("embeddings.word", Op::Gather { axis: 0 }, &[we, ids])?;
    let x_t = g.op("embeddings.token_type", Op::Gather { axis: 0 }, &[te, tt])?;
    let x_p = g.op("embeddings.position", Op::Gather { axis: 0 }, &[pe, pos])?;
    let s1 = g.op("embeddings.add_type", Op::Add, &[x_w, x_t])?;
    let s2 = g.op("embeddings.add_position", Op::Add, &[s1, x_p])?;
    let lg = g.constant("embeddings.LayerNorm.weight", w.get("embeddings.LayerNorm.weight", &[h], Init::Ones)?);
    let lb = g.constant("embeddings.LayerNorm.bias", w.get("embeddings.LayerNorm.bias", &[h], Init::Normal)?);
    let mut x = g.op("embeddings.LayerNorm", Op::LayerNorm { eps: c.layer_norm_eps }, &[s2, lg, lb])?;
    // Additive mask [B, 1, 1, S]: (mask - 1) * 10000.
    let m4 = g.op("mask.reshape", Op::Reshape { shape: vec![batch as isize, 1, 1, seq as isize] }, &[mask])?;
    let one = g.constant("mask.one", HostTensor::from_vec([1], vec![1f32])?);
    let inv = g.op("mask.invert", Op::Sub, &[m4, one])?;
    let add_mask = g.op("mask.scale", Op::Scale { factor: 10000.0 }, &[inv])?;
    let lin = |g: &mut Graph, w: &mut WeightSource, name: &str, x: ValueId, n: usize, k: usize| -> Result<ValueId> {
        let wt = g.constant(&format!("{name}.weight"), w.get(&format!("{name}.weight"), &[n, k], Init::Normal)?);
        let b = g.constant(&format!("{name}.bias"), w.get(&format!("{name}.bias"), &[n], Init::Normal)?);
        g.op(name, Op::Linear, &[x, wt, b])
    };
    let heads = |g: &mut Graph, name: &str, t: ValueId| -> Result<ValueId> {
        let r = g.op(
            &format!("{name}.split"),
            Op::Reshape { shape: vec![batch as isize, seq as isize, nh as isize, dh as isize] },
            &[t],
        )?;
        g.op(&format!("{name}.heads"), Op::Permute { perm: vec![0, 2, 1, 3] }, &[r])
    };
    for l in 0..c.num_hidden_layers {
        let p = format!("encoder.layer.{l}");
        let q = lin(&mut g, &mut w, &format!("{p}.attention.self.query"), x, h, h)?;
        let k = lin(&mut g, &mut w, &format!("{p}.attention.self.key"), x, h, h)?;
        let v = lin(&mut g, &mut w, &format!("{p}.attention.self.value"), x, h, h)?;
        let (q, k, v) = (
            heads(&mut g, &format!("{p}.q"), q)?,
            heads(&mut g, &format!("{p}.k"), k)?,
            heads(&mut g, &format!("{p}.v"), v)?,
        );
        let sc = g.op(&format!("{p}.attention.scores"), Op::MatMul { trans_a: false, trans_b: true }, &[q, k])?;
        let sc = g.op(&format!("{p}.attention.scale"), Op::Scale { factor: 1.0 / (dh as f32).sqrt() }, &[sc])?;
        let sc = g.op(&format!("{p}.attention.mask"), Op::Add, &[sc, add_mask])?;
        let pr = g.op(&format!("{p}.attention.softmax"), Op::Softmax { axis: -1 }, &[sc])?;
        let ctx = g.op(&format!("{p}.attention.context"), Op::MatMul { trans_a: false, trans_b: false }, &[pr, v])?;
        let ctx = g.op(&format!("{p}.attention.merge"), Op::Permute { perm: vec![0, 2, 1, 3] }, &[ctx])?;
        let ctx = g.op(
            &format!("{p}.attention.flatten"),
            Op::Reshape { shape: vec![batch as isize, seq as isize, h as isize] },
            &[ctx],
        )?;
        let ao = lin(&mut g, &mut w, &format!("{p}.attention.output.dense"), ctx, h, h)?;
        let r1 = g.op(&format!("{p}.attention.output.residual"), Op::Add, &[ao, x])?;
        let g1 = g.constant(
            &format!("{p}.attention.output.LayerNorm.weight"),
            w.get(&format!("{p}.attention.output.LayerNorm.weight"), &[h], Init::Ones)?,
        );
        let b1 = g.constant(
            &format!("{p}.attention.output.LayerNorm.bias"),
            w.get(&format!("{p}.attention.output.LayerNorm.bias"), &[h], Init::Normal)?,
        );
        let x1 =
            g.op(&format!("{p}.attention.output.LayerNorm"), Op::LayerNorm { eps: c.layer_norm_eps }, &[r1, g1, b1])?;
        let it = lin(&mut g, &mut w, &format!("{p}.intermediate.dense"), x1, c.intermediate_size, h)?;
        let act = g.op(&format!("{p}.intermediate.gelu"), Op::Gelu(GeluApprox::Erf), &[it])?;
        let o = lin(&mut g, &mut w, &format!("{p}.output.dense"), act, h, c.intermediate_size)?;
        let r2 = g.op(&format!("{p}.output.residual"), Op::Add, &[o, x1])?;
        let g2 = g.constant(
            &format!("{p}.output.LayerNorm.weight"),
            w.get(&format!("{p}.output.LayerNorm.weight"), &[h], Init::Ones)?,
        );
        let b2 = g.constant(
            &format!("{p}.output.LayerNorm.bias"),
            w.get(&format!("{p}.output.LayerNorm.bias"), &[h], Init::Normal)?,
        );
        x = g.op(&format!("{p}.output.LayerNorm"), Op::LayerNorm { eps: c.layer_norm_eps }, &[r2, g2, b2])?;
    }
    g.output(x);
    g.validate()?;
    Ok(BertGraph {
        graph: g,
        config: c.clone(),
        batch,
        seq,
        input_ids: ids,
        token_type_ids: tt,
        attention_mask: mask,
        output: x,
    })
}
