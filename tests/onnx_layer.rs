//! A BERT encoder layer as the ONNX exporter writes it (what the ONNX Runtime EP hands
//! npurt) compiles, on every backend, to the nodes and kernels of the same layer built with
//! npurt's ops (`src/models/bert.rs`'s Linear, Attention, AddLayerNorm, BiasGelu), with the
//! unfused graph's results; over acl-emu it makes the same aclnn calls as npurt's layer.
//! The layers are built by `runtime/tests/bert_layer/mod.rs` (hidden 64, 4 heads, seeded
//! weights); the rewrites are `runtime/src/graph/canonical.rs`.

#[path = "../runtime/tests/bert_layer/mod.rs"]
mod bert_layer;
mod common;

use bert_layer::{HIDDEN, Spelling, npurt_layer, onnx_layer, op_multiset};
use npurt::{DType, Op, Precision, Tensor};
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph, Graph};

/// The exporter's spellings, and (`gemm`) what ONNX Runtime's level-1 transformations hand
/// an EP.
const SPELLINGS: [Spelling; 3] = [
    Spelling { bias_first: true, half_last: false, by_mul: false, gemm: false },
    Spelling { bias_first: false, half_last: true, by_mul: true, gemm: false },
    Spelling { bias_first: true, half_last: false, by_mul: false, gemm: true },
];

fn options(rt: &Runtime, fuse: bool, precision: Precision) -> CompileOptions {
    CompileOptions { fuse, precision, ..CompileOptions::from_config(rt.config(), 0) }
}

/// Seeded inputs: `x` and an additive mask hiding the last token of batch 1.
fn layer_inputs(rt: &Runtime, batch: usize, seq: usize) -> Vec<Tensor> {
    let x: Vec<f32> = bert_layer::param("input.x", batch * seq * HIDDEN).iter().map(|v| v * 10.0).collect();
    let mask: Vec<f32> = (0..batch * seq).map(|i| if i == 2 * seq - 1 { -10000.0 } else { 0.0 }).collect();
    vec![rt.from_slice(&x, [batch, seq, HIDDEN], 0).unwrap(), rt.from_slice(&mask, [batch, 1, 1, seq], 0).unwrap()]
}

/// Max |a - b| over max |b|.
fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_ndarray::<f32>().unwrap(), b.to_ndarray::<f32>().unwrap());
    assert_eq!(a.shape(), b.shape());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    a.iter().zip(b.iter()).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max) / scale
}

/// The compiled graph's ops and, from a profiled run, its kernels (both sorted), and the
/// output.
fn compiled(rt: &Runtime, g: &Graph, opts: CompileOptions, ins: &[Tensor]) -> (Vec<String>, Vec<String>, Tensor) {
    let cg = CompiledGraph::compile(rt, g, opts).unwrap();
    let refs: Vec<&Tensor> = ins.iter().collect();
    let (mut out, prof) = cg.run_profiled(&refs).unwrap();
    let mut kernels: Vec<String> = prof.nodes.iter().map(|n| n.implementation.to_string()).collect();
    kernels.sort();
    (op_multiset(cg.graph()), kernels, out.remove(0))
}

/// The dtypes of the compiled graph's Linear weights, sorted by name.
fn linear_weight_dtypes(rt: &Runtime, g: &Graph, precision: Precision) -> Vec<DType> {
    let cg = CompiledGraph::compile(rt, g, options(rt, true, precision)).unwrap();
    let g = cg.graph();
    let mut w: Vec<(String, DType)> = g
        .nodes
        .iter()
        .filter(|n| n.op == Op::Linear)
        .map(|n| (g.value(n.inputs[1]).name.clone(), g.meta(n.inputs[1]).dtype))
        .collect();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w.into_iter().map(|(_, d)| d).collect()
}

on_every_backend!(onnx_layer_compiles_to_npurts_layer, |b| {
    let rt = common::runtime(&b);
    let (batch, seq) = (2, 8);
    let ins = layer_inputs(&rt, batch, seq);
    let (own_ops, own_kernels, own_out) =
        compiled(&rt, &npurt_layer(batch, seq), options(&rt, true, Precision::F32), &ins);
    for sp in SPELLINGS {
        let g = onnx_layer(batch, seq, sp);
        let (ops, kernels, out) = compiled(&rt, &g, options(&rt, true, Precision::F32), &ins);
        assert_eq!(ops, own_ops, "{}: {sp:?}: the fused ONNX layer's ops", b.name());
        assert_eq!(kernels, own_kernels, "{}: {sp:?}: the fused ONNX layer's kernels", b.name());
        let (_, _, unfused) = compiled(&rt, &g, options(&rt, false, Precision::F32), &ins);
        let d = rel_diff(&out, &unfused);
        println!("{}: {sp:?}: fused vs unfused {d:.2e}, vs npurt's layer {:.2e}", b.name(), rel_diff(&out, &own_out));
        assert!(d <= 1e-4, "{}: {sp:?}: fused against unfused, relative max diff {d}", b.name());
        assert!(rel_diff(&out, &own_out) <= 1e-4, "{}: {sp:?}: against npurt's own layer", b.name());
    }
    // The precision rewrite lowers the same weights (now Linear's) as in npurt's layer.
    for precision in [Precision::F16, Precision::Bf16] {
        let want = linear_weight_dtypes(&rt, &npurt_layer(batch, seq), precision);
        let got = linear_weight_dtypes(&rt, &onnx_layer(batch, seq, SPELLINGS[0]), precision);
        println!("{}: {}: Linear weights {got:?}", b.name(), precision.name());
        assert_eq!(got, want, "{}: {}", b.name(), precision.name());
    }
});

/// Over acl-emu as a 910 and a 910B2 at the runtime's defaults (fp16 on Ascend): the ONNX
/// layer compiles to npurt's layer's nodes and kernels, records as many aclnn executors
/// (phase 1) and launches as many aclnn operators (phase 2) per run, and captures and
/// replays the same way.
#[cfg(feature = "acl")]
#[test]
fn onnx_layer_makes_npurts_aclnn_calls() {
    use common::AclEmu;
    for soc in ["Ascend910A", "Ascend910B2"] {
        let Some(emu) = AclEmu::on(soc, "onnx_layer_makes_npurts_aclnn_calls") else { return };
        {
            let rt = Runtime::with_backend(emu.backend.clone(), npurt::RuntimeConfig::default()).unwrap();
            let ins = layer_inputs(&rt, 2, 8);
            let refs: Vec<&Tensor> = ins.iter().collect();
            let mut seen = Vec::new();
            for g in [npurt_layer(2, 8), onnx_layer(2, 8, SPELLINGS[0]), onnx_layer(2, 8, SPELLINGS[2])] {
                let opts = CompileOptions { deny_host_tier: true, ..CompileOptions::from_config(rt.config(), 0) };
                emu.run.reset().unwrap();
                let cg = CompiledGraph::compile(&rt, &g, opts).unwrap_or_else(|e| panic!("{soc}: {e}"));
                let compile = emu.run.counters().unwrap().phase1_calls;
                let mut per_run = Vec::new();
                let mut out = None;
                for _ in 0..3 {
                    emu.run.reset().unwrap();
                    out = Some(cg.run(&refs).unwrap().remove(0));
                    rt.synchronize(0).unwrap();
                    let c = emu.run.counters().unwrap();
                    per_run.push((c.phase1_calls, c.phase2_calls, c.replays, c.h2d_copies, c.d2h_copies));
                }
                let (_, prof) = cg.run_profiled(&refs).unwrap();
                let mut kernels: Vec<String> = prof.nodes.iter().map(|n| n.implementation.to_string()).collect();
                kernels.sort();
                println!(
                    "{soc}: {} nodes, compile phase-1 calls {compile}, per run {per_run:?}",
                    cg.graph().nodes.len()
                );
                seen.push((op_multiset(cg.graph()), kernels, compile, per_run, out.unwrap()));
            }
            let own = &seen[0];
            for (k, onnx) in seen.iter().enumerate().skip(1) {
                assert_eq!(onnx.0, own.0, "{soc}: spelling {k}: ops");
                assert_eq!(onnx.1, own.1, "{soc}: spelling {k}: kernels");
                assert_eq!(
                    (onnx.2, &onnx.3),
                    (own.2, &own.3),
                    "{soc}: spelling {k}: aclnn calls at compile and per run"
                );
                let d = rel_diff(&onnx.4, &own.4);
                assert!(d <= 2e-2, "{soc}: spelling {k}: the ONNX layer against npurt's, relative max diff {d}");
            }
        }
        let c = emu.finish();
        assert_eq!((c.device_allocations, c.streams, c.events, c.executors), (0, 0, 0, 0), "{soc}: {c:?}");
    }
}

on_every_backend!(onnx_layer_weights_are_held_once_across_shapes, |b| {
    // Two shapes of the ONNX layer compiled with one store: the second transposes,
    // uploads and (on the CPU) packs none of its weights.
    let rt = common::runtime(&b);
    let store = runtime::graph::SharedConstants::new();
    let in_use = || rt.pool_stats(0).unwrap().in_use_bytes;
    let opts = || options(&rt, true, Precision::F32);
    let g = onnx_layer(1, 8, SPELLINGS[2]);
    let weight_bytes = g.constant_bytes();
    CompiledGraph::compile_shared(&rt, g, opts(), &store).unwrap();
    let (held, held_bytes) = (store.len(), store.device_bytes());
    // Each constant once: the [N, K] weights in place of the [K, N] ones, not beside them.
    assert_eq!(held_bytes, weight_bytes, "{}: the store after one shape", b.name());
    let before = in_use();
    // The rewrites run first here, to keep a handle on each transposed weight.
    let any_kernel = |_: &Op, _: &[runtime::TensorMeta]| Some(String::new());
    let (g2, _) = runtime::graph::canonical::canonicalize(onnx_layer(2, 8, SPELLINGS[2]), &any_kernel).unwrap();
    let transposed: Vec<runtime::graph::HostBytes> = g2
        .values
        .iter()
        .filter_map(|v| match &v.kind {
            runtime::graph::ValueKind::Constant(t) if t.bytes.pending() => Some(t.bytes.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(transposed.len(), 6, "{}: one transposed weight per Linear", b.name());
    let second = CompiledGraph::compile_shared(&rt, g2, opts(), &store).unwrap();
    let grew = in_use() - before;
    assert!(transposed.iter().all(|t| t.pending()), "{}: the second shape transposed a weight", b.name());
    assert_eq!((store.len(), store.device_bytes()), (held, held_bytes), "{}: the second shape", b.name());
    let arena = second.arena_stats().bytes + second.arena_stats().backend_bytes;
    println!(
        "{}: store {held} constants, {held_bytes} bytes; the second shape allocated {grew} (arena {arena})",
        b.name()
    );
    assert!(grew <= arena + 4 * 512, "{}: the second shape allocated {grew} bytes, arena {arena}", b.name());
    let ins = layer_inputs(&rt, 2, 8);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let own = CompiledGraph::compile(&rt, &onnx_layer(2, 8, SPELLINGS[2]), opts()).unwrap();
    let (got, want) = (second.run(&refs).unwrap(), own.run(&refs).unwrap());
    assert_eq!(rel_diff(&got[0], &want[0]), 0.0, "{}: shared weights give the same result", b.name());
});
