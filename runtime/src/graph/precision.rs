//! Precision rewrites applied at compile time.

use super::ir::{Graph, HostTensor, ValueKind};
use crate::dtype::DType;
use crate::op::TensorMeta;
use crate::runtime::Runtime;

/// Converts the f32 constant weights of Linear nodes to `dtype` (bf16 or fp16) where the
/// backend would then run the node well: for bf16 on a bf16 unit (a kernel whose unit
/// label names bf16), for fp16 on any kernel above the reference tier. A weight also read
/// by other ops stays f32. Returns how many were converted.
///
/// Where the backend says `dtype` is not native on its first visible device
/// ([`crate::Backend::slow_precision`]: e.g. bf16 on a CPU without AVX-512-BF16 or AMX),
/// one warning per graph names the missing feature and what became of the weights.
pub(super) fn low_precision_weights(rt: &Runtime, graph: &mut Graph, dtype: DType) -> usize {
    let consumers = graph.consumers();
    let tag = dtype.name();
    let mut converted = 0;
    let mut candidates = 0;
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
        // not return it: anything else would see bf16 / fp16 where it expects f32.
        let weight_only = |c: &super::ir::NodeId| {
            let r = &graph.nodes[c.0];
            matches!(r.op, crate::op::Op::Linear) && r.inputs.iter().enumerate().all(|(i, v)| *v != w || i == 1)
        };
        if !consumers[w.0].iter().all(weight_only) || graph.outputs.contains(&w) {
            continue;
        }
        candidates += 1;
        let mut ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
        ins[1].dtype = dtype;
        let good = |k: &crate::kernel::KernelInfo| match dtype {
            DType::BF16 => k.unit.label.contains("bf16"),
            _ => k.tier != crate::kernel::Tier::Reference,
        };
        match rt.select_kernel(&n.op, &ins) {
            Ok(k) if good(&k) => {}
            Ok(k) => {
                log::info!("precision {tag}: node {:?} keeps its f32 weight ({} would run)", n.name, k.name);
                continue;
            }
            Err(e) => {
                log::info!("precision {tag}: node {:?} keeps its f32 weight ({e})", n.name);
                continue;
            }
        }
        let floats = t.bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        let bytes: Vec<u8> = if dtype == DType::BF16 {
            floats.flat_map(|v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect()
        } else {
            floats.flat_map(|v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect()
        };
        let ht = HostTensor { dtype, shape: t.shape.clone(), bytes: bytes.into() };
        graph.values[w.0].meta.dtype = dtype;
        graph.values[w.0].kind = ValueKind::Constant(ht);
        converted += 1;
    }
    if candidates > 0 {
        warn_if_not_native(rt, dtype, converted, candidates);
    }
    converted
}

/// The one warning of [`low_precision_weights`] when the backend says `dtype` is slow.
fn warn_if_not_native(rt: &Runtime, dtype: DType, converted: usize, candidates: usize) {
    let inner = &rt.inner;
    let Some(ordinal) = inner.devices.first().map(|d| d.ordinal) else { return };
    let Some(why) = inner.backend.slow_precision(ordinal, dtype) else { return };
    let tag = dtype.name();
    let what = if converted == 0 {
        format!("all {candidates} Linear weights stay f32, the fastest correct path here")
    } else {
        format!("{converted} of {candidates} Linear weights stored in {tag}, computed through f32 (slower than f32)")
    };
    log::warn!("precision {tag} is not native on the {} backend: {why}; {what}", inner.backend.name());
}
