//! Every file npurt reads is bounded and every file it writes is checked first (issue
//! "Reliability, round two", findings 1, 4, 5 and 8): the library loaders and the `npurt`
//! binary refuse a path that is not a regular file naming it, refuse model settings the
//! BERT graph does not implement, never fall back to random weights silently, and check
//! output files before a benchmark starts.

use npurt::embed::Embedder;
use npurt::models::bert::{self, BertConfig, Weights};
use npurt_test_support::cli::npurt_bin;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The tiny encoder's `config.json` (`BertConfig::tiny`).
const CONFIG: &str = r#"{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "model_type": "bert"}"#;

/// A word-level tokenizer whose post-processor gives the text type id `TYPE_ID`.
fn tokenizer(type_id: u32) -> String {
    format!(
        r#"{{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {{"type": "Whitespace"}}, "decoder": null,
        "post_processor": {{"type": "TemplateProcessing",
            "single": [{{"SpecialToken": {{"id": "[CLS]", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": {type_id}}}}}],
            "pair": [{{"Sequence": {{"id": "A", "type_id": 0}}}}, {{"Sequence": {{"id": "B", "type_id": 1}}}}],
            "special_tokens": {{"[CLS]": {{"id": "[CLS]", "ids": [5], "tokens": ["[CLS]"]}}}}}},
        "model": {{"type": "WordLevel", "unk_token": "[UNK]",
                  "vocab": {{"[UNK]": 0, "[PAD]": 1, "hello": 2, "world": 3, "fox": 4, "[CLS]": 5}}}}}}"#
    )
}

/// The tiny encoder's weights as a safetensors file.
fn weights() -> Vec<u8> {
    let g = bert::build(&BertConfig::tiny(), Weights::Random(7), 1, 4).unwrap();
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for v in &g.graph.values {
        if let runtime::graph::ValueKind::Constant(t) = &v.kind
            && (v.name.ends_with(".weight") || v.name.ends_with(".bias"))
        {
            let offsets = [data.len(), data.len() + t.bytes.len()];
            let entry = serde_json::json!({"dtype": "F32", "shape": t.shape.dims(), "data_offsets": offsets});
            header.insert(v.name.clone(), entry);
            data.extend_from_slice(&t.bytes);
        }
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    f.extend_from_slice(&data);
    f
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("npurt-input-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    /// A complete tiny sentence-transformers directory (no modules.json: mean pooling).
    fn model(tag: &str) -> Scratch {
        let s = Scratch::new(tag);
        std::fs::write(s.0.join("config.json"), CONFIG).unwrap();
        std::fs::write(s.0.join("tokenizer.json"), tokenizer(0)).unwrap();
        std::fs::write(s.0.join("model.safetensors"), weights()).unwrap();
        s
    }
    /// Replaces `name` by a symbolic link to `target`.
    fn link(&self, name: &str, target: &str) -> PathBuf {
        let p = self.0.join(name);
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_dir_all(&p);
        std::os::unix::fs::symlink(target, &p).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cpu() -> npurt::Runtime {
    let cfg = npurt::RuntimeConfig { backend: Some("cpu".into()), ..npurt::RuntimeConfig::default() };
    npurt::Runtime::with_config(cfg).unwrap()
}

fn npurt(args: &[&str]) -> Output {
    Command::new(npurt_bin()).args(args).env("NPURT_BACKEND", "cpu").output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Finding 1: each JSON file of a model directory linked to `/dev/zero` is refused by the
/// library loaders, naming it, instead of being read without end.
#[test]
fn model_files_linked_to_dev_zero_are_refused_by_the_loaders() {
    let rt = cpu();
    for name in ["config.json", "tokenizer.json", "sentence_bert_config.json", "modules.json", "model.safetensors"] {
        let m = Scratch::model("lib");
        assert!(Embedder::from_dir(&rt, &m.0).is_ok(), "the untouched directory loads");
        let p = m.link(name, "/dev/zero");
        let msg = Embedder::from_dir(&rt, &m.0).err().unwrap().to_string();
        assert!(msg.contains(&format!("{}: not a regular file (a character device)", p.display())), "{name}: {msg}");
        if name == "config.json" {
            let msg = BertConfig::from_file(&p).unwrap_err().to_string();
            assert!(msg.contains(&p.display().to_string()) && msg.contains("not a regular file"), "{msg}");
        }
    }
}

/// Finding 4: a post-processor type id past `type_vocab_size` is refused at load, naming
/// tokenizer.json and the id (it failed at the first text, as an anonymous Gather error).
#[test]
fn tokenizer_type_ids_past_type_vocab_size_are_refused_at_load() {
    let rt = cpu();
    let m = Scratch::model("types");
    std::fs::write(m.0.join("tokenizer.json"), tokenizer(1)).unwrap();
    let mut e = Embedder::from_dir(&rt, &m.0).unwrap();
    assert_eq!(e.embed(&["hello fox"]).unwrap()[0].len(), 32);
    std::fs::write(m.0.join("tokenizer.json"), tokenizer(2)).unwrap();
    let msg = Embedder::from_dir(&rt, &m.0).err().unwrap().to_string();
    let p = m.0.join("tokenizer.json");
    assert!(msg.contains(&format!("{}: post_processor gives type id 2", p.display())), "{msg}");
    assert!(msg.contains("type_vocab_size 2"), "{msg}");
}

/// Finding 4: settings the graph does not implement are refused by every loader, naming
/// the key and the file.
#[test]
fn unimplemented_model_settings_are_refused_naming_key_and_file() {
    let rt = cpu();
    for (key, value) in [
        ("position_embedding_type", "\"relative_key\""),
        ("model_type", "\"gpt2\""),
        ("model_type", "\"roberta\""),
        ("is_decoder", "true"),
    ] {
        let m = Scratch::model("settings");
        let mut c: serde_json::Value = serde_json::from_str(CONFIG).unwrap();
        c[key] = serde_json::from_str(value).unwrap();
        std::fs::write(m.0.join("config.json"), c.to_string()).unwrap();
        let p = m.0.join("config.json").display().to_string();
        let msg = Embedder::from_dir(&rt, &m.0).err().unwrap().to_string();
        assert!(msg.contains(&p) && msg.contains(key) && msg.contains(value), "{msg}");
        let o = npurt(&["bench", "bert", "--model", m.0.to_str().unwrap(), "--seq", "8", "--runs", "1"]);
        assert!(!o.status.success() && stderr(&o).contains(&p) && stderr(&o).contains(key), "{}", stderr(&o));
    }
}

/// Finding 1 through the binary: `op -i /dev/zero`, and a model directory whose
/// config.json or tokenizer.json is linked to `/dev/zero`, fail at once naming the path.
#[test]
fn the_cli_refuses_dev_zero_naming_it() {
    let o = npurt(&["op", "Relu", "-i", "/dev/zero"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("/dev/zero: not a regular file (a character device)"), "{}", stderr(&o));
    let m = Scratch::model("cli-zero");
    let p = m.link("tokenizer.json", "/dev/zero");
    let o = npurt(&["embed", "--model-dir", m.0.to_str().unwrap(), "hello"]);
    assert!(!o.status.success() && stderr(&o).contains(&format!("{}: not a regular file", p.display())));
    let p = m.link("config.json", "/dev/zero");
    for args in [&["embed", "--model-dir"][..], &["bench", "bert", "--model"]] {
        let o = Command::new(npurt_bin()).args(args).arg(&m.0).args(["--backend", "cpu"]).output().unwrap();
        let err = stderr(&o);
        assert!(!o.status.success() && err.contains(&format!("{}: not a regular file", p.display())), "{err}");
    }
}

/// Finding 5: `bench bert --model DIR` with a model.safetensors that is there but cannot
/// be read (a broken link, a directory, /dev/zero) is an error naming it, not a run on
/// random weights.
#[test]
fn bench_bert_refuses_an_unreadable_weights_file() {
    for target in ["/nonexistent/npurt.safetensors", "DIR", "/dev/zero"] {
        let m = Scratch::model("weights");
        let st = m.0.join("model.safetensors");
        std::fs::remove_file(&st).unwrap();
        if target == "DIR" {
            std::fs::create_dir(&st).unwrap();
        } else {
            m.link("model.safetensors", target);
        }
        let args = ["--seq", "8", "--runs", "1", "--backend", "cpu"];
        let o = Command::new(npurt_bin()).args(["bench", "bert", "--model"]).arg(&m.0).args(args).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{target}: {err}");
        assert!(err.contains(&st.display().to_string()), "{target}: {err}");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("random weights"), "{target}");
    }
}

/// Finding 5: whenever `bench bert` runs on random weights its first line says so; with a
/// weights file it names the file.
#[test]
fn bench_bert_says_random_weights_on_its_first_line() {
    let m = Scratch::model("random");
    let dir = m.0.to_str().unwrap().to_string();
    let run = |model: &str| {
        let o = npurt(&["bench", "bert", "--model", model, "--seq", "8", "--runs", "1"]);
        assert!(o.status.success(), "{model}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string()
    };
    let first = run(&dir);
    assert!(first.contains("weights from") && first.contains("model.safetensors"), "{first}");
    std::fs::remove_file(m.0.join("model.safetensors")).unwrap();
    for model in ["tiny", dir.as_str(), &format!("{dir}/config.json")] {
        let first = run(model);
        assert!(first.contains("random weights"), "{model}: {first}");
    }
}

/// Finding 8: an output file that cannot be written is an error naming the flag and the
/// path when the command line is read, before any benchmark runs; an empty `--model` names
/// the option. The check leaves no file behind.
#[test]
fn output_files_are_checked_before_the_work_and_errors_name_them() {
    let s = Scratch::new("outputs");
    let dir = s.0.to_str().unwrap();
    for (args, named) in [
        (&["bench", "bert", "--model", "tiny", "--json", "/proc/nope/x.json"][..], "/proc/nope/x.json"),
        (&["bench", "bert", "--model", "tiny", "--chart", "/proc/nope/c.png"], "/proc/nope/c.png"),
        (&["bench", "bert", "--model", "tiny", "--trace", ""], "--trace"),
        (&["bench", "bert", "--model", "tiny", "--trace", dir], dir),
        (&["bench", "bert", "--model", "tiny", "--accuracy", "--json", "/proc/nope/a.json"], "/proc/nope/a.json"),
        (&["bench", "gemm", "--json", "/proc/nope/g.json"], "/proc/nope/g.json"),
        (&["bench", "peak", "--json", "/proc/nope/p.json"], "/proc/nope/p.json"),
        (&["op", "Relu", "-i", "x.npy", "-o", "/proc/nope/o.npy"], "/proc/nope/o.npy"),
        (&["bench", "bert", "--model", "", "--seq", "8"], "--model"),
        (&["op", "Relu", "-i", ""], "--input"),
        (&["embed", "--model-dir", "", "text"], "--model-dir"),
    ] {
        let o = npurt(args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(named), "{args:?}: the error does not name {named}: {err}");
        assert!(o.stdout.is_empty(), "{args:?} ran: {}", String::from_utf8_lossy(&o.stdout));
    }
    // A creatable output of a run that then fails is not left behind.
    let json = s.0.join("never.json");
    let o = Command::new(npurt_bin())
        .args(["bench", "bert", "--model", "/nonexistent/model", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(!o.status.success() && stderr(&o).contains("/nonexistent/model"), "{}", stderr(&o));
    assert!(!Path::new(&json).exists(), "{} was left behind", json.display());
}
