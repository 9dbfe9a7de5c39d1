//! Whole models on the Ascend backend over acl-emu, as a 910 (`Ascend910A`) and a 910B
//! (`Ascend910B2`) run them by default: precision `auto` (fp16 on Ascend), every node on
//! aclnn (Attention unfused on the 910, where its composition is modelled slower, one
//! aclnnFlashAttentionScore on the 910B2 where it fuses; f32 products on the 910's Cube in FP16), no node
//! on the host tier, and results within fp16's tolerance of the CPU's f32.
#![cfg(feature = "acl")]

mod common;

use common::{AclEmu, bert_inputs, cosine};
use npurt::models::bert::{self, BertConfig, Weights};
use npurt::{DType, Op, Precision, RuntimeConfig, Tensor};
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph};

const SOCS: [&str; 2] = ["Ascend910A", "Ascend910B2"];

fn cpu() -> npurt::Runtime {
    npurt::Runtime::with_config(RuntimeConfig { backend: Some("cpu".into()), ..RuntimeConfig::default() })
        .expect("cpu runtime")
}

/// Compiles `cfg` (random weights `seed`, `[batch, seq]`) on the emulated `soc` with the
/// runtime's defaults and host-tier nodes refused, runs it twice and compares with the
/// CPU's f32 result.
fn model_runs_on_the_npu(test: &str, soc: &str, cfg: &BertConfig, batch: usize, seq: usize, seed: u64) {
    let Some(emu) = AclEmu::on(soc, test) else { return };
    let bg = bert::build(cfg, Weights::Random(seed), batch, seq).expect("build");
    let want = {
        let cpu = cpu();
        let ins = bert_inputs(&cpu, batch, seq, cfg.vocab_size);
        let refs: Vec<&Tensor> = ins.iter().collect();
        let opts = CompileOptions { precision: Precision::F32, ..CompileOptions::from_config(cpu.config(), 0) };
        let out = CompiledGraph::compile(&cpu, &bg.graph, opts).expect("compile on the CPU").run(&refs).expect("run");
        out[0].to_ndarray::<f32>().expect("host copy")
    };
    {
        let rt = Runtime::with_backend(emu.backend.clone(), RuntimeConfig::default()).expect("acl runtime");
        let opts = CompileOptions { deny_host_tier: true, ..CompileOptions::from_config(rt.config(), 0) };
        emu.run.reset().expect("reset the run counters");
        let cg = CompiledGraph::compile(&rt, &bg.graph, opts).unwrap_or_else(|e| panic!("{soc}: {e}"));
        // Compiling records every executor (phase 1, once) and launches nothing.
        let c = emu.run.counters().expect("run counters");
        assert!(c.phase1_calls > 0 && c.phase2_calls == 0, "{soc}: compile: {c:?}");
        assert_eq!(cg.options().precision, Precision::F16, "auto is fp16 on {soc}");
        assert!(cg.host_tier().is_empty(), "{soc}: {:?}", cg.host_tier());
        let g = cg.graph();
        let linears: Vec<_> = g.nodes.iter().filter(|n| matches!(n.op, Op::Linear)).collect();
        assert_eq!(linears.len(), 6 * cfg.num_hidden_layers, "the fused graph's Linear nodes");
        assert!(linears.iter().all(|n| g.meta(n.inputs[1]).dtype == DType::F16), "every Linear weight in fp16");
        // The graph fusion follows the device's cost model: on the 910A the composed
        // Attention costs more than the products it replaces, so none fuses there; on the
        // 910B2 a layer's Attention fuses where the modelled schedule gains by it.
        let fs = cg.fusion_stats();
        assert_eq!(fs.attention + fs.attention_declined, cfg.num_hidden_layers, "{soc}: Attention matches: {fs:?}");
        if soc == "Ascend910A" {
            assert_eq!(fs.attention, 0, "{soc}: the composition is modelled slower than the unfused products: {fs:?}");
        }
        let fused_attention = fs.attention;

        let ins = bert_inputs(&rt, batch, seq, cfg.vocab_size);
        let refs: Vec<&Tensor> = ins.iter().collect();
        let (first, prof) = cg.run_profiled(&refs).expect("first run");
        let units: Vec<&str> = prof.nodes.iter().map(|n| n.unit.label).collect();
        assert!(!units.contains(&"host"), "{soc}: a node ran on the host: {units:?}");
        let attention: Vec<&str> =
            prof.nodes.iter().filter(|n| n.op == "Attention").map(|n| n.implementation.as_ref()).collect();
        let expect = if soc == "Ascend910A" {
            "attention.aclnn-composed-fp16compute.cube"
        } else {
            "attention.aclnn-flash.cube"
        };
        assert_eq!(attention.len(), fused_attention, "{soc}: {attention:?}");
        assert!(attention.iter().all(|k| *k == expect), "{soc}: {attention:?}");
        // Frozen runs: the first launches the recorded executors, the second captures the
        // graph, the later ones replay it: one replay, no aclnn call, no copy between host
        // and device. No run makes a phase-1 call.
        let mut per_run = Vec::new();
        let mut flash = Vec::new();
        for k in 0..4 {
            emu.run.reset().expect("reset the run counters");
            let flash_before = emu.ctl.calls("aclnnFlashAttentionScore");
            let out = cg.run(&refs).expect("frozen run");
            flash.push(emu.ctl.calls("aclnnFlashAttentionScore") - flash_before);
            rt.synchronize(0).expect("synchronize");
            let c = emu.run.counters().expect("run counters");
            per_run.push((c.phase1_calls, c.phase2_calls, c.replays, c.h2d_copies, c.d2h_copies));
            let cos = cosine(&first[0], &out[0]);
            assert!(cos > 0.999_999, "{soc}: frozen run {k} differs from the first (cosine {cos})");
        }
        println!("{test}: {soc}: (phase 1, phase 2, replays, H2D, D2H) per frozen run: {per_run:?}");
        assert!(per_run.iter().all(|r| r.0 == 0), "{soc}: a run made phase-1 calls: {per_run:?}");
        assert!(per_run[0].1 > 0 && per_run[1].1 > 0, "{soc}: {per_run:?}");
        assert_eq!(per_run[1].2, 1, "{soc}: the capture run replays once: {per_run:?}");
        for r in &per_run[2..] {
            assert_eq!(*r, (0, 0, 1, 0, 0), "{soc}: a run after the capture: {per_run:?}");
        }
        // The frozen runs launch the same kernels: the flash kernel where the SoC has it
        // (the first launches it, the second captures it, replays call no aclnn entry).
        let want_flash = if soc == "Ascend910A" { 0 } else { fused_attention as u64 };
        assert_eq!(flash, vec![want_flash, want_flash, 0, 0], "{soc}: aclnnFlashAttentionScore launches per run");
        let want_t = rt.from_slice(want.as_slice().expect("contiguous"), want.shape().to_vec(), 0).expect("upload");
        let cos = cosine(&want_t, &first[0]);
        println!("{test}: {soc}: 1 - cosine = {:.2e} against the CPU's f32", 1.0 - cos);
        assert!(cos >= 0.999, "{soc}: fp16 on the NPU vs f32 on the CPU: cosine {cos}");
    }
    let c = emu.finish();
    assert_eq!(
        (c.device_allocations, c.streams, c.events, c.executors, c.descriptors, c.models),
        (0, 0, 0, 0, 0, 0),
        "{c:?}"
    );
}

#[test]
fn tiny_bert_runs_on_ascend910a() {
    model_runs_on_the_npu("tiny_bert_runs_on_ascend910a", SOCS[0], &BertConfig::tiny(), 2, 16, 11);
}

#[test]
fn tiny_bert_runs_on_ascend910b2() {
    model_runs_on_the_npu("tiny_bert_runs_on_ascend910b2", SOCS[1], &BertConfig::tiny(), 2, 16, 11);
}

#[test]
fn bert_base_s128_runs_on_ascend910a() {
    model_runs_on_the_npu("bert_base_s128_runs_on_ascend910a", SOCS[0], &BertConfig::bert_base(), 1, 128, 12);
}

#[test]
fn bert_base_s128_runs_on_ascend910b2() {
    model_runs_on_the_npu("bert_base_s128_runs_on_ascend910b2", SOCS[1], &BertConfig::bert_base(), 1, 128, 12);
}

/// With exact f32 products (`NPURT_ACL_FP32_MATMUL=exact`) the 910 cannot run an f32
/// graph's matrix products: compiling lists those nodes with the reason, and
/// `deny_host_tier` refuses the graph naming the first.
#[test]
fn exact_f32_on_the_910_lists_its_host_nodes() {
    let test = "exact_f32_on_the_910_lists_its_host_nodes";
    let Some(emu) = AclEmu::on("Ascend910A", test) else { return };
    {
        let lib = npurt_test_support::emu::fake_toolkit("soc-Ascend910A", &npurt_test_support::emu::emu_lib().unwrap())
            .join("lib64");
        let cfg = backend_acl::AclConfig { lib_dir: Some(lib), fp32_matmul: backend_acl::Fp32Matmul::Exact };
        let exact: std::sync::Arc<dyn npurt::Backend> =
            std::sync::Arc::new(backend_acl::AclBackend::new(cfg).expect("acl backend"));
        let rt = Runtime::with_backend(exact, RuntimeConfig::default()).expect("acl runtime");
        let bg = bert::build(&BertConfig::tiny(), Weights::Random(3), 1, 16).expect("build");
        let opts = CompileOptions { precision: Precision::F32, ..CompileOptions::from_config(rt.config(), 0) };
        let cg = CompiledGraph::compile(&rt, &bg.graph, opts.clone()).expect("compile");
        let ops: Vec<&str> = cg.host_tier().iter().map(|h| h.op).collect();
        assert!(ops.contains(&"Attention") && ops.contains(&"Linear"), "{ops:?}");
        assert!(cg.host_tier().iter().all(|h| h.reason.contains("FP16")), "{:?}", cg.host_tier());
        let e = CompiledGraph::compile(&rt, &bg.graph, CompileOptions { deny_host_tier: true, ..opts }).err();
        let e = e.expect("deny_host_tier refuses the graph").to_string();
        assert!(e.contains(&format!("{:?}", cg.host_tier()[0].node)), "{e}");
    }
    let c = emu.finish();
    assert_eq!((c.device_allocations, c.streams, c.executors), (0, 0, 0), "{c:?}");
}
