//! Compiled graphs: fused / parallel / planned execution equals eager op-by-op execution;
//! the arena never lets two live tensors share bytes; BERT graphs build, compile and run.

mod common;

use common::{bert_inputs, cosine};

use npurt::models::bert::{self, BertConfig, Weights};
use npurt::{DType, Op, Precision, RuntimeConfig, Scheduling, Tensor};
use runtime::Runtime;
use runtime::graph::{
    CompileOptions, CompiledGraph, Graph, HostTensor, ScheduleStrategy, SharedConstants, ValueId, ValueKind,
};
use std::collections::HashMap;

/// Runs every node with the eager API, in graph order.
fn eager(rt: &Runtime, g: &Graph, inputs: &[&Tensor]) -> Vec<Tensor> {
    let mut vals: HashMap<ValueId, Tensor> = HashMap::new();
    for (id, t) in g.inputs.iter().zip(inputs) {
        vals.insert(*id, (*t).clone());
    }
    for (i, v) in g.values.iter().enumerate() {
        if let ValueKind::Constant(c) = &v.kind {
            let t = rt.empty(c.dtype, c.shape.clone(), 0).unwrap();
            t.copy_from_bytes(&c.bytes).unwrap();
            vals.insert(ValueId(i), t);
        }
    }
    for n in &g.nodes {
        let ins: Vec<&Tensor> = n.inputs.iter().map(|v| &vals[v]).collect();
        let outs = rt.run(&n.op, &ins).unwrap();
        for (o, t) in n.outputs.iter().zip(outs) {
            vals.insert(*o, t);
        }
    }
    g.outputs.iter().map(|o| vals[o].clone()).collect()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let (x, y) = (a.to_ndarray::<f32>().unwrap(), b.to_ndarray::<f32>().unwrap());
    assert_eq!(x.shape(), y.shape());
    x.iter().zip(y.iter()).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max)
}

fn options(fuse: bool, reuse: bool, parallel: bool, strategy: ScheduleStrategy) -> CompileOptions {
    CompileOptions {
        device: 0,
        fuse,
        memory_reuse: reuse,
        parallel,
        strategy,
        max_streams: 4,
        precision: Precision::F32,
        max_arenas: runtime::graph::DEFAULT_MAX_ARENAS,
        deny_host_tier: false,
        graph_capture: runtime::GraphCapture::Auto,
        store_slow_precision: false,
    }
}

on_every_backend!(tiny_bert_graph_equals_eager, |b| {
    let rt = common::runtime(&b);
    let cfg = BertConfig::tiny();
    let bg = bert::build(&cfg, Weights::Random(3), 2, 16).unwrap();
    let ins = bert_inputs(&rt, 2, 16, cfg.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let want = eager(&rt, &bg.graph, &refs);
    for (fuse, reuse, parallel, strategy) in [
        (false, false, false, ScheduleStrategy::Throughput),
        (false, true, false, ScheduleStrategy::Throughput),
        (true, true, false, ScheduleStrategy::Throughput),
        (true, true, true, ScheduleStrategy::Latency),
        (false, true, true, ScheduleStrategy::Balanced),
    ] {
        let cg = CompiledGraph::compile(&rt, &bg.graph, options(fuse, reuse, parallel, strategy)).unwrap();
        assert_eq!(cg.runs_frozen(), reuse, "fuse={fuse} reuse={reuse} parallel={parallel}");
        if fuse {
            let f = cg.fusion_stats();
            // Every match fuses, except where the backend's device model says the fused
            // form is slower (Ascend: docs/ASCEND.md, "The mapping follows the modelled cost").
            assert_eq!(f.attention + f.attention_declined, cfg.num_hidden_layers, "{f:?}");
            assert_eq!(f.add_layer_norm + f.add_layer_norm_declined, 2 * cfg.num_hidden_layers, "{f:?}");
            assert_eq!(f.bias_gelu + f.bias_gelu_declined, cfg.num_hidden_layers, "{f:?}");
            if b.name() != "acl" {
                assert_eq!(f.attention_declined + f.add_layer_norm_declined + f.bias_gelu_declined, 0, "{f:?}");
            }
            // The head split/merge permutes fold into the tokens-first layout where the
            // device runs it on its Attention kernel (the CPU does; CUDA and the aclnn
            // compositions keep the permutes), and all of them or none.
            let permutes = cg.graph().nodes.iter().filter(|n| matches!(n.op, Op::Permute { .. })).count();
            let layers = cfg.num_hidden_layers;
            assert!(f.attention_permutes_folded == 0 || f.attention_permutes_folded == layers, "{f:?}");
            assert_eq!(permutes, 4 * (layers - f.attention_permutes_folded), "{f:?}");
            if b.name() == "cpu" {
                assert_eq!(f.attention_permutes_folded, layers, "{f:?}");
            }
        }
        if parallel && strategy == ScheduleStrategy::Latency {
            assert!(cg.schedule().streams > 1, "Q/K/V projections are independent");
        }
        for poisoned in [false, true] {
            let got = if poisoned { cg.run_poisoned(&refs).unwrap() } else { cg.run(&refs).unwrap() };
            let d = max_diff(&got[0], &want[0]);
            assert!(d < 1e-4, "fuse={fuse} reuse={reuse} parallel={parallel}: max diff {d}");
        }
    }
});

on_every_backend!(arena_plans_are_tight_and_hazard_free, |b| {
    let rt = common::runtime(&b);
    // A chain: ratio exactly 1.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [64, 64]);
    let mut v = x;
    for i in 0..10 {
        let op = if i % 2 == 0 { Op::Relu } else { Op::Scale { factor: 0.5 } };
        v = g.op(&format!("n{i}"), op, &[v]).unwrap();
    }
    g.output(v);
    let cg = CompiledGraph::compile(&rt, &g, options(false, true, false, ScheduleStrategy::Throughput)).unwrap();
    let p = cg.memory_plan().unwrap();
    assert_eq!(p.ratio(), 1.0, "chain plan {p:?}");
    // Poisoned memory: a graph whose intermediates would be corrupted by any overlap. Run
    // it after filling the arena with NaN; results must match eager.
    let g = npurt_test_support::graphs::live_chain(32, 12, (0..1024).map(|i| (i % 7) as f32 * 0.1).collect());
    let input = rt.from_slice(&(0..1024).map(|i| (i % 13) as f32 * 0.05).collect::<Vec<_>>(), [32, 32], 0).unwrap();
    let want = eager(&rt, &g, &[&input]);
    for parallel in [false, true] {
        let cg = CompiledGraph::compile(&rt, &g, options(false, true, parallel, ScheduleStrategy::Latency)).unwrap();
        let p = cg.memory_plan().unwrap();
        assert!(p.arena_bytes >= p.load_bytes);
        // Poison the arena: a run on NaN input leaves NaN in every slot it writes, so any
        // slot shared by two live tensors would corrupt the next run's result.
        let nan = rt.from_slice(&vec![f32::NAN; 1024], [32, 32], 0).unwrap();
        let _ = cg.run(&[&nan]).unwrap(); // leaves NaN in every arena slot it touched
        let got = cg.run(&[&input]).unwrap();
        assert!(max_diff(&got[0], &want[0]) < 1e-4, "parallel={parallel}");
        // And with every dead intermediate poisoned right after its last reader.
        let got = cg.run_poisoned(&[&input]).unwrap();
        assert!(max_diff(&got[0], &want[0]) < 1e-4, "poisoned, parallel={parallel}");
    }
});

on_every_backend!(repeated_runs_patch_inputs_and_outputs, |b| {
    let rt = common::runtime(&b);
    // Two inputs, independent branches joined at the end; `a` is both an output and read
    // by later nodes, `y` is returned as is, `y` and `a` are read through reshapes (views),
    // and a constant feeds a MatMul.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [8, 8]);
    let y = g.input("y", DType::F32, [8, 8]);
    let w =
        g.constant("w", HostTensor::from_vec([8, 8], (0..64).map(|i| (i % 5) as f32 * 0.1 - 0.2).collect()).unwrap());
    let a = g.op("a", Op::Relu, &[x]).unwrap();
    let a2 = g.op("a2", Op::Scale { factor: 0.5 }, &[a]).unwrap();
    let a3 = g.op("a3", Op::MatMul { trans_a: false, trans_b: false }, &[a2, w]).unwrap();
    let yr = g.op("yr", Op::Reshape { shape: vec![64] }, &[y]).unwrap();
    let b1 = g.op("b1", Op::Tanh, &[yr]).unwrap();
    let b2 = g.op("b2", Op::Reshape { shape: vec![8, 8] }, &[b1]).unwrap();
    let b3 = g.op("b3", Op::MatMul { trans_a: false, trans_b: true }, &[b2, w]).unwrap();
    let ar = g.op("ar", Op::Reshape { shape: vec![64] }, &[a]).unwrap();
    let ar2 = g.op("ar2", Op::Scale { factor: 2.0 }, &[ar]).unwrap();
    let ar3 = g.op("ar3", Op::Reshape { shape: vec![8, 8] }, &[ar2]).unwrap();
    let s = g.op("s", Op::Add, &[a3, b3]).unwrap();
    let t = g.op("t", Op::Add, &[s, ar3]).unwrap();
    g.output(t);
    g.output(a);
    g.output(y);
    g.output(b3);
    let input = |seed: usize| {
        let v: Vec<f32> = (0..64).map(|i| (((i * 37 + seed * 11) % 23) as f32 - 11.0) * 0.07).collect();
        rt.from_slice(&v, [8, 8], 0).unwrap()
    };
    for (parallel, max_streams) in [(false, 4), (true, 2)] {
        let opts = CompileOptions { max_streams, ..options(false, true, parallel, ScheduleStrategy::Latency) };
        let cg = CompiledGraph::compile(&rt, &g, opts).unwrap();
        assert!(cg.runs_frozen(), "every node of this graph can be frozen");
        if parallel {
            assert!(cg.schedule().streams > 1, "the branches are independent");
        }
        let mut kept = Vec::new();
        for run in 0..6 {
            let (xi, yi) = (input(2 * run), input(2 * run + 1));
            let want = eager(&rt, &g, &[&xi, &yi]);
            let got = cg.run(&[&xi, &yi]).unwrap();
            assert_eq!(got.len(), want.len());
            for (k, (w, o)) in want.iter().zip(&got).enumerate() {
                assert!(max_diff(w, o) < 1e-5, "parallel={parallel} run {run} output {k}");
            }
            assert!(got[2].shares_storage(&yi), "an input returned as an output is the input itself");
            kept.push((want, got));
        }
        // Outputs are fresh on every run: earlier results are not overwritten later.
        for (run, (want, got)) in kept.iter().enumerate() {
            for (k, (w, o)) in want.iter().zip(got).enumerate() {
                assert!(max_diff(w, o) < 1e-5, "parallel={parallel} run {run} output {k} changed later");
            }
        }
        // A strided input takes the node-by-node path and gives the same result.
        let (xi, yi) = (input(40), input(41));
        let xt = xi.transpose(0, 1).unwrap();
        let want = eager(&rt, &g, &[&xt, &yi]);
        let got = cg.run(&[&xt, &yi]).unwrap();
        for (w, o) in want.iter().zip(&got) {
            assert!(max_diff(w, o) < 1e-5, "parallel={parallel} strided input");
        }
        // Bad inputs are errors, not panics.
        let wrong = rt.zeros(DType::F32, [4, 16], 0).unwrap();
        assert!(cg.run(&[&wrong, &yi]).is_err());
        assert!(cg.run(&[&xi]).is_err());
    }
});

on_every_backend!(scheduler_random_dags_match_sequential, |b| {
    let rt = common::runtime(&b);
    let mut seed = 0x5eedu64;
    let mut rnd = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for trial in 0..6 {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [16, 16]);
        let mut vals = vec![x];
        for i in 0..20 {
            let a = vals[rnd(vals.len())];
            let v = match rnd(4) {
                0 => g.op(&format!("r{i}"), Op::Relu, &[a]).unwrap(),
                1 => g.op(&format!("s{i}"), Op::Scale { factor: 0.7 }, &[a]).unwrap(),
                2 => {
                    let c = vals[rnd(vals.len())];
                    g.op(&format!("a{i}"), Op::Add, &[a, c]).unwrap()
                }
                _ => {
                    let c = vals[rnd(vals.len())];
                    g.op(&format!("m{i}"), Op::MatMul { trans_a: false, trans_b: true }, &[a, c]).unwrap()
                }
            };
            vals.push(v);
        }
        g.output(*vals.last().unwrap());
        g.output(vals[vals.len() / 2]);
        let input = rt
            .from_slice(&(0..256).map(|i| ((i * 31) % 17) as f32 * 0.01 - 0.08).collect::<Vec<_>>(), [16, 16], 0)
            .unwrap();
        let seq = CompiledGraph::compile(&rt, &g, options(false, true, false, ScheduleStrategy::Throughput)).unwrap();
        let want = seq.run(&[&input]).unwrap();
        for strategy in [ScheduleStrategy::Latency, ScheduleStrategy::Balanced] {
            let par = CompiledGraph::compile(&rt, &g, options(false, true, true, strategy)).unwrap();
            // Stream-aware hazards: shared bytes only across happens-before.
            let got = par.run(&[&input]).unwrap();
            for (w, o) in want.iter().zip(&got) {
                assert!(max_diff(w, o) < 1e-4, "trial {trial} {strategy:?}");
            }
        }
    }
});

#[test]
fn bert_base_compiles_and_runs() {
    let cfg = RuntimeConfig { scheduling: Scheduling::Latency, ..RuntimeConfig::default() };
    let rt = npurt::Runtime::with_config(cfg.clone()).unwrap();
    let bc = BertConfig::bert_base();
    let bg = bert::build(&bc, Weights::Random(1), 1, 32).unwrap();
    let cg = CompiledGraph::compile(&rt, &bg.graph, CompileOptions::from_config(&cfg, 0)).unwrap();
    let p = cg.memory_plan().unwrap();
    assert!(p.ratio() <= 1.05, "BERT-base plan ratio {}", p.ratio());
    let ins = bert_inputs(&rt, 1, 32, bc.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let (out, prof) = cg.run_profiled(&refs).unwrap();
    assert_eq!(out[0].dims(), &[1, 32, 768]);
    let v = out[0].to_ndarray::<f32>().unwrap();
    assert!(v.iter().all(|x| x.is_finite()));
    assert_eq!(prof.nodes.len() + cg.view_nodes(), cg.graph().nodes.len());
    assert!(cg.view_nodes() > 0, "reshapes become views");
    let trace = prof.chrome_trace();
    let parsed: serde_json::Value = serde_json::from_str(&trace).expect("valid Chrome-trace JSON");
    assert!(parsed["traceEvents"].as_array().unwrap().len() > prof.nodes.len());
}

/// Cosine similarity of two f32 tensors' values.
/// Precision bf16: Linear weights become bf16 and run on the bf16 unit where the CPU has
/// one (weights packed once at compile time); elsewhere they stay f32. Either way the
/// output stays close to f32's.
#[test]
fn bf16_precision_stays_close_to_f32() {
    let rt =
        npurt::Runtime::with_config(RuntimeConfig { backend: Some("cpu".into()), ..RuntimeConfig::default() }).unwrap();
    let cfg = BertConfig::tiny();
    let bg = bert::build(&cfg, Weights::Random(5), 2, 16).unwrap();
    let ins = bert_inputs(&rt, 2, 16, cfg.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let f32_opts = options(true, true, true, ScheduleStrategy::Latency);
    let want = CompiledGraph::compile(&rt, &bg.graph, f32_opts.clone()).unwrap().run(&refs).unwrap();
    let cg = CompiledGraph::compile(&rt, &bg.graph, CompileOptions { precision: Precision::Bf16, ..f32_opts }).unwrap();
    let (got, prof) = cg.run_profiled(&refs).unwrap();
    let linear_units: Vec<&str> = prof.nodes.iter().filter(|n| n.op == "Linear").map(|n| n.unit.label).collect();
    let bf16_weights = cg
        .graph()
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Linear) && cg.graph().meta(n.inputs[1]).dtype == DType::BF16)
        .count();
    if backend_cpu::kernels::gemm_bf16::available() {
        let unit = backend_cpu::features::get().bf16_unit().label;
        println!("bf16 unit on this CPU: {unit}");
        assert!(!linear_units.is_empty() && linear_units.iter().all(|u| *u == unit), "{linear_units:?}");
        assert_eq!(bf16_weights, linear_units.len());
        // The erf GELU after each feed-forward product runs in that product's epilogue.
        let fused: Vec<&str> = prof.nodes.iter().filter(|n| n.op == "LinearGelu").map(|n| n.unit.label).collect();
        assert_eq!(fused.len(), cfg.num_hidden_layers, "{fused:?}");
        assert!(fused.iter().all(|u| *u == unit), "{fused:?}");
    } else {
        println!("this CPU has no AVX-512-BF16: checking that the weights stay f32");
        assert_eq!(bf16_weights, 0);
    }
    let cos = cosine(&want[0], &got[0]);
    let d = max_diff(&want[0], &got[0]);
    assert!(cos > 0.999 && d < 0.1, "bf16 vs f32: cosine {cos}, max diff {d}");
}

/// Precision bf16 with `store_slow_precision` (what the LLM engine asks for): every Linear
/// weight is stored in bf16 whether or not the CPU has a bf16 unit (without one, each
/// product widens it to f32: the decode-step rows through `gemv`, more rows a block of
/// columns at a time), and the output stays close to f32's at both sizes.
#[test]
fn bf16_weights_asked_for_are_stored_on_any_cpu() {
    let rt =
        npurt::Runtime::with_config(RuntimeConfig { backend: Some("cpu".into()), ..RuntimeConfig::default() }).unwrap();
    let cfg = BertConfig::tiny();
    // 1 × 4 rows: a decode step's size; 2 × 16: past it.
    for (batch, seq) in [(1, 4), (2, 16)] {
        let bg = bert::build(&cfg, Weights::Random(5), batch, seq).unwrap();
        let ins = bert_inputs(&rt, batch, seq, cfg.vocab_size);
        let refs: Vec<&Tensor> = ins.iter().collect();
        let f32_opts = options(true, true, true, ScheduleStrategy::Latency);
        let want = CompiledGraph::compile(&rt, &bg.graph, f32_opts.clone()).unwrap().run(&refs).unwrap();
        let bf16 = CompileOptions { precision: Precision::Bf16, store_slow_precision: true, ..f32_opts };
        let cg = CompiledGraph::compile(&rt, &bg.graph, bf16).unwrap();
        let products: Vec<DType> = cg
            .graph()
            .nodes
            .iter()
            .filter(|n| matches!(n.op, Op::Linear | Op::LinearGelu))
            .map(|n| cg.graph().meta(n.inputs[1]).dtype)
            .collect();
        assert!(!products.is_empty() && products.iter().all(|d| *d == DType::BF16), "{batch}x{seq}: {products:?}");
        let got = cg.run(&refs).unwrap();
        let (cos, d) = (cosine(&want[0], &got[0]), max_diff(&want[0], &got[0]));
        assert!(cos > 0.999 && d < 0.1, "{batch}x{seq}: bf16 weights vs f32: cosine {cos}, max diff {d}");
    }
}

/// Precision bf16 with an output projection tied to the embedding table (one constant read
/// by a Gather and, as its weight, by a Linear): where the CPU has a bf16 unit the table is
/// stored once in bf16, the gathered rows are cast back to f32 for the rest of the graph,
/// and the logits stay close to f32's; elsewhere the table stays f32.
#[test]
fn bf16_precision_stores_a_tied_table_once() {
    let rt =
        npurt::Runtime::with_config(RuntimeConfig { backend: Some("cpu".into()), ..RuntimeConfig::default() }).unwrap();
    let (vocab, hidden, rows) = (40usize, 64usize, 5usize);
    let mut g = Graph::new();
    let ids = g.input("ids", DType::I64, [rows]);
    let table: Vec<f32> = (0..vocab * hidden).map(|i| ((i * 37 % 101) as f32 - 50.0) / 60.0).collect();
    let t = g.constant("embed", HostTensor::from_vec([vocab, hidden], table).unwrap());
    let x = g.op("embed_tokens", Op::Gather { axis: 0 }, &[t, ids]).unwrap();
    let x = g.op("act", Op::Silu, &[x]).unwrap();
    let logits = g.op("lm_head", Op::Linear, &[x, t]).unwrap();
    g.output(logits);
    let id_vals: Vec<i64> = vec![3, 0, 39, 17, 3];
    let ids_t = rt.empty(DType::I64, [rows], 0).unwrap();
    ids_t.copy_from_bytes(bytemuck::cast_slice(&id_vals)).unwrap();
    let f32_opts = options(true, true, false, ScheduleStrategy::Latency);
    let want = CompiledGraph::compile(&rt, &g, f32_opts.clone()).unwrap().run(&[&ids_t]).unwrap();
    let cg = CompiledGraph::compile(&rt, &g, CompileOptions { precision: Precision::Bf16, ..f32_opts }).unwrap();
    let got = cg.run(&[&ids_t]).unwrap();
    let cgraph = cg.graph();
    let lm_head = cgraph.nodes.iter().find(|n| n.name == "lm_head").unwrap();
    let casts = cgraph.nodes.iter().filter(|n| n.op == (Op::Cast { to: DType::F32 })).count();
    if backend_cpu::kernels::gemm_bf16::available() {
        assert_eq!(cgraph.meta(lm_head.inputs[1]).dtype, DType::BF16, "the tied table is stored in bf16");
        let gather = cgraph.nodes.iter().find(|n| n.name == "embed_tokens").unwrap();
        assert_eq!(gather.inputs[0], lm_head.inputs[1], "one table, read by both");
        assert_eq!(cgraph.meta(gather.outputs[0]).dtype, DType::BF16);
        assert_eq!(casts, 1, "the gathered rows are cast back to f32 once");
    } else {
        println!("this CPU has no AVX-512-BF16: checking that the table stays f32");
        assert_eq!(cgraph.meta(lm_head.inputs[1]).dtype, DType::F32);
        assert_eq!(casts, 0);
    }
    let cos = cosine(&want[0], &got[0]);
    let d = max_diff(&want[0], &got[0]);
    assert!(cos > 0.999 && d < 0.2, "bf16 vs f32: cosine {cos}, max diff {d}");
}

// Precision f16: Linear weights stored in fp16 where the backend runs an fp16 weight above
// its reference tier (every Linear on the CPU, and on Ascend through aclnn casts and an
// fp16 product on the Cube); the output stays within fp16's tolerance
// of f32's. `Auto` compiles as the device's own precision (f16 on Ascend, else f32).
on_every_backend!(f16_precision_stays_close_to_f32, |b| {
    let rt = common::runtime(&b);
    let cfg = BertConfig::tiny();
    let bg = bert::build(&cfg, Weights::Random(7), 2, 16).unwrap();
    let ins = bert_inputs(&rt, 2, 16, cfg.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let f32_opts = options(true, true, true, ScheduleStrategy::Latency);
    let auto =
        CompiledGraph::compile(&rt, &bg.graph, CompileOptions { precision: Precision::Auto, ..f32_opts.clone() })
            .unwrap();
    let native = if b.name() == "acl" { Precision::F16 } else { Precision::F32 };
    assert_eq!(auto.options().precision, native, "auto on {}", b.name());
    let want = CompiledGraph::compile(&rt, &bg.graph, f32_opts.clone()).unwrap().run(&refs).unwrap();
    let cg = CompiledGraph::compile(&rt, &bg.graph, CompileOptions { precision: Precision::F16, ..f32_opts }).unwrap();
    let linears = cg.graph().nodes.iter().filter(|n| matches!(n.op, Op::Linear)).count();
    let f16_weights = cg
        .graph()
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Linear) && cg.graph().meta(n.inputs[1]).dtype == DType::F16)
        .count();
    if matches!(b.name(), "cpu" | "acl") {
        assert!(linears > 0);
        assert_eq!(f16_weights, linears, "every Linear weight is fp16 on {}", b.name());
    }
    println!("{}: {f16_weights} of {linears} Linear weights in fp16", b.name());
    let got = cg.run(&refs).unwrap();
    let cos = cosine(&want[0], &got[0]);
    assert!(cos > 0.999, "f16 vs f32 on {}: cosine {cos}", b.name());
});

// A graph that would put nodes on a device backend's host tier lists them with the reason
// (none on the CPU, whose reference tier is not a host tier); `deny_host_tier` makes that
// an error naming the node.
on_every_backend!(host_tier_nodes_are_listed_and_can_be_refused, |b| {
    let rt = common::runtime(&b);
    let cfg = BertConfig::tiny();
    let bg = bert::build(&cfg, Weights::Random(9), 1, 16).unwrap();
    let opts = options(true, true, false, ScheduleStrategy::Latency);
    let cg = CompiledGraph::compile(&rt, &bg.graph, opts.clone()).unwrap();
    let listed = cg.host_tier().to_vec();
    for h in &listed {
        println!("{}: host tier: {} ({}): {}", b.name(), h.node, h.op, h.reason);
        assert!(cg.graph().nodes.iter().any(|n| n.name == h.node && n.op.name() == h.op), "{h:?}");
        assert!(h.reason.contains(".aclnn") || h.reason.contains("no other kernel"), "{h:?}");
    }
    match b.name() {
        "cpu" => assert!(listed.is_empty(), "{listed:?}"),
        // These tests run the 910 with exact f32 products (NPURT_ACL_FP32_MATMUL=exact), which
        // its Cube cannot compute: f32 Attention and MatMul go to the host.
        "acl" => assert!(listed.iter().any(|h| h.op == "Attention"), "{listed:?}"),
        _ => {}
    }
    let denied = CompiledGraph::compile(&rt, &bg.graph, CompileOptions { deny_host_tier: true, ..opts });
    match (listed.first(), denied) {
        (None, Ok(_)) => {}
        (Some(h), Err(e)) => assert!(e.to_string().contains(&format!("{:?}", h.node)), "{e}"),
        (first, other) => panic!("listed {first:?}, deny_host_tier gave {:?}", other.err()),
    }
});

#[test]
fn graph_errors_name_the_node() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]);
    let e = g.op("proj", Op::MatMul { trans_a: false, trans_b: false }, &[x, x]).unwrap_err();
    assert!(e.to_string().contains("node \"proj\""), "{e}");
    let g2 = Graph::new();
    assert!(g2.validate().is_err(), "a graph without outputs is rejected");
}

// Linear weights the CPU backend stores packed at compile time: a weight read by one
// Linear only is rewritten in place; one shared by two Linears, or also read by another op,
// keeps its layout. Every case must equal eager execution.
on_every_backend!(packed_linear_weights_match_eager, |b| {
    let rt = common::runtime(&b);
    let vals = |len: usize, seed: usize| -> Vec<f32> {
        (0..len).map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0).collect()
    };
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [130, 96]);
    let w1 = g.constant("w1", HostTensor::from_vec([64, 96], vals(64 * 96, 1)).unwrap());
    let b1 = g.constant("b1", HostTensor::from_vec([64], vals(64, 2)).unwrap());
    let w2 = g.constant("w2", HostTensor::from_vec([64, 64], vals(64 * 64, 3)).unwrap());
    let w3 = g.constant("w3", HostTensor::from_vec([32, 64], vals(32 * 64, 4)).unwrap());
    let h = g.op("fc1", Op::Linear, &[x, w1, b1]).unwrap();
    let h = g.op("act", Op::Tanh, &[h]).unwrap();
    let h2 = g.op("fc2a", Op::Linear, &[h, w2]).unwrap();
    let h2 = g.op("fc2b", Op::Linear, &[h2, w2]).unwrap();
    let y = g.op("fc3", Op::Linear, &[h2, w3]).unwrap();
    let w3x2 = g.op("w3x2", Op::Add, &[w3, w3]).unwrap();
    g.output(y);
    g.output(w3x2);
    let input = rt.from_slice(&vals(130 * 96, 5), [130, 96], 0).unwrap();
    let want = eager(&rt, &g, &[&input]);
    for (fuse, reuse, parallel) in [(true, true, true), (false, true, false), (true, false, false)] {
        let cg = CompiledGraph::compile(&rt, &g, options(fuse, reuse, parallel, ScheduleStrategy::Latency)).unwrap();
        for _ in 0..2 {
            let got = cg.run(&[&input]).unwrap();
            for (o, (a, b)) in got.iter().zip(&want).enumerate() {
                let d = max_diff(a, b);
                assert!(d <= 1e-3, "fuse={fuse} reuse={reuse} parallel={parallel}: output {o} max diff {d}");
            }
        }
    }
});

on_every_backend!(shared_constants_serve_every_shape_of_a_model, |b| {
    let rt = common::runtime(&b);
    let cfg = BertConfig::tiny();
    let store = SharedConstants::new();
    let opts = || options(true, true, false, ScheduleStrategy::Latency);
    let in_use = || rt.pool_stats(0).unwrap().in_use_bytes;
    let build = |seed: u64, batch: usize, seq: usize| bert::build(&cfg, Weights::Random(seed), batch, seq).unwrap();
    let first = CompiledGraph::compile_shared(&rt, build(3, 1, 8).graph, opts(), &store).unwrap();
    let (held, held_bytes) = (store.len(), store.device_bytes());
    assert!(held > 0 && held_bytes > 0, "the first compile leaves its weights in the store");

    // Another shape of the same weights: no weight uploaded (the store only gains the
    // shape's position ids), and the same results as a graph holding its own weights.
    let before = in_use();
    let second = CompiledGraph::compile_shared(&rt, build(3, 2, 16).graph, opts(), &store).unwrap();
    let grew = in_use() - before;
    assert!(store.len() <= held + 1, "{} constants after {held}", store.len());
    assert!(store.device_bytes() - held_bytes <= 16 * 8, "{} bytes after {held_bytes}", store.device_bytes());
    let arena = second.arena_stats().bytes;
    let new_constants = store.device_bytes() - held_bytes;
    // Pool blocks round each allocation up to 512 bytes at most.
    assert!(
        grew <= arena + new_constants + 2 * 512,
        "a compile sharing the weights allocated {grew} bytes (arena {arena}, weights {held_bytes})"
    );
    let before = in_use();
    let own = CompiledGraph::compile_owned(&rt, build(3, 2, 16).graph, opts()).unwrap();
    assert!(in_use() - before >= held_bytes, "a graph of its own uploads its weights");
    let ins = bert_inputs(&rt, 2, 16, cfg.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    for _ in 0..2 {
        let (got, want) = (second.run(&refs).unwrap(), own.run(&refs).unwrap());
        assert_eq!(max_diff(&got[0], &want[0]), 0.0, "shared weights give the same result");
    }
    let one = bert_inputs(&rt, 1, 8, cfg.vocab_size);
    let one: Vec<&Tensor> = one.iter().collect();
    let want = CompiledGraph::compile_owned(&rt, build(3, 1, 8).graph, opts()).unwrap().run(&one).unwrap();
    assert_eq!(max_diff(&first.run(&one).unwrap()[0], &want[0]), 0.0);

    // Other weights under the same names and shapes are not taken for these.
    let other = CompiledGraph::compile_shared(&rt, build(4, 2, 16).graph, opts(), &store).unwrap();
    assert!(store.len() > held, "weights of another seed are new constants");
    let want = CompiledGraph::compile_owned(&rt, build(4, 2, 16).graph, opts()).unwrap().run(&refs).unwrap();
    assert_eq!(max_diff(&other.run(&refs).unwrap()[0], &want[0]), 0.0);
});

/// On a CPU device of up to `ONE_STREAM_MAX_THREADS` threads the balanced schedule keeps a
/// graph on one stream (every product already spreads over the threads); with more
/// threads, or with the latency strategy, the Q/K/V projections get streams of their own.
#[test]
fn cpu_balanced_schedule_uses_one_stream_on_few_threads() {
    let cfg = BertConfig::tiny();
    let bg = bert::build(&cfg, Weights::Random(3), 1, 16).unwrap();
    let few = backend_cpu::ONE_STREAM_MAX_THREADS;
    for (threads, strategy, one) in [
        (2, ScheduleStrategy::Balanced, true),
        (few, ScheduleStrategy::Balanced, true),
        (few + 1, ScheduleStrategy::Balanced, false),
        (2, ScheduleStrategy::Latency, false),
    ] {
        let c = backend_cpu::CpuConfig { devices: 1, threads: Some(threads), isa: None, pin: Some(false) };
        let b = std::sync::Arc::new(backend_cpu::CpuBackend::new(c).unwrap());
        let rt = Runtime::with_backend(b, RuntimeConfig::default()).unwrap();
        let cg = CompiledGraph::compile(&rt, &bg.graph, options(true, true, true, strategy)).unwrap();
        let streams = cg.schedule().streams;
        assert_eq!(streams == 1, one, "{threads} threads, {strategy:?}: {streams} streams");
    }
}

/// A decode-like graph over a paged KV cache (block size 2, one kv head for two query
/// heads): the caches are graph inputs; node 0 attends the caches as they came in, node 1
/// writes the step's rows in place (KvCacheWrite), node 2 attends the updated caches.
fn paged_decode_graph() -> Graph {
    let mut g = Graph::new();
    let kc = g.input("key_cache", DType::F32, [4, 2, 1, 4]);
    let vc = g.input("value_cache", DType::F32, [4, 2, 1, 4]);
    let k = g.input("key", DType::F32, [2, 1, 4]);
    let v = g.input("value", DType::F32, [2, 1, 4]);
    let slots = g.input("slots", DType::I64, [2]);
    let q = g.input("q", DType::F32, [2, 2, 4]);
    let bt = g.input("block_tables", DType::I32, [2, 2]);
    let lens = g.input("context_lens", DType::I32, [2]);
    let pa = Op::PagedAttention { scale: None };
    let before = g.op("attend_before", pa.clone(), &[q, kc, vc, bt, lens]).unwrap();
    let upd = g.op_multi("write", Op::KvCacheWrite, &[kc, vc, k, v, slots]).unwrap();
    let after = g.op("attend_after", pa, &[q, upd[0], upd[1], bt, lens]).unwrap();
    g.output(before);
    g.output(after);
    g
}

// The decode-like graph, run twice (new slots and lengths each step) on every schedule,
// frozen or node by node: the attention before the write sees the caches as they came
// in, the one after sees the step's rows, and the caller's caches hold both steps' rows.
on_every_backend!(paged_decode_graph_updates_the_caches_in_place, |b| {
    let rt = common::runtime(&b);
    let g = paged_decode_graph();
    for n in &g.nodes {
        let metas: Vec<npurt::TensorMeta> = n.inputs.iter().map(|v| g.meta(*v).clone()).collect();
        if let Err(e @ npurt::Error::NoKernel { .. }) = rt.select_kernel(&n.op, &metas) {
            eprintln!("SKIP paged_decode_graph_updates_the_caches_in_place on {}: {e}", b.name());
            return;
        }
    }
    let f = |s: &[usize], v: Vec<f32>| rt.from_slice(&v, s.to_vec(), 0).unwrap();
    let rows = |step: usize| (0..8).map(|i| (i + 8 * step) as f32 * 0.25 - 1.0).collect::<Vec<f32>>();
    let q = f(&[2, 2, 4], (0..16).map(|i| (i as f32 * 0.37).sin()).collect());
    let bt = rt.from_slice(&[0i32, 1, 2, 3], vec![2, 2], 0).unwrap();
    let strategies = [
        options(true, true, false, ScheduleStrategy::Throughput),
        options(true, false, false, ScheduleStrategy::Throughput),
        options(true, true, true, ScheduleStrategy::Latency),
    ];
    for opts in strategies {
        let cg = CompiledGraph::compile(&rt, &g, opts.clone()).unwrap();
        let (kc, vc) = (f(&[4, 2, 1, 4], vec![0.0; 32]), f(&[4, 2, 1, 4], vec![0.0; 32]));
        // Eager copies of the caches, updated with the same steps.
        let (ek, ev) = (f(&[4, 2, 1, 4], vec![0.0; 32]), f(&[4, 2, 1, 4], vec![0.0; 32]));
        // Step 0: sequence 0 at slot 0 (block 0), sequence 1 at slot 4 (block 2); step 1:
        // the next slot of each, one more position of context.
        for (step, slots, lens) in [(0, [0i64, 4], [1i32, 1]), (1, [1, 5], [2, 2])] {
            let (k, v) = (f(&[2, 1, 4], rows(step)), f(&[2, 1, 4], rows(step).iter().map(|x| -x).collect()));
            let slots = rt.from_slice(&slots, vec![2], 0).unwrap();
            let lens = rt.from_slice(&lens, vec![2], 0).unwrap();
            let pa = Op::PagedAttention { scale: None };
            let want_before = rt.run(&pa, &[&q, &ek, &ev, &bt, &lens]).unwrap();
            rt.execute(&Op::KvCacheWrite, &[&ek, &ev, &k, &v, &slots], &[&ek, &ev]).unwrap();
            let want_after = rt.run(&pa, &[&q, &ek, &ev, &bt, &lens]).unwrap();
            let got = cg.run(&[&kc, &vc, &k, &v, &slots, &q, &bt, &lens]).unwrap();
            assert_eq!(max_diff(&got[0], &want_before[0]), 0.0, "{opts:?} step {step}: before the write");
            assert_eq!(max_diff(&got[1], &want_after[0]), 0.0, "{opts:?} step {step}: after the write");
            if step == 0 {
                assert_eq!(max_diff(&got[0], &f(&[2, 2, 4], vec![0.0; 16])), 0.0, "zero caches give zero rows");
            }
        }
        let (kv, vv) = (kc.to_ndarray::<f32>().unwrap(), vc.to_ndarray::<f32>().unwrap());
        let k_rows: Vec<f32> = kv.iter().copied().collect();
        for (slot, step, seq) in [(0, 0, 0), (1, 1, 0), (4, 0, 1), (5, 1, 1)] {
            assert_eq!(&k_rows[slot * 4..slot * 4 + 4], &rows(step)[seq * 4..seq * 4 + 4], "{opts:?} slot {slot}");
        }
        assert!(k_rows[8..16].iter().chain(&k_rows[24..]).all(|&x| x == 0.0), "{opts:?}: other slots untouched");
        assert_eq!(max_diff(&kc, &ek), 0.0);
        assert_eq!(max_diff(&vc, &ev), 0.0);
        assert_eq!(vv.iter().copied().sum::<f32>(), -kv.iter().copied().sum::<f32>());
    }
});

/// A KvCacheWrite whose outputs nothing reads still runs (its effect is the update); the
/// rules of in-place updates in graphs are checked when compiling, naming the node.
#[test]
fn in_place_nodes_are_never_dead_and_their_rules_are_checked() {
    let b = common::backend("cpu").expect("cpu backend");
    let rt = common::runtime(&b);
    let mut g = Graph::new();
    let kc = g.input("key_cache", DType::F32, [2, 1, 1, 2]);
    let vc = g.input("value_cache", DType::F32, [2, 1, 1, 2]);
    let k = g.input("key", DType::F32, [1, 1, 2]);
    let slots = g.input("slots", DType::I32, [1]);
    g.op_multi("write", Op::KvCacheWrite, &[kc, vc, k, k, slots]).unwrap();
    let other = g.op("other", Op::Copy, &[k]).unwrap();
    g.output(other);
    for opts in [
        options(true, true, false, ScheduleStrategy::Throughput),
        options(false, false, false, ScheduleStrategy::Throughput),
    ] {
        let cg = CompiledGraph::compile(&rt, &g, opts).unwrap();
        let (kct, vct) =
            (rt.zeros(DType::F32, [2, 1, 1, 2], 0).unwrap(), rt.zeros(DType::F32, [2, 1, 1, 2], 0).unwrap());
        let kt = rt.from_slice(&[3f32, 4.0], vec![1, 1, 2], 0).unwrap();
        let st = rt.from_slice(&[1i32], vec![1], 0).unwrap();
        cg.run(&[&kct, &vct, &kt, &st]).unwrap();
        assert_eq!(kct.to_ndarray::<f32>().unwrap().iter().copied().collect::<Vec<_>>(), [0.0, 0.0, 3.0, 4.0]);
        assert_eq!(vct.to_ndarray::<f32>().unwrap().iter().copied().collect::<Vec<_>>(), [0.0, 0.0, 3.0, 4.0]);
    }
    // A reader of the cache as it was, placed after the update, is refused.
    let mut late = g.clone();
    let opts = options(true, true, false, ScheduleStrategy::Throughput);
    let late_out = late.op("late", Op::Copy, &[kc]).unwrap();
    late.output(late_out);
    let e = CompiledGraph::compile(&rt, &late, opts.clone()).map(|_| ());
    assert!(e.unwrap_err().to_string().contains("reads it after the update"));
    // A constant is never written.
    let mut c = Graph::new();
    let kcc = c.constant("cache", HostTensor::from_vec([2, 1, 1, 2], vec![0f32; 4]).unwrap());
    let k = c.input("key", DType::F32, [1, 1, 2]);
    let s = c.input("slots", DType::I32, [1]);
    let vcc = c.input("value_cache", DType::F32, [2, 1, 1, 2]);
    let o = c.op_multi("write", Op::KvCacheWrite, &[kcc, vcc, k, k, s]).unwrap();
    c.output(o[1]);
    let e = CompiledGraph::compile(&rt, &c, opts).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("constant") && e.contains("node \"write\""), "{e}");
}

/// Precision f16 over one store of shared constants (`compile_shared`, as the ONNX Runtime
/// EP compiles a second input shape): the fp16 weights, identified by their f32 source and
/// the conversion, are found in the store, so the second shape uploads none of them (nor
/// converts them) and gives the results of a graph converting its own.
#[test]
fn f16_weights_are_shared_across_shapes() {
    let b = common::backend("cpu").expect("cpu backend");
    let rt = common::runtime(&b);
    let cfg = BertConfig::tiny();
    let store = SharedConstants::new();
    let opts = || CompileOptions { precision: Precision::F16, ..options(true, true, false, ScheduleStrategy::Latency) };
    let build = |batch: usize, seq: usize| bert::build(&cfg, Weights::Random(3), batch, seq).unwrap().graph;
    let fp16 = |cg: &CompiledGraph| {
        let g = cg.graph();
        g.values.iter().filter(|v| v.meta.dtype == DType::F16 && matches!(v.kind, ValueKind::Constant(_))).count()
    };
    let first = CompiledGraph::compile_shared(&rt, build(1, 8), opts(), &store).unwrap();
    let converted = fp16(&first);
    assert!(converted > 0, "the Linear weights are stored in fp16");
    let (held, held_bytes, served) = (store.len(), store.device_bytes(), store.served());
    let second = CompiledGraph::compile_shared(&rt, build(2, 16), opts(), &store).unwrap();
    assert_eq!(fp16(&second), converted);
    // The store gains the shape's position ids at most.
    assert!(store.len() <= held + 1, "{} constants after {held}", store.len());
    assert!(store.device_bytes() - held_bytes <= 16 * 8, "{} bytes after {held_bytes}", store.device_bytes());
    assert!(store.served() - served >= converted, "{} of {converted} fp16 weights served", store.served() - served);
    let own = CompiledGraph::compile_owned(&rt, build(2, 16), opts()).unwrap();
    let ins = bert_inputs(&rt, 2, 16, cfg.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let (got, want) = (second.run(&refs).unwrap(), own.run(&refs).unwrap());
    assert_eq!(max_diff(&got[0], &want[0]), 0.0, "shared fp16 weights give the same result");
}

/// Precision bf16 with fused Attention: where the CPU has AMX-BF16, every non-causal
/// Attention over at least 64 keys reads bf16 q, k and v (casts inserted around it, one per value) and runs on
/// the bf16 unit; at f32 it keeps the f32 kernel. Either way the output stays close to f32's.
#[test]
fn bf16_precision_runs_attention_on_the_bf16_unit() {
    let rt =
        npurt::Runtime::with_config(RuntimeConfig { backend: Some("cpu".into()), ..RuntimeConfig::default() }).unwrap();
    let cfg = BertConfig::tiny();
    let bg = bert::build(&cfg, Weights::Random(7), 2, 64).unwrap();
    let ins = bert_inputs(&rt, 2, 64, cfg.vocab_size);
    let refs: Vec<&Tensor> = ins.iter().collect();
    let f32_opts = options(true, true, false, ScheduleStrategy::Latency);
    let f32_cg = CompiledGraph::compile(&rt, &bg.graph, f32_opts.clone()).unwrap();
    let (want, f32_prof) = f32_cg.run_profiled(&refs).unwrap();
    let units = |p: &runtime::graph::RunProfile| -> Vec<&'static str> {
        p.nodes.iter().filter(|n| n.op == "Attention").map(|n| n.unit.label).collect()
    };
    let f32_units = units(&f32_prof);
    assert!(!f32_units.is_empty(), "the fused graph has no Attention");
    assert!(f32_units.iter().all(|u| !u.contains("bf16")), "f32 precision: {f32_units:?}");
    let cg = CompiledGraph::compile(&rt, &bg.graph, CompileOptions { precision: Precision::Bf16, ..f32_opts }).unwrap();
    let (got, prof) = cg.run_profiled(&refs).unwrap();
    let bf16_units = units(&prof);
    assert_eq!(bf16_units.len(), f32_units.len());
    let unit = backend_cpu::features::get().bf16_unit().label;
    if backend_cpu::kernels::gemm_bf16::available() && unit.starts_with("amx") {
        assert!(bf16_units.iter().all(|u| *u == unit), "{bf16_units:?}");
        let g = cg.graph();
        let attention = g.nodes.iter().filter(|n| matches!(n.op, Op::Attention { .. }));
        assert!(attention.clone().all(|n| n.inputs[..3].iter().all(|v| g.meta(*v).dtype == DType::BF16)));
    } else {
        println!("this CPU has no AMX-BF16 (bf16 unit {unit}): Attention keeps the f32 kernel");
        assert_eq!(bf16_units, f32_units);
    }
    let cos = cosine(&want[0], &got[0]);
    let d = max_diff(&want[0], &got[0]);
    assert!(cos > 0.999 && d < 0.1, "bf16 vs f32: cosine {cos}, max diff {d}");
    // 32 keys: too short to pay for the casts, Attention stays f32.
    let short = bert::build(&cfg, Weights::Random(7), 1, 32).unwrap();
    let opts = CompileOptions { precision: Precision::Bf16, ..options(true, true, false, ScheduleStrategy::Latency) };
    let cg = CompiledGraph::compile(&rt, &short.graph, opts).unwrap();
    let g = cg.graph();
    let attention: Vec<_> = g.nodes.iter().filter(|n| matches!(n.op, Op::Attention { .. })).collect();
    assert!(!attention.is_empty() && attention.iter().all(|n| g.meta(n.inputs[0]).dtype == DType::F32));
}

/// Precision bf16 keeps a float attention mask in f32 beside the bf16 q, k and v: a row
/// whose every key is masked with f32::MIN (finite, but -inf once rounded to bf16) gives
/// what the f32 kernel gives (about the mean of V), not 0.
#[test]
fn bf16_precision_keeps_a_fully_masked_row_like_f32() {
    let rt =
        npurt::Runtime::with_config(RuntimeConfig { backend: Some("cpu".into()), ..RuntimeConfig::default() }).unwrap();
    let (h, s, d) = (2, 64, 32);
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, vec![1, h, s, d]);
    let k = g.input("k", DType::F32, vec![1, h, s, d]);
    let v = g.input("v", DType::F32, vec![1, h, s, d]);
    let m = g.input("mask", DType::F32, vec![1, 1, s, s]);
    let op = Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false };
    let y = g.op("attention", op, &[q, k, v, m]).unwrap();
    // Read by another node: a graph output keeps the f32 kernel.
    let y = g.op("twice", Op::Scale { factor: 2.0 }, &[y]).unwrap();
    g.output(y);
    let n = h * s * d;
    let vals = |mul: usize| -> Vec<f32> { (0..n).map(|i| ((i * mul % 89) as f32 - 44.0) / 30.0).collect() };
    // Row 0 masks every key; the others mask the last eight.
    let mask: Vec<f32> = (0..s * s).map(|i| if i < s || i % s >= s - 8 { f32::MIN } else { 0.0 }).collect();
    let ins = [
        rt.from_slice(&vals(7), [1, h, s, d], 0).unwrap(),
        rt.from_slice(&vals(11), [1, h, s, d], 0).unwrap(),
        rt.from_slice(&vals(13), [1, h, s, d], 0).unwrap(),
        rt.from_slice(&mask, [1, 1, s, s], 0).unwrap(),
    ];
    let refs: Vec<&Tensor> = ins.iter().collect();
    let f32_opts = options(true, true, false, ScheduleStrategy::Latency);
    let want = CompiledGraph::compile(&rt, &g, f32_opts.clone()).unwrap().run(&refs).unwrap();
    let cg = CompiledGraph::compile(&rt, &g, CompileOptions { precision: Precision::Bf16, ..f32_opts }).unwrap();
    let got = cg.run(&refs).unwrap();
    let cgraph = cg.graph();
    let node = cgraph.nodes.iter().find(|n| matches!(n.op, Op::Attention { .. })).unwrap();
    let unit = backend_cpu::features::get().bf16_unit().label;
    if backend_cpu::kernels::gemm_bf16::available() && unit.starts_with("amx") {
        assert_eq!(cgraph.meta(node.inputs[0]).dtype, DType::BF16, "q runs in bf16");
        assert_eq!(cgraph.meta(node.inputs[3]).dtype, DType::F32, "the mask stays f32");
    } else {
        println!("this CPU has no AMX-BF16 (bf16 unit {unit}): Attention keeps the f32 kernel");
    }
    let (w, o) = (want[0].to_ndarray::<f32>().unwrap(), got[0].to_ndarray::<f32>().unwrap());
    let (w, o) = (w.as_slice().unwrap(), o.as_slice().unwrap());
    // The fully masked row of each head: the f32 kernel's answer, nonzero.
    for hh in 0..h {
        let row = hh * s * d;
        assert!(w[row..row + d].iter().any(|x| *x != 0.0), "the f32 kernel's masked row is the mean of V");
        for c in 0..d {
            let (a, b) = (w[row + c], o[row + c]);
            assert!((a - b).abs() <= 2e-2 * (1.0 + a.abs()), "head {hh} feature {c}: bf16 {b} vs f32 {a}");
        }
    }
    assert!(cosine(&want[0], &got[0]) > 0.999);
}
