//! The weights of a Llama-family decoder, read once and shared by its graphs: from a
//! memory-mapped `model.safetensors` (or the shards a `model.safetensors.index.json`
//! names), from tensors by name, or seeded random.
//!
//! Hugging Face keeps q, k and v (and gate and up) as separate projections; npurt merges
//! them at load into one Linear weight each (rows of q, then k, then v; gate first, then
//! up) so a layer runs two wide GEMMs instead of five narrow ones. f32 tensors that need
//! no merge are read in place in the map; f16 / bf16 ones are widened to f32.

use super::bert::{WeightError, first_non_finite, float_as_f32, random_normal};
use super::llama_config::LlamaConfig;
use super::safetensors::SafetensorsFile;
use runtime::graph::HostTensor;
use runtime::{DType, Error, Result};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// One decoder layer's weights (f32; Linear weights `[out, in]`). `Send + Sync`.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub input_norm: HostTensor,
    /// `[(heads + 2 kv_heads) * head_dim, hidden]`: q rows, then k, then v.
    pub qkv: HostTensor,
    pub qkv_bias: Option<HostTensor>,
    pub o: HostTensor,
    pub o_bias: Option<HostTensor>,
    /// Qwen3's per-head RMSNorm weights of q and k (`[head_dim]` each).
    pub qk_norm: Option<[HostTensor; 2]>,
    pub post_norm: HostTensor,
    /// `[2 * intermediate, hidden]`: gate rows, then up.
    pub gate_up: HostTensor,
    pub down: HostTensor,
}

/// Every weight of a decoder. Cloning shares the bytes (`HostBytes` are reference
/// counted), so graphs built from one `LlamaWeights` hold one host copy. `Send + Sync`.
#[derive(Clone, Debug)]
pub struct LlamaWeights {
    /// `[vocab, hidden]`.
    pub embed: HostTensor,
    pub layers: Vec<LayerWeights>,
    pub norm: HostTensor,
    /// `[vocab, hidden]`; `None` when tied to `embed`.
    pub lm_head: Option<HostTensor>,
}

impl LlamaWeights {
    /// The output projection: `lm_head`, or the embedding table when tied.
    pub fn output(&self) -> &HostTensor {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// Bytes of every weight (the tied table counted once).
    pub fn bytes(&self) -> usize {
        let t = |t: &HostTensor| t.bytes.len();
        let o = |x: &Option<HostTensor>| x.as_ref().map_or(0, t);
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                t(&l.input_norm)
                    + t(&l.qkv)
                    + o(&l.qkv_bias)
                    + t(&l.o)
                    + o(&l.o_bias)
                    + l.qk_norm.as_ref().map_or(0, |[q, k]| t(q) + t(k))
                    + t(&l.post_norm)
                    + t(&l.gate_up)
                    + t(&l.down)
            })
            .sum();
        t(&self.embed) + layers + t(&self.norm) + o(&self.lm_head)
    }
}

/// Where the weights come from. `Send + Sync`; cloning shares the maps and tensors.
#[derive(Clone)]
pub enum LlamaSource {
    /// Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, ...).
    Named(HashMap<String, HostTensor>),
    /// Memory-mapped safetensors files (one, or the shards of an index); a name is read
    /// from the file that holds it.
    Files(Vec<Arc<SafetensorsFile>>),
    /// Normal with std 0.02 (norm weights 1), from this seed.
    Random(u64),
}

impl LlamaSource {
    /// `dir/model.safetensors`, or the shards `dir/model.safetensors.index.json` names.
    pub fn from_dir(dir: &Path) -> Result<LlamaSource> {
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        if !single.exists() && index.exists() {
            let text = crate::files::read_json_text(&index)?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::format_from(index.display().to_string(), e))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| Error::format(format!("{}: no weight_map object", index.display())))?;
            let mut shards: Vec<&str> = Vec::new();
            for f in map.values() {
                let f =
                    f.as_str().ok_or_else(|| Error::format(format!("{}: a shard is not a name", index.display())))?;
                // Shard names are file names in the directory, never paths.
                if f.contains('/') || f.contains('\\') || f == ".." {
                    return Err(Error::format(format!("{}: shard {f:?} is not a file name", index.display())));
                }
                if !shards.contains(&f) {
                    shards.push(f);
                }
            }
            let files: std::result::Result<Vec<_>, _> =
                shards.iter().map(|f| SafetensorsFile::open(dir.join(f)).map(Arc::new)).collect();
            return Ok(LlamaSource::Files(files?));
        }
        Ok(LlamaSource::Files(vec![Arc::new(SafetensorsFile::open(&single)?)]))
    }
}

#[derive(Clone, Copy)]
enum Init {
    Normal,
    Ones,
}

struct Reader {
    source: LlamaSource,
    counter: u64,
}

impl Reader {
    /// The f32 tensor `name` of `shape`, checked finite.
    fn get(&mut self, name: &str, shape: &[usize], init: Init) -> std::result::Result<HostTensor, WeightError> {
        self.counter += 1;
        let missing = || WeightError::Missing { name: name.to_string() };
        let check_shape = |found: &[usize]| {
            if found == shape {
                Ok(())
            } else {
                Err(WeightError::Shape { name: name.to_string(), found: found.to_vec(), expected: shape.to_vec() })
            }
        };
        let t = match &self.source {
            LlamaSource::Named(m) => {
                let t = m.get(name).ok_or_else(missing)?;
                check_shape(t.shape.dims())?;
                float_as_f32(name, t.clone())?
            }
            LlamaSource::Files(files) => {
                let f = files.iter().find(|f| f.contains(name)).ok_or_else(missing)?;
                let (dtype, dims) = f.info(name).ok_or_else(missing)?;
                check_shape(dims)?;
                let t = match dtype {
                    safetensors::Dtype::F32 => f.tensor_shared(name)?,
                    _ => float_as_f32(name, f.tensor(name)?)?,
                };
                if f.is_checked(name) {
                    return Ok(t);
                }
                if let Some((index, value)) = first_non_finite(&t) {
                    return Err(WeightError::NonFinite { name: name.to_string(), index, value });
                }
                f.mark_checked(name);
                return Ok(t);
            }
            LlamaSource::Random(seed) => {
                let alloc = || WeightError::Alloc { name: name.to_string(), shape: shape.to_vec() };
                let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(alloc)?;
                let bytes = match init {
                    Init::Normal => {
                        random_normal(seed.wrapping_add(self.counter.wrapping_mul(0x2545_F491_4F6C_DD1D)), n, 0.02)
                    }
                    Init::Ones => n.checked_mul(4).map(|_| 1f32.to_le_bytes().repeat(n)),
                }
                .ok_or_else(alloc)?;
                return Ok(HostTensor { dtype: DType::F32, shape: shape.to_vec().into(), bytes: bytes.into() });
            }
        };
        if let Some((index, value)) = first_non_finite(&t) {
            return Err(WeightError::NonFinite { name: name.to_string(), index, value });
        }
        Ok(t)
    }

    /// The tensors `names` (each `[rows_i, cols]`) stacked along the rows, in order.
    fn stacked(&mut self, names: &[(String, usize)], cols: &[usize], init: Init) -> Result<HostTensor> {
        let mut bytes = Vec::new();
        let mut rows = 0usize;
        for (name, r) in names {
            let shape: Vec<usize> = std::iter::once(*r).chain(cols.iter().copied()).collect();
            let t = self.get(name, &shape, init)?;
            bytes.try_reserve(t.bytes.len()).map_err(|_| WeightError::Alloc { name: name.clone(), shape })?;
            bytes.extend_from_slice(&t.bytes);
            rows = rows.checked_add(*r).ok_or_else(|| Error::format(format!("weights: {name}: rows overflow")))?;
        }
        let shape: Vec<usize> = std::iter::once(rows).chain(cols.iter().copied()).collect();
        Ok(HostTensor { dtype: DType::F32, shape: shape.into(), bytes: bytes.into() })
    }
}

/// Reads (and merges) every weight `config` needs from `source`, in a fixed order (the
/// order matters to random weights). `config` is validated first, so nothing is allocated
/// for a config that fails.
pub fn load(config: &LlamaConfig, source: LlamaSource) -> Result<LlamaWeights> {
    let c = config;
    c.validate()?;
    let (h, d) = (c.hidden_size, c.head_dim);
    let (q, kv) = (c.num_attention_heads * d, c.num_key_value_heads * d);
    let mut r = Reader { source, counter: 0 };
    let embed = r.get("model.embed_tokens.weight", &[c.vocab_size, h], Init::Normal)?;
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for l in 0..c.num_hidden_layers {
        let p = format!("model.layers.{l}");
        let a = |n: &str, s: &str, rows| (format!("{p}.self_attn.{n}_proj.{s}"), rows);
        let input_norm = r.get(&format!("{p}.input_layernorm.weight"), &[h], Init::Ones)?;
        let qkv = r.stacked(&[a("q", "weight", q), a("k", "weight", kv), a("v", "weight", kv)], &[h], Init::Normal)?;
        let qkv_bias = if c.qkv_bias {
            Some(r.stacked(&[a("q", "bias", q), a("k", "bias", kv), a("v", "bias", kv)], &[], Init::Normal)?)
        } else {
            None
        };
        let o = r.get(&format!("{p}.self_attn.o_proj.weight"), &[h, q], Init::Normal)?;
        let o_bias =
            if c.o_bias { Some(r.get(&format!("{p}.self_attn.o_proj.bias"), &[h], Init::Normal)?) } else { None };
        let qk_norm = if c.qk_norm {
            let norm = |r: &mut Reader, n: &str| r.get(&format!("{p}.self_attn.{n}_norm.weight"), &[d], Init::Ones);
            Some([norm(&mut r, "q")?, norm(&mut r, "k")?])
        } else {
            None
        };
        let post_norm = r.get(&format!("{p}.post_attention_layernorm.weight"), &[h], Init::Ones)?;
        let i = c.intermediate_size;
        let gu = [(format!("{p}.mlp.gate_proj.weight"), i), (format!("{p}.mlp.up_proj.weight"), i)];
        let gate_up = r.stacked(&gu, &[h], Init::Normal)?;
        let down = r.get(&format!("{p}.mlp.down_proj.weight"), &[h, i], Init::Normal)?;
        layers.push(LayerWeights { input_norm, qkv, qkv_bias, o, o_bias, qk_norm, post_norm, gate_up, down });
    }
    let norm = r.get("model.norm.weight", &[h], Init::Ones)?;
    let lm_head =
        if c.tie_word_embeddings { None } else { Some(r.get("lm_head.weight", &[c.vocab_size, h], Init::Normal)?) };
    Ok(LlamaWeights { embed, layers, norm, lm_head })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(t: &HostTensor) -> Vec<f32> {
        bytemuck::pod_collect_to_vec(&t.bytes)
    }

    /// Every HF tensor of `c` with element j of tensor k equal to `k * 1000 + j`
    /// (distinct, so a merge in the wrong order shows).
    fn named(c: &LlamaConfig) -> HashMap<String, HostTensor> {
        let w = load(c, LlamaSource::Random(1)).unwrap();
        let mut names = vec![("model.embed_tokens.weight".to_string(), w.embed.shape.dims().to_vec())];
        let (h, q, kv, i) = (
            c.hidden_size,
            c.num_attention_heads * c.head_dim,
            c.num_key_value_heads * c.head_dim,
            c.intermediate_size,
        );
        for l in 0..c.num_hidden_layers {
            let p = format!("model.layers.{l}");
            for (n, s) in [
                ("input_layernorm.weight", vec![h]),
                ("post_attention_layernorm.weight", vec![h]),
                ("self_attn.q_proj.weight", vec![q, h]),
                ("self_attn.k_proj.weight", vec![kv, h]),
                ("self_attn.v_proj.weight", vec![kv, h]),
                ("self_attn.q_proj.bias", vec![q]),
                ("self_attn.k_proj.bias", vec![kv]),
                ("self_attn.v_proj.bias", vec![kv]),
                ("self_attn.o_proj.weight", vec![h, q]),
                ("mlp.gate_proj.weight", vec![i, h]),
                ("mlp.up_proj.weight", vec![i, h]),
                ("mlp.down_proj.weight", vec![h, i]),
            ] {
                names.push((format!("{p}.{n}"), s));
            }
        }
        names.push(("model.norm.weight".into(), vec![h]));
        names.push(("lm_head.weight".into(), vec![c.vocab_size, h]));
        names
            .into_iter()
            .enumerate()
            .map(|(k, (n, s))| {
                let len: usize = s.iter().product();
                let v: Vec<f32> = (0..len).map(|j| (k * 1000 + j) as f32).collect();
                (n, HostTensor::from_vec(s, v).unwrap())
            })
            .collect()
    }

    #[test]
    fn q_k_v_and_gate_up_merge_in_order() {
        let c = LlamaConfig { qkv_bias: true, ..LlamaConfig::llama_tiny() };
        let m = named(&c);
        let w = load(&c, LlamaSource::Named(m.clone())).unwrap();
        let l = &w.layers[1];
        assert_eq!(l.qkv.shape.dims(), &[c.qkv_width(), c.hidden_size]);
        let want: Vec<f32> = ["q", "k", "v"]
            .iter()
            .flat_map(|n| f32s(&m[&format!("model.layers.1.self_attn.{n}_proj.weight")]))
            .collect();
        assert_eq!(f32s(&l.qkv), want);
        let want: Vec<f32> =
            ["q", "k", "v"].iter().flat_map(|n| f32s(&m[&format!("model.layers.1.self_attn.{n}_proj.bias")])).collect();
        assert_eq!(f32s(l.qkv_bias.as_ref().unwrap()), want);
        let want: Vec<f32> =
            ["gate", "up"].iter().flat_map(|n| f32s(&m[&format!("model.layers.1.mlp.{n}_proj.weight")])).collect();
        assert_eq!(f32s(&l.gate_up), want);
        assert_eq!(w.output(), &m["lm_head.weight"]);
        // Tied: no lm_head is read, the output projection is the embedding table.
        let tied = LlamaConfig { tie_word_embeddings: true, ..c.clone() };
        let w = load(&tied, LlamaSource::Named(m.clone())).unwrap();
        assert!(w.lm_head.is_none());
        assert_eq!(w.output(), &m["model.embed_tokens.weight"]);
    }

    #[test]
    fn missing_misshapen_and_non_finite_weights_are_named() {
        let c = LlamaConfig::llama_tiny();
        let m = named(&c);
        let mut gone = m.clone();
        gone.remove("model.layers.1.mlp.up_proj.weight");
        let e = load(&c, LlamaSource::Named(gone)).unwrap_err();
        assert!(e.to_string().contains("model.layers.1.mlp.up_proj.weight is missing"), "{e}");
        let mut bad = m.clone();
        bad.insert("model.norm.weight".into(), HostTensor::from_vec([3], vec![1f32; 3]).unwrap());
        let e = load(&c, LlamaSource::Named(bad)).unwrap_err();
        assert!(e.to_string().contains("model.norm.weight is [3]"), "{e}");
        let mut nan = m;
        nan.insert("model.norm.weight".into(), HostTensor::from_vec([64], vec![f32::NAN; 64]).unwrap());
        let e = load(&c, LlamaSource::Named(nan)).unwrap_err();
        assert!(e.to_string().contains("model.norm.weight holds NaN"), "{e}");
    }

    #[test]
    fn random_weights_are_seeded() {
        let c = LlamaConfig::llama_tiny();
        let (a, b) = (load(&c, LlamaSource::Random(5)).unwrap(), load(&c, LlamaSource::Random(5)).unwrap());
        assert_eq!(a.layers[0].qkv, b.layers[0].qkv);
        assert_ne!(a.layers[0].qkv, load(&c, LlamaSource::Random(6)).unwrap().layers[0].qkv);
        assert_eq!(f32s(&a.norm), vec![1.0; c.hidden_size]);
        let params = c.parameters();
        assert_eq!(a.bytes(), params * 4);
    }
}
