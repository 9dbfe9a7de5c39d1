//! In-place ops in graphs ([`crate::Op::in_place`], e.g. KvCacheWrite): the output of an
//! in-place pair is a new value holding the input's memory after the update. What this
//! asks of a graph, and the order it imposes:
//!
//! * the updated value is not a constant (constants are shared and never written), nor
//!   the memory of another input of the same node;
//! * every other node reading the value before the update (or a Reshape of it) comes
//!   before the updating node in graph order, and is scheduled before it (a
//!   write-after-read edge, [`write_after_read`]); a node that wants the updated contents
//!   reads the output value, which orders it after the write like any data edge;
//! * the node is never dropped for having no readers: its effect is the update.
//!
//! A graph input updated in place is the caller's tensor, written by the run (the way a
//! decode step's KV caches, graph inputs, receive the step's rows).

use super::ir::{Graph, ValueId, ValueKind};
use crate::error::{Error, Result};
use crate::op::Op;

/// The value whose memory `v` is: through Reshapes and in-place outputs to the value
/// first given the memory (an input, a constant or an ordinary node output).
pub fn memory_root(g: &Graph, mut v: ValueId) -> ValueId {
    loop {
        let ValueKind::Node(n) = g.values[v.0].kind else { return v };
        let node = &g.nodes[n.0];
        let Some(k) = node.outputs.iter().position(|o| *o == v) else { return v };
        let from = match &node.op {
            Op::Reshape { .. } => Some(0),
            op => op.in_place().iter().find(|p| p.1 == k).map(|p| p.0),
        };
        match from.and_then(|i| node.inputs.get(i)) {
            Some(&x) => v = x,
            None => return v,
        }
    }
}

/// `v` and the values that are `v` read as another shape (Reshapes of it, chained).
fn shapes_of(g: &Graph, v: ValueId) -> Vec<ValueId> {
    let mut set = vec![v];
    for n in &g.nodes {
        if matches!(n.op, Op::Reshape { .. }) && set.contains(&n.inputs[0]) {
            set.extend(n.outputs.iter().copied());
        }
    }
    set
}

/// The nodes other than `w` that read the value node `w` updates through its in-place
/// input `i` (or a Reshape of it).
fn readers_before_update(g: &Graph, w: usize, i: usize) -> Vec<usize> {
    let set = shapes_of(g, g.nodes[w].inputs[i]);
    (0..g.nodes.len()).filter(|&r| r != w && g.nodes[r].inputs.iter().any(|x| set.contains(x))).collect()
}

/// For each node, the nodes that must finish before it starts because they read a value
/// it updates in place (empty for every node of a graph without in-place ops).
pub fn write_after_read(g: &Graph) -> Vec<Vec<usize>> {
    g.nodes
        .iter()
        .enumerate()
        .map(|(w, n)| {
            let mut d: Vec<usize> = n.op.in_place().iter().flat_map(|&(i, _)| readers_before_update(g, w, i)).collect();
            d.retain(|&r| r < w);
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect()
}

/// Checks the rules of the module's documentation for every in-place node.
pub fn check(g: &Graph) -> Result<()> {
    for (w, n) in g.nodes.iter().enumerate() {
        for &(i, _) in n.op.in_place() {
            let Some(&v) = n.inputs.get(i) else { continue };
            let name = &g.values[v.0].name;
            let root = memory_root(g, v);
            let err = |msg: String| Err(Error::invalid(n.op.name(), format!("node {:?}: {msg}", n.name)));
            if let ValueKind::Constant(_) = g.values[root.0].kind {
                return err(format!("updates {name:?} in place, which is a constant (constants are never written)"));
            }
            if n.inputs.iter().enumerate().any(|(j, x)| j != i && memory_root(g, *x) == root) {
                return err(format!("updates {name:?} in place and reads the same memory as another input"));
            }
            if let Some(r) = readers_before_update(g, w, i).into_iter().find(|&r| r > w) {
                return err(format!(
                    "updates {name:?} in place, but node {:?} reads it after the update; read the node's output \
                     for the updated contents, or order the reader before it",
                    g.nodes[r].name
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    /// Caches as inputs; a reader of the old cache (through a Reshape), the update, a
    /// reader of the updated cache, and a second update chained on the first.
    #[test]
    fn updates_are_ordered_after_the_readers_of_the_old_value() {
        let mut g = Graph::new();
        let kc = g.input("kc", DType::F32, [2, 2, 1, 2]);
        let vc = g.input("vc", DType::F32, [2, 2, 1, 2]);
        let k = g.input("k", DType::F32, [1, 1, 2]);
        let s = g.input("s", DType::I32, [1]);
        let flat = g.op("flat", Op::Reshape { shape: vec![-1] }, &[kc]).unwrap();
        let old = g.op("old", Op::Relu, &[flat]).unwrap();
        let w1 = g.op_multi("w1", Op::KvCacheWrite, &[kc, vc, k, k, s]).unwrap();
        let new = g.op("new", Op::Relu, &[w1[0]]).unwrap();
        let w2 = g.op_multi("w2", Op::KvCacheWrite, &[w1[0], w1[1], k, k, s]).unwrap();
        g.output(old);
        g.output(new);
        g.output(w2[1]);
        check(&g).unwrap();
        assert_eq!(memory_root(&g, w2[0]), kc);
        assert_eq!(memory_root(&g, w2[1]), vc);
        assert_eq!(memory_root(&g, flat), kc);
        let war = write_after_read(&g);
        // w1 (node 2) waits for the Reshape and its reader; w2 (node 4) for `new`.
        assert_eq!(war[2], vec![0, 1]);
        assert_eq!(war[4], vec![3]);
        assert!(war[0].is_empty() && war[1].is_empty() && war[3].is_empty());
        let deps = crate::graph::schedule::dependencies(&g);
        assert!(deps[2].contains(&1) && deps[4].contains(&3) && deps[4].contains(&2));
    }

    #[test]
    fn two_updates_of_one_value_and_aliased_inputs_are_refused() {
        let mut g = Graph::new();
        let kc = g.input("kc", DType::F32, [2, 2, 1, 2]);
        let vc = g.input("vc", DType::F32, [2, 2, 1, 2]);
        let k = g.input("k", DType::F32, [1, 1, 2]);
        let s = g.input("s", DType::I32, [1]);
        let a = g.op_multi("a", Op::KvCacheWrite, &[kc, vc, k, k, s]).unwrap();
        let b = g.op_multi("b", Op::KvCacheWrite, &[kc, vc, k, k, s]).unwrap();
        g.output(a[0]);
        g.output(b[0]);
        let e = check(&g).unwrap_err().to_string();
        assert!(e.contains("node \"a\"") && e.contains("reads it after the update"), "{e}");
        let mut h = Graph::new();
        let kc = h.input("kc", DType::F32, [2, 2, 1, 2]);
        let k = h.input("k", DType::F32, [1, 1, 2]);
        let s = h.input("s", DType::I32, [1]);
        let o = h.op_multi("same", Op::KvCacheWrite, &[kc, kc, k, k, s]).unwrap();
        h.output(o[0]);
        assert!(check(&h).unwrap_err().to_string().contains("same memory as another input"));
    }
}
