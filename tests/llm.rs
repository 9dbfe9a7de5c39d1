//! Decoder LLMs end to end: the `llama-tiny` preset through prefill and decode on the CPU,
//! continuous batching giving each sequence what it gets alone, threads sharing one model,
//! the weights held once across the prefill and decode graphs; and the tiny Llama, Qwen2
//! and Qwen3 models (and `llama3` and `yarn` rope-scaled twins) of
//! `scripts/make_tiny_llm.py` against `transformers`' logits and greedy tokens, on the CPU
//! and over acl-emu.

mod common;

use npurt::llm::{FinishReason, Llm, LlmOptions, SamplingParams};
use npurt::models::llama::Step;
use npurt::{Error, RuntimeConfig};
use std::path::PathBuf;
use std::sync::Arc;

fn cpu() -> npurt::Runtime {
    npurt::Runtime::with_config(RuntimeConfig { backend: Some("cpu".into()), ..RuntimeConfig::default() })
        .expect("cpu runtime")
}

fn tiny(rt: &npurt::Runtime, options: LlmOptions) -> Llm {
    Llm::preset(rt, "llama-tiny", 3, LlmOptions { max_seq_len: Some(128), ..options }).expect("llama-tiny")
}

fn greedy(n: usize) -> SamplingParams {
    SamplingParams { stop_token_ids: Some(vec![]), ..SamplingParams::greedy(n) }
}

/// Prompts of 3, 9, 17 and 30 tokens.
fn prompts() -> Vec<Vec<u32>> {
    [3usize, 9, 17, 30].iter().map(|&n| (0..n as u32).map(|i| (i * 37 + n as u32) % 256).collect()).collect()
}

#[test]
fn the_preset_runs_prefill_and_decode_on_the_cpu() {
    let rt = cpu();
    let llm = tiny(&rt, LlmOptions::default());
    let mut events = Vec::new();
    let out = llm
        .generate_ids_stream(&[vec![1, 5, 7]], &greedy(8), |e| {
            assert_eq!(e.logits.len(), 256);
            assert!(e.logits.iter().all(|x| x.is_finite()));
            assert_eq!(e.token_id as usize, npurt::llm::argmax(e.logits), "greedy takes the argmax");
            events.push((e.token_id, e.finish_reason));
            Ok(())
        })
        .expect("generate");
    assert_eq!(out[0].token_ids.len(), 8);
    assert_eq!(out[0].finish_reason, FinishReason::Length);
    assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), out[0].token_ids);
    assert_eq!(events.last().unwrap().1, Some(FinishReason::Length));
    let steps = llm.compiled_steps();
    assert!(
        steps.contains(&Step::Prefill { batch: 1, seq: 16 }) && steps.contains(&Step::Decode { batch: 1 }),
        "{steps:?}"
    );
    // The same call again: the same tokens, nothing compiled.
    assert_eq!(llm.generate_ids(&[vec![1, 5, 7]], &greedy(8)).unwrap(), out);
    assert_eq!(llm.compiled_steps(), steps);
    // A stop token ends the sequence, kept in token_ids.
    let first = out[0].token_ids[0];
    let stop = SamplingParams { stop_token_ids: Some(vec![first]), ..SamplingParams::greedy(8) };
    let s = llm.generate_ids(&[vec![1, 5, 7]], &stop).unwrap();
    assert_eq!((s[0].token_ids.clone(), s[0].finish_reason), (vec![first], FinishReason::Stop));
    // Seeded sampling repeats with its seed.
    let sample = SamplingParams { temperature: 1.0, top_k: 20, seed: 9, ..greedy(8) };
    assert_eq!(
        llm.generate_ids(&[vec![1, 5, 7]], &sample).unwrap(),
        llm.generate_ids(&[vec![1, 5, 7]], &sample).unwrap()
    );
}

/// Decode profiling: with it on, a generation gives the same tokens and leaves the latest
/// decode step's per-node timings (every node of the decode graph, its products among
/// them); off, none is kept.
#[test]
fn a_profiled_decode_step_gives_the_same_tokens_and_its_node_timings() {
    let rt = cpu();
    let llm = tiny(&rt, LlmOptions::default());
    let plain = llm.generate_ids(&[vec![1, 5, 7]], &greedy(6)).unwrap();
    assert!(llm.last_decode_profile().is_none(), "nothing is profiled unless asked");
    llm.set_decode_profiling(true);
    assert_eq!(llm.generate_ids(&[vec![1, 5, 7]], &greedy(6)).unwrap(), plain);
    let p = llm.last_decode_profile().expect("a decode step was profiled");
    let layers = llm.config().num_hidden_layers;
    assert!(p.nodes.len() > 4 * layers, "{} nodes for {layers} layers", p.nodes.len());
    let linears = p.nodes.iter().filter(|n| n.op == "Linear").count();
    assert!(linears >= 4 * layers, "{linears} Linear nodes for {layers} layers");
    assert!(p.nodes.iter().all(|n| n.elapsed <= p.total), "a node outlasts its run");
    assert!(p.nodes.iter().any(|n| n.op == "PagedAttention"), "the decode graph reads the paged cache");
    llm.set_decode_profiling(false);
    assert!(llm.last_decode_profile().is_none(), "turning it off drops the profile");
    assert_eq!(llm.generate_ids(&[vec![1, 5, 7]], &greedy(6)).unwrap(), plain);
    assert!(llm.last_decode_profile().is_none());
}

/// The prefill and decode graphs share the device copies of the weights: compiling the
/// decode graph after the prefill graph adds no constant.
#[test]
fn the_weights_are_held_once_across_graphs() {
    let rt = cpu();
    let llm = tiny(&rt, LlmOptions::default());
    llm.generate_ids(&[vec![1, 2, 3]], &greedy(1)).unwrap();
    assert_eq!(llm.compiled_steps(), vec![Step::Prefill { batch: 1, seq: 16 }]);
    let after_prefill = llm.shared_constant_bytes();
    // Every weight once (and the rotary tables), not once per graph.
    let w = llm.weight_bytes();
    assert!(after_prefill >= w && after_prefill < 2 * w, "{after_prefill} bytes of constants for {w} bytes of weights");
    let pool_prefill = rt.pool_stats(0).unwrap();
    llm.generate_ids(&[vec![1, 2, 3]], &greedy(3)).unwrap();
    assert_eq!(llm.compiled_steps().len(), 2);
    assert_eq!(llm.shared_constant_bytes(), after_prefill, "the decode graph uploaded no weight of its own");
    let pool_decode = rt.pool_stats(0).unwrap();
    let grown = (pool_decode.in_use_bytes + pool_decode.system_bytes)
        .saturating_sub(pool_prefill.in_use_bytes + pool_prefill.system_bytes);
    assert!(grown < llm.weight_bytes(), "the pool grew by {grown} bytes, the weights are {}", llm.weight_bytes());
}

/// At precision bf16 the weights are held in bf16 on every CPU, with a bf16 unit or
/// without one (where each product widens them to f32: a decode step reads half the
/// bytes): the compiled constants take about half the f32 weights' bytes, and prefill
/// (past the decode-step rows) and decode both run on them.
#[test]
fn bf16_precision_holds_bf16_weights_on_any_cpu() {
    let cfg = RuntimeConfig { backend: Some("cpu".into()), precision: npurt::Precision::Bf16, ..Default::default() };
    let rt = npurt::Runtime::with_config(cfg).unwrap();
    let llm = tiny(&rt, LlmOptions::default());
    let prompt: Vec<u32> = (0..12).collect();
    let out = llm.generate_ids(&[prompt], &greedy(4)).unwrap();
    assert_eq!(out[0].token_ids.len(), 4);
    assert_eq!(llm.compiled_steps().len(), 2, "{:?}", llm.compiled_steps());
    let (held, f32_bytes) = (llm.shared_constant_bytes(), llm.weight_bytes());
    assert!(
        held < f32_bytes * 6 / 10 && held > f32_bytes * 4 / 10,
        "{held} bytes of constants for {f32_bytes} bytes of f32 weights"
    );
}

/// Four sequences of different lengths batched, and with a batch of two (sequences
/// leaving and joining between steps), give each sequence its tokens alone.
#[test]
fn batched_sequences_get_what_they_get_alone() {
    let rt = cpu();
    let llm = tiny(&rt, LlmOptions::default());
    let ps = prompts();
    let alone: Vec<Vec<u32>> = ps
        .iter()
        .map(|p| llm.generate_ids(std::slice::from_ref(p), &greedy(12)).unwrap()[0].token_ids.clone())
        .collect();
    let together = llm.generate_ids(&ps, &greedy(12)).unwrap();
    assert_eq!(together.iter().map(|g| g.token_ids.clone()).collect::<Vec<_>>(), alone);
    let pairs = tiny(&rt, LlmOptions { max_batch: 2, ..LlmOptions::default() });
    let out = pairs.generate_ids(&ps, &greedy(12)).unwrap();
    assert_eq!(out.iter().map(|g| g.token_ids.clone()).collect::<Vec<_>>(), alone);
    assert!(pairs.compiled_steps().iter().all(|s| !matches!(s, Step::Decode { batch } if *batch > 2)));
    // A stop token ends the first sequence early: the third joins while the second is
    // still decoding, in the decode buckets already compiled.
    let stop = SamplingParams { stop_token_ids: Some(vec![alone[0][3]]), ..SamplingParams::greedy(12) };
    let alone: Vec<Vec<u32>> =
        ps.iter().map(|p| pairs.generate_ids(std::slice::from_ref(p), &stop).unwrap()[0].token_ids.clone()).collect();
    assert!(alone[0].len() <= 4 && alone[1].len() > alone[0].len(), "{alone:?}");
    let steps = pairs.compiled_steps();
    let out = pairs.generate_ids(&ps, &stop).unwrap();
    assert_eq!(out.iter().map(|g| g.token_ids.clone()).collect::<Vec<_>>(), alone);
    let decode = |v: &[Step]| v.iter().filter(|s| matches!(s, Step::Decode { .. })).count();
    assert_eq!(decode(&pairs.compiled_steps()), decode(&steps), "a join recompiled a decode step");
}

#[test]
fn four_threads_share_one_model() {
    let rt = cpu();
    let llm = Arc::new(tiny(&rt, LlmOptions::default()));
    let ps = prompts();
    let alone: Vec<_> = ps.iter().map(|p| llm.generate_ids(std::slice::from_ref(p), &greedy(10)).unwrap()).collect();
    let handles: Vec<_> = ps
        .iter()
        .cloned()
        .map(|p| {
            let llm = Arc::clone(&llm);
            std::thread::spawn(move || {
                (0..3).map(|_| llm.generate_ids(std::slice::from_ref(&p), &greedy(10)).unwrap()).collect::<Vec<_>>()
            })
        })
        .collect();
    for (h, want) in handles.into_iter().zip(&alone) {
        for got in h.join().expect("thread") {
            assert_eq!(&got, want);
        }
    }
}

#[test]
fn bad_requests_are_typed_errors() {
    let rt = cpu();
    let llm = tiny(&rt, LlmOptions { num_blocks: Some(2), ..LlmOptions::default() });
    let e = llm.generate_ids(&[vec![1; 40]], &greedy(4)).unwrap_err();
    assert!(matches!(e, Error::Config(_)) && e.to_string().contains("block"), "{e}");
    let e = llm.generate_ids(&[vec![]], &greedy(4)).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = llm.generate_ids(&[vec![999]], &greedy(4)).unwrap_err();
    assert!(e.to_string().contains("vocab_size"), "{e}");
    let e = llm.generate(&["text"], &greedy(4)).unwrap_err();
    assert!(e.to_string().contains("no tokenizer"), "{e}");
    let bad = SamplingParams { top_p: 0.0, ..greedy(4) };
    assert!(llm.generate_ids(&[vec![1]], &bad).is_err());
    // A sequence stops at the end of the position table (max_seq_len 128): a prompt of
    // 126 tokens gets 3 tokens, the last one written at position 127.
    let roomy = tiny(&rt, LlmOptions::default());
    let end = roomy.generate_ids(&[vec![1; 126]], &greedy(10)).unwrap();
    assert_eq!((end[0].token_ids.len(), end[0].finish_reason), (3, FinishReason::Length));
    let e = roomy.generate_ids(&[vec![1; 129]], &greedy(1)).unwrap_err();
    assert!(e.to_string().contains("more than max_seq_len 128"), "{e}");
    // A callback that panics leaves the model usable, its blocks back in the pool.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        llm.generate_ids_stream(&[vec![1; 20]], &greedy(4), |_| panic!("callback")).ok();
    }));
    assert!(panicked.is_err());
    // The pool is whole again after the refusals: a request that fits runs.
    assert_eq!(llm.generate_ids(&[vec![1; 20]], &greedy(4)).unwrap()[0].token_ids.len(), 4);
    assert!(Llm::preset(&rt, "gpt-9", 1, LlmOptions::default()).is_err());
}

// ---- against transformers ----------------------------------------------------------------

/// The tiny models of scripts/make_tiny_llm.py: Llama, Qwen2, Llama with `llama3` rope
/// scaling, Qwen2 with `yarn`, and Qwen3.
const TINY_MODELS: [&str; 5] = ["llama", "qwen2", "llama3", "qwen2-yarn", "qwen3"];

/// The directory of the tiny models: `NPURT_TINY_LLM_DIR`, else target/test-assets/tiny-llm
/// (made now with scripts/make_tiny_llm.py when `transformers` imports); `None` with the
/// reason printed when neither is possible.
fn tiny_llm_dir(test: &str) -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("NPURT_TINY_LLM_DIR") {
        return Some(PathBuf::from(d));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/test-assets/tiny-llm");
    if TINY_MODELS.iter().all(|m| dir.join(m).join("reference.json").is_file()) {
        return Some(dir);
    }
    let import = std::process::Command::new("python3").args(["-c", "import transformers, torch"]).output();
    if !import.is_ok_and(|o| o.status.success()) {
        println!("SKIP {test}: NPURT_TINY_LLM_DIR is unset and python3 cannot import transformers and torch");
        return None;
    }
    let status = std::process::Command::new("python3")
        .arg(root.join("scripts/make_tiny_llm.py"))
        .arg(&dir)
        .status()
        .expect("run scripts/make_tiny_llm.py");
    assert!(status.success(), "scripts/make_tiny_llm.py failed");
    Some(dir)
}

struct Case {
    prompt: String,
    prompt_ids: Vec<u32>,
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

fn cases(model: &std::path::Path) -> Vec<Case> {
    let text = std::fs::read_to_string(model.join("reference.json")).expect("reference.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("reference.json parses");
    let floats = |x: &serde_json::Value| x.as_array().unwrap().iter().map(|f| f.as_f64().unwrap() as f32).collect();
    let ints = |x: &serde_json::Value| x.as_array().unwrap().iter().map(|f| f.as_u64().unwrap() as u32).collect();
    v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let mut logits: Vec<Vec<f32>> = vec![floats(&c["prefill_logits"])];
            logits.extend(c["decode_logits"].as_array().unwrap().iter().map(floats));
            Case {
                prompt: c["prompt"].as_str().unwrap().to_string(),
                prompt_ids: ints(&c["prompt_ids"]),
                logits,
                greedy: ints(&c["greedy_ids"]),
            }
        })
        .collect()
}

/// How closely a run must follow `transformers`.
#[derive(Clone, Copy, Debug)]
enum Check {
    /// f32: the prefill and 16 decode steps' logits within 1e-3 × max |logit|, the 17
    /// greedy ids identical.
    Exact,
    /// Products in fp16 / bf16: the prefill logits within `LOOSE` × max |logit|, and the
    /// first greedy id identical wherever the reference's top-2 margin exceeds twice the
    /// error (a closer call is within the rounding either way).
    Loose,
}

/// The reduced-precision tolerance of [`Check::Loose`], relative to the largest |logit|.
const LOOSE: f32 = 3e-2;

/// The largest |x|, and the gap between the two largest values of `v`.
fn scale_and_margin(v: &[f32]) -> (f32, f32) {
    let mut sorted = v.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    (v.iter().fold(0f32, |m, x| m.max(x.abs())), sorted[0] - sorted[1])
}

/// Every case of `model` on `rt`: the prompt ids, then the logits and greedy ids as
/// `check` says. `Err` (to skip, saying why) when the backend has no kernel for an op.
fn matches_transformers(rt: &runtime::Runtime, model: &std::path::Path, check: Check) -> Result<(), String> {
    let llm = Llm::from_dir(rt, model).unwrap_or_else(|e| panic!("{}: {e}", model.display()));
    let cases = cases(model);
    for c in &cases {
        assert_eq!(llm.encode(&c.prompt).unwrap(), c.prompt_ids, "{}: {:?}", model.display(), c.prompt);
    }
    let prompts: Vec<&str> = cases.iter().map(|c| c.prompt.as_str()).collect();
    let n = if matches!(check, Check::Exact) { 17 } else { 1 };
    let mut got: Vec<Vec<Vec<f32>>> = vec![Vec::new(); cases.len()];
    let out = match llm.generate_stream(&prompts, &greedy(n), |e| {
        got[e.prompt].push(e.logits.to_vec());
        Ok(())
    }) {
        Ok(out) => out,
        Err(e) if e.to_string().contains("registers no kernel for this op") => return Err(e.to_string()),
        Err(e) => panic!("{}: generate: {e}", model.display()),
    };
    for (i, c) in cases.iter().enumerate() {
        let what = format!("{} {check:?}: {:?}", model.display(), c.prompt);
        for (step, (g, w)) in got[i].iter().zip(&c.logits).enumerate() {
            let (scale, margin) = scale_and_margin(w);
            let err = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            let tol = if matches!(check, Check::Exact) { 1e-3 } else { LOOSE };
            assert!(err <= tol * scale, "{what}: step {step}: max error {err}, max |logit| {scale}");
            if matches!(check, Check::Loose) && margin > 2.0 * err {
                assert_eq!(out[i].token_ids[0], c.greedy[0], "{what}: the first greedy id");
            }
        }
        if matches!(check, Check::Exact) {
            assert_eq!(out[i].token_ids, c.greedy, "{what}: greedy ids");
        }
    }
    Ok(())
}

#[test]
fn tiny_models_match_transformers_on_the_cpu() {
    let Some(dir) = tiny_llm_dir("tiny_models_match_transformers_on_the_cpu") else { return };
    let rt = cpu();
    for m in TINY_MODELS {
        matches_transformers(&rt, &dir.join(m), Check::Exact).expect("the CPU runs every op");
    }
    for precision in [npurt::Precision::Bf16, npurt::Precision::F16] {
        let cfg = RuntimeConfig { backend: Some("cpu".into()), precision, ..RuntimeConfig::default() };
        let rt = npurt::Runtime::with_config(cfg).expect("cpu runtime");
        for m in TINY_MODELS {
            matches_transformers(&rt, &dir.join(m), Check::Loose).expect("the CPU runs every op");
        }
    }
}

#[cfg(feature = "acl")]
#[test]
fn tiny_models_match_transformers_over_acl_emu() {
    let test = "tiny_models_match_transformers_over_acl_emu";
    let Some(dir) = tiny_llm_dir(test) else { return };
    for (soc, check) in [("Ascend910B2", Check::Exact), ("Ascend910A", Check::Loose)] {
        let Some(emu) = common::AclEmu::on(soc, test) else { return };
        let rt = common::runtime(&emu.backend);
        for m in TINY_MODELS {
            if let Err(e) = matches_transformers(&rt, &dir.join(m), check) {
                println!("SKIP {test} on {soc}: {e}");
                break;
            }
        }
        drop(rt);
        emu.finish();
    }
}

/// `Llm` may be shared between threads and moved to one.
#[test]
fn llm_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Llm>();
    send_sync::<npurt::llm::Generation>();
    send_sync::<npurt::llm::LlmTokenizer>();
}

/// A sharded directory (`model.safetensors.index.json` naming its shards) loads as the
/// single file does; a shard named by a path is refused.
#[test]
fn sharded_weights_load_as_one_file() {
    let Some(dir) = tiny_llm_dir("sharded_weights_load_as_one_file") else { return };
    let src = dir.join("llama");
    let out = std::env::temp_dir().join(format!("npurt-llm-shards-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    for f in ["config.json", "tokenizer.json", "generation_config.json"] {
        std::fs::copy(src.join(f), out.join(f)).unwrap();
    }
    let shard = "model-00001-of-00001.safetensors";
    std::fs::copy(src.join("model.safetensors"), out.join(shard)).unwrap();
    let names = npurt::models::safetensors::SafetensorsFile::open(src.join("model.safetensors")).unwrap().names();
    let map: serde_json::Map<String, serde_json::Value> = names.iter().map(|n| (n.clone(), shard.into())).collect();
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(out.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let rt = cpu();
    let want = Llm::from_dir(&rt, &src).unwrap().generate(&["Hello"], &greedy(6)).unwrap();
    assert_eq!(Llm::from_dir(&rt, &out).unwrap().generate(&["Hello"], &greedy(6)).unwrap(), want);
    let mut bad = serde_json::json!({ "weight_map": map });
    bad["weight_map"]["model.norm.weight"] = "../model.safetensors".into();
    std::fs::write(out.join("model.safetensors.index.json"), bad.to_string()).unwrap();
    let e = Llm::from_dir(&rt, &out).unwrap_err();
    assert!(e.to_string().contains("is not a file name"), "{e}");
    std::fs::remove_dir_all(&out).ok();
}

/// The pieces a stream gives concatenate to the generated text, with byte-level tokens
/// that split characters (a random model draws them freely), and text pieces never hold
/// a replacement character that the whole text lacks.
#[test]
fn streamed_text_is_the_generated_text() {
    let Some(dir) = tiny_llm_dir("streamed_text_is_the_generated_text") else { return };
    let rt = cpu();
    for m in ["llama", "qwen2"] {
        let llm = Llm::from_dir(&rt, dir.join(m)).unwrap();
        for seed in 0..4 {
            let params = SamplingParams { temperature: 1.5, seed, ..greedy(24) };
            let mut streamed = vec![String::new(); 2];
            let out = llm
                .generate_stream(&["Hello", "Grouped-query attention: ünïcödé ✓"], &params, |e| {
                    streamed[e.prompt].push_str(e.text);
                    Ok(())
                })
                .unwrap();
            for (s, g) in streamed.iter().zip(&out) {
                assert_eq!(s, &g.text, "{m} seed {seed}: {:?}", g.token_ids);
            }
        }
    }
}

/// The engine keeps no host copy of the weights once a graph is compiled (on the CPU the
/// compiled constants are the only copy); a later bucket reads them again from their
/// source, finds every one in the shared constants (nothing uploaded anew), and gives what
/// a fresh model gives.
#[test]
fn no_host_copy_of_the_weights_is_kept_after_the_first_compile() {
    let rt = cpu();
    let llm = tiny(&rt, LlmOptions::default());
    assert_eq!(llm.host_weight_bytes(), llm.weight_bytes(), "the weights read at load");
    llm.generate_ids(&[vec![1, 2, 3]], &greedy(2)).unwrap();
    assert_eq!(llm.host_weight_bytes(), 0, "a host copy beside the compiled constants");
    let held = llm.shared_constant_bytes();
    // Two prompts of 20 tokens: a new prefill bucket and a new decode bucket.
    let two: Vec<Vec<u32>> = vec![(0..20).collect(), (5..25).collect()];
    let got = llm.generate_ids(&two, &greedy(3)).unwrap();
    assert_eq!(llm.compiled_steps().len(), 4, "{:?}", llm.compiled_steps());
    assert_eq!(llm.host_weight_bytes(), 0);
    assert_eq!(llm.shared_constant_bytes(), held, "weights read again were uploaded anew");
    let fresh = tiny(&rt, LlmOptions::default());
    assert_eq!(got, fresh.generate_ids(&two, &greedy(3)).unwrap());
}

/// Pool bytes (handed out, and served directly) of `rt`'s device 0.
fn pool_bytes(rt: &npurt::Runtime) -> usize {
    let s = rt.pool_stats(0).unwrap();
    s.in_use_bytes + s.system_bytes
}

/// Greedy ids and each step's logits of `prompts` on `llm`.
fn greedy_run(llm: &Llm, prompts: &[Vec<u32>], n: usize) -> (Vec<Vec<u32>>, Vec<Vec<Vec<f32>>>) {
    let mut logits = vec![Vec::new(); prompts.len()];
    let out = llm
        .generate_ids_stream(prompts, &greedy(n), |e| {
            logits[e.prompt].push(e.logits.to_vec());
            Ok(())
        })
        .unwrap();
    (out.into_iter().map(|g| g.token_ids).collect(), logits)
}

/// At precision f16 and bf16 the engine's KV caches are f16 / bf16: the pool holds half
/// the bytes f32 caches take, and the decode graph casts the keys and values as it writes
/// them and reads them back through PagedAttention. The tokens of a short greedy run are
/// those of f32 caches at the same precision, and every step's logits stay within
/// 1e-2 × max |logit| of them (measured: 2.4e-4 in f16, 3.6e-3 in bf16); they are also
/// the tokens of precision f32, its logits within `LOOSE` (measured: 4.7e-4 in f16, 5e-3
/// in bf16). f32 keeps f32 caches.
#[test]
fn reduced_precisions_keep_reduced_kv_caches_on_the_cpu() {
    let ps = prompts()[..2].to_vec();
    let f32_rt = cpu();
    let before = pool_bytes(&f32_rt);
    let wide = tiny(&f32_rt, LlmOptions::default());
    let f32_bytes = pool_bytes(&f32_rt) - before;
    assert_eq!(wide.cache_shape().dtype, npurt::DType::F32);
    assert_eq!(f32_bytes, wide.kv_cache_bytes(), "the f32 caches in the pool");
    let (f32_ids, f32_logits) = greedy_run(&wide, &ps, 8);
    for (precision, dtype) in [(npurt::Precision::F16, npurt::DType::F16), (npurt::Precision::Bf16, npurt::DType::BF16)]
    {
        let cfg = RuntimeConfig { backend: Some("cpu".into()), precision, ..RuntimeConfig::default() };
        let rt = npurt::Runtime::with_config(cfg).expect("cpu runtime");
        let before = pool_bytes(&rt);
        let llm = tiny(&rt, LlmOptions::default());
        let held = pool_bytes(&rt) - before;
        assert_eq!(llm.cache_shape().dtype, dtype, "{precision:?}");
        assert_eq!((held, 2 * llm.kv_cache_bytes()), (f32_bytes / 2, f32_bytes), "{precision:?}: pool bytes");
        let f32_caches = tiny(&rt, LlmOptions { kv_cache_dtype: Some(npurt::DType::F32), ..LlmOptions::default() });
        let (ids, logits) = greedy_run(&llm, &ps, 8);
        let (want_ids, want_logits) = greedy_run(&f32_caches, &ps, 8);
        assert_eq!(ids, want_ids, "{precision:?}: greedy ids with {dtype} caches and with f32 caches");
        let mut worst = 0f32;
        for (g, w) in logits.iter().flatten().zip(want_logits.iter().flatten()) {
            let scale = w.iter().fold(0f32, |m, x| m.max(x.abs()));
            let err = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            worst = worst.max(err / scale);
        }
        println!("{precision:?}: {dtype} caches against f32 caches, max error {worst:.2e} x max |logit|");
        // Against precision f32 (weights too in f32): the same greedy ids, each step's
        // logits within the reduced-precision tolerance of tests against transformers.
        let mut off = 0f32;
        for (g, w) in logits.iter().flatten().zip(f32_logits.iter().flatten()) {
            let scale = w.iter().fold(0f32, |m, x| m.max(x.abs()));
            off = off.max(g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale);
        }
        println!(
            "{precision:?}: against precision f32, max error {off:.2e} x max |logit|, ids {:?} / {:?}",
            ids, f32_ids
        );
        assert_eq!(ids, f32_ids, "{precision:?}: greedy ids against precision f32");
        assert!(off <= LOOSE, "{precision:?}: logits {off} x max |logit| from precision f32's");
        assert!(worst <= 1e-2, "{precision:?}: logits {worst} x max |logit| from f32 caches'");
        // The decode graph writes and reads the reduced caches (a Cast before each write).
        let steps = llm.compiled_steps();
        assert!(steps.iter().any(|s| matches!(s, Step::Decode { .. })), "{steps:?}");
    }
}
