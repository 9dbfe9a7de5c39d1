//! Precision rewrites applied at compile time.

use super::ir::{Graph, HostBytes, HostTensor, ValueKind};
use crate::dtype::DType;
use crate::op::TensorMeta;
use crate::runtime::Runtime;

/// Converts the f32 constant weights of Linear nodes to `dtype` (bf16 or fp16) where the
/// backend would then run the node well: for bf16 on a bf16 unit (a kernel whose unit
/// label names bf16), for fp16 on any kernel above the reference tier. A weight also read
/// by other ops stays f32, except, for bf16, a table that Gathers also read (an output
/// projection tied to the embedding): it is stored once in bf16 and each Gather's rows are
/// cast back to f32. Returns how many were converted.
///
/// With `even_if_slow` ([`super::CompileOptions::store_slow_precision`]), where the backend
/// says bf16 is slow on its first visible device, bf16 weights are also stored for
/// kernels without a bf16 unit (any kernel above the reference tier, as for fp16): half
/// the bytes, widened to f32 in each product. A backend that does not call bf16 slow keeps
/// the bf16-unit rule.
///
/// Where the backend says `dtype` is not native on its first visible device
/// ([`crate::Backend::slow_precision`]: e.g. bf16 on a CPU without AVX-512-BF16 or AMX),
/// one warning per graph names the missing feature and what became of the weights.
pub(super) fn low_precision_weights(rt: &Runtime, graph: &mut Graph, dtype: DType, even_if_slow: bool) -> usize {
    let consumers = graph.consumers();
    let tag = dtype.name();
    let mut converted = 0;
    let mut candidates = 0;
    let mut gathers: Vec<super::ir::NodeId> = Vec::new();
    let inner = &rt.inner;
    // Why `dtype` is slow on the backend's first visible device, if it is.
    let slow = inner.devices.first().and_then(|d| inner.backend.slow_precision(d.ordinal, dtype));
    let any_unit = even_if_slow && slow.is_some();
    for ni in 0..graph.nodes.len() {
        let n = &graph.nodes[ni];
        if !matches!(n.op, crate::op::Op::Linear | crate::op::Op::LinearGelu) {
            continue;
        }
        let w = n.inputs[1];
        let ValueKind::Constant(t) = &graph.values[w.0].kind else { continue };
        if t.dtype != DType::F32 || graph.meta(n.inputs[0]).dtype != DType::F32 {
            continue;
        }
        // Every reader must be a Linear reading it as its weight only, or, for bf16, a
        // Gather of its rows (a table tied to an embedding: the rows gathered are cast back
        // to f32 below), and the graph must not return it: anything else would see bf16 /
        // fp16 where it expects f32.
        let reads_only_as =
            |r: &super::ir::Node, slot: usize| r.inputs.iter().enumerate().all(|(i, v)| *v != w || i == slot);
        let weight_only = |c: &super::ir::NodeId| {
            let r = &graph.nodes[c.0];
            match r.op {
                crate::op::Op::Linear | crate::op::Op::LinearGelu => reads_only_as(r, 1),
                crate::op::Op::Gather { axis: 0 } => dtype == DType::BF16 && reads_only_as(r, 0),
                _ => false,
            }
        };
        if !consumers[w.0].iter().all(weight_only) || graph.outputs.contains(&w) {
            continue;
        }
        candidates += 1;
        let mut ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
        ins[1].dtype = dtype;
        let good = |k: &crate::kernel::KernelInfo| match dtype {
            DType::BF16 if !any_unit => k.unit.label.contains("bf16"),
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
        let ht = in_low_precision(t, dtype);
        graph.values[w.0].meta.dtype = dtype;
        graph.values[w.0].kind = ValueKind::Constant(ht);
        converted += 1;
        gathers.extend(consumers[w.0].iter().filter(|c| matches!(graph.nodes[c.0].op, crate::op::Op::Gather { .. })));
    }
    if candidates > 0
        && let Some(why) = &slow
    {
        warn_if_not_native(rt, dtype, why, converted, candidates, even_if_slow);
    }
    // The last first, so that the earlier positions stay valid.
    gathers.sort_by_key(|g| std::cmp::Reverse(g.0));
    for g in gathers {
        cast_output_back(graph, g.0, dtype);
    }
    converted
}

/// The f32 constant `t` in `dtype` (bf16 or fp16, rounded to nearest even), converted when
/// first read: a compile that finds the result on the device already
/// ([`super::SharedConstants`], keyed on the source's bytes and this rule), such as another
/// input shape of the same model, never converts it.
fn in_low_precision(t: &HostTensor, dtype: DType) -> HostTensor {
    let make = move |src: &[u8]| -> Vec<u8> {
        let floats = src.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        if dtype == DType::BF16 {
            floats.flat_map(|v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect()
        } else {
            floats.flat_map(|v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect()
        }
    };
    let rule = format!("f32 to {}", dtype.name());
    let bytes = HostBytes::derived(&t.bytes, &rule, t.bytes.len() / 4 * 2, make);
    HostTensor { dtype, shape: t.shape.clone(), bytes }
}

/// Node `ni` now writes `dtype` (its input became `dtype`): it writes a new value, and a
/// `Cast` to f32 inserted right after it writes the value the graph had, so its readers see
/// what they saw.
fn cast_output_back(graph: &mut Graph, ni: usize, dtype: DType) {
    use super::ir::{Node, NodeId, Value, ValueId};
    let out = graph.nodes[ni].outputs[0];
    let meta = TensorMeta { dtype, ..graph.meta(out).clone() };
    let name = format!("{}.{}", graph.values[out.0].name, dtype.name());
    for v in &mut graph.values {
        if let ValueKind::Node(p) = &mut v.kind
            && p.0 > ni
        {
            p.0 += 1;
        }
    }
    let raw = ValueId(graph.values.len());
    graph.values.push(Value { name: name.clone(), meta, kind: ValueKind::Node(NodeId(ni)) });
    graph.nodes[ni].outputs[0] = raw;
    graph.values[out.0].kind = ValueKind::Node(NodeId(ni + 1));
    let cast = Node {
        name: format!("{name}.f32"),
        op: crate::op::Op::Cast { to: DType::F32 },
        inputs: vec![raw],
        outputs: vec![out],
    };
    graph.nodes.insert(ni + 1, cast);
}

/// The one warning of [`low_precision_weights`] when the backend says `dtype` is slow
/// (`why`; an info line where the caller asked for such weights).
fn warn_if_not_native(rt: &Runtime, dtype: DType, why: &str, converted: usize, candidates: usize, asked: bool) {
    let inner = &rt.inner;
    let tag = dtype.name();
    if converted > 0 && asked {
        // Asked for (`store_slow_precision`): what the caller chose, not a surprise.
        log::info!(
            "precision {tag}: {converted} of {candidates} Linear weights stored in {tag} and widened to f32 \
             in each product on the {} backend ({why}): half the bytes a memory-bound step reads",
            inner.backend.name()
        );
        return;
    }
    let what = if converted == 0 {
        format!("all {candidates} Linear weights stay f32, the fastest correct path here")
    } else {
        format!("{converted} of {candidates} Linear weights stored in {tag}, computed through f32 (slower than f32)")
    };
    log::warn!("precision {tag} is not native on the {} backend: {why}; {what}", inner.backend.name());
}

/// The nodes a compiled graph's `int8` precision runs as dynamic int8 products: every
/// Linear with f32 x and a constant f32 weight of rank 2 (the weight stays as it is in the
/// graph, so other readers see it unchanged; the backend quantises it when it prepares
/// the node, [`crate::Backend::prepack_int8`]).
pub(super) fn int8_linears(graph: &Graph) -> Vec<bool> {
    graph
        .nodes
        .iter()
        .map(|n| {
            let (Some(x), Some(w)) = (n.inputs.first(), n.inputs.get(1)) else { return false };
            matches!(n.op, crate::op::Op::Linear | crate::op::Op::LinearGelu)
                && matches!(&graph.values[w.0].kind, ValueKind::Constant(t) if t.dtype == DType::F32 && t.shape.rank() == 2)
                && graph.meta(*x).dtype == DType::F32
        })
        .collect()
}

/// The one line of a compiled graph's `int8` precision: how many of the `candidates`
/// Linear layers were `quantised`, and, when none was, the backend's reason (a warning:
/// the graph runs in f32).
pub(super) fn report_int8(rt: &Runtime, device: usize, quantised: usize, candidates: usize) {
    if candidates == 0 {
        return;
    }
    if quantised > 0 {
        log::info!("precision int8: {quantised} of {candidates} Linear layers run as dynamic int8 products");
        return;
    }
    let inner = &rt.inner;
    let why = inner
        .device(device)
        .ok()
        .and_then(|d| inner.backend.int8_missing(d.ordinal))
        .unwrap_or_else(|| "the backend declined every layer".into());
    log::warn!(
        "precision int8 is not available on the {} backend: {why}; all {candidates} Linear layers run in f32",
        inner.backend.name()
    );
}

/// Runs each non-causal Attention with f32 operands on bf16 ones where the backend then
/// runs it on a bf16 tile unit (a kernel whose unit label names bf16 and AMX): `Cast`s to bf16 before
/// it (q, k and v; one cast per value, shared by its readers; a float mask stays f32) and one back
/// to f32 after it, so the graph's other nodes see what they saw. Precision bf16 means
/// the matrix products round their operands to bf16; this extends that from Linear to
/// Attention's two products (the softmax stays f32 inside the kernel). Returns how many
/// Attention nodes changed.
pub(super) fn bf16_attention_operands(rt: &Runtime, graph: &mut Graph) -> usize {
    let mut chosen = Vec::new();
    for (ni, n) in graph.nodes.iter().enumerate() {
        if !matches!(n.op, crate::op::Op::Attention { causal: false, .. }) {
            continue;
        }
        let mut ins: Vec<TensorMeta> = n.inputs.iter().map(|v| graph.meta(*v).clone()).collect();
        if ins.len() < 3 || ins[..3].iter().any(|m| m.dtype != DType::F32) || graph.outputs.contains(&n.outputs[0]) {
            continue;
        }
        // Rows of fewer than 64 keys: the products are too short to pay for the casts (MiniLM
        // at s 32 measured no faster than the f32 kernel).
        let crate::op::Op::Attention { layout, .. } = n.op else { continue };
        if ins[1].shape.rank() != 4 || layout.bhsd(ins[1].shape.dims())[2] < MIN_BF16_ATTENTION_KEYS {
            continue;
        }
        ins.iter_mut().take(3).for_each(|m| m.dtype = DType::BF16);
        // A matrix unit of bf16 tiles (AMX: label `amx-…`): on bf16 dot products alone the
        // small products of attention measured slower than the f32 kernel.
        if rt.select_kernel(&n.op, &ins).is_ok_and(|k| k.unit.label.contains("bf16") && k.unit.label.starts_with("amx"))
        {
            chosen.push(ni);
        }
    }
    let mut g = CastInserter { graph, casts: Default::default() };
    // Forward order with a running offset: each insertion shifts the later nodes.
    let mut offset = 0;
    for ni in chosen.iter().copied() {
        offset += g.around(ni + offset);
    }
    chosen.len()
}

/// The fewest keys for which [`bf16_attention_operands`] runs an Attention in bf16.
const MIN_BF16_ATTENTION_KEYS: usize = 64;

/// Inserts the casts of [`bf16_attention_operands`], reusing one per source value.
struct CastInserter<'a> {
    graph: &'a mut Graph,
    casts: std::collections::HashMap<super::ir::ValueId, super::ir::ValueId>,
}

impl CastInserter<'_> {
    /// A node `op` at position `at` reading `input`, producing a new value `name` of
    /// `meta`; every node from `at` on moves one down.
    fn insert(
        &mut self,
        at: usize,
        name: String,
        op: crate::op::Op,
        input: super::ir::ValueId,
        meta: TensorMeta,
    ) -> super::ir::ValueId {
        use super::ir::{Node, NodeId, Value, ValueId};
        let g = &mut *self.graph;
        for v in &mut g.values {
            if let ValueKind::Node(p) = &mut v.kind
                && p.0 >= at
            {
                p.0 += 1;
            }
        }
        let out = ValueId(g.values.len());
        g.values.push(Value { name: name.clone(), meta, kind: ValueKind::Node(NodeId(at)) });
        g.nodes.insert(at, Node { name, op, inputs: vec![input], outputs: vec![out] });
        out
    }

    /// Casts around the Attention at `ni`; returns how many nodes went in before it.
    fn around(&mut self, mut ni: usize) -> usize {
        let mut before = 0;
        for i in 0..self.graph.nodes[ni].inputs.len() {
            let v = self.graph.nodes[ni].inputs[i];
            // The mask (input 3) stays f32: the kernel reads it in f32, and f32::MIN, a
            // common "masked" value, would round to -inf in bf16 (a fully masked row would
            // then be 0 where the f32 kernel gives the mean of V).
            if self.graph.meta(v).dtype != DType::F32 || i == 3 {
                continue;
            }
            let cast = match self.casts.get(&v) {
                Some(&c) => c,
                None => {
                    let meta = TensorMeta { dtype: DType::BF16, ..self.graph.meta(v).clone() };
                    let name = format!("{}.bf16", self.graph.values[v.0].name);
                    let c = self.insert(ni, name, crate::op::Op::Cast { to: DType::BF16 }, v, meta);
                    ni += 1;
                    before += 1;
                    self.casts.insert(v, c);
                    c
                }
            };
            self.graph.nodes[ni].inputs[i] = cast;
        }
        // The output: the Attention writes a bf16 value, cast back into the old one.
        let out = self.graph.nodes[ni].outputs[0];
        let meta = TensorMeta { dtype: DType::BF16, ..self.graph.meta(out).clone() };
        let name = format!("{}.bf16", self.graph.values[out.0].name);
        let g = &mut *self.graph;
        let raw = super::ir::ValueId(g.values.len());
        g.values.push(super::ir::Value { name: name.clone(), meta, kind: ValueKind::Node(super::ir::NodeId(ni)) });
        g.nodes[ni].outputs[0] = raw;
        for v in &mut g.values {
            if let ValueKind::Node(p) = &mut v.kind
                && p.0 > ni
            {
                p.0 += 1;
            }
        }
        g.values[out.0].kind = ValueKind::Node(super::ir::NodeId(ni + 1));
        let cast = super::ir::Node {
            name: format!("{name}.f32"),
            op: crate::op::Op::Cast { to: DType::F32 },
            inputs: vec![raw],
            outputs: vec![out],
        };
        g.nodes.insert(ni + 1, cast);
        before + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eager conversion the derived bytes replace.
    fn eager(values: &[f32], dtype: DType) -> Vec<u8> {
        let bits = |v: f32| {
            if dtype == DType::BF16 { half::bf16::from_f32(v).to_bits() } else { half::f16::from_f32(v).to_bits() }
        };
        values.iter().flat_map(|&v| bits(v).to_le_bytes()).collect()
    }

    #[test]
    fn a_converted_weight_is_made_on_first_read_and_fingerprinted_without_it() {
        // Values that round differently in bf16 and fp16, a tie included, over a weight
        // above 1 KiB (its fingerprint samples the bytes).
        let values: Vec<f32> =
            (0..700).map(|i| (i as f32 - 350.0) * 0.013_7 + 1.0 / 3.0).chain([1.0 + 1.0 / 256.0]).collect();
        let source = HostTensor::from_vec([values.len()], values.clone()).unwrap();
        for dtype in [DType::BF16, DType::F16] {
            let (a, b) = (in_low_precision(&source, dtype), in_low_precision(&source, dtype));
            assert_eq!((a.dtype, a.shape.dims()), (dtype, source.shape.dims()));
            assert_eq!(a.bytes.len(), 2 * values.len());
            assert!(a.bytes.pending() && b.bytes.pending(), "{dtype:?}: converted before anything read it");
            // The same source and rule: the same fingerprint, taken without converting.
            assert_eq!(a.bytes.fingerprint(), b.bytes.fingerprint(), "{dtype:?}");
            assert!(a.bytes.pending() && b.bytes.pending(), "{dtype:?}: the fingerprint converted");
            assert_ne!(a.bytes.fingerprint(), source.bytes.fingerprint(), "{dtype:?}");
            assert_eq!(a.bytes.as_slice(), eager(&values, dtype).as_slice(), "{dtype:?}");
            assert!(!a.bytes.pending() && b.bytes.pending(), "{dtype:?}: made by its first read, and for it alone");
        }
        let fp = |d| in_low_precision(&source, d).bytes.fingerprint();
        assert_ne!(fp(DType::BF16), fp(DType::F16), "bf16 and fp16 of one source are different bytes");
    }
}
