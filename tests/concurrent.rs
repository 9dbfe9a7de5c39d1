//! One compiled graph run from several threads at once gives, for every input, the output
//! of a serial run of that input; the graph's set of run arenas stays within its limit and
//! waits (never fails) when the device cannot make another arena.
//!
//! Each case is generated once per backend — `cpu`, `acl_emu` (the Ascend backend over
//! acl-emu) and `cuda` — so a failure names its backend; a backend that is absent prints
//! why its case skipped.

mod common;

use npurt::models::bert::{self, BertConfig, Weights};
use npurt::{Backend, DType, Op, Precision, RuntimeConfig, Tensor};
use npurt_test_support::emu::{emu_lib, fake_toolkit, serial};
use npurt_test_support::per_backend::Runs;
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph, Graph, ScheduleStrategy};
use std::path::PathBuf;
use std::sync::Arc;

/// Every case takes turns on every backend: each runs several threads at once.
fn serial_runs() -> Runs {
    Runs::all().serial()
}

fn options(parallel: bool, max_arenas: usize) -> CompileOptions {
    CompileOptions {
        device: 0,
        fuse: true,
        memory_reuse: true,
        parallel,
        strategy: ScheduleStrategy::Latency,
        max_streams: 4,
        precision: Precision::F32,
        max_arenas,
        deny_host_tier: false,
        graph_capture: runtime::GraphCapture::Auto,
        store_slow_precision: false,
    }
}

fn chain() -> Graph {
    npurt_test_support::graphs::live_chain(32, 12, (0..1024).map(|i| (i % 7) as f32 * 0.05).collect())
}

fn chain_input(rt: &Runtime, seed: usize) -> Vec<Tensor> {
    let v: Vec<f32> = (0..1024).map(|i| (((i * 31 + seed * 17) % 23) as f32 - 11.0) * 0.07).collect();
    vec![rt.from_slice(&v, [32, 32], 0).unwrap()]
}

fn bert_input(rt: &Runtime, seed: usize, s: usize, vocab: usize) -> Vec<Tensor> {
    let ids: Vec<i64> = (0..s).map(|i| ((i * 7 + seed * 13 + 3) % vocab) as i64).collect();
    let tt: Vec<i64> = (0..s).map(|i| ((i + seed) % 2) as i64).collect();
    let mask: Vec<f32> = (0..s).map(|i| if i >= s - seed % 4 { 0.0 } else { 1.0 }).collect();
    vec![
        rt.from_slice(&ids, [1, s], 0).unwrap(),
        rt.from_slice(&tt, [1, s], 0).unwrap(),
        rt.from_slice(&mask, [1, s], 0).unwrap(),
    ]
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_ndarray::<f32>().unwrap().iter().copied().collect()
}

/// Runs `cg` from `threads` threads, `runs` times each, on inputs `make(rt, seed)` with a
/// different seed per run, and counts outputs that differ from a serial run of the same
/// input by more than `tol`. Every third run is a poisoned run (intermediates overwritten
/// after their last reader), which must not disturb the others either.
fn mismatches(
    rt: &Runtime,
    cg: &CompiledGraph,
    threads: usize,
    runs: usize,
    tol: f32,
    make: &(dyn Fn(&Runtime, usize) -> Vec<Tensor> + Sync),
) -> usize {
    let seeds = threads * runs;
    let want: Vec<Vec<f32>> = (0..seeds)
        .map(|seed| {
            let ins = make(rt, seed);
            host(&cg.run(&ins.iter().collect::<Vec<_>>()).unwrap()[0])
        })
        .collect();
    let bad = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (want, bad) = (&want, &bad);
            s.spawn(move || {
                for r in 0..runs {
                    let seed = r * threads + t;
                    let ins = make(rt, seed);
                    let refs: Vec<&Tensor> = ins.iter().collect();
                    let out = if r % 3 == 2 { cg.run_poisoned(&refs) } else { cg.run(&refs) }.unwrap();
                    let got = host(&out[0]);
                    let d = got.iter().zip(&want[seed]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                    if d > tol || got.len() != want[seed].len() {
                        eprintln!("thread {t} run {r}: max abs diff {d}");
                        bad.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    bad.into_inner()
}

on_every_backend!(chain_runs_concurrently, serial_runs(), |b: Arc<dyn Backend>| {
    let rt = Runtime::with_backend(b, RuntimeConfig::default()).unwrap();
    for parallel in [false, true] {
        for max_arenas in [1, 2, 4] {
            let cg = CompiledGraph::compile(&rt, &chain(), options(parallel, max_arenas)).unwrap();
            assert!(cg.runs_frozen());
            let bad = mismatches(&rt, &cg, 4, 12, 1e-5, &chain_input);
            assert_eq!(bad, 0, "parallel={parallel} max_arenas={max_arenas}: {bad} of 48 concurrent runs wrong");
            let st = cg.arena_stats();
            assert!(st.arenas >= 1 && st.peak <= max_arenas && st.max == max_arenas, "{st:?}");
            let one = cg.memory_plan().unwrap().arena_bytes.max(1);
            assert!(st.bytes >= st.arenas * one, "{st:?}, one arena {one} bytes");
        }
    }
});

on_every_backend!(tiny_bert_runs_concurrently, serial_runs(), |b: Arc<dyn Backend>| {
    let rt = Runtime::with_backend(b, RuntimeConfig::default()).unwrap();
    let cfg = BertConfig::tiny();
    let s = 16;
    let bg = bert::build(&cfg, Weights::Random(5), 1, s).unwrap();
    let cg = CompiledGraph::compile(&rt, &bg.graph, options(true, 3)).unwrap();
    let make = |rt: &Runtime, seed: usize| bert_input(rt, seed, s, cfg.vocab_size);
    let bad = mismatches(&rt, &cg, 3, 6, 1e-4, &make);
    assert_eq!(bad, 0, "{bad} of 18 concurrent tiny-BERT runs wrong");
});

/// `relu(x) + tanh(x)` on a [64, 64] input: two branches a schedule may put on two streams.
fn two_branches() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [64, 64]);
    let l = g.op("l", Op::Relu, &[x]).unwrap();
    let r = g.op("r", Op::Tanh, &[x]).unwrap();
    let y = g.op("y", Op::Add, &[l, r]).unwrap();
    g.output(y);
    g
}

// A second arena needs streams of its own; with the runtime's stream cap used up by the
// first, concurrent runs wait for that one instead of failing.
on_every_backend!(runs_wait_when_no_further_arena_can_be_made, serial_runs(), |b: Arc<dyn Backend>| {
    let rt = Runtime::with_backend(b, RuntimeConfig { max_streams: 2, ..RuntimeConfig::default() }).unwrap();
    let g = two_branches();
    let opts = CompileOptions { max_streams: 2, ..options(true, 4) };
    let cg = CompiledGraph::compile(&rt, &g, opts).unwrap();
    if cg.schedule().streams < 2 {
        eprintln!("SKIP the stream-cap case: the schedule put the graph on one stream");
        return;
    }
    let make = |rt: &Runtime, seed: usize| {
        let v: Vec<f32> = (0..4096).map(|i| ((i + seed * 3) % 19) as f32 * 0.1 - 0.9).collect();
        vec![rt.from_slice(&v, [64, 64], 0).unwrap()]
    };
    let bad = mismatches(&rt, &cg, 3, 5, 1e-6, &make);
    assert_eq!(bad, 0);
    let st = cg.arena_stats();
    assert_eq!(st.arenas, 1, "the stream cap leaves room for one arena: {st:?}");
});

// A graph compiled while other holders have taken every user stream the runtime allows
// (each fused node of an ONNX Runtime session holds one compiled graph) runs its nodes in
// order on the default stream instead of failing to compile.
on_every_backend!(a_graph_without_free_streams_runs_on_the_default_stream, serial_runs(), |b: Arc<dyn Backend>| {
    let rt = Runtime::with_backend(b, RuntimeConfig { max_streams: 2, ..RuntimeConfig::default() }).unwrap();
    let g = two_branches();
    let opts = CompileOptions { max_streams: 2, ..options(true, 4) };
    let held: Vec<_> = (0..2).map(|_| rt.stream(0).unwrap()).collect();
    assert!(rt.stream(0).is_err(), "the cap is taken");
    let cg = CompiledGraph::compile(&rt, &g, opts).expect("compiles on the default stream");
    if cg.schedule().streams < 2 {
        eprintln!("SKIP the stream-cap case: the schedule put the graph on one stream");
        return;
    }
    let make = |rt: &Runtime, seed: usize| {
        let v: Vec<f32> = (0..4096).map(|i| ((i + seed * 5) % 23) as f32 * 0.1 - 1.1).collect();
        vec![rt.from_slice(&v, [64, 64], 0).unwrap()]
    };
    // Against the formula, then from two threads against the serial runs.
    let v: Vec<f32> = (0..4096).map(|i| (i % 23) as f32 * 0.1 - 1.1).collect();
    let got = host(&cg.run(&[&rt.from_slice(&v, [64, 64], 0).unwrap()]).unwrap()[0]);
    let worst = got.iter().zip(&v).map(|(g, a)| (g - (a.max(0.0) + a.tanh())).abs()).fold(0.0f32, f32::max);
    assert!(worst <= 1e-6, "max abs diff {worst}");
    let bad = mismatches(&rt, &cg, 2, 3, 1e-6, &make);
    assert_eq!(bad, 0);
    drop(held);
});

/// `npurt bench bert --concurrent N` on the CPU and, when the emulator is built, on the
/// Ascend backend over acl-emu: it checks every run and reports `mismatches: 0`, and its
/// JSON carries the counts.
#[test]
fn bench_bert_concurrent_reports_zero_mismatches() {
    let _turn = serial();
    let json = npurt_test_support::scratch::file("concurrent.json");
    let mut envs: Vec<(&str, Option<PathBuf>)> = vec![("cpu", None)];
    match emu_lib() {
        Some(emu) => envs.push(("acl", Some(fake_toolkit("concurrent-cli", &emu)))),
        None => eprintln!("SKIP the acl-emu leg: libacl_emu.so not found next to the test binary"),
    }
    for (backend, toolkit) in envs {
        let mut c = std::process::Command::new(npurt_test_support::cli::npurt_bin());
        c.args(["bench", "bert", "--model", "tiny", "--seq", "16", "--runs", "3", "--concurrent", "3", "--json"])
            .arg(&json)
            .args(["--backend", backend])
            .env_remove("NPURT_ACL_LIB_DIR");
        if let Some(tk) = &toolkit {
            c.env("ASCEND_TOOLKIT_HOME", tk);
        }
        let o = c.output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{backend}: {text}");
        assert!(text.contains("mismatches: 0"), "{backend}: {text}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let c = &v["concurrent"];
        assert_eq!((c["threads"].as_u64(), c["runs"].as_u64(), c["mismatches"].as_u64()), (Some(3), Some(9), Some(0)));
        assert!(c["runs_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
        assert_eq!(v["backend"].as_str(), Some(backend), "{v}");
    }
    let bad = std::process::Command::new(npurt_test_support::cli::npurt_bin())
        .args(["bench", "bert", "--model", "tiny", "--concurrent", "0"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--concurrent"));
}

/// On the CPU with more pool threads than cores (4 on a 2-core runner), runs of one graph
/// from four threads at once, each keeping a pool thread awake for its parallel kernels
/// while other runs' work is stolen around it, all finish (a watchdog turns a hang into a
/// failure) with the serial results.
#[test]
fn cpu_runs_on_four_pool_threads_finish_with_serial_results() {
    let config = RuntimeConfig { backend: Some("cpu".into()), threads: Some(4), ..RuntimeConfig::default() };
    let rt = npurt::Runtime::with_config(config).unwrap();
    let cfg = BertConfig::tiny();
    let s = 16;
    let bg = bert::build(&cfg, Weights::Random(7), 1, s).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bad = Vec::new();
        for (parallel, max_arenas) in [(true, 4), (false, 4), (true, 1)] {
            let cg = CompiledGraph::compile(&rt, &bg.graph, options(parallel, max_arenas)).unwrap();
            let make = |rt: &Runtime, seed: usize| bert_input(rt, seed, s, cfg.vocab_size);
            bad.push(mismatches(&rt, &cg, 4, 8, 1e-4, &make));
            let chain = CompiledGraph::compile(&rt, &chain(), options(parallel, max_arenas)).unwrap();
            bad.push(mismatches(&rt, &chain, 4, 8, 1e-5, &chain_input));
        }
        tx.send(bad).ok();
    });
    let bad = rx.recv_timeout(std::time::Duration::from_secs(300)).expect("concurrent runs did not finish in 300 s");
    assert!(bad.iter().all(|&b| b == 0), "mismatching runs per case: {bad:?}");
}
