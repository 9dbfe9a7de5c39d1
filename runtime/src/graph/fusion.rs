//! Fusion: rewrites op patterns to the fused ops of the table.
//!
//! * `Softmax(Add(Scale(MatMul(q, k, trans_b)), mask)) @ v` (or without the mask) →
//!   `Attention(q, k, v[, mask])`
//! * `Gelu(Add(x, bias))` and `Gelu(Linear(x, w, bias))` → `BiasGelu` (after a bias-free
//!   `Linear`)
//! * `LayerNorm(Add(x, residual))` → `AddLayerNorm`
//!
//! A pattern fuses only when its intermediates have no other reader and are not graph
//! outputs.

use super::ir::{Graph, NodeId, ValueId, ValueKind};
use crate::error::Result;
use crate::op::Op;
use std::collections::HashMap;

/// What one fusion replaces.
struct Group {
    /// Nodes whose work the fused node absorbs (not emitted).
    absorbed: Vec<usize>,
    /// The replacement nodes, emitted at the root's position: (name, op, inputs); the last
    /// one produces the root's output.
    emit: Vec<(String, Op, Vec<Src>)>,
}

/// An input of an emitted node: an old value, or the output of an earlier emitted node.
#[derive(Clone, Copy)]
enum Src {
    Old(ValueId),
    Emitted(usize),
}

/// Counts of each fusion applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FusionStats {
    pub attention: usize,
    pub bias_gelu: usize,
    pub add_layer_norm: usize,
}

pub fn fuse(g: &Graph) -> Result<(Graph, FusionStats)> {
    let consumers = g.consumers();
    let is_output = |v: ValueId| g.outputs.contains(&v);
    // The single-consumer producer node of a value, if fusing through it is allowed.
    let sole = |v: ValueId, by: usize| -> Option<usize> {
        match g.values[v.0].kind {
            ValueKind::Node(NodeId(p))
                if consumers[v.0] == [NodeId(by)] && !is_output(v) && g.nodes[p].outputs.len() == 1 =>
            {
                Some(p)
            }
            _ => None,
        }
    };
    let mut groups: HashMap<usize, Group> = HashMap::new();
    let mut taken = vec![false; g.nodes.len()];
    let mut stats = FusionStats::default();
    for (i, n) in g.nodes.iter().enumerate() {
        match &n.op {
            Op::MatMul { trans_a: false, trans_b: false } => {
                // ctx = probs @ v, probs = Softmax(last axis)
                let Some(sm) = sole(n.inputs[0], i) else { continue };
                let Op::Softmax { axis } = g.nodes[sm].op else { continue };
                let rank = g.meta(n.inputs[0]).shape.rank();
                if !(axis == -1 || axis == rank as isize - 1) || rank != 4 {
                    continue;
                }
                let mut cur = g.nodes[sm].inputs[0];
                let mut absorbed = vec![sm];
                let mut mask = None;
                if let Some(add) = sole(cur, sm)
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
                if let Some(sc) = sole(cur, prev)
                    && let Op::Scale { factor } = g.nodes[sc].op
                {
                    scale = factor;
                    absorbed.push(sc);
                    cur = g.nodes[sc].inputs[0];
                    scale_node = sc;
                }
                let Some(qk) = sole(cur, scale_node) else { continue };
                if g.nodes[qk].op != (Op::MatMul { trans_a: false, trans_b: true }) {
                    continue;
                }
                absorbed.push(qk);
                let (q, k, v) = (g.nodes[qk].inputs[0], g.nodes[qk].inputs[1], n.inputs[1]);
                if g.meta(q).shape.rank() != 4 || g.meta(k).shape.rank() != 4 || g.meta(v).shape.rank() != 4 {
                    continue;
                }
                if absorbed.iter().any(|&a| taken[a]) {
                    continue;
                }
                let mut ins = vec![Src::Old(q), Src::Old(k), Src::Old(v)];
                if let Some(m) = mask {
                    ins.push(Src::Old(m));
                }
                for &a in &absorbed {
                    taken[a] = true;
                }
                taken[i] = true;
                stats.attention += 1;
                groups.insert(
                    i,
                    Group { absorbed, emit: vec![(n.name.clone(), Op::Attention { scale: Some(scale) }, ins)] },
                );
            }
            Op::Gelu(approx) => {
                let Some(p) = sole(n.inputs[0], i) else { continue };
                if taken[p] {
                    continue;
                }
                let pn = &g.nodes[p];
                let last = g.meta(n.inputs[0]).shape.last();
                match &pn.op {
                    Op::Add
                        if g.meta(pn.inputs[1]).shape.0 == [last]
                            && g.meta(pn.inputs[0]).shape == g.meta(n.inputs[0]).shape =>
                    {
                        taken[p] = true;
                        taken[i] = true;
                        stats.bias_gelu += 1;
                        groups.insert(
                            i,
                            Group {
                                absorbed: vec![p],
                                emit: vec![(
                                    n.name.clone(),
                                    Op::BiasGelu(*approx),
                                    vec![Src::Old(pn.inputs[0]), Src::Old(pn.inputs[1])],
                                )],
                            },
                        );
                    }
                    Op::Linear if pn.inputs.len() == 3 => {
                        taken[p] = true;
                        taken[i] = true;
                        stats.bias_gelu += 1;
                        groups.insert(
                            i,
                            Group {
                                absorbed: vec![p],
                                emit: vec![
                                    (pn.name.clone(), Op::Linear, vec![Src::Old(pn.inputs[0]), Src::Old(pn.inputs[1])]),
                                    (
                                        n.name.clone(),
                                        Op::BiasGelu(*approx),
                                        vec![Src::Emitted(0), Src::Old(pn.inputs[2])],
                                    ),
                                ],
                            },
                        );
                    }
                    _ => {}
                }
            }
            Op::LayerNorm { eps } => {
                let Some(p) = sole(n.inputs[0], i) else { continue };
                if taken[p] || g.nodes[p].op != Op::Add {
                    continue;
                }
                let (a, b) = (g.nodes[p].inputs[0], g.nodes[p].inputs[1]);
                if g.meta(a).shape != g.meta(b).shape || g.meta(a).shape != g.meta(n.inputs[0]).shape {
                    continue;
                }
                taken[p] = true;
                taken[i] = true;
                stats.add_layer_norm += 1;
                groups.insert(
                    i,
                    Group {
                        absorbed: vec![p],
                        emit: vec![(
                            n.name.clone(),
                            Op::AddLayerNorm { eps: *eps },
                            vec![Src::Old(a), Src::Old(b), Src::Old(n.inputs[1]), Src::Old(n.inputs[2])],
                        )],
                    },
                );
            }
            _ => {}
        }
    }
    let absorbed: std::collections::HashSet<usize> =
        groups.values().flat_map(|gr| gr.absorbed.iter().copied()).collect();
    // Rebuild.
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
            for (name, op, ins) in &gr.emit {
                let ins: Vec<ValueId> = ins
                    .iter()
                    .map(|s| match s {
                        Src::Old(v) => map[v],
                        Src::Emitted(k) => emitted[*k],
                    })
                    .collect();
                emitted.push(out.op(name, op.clone(), &ins)?);
            }
            if let Some(last) = emitted.last() {
                map.insert(n.outputs[0], *last);
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
    Ok((out, stats))
}
