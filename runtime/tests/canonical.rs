//! The canonical rewrites (`runtime/src/graph/canonical.rs`): a BERT layer as the ONNX
//! exporter writes it compiles to the ops of the same layer built with npurt's ops, computes
//! what its unfused graph computes, and holds its weights once across input shapes; each
//! rewrite stays away from intermediates that something else reads. Runs on the test-support
//! host backend (the reference kernels); `tests/onnx_layer.rs` runs the layer per backend.

mod bert_layer;

use bert_layer::{HIDDEN, Spelling, npurt_layer, onnx_layer, op_multiset};
use npurt_test_support::host_backend::HostBackend;
use runtime::graph::canonical::{CanonicalStats, canonicalize};
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor, SharedConstants, ValueId};
use runtime::{DType, GeluApprox, Op, Precision, Runtime, RuntimeConfig, Tensor, TensorMeta};

fn host() -> Runtime {
    Runtime::with_backend(HostBackend::shared(), RuntimeConfig::default()).expect("runtime")
}

fn options(fuse: bool) -> CompileOptions {
    CompileOptions { fuse, precision: Precision::F32, ..CompileOptions::from_config(&RuntimeConfig::default(), 0) }
}

/// Seeded layer inputs: `x` and an additive mask hiding the last token of batch 1.
fn layer_inputs(rt: &Runtime, batch: usize, seq: usize) -> Vec<Tensor> {
    let x = bert_layer::param("input.x", batch * seq * HIDDEN).iter().map(|v| v * 10.0).collect::<Vec<f32>>();
    let mask: Vec<f32> = (0..batch * seq).map(|i| if i == 2 * seq - 1 { -10000.0 } else { 0.0 }).collect();
    vec![
        rt.from_slice(&x, [batch, seq, HIDDEN], 0).expect("x"),
        rt.from_slice(&mask, [batch, 1, 1, seq], 0).expect("mask"),
    ]
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_ndarray::<f32>().expect("f32 output").iter().copied().collect()
}

/// Max |a - b| over max |b|.
fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (values(a), values(b));
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    a.iter().zip(&b).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max) / scale
}

fn run(cg: &CompiledGraph, ins: &[Tensor]) -> Tensor {
    let refs: Vec<&Tensor> = ins.iter().collect();
    cg.run(&refs).expect("run").remove(0)
}

#[test]
fn onnx_layer_compiles_to_the_ops_of_npurts_layer() {
    let rt = host();
    let (batch, seq) = (2, 8);
    let own = CompiledGraph::compile(&rt, &npurt_layer(batch, seq), options(true)).expect("npurt's layer");
    let want_ops = op_multiset(own.graph());
    // Six products, the feed-forward's first with its GELU (LinearGelu) where the device has
    // that kernel, and the query, key and value projections merged into one product (three
    // Slices) where the device has no cost model: four.
    assert_eq!(want_ops.iter().filter(|o| *o == "Linear" || *o == "LinearGelu").count(), 4, "{want_ops:?}");
    assert_eq!(want_ops.iter().filter(|o| o.starts_with("Slice")).count(), 3, "{want_ops:?}");
    assert_eq!(own.fusion_stats().merged_linears, 1);
    let ins = layer_inputs(&rt, batch, seq);
    let own_out = run(&own, &ins);
    let spellings = [
        Spelling::default(),
        Spelling { bias_first: true, ..Spelling::default() },
        Spelling { half_last: true, by_mul: true, ..Spelling::default() },
        Spelling { bias_first: true, half_last: true, by_mul: true, gemm: false },
        Spelling { gemm: true, ..Spelling::default() },
    ];
    for sp in spellings {
        let g = onnx_layer(batch, seq, sp);
        // With `gemm`, ORT's form: the head split and merge reshapes merged into the two per
        // Gemm (12 in all, not 16).
        let reshapes = g.nodes.iter().filter(|n| matches!(n.op, Op::Reshape { .. })).count();
        assert_eq!(reshapes, if sp.gemm { 12 } else { 4 }, "{sp:?}");
        let unfused = CompiledGraph::compile(&rt, &g, options(false)).expect("unfused");
        let fused = CompiledGraph::compile(&rt, &g, options(true)).expect("fused");
        assert_eq!(op_multiset(fused.graph()), want_ops, "{sp:?}");
        let c = &fused.fusion_stats().canonical;
        // The two divisions (or products by reciprocals) and the GELU's 0.5.
        let gemm = if sp.gemm { 6 } else { 0 };
        let want = CanonicalStats {
            scale: 3,
            matmul_trans_b: 1,
            gelu: 1,
            linear: 6,
            linear_bias: 6,
            gemm,
            gemm_reshapes: gemm,
        };
        assert_eq!(*c, want, "{sp:?}");
        let f = fused.fusion_stats();
        assert_eq!((f.attention, f.attention_permutes_folded, f.bias_gelu, f.add_layer_norm), (1, 1, 1, 2), "{f:?}");
        assert_eq!(f.merged_linears, 1, "{sp:?}");
        let got = run(&fused, &ins);
        let d = rel_diff(&got, &run(&unfused, &ins));
        assert!(d <= 1e-5, "{sp:?}: fused against unfused, relative max diff {d}");
        let d = rel_diff(&got, &own_out);
        assert!(d <= 1e-5, "{sp:?}: against npurt's own layer, relative max diff {d}");
    }
}

#[test]
fn transposed_weights_are_held_once_across_shapes() {
    let rt = host();
    let store = SharedConstants::new();
    let in_use = || rt.pool_stats(0).expect("pool").in_use_bytes;
    let g = onnx_layer(1, 8, Spelling::default());
    let weight_bytes = g.constant_bytes();
    let first = CompiledGraph::compile_shared(&rt, g, options(true), &store).expect("first shape");
    assert_eq!(first.fusion_stats().canonical.linear, 6);
    // Every constant once: the [N, K] weights in place of the [K, N] ones, not beside them.
    assert_eq!(store.device_bytes(), weight_bytes, "the store after one shape");
    let (held, before) = (store.len(), in_use());
    let second = CompiledGraph::compile_shared(&rt, onnx_layer(2, 16, Spelling::default()), options(true), &store)
        .expect("second shape");
    assert_eq!(second.fusion_stats().canonical.linear, 6);
    assert_eq!((store.len(), store.device_bytes()), (held, weight_bytes), "the second shape adds no constant");
    let grew = in_use() - before;
    let arena = second.arena_stats().bytes;
    assert!(grew <= arena + 2 * 512, "the second shape allocated {grew} bytes beyond its arena of {arena}");
    // The shared weights compute what a graph holding its own computes.
    let ins = layer_inputs(&rt, 2, 16);
    let own = CompiledGraph::compile(&rt, &onnx_layer(2, 16, Spelling::default()), options(true)).expect("own");
    assert_eq!(rel_diff(&run(&second, &ins), &run(&own, &ins)), 0.0);
}

/// The transposed weights of a rewritten `MatMul` are made only when a compile reads them:
/// a second input shape whose weights the store holds never transposes them (no second
/// host copy of the weights at its compile), a compile with an empty store does.
#[test]
fn a_shape_whose_weights_the_store_holds_never_transposes_them() {
    let rt = host();
    let store = SharedConstants::new();
    CompiledGraph::compile_shared(&rt, onnx_layer(1, 8, Spelling::default()), options(true), &store)
        .expect("first shape");
    let transposed_weights = |g: &Graph| -> Vec<runtime::graph::HostBytes> {
        g.values
            .iter()
            .filter_map(|v| match &v.kind {
                runtime::graph::ValueKind::Constant(t) if t.bytes.pending() => Some(t.bytes.clone()),
                _ => None,
            })
            .collect()
    };
    let (second, stats) = canonicalize(onnx_layer(2, 16, Spelling::default()), &any_kernel).expect("canonical");
    assert_eq!(stats.linear, 6);
    let kept = transposed_weights(&second);
    assert_eq!(kept.len(), 6, "one transposed weight per Linear, none made yet");
    let served = store.served();
    let compiled = CompiledGraph::compile_shared(&rt, second.clone(), options(true), &store).expect("second shape");
    assert!(store.served() >= served + 6, "the store served the weights");
    assert!(kept.iter().all(|b| b.pending()), "a weight the store held was transposed on the host");
    // The same graph with an empty store reads (so makes) them, and both compute the same.
    let own = CompiledGraph::compile_shared(&rt, second, options(true), &SharedConstants::new()).expect("own");
    assert!(kept.iter().all(|b| !b.pending()), "a compile that uploads the weights made them");
    let ins = layer_inputs(&rt, 2, 16);
    assert_eq!(rel_diff(&run(&compiled, &ins), &run(&own, &ins)), 0.0);
}

// ---- each rewrite, and where it must not fire ----

fn any_kernel(_: &Op, _: &[TensorMeta]) -> Option<String> {
    Some("k".into())
}

fn canon(g: &Graph) -> (Graph, CanonicalStats) {
    g.validate().expect("the test graph is valid");
    let (out, stats) = canonicalize(g.clone(), &any_kernel).expect("canonicalize");
    out.validate().expect("the rewritten graph is valid");
    (out, stats)
}

fn ops(g: &Graph) -> Vec<Op> {
    g.nodes.iter().map(|n| n.op.clone()).collect()
}

fn scalar(g: &mut Graph, name: &str, v: f32) -> ValueId {
    g.constant(name, HostTensor::from_vec(Vec::<usize>::new(), vec![v]).unwrap())
}

#[test]
fn scalar_products_become_scales_where_exact_enough() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]);
    let (c, zero) = (scalar(&mut g, "c", 4.0), scalar(&mut g, "zero", 0.0));
    let pair = g.constant("pair", HostTensor::from_vec([2, 1], vec![1f32, 2.0]).unwrap());
    let a = g.op("a", Op::Div, &[x, c]).unwrap();
    let b = g.op("b", Op::Mul, &[c, a]).unwrap();
    let d = g.op("d", Op::Div, &[b, zero]).unwrap(); // 1/0 is no factor
    let e = g.op("e", Op::Mul, &[d, pair]).unwrap(); // two elements: a broadcast, not a scale
    let f = g.op("f", Op::Div, &[c, e]).unwrap(); // the constant divided: no scale
    g.output(f);
    let (out, stats) = canon(&g);
    assert_eq!(stats.scale, 2);
    assert_eq!(
        ops(&out),
        [Op::Scale { factor: 0.25 }, Op::Scale { factor: 4.0 }, Op::Div, Op::Mul, Op::Div],
        "{}",
        out.dump()
    );
    let mut ints = Graph::new();
    let i = ints.input("i", DType::I32, [2]);
    let two = ints.constant("two", HostTensor::from_vec(Vec::<usize>::new(), vec![2i32]).unwrap());
    let y = ints.op("y", Op::Mul, &[i, two]).unwrap();
    ints.output(y);
    assert_eq!(canon(&ints).1.scale, 0, "integers keep their Mul");
}

/// `q @ Permute(k, [0, 2, 3, 1])` with the permuted key also read by `extra` when given.
fn transposed_key(extra: bool) -> Graph {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [1, 2, 3, 4]);
    let k = g.input("k", DType::F32, [1, 3, 2, 4]);
    let kt = g.op("kt", Op::Permute { perm: vec![0, 2, 3, 1] }, &[k]).unwrap();
    let s = g.op("s", Op::MatMul { trans_a: false, trans_b: false }, &[q, kt]).unwrap();
    g.output(s);
    if extra {
        let t = g.op("t", Op::Tanh, &[kt]).unwrap();
        g.output(t);
    }
    g
}

#[test]
fn a_pretransposed_key_becomes_a_trans_b_product_unless_read_elsewhere() {
    let (out, stats) = canon(&transposed_key(false));
    assert_eq!(stats.matmul_trans_b, 1);
    assert_eq!(ops(&out), [Op::Permute { perm: vec![0, 2, 1, 3] }, Op::MatMul { trans_a: false, trans_b: true }]);
    let (out, stats) = canon(&transposed_key(true));
    assert_eq!(stats.matmul_trans_b, 0);
    assert_eq!(ops(&out), ops(&transposed_key(true)));
    // Same values either way (the reference kernels).
    let rt = host();
    let q = rt.from_slice(&bert_layer::param("q", 24), [1, 2, 3, 4], 0).unwrap();
    let k = rt.from_slice(&bert_layer::param("k", 24), [1, 3, 2, 4], 0).unwrap();
    let g = transposed_key(false);
    let a = CompiledGraph::compile(&rt, &g, options(true)).unwrap().run(&[&q, &k]).unwrap();
    let b = CompiledGraph::compile(&rt, &g, options(false)).unwrap().run(&[&q, &k]).unwrap();
    assert_eq!(values(&a[0]), values(&b[0]));
}

/// The erf GELU of `x` as ONNX spells it; `leak` names an intermediate also returned.
fn spelled_gelu(leak: Option<&str>) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 8]);
    let (sqrt2, one, half) =
        (scalar(&mut g, "sqrt2", 2f32.sqrt()), scalar(&mut g, "one", 1.0), scalar(&mut g, "half", 0.5));
    let d = g.op("div", Op::Div, &[x, sqrt2]).unwrap();
    let e = g.op("erf", Op::Erf, &[d]).unwrap();
    let e1 = g.op("add", Op::Add, &[one, e]).unwrap();
    let hx = g.op("halved", Op::Mul, &[half, x]).unwrap();
    let y = g.op("mul", Op::Mul, &[e1, hx]).unwrap();
    g.output(y);
    let named = [("div", d), ("erf", e), ("add", e1), ("halved", hx)];
    if let Some(v) = named.iter().find(|(n, _)| Some(*n) == leak) {
        g.output(v.1);
    }
    g
}

#[test]
fn the_spelled_out_erf_gelu_becomes_gelu_unless_a_part_is_read_elsewhere() {
    let (out, stats) = canon(&spelled_gelu(None));
    assert_eq!(stats.gelu, 1);
    assert_eq!(ops(&out), [Op::Gelu(GeluApprox::Erf)]);
    for leak in ["div", "erf", "add", "halved"] {
        let (out, stats) = canon(&spelled_gelu(Some(leak)));
        assert_eq!(stats.gelu, 0, "{leak} is returned too");
        assert!(out.nodes.iter().any(|n| n.op == Op::Erf), "{leak}: {}", out.dump());
    }
    // A factor other than 0.5 is another function.
    let mut other = Graph::new();
    let x = other.input("x", DType::F32, [2, 8]);
    let (sqrt2, one, third) = (
        scalar(&mut other, "sqrt2", 2f32.sqrt()),
        scalar(&mut other, "one", 1.0),
        scalar(&mut other, "third", 1.0 / 3.0),
    );
    let d = other.op("div", Op::Div, &[x, sqrt2]).unwrap();
    let e = other.op("erf", Op::Erf, &[d]).unwrap();
    let e1 = other.op("add", Op::Add, &[e, one]).unwrap();
    let t = other.op("mul", Op::Mul, &[x, e1]).unwrap();
    let y = other.op("thirds", Op::Mul, &[t, third]).unwrap();
    other.output(y);
    assert_eq!(canon(&other).1.gelu, 0);
}

/// `Add(MatMul(x, W), b)`; `extra` also reads the product, `shared` reads `W` in a second
/// product.
fn biased_product(extra: bool, shared: bool) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3, 4]);
    let w = g.constant("w", HostTensor::from_vec([4, 5], (0..20).map(|i| i as f32).collect()).unwrap());
    let b = g.constant("b", HostTensor::from_vec([5], vec![0.5f32; 5]).unwrap());
    let mm = g.op("mm", Op::MatMul { trans_a: false, trans_b: false }, &[x, w]).unwrap();
    let y = g.op("add", Op::Add, &[b, mm]).unwrap();
    g.output(y);
    if extra {
        let t = g.op("t", Op::Tanh, &[mm]).unwrap();
        g.output(t);
    }
    if shared {
        let z = g.op("mm2", Op::MatMul { trans_a: false, trans_b: false }, &[x, w]).unwrap();
        g.output(z);
    }
    g
}

#[test]
fn a_product_by_a_constant_becomes_linear_with_its_bias_when_alone() {
    let (out, stats) = canon(&biased_product(false, false));
    assert_eq!((stats.linear, stats.linear_bias), (1, 1));
    assert_eq!(ops(&out), [Op::Linear]);
    let w = out.nodes[0].inputs[1];
    assert_eq!(out.meta(w).shape.dims(), [5, 4], "the weight is held as [N, K]");
    assert_eq!(out.values.iter().filter(|v| v.name == "w").count(), 1, "and only so");
    // The product read elsewhere too: a Linear without the bias, the Add stays.
    let (out, stats) = canon(&biased_product(true, false));
    assert_eq!((stats.linear, stats.linear_bias), (1, 0));
    assert_eq!(ops(&out), [Op::Linear, Op::Add, Op::Tanh]);
    // The weight read by a second product: nothing is transposed.
    let (out, stats) = canon(&biased_product(false, true));
    assert_eq!(stats.linear, 0);
    assert_eq!(ops(&out), ops(&biased_product(false, true)));
    // Same values as the unfused graph.
    let rt = host();
    let x = rt.from_slice(&bert_layer::param("x", 12), [3, 4], 0).unwrap();
    for g in [biased_product(false, false), biased_product(true, false)] {
        let a = CompiledGraph::compile(&rt, &g, options(true)).unwrap().run(&[&x]).unwrap();
        let b = CompiledGraph::compile(&rt, &g, options(false)).unwrap().run(&[&x]).unwrap();
        for (a, b) in a.iter().zip(&b) {
            assert!(rel_diff(a, b) <= 1e-6, "{}", g.dump());
        }
    }
}

/// `Reshape(x, [6, 4])` → `Gemm(·, W, b)` → `Reshape(·, [2, 3, 5])`, W `[4, 5]` (or `[5, 4]`
/// with `trans_b`); `leak` returns the flattened input too, `alpha` scales the product.
fn flattened_gemm(trans_b: bool, leak: bool, alpha: f32) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3, 4]);
    let dims = if trans_b { [5, 4] } else { [4, 5] };
    let w = g.constant("w", HostTensor::from_vec(dims, bert_layer::param("w", 20)).unwrap());
    let b = g.constant("b", HostTensor::from_vec([5], bert_layer::param("b", 5)).unwrap());
    let flat = g.op("flat", Op::Reshape { shape: vec![6, 4] }, &[x]).unwrap();
    let y = g.op("gemm", Op::Gemm { trans_a: false, trans_b, alpha, beta: 1.0 }, &[flat, w, b]).unwrap();
    let y = g.op("back", Op::Reshape { shape: vec![2, 3, 5] }, &[y]).unwrap();
    g.output(y);
    if leak {
        g.output(flat);
    }
    g
}

#[test]
fn a_gemm_by_a_constant_becomes_linear_and_takes_its_reshapes_when_alone() {
    let (out, stats) = canon(&flattened_gemm(false, false, 1.0));
    assert_eq!((stats.linear, stats.linear_bias, stats.gemm, stats.gemm_reshapes), (1, 1, 1, 1));
    assert_eq!(ops(&out), [Op::Linear]);
    assert_eq!(out.meta(out.nodes[0].inputs[0]).shape.dims(), [2, 3, 4], "the Linear reads x itself");
    assert_eq!(out.meta(out.nodes[0].inputs[1]).shape.dims(), [5, 4]);
    assert_eq!(out.value(out.outputs[0]).name, "back", "the output keeps its name");
    // trans_b: the weight is already [N, K] and stays as it is.
    let (out, stats) = canon(&flattened_gemm(true, false, 1.0));
    assert_eq!((stats.gemm, stats.gemm_reshapes), (1, 1));
    assert_eq!(out.values[out.nodes[0].inputs[1].0].kind, flattened_gemm(true, false, 1.0).values[1].kind);
    // The flattened input read elsewhere: a 2-D Linear between the reshapes.
    let (out, stats) = canon(&flattened_gemm(false, true, 1.0));
    assert_eq!((stats.gemm, stats.gemm_reshapes), (1, 0));
    assert_eq!(ops(&out), [Op::Reshape { shape: vec![6, 4] }, Op::Linear, Op::Reshape { shape: vec![2, 3, 5] }]);
    // A reshape after the product that does not split its rows: a 2-D Linear between them.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3, 4]);
    let w = g.constant("w", HostTensor::from_vec([4, 5], bert_layer::param("w", 20)).unwrap());
    let flat = g.op("flat", Op::Reshape { shape: vec![6, 4] }, &[x]).unwrap();
    let y = g.op("gemm", Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 1.0 }, &[flat, w]).unwrap();
    let y = g.op("back", Op::Reshape { shape: vec![3, 10] }, &[y]).unwrap();
    g.output(y);
    let (out, stats) = canon(&g);
    assert_eq!((stats.gemm, stats.gemm_reshapes, stats.linear_bias), (1, 0, 0));
    assert_eq!(ops(&out), [Op::Reshape { shape: vec![6, 4] }, Op::Linear, Op::Reshape { shape: vec![3, 10] }]);
    // alpha ≠ 1 is not a Linear.
    let (out, stats) = canon(&flattened_gemm(false, false, 2.0));
    assert_eq!(stats.linear, 0);
    assert_eq!(ops(&out), ops(&flattened_gemm(false, false, 2.0)));
    // Same values as the unfused graphs.
    let rt = host();
    let x = rt.from_slice(&bert_layer::param("x", 24), [2, 3, 4], 0).unwrap();
    for g in [flattened_gemm(false, false, 1.0), flattened_gemm(true, false, 1.0), flattened_gemm(false, true, 1.0)] {
        let a = CompiledGraph::compile(&rt, &g, options(true)).unwrap().run(&[&x]).unwrap();
        let b = CompiledGraph::compile(&rt, &g, options(false)).unwrap().run(&[&x]).unwrap();
        for (a, b) in a.iter().zip(&b) {
            assert!(rel_diff(a, b) <= 1e-6, "{}", g.dump());
        }
    }
}

#[test]
fn f16_graphs_take_the_same_rewrites() {
    // An f16 projection with bias, scaled by Div, through the spelled-out GELU: the 2-byte
    // weight transposed, the factors read from f16 constants; within f16 rounding of the
    // unfused graph.
    let h = |v: f32| half::f16::from_f32(v);
    let f16s = |v: Vec<f32>| v.into_iter().map(h).collect::<Vec<half::f16>>();
    let mut g = Graph::new();
    let x = g.input("x", DType::F16, [2, 3, 8]);
    let w = g.constant("w", HostTensor::from_vec([8, 6], f16s(bert_layer::param("w", 48))).unwrap());
    let b = g.constant("b", HostTensor::from_vec([6], f16s(bert_layer::param("b", 6))).unwrap());
    let c = |g: &mut Graph, name: &str, v: f32| {
        g.constant(name, HostTensor::from_vec(Vec::<usize>::new(), vec![h(v)]).unwrap())
    };
    let (four, sqrt2, one, half) =
        (c(&mut g, "four", 0.25), c(&mut g, "sqrt2", 2f32.sqrt()), c(&mut g, "one", 1.0), c(&mut g, "half", 0.5));
    let mm = g.op("mm", Op::MatMul { trans_a: false, trans_b: false }, &[x, w]).unwrap();
    let y = g.op("add", Op::Add, &[mm, b]).unwrap();
    let y = g.op("div", Op::Div, &[y, four]).unwrap();
    let d = g.op("gdiv", Op::Div, &[y, sqrt2]).unwrap();
    let e = g.op("erf", Op::Erf, &[d]).unwrap();
    let e = g.op("gadd", Op::Add, &[e, one]).unwrap();
    let t = g.op("gmul", Op::Mul, &[y, e]).unwrap();
    let out = g.op("ghalf", Op::Mul, &[t, half]).unwrap();
    g.output(out);
    let (canonical, stats) = canon(&g);
    assert_eq!((stats.scale, stats.linear_bias, stats.gelu), (3, 1, 1), "{}", canonical.dump());
    assert_eq!(ops(&canonical), [Op::Linear, Op::Scale { factor: 4.0 }, Op::Gelu(GeluApprox::Erf)]);
    let rt = host();
    let xs = rt.from_slice(&f16s(bert_layer::param("x", 48).iter().map(|v| v * 10.0).collect()), [2, 3, 8], 0).unwrap();
    let run = |fuse: bool| -> Vec<f32> {
        let out = CompiledGraph::compile(&rt, &g, options(fuse)).unwrap().run(&[&xs]).unwrap().remove(0);
        out.to_ndarray::<half::f16>().unwrap().iter().map(|v| v.to_f32()).collect()
    };
    let (fused, unfused) = (run(true), run(false));
    for (a, b) in fused.iter().zip(&unfused) {
        assert!((a - b).abs() <= 2e-3 * b.abs().max(1.0), "fused {a} against unfused {b}");
    }
}
