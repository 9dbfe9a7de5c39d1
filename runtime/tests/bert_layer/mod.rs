//! One BERT encoder layer built two ways from the same seeded weights: with npurt's own ops,
//! as `src/models/bert.rs` builds each layer (`Linear`, `Scale`, `Gelu`, `LayerNorm`), and
//! as Hugging Face's ONNX exporter writes it (`bench/peers/ort_bert.py`'s unfused graph:
//! `MatMul` by a `[K, N]` weight + bias `Add`, a key transposed by its head permute, `Div` by
//! `sqrt(dh)`, the erf GELU spelled out with `Div`/`Erf`/`Add`/`Mul`). Both compute the same
//! function. Shared by the runtime's canonical-rewrite tests and the facade's per-backend
//! ones (`tests/onnx_layer.rs`).
#![allow(dead_code)]

use runtime::graph::{Graph, HostTensor, ValueId};
use runtime::{DType, GeluApprox, Op};

pub const HIDDEN: usize = 64;
pub const HEADS: usize = 4;
pub const HEAD_DIM: usize = HIDDEN / HEADS;
pub const FFN: usize = 128;
pub const EPS: f32 = 1e-12;

/// How the ONNX-shaped layer spells what an exporter may spell either way.
#[derive(Clone, Copy, Debug, Default)]
pub struct Spelling {
    /// `Add(bias, MatMul)` (the exporter's order) instead of `Add(MatMul, bias)`.
    pub bias_first: bool,
    /// GELU as `Mul(Mul(x, 1 + erf), 0.5)` instead of `Mul(Mul(x, 0.5), 1 + erf)`.
    pub half_last: bool,
    /// The scores scaled by `Mul(s, 1/sqrt(dh))` instead of `Div(s, sqrt(dh))`, and the
    /// GELU's `x / sqrt 2` as `Mul(x, 1/sqrt 2)`.
    pub by_mul: bool,
    /// Each linear as ONNX Runtime's level-1 transformations hand it to an EP:
    /// `Reshape(x, [B·S, K])` → `Gemm(·, W, b)` → `Reshape(·, [B, S, N])`.
    pub gemm: bool,
}

/// `n` seeded values in [-0.1, 0.1] for the parameter `name` (the same in both builds).
pub fn param(name: &str, n: usize) -> Vec<f32> {
    let mut s = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    s |= 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D) % 2001;
            (r as f32 - 1000.0) / 10_000.0
        })
        .collect()
}

/// The inputs: `x` `[batch, seq, HIDDEN]` and the additive mask `[batch, 1, 1, seq]`.
fn inputs(g: &mut Graph, batch: usize, seq: usize) -> (ValueId, ValueId) {
    let x = g.input("x", DType::F32, [batch, seq, HIDDEN]);
    let mask = g.input("mask", DType::F32, [batch, 1, 1, seq]);
    (x, mask)
}

fn constant(g: &mut Graph, name: &str, shape: &[usize], v: Vec<f32>) -> ValueId {
    g.constant(name, HostTensor::from_vec(shape.to_vec(), v).expect("the values fill the shape"))
}

fn scalar(g: &mut Graph, name: &str, v: f32) -> ValueId {
    g.constant(name, HostTensor::from_vec(Vec::<usize>::new(), vec![v]).expect("one value"))
}

/// The `[n, k]` weight of linear `name` (npurt's layout).
fn weight(name: &str, n: usize, k: usize) -> Vec<f32> {
    param(&format!("{name}.weight"), n * k)
}

fn transpose(w: &[f32], n: usize, k: usize) -> Vec<f32> {
    (0..k * n).map(|i| w[(i % n) * k + i / n]).collect()
}

/// The layer with npurt's ops, as `src/models/bert.rs` builds it.
pub fn npurt_layer(batch: usize, seq: usize) -> Graph {
    let mut g = Graph::new();
    let (x, mask) = inputs(&mut g, batch, seq);
    let (b, s) = (batch as isize, seq as isize);
    let linear = |g: &mut Graph, name: &str, x: ValueId, n: usize, k: usize| {
        let w = constant(g, &format!("{name}.weight"), &[n, k], weight(name, n, k));
        let bias = constant(g, &format!("{name}.bias"), &[n], param(&format!("{name}.bias"), n));
        g.op(name, Op::Linear, &[x, w, bias]).expect("Linear")
    };
    let heads = |g: &mut Graph, name: &str, t: ValueId| {
        let shape = vec![b, s, HEADS as isize, HEAD_DIM as isize];
        let r = g.op(&format!("{name}.split"), Op::Reshape { shape }, &[t]).expect("Reshape");
        g.op(&format!("{name}.heads"), Op::Permute { perm: vec![0, 2, 1, 3] }, &[r]).expect("Permute")
    };
    let q = linear(&mut g, "query", x, HIDDEN, HIDDEN);
    let k = linear(&mut g, "key", x, HIDDEN, HIDDEN);
    let v = linear(&mut g, "value", x, HIDDEN, HIDDEN);
    let (q, k, v) = (heads(&mut g, "q", q), heads(&mut g, "k", k), heads(&mut g, "v", v));
    let sc = g.op("scores", Op::MatMul { trans_a: false, trans_b: true }, &[q, k]).unwrap();
    let sc = g.op("scale", Op::Scale { factor: 1.0 / (HEAD_DIM as f32).sqrt() }, &[sc]).unwrap();
    let sc = g.op("masked", Op::Add, &[sc, mask]).unwrap();
    let pr = g.op("softmax", Op::Softmax { axis: -1 }, &[sc]).unwrap();
    let ctx = g.op("context", Op::MatMul { trans_a: false, trans_b: false }, &[pr, v]).unwrap();
    let ctx = g.op("merge", Op::Permute { perm: vec![0, 2, 1, 3] }, &[ctx]).unwrap();
    let ctx = g.op("flatten", Op::Reshape { shape: vec![b, s, HIDDEN as isize] }, &[ctx]).unwrap();
    let ao = linear(&mut g, "attention.output", ctx, HIDDEN, HIDDEN);
    let r1 = g.op("residual1", Op::Add, &[ao, x]).unwrap();
    let x1 = layer_norm(&mut g, "ln1", r1);
    let it = linear(&mut g, "intermediate", x1, FFN, HIDDEN);
    let act = g.op("gelu", Op::Gelu(GeluApprox::Erf), &[it]).unwrap();
    let o = linear(&mut g, "output", act, HIDDEN, FFN);
    let r2 = g.op("residual2", Op::Add, &[o, x1]).unwrap();
    let y = layer_norm(&mut g, "ln2", r2);
    g.output(y);
    g
}

fn layer_norm(g: &mut Graph, name: &str, x: ValueId) -> ValueId {
    let gamma = constant(g, &format!("{name}.weight"), &[HIDDEN], vec![1.0; HIDDEN]);
    let beta = constant(g, &format!("{name}.bias"), &[HIDDEN], param(&format!("{name}.bias"), HIDDEN));
    g.op(name, Op::LayerNorm { eps: EPS }, &[x, gamma, beta]).expect("LayerNorm")
}

/// The layer as the ONNX exporter writes it (see the module docs), spelled as `sp` says.
pub fn onnx_layer(batch: usize, seq: usize, sp: Spelling) -> Graph {
    let mut g = Graph::new();
    let (x, mask) = inputs(&mut g, batch, seq);
    let (b, s) = (batch as isize, seq as isize);
    let linear = |g: &mut Graph, name: &str, x: ValueId, n: usize, k: usize| {
        let w = constant(g, &format!("{name}.weight"), &[k, n], transpose(&weight(name, n, k), n, k));
        let bias = constant(g, &format!("{name}.bias"), &[n], param(&format!("{name}.bias"), n));
        if sp.gemm {
            let rows = (batch * seq) as isize;
            let flat = g.op(&format!("{name}/Flatten"), Op::Reshape { shape: vec![rows, k as isize] }, &[x]).unwrap();
            let gemm = Op::Gemm { trans_a: false, trans_b: false, alpha: 1.0, beta: 1.0 };
            let y = g.op(&format!("{name}/Gemm"), gemm, &[flat, w, bias]).unwrap();
            return g.op(&format!("{name}/Unflatten"), Op::Reshape { shape: vec![b, s, n as isize] }, &[y]).unwrap();
        }
        let mm = g.op(&format!("{name}/MatMul"), Op::MatMul { trans_a: false, trans_b: false }, &[x, w]).unwrap();
        let ins = if sp.bias_first { [bias, mm] } else { [mm, bias] };
        g.op(&format!("{name}/Add"), Op::Add, &ins).unwrap()
    };
    let heads = |g: &mut Graph, name: &str, t: ValueId, perm: Vec<usize>| {
        let shape = vec![b, s, HEADS as isize, HEAD_DIM as isize];
        let r = g.op(&format!("{name}/Reshape"), Op::Reshape { shape }, &[t]).unwrap();
        g.op(&format!("{name}/Transpose"), Op::Permute { perm }, &[r]).unwrap()
    };
    let divide = |g: &mut Graph, name: &str, t: ValueId, by: f32| {
        if sp.by_mul {
            let c = scalar(g, &format!("{name}/Constant"), 1.0 / by);
            g.op(name, Op::Mul, &[t, c]).unwrap()
        } else {
            let c = scalar(g, &format!("{name}/Constant"), by);
            g.op(name, Op::Div, &[t, c]).unwrap()
        }
    };
    let q = linear(&mut g, "query", x, HIDDEN, HIDDEN);
    let k = linear(&mut g, "key", x, HIDDEN, HIDDEN);
    let v = linear(&mut g, "value", x, HIDDEN, HIDDEN);
    let q = heads(&mut g, "query", q, vec![0, 2, 1, 3]);
    let k = heads(&mut g, "key", k, vec![0, 2, 3, 1]);
    let v = heads(&mut g, "value", v, vec![0, 2, 1, 3]);
    let sc = g.op("self/MatMul", Op::MatMul { trans_a: false, trans_b: false }, &[q, k]).unwrap();
    let sc = divide(&mut g, "self/Div", sc, (HEAD_DIM as f32).sqrt());
    let sc = g.op("self/Add", Op::Add, &[sc, mask]).unwrap();
    let pr = g.op("self/Softmax", Op::Softmax { axis: -1 }, &[sc]).unwrap();
    let ctx = g.op("self/MatMul_1", Op::MatMul { trans_a: false, trans_b: false }, &[pr, v]).unwrap();
    let ctx = g.op("self/Transpose", Op::Permute { perm: vec![0, 2, 1, 3] }, &[ctx]).unwrap();
    let ctx = g.op("self/Reshape", Op::Reshape { shape: vec![b, s, HIDDEN as isize] }, &[ctx]).unwrap();
    let ao = linear(&mut g, "attention.output", ctx, HIDDEN, HIDDEN);
    let r1 = g.op("residual1/Add", Op::Add, &[ao, x]).unwrap();
    let x1 = layer_norm(&mut g, "ln1", r1);
    let it = linear(&mut g, "intermediate", x1, FFN, HIDDEN);
    let act = erf_gelu(&mut g, it, sp, &divide);
    let o = linear(&mut g, "output", act, HIDDEN, FFN);
    let r2 = g.op("residual2/Add", Op::Add, &[o, x1]).unwrap();
    let y = layer_norm(&mut g, "ln2", r2);
    g.output(y);
    if sp.gemm { merge_reshapes(&g) } else { g }
}

/// `g` with each `Reshape` of a `Reshape` read only there made one `Reshape` (as ONNX
/// Runtime's level-1 transformations merge them: the head split into the projection's
/// `Reshape` back from its 2-D `Gemm`, the head merge into the next one's flattening).
fn merge_reshapes(g: &Graph) -> Graph {
    use runtime::graph::{NodeId, ValueKind};
    let readers = g.consumers();
    let is_reshape = |n: usize| matches!(g.nodes[n].op, Op::Reshape { .. });
    let merged = |n: usize| {
        let out = g.nodes[n].outputs[0];
        is_reshape(n) && !g.outputs.contains(&out) && matches!(readers[out.0][..], [NodeId(r)] if is_reshape(r))
    };
    let mut out = Graph::new();
    let mut map = std::collections::HashMap::new();
    for (i, v) in g.values.iter().enumerate() {
        match &v.kind {
            ValueKind::Input => map.insert(ValueId(i), out.input(&v.name, v.meta.dtype, v.meta.shape.clone())),
            ValueKind::Constant(t) => map.insert(ValueId(i), out.constant(&v.name, t.clone())),
            ValueKind::Node(_) => None,
        };
    }
    for (i, n) in g.nodes.iter().enumerate() {
        if merged(i) {
            continue;
        }
        let mut ins: Vec<ValueId> = n.inputs.clone();
        if let (Op::Reshape { .. }, ValueKind::Node(NodeId(p))) = (&n.op, &g.value(ins[0]).kind)
            && merged(*p)
        {
            ins = g.nodes[*p].inputs.clone();
        }
        let ins: Vec<ValueId> = ins.iter().map(|v| map[v]).collect();
        map.insert(n.outputs[0], out.op(&n.name, n.op.clone(), &ins).unwrap());
    }
    for o in &g.outputs {
        out.output(map[o]);
    }
    out
}

/// `x · 0.5 · (1 + erf(x / sqrt 2))` as the exporter spells it.
fn erf_gelu(
    g: &mut Graph,
    x: ValueId,
    sp: Spelling,
    divide: &dyn Fn(&mut Graph, &str, ValueId, f32) -> ValueId,
) -> ValueId {
    let d = divide(g, "act/Div", x, std::f32::consts::SQRT_2);
    let e = g.op("act/Erf", Op::Erf, &[d]).unwrap();
    let one = scalar(g, "act/one", 1.0);
    let e = g.op("act/Add", Op::Add, &[e, one]).unwrap();
    let half = scalar(g, "act/half", 0.5);
    if sp.half_last {
        let t = g.op("act/Mul", Op::Mul, &[x, e]).unwrap();
        g.op("act/Mul_1", Op::Mul, &[t, half]).unwrap()
    } else {
        let hx = g.op("act/Mul", Op::Mul, &[x, half]).unwrap();
        g.op("act/Mul_1", Op::Mul, &[hx, e]).unwrap()
    }
}

/// The graph's ops, as sorted debug strings (attributes included): the multiset two
/// compiled graphs are compared by.
pub fn op_multiset(g: &Graph) -> Vec<String> {
    let mut ops: Vec<String> = g.nodes.iter().map(|n| format!("{:?}", n.op)).collect();
    ops.sort();
    ops
}
