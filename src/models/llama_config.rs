//! The configuration of a Llama-family decoder (`LlamaForCausalLM`, `Qwen2ForCausalLM`,
//! `Qwen3ForCausalLM`): the presets, and a Hugging Face `config.json` parsed, bounded and
//! checked for settings npurt does not implement (a `rope_type` other than `default`,
//! `linear`, `llama3` and `yarn`, sliding windows, MLP biases, activations other than SiLU
//! are refused by name, never ignored).

use runtime::op::RopeScaling;
use runtime::{Error, Result};
use std::path::Path;

/// Which Hugging Face architecture the weights follow. `Send + Sync`, plain data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// `LlamaForCausalLM`: optional `attention_bias` on q/k/v/o.
    Llama,
    /// `Qwen2ForCausalLM`: q/k/v always carry a bias, o_proj never.
    Qwen2,
    /// `Qwen3ForCausalLM`: RMSNorm of each q and k head (`q_norm`, `k_norm`) before
    /// the rotation; optional `attention_bias` as Llama's; `head_dim` 128 unless given.
    Qwen3,
}

/// The fields of a `config.json` the decoder needs. `Send + Sync`, plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub architecture: Architecture,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Grouped-query attention: heads of k and v (divides `num_attention_heads`).
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f64,
    /// How the rotary frequencies are scaled (`rope_type` `linear`, `llama3` or `yarn`).
    pub rope_scaling: RopeScaling,
    /// The output projection is the embedding table (no `lm_head.weight`).
    pub tie_word_embeddings: bool,
    /// q, k and v projections carry a bias.
    pub qkv_bias: bool,
    /// The output projection carries a bias (Llama with `attention_bias`).
    pub o_bias: bool,
    /// Each q and k head is RMS-normalised (its own weight of `head_dim`) before Rope.
    pub qk_norm: bool,
    pub bos_token_id: Option<u32>,
    /// The model's end-of-sequence ids (a list in newer files; may be empty).
    pub eos_token_ids: Vec<u32>,
}

/// `(key, min, max)` of every size: far above any published model of the family, low
/// enough that products of them cannot overflow.
pub const LIMITS: &[(&str, usize, usize)] = &[
    ("vocab_size", 1, 1 << 22),
    ("hidden_size", 1, 1 << 16),
    ("intermediate_size", 1, 1 << 18),
    ("num_hidden_layers", 1, 1 << 10),
    ("num_attention_heads", 1, 1 << 10),
    ("num_key_value_heads", 1, 1 << 10),
    ("head_dim", 2, 1 << 12),
    ("max_position_embeddings", 1, 1 << 24),
];

/// The largest decoder [`LlamaConfig::validate`] accepts (2^37 parameters).
pub const MAX_PARAMETERS: usize = 1 << 37;

/// Why a `config.json` (or a [`LlamaConfig`]) was refused. `Send + Sync`.
#[derive(Debug, thiserror::Error)]
pub enum LlamaConfigError {
    #[error("config.json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config.json: the top level is not an object")]
    NotAnObject,
    #[error("config.json: {key} is missing")]
    Missing { key: &'static str },
    #[error("config.json: {key} must be {expected}, not {found}")]
    BadValue { key: &'static str, expected: &'static str, found: String },
    #[error("config.json: {key} = {value} is outside {min}..={max}")]
    OutOfRange { key: &'static str, value: usize, min: usize, max: usize },
    #[error("config.json: {key} = {value} must be finite and positive")]
    NotPositive { key: &'static str, value: f64 },
    /// A setting that changes the math with a value npurt does not implement.
    #[error("config.json: {key} = {value} is not supported ({supported})")]
    Unsupported { key: &'static str, value: String, supported: &'static str },
    #[error("config.json: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")]
    Groups { heads: usize, kv_heads: usize },
    #[error("config.json: head_dim {0} is odd (rotary embeddings rotate pairs)")]
    OddHeadDim(usize),
    #[error("config.json: {parameters} parameters exceed the limit of {MAX_PARAMETERS}")]
    TooLarge { parameters: String },
}

impl LlamaConfigError {
    fn bad(key: &'static str, expected: &'static str, found: &serde_json::Value) -> LlamaConfigError {
        let mut found = found.to_string();
        if found.len() > 40 {
            found = format!("{}...", found.chars().take(40).collect::<String>());
        }
        LlamaConfigError::BadValue { key, expected, found }
    }

    /// The error as the runtime's, naming the file `path` it was read from.
    pub fn in_file(self, path: &Path) -> Error {
        match self {
            e @ LlamaConfigError::Unsupported { .. } => Error::Unsupported(format!("{}: {e}", path.display())),
            e => Error::format_from(path.display().to_string(), e),
        }
    }
}

impl From<LlamaConfigError> for Error {
    fn from(e: LlamaConfigError) -> Error {
        match e {
            LlamaConfigError::Unsupported { .. } => Error::Unsupported(e.to_string()),
            _ => Error::format_from(String::new(), e),
        }
    }
}

type CResult<T> = std::result::Result<T, LlamaConfigError>;
type Object = serde_json::Map<String, serde_json::Value>;

fn uint(v: &Object, key: &'static str) -> CResult<Option<usize>> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| LlamaConfigError::bad(key, "a non-negative integer", x)),
    }
}

fn float(v: &Object, key: &'static str) -> CResult<Option<f64>> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => x.as_f64().map(Some).ok_or_else(|| LlamaConfigError::bad(key, "a number", x)),
    }
}

fn boolean(v: &Object, key: &'static str) -> CResult<Option<bool>> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => x.as_bool().map(Some).ok_or_else(|| LlamaConfigError::bad(key, "true or false", x)),
    }
}

fn string<'a>(v: &'a Object, key: &'static str) -> CResult<Option<&'a str>> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => x.as_str().map(Some).ok_or_else(|| LlamaConfigError::bad(key, "a string", x)),
    }
}

fn token_id(x: &serde_json::Value, key: &'static str) -> CResult<u32> {
    x.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| LlamaConfigError::bad(key, "a token id", x))
}

/// `eos_token_id`: absent, null, one id or a list of ids.
pub fn eos_ids(v: &Object) -> CResult<Option<Vec<u32>>> {
    match v.get("eos_token_id") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Array(a)) => {
            a.iter().map(|x| token_id(x, "eos_token_id")).collect::<CResult<_>>().map(Some)
        }
        Some(x) => Ok(Some(vec![token_id(x, "eos_token_id")?])),
    }
}

/// The architecture from `architectures` (first entry) or else `model_type`.
fn architecture(v: &Object) -> CResult<Architecture> {
    if let Some(a) = v.get("architectures").filter(|a| !a.is_null()) {
        let first = a
            .as_array()
            .and_then(|a| a.first())
            .and_then(|x| x.as_str())
            .ok_or_else(|| LlamaConfigError::bad("architectures", "a list of names", a))?;
        return match first {
            "LlamaForCausalLM" => Ok(Architecture::Llama),
            "Qwen2ForCausalLM" => Ok(Architecture::Qwen2),
            "Qwen3ForCausalLM" => Ok(Architecture::Qwen3),
            other => Err(LlamaConfigError::Unsupported {
                key: "architectures",
                value: format!("{other:?}"),
                supported: "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM",
            }),
        };
    }
    match string(v, "model_type")? {
        Some("llama") => Ok(Architecture::Llama),
        Some("qwen2") => Ok(Architecture::Qwen2),
        Some("qwen3") => Ok(Architecture::Qwen3),
        Some(other) => Err(LlamaConfigError::Unsupported {
            key: "model_type",
            value: format!("{other:?}"),
            supported: "llama, qwen2, qwen3",
        }),
        None => Err(LlamaConfigError::Missing { key: "architectures" }),
    }
}

/// A positive, finite number under `key` of a rope object; `Missing` when absent.
fn rope_number(o: &Object, key: &'static str) -> CResult<f64> {
    let v = float(o, key)?.ok_or(LlamaConfigError::Missing { key })?;
    if v.is_finite() && v > 0.0 { Ok(v) } else { Err(LlamaConfigError::NotPositive { key, value: v }) }
}

/// `mscale` of the YaRN paper (eq. 21): `0.1 · mscale · ln(scale) + 1`, 1 for `scale <= 1`.
fn yarn_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 { 1.0 } else { 0.1 * mscale * scale.ln() + 1.0 }
}

/// The scaling a `rope_scaling` / `rope_parameters` object `o` names (`rope_type`, or
/// `type` in older files): `default`, `linear`, `llama3` and `yarn` with their
/// parameters, defaults resolved as transformers resolves them (the pretraining context
/// from the top level's `original_max_position_embeddings`, else the object's, else
/// `max_positions`); any other type is refused by name.
fn rope_scaling(key: &'static str, o: &Object, top: &Object, max_positions: usize) -> CResult<RopeScaling> {
    let kind = match (string(o, "rope_type")?, string(o, "type")?) {
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => "default",
    };
    let original = || -> CResult<f64> {
        let key = "original_max_position_embeddings";
        let v = match float(top, key)? {
            Some(v) => v,
            None => float(o, key)?.unwrap_or(max_positions as f64),
        };
        if v.is_finite() && v > 0.0 { Ok(v) } else { Err(LlamaConfigError::NotPositive { key, value: v }) }
    };
    let scaling = match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: rope_number(o, "factor")? },
        "llama3" => {
            let (low, high) = (rope_number(o, "low_freq_factor")?, rope_number(o, "high_freq_factor")?);
            if high <= low {
                return Err(LlamaConfigError::BadValue {
                    key: "high_freq_factor",
                    expected: "a number above low_freq_factor",
                    found: format!("{high} (low_freq_factor {low})"),
                });
            }
            RopeScaling::Llama3 {
                factor: rope_number(o, "factor")?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: original()?,
            }
        }
        "yarn" => {
            let original = original()?;
            let factor = match float(o, "factor")? {
                Some(_) => rope_number(o, "factor")?,
                None => max_positions as f64 / original,
            };
            // As in transformers: an absent or zero beta or mscale takes the default.
            let nonzero = |key| float(o, key).map(|v| v.filter(|&v| v != 0.0));
            let attention_factor = match (float(o, "attention_factor")?, nonzero("mscale")?, nonzero("mscale_all_dim")?)
            {
                (Some(_), _, _) => rope_number(o, "attention_factor")?,
                (None, Some(m), Some(all)) => yarn_mscale(factor, m) / yarn_mscale(factor, all),
                (None, _, _) => yarn_mscale(factor, 1.0),
            };
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings: original,
                beta_fast: nonzero("beta_fast")?.unwrap_or(32.0),
                beta_slow: nonzero("beta_slow")?.unwrap_or(1.0),
                attention_factor,
                truncate: boolean(o, "truncate")?.unwrap_or(true),
            }
        }
        other => {
            return Err(LlamaConfigError::Unsupported {
                key,
                value: format!("rope_type {other:?}"),
                supported: "rope_type \"default\", \"linear\", \"llama3\" and \"yarn\" are implemented",
            });
        }
    };
    scaling.validate().map_err(|e| LlamaConfigError::BadValue {
        key,
        expected: "rope parameters within their ranges",
        found: e.to_string(),
    })?;
    Ok(scaling)
}

/// `rope_theta` (top level, or `rope_parameters.rope_theta` as transformers >= 5 writes)
/// and the scaling of `rope_scaling` or `rope_parameters` (the latter where both are set).
fn rope(v: &Object, max_positions: usize) -> CResult<(f64, RopeScaling)> {
    let mut theta = float(v, "rope_theta")?;
    let mut scaling = RopeScaling::None;
    for key in ["rope_scaling", "rope_parameters"] {
        let Some(x) = v.get(key).filter(|x| !x.is_null()) else { continue };
        let o = x.as_object().ok_or_else(|| LlamaConfigError::bad(key, "an object", x))?;
        scaling = rope_scaling(key, o, v, max_positions)?;
        if key == "rope_parameters"
            && let Some(t) = float(o, "rope_theta")?
        {
            theta = Some(t);
        }
    }
    Ok((theta.unwrap_or(10000.0), scaling))
}

impl LlamaConfig {
    /// A tiny Llama for tests: 2 layers, grouped-query (4 heads, 2 kv heads), untied.
    pub fn llama_tiny() -> LlamaConfig {
        LlamaConfig {
            architecture: Architecture::Llama,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 16,
            vocab_size: 256,
            max_position_embeddings: 512,
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            rope_scaling: RopeScaling::None,
            tie_word_embeddings: false,
            qkv_bias: false,
            o_bias: false,
            qk_norm: false,
            bos_token_id: Some(1),
            eos_token_ids: vec![2],
        }
    }

    /// The shapes of Qwen2-0.5B (hidden 896, 24 layers, 14 heads, 2 kv heads, tied
    /// embeddings, q/k/v bias).
    pub fn qwen2_0_5b() -> LlamaConfig {
        LlamaConfig {
            architecture: Architecture::Qwen2,
            hidden_size: 896,
            intermediate_size: 4864,
            num_hidden_layers: 24,
            num_attention_heads: 14,
            num_key_value_heads: 2,
            head_dim: 64,
            vocab_size: 151936,
            max_position_embeddings: 32768,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_scaling: RopeScaling::None,
            tie_word_embeddings: true,
            qkv_bias: true,
            o_bias: false,
            qk_norm: false,
            bos_token_id: None,
            eos_token_ids: vec![151643],
        }
    }

    /// The shapes of Qwen3-0.6B (hidden 1024, 28 layers, 16 heads, 8 kv heads, head_dim
    /// 128, intermediate 3072, tied embeddings, q/k norms).
    pub fn qwen3_0_6b() -> LlamaConfig {
        LlamaConfig {
            architecture: Architecture::Qwen3,
            hidden_size: 1024,
            intermediate_size: 3072,
            num_hidden_layers: 28,
            num_attention_heads: 16,
            num_key_value_heads: 8,
            head_dim: 128,
            vocab_size: 151936,
            max_position_embeddings: 40960,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_scaling: RopeScaling::None,
            tie_word_embeddings: true,
            qkv_bias: false,
            o_bias: false,
            qk_norm: true,
            bos_token_id: None,
            eos_token_ids: vec![151645],
        }
    }

    /// `llama-tiny`, `qwen2-0.5b`, `qwen3-0.6b`.
    pub fn preset(name: &str) -> Option<LlamaConfig> {
        match name {
            "llama-tiny" => Some(Self::llama_tiny()),
            "qwen2-0.5b" => Some(Self::qwen2_0_5b()),
            "qwen3-0.6b" => Some(Self::qwen3_0_6b()),
            _ => None,
        }
    }

    /// The names [`preset`](Self::preset) knows.
    pub const PRESETS: &'static [&'static str] = &["llama-tiny", "qwen2-0.5b", "qwen3-0.6b"];

    /// Parses a Hugging Face `config.json`.
    pub fn from_json(text: &str) -> Result<LlamaConfig> {
        Ok(Self::parse_json(text)?)
    }

    /// [`from_json`](Self::from_json) with the typed error.
    pub fn parse_json(text: &str) -> CResult<LlamaConfig> {
        let v: serde_json::Value = serde_json::from_str(text)?;
        let v = v.as_object().ok_or(LlamaConfigError::NotAnObject)?;
        let arch = architecture(v)?;
        check_implemented(v)?;
        let need = |key: &'static str| -> CResult<usize> { uint(v, key)?.ok_or(LlamaConfigError::Missing { key }) };
        let hidden_size = need("hidden_size")?;
        let heads = need("num_attention_heads")?;
        let kv_heads = uint(v, "num_key_value_heads")?.unwrap_or(heads);
        // transformers' Qwen3Config defaults head_dim to 128; the others derive it.
        let head_dim = match uint(v, "head_dim")? {
            Some(d) => d,
            None if arch == Architecture::Qwen3 => 128,
            None if heads > 0 => hidden_size / heads,
            None => 0,
        };
        let attention_bias = boolean(v, "attention_bias")?.unwrap_or(false);
        let default_positions = if arch == Architecture::Llama { 2048 } else { 32768 };
        let max_position_embeddings = uint(v, "max_position_embeddings")?.unwrap_or(default_positions);
        let (rope_theta, rope_scaling) = rope(v, max_position_embeddings)?;
        let c = LlamaConfig {
            architecture: arch,
            hidden_size,
            intermediate_size: need("intermediate_size")?,
            num_hidden_layers: need("num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            vocab_size: need("vocab_size")?,
            max_position_embeddings,
            rms_norm_eps: float(v, "rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta,
            rope_scaling,
            tie_word_embeddings: boolean(v, "tie_word_embeddings")?.unwrap_or(false),
            qkv_bias: arch == Architecture::Qwen2 || attention_bias,
            o_bias: arch != Architecture::Qwen2 && attention_bias,
            qk_norm: arch == Architecture::Qwen3,
            bos_token_id: v
                .get("bos_token_id")
                .filter(|x| !x.is_null())
                .map(|x| token_id(x, "bos_token_id"))
                .transpose()?,
            eos_token_ids: eos_ids(v)?.unwrap_or_default(),
        };
        c.validate()?;
        Ok(c)
    }

    /// Reads and parses the `config.json` at `path`; every error names the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<LlamaConfig> {
        let p = path.as_ref();
        let text = crate::files::read_json_text(p)?;
        LlamaConfig::parse_json(&text).map_err(|e| e.in_file(p))
    }

    fn get(&self, key: &str) -> usize {
        match key {
            "vocab_size" => self.vocab_size,
            "hidden_size" => self.hidden_size,
            "intermediate_size" => self.intermediate_size,
            "num_hidden_layers" => self.num_hidden_layers,
            "num_attention_heads" => self.num_attention_heads,
            "num_key_value_heads" => self.num_key_value_heads,
            "head_dim" => self.head_dim,
            "max_position_embeddings" => self.max_position_embeddings,
            _ => 0,
        }
    }

    /// Checks every size against [`LIMITS`], the head grouping, the even head size, eps
    /// and theta, and the parameter count (checked arithmetic) against [`MAX_PARAMETERS`].
    pub fn validate(&self) -> CResult<()> {
        for &(key, min, max) in LIMITS {
            let value = self.get(key);
            if value < min || value > max {
                return Err(LlamaConfigError::OutOfRange { key, value, min, max });
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(LlamaConfigError::Groups {
                heads: self.num_attention_heads,
                kv_heads: self.num_key_value_heads,
            });
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(LlamaConfigError::OddHeadDim(self.head_dim));
        }
        let eps = self.rms_norm_eps as f64;
        if !(eps.is_finite() && eps > 0.0 && eps <= 1.0) {
            return Err(LlamaConfigError::NotPositive { key: "rms_norm_eps", value: eps });
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(LlamaConfigError::NotPositive { key: "rope_theta", value: self.rope_theta });
        }
        if let Err(e) = self.rope_scaling.validate() {
            return Err(LlamaConfigError::BadValue {
                key: "rope_scaling",
                expected: "finite positive parameters",
                found: e.to_string(),
            });
        }
        match self.checked_parameters() {
            Some(p) if p <= MAX_PARAMETERS => Ok(()),
            p => Err(LlamaConfigError::TooLarge {
                parameters: p.map_or_else(|| "more than usize::MAX".to_string(), |p| p.to_string()),
            }),
        }
    }

    /// Width of the merged q/k/v projection: `(heads + 2 kv_heads) * head_dim`.
    pub fn qkv_width(&self) -> usize {
        (self.num_attention_heads + 2 * self.num_key_value_heads) * self.head_dim
    }

    /// Parameters of the decoder (saturating at `usize::MAX`).
    pub fn parameters(&self) -> usize {
        self.checked_parameters().unwrap_or(usize::MAX)
    }

    /// Parameters of the decoder; `None` when the count overflows.
    pub fn checked_parameters(&self) -> Option<usize> {
        let (h, i, d) = (self.hidden_size, self.intermediate_size, self.head_dim);
        let q = self.num_attention_heads.checked_mul(d)?;
        let qkv = self.num_key_value_heads.checked_mul(d)?.checked_mul(2)?.checked_add(q)?;
        let emb = self.vocab_size.checked_mul(h)?;
        let mut layer = qkv.checked_mul(h)?.checked_add(q.checked_mul(h)?)?;
        layer = layer.checked_add(i.checked_mul(h)?.checked_mul(3)?)?.checked_add(h.checked_mul(2)?)?;
        if self.qkv_bias {
            layer = layer.checked_add(qkv)?;
        }
        if self.o_bias {
            layer = layer.checked_add(h)?;
        }
        let head = if self.tie_word_embeddings { 0 } else { emb };
        emb.checked_add(self.num_hidden_layers.checked_mul(layer)?)?.checked_add(h)?.checked_add(head)
    }
}

/// Settings that change the math, the value npurt implements, and what to say otherwise.
fn check_implemented(v: &Object) -> CResult<()> {
    if let Some(act) = string(v, "hidden_act")?.filter(|a| *a != "silu") {
        return Err(LlamaConfigError::Unsupported {
            key: "hidden_act",
            value: format!("{act:?}"),
            supported: "only silu",
        });
    }
    for (key, supported) in [
        ("mlp_bias", "biases in the MLP are not implemented"),
        ("use_sliding_window", "sliding-window attention is not implemented"),
    ] {
        if boolean(v, key)? == Some(true) {
            return Err(LlamaConfigError::Unsupported { key, value: "true".into(), supported });
        }
    }
    // transformers >= 5 lists each layer's attention; only full attention is implemented.
    if let Some(x) = v.get("layer_types").filter(|x| !x.is_null()) {
        let kinds = x.as_array().ok_or_else(|| LlamaConfigError::bad("layer_types", "a list of names", x))?;
        if let Some(other) = kinds.iter().find(|k| k.as_str() != Some("full_attention")) {
            return Err(LlamaConfigError::Unsupported {
                key: "layer_types",
                value: other.to_string(),
                supported: "only \"full_attention\" layers are implemented",
            });
        }
    }
    if let Some(p) = uint(v, "pretraining_tp")?.filter(|&p| p != 1) {
        return Err(LlamaConfigError::Unsupported { key: "pretraining_tp", value: p.to_string(), supported: "only 1" });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN2: &str = r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
        "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true,
        "hidden_act": "silu", "bos_token_id": null, "eos_token_id": 151643,
        "use_sliding_window": false, "sliding_window": 32768, "rope_scaling": null}"#;

    fn with(base: &str, key: &str, value: &str) -> String {
        let mut v: serde_json::Value = serde_json::from_str(base).unwrap();
        if value == "REMOVE" {
            v.as_object_mut().unwrap().remove(key);
        } else {
            v[key] = serde_json::from_str(value).unwrap();
        }
        v.to_string()
    }

    #[test]
    fn qwen2_has_bias_tied_embeddings_and_its_preset_shapes() {
        let c = LlamaConfig::parse_json(QWEN2).unwrap();
        assert_eq!(c, LlamaConfig::qwen2_0_5b());
        assert_eq!(c.head_dim, 64);
        assert!(c.qkv_bias && !c.o_bias && c.tie_word_embeddings);
        // About 494 M parameters, as published for Qwen2-0.5B.
        assert_eq!(c.parameters() / 1_000_000, 494);
    }

    #[test]
    fn llama_defaults_bias_and_eos_lists() {
        let llama = with(&with(QWEN2, "architectures", r#"["LlamaForCausalLM"]"#), "num_key_value_heads", "REMOVE");
        let c = LlamaConfig::parse_json(&llama).unwrap();
        assert_eq!(c.architecture, Architecture::Llama);
        assert_eq!(c.num_key_value_heads, 14);
        assert!(!c.qkv_bias && !c.o_bias);
        let c = LlamaConfig::parse_json(&with(&llama, "attention_bias", "true")).unwrap();
        assert!(c.qkv_bias && c.o_bias);
        let c = LlamaConfig::parse_json(&with(&llama, "eos_token_id", "[7, 9]")).unwrap();
        assert_eq!(c.eos_token_ids, vec![7, 9]);
        let c = LlamaConfig::parse_json(&with(&llama, "head_dim", "32")).unwrap();
        assert_eq!(c.head_dim, 32);
        let no_arch = with(&with(QWEN2, "architectures", "REMOVE"), "model_type", r#""llama""#);
        assert_eq!(LlamaConfig::parse_json(&no_arch).unwrap().architecture, Architecture::Llama);
    }

    #[test]
    fn qwen3_norms_its_q_and_k_heads_and_defaults_head_dim_to_128() {
        let q3 = with(&with(QWEN2, "architectures", r#"["Qwen3ForCausalLM"]"#), "layer_types", r#"["full_attention"]"#);
        let c = LlamaConfig::parse_json(&q3).unwrap();
        assert_eq!(c.architecture, Architecture::Qwen3);
        assert!(c.qk_norm && !c.qkv_bias && !c.o_bias);
        assert_eq!(c.head_dim, 128, "Qwen3Config's default, not hidden / heads (64)");
        let c = LlamaConfig::parse_json(&with(&with(&q3, "head_dim", "64"), "attention_bias", "true")).unwrap();
        assert!(c.head_dim == 64 && c.qkv_bias && c.o_bias);
        let by_type = with(&with(QWEN2, "architectures", "REMOVE"), "model_type", r#""qwen3""#);
        assert_eq!(LlamaConfig::parse_json(&by_type).unwrap().architecture, Architecture::Qwen3);
        assert!(!LlamaConfig::parse_json(QWEN2).unwrap().qk_norm);
    }

    #[test]
    fn rope_theta_is_read_from_either_place() {
        let top = LlamaConfig::parse_json(&with(QWEN2, "rope_theta", "500000.0")).unwrap();
        assert_eq!(top.rope_theta, 500000.0);
        let v5 = with(
            &with(QWEN2, "rope_theta", "REMOVE"),
            "rope_parameters",
            r#"{"rope_theta": 250000.0, "rope_type": "default"}"#,
        );
        assert_eq!(LlamaConfig::parse_json(&v5).unwrap().rope_theta, 250000.0);
        let absent = with(QWEN2, "rope_theta", "REMOVE");
        assert_eq!(LlamaConfig::parse_json(&absent).unwrap().rope_theta, 10000.0);
    }

    #[test]
    fn linear_llama3_and_yarn_rope_scaling_are_read_from_either_place() {
        let llama3 = r#"{"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"}"#;
        let want = RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        // Llama 3.x files: rope_theta at the top level, the scaling in rope_scaling.
        let legacy = with(&with(QWEN2, "rope_theta", "500000.0"), "rope_scaling", llama3);
        let c = LlamaConfig::parse_json(&legacy).unwrap();
        assert_eq!((c.rope_theta, c.rope_scaling), (500000.0, want));
        // transformers >= 5: both in rope_parameters.
        let v5 = llama3.replace("\"rope_type\"", "\"rope_theta\": 250000.0, \"rope_type\"");
        let c = LlamaConfig::parse_json(&with(&with(QWEN2, "rope_theta", "REMOVE"), "rope_parameters", &v5)).unwrap();
        assert_eq!((c.rope_theta, c.rope_scaling), (250000.0, want));
        let linear = with(QWEN2, "rope_scaling", r#"{"type": "linear", "factor": 2.0}"#);
        assert_eq!(LlamaConfig::parse_json(&linear).unwrap().rope_scaling, RopeScaling::Linear { factor: 2.0 });
        assert_eq!(LlamaConfig::parse_json(QWEN2).unwrap().rope_scaling, RopeScaling::None);
        // Qwen2.5's long-context setting: yarn with the attention factor of its factor.
        let yarn = r#"{"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}"#;
        let c = LlamaConfig::parse_json(&with(QWEN2, "rope_scaling", yarn)).unwrap();
        let mscale = 0.1 * 4f64.ln() + 1.0;
        let want = RopeScaling::Yarn {
            factor: 4.0,
            original_max_position_embeddings: 32768.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: mscale,
            truncate: true,
        };
        assert_eq!(c.rope_scaling, want);
        // DeepSeek's form: the factor from the two contexts, the attention factor from
        // mscale over mscale_all_dim, and a top-level pretraining context taking precedence.
        let ds = r#"{"type": "yarn", "mscale": 2.0, "mscale_all_dim": 1.0, "beta_fast": 16,
            "original_max_position_embeddings": 1000, "truncate": false}"#;
        let c = with(
            &with(&with(QWEN2, "rope_scaling", ds), "max_position_embeddings", "32768"),
            "original_max_position_embeddings",
            "4096",
        );
        let c = LlamaConfig::parse_json(&c).unwrap();
        let want = RopeScaling::Yarn {
            factor: 8.0,
            original_max_position_embeddings: 4096.0,
            beta_fast: 16.0,
            beta_slow: 1.0,
            attention_factor: (0.2 * 8f64.ln() + 1.0) / (0.1 * 8f64.ln() + 1.0),
            truncate: false,
        };
        assert_eq!(c.rope_scaling, want);
        // llama3 without a pretraining context takes max_position_embeddings, as transformers.
        let no_original =
            with(QWEN2, "rope_scaling", &llama3.replace("\"original_max_position_embeddings\": 8192,", ""));
        let c = LlamaConfig::parse_json(&no_original).unwrap();
        assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { original_max_position_embeddings: 32768.0, .. }));
        // A missing or bad parameter is named.
        let missing = with(QWEN2, "rope_scaling", &llama3.replace("\"low_freq_factor\": 1.0,", ""));
        let e = LlamaConfig::parse_json(&missing).unwrap_err();
        assert!(matches!(e, LlamaConfigError::Missing { key: "low_freq_factor" }), "{e}");
        let inverted = with(QWEN2, "rope_scaling", &llama3.replace("4.0", "0.5"));
        let e = LlamaConfig::parse_json(&inverted).unwrap_err();
        assert!(matches!(e, LlamaConfigError::BadValue { key: "high_freq_factor", .. }), "{e}");
        let zero = with(QWEN2, "rope_scaling", r#"{"rope_type": "linear", "factor": 0}"#);
        let e = LlamaConfig::parse_json(&zero).unwrap_err();
        assert!(matches!(e, LlamaConfigError::NotPositive { key: "factor", .. }), "{e}");
    }

    #[test]
    fn unimplemented_settings_are_refused_by_name() {
        for (key, value, named) in [
            ("rope_scaling", r#"{"rope_type": "dynamic", "factor": 8.0}"#, "dynamic"),
            ("rope_scaling", r#"{"type": "longrope", "factor": 2.0}"#, "longrope"),
            ("rope_parameters", r#"{"rope_type": "longrope", "rope_theta": 1e6}"#, "longrope"),
            ("hidden_act", r#""gelu""#, "gelu"),
            ("use_sliding_window", "true", "true"),
            ("mlp_bias", "true", "true"),
            ("layer_types", r#"["full_attention", "sliding_attention"]"#, "sliding_attention"),
            ("architectures", r#"["MistralForCausalLM"]"#, "MistralForCausalLM"),
        ] {
            let e = LlamaConfig::parse_json(&with(QWEN2, key, value)).unwrap_err();
            assert!(matches!(e, LlamaConfigError::Unsupported { key: k, .. } if k == key), "{key}: {e}");
            assert!(e.to_string().contains(named), "{e}");
            assert!(matches!(Error::from(e), Error::Unsupported(_)));
        }
        let ok = with(QWEN2, "rope_scaling", r#"{"rope_type": "default"}"#);
        assert!(LlamaConfig::parse_json(&ok).is_ok());
    }

    #[test]
    fn bad_and_absurd_values_are_typed_errors() {
        for (key, value) in [("hidden_size", r#""896""#), ("rms_norm_eps", "true"), ("eos_token_id", "[-1]")] {
            let e = LlamaConfig::parse_json(&with(QWEN2, key, value)).unwrap_err();
            assert!(matches!(e, LlamaConfigError::BadValue { key: k, .. } if k == key), "{key}: {e}");
        }
        let e = LlamaConfig::parse_json(&with(QWEN2, "vocab_size", "REMOVE")).unwrap_err();
        assert!(matches!(e, LlamaConfigError::Missing { key: "vocab_size" }), "{e}");
        for (key, value) in [("vocab_size", "0"), ("hidden_size", "18446744073709551615"), ("num_hidden_layers", "0")] {
            let e = LlamaConfig::parse_json(&with(QWEN2, key, value)).unwrap_err();
            assert!(matches!(e, LlamaConfigError::OutOfRange { key: k, .. } if k == key), "{key}: {e}");
        }
        let e = LlamaConfig::parse_json(&with(QWEN2, "num_key_value_heads", "3")).unwrap_err();
        assert!(matches!(e, LlamaConfigError::Groups { .. }), "{e}");
        let e = LlamaConfig::parse_json(&with(QWEN2, "head_dim", "63")).unwrap_err();
        assert!(matches!(e, LlamaConfigError::OddHeadDim(63)), "{e}");
        let e = LlamaConfig::parse_json(&with(QWEN2, "rms_norm_eps", "0")).unwrap_err();
        assert!(matches!(e, LlamaConfigError::NotPositive { .. }), "{e}");
        let big = LlamaConfig { vocab_size: 1 << 22, hidden_size: 1 << 16, ..LlamaConfig::qwen2_0_5b() };
        assert!(matches!(big.validate(), Err(LlamaConfigError::TooLarge { .. })));
        assert!(LlamaConfig::parse_json("[1]").is_err());
    }
}
