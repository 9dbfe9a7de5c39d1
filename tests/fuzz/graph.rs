//! Graph building (`Graph::input` / `constant` / `op` / `output`, `validate`,
//! `CompiledGraph::compile` on the CPU backend) from arbitrary sequences of steps: random
//! ops on random earlier values, the fusion patterns (attention, bias+GELU,
//! residual+LayerNorm), outputs that are inputs, constants or undefined. Each step and the
//! compile give `Ok` or a typed error; a graph that compiles runs (twice, and poisoned)
//! to the results of running its nodes one by one with the eager API.

use crate::ops::{self, Fill};
use npurt::{DType, Error, GeluApprox, Op, Precision, Tensor, TensorMeta};
use proptest::prelude::*;
use runtime::graph::{CompileOptions, CompiledGraph, Graph, HostTensor, ScheduleStrategy, ValueId, ValueKind};
use std::collections::HashMap;

/// Runs every node of `g` with the eager API, in graph order (as tests/graph.rs does).
fn eager(rt: &runtime::Runtime, g: &Graph, inputs: &[&Tensor]) -> npurt::Result<Vec<Tensor>> {
    let mut vals: HashMap<ValueId, Tensor> = HashMap::new();
    for (id, t) in g.inputs.iter().zip(inputs) {
        vals.insert(*id, (*t).clone());
    }
    for (i, v) in g.values.iter().enumerate() {
        if let ValueKind::Constant(c) = &v.kind {
            let t = rt.empty(c.dtype, c.shape.clone(), 0)?;
            t.copy_from_bytes(&c.bytes)?;
            vals.insert(ValueId(i), t);
        }
    }
    for n in &g.nodes {
        let ins: Vec<&Tensor> = n.inputs.iter().map(|v| &vals[v]).collect();
        let outs = rt.run(&n.op, &ins)?;
        for (o, t) in n.outputs.iter().zip(outs) {
            vals.insert(*o, t);
        }
    }
    Ok(g.outputs.iter().map(|o| vals[o].clone()).collect())
}

/// The elements of `t` as f64.
fn values(t: &Tensor) -> Vec<f64> {
    let v: Vec<f64> = match t.dtype() {
        DType::F32 => t.to_ndarray::<f32>().unwrap().iter().map(|&x| x as f64).collect(),
        DType::F16 => t.to_ndarray::<npurt::f16>().unwrap().iter().map(|x| x.to_f64()).collect(),
        DType::BF16 => t.to_ndarray::<npurt::bf16>().unwrap().iter().map(|x| x.to_f64()).collect(),
        DType::I32 => t.to_ndarray::<i32>().unwrap().iter().map(|&x| x as f64).collect(),
        DType::I64 => t.to_ndarray::<i64>().unwrap().iter().map(|&x| x as f64).collect(),
        DType::U8 => t.to_ndarray::<u8>().unwrap().iter().map(|&x| x as f64).collect(),
    };
    assert_eq!(v.len(), t.numel());
    v
}

/// Whether `got` matches `want` within `tol` (relative to the magnitude, at least 1);
/// NaN matches NaN and infinities match themselves.
fn close(got: f64, want: f64, tol: f64) -> bool {
    (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= tol * want.abs().max(got.abs()).max(1.0)
}

/// The small dims a case draws its shapes from.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    h: usize,
    s: usize,
    d: usize,
}

/// Shapes built from the case's dims, so that random ops often fit together.
#[derive(Clone, Copy, Debug)]
enum Form {
    D,
    Sd,
    Bsd,
    Dd,
    Bhsd,
    One,
    Scalar,
    Mask,
}

impl Form {
    fn shape(self, k: Dims) -> Vec<usize> {
        match self {
            Form::D => vec![k.d],
            Form::Sd => vec![k.s, k.d],
            Form::Bsd => vec![k.b, k.s, k.d],
            Form::Dd => vec![k.d, k.d],
            Form::Bhsd => vec![k.b, k.h, k.s, k.d],
            Form::One => vec![1],
            Form::Scalar => vec![],
            Form::Mask => vec![k.b, 1, 1, k.s],
        }
    }
}

fn form() -> impl Strategy<Value = Form> {
    prop::sample::select(vec![Form::D, Form::Sd, Form::Bsd, Form::Dd, Form::Bhsd, Form::One, Form::Scalar, Form::Mask])
}

/// The ops a random node draws from: well-formed ones that fit these shapes, and (less
/// often) any op at all.
fn node_op() -> impl Strategy<Value = Op> {
    let fitting = prop::sample::select(vec![
        Op::Relu,
        Op::Gelu(GeluApprox::Erf),
        Op::Gelu(GeluApprox::Tanh),
        Op::Tanh,
        Op::Erf,
        Op::Exp,
        Op::Sqrt,
        Op::Neg,
        Op::Sigmoid,
        Op::Copy,
        Op::Scale { factor: 0.5 },
        Op::Softmax { axis: -1 },
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::MatMul { trans_a: false, trans_b: false },
        Op::MatMul { trans_a: false, trans_b: true },
        Op::Linear,
        Op::LayerNorm { eps: 1e-5 },
        Op::AddLayerNorm { eps: 1e-5 },
        Op::BiasGelu(GeluApprox::Erf),
        Op::Reshape { shape: vec![-1] },
        Op::Permute { perm: vec![1, 0] },
        Op::Permute { perm: vec![0, 2, 1, 3] },
        Op::ReduceSum { axes: vec![-1], keepdims: true },
        Op::ReduceMean { axes: vec![], keepdims: false },
        Op::Cast { to: DType::F16 },
        Op::Cast { to: DType::F32 },
        Op::Gather { axis: 0 },
        Op::Attention { scale: None, layout: npurt::AttentionLayout::Bnsd, causal: false },
    ]);
    prop_oneof![6 => fitting, 1 => ops::op()]
}

/// One step of building a graph.
#[derive(Clone, Debug)]
enum Step {
    Input(Form, bool),
    Constant(Form, Fill),
    /// An i64 constant of indices (in range of any table of at least 3 rows).
    Indices(Form),
    /// A constant whose bytes do not fit its shape (the builder takes it; validation must
    /// refuse it).
    BadConstant(Form),
    /// An op on earlier values (an index past them is a value that does not exist).
    Node(Op, Vec<prop::sample::Index>, bool),
    /// The fusion patterns on fresh operands: 0 attention (with or without a mask),
    /// 1 Gelu(Add(x, bias)), 2 Gelu(Linear(x, w, b)), 3 LayerNorm(Add(x, r)).
    Pattern(u8, bool),
    Output(prop::sample::Index),
    /// A value id that may not exist.
    OutputId(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let idx = || any::<prop::sample::Index>();
    prop_oneof![
        3 => (form(), any::<bool>()).prop_map(|(f, b)| Step::Input(f, b)),
        2 => (form(), any::<u64>()).prop_map(|(f, s)| Step::Constant(f, Fill::Small(s))),
        1 => form().prop_map(Step::Indices),
        1 => form().prop_map(Step::BadConstant),
        8 => (node_op(), prop::collection::vec(idx(), 1..=4), prop::bool::weighted(0.03))
            .prop_map(|(o, i, bad)| Step::Node(o, i, bad)),
        2 => (0u8..4, any::<bool>()).prop_map(|(p, m)| Step::Pattern(p, m)),
        2 => idx().prop_map(Step::Output),
        1 => (0usize..64).prop_map(Step::OutputId),
    ]
}

fn constant(meta: &TensorMeta, fill: Fill) -> HostTensor {
    let t = ops::tensor(crate::runtime(), meta, fill, false);
    let bytes = match meta.dtype {
        DType::F32 => {
            bytemuck::cast_slice(&t.to_ndarray::<f32>().unwrap().iter().copied().collect::<Vec<_>>()).to_vec()
        }
        DType::I64 => {
            bytemuck::cast_slice(&t.to_ndarray::<i64>().unwrap().iter().copied().collect::<Vec<_>>()).to_vec()
        }
        d => unreachable!("{d}"),
    };
    HostTensor { dtype: meta.dtype, shape: meta.shape.clone(), bytes: bytes.into() }
}

/// `p` and a fresh number.
fn fresh(n: &mut usize, p: &str) -> String {
    *n += 1;
    format!("{p}{n}")
}

/// Builds the graph of `steps`; every builder error must be typed and name the op.
fn build(steps: &[Step], k: Dims) -> Graph {
    let mut g = Graph::new();
    let mut vals: Vec<ValueId> = Vec::new();
    let mut n = 0usize;
    let inp = |g: &mut Graph, n: &mut usize, f: Form| g.input(&fresh(n, "p"), DType::F32, f.shape(k));
    for s in steps {
        match s {
            Step::Input(f, f16) => {
                let dt = if *f16 { DType::F16 } else { DType::F32 };
                vals.push(g.input(&fresh(&mut n, "in"), dt, f.shape(k)));
            }
            Step::Constant(f, fill) => {
                vals.push(g.constant(&fresh(&mut n, "c"), constant(&TensorMeta::new(DType::F32, f.shape(k)), *fill)));
            }
            Step::Indices(f) => {
                vals.push(g.constant(
                    &fresh(&mut n, "idx"),
                    constant(&TensorMeta::new(DType::I64, f.shape(k)), Fill::Small(3)),
                ));
            }
            Step::BadConstant(f) => {
                let shape = f.shape(k);
                let t = HostTensor { dtype: DType::F32, shape: shape.into(), bytes: vec![0; 3].into() };
                vals.push(g.constant(&fresh(&mut n, "bad"), t));
            }
            Step::Node(op, ins, bad) => {
                let mut ids: Vec<ValueId> =
                    ins.iter().filter(|_| !vals.is_empty()).map(|i| vals[i.index(vals.len())]).collect();
                if *bad || ids.is_empty() {
                    ids.push(ValueId(g.values.len() + 3));
                }
                let (lo, hi) = op.arity();
                ids.truncate(hi.max(lo).max(1));
                match g.op(&fresh(&mut n, "n"), op.clone(), &ids) {
                    Ok(v) => vals.push(v),
                    Err(Error::Invalid { op: o, msg, .. }) => assert_eq!(o, op.name(), "{msg}"),
                    Err(e) => panic!("{op:?}: an error of the wrong kind: {e:?}"),
                }
            }
            Step::Pattern(p, masked) => {
                let r = match p {
                    0 => {
                        let (q, kk, v) = (
                            inp(&mut g, &mut n, Form::Bhsd),
                            inp(&mut g, &mut n, Form::Bhsd),
                            inp(&mut g, &mut n, Form::Bhsd),
                        );
                        let sc =
                            g.op(&fresh(&mut n, "qk"), Op::MatMul { trans_a: false, trans_b: true }, &[q, kk]).unwrap();
                        let mut sc = g.op(&fresh(&mut n, "scale"), Op::Scale { factor: 0.5 }, &[sc]).unwrap();
                        if *masked {
                            let m = inp(&mut g, &mut n, Form::Mask);
                            sc = g.op(&fresh(&mut n, "mask"), Op::Add, &[sc, m]).unwrap();
                        }
                        let pr = g.op(&fresh(&mut n, "softmax"), Op::Softmax { axis: -1 }, &[sc]).unwrap();
                        g.op(&fresh(&mut n, "ctx"), Op::MatMul { trans_a: false, trans_b: false }, &[pr, v]).unwrap()
                    }
                    1 => {
                        let (x, b) = (inp(&mut g, &mut n, Form::Bsd), inp(&mut g, &mut n, Form::D));
                        let a = g.op(&fresh(&mut n, "bias"), Op::Add, &[x, b]).unwrap();
                        g.op(&fresh(&mut n, "gelu"), Op::Gelu(GeluApprox::Erf), &[a]).unwrap()
                    }
                    2 => {
                        let (x, w, b) = (
                            inp(&mut g, &mut n, Form::Bsd),
                            inp(&mut g, &mut n, Form::Dd),
                            inp(&mut g, &mut n, Form::D),
                        );
                        let l = g.op(&fresh(&mut n, "linear"), Op::Linear, &[x, w, b]).unwrap();
                        g.op(&fresh(&mut n, "gelu"), Op::Gelu(GeluApprox::Tanh), &[l]).unwrap()
                    }
                    _ => {
                        let (x, r) = (inp(&mut g, &mut n, Form::Bsd), inp(&mut g, &mut n, Form::Bsd));
                        let (ga, be) = (inp(&mut g, &mut n, Form::D), inp(&mut g, &mut n, Form::D));
                        let a = g.op(&fresh(&mut n, "residual"), Op::Add, &[x, r]).unwrap();
                        g.op(&fresh(&mut n, "ln"), Op::LayerNorm { eps: 1e-5 }, &[a, ga, be]).unwrap()
                    }
                };
                vals.push(r);
            }
            Step::Output(i) if !vals.is_empty() => g.output(vals[i.index(vals.len())]),
            Step::Output(_) => {}
            Step::OutputId(id) => g.output(ValueId(*id)),
        }
    }
    // Most graphs end with their last value as an output, so that the nodes run.
    if let Some(&v) = vals.last()
        && g.outputs.len() < 2
    {
        g.output(v);
    }
    g
}

fn options() -> impl Strategy<Value = CompileOptions> {
    let strategy =
        prop::sample::select(vec![ScheduleStrategy::Latency, ScheduleStrategy::Throughput, ScheduleStrategy::Balanced]);
    let flags = (any::<bool>(), any::<bool>(), any::<bool>());
    (flags, strategy, 1usize..=4, prop::bool::weighted(0.2), 1usize..=3, any::<bool>()).prop_map(
        |((fuse, memory_reuse, parallel), strategy, max_streams, bf16, max_arenas, store_slow_precision)| {
            CompileOptions {
                device: 0,
                fuse,
                memory_reuse,
                parallel,
                strategy,
                max_streams,
                precision: if bf16 { Precision::Bf16 } else { Precision::F32 },
                max_arenas,
                deny_host_tier: false,
                graph_capture: runtime::GraphCapture::Auto,
                store_slow_precision,
            }
        },
    )
}

fn dims() -> impl Strategy<Value = Dims> {
    (1usize..=2, 1usize..=2, 1usize..=4, 1usize..=4).prop_map(|(b, h, s, d)| Dims { b, h, s, d })
}

/// Compares the compiled graph's outputs to the eager ones.
fn check_outputs(got: &[Tensor], want: &[Tensor], bf16: bool, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len(), "{}", what);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        prop_assert_eq!(g.meta(), w.meta(), "{} output {}", what, i);
        let tol = match g.dtype() {
            DType::BF16 => 3e-2,
            DType::F16 => 4e-3,
            _ => 1e-3,
        } + if bf16 { 3e-2 } else { 0.0 };
        for (j, (a, b)) in values(g).into_iter().zip(values(w)).enumerate() {
            prop_assert!(close(a, b, tol), "{} output {} element {}: compiled {} eager {}", what, i, j, a, b);
        }
    }
    Ok(())
}

/// Random step sequences: the builder, `validate` and `compile` answer `Ok` or a typed
/// error; a graph that compiles runs to the eager results (also on a second run, with a
/// poisoned arena, and on strided inputs), and fails where eager execution fails.
#[test]
fn random_graphs_compile_and_match_eager() {
    // A runtime of its own, so that no other test's synchronisation sees its failures.
    let rt = &crate::cpu_runtime();
    let counts = crate::Counts::default();
    let strategy = (
        dims(),
        prop::collection::vec(step(), 1..14),
        options(),
        prop::collection::vec(any::<u64>(), 8),
        any::<bool>(),
    );
    let n = crate::run_cases("random_graphs", 1000, strategy, &counts, |(k, steps, opts, fills, strided)| {
        let g = build(&steps, k);
        let valid = g.validate();
        if let Err(e) = &valid {
            prop_assert!(matches!(e, Error::Invalid { .. }), "{:?}", e);
        }
        let bf16 = opts.precision == Precision::Bf16;
        let cg = match CompiledGraph::compile(rt, &g, opts.clone()) {
            Ok(cg) => cg,
            Err(e) => {
                prop_assert!(
                    matches!(e, Error::Invalid { .. } | Error::NoKernel { .. } | Error::Unsupported(_)),
                    "{:?}",
                    e
                );
                return Ok(());
            }
        };
        prop_assert!(valid.is_ok(), "compiled a graph that does not validate: {:?}", valid);
        counts.add("compiled");
        if cg.fusion_stats() != &Default::default() {
            counts.add("fused");
        }
        let ins: Vec<Tensor> = g
            .inputs
            .iter()
            .enumerate()
            .map(|(i, v)| ops::tensor(rt, g.meta(*v), Fill::Small(fills[i % fills.len()]), strided && i % 2 == 0))
            .collect();
        let refs: Vec<&Tensor> = ins.iter().collect();
        let want = eager(rt, &g, &refs);
        let what = format!("{opts:?}\n{g}");
        match (cg.run(&refs), &want) {
            (Ok(got), Ok(want)) => {
                counts.add("ran and matched");
                check_outputs(&got, want, bf16, &what)?;
                check_outputs(&cg.run(&refs).unwrap(), want, bf16, &format!("second run of {what}"))?;
                if opts.memory_reuse {
                    check_outputs(&cg.run_poisoned(&refs).unwrap(), want, bf16, &format!("poisoned run of {what}"))?;
                }
            }
            (Err(e), Err(_)) => {
                counts.add("failed as eager did");
                prop_assert!(!matches!(e, Error::OutOfMemory { .. }), "{:?}", e);
            }
            (got, want) => prop_assert!(
                false,
                "compiled {:?} but eager {:?}\n{}",
                got.map(|v| v.len()),
                want.as_ref().map(|v| v.len()),
                what
            ),
        }
        rt.synchronize(0).unwrap();
        Ok(())
    });
    // The generator must reach compiled runs, and fusions, often enough to test them.
    assert!(counts.get("ran and matched") * 4 >= n, "too few graphs ran");
    assert!(counts.get("fused") * 20 >= n, "too few graphs fused");
}

/// A built graph whose public fields are then changed (a node's inputs or outputs
/// pointing anywhere, outputs dropped): `validate` answers `Ok` or `Invalid`, and
/// `compile` does not panic.
#[test]
fn edited_graphs_validate_or_are_invalid() {
    let rt = &crate::cpu_runtime();
    let counts = crate::Counts::default();
    let strategy = (
        dims(),
        prop::collection::vec(step(), 1..10),
        prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, 0usize..40), 1..4),
    );
    crate::run_cases("edited_graphs", 1000, strategy, &counts, |(k, steps, edits)| {
        let mut g = build(&steps, k);
        for (at, what, id) in &edits {
            if g.nodes.is_empty() {
                break;
            }
            let n = at.index(g.nodes.len());
            match what {
                0 => g.nodes[n].inputs.push(ValueId(*id)),
                1 if !g.nodes[n].inputs.is_empty() => g.nodes[n].inputs[0] = ValueId(*id),
                2 if !g.nodes[n].outputs.is_empty() => g.nodes[n].outputs[0] = ValueId(*id),
                _ => g.nodes[n].outputs.clear(),
            }
        }
        match g.validate() {
            Ok(()) => {
                counts.add("valid");
                match CompiledGraph::compile(rt, &g, CompileOptions::from_config(rt.config(), 0)) {
                    Ok(_) => counts.add("compiled"),
                    Err(e) => prop_assert!(!matches!(e, Error::OutOfMemory { .. }), "{:?}", e),
                }
            }
            Err(e) => prop_assert!(matches!(e, Error::Invalid { .. }), "{:?}", e),
        }
        Ok(())
    });
}

/// The bf16 weight rewrite on the two sharings the generator reaches rarely: a constant
/// that is a Linear's weight and also its `x`, and one that is also a graph output. The
/// compiled graph must run to the eager results, outputs keeping their dtypes.
#[test]
fn bf16_rewrite_keeps_shared_constants_and_outputs() {
    let rt = &crate::cpu_runtime();
    let opts = CompileOptions { precision: Precision::Bf16, ..CompileOptions::from_config(rt.config(), 0) };
    let w = HostTensor::from_vec([4, 4], (0..16).map(|i| i as f32 * 0.25 - 2.0).collect()).unwrap();
    for case in ["x and weight", "weight and output"] {
        let mut g = Graph::new();
        let c = g.constant("w", w.clone());
        let (x, outputs) = if case == "x and weight" {
            (c, vec![])
        } else {
            let x = g.input("x", DType::F32, [2, 4]);
            (x, vec![c])
        };
        let y = g.op("fc", Op::Linear, &[x, c]).unwrap();
        g.output(y);
        outputs.into_iter().for_each(|o| g.output(o));
        let input = rt.from_slice(&[0.5f32, -1.0, 2.0, 0.0, 1.0, 1.0, -0.5, 3.0], [2, 4], 0).unwrap();
        let refs: Vec<&Tensor> = if g.inputs.is_empty() { vec![] } else { vec![&input] };
        let want = eager(rt, &g, &refs).unwrap();
        let r = CompiledGraph::compile(rt, &g, opts.clone()).and_then(|cg| cg.run(&refs));
        let r = r
            .map_err(|e| format!("{e}"))
            .and_then(|got| check_outputs(&got, &want, true, case).map_err(|e| format!("{e}")));
        match r {
            Ok(()) => {}
            Err(e) => panic!("{case}: {e}"),
        }
    }
}

/// A compiled graph whose Gather fails (an index past the table) fails on every run, also
/// while another thread calls `Runtime::synchronize` on the same device.
#[test]
fn a_failed_run_is_reported_to_its_caller_only() {
    let rt = crate::cpu_runtime();
    let mut g = Graph::new();
    let table = g.constant("table", HostTensor::from_vec([4, 2], vec![1f32; 8]).unwrap());
    let idx = g.input("idx", DType::I64, [3]);
    let x = g.input("x", DType::F32, [3, 2]);
    let a = g.op("gather", Op::Gather { axis: 0 }, &[table, idx]).unwrap();
    let b = g.op("relu", Op::Relu, &[x]).unwrap();
    let b = g.op("tanh", Op::Tanh, &[b]).unwrap();
    let c = g.op("add", Op::Add, &[a, b]).unwrap();
    g.output(c);
    let opts = CompileOptions {
        parallel: true,
        max_streams: 2,
        strategy: ScheduleStrategy::Latency,
        ..CompileOptions::from_config(rt.config(), 0)
    };
    let cg = CompiledGraph::compile(&rt, &g, opts).unwrap();
    assert!(cg.schedule().streams > 1, "the two branches run on user streams");
    let bad = rt.from_slice(&[0i64, 9, 1], [3], 0).unwrap();
    let x = rt.from_slice(&[1f32; 6], [3, 2], 0).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (ok, foreign) = std::thread::scope(|s| {
        let other = s.spawn(|| {
            let mut foreign = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                foreign += usize::from(rt.synchronize(0).is_err());
            }
            foreign
        });
        let ok = (0..500).filter(|_| cg.run(&[&bad, &x]).is_ok()).count();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (ok, other.join().unwrap())
    });
    eprintln!("errors of the graph's streams reported to the other thread: {foreign}");
    assert_eq!(ok, 0, "failing runs that returned Ok (out of 500)");
}
