//! The hardware mapping follows the emulated device's cost model: over acl-emu, as a 910
//! (`Ascend910A`) and a 910B (`Ascend910B2`), BERT compiled with fusion and mapping on is
//! never slower in modelled time than with them off; and the roofline bound acl-emu
//! reports is the sum of its kernels' bounds, checked against a hand computation.
#![cfg(feature = "acl")]

mod common;

use common::{AclEmu, bert_inputs};
use npurt::models::bert::{self, BertConfig, Weights};
use npurt::{DType, Op, RuntimeConfig, Tensor};
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph, Graph};
use std::time::Duration;

const SOCS: [&str; 2] = ["Ascend910A", "Ascend910B2"];

/// The modelled latency of one steady-state run (executors recorded, graph captured) of
/// `cg`, and its summed roofline bound.
fn modelled_run(emu: &AclEmu, rt: &Runtime, cg: &CompiledGraph, inputs: &[Tensor]) -> (Duration, Duration) {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    for _ in 0..3 {
        drop(cg.run(&refs).expect("warm-up run"));
    }
    rt.synchronize(0).expect("synchronize");
    emu.run.reset().expect("reset the run counters");
    let out = cg.run(&refs).expect("timed run");
    rt.synchronize(0).expect("synchronize");
    let c = emu.run.counters().expect("run counters");
    drop(out);
    (c.modelled, c.roofline)
}

fn mapping_is_never_slower(test: &str, cfg: &BertConfig, batch: usize, seq: usize) {
    for soc in SOCS {
        let Some(emu) = AclEmu::on(soc, test) else { return };
        let bg = bert::build(cfg, Weights::Random(5), batch, seq).expect("build");
        {
            let rt = Runtime::with_backend(emu.backend.clone(), RuntimeConfig::default()).expect("acl runtime");
            let inputs = bert_inputs(&rt, batch, seq, cfg.vocab_size);
            let mut times = Vec::new();
            for fuse in [false, true] {
                let opts = CompileOptions { fuse, deny_host_tier: true, ..CompileOptions::from_config(rt.config(), 0) };
                let cg = CompiledGraph::compile(&rt, &bg.graph, opts).unwrap_or_else(|e| panic!("{soc}: {e}"));
                let (t, bound) = modelled_run(&emu, &rt, &cg, &inputs);
                println!("{test}: {soc}: mapping {fuse}: modelled {t:?}, roofline {bound:?}; {:?}", cg.fusion_stats());
                assert!(t > Duration::ZERO && bound > Duration::ZERO && bound < t, "{soc}: {t:?} {bound:?}");
                times.push(t);
            }
            assert!(times[1] <= times[0], "{soc}: mapping on {:?} is slower than off {:?}", times[1], times[0]);
        }
        emu.finish();
    }
}

#[test]
fn tiny_bert_mapping_is_never_slower_in_modelled_time() {
    mapping_is_never_slower("tiny_bert_mapping_is_never_slower_in_modelled_time", &BertConfig::tiny(), 2, 16);
}

#[test]
fn minilm_s128_mapping_is_never_slower_in_modelled_time() {
    let cfg = BertConfig::preset("minilm-l6").expect("the minilm-l6 preset");
    mapping_is_never_slower("minilm_s128_mapping_is_never_slower_in_modelled_time", &cfg, 1, 128);
}

/// Seconds as whole picoseconds, rounded up, as acl-emu rounds each kernel's bound.
fn ps(secs: f64) -> u64 {
    (secs * 1e12).ceil() as u64
}

#[test]
fn the_roofline_bound_sums_each_kernels_bound() {
    // One graph of three kernels, fp16: a product on the Cube, an Add and a Relu on the
    // Vector units. The 910A: Cube 32 cores x 4096 MACs x 2 x 1 GHz, Vector 32 units x 128
    // fp16 lanes x 1 GHz, HBM 1228.8 GB/s.
    let Some(emu) = AclEmu::on("Ascend910A", "the_roofline_bound_sums_each_kernels_bound") else { return };
    let (m, k, n) = (256usize, 512usize, 1024usize);
    let mut g = Graph::new();
    let a = g.input("a", DType::F16, vec![m, k]);
    let b = g.input("b", DType::F16, vec![k, n]);
    let c = g.input("c", DType::F16, vec![m, n]);
    let p = g.op("p", Op::MatMul { trans_a: false, trans_b: false }, &[a, b]).expect("matmul");
    let s = g.op("s", Op::Add, &[p, c]).expect("add");
    let r = g.op("r", Op::Relu, &[s]).expect("relu");
    g.output(r);
    {
        let rt = Runtime::with_backend(emu.backend.clone(), RuntimeConfig::default()).expect("acl runtime");
        let cg = CompiledGraph::compile(&rt, &g, CompileOptions::from_config(rt.config(), 0)).expect("compile");
        let zeros = |r: usize, c: usize| rt.from_slice(&vec![npurt::f16::ZERO; r * c], [r, c], 0).expect("upload");
        let inputs = vec![zeros(m, k), zeros(k, n), zeros(m, n)];
        let (_, bound) = modelled_run(&emu, &rt, &cg, &inputs);
        let (cube, vector, hbm) = (32.0 * 4096.0 * 2.0 * 1e9, 32.0 * 128.0 * 1e9, 4.0 * 1024.0 * 2.4e9 / 8.0);
        let (mn, e) = ((m * n) as f64, 2.0);
        let matmul = (2.0 * mn * k as f64 / cube).max(((m * k + k * n) as f64 + mn) * e / hbm);
        let add = (mn / vector).max(3.0 * mn * e / hbm);
        let relu = (mn / vector).max(2.0 * mn * e / hbm);
        let want = (ps(matmul) + ps(add) + ps(relu)) / 1000;
        println!("roofline: matmul {matmul:e} s, add {add:e} s, relu {relu:e} s; emulator {bound:?}");
        assert_eq!(bound, Duration::from_nanos(want), "the summed bound of the three kernels");
    }
    emu.finish();
}
