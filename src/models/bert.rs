//! BERT encoders (BERT-Large, BERT-base, MiniLM, ...) as graphs, from a Hugging Face
//! `config.json` and `.safetensors` weights, or seeded random weights.
//!
//! The graph is built from primitive ops (Linear, MatMul, Scale, Add, Softmax, LayerNorm,
//! GELU); the fusion pass turns the attention, bias+GELU and residual+LayerNorm patterns
//! into fused ops when hardware mapping is on.

pub use super::bert_config::{BertConfig, ConfigError, LIMITS, MAX_PARAMETERS};
use super::safetensors::{SafetensorsError, SafetensorsFile};
use runtime::graph::{Graph, HostTensor, ValueId};
use runtime::{DType, Error, GeluApprox, Op, Result, bf16, f16};
use std::collections::HashMap;
use std::sync::Arc;

/// Where the weights come from.
pub enum Weights {
    /// Hugging Face names (`embeddings.word_embeddings.weight`, `encoder.layer.0...`),
    /// with or without a `bert.` prefix.
    Named(HashMap<String, HostTensor>),
    /// The same names in a memory-mapped safetensors file. f32 weights are read in place
    /// in the map (building a graph copies nothing); f16 / bf16 ones are widened to f32
    /// copies when the graph is built. A graph handed to `CompiledGraph::compile_owned`
    /// holds one host copy of the weights at a time.
    File(Arc<SafetensorsFile>),
    /// Normal with std 0.02 (LayerNorm gamma 1), from this seed.
    Random(u64),
}

/// Why a weight was refused.
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    #[error("weights: {name} is missing")]
    Missing { name: String },
    #[error("weights: {name} is {found:?}, expected {expected:?}")]
    Shape { name: String, found: Vec<usize>, expected: Vec<usize> },
    #[error("weights: {name} is {dtype}, expected a float tensor")]
    Dtype { name: String, dtype: String },
    /// NaN or infinity: an encoder would turn it into NaN embeddings.
    #[error("weights: {name} holds {value} at element {index} (weights must be finite)")]
    NonFinite { name: String, index: usize, value: f32 },
    #[error("weights: {name} {shape:?} needs more memory than can be allocated")]
    Alloc { name: String, shape: Vec<usize> },
    #[error(transparent)]
    File(#[from] SafetensorsError),
}

impl From<WeightError> for Error {
    fn from(e: WeightError) -> Error {
        Error::format_from(String::new(), e)
    }
}

/// The first element of `t` (f32, f16 or bf16) that is NaN or infinite.
pub(crate) fn first_non_finite(t: &HostTensor) -> Option<(usize, f32)> {
    fn scan<const N: usize>(bytes: &[u8], exp: u32, to_f32: impl Fn(u32) -> f32) -> Option<(usize, f32)> {
        let word = |c: &[u8]| c.iter().rev().fold(0u32, |a, &b| (a << 8) | b as u32);
        // A branch-free pass first (vectorises); the position only when something is there.
        let any = bytes.chunks_exact(N).fold(false, |acc, c| acc | (word(c) & exp == exp));
        if !any {
            return None;
        }
        bytes.chunks_exact(N).position(|c| word(c) & exp == exp).map(|i| (i, to_f32(word(&bytes[i * N..(i + 1) * N]))))
    }
    match t.dtype {
        DType::F32 => scan::<4>(&t.bytes, 0x7f80_0000, f32::from_bits),
        DType::F16 => scan::<2>(&t.bytes, 0x7c00, |w| f16::from_bits(w as u16).to_f32()),
        DType::BF16 => scan::<2>(&t.bytes, 0x7f80, |w| bf16::from_bits(w as u16).to_f32()),
        _ => None,
    }
}

/// `t` with f16 / bf16 values as f32 (the encoder computes in f32); f32 as it is.
pub(crate) fn float_as_f32(name: &str, t: HostTensor) -> std::result::Result<HostTensor, WeightError> {
    let widen = |v: Vec<f32>| HostTensor {
        dtype: DType::F32,
        shape: t.shape.clone(),
        bytes: bytemuck::cast_slice(&v).to_vec().into(),
    };
    match t.dtype {
        DType::F32 => Ok(t),
        DType::F16 => Ok(widen(bytemuck::pod_collect_to_vec::<u8, f16>(&t.bytes).iter().map(|x| x.to_f32()).collect())),
        DType::BF16 => {
            Ok(widen(bytemuck::pod_collect_to_vec::<u8, bf16>(&t.bytes).iter().map(|x| x.to_f32()).collect()))
        }
        d => Err(WeightError::Dtype { name: name.to_string(), dtype: d.to_string() }),
    }
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

/// `n` zeroed f32 values as little-endian bytes, or `None` when they cannot be allocated.
fn zeroed_f32_bytes(n: usize) -> Option<Vec<u8>> {
    let len = n.checked_mul(4)?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).ok()?;
    out.resize(len, 0);
    Some(out)
}

/// Fills `n` normal values (as f32 little-endian bytes) in parallel chunks
/// (deterministic for a seed).
pub(crate) fn random_normal(seed: u64, n: usize, std: f32) -> Option<Vec<u8>> {
    const CHUNK: usize = 1 << 20;
    let chunks = n.div_ceil(CHUNK).max(1);
    let mut out = zeroed_f32_bytes(n)?;
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(chunks);
    std::thread::scope(|s| {
        let mut parts: Vec<(usize, &mut [u8])> = out.chunks_mut(CHUNK * 4).enumerate().collect();
        let per = parts.len().div_ceil(threads.max(1));
        // Joined explicitly: the scope only waits for the closures, not for the threads
        // to end, and none may outlive the call.
        let mut handles = Vec::new();
        while !parts.is_empty() {
            let take = per.min(parts.len());
            let batch: Vec<(usize, &mut [u8])> = parts.drain(..take).collect();
            handles.push(s.spawn(move || {
                for (i, c) in batch {
                    let mut g = Normal((seed ^ 0x9E37_79B9_7F4A_7C15).wrapping_mul(i as u64 * 2 + 1) | 1);
                    let v = g.fill(c.len() / 4, std);
                    for (dst, x) in c.chunks_exact_mut(4).zip(v) {
                        dst.copy_from_slice(&x.to_le_bytes());
                    }
                }
            }));
        }
        let joined = handles.into_iter().map(|h| h.join()).all(|r| r.is_ok());
        joined.then_some(())
    })?;
    Some(out)
}

enum Source {
    Named(HashMap<String, HostTensor>),
    File(Arc<SafetensorsFile>),
    Random(u64),
}

struct WeightSource {
    source: Source,
    counter: u64,
}

impl WeightSource {
    /// The names `name` may be stored under: with or without `bert.`, and LayerNorm
    /// parameters also as `gamma` / `beta`.
    fn candidates(name: &str) -> Vec<String> {
        let mut v = vec![name.to_string(), format!("bert.{name}")];
        if name.contains("LayerNorm") {
            let alt = name.replace(".weight", ".gamma").replace(".bias", ".beta");
            v.push(format!("bert.{alt}"));
            v.insert(2, alt);
        }
        v
    }

    fn get(&mut self, name: &str, shape: &[usize], kind: Init) -> std::result::Result<HostTensor, WeightError> {
        self.counter += 1;
        let missing = || WeightError::Missing { name: name.to_string() };
        let check_shape = |found: &[usize]| {
            if found == shape {
                Ok(())
            } else {
                Err(WeightError::Shape { name: name.to_string(), found: found.to_vec(), expected: shape.to_vec() })
            }
        };
        // The file and key of a weight read from a file, marked once found finite.
        let (t, from_file) = match &self.source {
            Source::Named(m) => {
                let t = Self::candidates(name).iter().find_map(|k| m.get(k)).ok_or_else(missing)?;
                check_shape(t.shape.dims())?;
                (t.clone(), None)
            }
            Source::File(f) => {
                let key = Self::candidates(name).into_iter().find(|k| f.contains(k)).ok_or_else(missing)?;
                // The dtype and shape come from the header: nothing is read for a mismatch.
                let (dtype, dims) = f.info(&key).ok_or_else(missing)?;
                check_shape(dims)?;
                // f32 weights are read in place in the map (nothing copied); others widened.
                let t = match dtype {
                    safetensors::Dtype::F32 => f.tensor_shared(&key)?,
                    _ => float_as_f32(name, f.tensor(&key)?)?,
                };
                // Each weight is checked once per file, not once per graph built from it.
                if f.is_checked(&key) {
                    return Ok(t);
                }
                (t, Some((f, key)))
            }
            Source::Random(seed) => {
                let alloc = || WeightError::Alloc { name: name.to_string(), shape: shape.to_vec() };
                let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(alloc)?;
                let bytes = match kind {
                    Init::Normal => {
                        random_normal(seed.wrapping_add(self.counter.wrapping_mul(0x2545_F491_4F6C_DD1D)), n, 0.02)
                    }
                    Init::Ones => zeroed_f32_bytes(n).map(|mut b| {
                        b.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&1f32.to_le_bytes()));
                        b
                    }),
                }
                .ok_or_else(alloc)?;
                return Ok(HostTensor { dtype: DType::F32, shape: shape.to_vec().into(), bytes: bytes.into() });
            }
        };
        if let Some((index, value)) = first_non_finite(&t) {
            return Err(WeightError::NonFinite { name: name.to_string(), index, value });
        }
        if let Some((f, key)) = from_file {
            f.mark_checked(&key);
        }
        Ok(t)
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

/// `batch` and `seq` are at least 1, `seq` within the position table, and the widest
/// activations fit the address space.
fn check_sizes(c: &BertConfig, batch: usize, seq: usize) -> Result<()> {
    if seq == 0 || batch == 0 || seq > c.max_position_embeddings {
        return Err(Error::Config(format!(
            "batch {batch} x seq {seq}: need batch >= 1 and 1 <= seq <= {}",
            c.max_position_embeddings
        )));
    }
    let nh = c.num_attention_heads;
    // The widest activations, [batch, heads, seq, seq] and [batch, seq, intermediate] in f32.
    let bytes =
        |width: usize| width.checked_mul(batch)?.checked_mul(seq)?.checked_mul(4).filter(|&b| b <= isize::MAX as usize);
    if nh.checked_mul(seq).and_then(bytes).is_none() || bytes(c.intermediate_size).is_none() {
        return Err(Error::Config(format!("batch {batch} x seq {seq}: the activations overflow the address space")));
    }
    Ok(())
}

/// The graph under construction and where its weights come from, read in graph order (the
/// order matters to random weights).
struct Encoder<'a> {
    g: Graph,
    w: WeightSource,
    c: &'a BertConfig,
    batch: usize,
    seq: usize,
}

impl Encoder<'_> {
    /// The constant `name` of `shape`, read from the weights.
    fn weight(&mut self, name: &str, shape: &[usize], kind: Init) -> Result<ValueId> {
        let t = self.w.get(name, shape, kind)?;
        Ok(self.g.constant(name, t))
    }

    /// `x · name.weightᵀ + name.bias` with an `[n, k]` weight.
    fn linear(&mut self, name: &str, x: ValueId, n: usize, k: usize) -> Result<ValueId> {
        let wt = self.weight(&format!("{name}.weight"), &[n, k], Init::Normal)?;
        let b = self.weight(&format!("{name}.bias"), &[n], Init::Normal)?;
        self.g.op(name, Op::Linear, &[x, wt, b])
    }

    /// LayerNorm `name` over the hidden axis of `x`.
    fn layer_norm(&mut self, name: &str, x: ValueId) -> Result<ValueId> {
        let h = self.c.hidden_size;
        let gamma = self.weight(&format!("{name}.weight"), &[h], Init::Ones)?;
        let beta = self.weight(&format!("{name}.bias"), &[h], Init::Normal)?;
        self.g.op(name, Op::LayerNorm { eps: self.c.layer_norm_eps }, &[x, gamma, beta])
    }

    /// `[B, S, H]` to `[B, heads, S, head dim]`.
    fn heads(&mut self, name: &str, t: ValueId) -> Result<ValueId> {
        let (b, s, nh) = (self.batch as isize, self.seq as isize, self.c.num_attention_heads);
        let dh = (self.c.hidden_size / nh) as isize;
        let r = self.g.op(&format!("{name}.split"), Op::Reshape { shape: vec![b, s, nh as isize, dh] }, &[t])?;
        self.g.op(&format!("{name}.heads"), Op::Permute { perm: vec![0, 2, 1, 3] }, &[r])
    }

    /// Word, token-type and position embeddings summed, then LayerNorm.
    fn embeddings(&mut self, ids: ValueId, tt: ValueId) -> Result<ValueId> {
        let (c, h, seq) = (self.c, self.c.hidden_size, self.seq);
        let we = self.weight("embeddings.word_embeddings.weight", &[c.vocab_size, h], Init::Normal)?;
        let pe = self.weight("embeddings.position_embeddings.weight", &[c.max_position_embeddings, h], Init::Normal)?;
        let te = self.weight("embeddings.token_type_embeddings.weight", &[c.type_vocab_size, h], Init::Normal)?;
        let g = &mut self.g;
        let pos = g.constant("position_ids", HostTensor::from_vec([seq], (0..seq as i64).collect())?);
        let x_w = g.op("embeddings.word", Op::Gather { axis: 0 }, &[we, ids])?;
        let x_t = g.op("embeddings.token_type", Op::Gather { axis: 0 }, &[te, tt])?;
        let x_p = g.op("embeddings.position", Op::Gather { axis: 0 }, &[pe, pos])?;
        let s1 = g.op("embeddings.add_type", Op::Add, &[x_w, x_t])?;
        let s2 = g.op("embeddings.add_position", Op::Add, &[s1, x_p])?;
        self.layer_norm("embeddings.LayerNorm", s2)
    }

    /// The additive mask `[B, 1, 1, S]`: (mask - 1) * 10000.
    fn additive_mask(&mut self, mask: ValueId) -> Result<ValueId> {
        let g = &mut self.g;
        let shape = vec![self.batch as isize, 1, 1, self.seq as isize];
        let m4 = g.op("mask.reshape", Op::Reshape { shape }, &[mask])?;
        let one = g.constant("mask.one", HostTensor::from_vec([1], vec![1f32])?);
        let inv = g.op("mask.invert", Op::Sub, &[m4, one])?;
        g.op("mask.scale", Op::Scale { factor: 10000.0 }, &[inv])
    }

    /// Layer `p`'s self-attention, its output projection, residual and LayerNorm.
    fn attention(&mut self, p: &str, x: ValueId, add_mask: ValueId) -> Result<ValueId> {
        let h = self.c.hidden_size;
        let dh = h / self.c.num_attention_heads;
        let q = self.linear(&format!("{p}.attention.self.query"), x, h, h)?;
        let k = self.linear(&format!("{p}.attention.self.key"), x, h, h)?;
        let v = self.linear(&format!("{p}.attention.self.value"), x, h, h)?;
        let (q, k, v) =
            (self.heads(&format!("{p}.q"), q)?, self.heads(&format!("{p}.k"), k)?, self.heads(&format!("{p}.v"), v)?);
        let g = &mut self.g;
        let sc = g.op(&format!("{p}.attention.scores"), Op::MatMul { trans_a: false, trans_b: true }, &[q, k])?;
        let sc = g.op(&format!("{p}.attention.scale"), Op::Scale { factor: 1.0 / (dh as f32).sqrt() }, &[sc])?;
        let sc = g.op(&format!("{p}.attention.mask"), Op::Add, &[sc, add_mask])?;
        let pr = g.op(&format!("{p}.attention.softmax"), Op::Softmax { axis: -1 }, &[sc])?;
        let ctx = g.op(&format!("{p}.attention.context"), Op::MatMul { trans_a: false, trans_b: false }, &[pr, v])?;
        let ctx = g.op(&format!("{p}.attention.merge"), Op::Permute { perm: vec![0, 2, 1, 3] }, &[ctx])?;
        let ctx = g.op(
            &format!("{p}.attention.flatten"),
            Op::Reshape { shape: vec![self.batch as isize, self.seq as isize, h as isize] },
            &[ctx],
        )?;
        let ao = self.linear(&format!("{p}.attention.output.dense"), ctx, h, h)?;
        let r1 = self.g.op(&format!("{p}.attention.output.residual"), Op::Add, &[ao, x])?;
        self.layer_norm(&format!("{p}.attention.output.LayerNorm"), r1)
    }

    /// Layer `p`'s feed-forward block (GELU), residual and LayerNorm.
    fn feed_forward(&mut self, p: &str, x1: ValueId) -> Result<ValueId> {
        let (h, inter) = (self.c.hidden_size, self.c.intermediate_size);
        let it = self.linear(&format!("{p}.intermediate.dense"), x1, inter, h)?;
        let act = self.g.op(&format!("{p}.intermediate.gelu"), Op::Gelu(GeluApprox::Erf), &[it])?;
        let o = self.linear(&format!("{p}.output.dense"), act, h, inter)?;
        let r2 = self.g.op(&format!("{p}.output.residual"), Op::Add, &[o, x1])?;
        self.layer_norm(&format!("{p}.output.LayerNorm"), r2)
    }
}

/// Builds the encoder for `batch` sequences of `seq` tokens.
pub fn build(config: &BertConfig, weights: Weights, batch: usize, seq: usize) -> Result<BertGraph> {
    let c = config;
    c.validate()?;
    check_sizes(c, batch, seq)?;
    let source = match weights {
        Weights::Named(m) => Source::Named(m),
        Weights::File(f) => Source::File(f),
        Weights::Random(seed) => Source::Random(seed),
    };
    let mut e = Encoder { g: Graph::new(), w: WeightSource { source, counter: 0 }, c, batch, seq };
    let ids = e.g.input("input_ids", DType::I64, [batch, seq]);
    let tt = e.g.input("token_type_ids", DType::I64, [batch, seq]);
    let mask = e.g.input("attention_mask", DType::F32, [batch, seq]);
    let mut x = e.embeddings(ids, tt)?;
    let add_mask = e.additive_mask(mask)?;
    for l in 0..c.num_hidden_layers {
        let p = format!("encoder.layer.{l}");
        let x1 = e.attention(&p, x, add_mask)?;
        x = e.feed_forward(&p, x1)?;
    }
    let mut g = e.g;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A config over the parameter limit, or activations past the address space, build
    /// nothing.
    #[test]
    fn absurd_sizes_build_nothing() {
        let big = BertConfig {
            vocab_size: 1 << 22,
            hidden_size: 1 << 16,
            num_attention_heads: 1 << 10,
            ..BertConfig::minilm_l6()
        };
        assert!(build(&big, Weights::Random(1), 1, 1).is_err());
        assert!(build(&BertConfig::tiny(), Weights::Random(1), usize::MAX / 2, 2).is_err());
    }

    /// A NaN or infinite weight is an error naming the tensor.
    #[test]
    fn non_finite_weights_are_errors_naming_the_tensor() {
        let c = BertConfig::tiny();
        let g = build(&c, Weights::Random(3), 1, 4).unwrap();
        let mut named: HashMap<String, HostTensor> = HashMap::new();
        for v in &g.graph.values {
            if let runtime::graph::ValueKind::Constant(t) = &v.kind {
                named.insert(v.name.clone(), t.clone());
            }
        }
        assert!(build(&c, Weights::Named(named.clone()), 1, 4).is_ok());
        let name = "encoder.layer.1.intermediate.dense.weight";
        for bad in [f32::NAN, f32::INFINITY] {
            let mut m = named.clone();
            let t = m.get_mut(name).unwrap();
            let mut v: Vec<f32> = bytemuck::pod_collect_to_vec(&t.bytes);
            v[5] = bad;
            *t = HostTensor::from_vec(t.shape.clone(), v).unwrap();
            let e = build(&c, Weights::Named(m), 1, 4).err().unwrap();
            assert!(e.to_string().contains(&format!("{name} holds {bad} at element 5")), "{e}");
        }
        // f16 and bf16 too.
        let h = HostTensor { dtype: DType::F16, shape: [3].into(), bytes: vec![0, 0, 0, 0x7e, 0, 0x3c].into() };
        assert_eq!(first_non_finite(&h).map(|x| x.0), Some(1));
        let b = HostTensor { dtype: DType::BF16, shape: [2].into(), bytes: vec![0x80, 0x3f, 0x80, 0xff].into() };
        assert_eq!(first_non_finite(&b), Some((1, f32::NEG_INFINITY)));
    }
}
