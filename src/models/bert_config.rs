//! The configuration of a BERT encoder: the presets, and a Hugging Face `config.json`
//! parsed, bounded and checked for settings npurt does not implement.

use runtime::{Error, Result};
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

    /// Parses a Hugging Face `config.json`. A key that is present must hold a value of its
    /// type and range ([`LIMITS`]); only an absent `type_vocab_size` (2), `layer_norm_eps`
    /// (1e-12) or `hidden_act` (gelu) takes its default.
    pub fn from_json(text: &str) -> Result<BertConfig> {
        Ok(Self::parse_json(text)?)
    }

    /// [`from_json`](Self::from_json) with the typed error.
    pub fn parse_json(text: &str) -> std::result::Result<BertConfig, ConfigError> {
        let v: serde_json::Value = serde_json::from_str(text)?;
        let v = v.as_object().ok_or(ConfigError::NotAnObject)?;
        let uint = |key: &'static str, default: Option<usize>| -> std::result::Result<usize, ConfigError> {
            match v.get(key) {
                None => default.ok_or(ConfigError::Missing { key }),
                Some(x) => x
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| ConfigError::bad(key, "a non-negative integer", x)),
            }
        };
        let act = match v.get("hidden_act") {
            None => "gelu",
            Some(a) => a.as_str().ok_or_else(|| ConfigError::bad("hidden_act", "a string", a))?,
        };
        if act != "gelu" {
            return Err(ConfigError::Activation(act.to_string()));
        }
        check_implemented(v)?;
        let layer_norm_eps = match v.get("layer_norm_eps") {
            None => 1e-12,
            Some(x) => x.as_f64().ok_or_else(|| ConfigError::bad("layer_norm_eps", "a number", x))? as f32,
        };
        let c = BertConfig {
            vocab_size: uint("vocab_size", None)?,
            hidden_size: uint("hidden_size", None)?,
            num_hidden_layers: uint("num_hidden_layers", None)?,
            num_attention_heads: uint("num_attention_heads", None)?,
            intermediate_size: uint("intermediate_size", None)?,
            max_position_embeddings: uint("max_position_embeddings", None)?,
            type_vocab_size: uint("type_vocab_size", Some(2))?,
            layer_norm_eps,
        };
        c.validate()?;
        Ok(c)
    }

    /// Reads and parses the `config.json` at `path`: a regular file of at most
    /// [`crate::files::MAX_JSON_BYTES`]; every error names the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<BertConfig> {
        let p = path.as_ref();
        let text = crate::files::read_json_text(p)?;
        BertConfig::parse_json(&text).map_err(|e| e.in_file(p))
    }

    /// Checks every size against [`LIMITS`], the head split, `layer_norm_eps` (finite, in
    /// (0, 1]) and that the parameter count is at most [`MAX_PARAMETERS`] (computed with
    /// checked arithmetic). [`build`] calls it, so nothing is allocated for a config that
    /// fails it.
    pub fn validate(&self) -> std::result::Result<(), ConfigError> {
        for &(key, min, max) in LIMITS {
            let value = self.get(key);
            if value < min || value > max {
                return Err(ConfigError::OutOfRange { key, value, min, max });
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(ConfigError::Heads { hidden: self.hidden_size, heads: self.num_attention_heads });
        }
        let eps = self.layer_norm_eps;
        if !(eps.is_finite() && eps > 0.0 && eps <= 1.0) {
            return Err(ConfigError::Eps(eps));
        }
        match self.checked_parameters() {
            Some(p) if p <= MAX_PARAMETERS => Ok(()),
            p => Err(ConfigError::TooLarge {
                parameters: p.map_or_else(|| "more than usize::MAX".to_string(), |p| p.to_string()),
            }),
        }
    }

    fn get(&self, key: &str) -> usize {
        match key {
            "vocab_size" => self.vocab_size,
            "hidden_size" => self.hidden_size,
            "num_hidden_layers" => self.num_hidden_layers,
            "num_attention_heads" => self.num_attention_heads,
            "intermediate_size" => self.intermediate_size,
            "max_position_embeddings" => self.max_position_embeddings,
            "type_vocab_size" => self.type_vocab_size,
            _ => 0,
        }
    }

    /// Parameters of the encoder (saturating at `usize::MAX`).
    pub fn parameters(&self) -> usize {
        self.checked_parameters().unwrap_or(usize::MAX)
    }

    /// Parameters of the encoder; `None` when the count overflows.
    pub fn checked_parameters(&self) -> Option<usize> {
        let (h, i) = (self.hidden_size, self.intermediate_size);
        let rows = self.vocab_size.checked_add(self.max_position_embeddings)?.checked_add(self.type_vocab_size)?;
        let emb = rows.checked_mul(h)?.checked_add(h.checked_mul(2)?)?;
        let attn = h.checked_mul(h)?.checked_add(h)?.checked_mul(4)?;
        let ffn = h.checked_mul(i)?.checked_mul(2)?.checked_add(i)?.checked_add(h)?;
        let layer = attn.checked_add(ffn)?.checked_add(h.checked_mul(4)?)?;
        emb.checked_add(self.num_hidden_layers.checked_mul(layer)?)
    }
}

/// The one value of a setting npurt implements (absent means this value too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implemented {
    Str(&'static str),
    Bool(bool),
}

/// Settings of a Hugging Face `config.json` that change the encoder's math, with the value
/// npurt implements. Any other value is refused ([`ConfigError::Unsupported`]) rather than
/// ignored; so is an unknown `hidden_act` ([`ConfigError::Activation`]). Keys that do not
/// change the output of an encoder at inference (dropout probabilities, `use_cache`,
/// `pad_token_id`, `torch_dtype`, `architectures`, ...) are not read.
pub const IMPLEMENTED: &[(&str, Implemented)] = &[
    // RoBERTa, XLM-R, DistilBERT, ELECTRA, MPNet, GPT-2, ... differ in their positions,
    // weight names or layers: the BERT graph would compute something else.
    ("model_type", Implemented::Str("bert")),
    // Relative position embeddings add terms to the attention scores.
    ("position_embedding_type", Implemented::Str("absolute")),
    // A decoder masks attention causally; cross-attention needs an encoder's states.
    ("is_decoder", Implemented::Bool(false)),
    ("add_cross_attention", Implemented::Bool(false)),
];

/// Every key of [`IMPLEMENTED`] in `v` is absent or holds the value npurt implements.
fn check_implemented(v: &serde_json::Map<String, serde_json::Value>) -> std::result::Result<(), ConfigError> {
    for &(key, implemented) in IMPLEMENTED {
        let Some(x) = v.get(key) else { continue };
        let (ok, supported) = match implemented {
            Implemented::Str(want) => match x.as_str() {
                Some(s) => (s == want, format!("{want:?}")),
                None => return Err(ConfigError::bad(key, "a string", x)),
            },
            Implemented::Bool(want) => match x.as_bool() {
                Some(b) => (b == want, want.to_string()),
                None => return Err(ConfigError::bad(key, "true or false", x)),
            },
        };
        if !ok {
            return Err(ConfigError::Unsupported { key, value: x.to_string(), supported });
        }
    }
    Ok(())
}

/// `(key, min, max)` of every size in `config.json`: far above any published BERT-family
/// model, low enough that products of them cannot overflow.
pub const LIMITS: &[(&str, usize, usize)] = &[
    ("vocab_size", 1, 1 << 22),
    ("hidden_size", 1, 1 << 16),
    ("num_hidden_layers", 0, 1 << 10),
    ("num_attention_heads", 1, 1 << 10),
    ("intermediate_size", 1, 1 << 18),
    ("max_position_embeddings", 1, 1 << 20),
    ("type_vocab_size", 1, 1 << 16),
];

/// The largest encoder [`BertConfig::validate`] accepts (2^36 parameters, 256 GiB in f32).
pub const MAX_PARAMETERS: usize = 1 << 36;

/// Why a `config.json` (or a [`BertConfig`]) was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
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
    #[error("config.json: layer_norm_eps = {0} must be finite and in (0, 1]")]
    Eps(f32),
    #[error("config.json: hidden_act {0:?} is not supported (only gelu)")]
    Activation(String),
    /// A setting that changes the math, with a value npurt does not implement
    /// ([`IMPLEMENTED`]).
    #[error("config.json: {key} = {value} is not supported (npurt implements {supported}, the default)")]
    Unsupported { key: &'static str, value: String, supported: String },
    #[error("config.json: hidden_size {hidden} is not a multiple of num_attention_heads {heads}")]
    Heads { hidden: usize, heads: usize },
    #[error("config.json: {parameters} parameters exceed the limit of {MAX_PARAMETERS}")]
    TooLarge { parameters: String },
}

impl ConfigError {
    fn bad(key: &'static str, expected: &'static str, found: &serde_json::Value) -> ConfigError {
        let mut found = found.to_string();
        if found.len() > 40 {
            found = format!("{}...", found.chars().take(40).collect::<String>());
        }
        ConfigError::BadValue { key, expected, found }
    }
}

impl ConfigError {
    /// The error as the runtime's, naming the file `path` it was read from.
    pub fn in_file(self, path: &Path) -> Error {
        match self {
            e @ (ConfigError::Activation(_) | ConfigError::Unsupported { .. }) => {
                Error::Unsupported(format!("{}: {e}", path.display()))
            }
            e => Error::format_from(path.display().to_string(), e),
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        match e {
            ConfigError::Activation(_) | ConfigError::Unsupported { .. } => Error::Unsupported(e.to_string()),
            _ => Error::format_from(String::new(), e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINILM: &str = r#"{"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
        "num_attention_heads": 12, "intermediate_size": 1536, "max_position_embeddings": 512}"#;

    /// `MINILM` with `key` set to the JSON `value`.
    fn with(key: &str, value: &str) -> String {
        let mut v: serde_json::Value = serde_json::from_str(MINILM).unwrap();
        v[key] = serde_json::from_str(value).unwrap();
        v.to_string()
    }

    #[test]
    fn absent_optional_keys_take_their_defaults() {
        let c = BertConfig::from_json(MINILM).unwrap();
        assert_eq!(c, BertConfig::minilm_l6());
        assert_eq!(c.parameters(), BertConfig::minilm_l6().checked_parameters().unwrap());
    }

    #[test]
    fn unparsable_values_are_errors_naming_the_key() {
        for (key, value) in [
            ("layer_norm_eps", r#""1e-12""#),
            ("layer_norm_eps", "null"),
            ("vocab_size", r#""30522""#),
            ("vocab_size", "-1"),
            ("hidden_size", "384.5"),
            ("type_vocab_size", "true"),
            ("hidden_act", "7"),
        ] {
            let e = BertConfig::parse_json(&with(key, value)).unwrap_err();
            assert!(matches!(e, ConfigError::BadValue { key: k, .. } if k == key), "{key}={value}: {e}");
            assert!(e.to_string().contains(key), "{e}");
        }
        let mut v: serde_json::Value = serde_json::from_str(MINILM).unwrap();
        v.as_object_mut().unwrap().remove("hidden_size");
        let e = BertConfig::parse_json(&v.to_string()).unwrap_err();
        assert!(matches!(e, ConfigError::Missing { key: "hidden_size" }), "{e}");
    }

    /// A setting that changes the math is refused, naming key, value and file, unless it
    /// holds what npurt implements; absent, it takes that value.
    #[test]
    fn settings_npurt_does_not_implement_are_refused() {
        for (key, value) in [
            ("position_embedding_type", r#""relative_key""#),
            ("position_embedding_type", r#""relative_key_query""#),
            ("model_type", r#""gpt2""#),
            ("model_type", r#""roberta""#),
            ("model_type", r#""xlm-roberta""#),
            ("is_decoder", "true"),
            ("add_cross_attention", "true"),
        ] {
            let e = BertConfig::parse_json(&with(key, value)).unwrap_err();
            assert!(matches!(e, ConfigError::Unsupported { key: k, .. } if k == key), "{key}={value}: {e}");
            let msg = e.to_string();
            assert!(msg.starts_with("config.json: ") && msg.contains(key) && msg.contains(value), "{msg}");
            let d = std::env::temp_dir().join(format!("npurt-cfg-{}-{key}", std::process::id()));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("config.json"), with(key, value)).unwrap();
            let e = BertConfig::from_file(d.join("config.json")).unwrap_err();
            assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
            assert!(e.to_string().contains(&d.join("config.json").display().to_string()), "{e}");
            std::fs::remove_dir_all(&d).ok();
        }
        for (key, value) in [("model_type", "7"), ("is_decoder", r#""false""#), ("position_embedding_type", "null")] {
            let e = BertConfig::parse_json(&with(key, value)).unwrap_err();
            assert!(matches!(e, ConfigError::BadValue { key: k, .. } if k == key), "{key}={value}: {e}");
        }
        for (key, value) in [
            ("model_type", r#""bert""#),
            ("position_embedding_type", r#""absolute""#),
            ("is_decoder", "false"),
            ("add_cross_attention", "false"),
        ] {
            assert_eq!(BertConfig::parse_json(&with(key, value)).unwrap(), BertConfig::minilm_l6(), "{key}={value}");
        }
    }

    /// Sizes that would overflow or exhaust memory are refused before anything is
    /// allocated, naming the key.
    #[test]
    fn absurd_sizes_are_rejected() {
        for (key, value) in [
            ("vocab_size", "4611686018427387904"),
            ("vocab_size", "0"),
            ("hidden_size", "18446744073709551615"),
            ("num_hidden_layers", "100000"),
            ("intermediate_size", "0"),
            ("max_position_embeddings", "4611686018427387904"),
            ("type_vocab_size", "0"),
        ] {
            let e = BertConfig::parse_json(&with(key, value)).unwrap_err();
            assert!(matches!(e, ConfigError::OutOfRange { key: k, .. } if k == key), "{key}={value}: {e}");
        }
        // Each size within its limit, the product not.
        let big = BertConfig { vocab_size: 1 << 22, hidden_size: 1 << 16, ..BertConfig::minilm_l6() };
        assert!(matches!(big.validate(), Err(ConfigError::Heads { .. })));
        let big = BertConfig { num_attention_heads: 1 << 10, ..big };
        assert!(matches!(big.validate(), Err(ConfigError::TooLarge { .. })), "{:?}", big.validate());
        for eps in [f32::NAN, 0.0, -1e-5, 2.0] {
            let c = BertConfig { layer_norm_eps: eps, ..BertConfig::tiny() };
            assert!(matches!(c.validate(), Err(ConfigError::Eps(_))), "{eps}");
        }
    }
}
