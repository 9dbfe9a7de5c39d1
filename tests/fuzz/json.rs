//! The model directory's JSON files: `config.json` (`BertConfig::parse_json` /
//! `from_file`), and `sentence_bert_config.json` and `tokenizer.json` as
//! `Embedder::from_dir` reads them. Each key gets arbitrary JSON values (huge, negative,
//! fractional and non-numeric); the answer is a config or embedder that works, or a typed
//! error naming the key, never a panic, a hang or a huge allocation.

use crate::alloc::largest_allocation;
use crate::files::TempDir;
use npurt::Error;
use npurt::embed::{EmbedOptions, Embedder};
use npurt::models::bert::{self, BertConfig, ConfigError, Weights};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::OnceLock;

/// The tiny encoder's `config.json` (`BertConfig::tiny`).
const CONFIG: &str = r#"{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}"#;

/// A word-level tokenizer of five tokens.
const TOKENIZER: &str = r#"{"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": null, "decoder": null,
    "model": {"type": "WordLevel", "unk_token": "[UNK]",
              "vocab": {"[UNK]": 0, "[PAD]": 1, "hello": 2, "world": 3, "fox": 4}}}"#;

const CONFIG_KEYS: [&str; 9] = [
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "hidden_act",
];

/// Integers a hostile file may hold: small, at the edges of i32 / u32 / i64 / u64.
fn hostile_int() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (0u64..70).prop_map(Value::from),
        1 => prop_oneof![
            Just(1u64 << 22), Just((1 << 22) + 1), Just(1 << 31), Just(1 << 32), Just(1 << 62),
            Just(1 << 63), Just(u64::MAX),
        ].prop_map(Value::from),
        1 => prop_oneof![Just(-1i64), Just(-2), Just(i32::MIN as i64), Just(i64::MIN)].prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
    ]
}

/// Any JSON value a key may be given: integers as above, floats (integral ones too),
/// strings that look like numbers, booleans, null, arrays and objects.
pub fn hostile_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        6 => hostile_int(),
        2 => prop_oneof![
            Just(0.0f64), Just(-0.0), Just(32.0), Just(0.5), Just(1e-12), Just(1e-45), Just(1e300),
            Just(-1e-5), Just(2.0), Just(1.8446744073709552e19), Just(f64::MAX), Just(f64::MIN_POSITIVE),
        ].prop_map(Value::from),
        1 => any::<f64>().prop_map(Value::from),
        1 => prop_oneof![
            Just("32"), Just("NaN"), Just("inf"), Just("-1"), Just(""), Just("gelu"), Just("relu"),
            Just("gelu_new"), Just("1e-12"),
        ].prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A change to a JSON object: set a key, remove it, or replace the raw value text by
/// something that is not JSON at all (NaN, Infinity, numbers past f64).
#[derive(Clone, Debug)]
enum Change {
    Set(String, Value),
    Remove(String),
    Raw(String, &'static str),
}

/// Value texts that are not JSON (or, for a number past u64, JSON that reads as a float).
const NOT_JSON: [&str; 8] =
    ["NaN", "Infinity", "-Infinity", "1e999", "123456789012345678901234567890", "0x10", "+1", "01"];

fn change(keys: &'static [&'static str]) -> impl Strategy<Value = Change> {
    let key = prop_oneof![8 => prop::sample::select(keys).prop_map(str::to_string), 1 => "[a-z_]{1,10}"];
    prop_oneof![
        8 => (key.clone(), hostile_value()).prop_map(|(k, v)| Change::Set(k, v)),
        2 => key.clone().prop_map(Change::Remove),
        1 => (key, prop::sample::select(NOT_JSON.to_vec()))
            .prop_map(|(k, r)| Change::Raw(k, r)),
    ]
}

/// `base` with `changes` applied, as text, and the keys touched.
fn apply(base: &str, changes: &[Change]) -> (String, Vec<String>) {
    let mut v: serde_json::Map<String, Value> = serde_json::from_str(base).unwrap();
    let mut touched = Vec::new();
    let mut raw = Vec::new();
    for c in changes {
        match c {
            Change::Set(k, x) => {
                v.insert(k.clone(), x.clone());
                touched.push(k.clone());
            }
            Change::Remove(k) => {
                v.remove(k);
                touched.push(k.clone());
            }
            Change::Raw(k, r) => {
                // A placeholder string, replaced in the text below.
                v.insert(k.clone(), Value::from(format!("@RAW{}@", raw.len())));
                raw.push(*r);
                touched.push(k.clone());
            }
        }
    }
    let mut text = Value::Object(v).to_string();
    for (i, r) in raw.iter().enumerate() {
        text = text.replace(&format!("\"@RAW{i}@\""), r);
    }
    (text, touched)
}

/// The key an error of `BertConfig::parse_json` is about, if it names one key.
fn config_error_key(e: &ConfigError) -> Option<&'static str> {
    match e {
        ConfigError::Missing { key } | ConfigError::BadValue { key, .. } | ConfigError::OutOfRange { key, .. } => {
            Some(key)
        }
        ConfigError::Eps(_) => Some("layer_norm_eps"),
        ConfigError::Activation(_) => Some("hidden_act"),
        ConfigError::Unsupported { key, .. } => Some(key),
        _ => None,
    }
}

/// `config.json` with one to four keys set to arbitrary values, removed, or made
/// unparsable: a valid config, or an error naming a key that was changed. A config that
/// passes builds (random weights) when it has few parameters.
#[test]
fn bert_config_values_are_ok_or_errors_naming_the_key() {
    let counts = crate::Counts::default();
    let strategy = prop::collection::vec(change(&CONFIG_KEYS), 1..5);
    let n = crate::run_cases("config_json", 1000, strategy, &counts, |changes| {
        let (text, touched) = apply(CONFIG, &changes);
        let is_json = serde_json::from_str::<Value>(&text).is_ok();
        let (r, largest) = largest_allocation(|| BertConfig::parse_json(&text));
        prop_assert!(largest <= 64 << 10, "{} bytes allocated parsing {}", largest, text);
        match r {
            Ok(c) => {
                counts.add("accepted");
                prop_assert!(is_json);
                c.validate().unwrap();
                let p = c.checked_parameters().unwrap();
                prop_assert!(p <= bert::MAX_PARAMETERS);
                let v: Value = serde_json::from_str(&text).unwrap();
                for k in &CONFIG_KEYS[..7] {
                    prop_assert_eq!(v[*k].as_u64().unwrap_or(2) as usize, get(&c, k), "{}", k);
                }
                // Build the accepted config when its weights are at most 16 MiB: what is
                // allocated at once is one weight matrix.
                if p <= 1 << 22 {
                    let (g, largest) = largest_allocation(|| bert::build(&c, Weights::Random(1), 1, 1));
                    let g = g.unwrap();
                    g.graph.validate().unwrap();
                    prop_assert!(largest <= 4 * p + (1 << 20), "{} bytes at once for {} parameters", largest, p);
                    counts.add("built");
                } else {
                    counts.add("accepted with more than 2^22 parameters (not built)");
                }
            }
            Err(ConfigError::Json(e)) => prop_assert!(!is_json, "{} for JSON {}", e, text),
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("config.json: "), "{}", msg);
                match config_error_key(&e) {
                    Some(k) => {
                        prop_assert!(
                            touched.iter().any(|t| t == k) && msg.contains(k),
                            "{} (changed {:?})",
                            msg,
                            touched
                        )
                    }
                    // A cross-key check names two keys, one of them changed.
                    None => prop_assert!(
                        touched.iter().any(|t| msg.contains(t.as_str())) || matches!(e, ConfigError::TooLarge { .. }),
                        "{} (changed {:?})",
                        msg,
                        touched
                    ),
                }
            }
        }
        // From a file: the same answer, the error as `npurt::Error::Format` or `Unsupported`.
        let dir = TempDir::new("config");
        let p = dir.write("config.json", text.as_bytes());
        match (BertConfig::from_file(&p), BertConfig::parse_json(&text)) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a @ (Error::Format { .. } | Error::Unsupported(_))), Err(b)) => {
                prop_assert!(a.to_string().contains(&b.to_string()), "{} / {}", a, b)
            }
            (a, b) => prop_assert!(false, "from_file {:?} but parse_json {:?}", a, b),
        }
        Ok(())
    });
    assert!(counts.get("built") * 50 >= n, "too few configs accepted and built");
}

fn get(c: &BertConfig, key: &str) -> usize {
    match key {
        "vocab_size" => c.vocab_size,
        "hidden_size" => c.hidden_size,
        "num_hidden_layers" => c.num_hidden_layers,
        "num_attention_heads" => c.num_attention_heads,
        "intermediate_size" => c.intermediate_size,
        "max_position_embeddings" => c.max_position_embeddings,
        "type_vocab_size" => c.type_vocab_size,
        _ => unreachable!("{key}"),
    }
}

/// The weights of the tiny encoder as a safetensors file (made once).
fn tiny_weights() -> &'static [u8] {
    static W: OnceLock<Vec<u8>> = OnceLock::new();
    W.get_or_init(|| {
        let g = bert::build(&BertConfig::tiny(), Weights::Random(7), 1, 4).unwrap();
        let mut header = serde_json::Map::new();
        let mut data = Vec::new();
        for v in &g.graph.values {
            if let runtime::graph::ValueKind::Constant(t) = &v.kind
                && (v.name.ends_with(".weight") || v.name.ends_with(".bias"))
            {
                let offsets = [data.len(), data.len() + t.bytes.len()];
                header
                    .insert(v.name.clone(), json!({"dtype": "F32", "shape": t.shape.dims(), "data_offsets": offsets}));
                data.extend_from_slice(&t.bytes);
            }
        }
        let header = Value::Object(header).to_string();
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.extend_from_slice(&data);
        f
    })
}

/// A tiny model directory with `sbert` as `sentence_bert_config.json` (absent if `None`)
/// and `tokenizer` as `tokenizer.json`.
fn model_dir(sbert: Option<&str>, tokenizer: &str) -> TempDir {
    let dir = TempDir::new("embed");
    dir.write("config.json", CONFIG.as_bytes());
    dir.write("model.safetensors", tiny_weights());
    dir.write("tokenizer.json", tokenizer.as_bytes());
    if let Some(s) = sbert {
        dir.write("sentence_bert_config.json", s.as_bytes());
    }
    dir
}

/// Loads `dir` and, when it loads, embeds texts of several lengths in one batch (so that
/// padding is used): embeddings of the model's width, finite, or a typed error.
fn load_and_embed(rt: &npurt::Runtime, dir: &TempDir, counts: &crate::Counts) -> Result<Embedder, Error> {
    let opts = EmbedOptions { max_cached_graphs: 2, ..EmbedOptions::default() };
    let mut e = Embedder::from_dir_with(rt, dir.path(), opts)?;
    counts.add("loaded");
    let texts = ["hello world fox", "", "fox", "hello hello hello hello hello world world world world fox unknown"];
    match e.embed(&texts) {
        Ok(v) => {
            counts.add("embedded");
            assert_eq!(v.len(), texts.len());
            for x in &v {
                assert_eq!(x.len(), e.dimension());
                assert!(x.iter().all(|f| f.is_finite()), "{x:?}");
            }
        }
        // A token id past the embedding table (a vocabulary entry of tokenizer.json at or
        // past config.json's vocab_size) fails in the Gather kernel.
        Err(err) => {
            counts.add("embedding failed typed");
            assert!(
                matches!(
                    err,
                    Error::Invalid { .. }
                        | Error::Io { .. }
                        | Error::Format { .. }
                        | Error::Config(_)
                        | Error::Unsupported(_)
                        | Error::Backend { .. }
                        | Error::Async { .. }
                ),
                "{err:?}"
            )
        }
    }
    Ok(e)
}

/// The error's message, checked to be one of the loader's typed errors.
fn typed(e: &Error) -> String {
    assert!(
        matches!(
            e,
            Error::Io { .. } | Error::Format { .. } | Error::Config(_) | Error::Unsupported(_) | Error::Invalid { .. }
        ),
        "{e:?}"
    );
    e.to_string()
}

const SBERT_KEYS: [&str; 2] = ["max_seq_length", "do_lower_case"];

const TOKENIZER_KEYS: [&str; 9] = [
    "version",
    "truncation",
    "padding",
    "added_tokens",
    "normalizer",
    "pre_tokenizer",
    "post_processor",
    "decoder",
    "model",
];

/// Plausible-looking values of the tokenizer's sections with hostile numbers inside.
fn tokenizer_change() -> impl Strategy<Value = Change> {
    let n = || hostile_int();
    let truncation = (n(), n(), prop::sample::select(vec!["LongestFirst", "OnlyFirst", "OnlySecond"]))
        .prop_map(|(m, s, st)| json!({"max_length": m, "stride": s, "strategy": st, "direction": "Right"}));
    let padding = (n(), n(), n(), prop::bool::ANY).prop_map(|(id, ty, mult, fixed)| {
        let strategy = if fixed { json!({"Fixed": mult}) } else { json!("BatchLongest") };
        json!({"strategy": strategy, "direction": "Right", "pad_to_multiple_of": mult, "pad_id": id,
               "pad_type_id": ty, "pad_token": "[PAD]"})
    });
    let post = (n(), n(), prop::bool::ANY).prop_map(|(cls, sep, bert)| {
        if bert {
            json!({"type": "BertProcessing", "sep": ["[SEP]", sep], "cls": ["[CLS]", cls]})
        } else {
            json!({"type": "TemplateProcessing",
                   "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                              {"Sequence": {"id": "A", "type_id": sep}}],
                   "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                   "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]}}})
        }
    });
    let vocab = (n(), n()).prop_map(|(a, b)| {
        json!({"type": "WordLevel", "unk_token": "[UNK]",
               "vocab": {"[UNK]": 0, "[PAD]": 1, "hello": a, "world": b, "fox": 4}})
    });
    let added = n().prop_map(|id| {
        json!([{"id": id, "content": "[X]", "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": true}])
    });
    prop_oneof![
        2 => (prop::sample::select(TOKENIZER_KEYS.to_vec()), hostile_value())
            .prop_map(|(k, v)| Change::Set(k.to_string(), v)),
        1 => prop::sample::select(TOKENIZER_KEYS.to_vec()).prop_map(|k| Change::Remove(k.to_string())),
        2 => truncation.prop_map(|v| Change::Set("truncation".into(), v)),
        2 => padding.prop_map(|v| Change::Set("padding".into(), v)),
        2 => post.prop_map(|v| Change::Set("post_processor".into(), v)),
        2 => vocab.prop_map(|v| Change::Set("model".into(), v)),
        1 => added.prop_map(|v| Change::Set("added_tokens".into(), v)),
        1 => Just(Change::Set("normalizer".into(), json!({"type": "Lowercase"}))),
    ]
}

/// `sentence_bert_config.json` with arbitrary values (or not an object, or not JSON): the
/// model loads and embeds, or the error names the key or the file.
#[test]
fn sentence_bert_config_values_are_ok_or_errors_naming_the_key() {
    // A runtime of each test's own: see `graph::STOLEN_ERRORS`.
    let rt = crate::cpu_runtime();
    let counts = crate::Counts::default();
    let strategy = (
        prop::collection::vec(change(&SBERT_KEYS), 1..4),
        prop_oneof![8 => Just(None), 1 => hostile_value().prop_map(Some)],
    );
    let n = crate::run_cases("sentence_bert_config", 256, strategy, &counts, |(changes, top)| {
        let base = r#"{"max_seq_length": 16, "do_lower_case": false}"#;
        let (mut text, touched) = apply(base, &changes);
        if let Some(v) = top {
            text = v.to_string();
        }
        let dir = model_dir(Some(&text), TOKENIZER);
        match load_and_embed(&rt, &dir, &counts) {
            Ok(e) => {
                let v: Value = serde_json::from_str(&text).unwrap();
                let want = v.get("max_seq_length").and_then(Value::as_u64).map_or(64, |m| m.min(64) as usize);
                prop_assert_eq!(e.max_seq_length(), want, "{}", text);
            }
            Err(err) => {
                let msg = typed(&err);
                let names_it = SBERT_KEYS.iter().any(|k| msg.contains(k) && touched.iter().any(|t| t == k))
                    || msg.contains("sentence_bert_config.json");
                prop_assert!(names_it, "{} (changed {:?}, text {})", msg, touched, text);
            }
        }
        Ok(())
    });
    // Non-object top levels are refused, so about one case in six embeds.
    assert!(counts.get("embedded") * 8 >= n, "too few directories loaded and embedded");
}

/// `tokenizer.json` with sections set to arbitrary values, or to plausible ones with
/// hostile numbers (truncation lengths, padding ids, special-token ids, vocabulary ids
/// past `vocab_size`): the model loads and embeds, or a typed error.
#[test]
fn tokenizer_json_values_are_ok_or_typed_errors() {
    let rt = crate::cpu_runtime();
    let counts = crate::Counts::default();
    let strategy = prop::collection::vec(tokenizer_change(), 1..4);
    let n = crate::run_cases("tokenizer_json", 256, strategy, &counts, |changes| {
        let (text, _) = apply(TOKENIZER, &changes);
        let dir = model_dir(None, &text);
        if let Err(e) = load_and_embed(&rt, &dir, &counts) {
            let msg = typed(&e);
            prop_assert!(
                msg.contains("tokenizer.json")
                    || msg.contains("embed")
                    || msg.contains("vocab_size")
                    || matches!(e, Error::Invalid { .. }),
                "{}",
                msg
            );
        }
        Ok(())
    });
    assert!(counts.get("embedded") * 10 >= n, "too few tokenizers loaded and embedded");
}
