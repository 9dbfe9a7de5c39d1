//! Precision rewrites applied at compile time.

use super::ir::{Graph, HostTensor, ValueKind};
use crate::dtype::DType;
use crate::op::TensorMeta;
use crate::runtime::Runtime;
use std::sync::Arc;

/// Converts the f32 constant weights of Linear nodes to bf16 where the runtime would
/// then run the node on a bf16 unit (a kernel whose unit label names bf16); a weight
/// also read by other ops stays f32. Returns how many were converted.
pub(super) fn bf16_weights(rt: &Runtime, graph: &mut Graph) -> usize {
    let consumers = graph.consumers();
    let mut converted = 0;
    for ni in 0..graph.nodes.len() {
        let n = &graph.nodes[ni];
        if !matches!(n.op, crate::op::Op::Linear) {
            continue;
        }
        let w = n.inputs[1];
        let ValueKind::Constant(t) = &graph.values[w.0].kind else { continue };
        if t.dtype != DType::F32 || graph.meta(n.inputs[0]).dtype != DType::F32 {
            continue;
        }
        // Every reader must be a Linear reading it as its weight only, and the graph must
        // not return it: anything else would see bf16 where it expects f32.
        let weight_only = |c: &super::ir::NodeId| {
            let r = &graph.nodes[c.0];
            matches!(r.op, crate::op::Op::Linear) && r.inputs.iter().enumerate().all(|(i, v)| *v != w || i == 1)
        };
        if !consumers[w.0].iter().all(weight_only) || graph.outputs.contains(&w) {
            continue;
        }
        let mut ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
        ins[1].dtype = DType::BF16;
        match rt.select_kernel(&n.op, &ins) {
            Ok(k) if k.unit.label.contains("bf16") => {}
            Ok(k) => {
                log::info!(
                    "precision bf16: node {:?} keeps its f32 weight (no bf16 unit; {} would run)",
                    n.name,
                    k.name
                );
                continue;
            }
            Err(e) => {
                log::info!("precision bf16: node {:?} keeps its f32 weight ({e})", n.name);
                continue;
            }
        }
        let bytes: Vec<u8> = t
            .bytes
            .chunks_exact(4)
            .flat_map(|c| half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_bits().to_le_bytes())
            .collect();
        let ht = HostTensor { dtype: DType::BF16, shape: t.shape.clone(), bytes: Arc::new(bytes) };
        graph.values[w.0].meta.dtype = DType::BF16;
        graph.values[w.0].kind = ValueKind::Constant(ht);
        converted += 1;
    }
    converted
}
