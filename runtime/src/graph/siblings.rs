//! Sibling products: the Linears that read the same x, each with a constant weight,
//! become one Linear whose weight stacks theirs (rows, in node order) and whose bias
//! stacks their biases, followed by one `Slice` of its last axis per original output.
//!
//! An encoder's query, key and value projections are such siblings. One product of
//! `n₁ + n₂ + n₃` columns keeps both CPU threads busier than three narrow ones (fewer
//! packing passes over x, fewer fork-joins) at the cost of three copies of the outputs.
//! The merged weight is derived bytes ([`HostBytes::derived_from`]): made once, when
//! the compile first reads it, and named by its sources, so a second compile of the same
//! model at another input shape finds it prepared.
//!
//! A group merges only where the device runs the merged Linear on the kernel it picks for
//! the siblings and has a Slice kernel, and only where the backend does not model its
//! device: a modelled device (Ascend) schedules the siblings on parallel streams, where
//! its model decides the fusions (`compile.rs`, `choose_patterns`), and each Slice there
//! is one more operator launch. Graph outputs, weights that something else reads too,
//! and biases present on some siblings only keep their nodes apart.

use super::fusion::{CostOf, KernelOf};
use super::ir::{Graph, HostBytes, HostTensor, ValueId, ValueKind};
use crate::error::Result;
use crate::op::{Op, TensorMeta};
use std::collections::{HashMap, HashSet};

/// One group of sibling Linears (node indices, in graph order: the first is where the
/// merged node goes), with the merged Linear's input metas and each sibling's Slice of
/// its output.
struct Group {
    nodes: Vec<usize>,
    merged: Vec<TensorMeta>,
    slices: Slices,
}

/// The Linear nodes of `g` that may merge, grouped by their x; groups of one dropped.
fn groups(g: &Graph, kernel_of: KernelOf<'_>, cost_of: CostOf<'_>) -> Vec<Group> {
    let consumers = g.consumers();
    let metas = |n: usize| g.nodes[n].inputs.iter().map(|v| g.meta(*v).clone()).collect::<Vec<TensorMeta>>();
    let mut by_x: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if !matches!(n.op, Op::Linear) || n.inputs.len() < 2 {
            continue;
        }
        let constant_read_once = |v: ValueId| {
            matches!(g.value(v).kind, ValueKind::Constant(_))
                && consumers[v.0].len() == 1
                && !g.outputs.contains(&v)
                && n.inputs.iter().filter(|&&u| u == v).count() == 1
        };
        let w = n.inputs[1];
        if g.meta(w).shape.rank() != 2 || !n.inputs[1..].iter().all(|v| constant_read_once(*v)) {
            continue;
        }
        if g.outputs.contains(&n.outputs[0]) {
            continue;
        }
        by_x.entry(n.inputs[0]).or_default().push(i);
    }
    let mut out = Vec::new();
    for (_, nodes) in by_x {
        // Siblings agree on the weight's dtype and on having a bias (of one dtype).
        let key = |n: usize| {
            let node = &g.nodes[n];
            (g.meta(node.inputs[1]).dtype, node.inputs.get(2).map(|b| g.meta(*b).dtype))
        };
        let mut sets: Vec<Vec<usize>> = Vec::new();
        for n in nodes {
            match sets.iter_mut().find(|s| key(s[0]) == key(n)) {
                Some(s) => s.push(n),
                None => sets.push(vec![n]),
            }
        }
        for mut nodes in sets.into_iter().filter(|s| s.len() > 1) {
            nodes.sort_unstable();
            let kernel = kernel_of(&Op::Linear, &metas(nodes[0]));
            if kernel.is_none() || nodes.iter().any(|&n| kernel_of(&Op::Linear, &metas(n)) != kernel) {
                continue;
            }
            let Some((merged, slices)) = merged_metas(g, &nodes) else { continue };
            if kernel_of(&Op::Linear, &merged) != kernel {
                continue;
            }
            if slices.iter().any(|(op, m)| kernel_of(op, std::slice::from_ref(m)).is_none()) {
                continue;
            }
            if nodes.iter().any(|&n| cost_of(&Op::Linear, &metas(n)).is_some()) {
                log::debug!("fusion: sibling Linears {nodes:?} kept apart on a modelled device");
                continue;
            }
            out.push(Group { nodes, merged, slices });
        }
    }
    out.sort_by_key(|gr| gr.nodes[0]);
    out
}

/// Each sibling's Slice op, with the merged output's meta.
type Slices = Vec<(Op, TensorMeta)>;

/// The merged Linear's input metas, and each sibling's Slice op with the merged output's
/// meta; `None` where the sizes overflow.
fn merged_metas(g: &Graph, nodes: &[usize]) -> Option<(Vec<TensorMeta>, Slices)> {
    let first = &g.nodes[nodes[0]];
    let (x, w0) = (g.meta(first.inputs[0]), g.meta(first.inputs[1]));
    let k = w0.shape.dims()[1];
    let widths: Vec<usize> = nodes.iter().map(|&n| g.meta(g.nodes[n].inputs[1]).shape.dims()[0]).collect();
    let total = widths.iter().try_fold(0usize, |a, &w| a.checked_add(w))?;
    let mut ins = vec![x.clone(), TensorMeta::new(w0.dtype, vec![total, k])];
    if let Some(b) = first.inputs.get(2) {
        ins.push(TensorMeta::new(g.meta(*b).dtype, vec![total]));
    }
    let out = Op::Linear.infer(&ins).ok()?.into_iter().next()?;
    let axis = out.shape.rank().checked_sub(1)? as isize;
    let mut start = 0usize;
    let slices = widths
        .iter()
        .map(|&w| {
            let op = Op::Slice {
                starts: vec![start as i64],
                ends: vec![(start + w) as i64],
                axes: vec![axis],
                steps: vec![],
            };
            start += w;
            (op, out.clone())
        })
        .collect();
    Some((ins, slices))
}

/// `tensors` stacked along their first axis, as derived bytes.
fn stacked(tensors: &[&HostTensor], dims: Vec<usize>, rule: &str) -> HostTensor {
    let sources: Vec<HostBytes> = tensors.iter().map(|t| t.bytes.clone()).collect();
    let len = sources.iter().map(HostBytes::len).sum();
    let bytes = HostBytes::derived_from(&sources, rule, len, |s| s.concat());
    HostTensor { dtype: tensors[0].dtype, shape: dims.into(), bytes }
}

/// `base`, or `base` with a number appended, such that no name in `taken` is that name or
/// that name with `.weight` or `.bias` appended; the three names it takes join `taken`.
fn unused_name(taken: &mut HashSet<String>, base: &str) -> String {
    let free = |n: &str, taken: &HashSet<String>| {
        [n.to_string(), format!("{n}.weight"), format!("{n}.bias")].iter().all(|c| !taken.contains(c))
    };
    let name = std::iter::once(base.to_string())
        .chain((1..).map(|i| format!("{base}#{i}")))
        .find(|n| free(n, taken))
        .unwrap_or_else(|| base.to_string());
    taken.extend([name.clone(), format!("{name}.weight"), format!("{name}.bias")]);
    name
}

/// `g` with every group of sibling Linears merged, and the number of groups merged.
pub(super) fn merge(g: &Graph, kernel_of: KernelOf<'_>, cost_of: CostOf<'_>) -> Result<(Graph, usize)> {
    let groups = groups(g, kernel_of, cost_of);
    if groups.is_empty() {
        return Ok((g.clone(), 0));
    }
    let constant = |v: ValueId| match &g.value(v).kind {
        ValueKind::Constant(t) => Some(t),
        _ => None,
    };
    let root: HashMap<usize, &Group> = groups.iter().map(|gr| (gr.nodes[0], gr)).collect();
    let absorbed: HashSet<usize> = groups.iter().flat_map(|gr| gr.nodes[1..].iter().copied()).collect();
    // The siblings' weights and biases: read by the merged node's stacked copy only.
    let dead: HashSet<ValueId> =
        groups.iter().flat_map(|gr| gr.nodes.iter().flat_map(|&n| g.nodes[n].inputs[1..].iter().copied())).collect();
    let mut taken: HashSet<String> = g.values.iter().map(|v| v.name.clone()).collect();
    let mut out = Graph::new();
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for (i, v) in g.values.iter().enumerate() {
        let id = ValueId(i);
        match &v.kind {
            ValueKind::Input => {
                map.insert(id, out.input(&v.name, v.meta.dtype, v.meta.shape.clone()));
            }
            ValueKind::Constant(t) if !dead.contains(&id) => {
                map.insert(id, out.constant(&v.name, t.clone()));
            }
            _ => {}
        }
    }
    out.inputs = g.inputs.iter().map(|v| map[v]).collect();
    for (i, n) in g.nodes.iter().enumerate() {
        if absorbed.contains(&i) {
            continue;
        }
        let Some(gr) = root.get(&i) else {
            let ins: Vec<ValueId> = n.inputs.iter().map(|v| map[v]).collect();
            for (o, nv) in n.outputs.iter().zip(out.op_multi(&n.name, n.op.clone(), &ins)?) {
                map.insert(*o, nv);
            }
            continue;
        };
        let nodes: Vec<&super::ir::Node> = gr.nodes.iter().map(|&k| &g.nodes[k]).collect();
        let name = unused_name(&mut taken, &nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join("+"));
        let slot = |s: usize| nodes.iter().filter_map(|n| constant(n.inputs[s])).collect::<Vec<&HostTensor>>();
        let mut ins = vec![
            map[&n.inputs[0]],
            out.try_constant(
                &format!("{name}.weight"),
                stacked(&slot(1), gr.merged[1].shape.dims().to_vec(), "stack rows"),
            )?,
        ];
        if let Some(b) = gr.merged.get(2) {
            ins.push(
                out.try_constant(&format!("{name}.bias"), stacked(&slot(2), b.shape.dims().to_vec(), "stack rows"))?,
            );
        }
        let merged = out.op(&name, Op::Linear, &ins)?;
        for (sib, (op, _)) in nodes.iter().zip(&gr.slices) {
            map.insert(sib.outputs[0], out.op(&sib.name, op.clone(), &[merged])?);
        }
    }
    for o in &g.outputs {
        out.output(map[o]);
    }
    out.validate()?;
    Ok((out, groups.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn weight(n: usize, k: usize, seed: f32) -> HostTensor {
        HostTensor::from_vec(vec![n, k], (0..n * k).map(|i| seed + i as f32).collect::<Vec<f32>>()).unwrap()
    }

    /// x `[2, 3, 4]` read by three Linears (widths 4, 2, 4, with biases) and a Relu.
    fn qkv(bias: [bool; 3]) -> Graph {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, vec![2, 3, 4]);
        for (i, (name, n)) in [("q", 4), ("k", 2), ("v", 4)].into_iter().enumerate() {
            let w = g.constant(&format!("{name}.w"), weight(n, 4, i as f32 * 100.0));
            let mut ins = vec![x, w];
            if bias[i] {
                let b = HostTensor::from_vec(vec![n], vec![i as f32; n]).unwrap();
                ins.push(g.constant(&format!("{name}.b"), b));
            }
            let y = g.op(name, Op::Linear, &ins).unwrap();
            let r = g.op(&format!("{name}.relu"), Op::Relu, &[y]).unwrap();
            g.output(r);
        }
        g
    }

    fn any_kernel(op: &Op, _: &[TensorMeta]) -> Option<String> {
        Some(op.name().to_string())
    }

    fn no_model(_: &Op, _: &[TensorMeta]) -> Option<f64> {
        None
    }

    #[test]
    fn siblings_merge_into_one_product_and_slices_named_as_they_were() {
        let (m, groups) = merge(&qkv([true; 3]), &any_kernel, &no_model).unwrap();
        assert_eq!(groups, 1);
        let linears: Vec<_> = m.nodes.iter().filter(|n| matches!(n.op, Op::Linear)).collect();
        assert_eq!(linears.len(), 1);
        assert_eq!(linears[0].name, "q+k+v");
        assert_eq!(m.meta(linears[0].inputs[1]).shape.dims(), &[10, 4]);
        let w = match &m.value(linears[0].inputs[1]).kind {
            ValueKind::Constant(t) => t.clone(),
            _ => unreachable!(),
        };
        assert!(w.bytes.pending(), "the stacked weight is made when first read");
        let floats: Vec<f32> = bytemuck::pod_collect_to_vec(w.bytes.as_slice());
        assert_eq!(floats[..4], [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(floats[16..20], [100.0, 101.0, 102.0, 103.0], "k's rows follow q's");
        assert_eq!(floats[24..28], [200.0, 201.0, 202.0, 203.0], "then v's");
        let slices: Vec<_> = m.nodes.iter().filter(|n| matches!(n.op, Op::Slice { .. })).collect();
        assert_eq!(slices.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["q", "k", "v"]);
        assert_eq!(m.meta(slices[1].outputs[0]).shape.dims(), &[2, 3, 2]);
        // The old weights and biases are gone (not uploaded), the merged ones in.
        let constants: Vec<&str> =
            m.values.iter().filter(|v| matches!(v.kind, ValueKind::Constant(_))).map(|v| v.name.as_str()).collect();
        assert_eq!(constants, ["q+k+v.weight", "q+k+v.bias"]);
    }

    #[test]
    fn mixed_biases_missing_kernels_and_modelled_devices_keep_siblings_apart() {
        // q and v have biases, k has none: q and v merge, k stays.
        let (m, groups) = merge(&qkv([true, false, true]), &any_kernel, &no_model).unwrap();
        assert_eq!(groups, 1);
        assert_eq!(m.nodes.iter().filter(|n| matches!(n.op, Op::Linear)).count(), 2);
        // No Slice kernel on the device.
        let no_slice = |op: &Op, _: &[TensorMeta]| (!matches!(op, Op::Slice { .. })).then(|| op.name().to_string());
        assert_eq!(merge(&qkv([true; 3]), &no_slice, &no_model).unwrap().1, 0);
        // A merged product on another kernel than the siblings'.
        let wide = |op: &Op, ins: &[TensorMeta]| {
            Some(if ins.len() > 1 && ins[1].shape.dims()[0] > 4 { "wide".into() } else { op.name().to_string() })
        };
        assert_eq!(merge(&qkv([true; 3]), &wide, &no_model).unwrap().1, 0);
        // A modelled device keeps them apart.
        let modelled = |_: &Op, _: &[TensorMeta]| Some(1.0);
        assert_eq!(merge(&qkv([true; 3]), &any_kernel, &modelled).unwrap().1, 0);
    }

    #[test]
    fn a_merged_name_already_taken_gets_a_number() {
        let mut g = qkv([true; 3]);
        let t = HostTensor::from_vec(vec![1], vec![0f32]).unwrap();
        g.constant("q+k+v.weight", t);
        let (m, groups) = merge(&g, &any_kernel, &no_model).unwrap();
        assert_eq!(groups, 1);
        assert!(
            m.nodes.iter().any(|n| n.name == "q+k+v#1"),
            "{:?}",
            m.nodes.iter().map(|n| &n.name).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_weight_read_elsewhere_or_an_output_keeps_its_node_apart() {
        let mut g = qkv([true; 3]);
        let w = g.values.iter().position(|v| v.name == "k.w").map(ValueId).unwrap();
        let t = g.op("wt", Op::Relu, &[w]).unwrap();
        g.output(t);
        let (m, groups) = merge(&g, &any_kernel, &no_model).unwrap();
        assert_eq!(groups, 1);
        assert_eq!(m.nodes.iter().filter(|n| matches!(n.op, Op::Linear)).count(), 2, "q+v merged, k kept");
        let mut g = qkv([true; 3]);
        let q = g.values.iter().position(|v| v.name == "q").map(ValueId).unwrap();
        g.output(q);
        assert_eq!(
            merge(&g, &any_kernel, &no_model).unwrap().0.nodes.iter().filter(|n| matches!(n.op, Op::Linear)).count(),
            2
        );
    }
}
