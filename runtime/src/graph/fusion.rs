//! Fusion: rewrites op patterns to the fused ops of the table.
//!
//! * `Softmax(Add(Scale(MatMul(q, k, trans_b)), mask)) @ v` (or without the mask) →
//!   `Attention(q, k, v[, mask])`; where q, k and v come out of head-split permutes
//!   (`[B, S, H, D]` → `[B, H, S, D]`) and the result goes into the head-merge permute,
//!   the permutes are folded into the op's [`AttentionLayout::Bsnd`] layout, if the
//!   device runs that on the same kernel as the unfolded op
//! * `Gelu(Add(x, bias))` and `Gelu(Linear(x, w, bias))` → `BiasGelu` (after a bias-free
//!   `Linear`); the erf `Gelu(Linear(x, w, bias))` → `LinearGelu` instead where the device
//!   has a kernel for it (the bias and GELU in the product's epilogue)
//! * `LayerNorm(Add(x, residual))` → `AddLayerNorm`
//!
//! A pattern fuses only when its intermediates have no other reader and are not graph
//! outputs. The compile first runs [`super::canonical`], which rewrites an exporter's
//! spellings (ONNX's bias `Add` after a `MatMul`, the erf GELU spelled out, a pre-transposed
//! key, `Div` by a constant) into the forms these patterns match.

use super::ir::{Graph, NodeId, ValueId, ValueKind};
use crate::error::Result;
use crate::op::{AttentionLayout, GeluApprox, Op, TensorMeta};
use std::collections::HashMap;

/// The name of the kernel the device would run `op` on with these inputs, if any.
pub type KernelOf<'a> = &'a dyn Fn(&Op, &[TensorMeta]) -> Option<String>;

/// The modelled device seconds of `op` with these inputs on the device, if the backend
/// models it ([`crate::Runtime::modelled_cost`]).
pub type CostOf<'a> = &'a dyn Fn(&Op, &[TensorMeta]) -> Option<f64>;

/// What one fusion replaces.
pub(super) struct Group {
    /// Nodes whose work the fused node absorbs (not emitted).
    pub(super) absorbed: Vec<usize>,
    /// The replacement nodes, emitted at the root's position; the last one produces the
    /// root's output.
    pub(super) emit: Vec<Emit>,
    /// The value the last emitted node stands for, when not the root's output (a later
    /// absorbed node's).
    pub(super) stands_for: Option<ValueId>,
}

/// A replacement node.
pub(super) struct Emit {
    pub(super) name: String,
    pub(super) op: Op,
    pub(super) inputs: Vec<Src>,
}

impl Group {
    /// One node `name` running `op` on `inputs` (old values) in place of the root and `absorbed`.
    pub(super) fn one(absorbed: Vec<usize>, name: &str, op: Op, inputs: &[ValueId]) -> Group {
        let inputs = inputs.iter().map(|v| Src::Old(*v)).collect();
        Group { absorbed, emit: vec![Emit { name: name.to_string(), op, inputs }], stands_for: None }
    }
}

/// An input of an emitted node: an old value, or the output of an earlier emitted node.
#[derive(Clone, Copy)]
pub(super) enum Src {
    Old(ValueId),
    Emitted(usize),
}

/// Counts of each fusion applied. `Send + Sync`, plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FusionStats {
    pub attention: usize,
    /// Attentions whose head split and merge permutes were folded into their layout.
    pub attention_permutes_folded: usize,
    pub bias_gelu: usize,
    /// Of [`Self::bias_gelu`], those fused into their product as `LinearGelu`.
    pub linear_gelu: usize,
    pub add_layer_norm: usize,
    /// Groups of Linears reading one x merged into one product (see `siblings.rs`).
    pub merged_linears: usize,
    /// Matches left unfused because the device's model says the fused form is slower
    /// (see [`fuse_by_cost`]): Attention, BiasGelu and AddLayerNorm patterns.
    pub attention_declined: usize,
    pub bias_gelu_declined: usize,
    pub add_layer_norm_declined: usize,
    /// The canonical rewrites run before fusion ([`super::canonical`]).
    pub canonical: CanonicalStats,
}

/// Counts of each canonical rewrite ([`super::canonical`]) applied, part of
/// [`FusionStats`]. `Send + Sync`, plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CanonicalStats {
    /// `Mul` or `Div` by a one-element constant → `Scale`.
    pub scale: usize,
    /// `MatMul` of a pre-transposed key → `MatMul { trans_b }` of the head-split key.
    pub matmul_trans_b: usize,
    /// Erf GELU expansions → `Gelu(Erf)`.
    pub gelu: usize,
    /// `MatMul` by a constant (and its bias `Add`), or `Gemm` by one → `Linear`.
    pub linear: usize,
    /// Of [`Self::linear`], those that took a bias (an `Add`, or a `Gemm`'s `C`).
    pub linear_bias: usize,
    /// Of [`Self::linear`], those made from a `Gemm`.
    pub gemm: usize,
    /// Of [`Self::gemm`], those that took the `Reshape`s around a 2-D `Gemm` of 3-D tokens.
    pub gemm_reshapes: usize,
}

pub fn fuse(g: &Graph, kernel_of: KernelOf<'_>) -> Result<(Graph, FusionStats)> {
    fuse_by_cost(g, kernel_of, &|_: &Op, _: &[TensorMeta]| None, Patterns::ALL)
}

/// Which fusion patterns may apply. `Send + Sync`, plain data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patterns {
    pub attention: bool,
    pub bias_gelu: bool,
    pub add_layer_norm: bool,
}

impl Patterns {
    pub const ALL: Patterns = Patterns { attention: true, bias_gelu: true, add_layer_norm: true };
}

/// [`fuse`], with each match kept unfused where `cost_of` models both forms and the fused
/// nodes cost more than the nodes they replace (counted in the `*_declined` stats). Where
/// either form has no model, the match fuses.
/// A pattern left out of `patterns` counts as declined too.
pub fn fuse_by_cost(
    g: &Graph,
    kernel_of: KernelOf<'_>,
    cost_of: CostOf<'_>,
    patterns: Patterns,
) -> Result<(Graph, FusionStats)> {
    let m = Matcher { g, consumers: g.consumers(), kernel_of };
    let (groups, stats) = m.groups(cost_of, patterns);
    Ok((rebuild(g, &groups)?, stats))
}

/// Whether `group`, rooted at node `root`, is no slower by `cost_of` than the nodes it
/// replaces (true where either side has no model).
fn pays(g: &Graph, root: usize, group: &Group, cost_of: CostOf<'_>) -> bool {
    let node_cost = |i: usize| {
        let n = &g.nodes[i];
        let ins: Vec<TensorMeta> = n.inputs.iter().map(|v| g.meta(*v).clone()).collect();
        cost_of(&n.op, &ins)
    };
    let unfused: Option<f64> = group.absorbed.iter().chain(std::iter::once(&root)).map(|&i| node_cost(i)).sum();
    let mut emitted: Vec<TensorMeta> = Vec::new();
    let mut fused = Some(0.0);
    for e in &group.emit {
        let ins: Vec<TensorMeta> = e
            .inputs
            .iter()
            .map(|s| match s {
                Src::Old(v) => g.meta(*v).clone(),
                Src::Emitted(k) => emitted[*k].clone(),
            })
            .collect();
        let Ok(outs) = e.op.infer(&ins) else { return true };
        let Some(out) = outs.into_iter().next() else { return true };
        fused = fused.zip(cost_of(&e.op, &ins)).map(|(a, b)| a + b);
        emitted.push(out);
    }
    match (fused, unfused) {
        (Some(f), Some(u)) => {
            log::debug!(
                "fusion at {:?}: modelled {:.1} µs fused, {:.1} µs unfused",
                g.nodes[root].name,
                f * 1e6,
                u * 1e6
            );
            f <= u
        }
        _ => true,
    }
}

/// What the patterns are matched against.
pub(super) struct Matcher<'a> {
    pub(super) g: &'a Graph,
    pub(super) consumers: Vec<Vec<NodeId>>,
    /// The kernel the device would run an op on.
    pub(super) kernel_of: KernelOf<'a>,
}

impl Matcher<'_> {
    /// The single-consumer producer node of `v` (read by node `by`), if fusing through it
    /// is allowed.
    pub(super) fn sole(&self, v: ValueId, by: usize) -> Option<usize> {
        let g = self.g;
        match g.values[v.0].kind {
            ValueKind::Node(NodeId(p))
                if self.consumers[v.0] == [NodeId(by)] && !g.outputs.contains(&v) && g.nodes[p].outputs.len() == 1 =>
            {
                Some(p)
            }
            _ => None,
        }
    }

    /// Whether the device has a kernel for `op` on `inputs` (old values).
    fn has_kernel(&self, op: &Op, inputs: &[ValueId]) -> bool {
        let metas: Vec<TensorMeta> = inputs.iter().map(|v| self.g.meta(*v).clone()).collect();
        (self.kernel_of)(op, &metas).is_some()
    }

    /// The fusions to apply, by root node (no node in two), and their counts.
    fn groups(&self, cost_of: CostOf<'_>, on: Patterns) -> (HashMap<usize, Group>, FusionStats) {
        let g = self.g;
        let mut groups: HashMap<usize, Group> = HashMap::new();
        let mut taken = vec![false; g.nodes.len()];
        let mut stats = FusionStats::default();
        for (i, n) in g.nodes.iter().enumerate() {
            let group = match &n.op {
                Op::MatMul { trans_a: false, trans_b: false } => {
                    let Some((group, folded)) = self.attention(i, &taken) else { continue };
                    if !on.attention || !pays(g, i, &group, cost_of) {
                        stats.attention_declined += 1;
                        continue;
                    }
                    stats.attention += 1;
                    stats.attention_permutes_folded += usize::from(folded);
                    group
                }
                Op::Gelu(approx) => {
                    let Some(group) = self.bias_gelu(i, *approx, &taken) else { continue };
                    if !on.bias_gelu || !pays(g, i, &group, cost_of) {
                        stats.bias_gelu_declined += 1;
                        continue;
                    }
                    stats.bias_gelu += 1;
                    stats.linear_gelu += usize::from(matches!(group.emit[..], [Emit { op: Op::LinearGelu, .. }]));
                    group
                }
                Op::LayerNorm { eps } => {
                    let Some(group) = self.add_layer_norm(i, *eps, &taken) else { continue };
                    if !on.add_layer_norm || !pays(g, i, &group, cost_of) {
                        stats.add_layer_norm_declined += 1;
                        continue;
                    }
                    stats.add_layer_norm += 1;
                    group
                }
                _ => continue,
            };
            for &a in &group.absorbed {
                taken[a] = true;
            }
            taken[i] = true;
            groups.insert(i, group);
        }
        (groups, stats)
    }

    /// `Softmax(Add(Scale(MatMul(q, k, trans_b)), mask)) @ v` (mask and scale optional)
    /// rooted at node `i` → `Attention`, its head permutes folded where the device allows
    /// (then `true`).
    fn attention(&self, i: usize, taken: &[bool]) -> Option<(Group, bool)> {
        let g = self.g;
        let n = &g.nodes[i];
        // ctx = probs @ v, probs = Softmax(last axis)
        let sm = self.sole(n.inputs[0], i)?;
        let Op::Softmax { axis } = g.nodes[sm].op else { return None };
        let rank = g.meta(n.inputs[0]).shape.rank();
        if !(axis == -1 || axis == rank as isize - 1) || rank != 4 {
            return None;
        }
        let mut cur = g.nodes[sm].inputs[0];
        let mut absorbed = vec![sm];
        let mut mask = None;
        if let Some(add) = self.sole(cur, sm)
            && g.nodes[add].op == Op::Add
        {
            let b = g.nodes[add].inputs[1];
            if g.meta(b).dtype == g.meta(cur).dtype {
                mask = Some(b);
                absorbed.push(add);
                cur = g.nodes[add].inputs[0];
            }
        }
        let prev = *absorbed.last().unwrap_or(&sm);
        let mut scale = 1.0f32;
        let mut scale_node = prev;
        if let Some(sc) = self.sole(cur, prev)
            && let Op::Scale { factor } = g.nodes[sc].op
        {
            scale = factor;
            absorbed.push(sc);
            cur = g.nodes[sc].inputs[0];
            scale_node = sc;
        }
        let qk = self.sole(cur, scale_node)?;
        if g.nodes[qk].op != (Op::MatMul { trans_a: false, trans_b: true }) {
            return None;
        }
        absorbed.push(qk);
        let (q, k, v) = (g.nodes[qk].inputs[0], g.nodes[qk].inputs[1], n.inputs[1]);
        if g.meta(q).shape.rank() != 4 || g.meta(k).shape.rank() != 4 || g.meta(v).shape.rank() != 4 {
            return None;
        }
        if absorbed.iter().any(|&a| taken[a]) {
            return None;
        }
        let attention = |layout| Op::Attention { scale: Some(scale), layout, causal: false };
        let folded = self.fold_head_permutes(i, qk, [q, k, v], mask, scale);
        let is_folded = folded.is_some();
        let (op, [q, k, v], stands_for) = match folded {
            Some(f) => {
                absorbed.extend(f.absorbed);
                (attention(AttentionLayout::Bsnd), f.qkv, Some(f.output))
            }
            None => (attention(AttentionLayout::Bnsd), [q, k, v], None),
        };
        let ins: Vec<ValueId> = [q, k, v].into_iter().chain(mask).collect();
        let mut group = Group::one(absorbed, &n.name, op, &ins);
        group.stands_for = stands_for;
        Some((group, is_folded))
    }

    /// `Gelu(Add(x, bias))` → `BiasGelu(x, bias)`; `Gelu(Linear(x, w, bias))` →
    /// `LinearGelu(x, w, bias)` (erf, where the device has a kernel for it) or else
    /// `BiasGelu(Linear(x, w), bias)`; rooted at the Gelu, node `i`.
    fn bias_gelu(&self, i: usize, approx: GeluApprox, taken: &[bool]) -> Option<Group> {
        let g = self.g;
        let n = &g.nodes[i];
        let p = self.sole(n.inputs[0], i)?;
        if taken[p] {
            return None;
        }
        let pn = &g.nodes[p];
        let last = g.meta(n.inputs[0]).shape.last();
        match &pn.op {
            Op::Add
                if g.meta(pn.inputs[1]).shape.0 == [last]
                    && g.meta(pn.inputs[0]).shape == g.meta(n.inputs[0]).shape =>
            {
                Some(Group::one(vec![p], &n.name, Op::BiasGelu(approx), &pn.inputs[..2]))
            }
            Op::Linear
                if pn.inputs.len() == 3
                    && approx == GeluApprox::Erf
                    && self.has_kernel(&Op::LinearGelu, &pn.inputs) =>
            {
                Some(Group::one(vec![p], &n.name, Op::LinearGelu, &pn.inputs))
            }
            Op::Linear if pn.inputs.len() == 3 => Some(Group {
                absorbed: vec![p],
                emit: vec![
                    Emit {
                        name: pn.name.clone(),
                        op: Op::Linear,
                        inputs: vec![Src::Old(pn.inputs[0]), Src::Old(pn.inputs[1])],
                    },
                    Emit {
                        name: n.name.clone(),
                        op: Op::BiasGelu(approx),
                        inputs: vec![Src::Emitted(0), Src::Old(pn.inputs[2])],
                    },
                ],
                stands_for: None,
            }),
            _ => None,
        }
    }

    /// `LayerNorm(Add(a, b), gamma, beta)` → `AddLayerNorm(a, b, gamma, beta)`, rooted at
    /// the LayerNorm, node `i`.
    fn add_layer_norm(&self, i: usize, eps: f32, taken: &[bool]) -> Option<Group> {
        let g = self.g;
        let n = &g.nodes[i];
        let p = self.sole(n.inputs[0], i)?;
        if taken[p] || g.nodes[p].op != Op::Add {
            return None;
        }
        let (a, b) = (g.nodes[p].inputs[0], g.nodes[p].inputs[1]);
        if g.meta(a).shape != g.meta(b).shape || g.meta(a).shape != g.meta(n.inputs[0]).shape {
            return None;
        }
        Some(Group::one(vec![p], &n.name, Op::AddLayerNorm { eps }, &[a, b, n.inputs[1], n.inputs[2]]))
    }
}

/// The graph with each group's nodes in place of its root and absorbed nodes.
pub(super) fn rebuild(g: &Graph, groups: &HashMap<usize, Group>) -> Result<Graph> {
    let absorbed: std::collections::HashSet<usize> =
        groups.values().flat_map(|gr| gr.absorbed.iter().copied()).collect();
    let mut out = Graph::new();
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for (i, v) in g.values.iter().enumerate() {
        match &v.kind {
            ValueKind::Input => {
                let id = out.input(&v.name, v.meta.dtype, v.meta.shape.clone());
                map.insert(ValueId(i), id);
            }
            ValueKind::Constant(t) => {
                let id = out.constant(&v.name, t.clone());
                map.insert(ValueId(i), id);
            }
            ValueKind::Node(_) => {}
        }
    }
    // Keep the original input order.
    out.inputs = g.inputs.iter().map(|v| map[v]).collect();
    for (i, n) in g.nodes.iter().enumerate() {
        if absorbed.contains(&i) {
            continue;
        }
        if let Some(gr) = groups.get(&i) {
            let mut emitted: Vec<ValueId> = Vec::new();
            for e in &gr.emit {
                let ins: Vec<ValueId> = e
                    .inputs
                    .iter()
                    .map(|s| match s {
                        Src::Old(v) => map[v],
                        Src::Emitted(k) => emitted[*k],
                    })
                    .collect();
                emitted.push(out.op(&e.name, e.op.clone(), &ins)?);
            }
            if let Some(last) = emitted.last() {
                map.insert(gr.stands_for.unwrap_or(n.outputs[0]), *last);
            }
            continue;
        }
        let ins: Vec<ValueId> = n.inputs.iter().map(|v| map[v]).collect();
        let outs = out.op_multi(&n.name, n.op.clone(), &ins)?;
        for (o, nv) in n.outputs.iter().zip(outs) {
            map.insert(*o, nv);
        }
    }
    for o in &g.outputs {
        out.output(map[o]);
    }
    out.validate()?;
    Ok(out)
}

/// What folding an Attention's head permutes absorbs and reads instead.
struct Folded {
    /// The split permutes of q, k and v and the merge permute of the result.
    absorbed: [usize; 4],
    /// q, k and v before their split permutes (`[B, S, H, D]`).
    qkv: [ValueId; 3],
    /// The merge permute's output, which the folded op produces.
    output: ValueId,
}

impl Matcher<'_> {
    /// The head permutes around the Attention rooted at `root` (`probs @ v`, with `qk` the
    /// `q · kᵀ` node): q, k and v each the only output of a `[0, 2, 1, 3]` permute read by the
    /// attention alone, and the result read only by such a permute. `None` where any is
    /// missing, or where the device would not run the folded op on the kernel it picks for
    /// the unfolded one (both with `scale`). No other pattern absorbs a permute.
    fn fold_head_permutes(
        &self,
        root: usize,
        qk: usize,
        [q, k, v]: [ValueId; 3],
        mask: Option<ValueId>,
        scale: f32,
    ) -> Option<Folded> {
        let (g, kernel_of) = (self.g, self.kernel_of);
        let head_swap = |node: usize| g.nodes[node].op == (Op::Permute { perm: vec![0, 2, 1, 3] });
        let split = |x: ValueId, by: usize| self.sole(x, by).filter(|&p| head_swap(p));
        let (pq, pk, pv) = (split(q, qk)?, split(k, qk)?, split(v, root)?);
        let out = g.nodes[root].outputs[0];
        let [NodeId(merge)] = self.consumers[out.0][..] else { return None };
        if !head_swap(merge) || g.outputs.contains(&out) || g.outputs.contains(&g.nodes[merge].outputs[0]) {
            return None;
        }
        let qkv = [g.nodes[pq].inputs[0], g.nodes[pk].inputs[0], g.nodes[pv].inputs[0]];
        let metas = |ins: [ValueId; 3]| -> Vec<TensorMeta> {
            ins.iter().chain(mask.as_ref()).map(|x| g.meta(*x).clone()).collect()
        };
        let attention = |layout| Op::Attention { scale: Some(scale), layout, causal: false };
        let same = kernel_of(&attention(AttentionLayout::Bnsd), &metas([q, k, v]))?;
        (kernel_of(&attention(AttentionLayout::Bsnd), &metas(qkv))? == same).then_some(Folded {
            absorbed: [pq, pk, pv, merge],
            qkv,
            output: g.nodes[merge].outputs[0],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    /// `LayerNorm(Add(x, r))`, the AddLayerNorm pattern.
    fn add_then_norm() -> Graph {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, vec![4, 8]);
        let r = g.input("r", DType::F32, vec![4, 8]);
        let (gamma, beta) = (g.input("gamma", DType::F32, vec![8]), g.input("beta", DType::F32, vec![8]));
        let s = g.op("sum", Op::Add, &[x, r]).unwrap();
        let y = g.op("norm", Op::LayerNorm { eps: 1e-5 }, &[s, gamma, beta]).unwrap();
        g.output(y);
        g
    }

    /// `Gelu(Linear(x, w, b))`, the BiasGelu pattern over a product.
    fn linear_then_gelu(approx: GeluApprox) -> Graph {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, vec![4, 8]);
        let w = g.input("w", DType::F32, vec![6, 8]);
        let b = g.input("b", DType::F32, vec![6]);
        let y = g.op("fc", Op::Linear, &[x, w, b]).unwrap();
        let z = g.op("act", Op::Gelu(approx), &[y]).unwrap();
        g.output(z);
        g
    }

    #[test]
    fn the_erf_gelu_joins_its_product_where_the_device_has_the_kernel() {
        let any = |_: &Op, _: &[TensorMeta]| Some("k".to_string());
        let (out, stats) = fuse(&linear_then_gelu(GeluApprox::Erf), &any).unwrap();
        assert_eq!((stats.bias_gelu, stats.linear_gelu), (1, 1), "{stats:?}");
        assert!(matches!(out.nodes[..], [ref n] if n.op == Op::LinearGelu && n.inputs.len() == 3 && n.name == "act"));
        assert_eq!(out.meta(out.outputs[0]).shape.0, [4, 6]);
        // No LinearGelu kernel on the device: Linear then BiasGelu, as before.
        let no_fused = |op: &Op, _: &[TensorMeta]| (*op != Op::LinearGelu).then(|| "k".to_string());
        let (out, stats) = fuse(&linear_then_gelu(GeluApprox::Erf), &no_fused).unwrap();
        assert_eq!((stats.bias_gelu, stats.linear_gelu), (1, 0), "{stats:?}");
        let ops: Vec<&Op> = out.nodes.iter().map(|n| &n.op).collect();
        assert_eq!(ops, [&Op::Linear, &Op::BiasGelu(GeluApprox::Erf)]);
        // The tanh form has no fused product: BiasGelu.
        let (out, stats) = fuse(&linear_then_gelu(GeluApprox::Tanh), &any).unwrap();
        assert_eq!((stats.bias_gelu, stats.linear_gelu), (1, 0), "{stats:?}");
        assert_eq!(out.nodes.len(), 2);
        // The pattern switched off: nothing fuses.
        let off = Patterns { bias_gelu: false, ..Patterns::ALL };
        let none = |_: &Op, _: &[TensorMeta]| None;
        let (out, stats) = fuse_by_cost(&linear_then_gelu(GeluApprox::Erf), &any, &none, off).unwrap();
        assert_eq!((stats.linear_gelu, stats.bias_gelu_declined), (0, 1), "{stats:?}");
        assert_eq!(out.nodes.len(), 2);
    }

    #[test]
    fn a_fusion_the_model_says_is_slower_is_left_out() {
        let g = add_then_norm();
        let no_kernel = |_: &Op, _: &[TensorMeta]| None;
        // The fused op costs 3, the two it replaces 1 each: left out, counted.
        let slower = |op: &Op, _: &[TensorMeta]| Some(if matches!(op, Op::AddLayerNorm { .. }) { 3.0 } else { 1.0 });
        let (out, stats) = fuse_by_cost(&g, &no_kernel, &slower, Patterns::ALL).unwrap();
        assert_eq!((stats.add_layer_norm, stats.add_layer_norm_declined), (0, 1), "{stats:?}");
        assert_eq!(out.nodes.len(), 2);
        // Cheaper, or equal: fused.
        let same = |op: &Op, _: &[TensorMeta]| Some(if matches!(op, Op::AddLayerNorm { .. }) { 2.0 } else { 1.0 });
        let (out, stats) = fuse_by_cost(&g, &no_kernel, &same, Patterns::ALL).unwrap();
        assert_eq!((stats.add_layer_norm, stats.add_layer_norm_declined), (1, 0), "{stats:?}");
        assert!(matches!(out.nodes[..], [ref n] if matches!(n.op, Op::AddLayerNorm { .. })));
        // No model for one side: fused, as without a model at all.
        let partial = |op: &Op, _: &[TensorMeta]| (!matches!(op, Op::Add)).then_some(9.0);
        assert_eq!(fuse_by_cost(&g, &no_kernel, &partial, Patterns::ALL).unwrap().1.add_layer_norm, 1);
        assert_eq!(fuse(&g, &no_kernel).unwrap().1.add_layer_norm, 1);
        // A pattern left out of the set is declined whatever the model says.
        let off = Patterns { add_layer_norm: false, ..Patterns::ALL };
        let (_, stats) = fuse_by_cost(&g, &no_kernel, &same, off).unwrap();
        assert_eq!((stats.add_layer_norm, stats.add_layer_norm_declined), (0, 1), "{stats:?}");
    }
}
