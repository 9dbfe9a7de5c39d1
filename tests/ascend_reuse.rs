//! Compiled graphs on Ascend reuse their aclnn executors (over acl-emu): each node's phase 1
//! runs once per arena, at its first run; later runs only patch the graph's input and
//! output addresses into the repeatable executors and call phase 2. Concurrent runs use
//! different arenas, so different executors; failures of the executor calls are typed
//! errors naming the call, and nothing leaks once the runtime is gone.
#![cfg(feature = "acl")]

mod common;

use common::AclEmu;
use npurt::models::bert::{self, BertConfig, Weights};
use npurt::{Precision, Tensor};
use npurt_test_support::emu::Emu;
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph, ScheduleStrategy};

/// Every phase-1 entry point acl-sys declares.
const PHASE1: &[&str] = &[
    "aclnnAddGetWorkspaceSize",
    "aclnnAddLayerNormGetWorkspaceSize",
    "aclnnAddRmsNormGetWorkspaceSize",
    "aclnnAddmmGetWorkspaceSize",
    "aclnnAddsGetWorkspaceSize",
    "aclnnAmaxGetWorkspaceSize",
    "aclnnBatchMatMulGetWorkspaceSize",
    "aclnnCastGetWorkspaceSize",
    "aclnnCatGetWorkspaceSize",
    "aclnnDivGetWorkspaceSize",
    "aclnnEmbeddingGetWorkspaceSize",
    "aclnnEqScalarGetWorkspaceSize",
    "aclnnEqTensorGetWorkspaceSize",
    "aclnnErfGetWorkspaceSize",
    "aclnnExpGetWorkspaceSize",
    "aclnnExpandGetWorkspaceSize",
    "aclnnFlashAttentionScoreGetWorkspaceSize",
    "aclnnGeluGetWorkspaceSize",
    "aclnnGeluV2GetWorkspaceSize",
    "aclnnIndexSelectGetWorkspaceSize",
    "aclnnInplaceCopyGetWorkspaceSize",
    "aclnnInplaceMaskedFillScalarGetWorkspaceSize",
    "aclnnLayerNormGetWorkspaceSize",
    "aclnnMatmulGetWorkspaceSize",
    "aclnnMeanGetWorkspaceSize",
    "aclnnMmGetWorkspaceSize",
    "aclnnMulGetWorkspaceSize",
    "aclnnMulsGetWorkspaceSize",
    "aclnnNegGetWorkspaceSize",
    "aclnnPermuteGetWorkspaceSize",
    "aclnnPowTensorTensorGetWorkspaceSize",
    "aclnnReduceSumGetWorkspaceSize",
    "aclnnReluGetWorkspaceSize",
    "aclnnRotaryPositionEmbeddingGetWorkspaceSize",
    "aclnnRmsNormGetWorkspaceSize",
    "aclnnRsqrtGetWorkspaceSize",
    "aclnnSWhereGetWorkspaceSize",
    "aclnnSigmoidGetWorkspaceSize",
    "aclnnSiluGetWorkspaceSize",
    "aclnnSliceGetWorkspaceSize",
    "aclnnSoftmaxGetWorkspaceSize",
    "aclnnSqrtGetWorkspaceSize",
    "aclnnSubGetWorkspaceSize",
    "aclnnSwiGluGetWorkspaceSize",
    "aclnnTanhGetWorkspaceSize",
    "aclnnTriuGetWorkspaceSize",
];

/// Phase-1 calls, phase-2 calls (the same names without `GetWorkspaceSize`) and address
/// setter calls since the emulator was last configured.
fn calls(ctl: &Emu) -> (u64, u64, u64) {
    let p1 = PHASE1.iter().map(|n| ctl.calls(n)).sum();
    let p2 = PHASE1.iter().map(|n| ctl.calls(n.trim_end_matches("GetWorkspaceSize"))).sum();
    let set = ctl.calls("aclSetInputTensorAddr") + ctl.calls("aclSetOutputTensorAddr");
    (p1, p2, set)
}

/// Compile options with graph capture off: these cases test the executors' reuse by
/// per-node launches (capture has cases of its own below).
fn options(reuse: bool, parallel: bool) -> CompileOptions {
    CompileOptions {
        device: 0,
        fuse: true,
        memory_reuse: reuse,
        parallel,
        strategy: ScheduleStrategy::Latency,
        max_streams: 4,
        precision: Precision::F32,
        max_arenas: 4,
        deny_host_tier: false,
        graph_capture: runtime::GraphCapture::Off,
        store_slow_precision: false,
    }
}

/// BERT inputs `[b, s]` that differ with `seed`: token ids (some near the vocabulary's
/// end), token types and a padding mask.
fn inputs(rt: &Runtime, seed: usize, b: usize, s: usize, vocab: usize) -> Vec<Tensor> {
    let ids: Vec<i64> = (0..b * s).map(|i| ((i * 7 + seed * 13 + 3) % vocab) as i64).collect();
    let tt: Vec<i64> = (0..b * s).map(|i| ((i + seed) % 2) as i64).collect();
    let mask: Vec<f32> = (0..b * s).map(|i| if i % s >= s - (seed % 4) { 0.0 } else { 1.0 }).collect();
    vec![
        rt.from_slice(&ids, [b, s], 0).unwrap(),
        rt.from_slice(&tt, [b, s], 0).unwrap(),
        rt.from_slice(&mask, [b, s], 0).unwrap(),
    ]
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let (x, y) = (a.to_ndarray::<f32>().unwrap(), b.to_ndarray::<f32>().unwrap());
    assert_eq!(x.shape(), y.shape());
    x.iter().zip(y.iter()).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max)
}

fn assert_nothing_left(emu: AclEmu, what: &str) {
    let c = emu.finish();
    assert_eq!(
        (
            c.device_allocations,
            c.host_allocations,
            c.streams,
            c.events,
            c.executors,
            c.descriptors,
            c.device_refs,
            c.models
        ),
        (0, 0, 0, 0, 0, 0, 0, 0),
        "{what} leaked: {c:?}"
    );
}

// Three runs on different inputs equal a node-by-node run (one-shot aclnn calls) of the
// same inputs; from the second run on, no phase 1 at all, only address patches and phase 2.
#[test]
fn tiny_bert_reuses_its_executors() {
    for (soc, parallel) in [("Ascend910A", false), ("Ascend910B2", true)] {
        let Some(emu) = AclEmu::on(soc, "tiny_bert_reuses_its_executors") else { return };
        {
            let rt = common::runtime(&emu.backend);
            let cfg = BertConfig::tiny();
            let (b, s) = (2, 16);
            let bg = bert::build(&cfg, Weights::Random(3), b, s).unwrap();
            let before = calls(&emu.ctl);
            let cg = CompiledGraph::compile(&rt, &bg.graph, options(true, parallel)).unwrap();
            let after = calls(&emu.ctl);
            let compiled = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
            assert!(cg.runs_frozen(), "{soc}");
            assert!(compiled.0 > 0 && compiled.1 == 0, "{soc}: compiling records, launching nothing: {compiled:?}");
            let plain = CompiledGraph::compile(&rt, &bg.graph, options(false, parallel)).unwrap();
            assert!(!plain.runs_frozen());
            let mut counts = Vec::new();
            // Earlier runs' tensors stay alive, so that every run gets new addresses.
            let mut keep = Vec::new();
            for seed in 0..3 {
                let ins = inputs(&rt, seed, b, s, cfg.vocab_size);
                let refs: Vec<&Tensor> = ins.iter().collect();
                let before = calls(&emu.ctl);
                let got = cg.run(&refs).unwrap();
                let after = calls(&emu.ctl);
                counts.push((after.0 - before.0, after.1 - before.1, after.2 - before.2));
                let want = plain.run(&refs).unwrap();
                let d = max_diff(&got[0], &want[0]);
                assert!(d < 1e-4, "{soc} run {seed}: max diff {d} from the node-by-node run");
                keep.push((ins, got));
            }
            println!("{soc}: (phase 1, phase 2, address patches) at compile time {compiled:?}, per run: {counts:?}");
            assert!(counts[0].1 > 0, "{soc}: the first run launches: {counts:?}");
            for (k, c) in counts.iter().enumerate() {
                assert_eq!(c.0, 0, "{soc}: run {k} made phase-1 calls: {counts:?}");
                assert_eq!(c.1, counts[0].1, "{soc}: run {k} launched another set of operators: {counts:?}");
                assert!(c.2 > 0, "{soc}: run {k} patched no address: {counts:?}");
            }
        }
        assert_nothing_left(emu, soc);
    }
}

// Two threads run one compiled graph at once, on two arenas (two sets of executors): each
// gets what a serial run of its input gives, and neither arena records again.
#[test]
fn concurrent_runs_use_their_own_executors() {
    let Some(emu) = AclEmu::on("Ascend910A", "concurrent_runs_use_their_own_executors") else { return };
    {
        let rt = common::runtime(&emu.backend);
        let cfg = BertConfig::tiny();
        let (b, s) = (1, 16);
        let bg = bert::build(&cfg, Weights::Random(11), b, s).unwrap();
        let cg = CompiledGraph::compile(&rt, &bg.graph, options(true, true)).unwrap();
        let make = |seed: usize| inputs(&rt, seed, b, s, cfg.vocab_size);
        let serial: Vec<Tensor> =
            (0..8).map(|seed| cg.run(&make(seed).iter().collect::<Vec<_>>()).unwrap().remove(0)).collect();
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<Vec<(usize, Tensor)>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2)
                .map(|t| {
                    let (cg, barrier, make) = (&cg, &barrier, &make);
                    sc.spawn(move || {
                        let mut out = Vec::new();
                        for r in 0..4 {
                            let seed = r * 2 + t;
                            let ins = make(seed);
                            barrier.wait();
                            out.push((seed, cg.run(&ins.iter().collect::<Vec<_>>()).unwrap().remove(0)));
                        }
                        out
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let st = cg.arena_stats();
        assert!(st.peak >= 2, "the two threads never ran at once: {st:?}");
        for (seed, got) in results.into_iter().flatten() {
            let d = max_diff(&got, &serial[seed]);
            assert!(d < 1e-5, "input {seed}: max diff {d} from its serial run");
        }
        // Every arena has recorded its executors: further runs make no phase-1 call.
        let before = calls(&emu.ctl);
        std::thread::scope(|sc| {
            for t in 0..2 {
                let (cg, make) = (&cg, &make);
                sc.spawn(move || cg.run(&make(t).iter().collect::<Vec<_>>()).unwrap());
            }
        });
        let after = calls(&emu.ctl);
        let fresh = cg.arena_stats().arenas > st.arenas;
        assert!(fresh || after.0 == before.0, "phase-1 calls on arenas that had run: {before:?} -> {after:?}");
    }
    assert_nothing_left(emu, "concurrent runs");
}

/// `e` is the typed error of an injected fault of `sym` (code 507899) in a graph node.
fn assert_names_call_and_node(sym: &str, e: &npurt::Error) {
    let msg = e.to_string();
    assert!(msg.contains(sym) && msg.contains("507899"), "{sym}: error does not name the call: {msg}");
    let acl = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<backend_acl::AclBackendError>())
        .unwrap_or_else(|| panic!("{sym}: not an Ascend backend error: {e:?}"));
    let backend_acl::AclBackendError::InNode { node, source } = acl else {
        panic!("{sym}: the error names no node: {acl:?}")
    };
    assert!(msg.contains(node.as_str()) && !node.is_empty(), "{sym}: {msg}");
    assert!(matches!(**source, backend_acl::AclBackendError::Call { .. }), "{sym}: {acl:?}");
    assert_eq!(acl.code(), Some(507899), "{sym}");
}

// A failure of each executor call — making it repeatable and phase 1 (at compile time),
// patching an input or an output address and phase 2 (in runs) — is a typed error
// naming the call and the node; the next compile or run works. A failed destroy (at
// teardown) is retried. Nothing is left once the runtime is gone.
#[test]
fn executor_call_faults_are_typed_errors_and_leak_nothing() {
    // (call, the run it fails; `None`: compile, or teardown for the destroy)
    let cases = [
        ("aclSetAclOpExecutorRepeatable", None),
        ("aclnnIndexSelectGetWorkspaceSize", None),
        ("aclSetInputTensorAddr", Some(1)),
        ("aclSetOutputTensorAddr", Some(1)),
        ("aclnnIndexSelect", Some(2)),
        ("aclDestroyAclOpExecutor", None),
    ];
    for (sym, fail_at_run) in cases {
        let Some(emu) = AclEmu::on("Ascend910A", "executor_call_faults") else { return };
        {
            let rt = common::runtime(&emu.backend);
            let cfg = BertConfig::tiny();
            let (b, s) = (1, 8);
            let bg = bert::build(&cfg, Weights::Random(2), b, s).unwrap();
            let at_compile = fail_at_run.is_none() && sym != "aclDestroyAclOpExecutor";
            if at_compile {
                assert_eq!(emu.ctl.configure(&format!("fail={sym}:1:507899")), 0);
                let Err(e) = CompiledGraph::compile(&rt, &bg.graph, options(true, false)) else {
                    panic!("{sym}: the injected fault must fail the compile")
                };
                assert_names_call_and_node(sym, &e);
                assert_eq!(emu.ctl.configure("fail="), 0);
            }
            let cg = CompiledGraph::compile(&rt, &bg.graph, options(true, false)).unwrap();
            let want = CompiledGraph::compile(&rt, &bg.graph, options(false, false)).unwrap();
            // Earlier runs' tensors stay alive, so that every run gets new addresses.
            let mut keep = Vec::new();
            for run in 0..3 {
                let ins = inputs(&rt, run, b, s, cfg.vocab_size);
                let refs: Vec<&Tensor> = ins.iter().collect();
                if Some(run) == fail_at_run {
                    assert_eq!(emu.ctl.configure(&format!("fail={sym}:1:507899")), 0);
                }
                let r = cg.run(&refs);
                if Some(run) == fail_at_run {
                    let e = r.expect_err(&format!("{sym}: the injected fault must fail the run"));
                    assert_names_call_and_node(sym, &e);
                    assert_eq!(emu.ctl.configure("fail="), 0);
                } else {
                    let got = r.unwrap_or_else(|e| panic!("{sym}: run {run}: {e}"));
                    let d = max_diff(&got[0], &want.run(&refs).unwrap()[0]);
                    assert!(d < 1e-4, "{sym}: run {run}: max diff {d}");
                    keep.push(got);
                }
                keep.push(ins);
            }
            if sym == "aclDestroyAclOpExecutor" {
                assert_eq!(emu.ctl.configure(&format!("fail={sym}:1:507899")), 0);
            }
        }
        assert_nothing_left(emu, sym);
    }
}

fn captured(parallel: bool, mode: runtime::GraphCapture) -> CompileOptions {
    CompileOptions { graph_capture: mode, ..options(true, parallel) }
}

/// Per run: phase-1 calls, phase-2 calls, address patches, replays, host-to-device and
/// device-to-host copies.
type RunCounts = (u64, u64, u64, u64, u64, u64);

fn run_counts(emu: &AclEmu, before: (u64, u64, u64), after: (u64, u64, u64)) -> RunCounts {
    let c = emu.run.counters().unwrap();
    (after.0 - before.0, after.1 - before.1, after.2 - before.2, c.replays, c.h2d_copies, c.d2h_copies)
}

// A recorded node's intermediates are dead once it has run, and the nodes of one stream
// run in order: the device memory the backend holds for a graph's executors does not grow
// with the number of layers (the composed Attention alone needs several score-sized
// intermediates per layer), and every run still equals the node-by-node run.
#[test]
fn recorded_intermediates_do_not_grow_with_depth() {
    for (soc, parallel) in [("Ascend910A", false), ("Ascend910B2", true)] {
        let Some(emu) = AclEmu::on(soc, "recorded_intermediates_do_not_grow_with_depth") else { return };
        {
            let rt = common::runtime(&emu.backend);
            let (b, s) = (2, 32);
            let mut held = Vec::new();
            for layers in [2, 6] {
                let cfg = BertConfig { num_hidden_layers: layers, ..BertConfig::tiny() };
                let bg = bert::build(&cfg, Weights::Random(3), b, s).unwrap();
                let cg = CompiledGraph::compile(&rt, &bg.graph, options(true, parallel)).unwrap();
                let plain = CompiledGraph::compile(&rt, &bg.graph, options(false, parallel)).unwrap();
                for seed in 0..3 {
                    let ins = inputs(&rt, seed, b, s, cfg.vocab_size);
                    let refs: Vec<&Tensor> = ins.iter().collect();
                    let (got, want) = (cg.run(&refs).unwrap(), plain.run(&refs).unwrap());
                    let d = max_diff(&got[0], &want[0]);
                    assert!(d < 1e-4, "{soc}, {layers} layers, run {seed}: max diff {d}");
                }
                held.push(cg.arena_stats().backend_bytes);
            }
            println!("{soc}: device bytes held for the executors of 2 and 6 layers: {held:?}");
            assert!(held[0] > 0, "{soc}: the recorded nodes hold intermediates and workspaces: {held:?}");
            assert_eq!(held[0], held[1], "{soc}: what the executors hold grows with depth");
        }
        assert_nothing_left(emu, soc);
    }
}

// With capture on, the compile records the executors, the first run launches them node
// by node (making the plan's workspaces), the second captures the launches and replays them, and every later run is one replay: no aclnn
// call, no address patch, no copy between host and device. Each run equals the node-by-node
// run of its inputs, although every run's inputs and outputs sit at new addresses.
#[test]
fn tiny_bert_is_captured_once_and_replayed() {
    for (soc, parallel) in [("Ascend910A", false), ("Ascend910B2", true)] {
        let Some(emu) = AclEmu::on(soc, "tiny_bert_is_captured_once_and_replayed") else { return };
        {
            let rt = common::runtime(&emu.backend);
            let cfg = BertConfig::tiny();
            let (b, s) = (2, 16);
            let bg = bert::build(&cfg, Weights::Random(3), b, s).unwrap();
            let cg = CompiledGraph::compile(&rt, &bg.graph, captured(parallel, runtime::GraphCapture::On)).unwrap();
            let plain = CompiledGraph::compile(&rt, &bg.graph, options(false, parallel)).unwrap();
            let mut counts = Vec::new();
            let mut keep = Vec::new();
            for seed in 0..5 {
                let ins = inputs(&rt, seed, b, s, cfg.vocab_size);
                let refs: Vec<&Tensor> = ins.iter().collect();
                rt.synchronize(0).unwrap();
                emu.run.reset().unwrap();
                let before = calls(&emu.ctl);
                let got = cg.run(&refs).unwrap();
                let after = calls(&emu.ctl);
                counts.push(run_counts(&emu, before, after));
                let want = plain.run(&refs).unwrap();
                let d = max_diff(&got[0], &want[0]);
                assert!(d < 1e-4, "{soc} run {seed}: max diff {d} from the node-by-node run");
                keep.push((ins, got));
            }
            println!("{soc}: (phase 1, phase 2, patches, replays, H2D, D2H) per run: {counts:?}");
            // One replay per run, whether the schedule uses one stream or several.
            let launches = counts[0].1;
            assert!(
                counts[0].0 == 0 && launches > 0 && counts[0].3 == 0,
                "{soc}: run 0 launches node by node: {counts:?}"
            );
            assert_eq!((counts[1].0, counts[1].1, counts[1].3), (0, launches, 1), "{soc}: run 1 captures: {counts:?}");
            for (k, c) in counts.iter().enumerate().skip(2) {
                assert_eq!(*c, (0, 0, 0, 1, 0, 0), "{soc}: run {k} is not one replay: {counts:?}");
            }
            assert!(!parallel || cg.schedule().streams > 1, "{soc}: the parallel case uses several streams");
            // The executors' own buffers, workspaces and staging are counted.
            let st = cg.arena_stats();
            assert!(st.backend_bytes > 0, "{soc}: {st:?}");
        }
        assert_nothing_left(emu, soc);
    }
}

// A failure of each capture call is a typed error naming the call and the nodes with
// capture on, and the next run works; with capture `auto` the same failure makes the
// graph fall back to node-by-node launches, with correct results. A failed destroy at
// teardown is retried. Nothing is left once the runtime is gone.
#[test]
fn capture_faults_are_typed_errors_or_fall_back() {
    let cases = [
        ("aclmdlRICaptureBegin", Some(1)),
        ("aclmdlRICaptureEnd", Some(1)),
        ("aclmdlRIExecuteAsync", Some(1)),
        ("aclmdlRIExecuteAsync", Some(2)),
        ("aclmdlRIDestroy", None),
    ];
    for mode in [runtime::GraphCapture::On, runtime::GraphCapture::Auto] {
        for (sym, fail_at_run) in cases {
            let Some(emu) = AclEmu::on("Ascend910A", "capture_faults") else { return };
            {
                let rt = common::runtime(&emu.backend);
                let cfg = BertConfig::tiny();
                let (b, s) = (1, 8);
                let bg = bert::build(&cfg, Weights::Random(2), b, s).unwrap();
                let cg = CompiledGraph::compile(&rt, &bg.graph, captured(false, mode)).unwrap();
                let want = CompiledGraph::compile(&rt, &bg.graph, options(false, false)).unwrap();
                let mut keep = Vec::new();
                for run in 0..4 {
                    let ins = inputs(&rt, run, b, s, cfg.vocab_size);
                    let refs: Vec<&Tensor> = ins.iter().collect();
                    if Some(run) == fail_at_run {
                        assert_eq!(emu.ctl.configure(&format!("fail={sym}:1:507899")), 0);
                    }
                    let r = cg.run(&refs);
                    let faulted = Some(run) == fail_at_run;
                    if faulted {
                        assert_eq!(emu.ctl.configure("fail="), 0);
                    }
                    if faulted && mode == runtime::GraphCapture::On {
                        let e = r.expect_err(&format!("{sym}: the injected fault must fail the run"));
                        let msg = e.to_string();
                        assert!(
                            msg.contains(sym) && msg.contains("507899"),
                            "{sym}: error does not name the call: {msg}"
                        );
                        assert!(msg.contains("node") && msg.contains("captured"), "{sym}: no node named: {msg}");
                        let acl = std::error::Error::source(&e)
                            .and_then(|s| s.downcast_ref::<backend_acl::AclBackendError>())
                            .unwrap_or_else(|| panic!("{sym}: not an Ascend backend error: {e:?}"));
                        assert_eq!(acl.code(), Some(507899), "{sym}");
                    } else {
                        let got = r.unwrap_or_else(|e| panic!("{sym} ({mode:?}): run {run}: {e}"));
                        let d = max_diff(&got[0], &want.run(&refs).unwrap()[0]);
                        assert!(d < 1e-4, "{sym} ({mode:?}): run {run}: max diff {d}");
                        keep.push(got);
                    }
                    keep.push(ins);
                }
                if fail_at_run.is_none() {
                    assert_eq!(emu.ctl.configure(&format!("fail={sym}:1:507899")), 0);
                }
            }
            assert_nothing_left(emu, sym);
        }
    }
}
