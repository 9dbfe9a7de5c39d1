//! Which ONNX nodes npurt computes exactly as ONNX does, and the npurt [`Op`] each becomes.
//!
//! A node is claimed when (1) its op type, in the default ONNX domain, names through npurt's
//! op-name table (`runtime::op::names`, the ONNX spellings) a kind listed in [`CLAIMED`], at an
//! opset whose semantics npurt follows; (2) every attribute is one npurt maps, with a value
//! npurt computes as ONNX does (docs/OPS.md: where npurt offers less, the node stays on ORT);
//! (3) its tensors are f32 or f16 (any of npurt's six dtypes at a `Cast`'s ends) with static
//! shapes, or symbolic dims that are named (see [`map_node`]); and (4) npurt's own validation ([`Op::infer`], the op table's) accepts the operands
//! and infers exactly the output dtypes and shapes ORT declares. Anything else is a
//! [`Decline`] with the reason, which the session's verbose log shows. The EP then also asks
//! the backend for a kernel (`Runtime::select_kernel`, in `crate::ep::claim`).

use std::collections::HashMap;

use runtime::op::names;
use runtime::{DType, GeluApprox, Op, OpKind, Shape, TensorMeta};

use crate::graph::{Attr, NodeInfo, ValueMeta};

/// Why a node stays on ORT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decline(pub String);

/// The ONNX ops claimed: the spelling, the npurt kind the op-name table maps it to, and the
/// first opset version with the semantics npurt implements.
pub const CLAIMED: [(&str, OpKind, i32); 18] = [
    ("Relu", OpKind::Relu, 6),
    ("Add", OpKind::Add, 7),
    ("Sub", OpKind::Sub, 7),
    ("Mul", OpKind::Mul, 7),
    ("Div", OpKind::Div, 7),
    ("MatMul", OpKind::MatMul, 9),
    ("Tanh", OpKind::Tanh, 6),
    ("Exp", OpKind::Exp, 6),
    ("Sqrt", OpKind::Sqrt, 6),
    ("Erf", OpKind::Erf, 9),
    // Before 13 Softmax flattened the input to 2-D around `axis`.
    ("Softmax", OpKind::Softmax, 13),
    ("Transpose", OpKind::Permute, 1),
    // Before 11 `C` was required and broadcast by an attribute.
    ("Gemm", OpKind::Gemm, 11),
    ("LayerNormalization", OpKind::LayerNorm, 17),
    ("Gelu", OpKind::Gelu, 20),
    ("Cast", OpKind::Cast, 6),
    // The shape is an input from opset 5 on; it must be a constant (npurt's is an attribute).
    ("Reshape", OpKind::Reshape, 5),
    ("Identity", OpKind::Copy, 1),
];

/// The dtypes claimed for every op but `Cast`. bf16 is not: ORT's CPU EP, the reference,
/// has almost no bf16 kernels.
pub const FLOATS: [DType; 2] = [DType::F32, DType::F16];

/// npurt's dtype for an ONNX element type (`ONNXTensorElementDataType`); `None` for the
/// ones npurt has not (bool included: npurt's u8 is not ONNX's bool).
pub fn dtype_of(elem: i32) -> Option<DType> {
    match elem {
        1 => Some(DType::F32),
        2 => Some(DType::U8),
        6 => Some(DType::I32),
        7 => Some(DType::I64),
        10 => Some(DType::F16),
        16 => Some(DType::BF16),
        _ => None,
    }
}

fn decline<T>(msg: impl Into<String>) -> Result<T, Decline> {
    Err(Decline(msg.into()))
}

/// The claimed entry of `node`'s op: by the op-name table, in the exact ONNX spelling.
fn claimed_kind(node: &NodeInfo) -> Result<OpKind, Decline> {
    if !node.is_onnx() {
        return decline(format!("domain {:?} is not ONNX's", node.domain));
    }
    let Some(kind) = names::lookup(&node.op_type) else {
        return decline("not in npurt's op table");
    };
    let Some(&(_, _, since)) = CLAIMED.iter().find(|(n, k, _)| *n == node.op_type && *k == kind) else {
        return decline(format!("npurt's {kind:?} is not claimed for ONNX's {}", node.op_type));
    };
    if node.since_version < since {
        return decline(format!(
            "opset {} semantics (npurt follows {} from opset {since})",
            node.since_version, node.op_type
        ));
    }
    Ok(kind)
}

/// Attribute readers that refuse any attribute the mapping does not know.
struct Attrs<'a> {
    map: &'a HashMap<String, Attr>,
}

impl Attrs<'_> {
    fn only(&self, known: &[&str]) -> Result<(), Decline> {
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => decline(format!("attribute `{k}` is not mapped")),
            None => Ok(()),
        }
    }
    fn int(&self, name: &str, default: i64) -> Result<i64, Decline> {
        match self.map.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(_) => decline(format!("attribute `{name}` is not an int")),
        }
    }
    fn float(&self, name: &str, default: f32) -> Result<f32, Decline> {
        match self.map.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(_) => decline(format!("attribute `{name}` is not a float")),
        }
    }
    fn string(&self, name: &str, default: &str) -> Result<String, Decline> {
        match self.map.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::String(v)) => Ok(v.clone()),
            Some(_) => decline(format!("attribute `{name}` is not a string")),
        }
    }
    fn flag(&self, name: &str) -> Result<bool, Decline> {
        match self.int(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => decline(format!("attribute `{name}` = {v}")),
        }
    }
}

/// The npurt op for a node whose kind is claimed, from its attributes; `first` is the first
/// input's meta.
fn op_for(kind: OpKind, node: &NodeInfo, first: Option<&TensorMeta>) -> Result<Op, Decline> {
    let a = Attrs { map: &node.attrs };
    let rank = first.map_or(0, |m| m.shape.rank());
    let op = match kind {
        OpKind::Relu
        | OpKind::Add
        | OpKind::Sub
        | OpKind::Mul
        | OpKind::Div
        | OpKind::Tanh
        | OpKind::Exp
        | OpKind::Sqrt
        | OpKind::Erf => {
            a.only(&[])?;
            match kind {
                OpKind::Relu => Op::Relu,
                OpKind::Add => Op::Add,
                OpKind::Sub => Op::Sub,
                OpKind::Mul => Op::Mul,
                OpKind::Div => Op::Div,
                OpKind::Tanh => Op::Tanh,
                OpKind::Exp => Op::Exp,
                OpKind::Sqrt => Op::Sqrt,
                _ => Op::Erf,
            }
        }
        OpKind::MatMul => {
            a.only(&[])?;
            Op::MatMul { trans_a: false, trans_b: false }
        }
        OpKind::Softmax => {
            a.only(&["axis"])?;
            Op::Softmax { axis: a.int("axis", -1)? as isize }
        }
        OpKind::Permute => {
            a.only(&["perm"])?;
            let perm = match node.attrs.get("perm") {
                None => (0..rank).rev().collect(),
                Some(Attr::Ints(p)) if p.iter().all(|&x| x >= 0) => p.iter().map(|&x| x as usize).collect(),
                Some(_) => return decline("attribute `perm` is not a list of non-negative axes"),
            };
            Op::Permute { perm }
        }
        OpKind::Gemm => {
            a.only(&["transA", "transB", "alpha", "beta"])?;
            let (trans_a, trans_b) = (a.flag("transA")?, a.flag("transB")?);
            Op::Gemm { trans_a, trans_b, alpha: a.float("alpha", 1.0)?, beta: a.float("beta", 1.0)? }
        }
        OpKind::LayerNorm => layer_norm(node, &a, rank)?,
        OpKind::Reshape => reshape(node, &a, first)?,
        OpKind::Copy => {
            a.only(&[])?;
            Op::Copy
        }
        OpKind::Gelu => {
            a.only(&["approximate"])?;
            match a.string("approximate", "none")?.as_str() {
                "none" => Op::Gelu(GeluApprox::Erf),
                "tanh" => Op::Gelu(GeluApprox::Tanh),
                other => return decline(format!("attribute `approximate` = {other:?}")),
            }
        }
        OpKind::Cast => {
            a.only(&["to", "saturate"])?;
            let to = a.int("to", 0)?;
            let Some(to) = i32::try_from(to).ok().and_then(dtype_of) else {
                return decline(format!("Cast to ONNX element type {to}"));
            };
            Op::Cast { to }
        }
        other => return decline(format!("npurt's {other:?} is not mapped")),
    };
    Ok(op)
}

/// LayerNormalization as npurt's LayerNorm: the last axis, both scale and bias, f32
/// statistics (`stash_type` 1), and only the `Y` output.
fn layer_norm(node: &NodeInfo, a: &Attrs<'_>, rank: usize) -> Result<Op, Decline> {
    a.only(&["axis", "epsilon", "stash_type"])?;
    let axis = a.int("axis", -1)?;
    if axis != -1 && axis != rank as i64 - 1 {
        return decline(format!("normalises from axis {axis}; npurt normalises the last axis only"));
    }
    if a.int("stash_type", 1)? != 1 {
        return decline("stash_type is not 1 (f32)");
    }
    if node.inputs.len() != 3 || node.inputs[2].is_none() {
        return decline("no bias `B`; npurt's LayerNorm needs scale and bias");
    }
    if node.outputs.iter().skip(1).any(Option::is_some) {
        return decline("Mean or InvStdDev output asked for; npurt has none");
    }
    Ok(Op::LayerNorm { eps: a.float("epsilon", 1e-5)? })
}

/// ONNX's Reshape as npurt's: the shape a small constant, each 0 (ONNX's default
/// `allowzero = 0`: copy the input's dim) replaced by the input's dim, since npurt reads a 0
/// as a zero-size dim.
fn reshape(node: &NodeInfo, a: &Attrs<'_>, first: Option<&TensorMeta>) -> Result<Op, Decline> {
    a.only(&["allowzero"])?;
    if a.int("allowzero", 0)? != 0 {
        return decline("allowzero = 1");
    }
    let Some(shape) = node.inputs.get(1).and_then(Option::as_ref).and_then(|v| v.data.as_ref()) else {
        return decline("the shape is not a small int64 constant");
    };
    let from = first.map(|m| m.shape.dims()).unwrap_or(&[]);
    let mut out = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        let d = match d {
            0 => match from.get(i) {
                Some(&x) => x as i64,
                None => return decline(format!("shape entry {i} is 0 but the input has rank {}", from.len())),
            },
            d => d,
        };
        out.push(isize::try_from(d).map_err(|_| Decline(format!("shape entry {d}")))?);
    }
    Ok(Op::Reshape { shape: out })
}

/// The operand's npurt meta: a known dtype and static dims.
fn meta_of(v: &ValueMeta) -> Result<TensorMeta, Decline> {
    let Some(dtype) = dtype_of(v.elem) else {
        return decline(format!("{:?} has ONNX element type {}", v.name, v.elem));
    };
    match &v.dims {
        Some(dims) if v.is_static() => {
            Ok(TensorMeta::new(dtype, Shape::from(dims.iter().map(|&d| d as usize).collect::<Vec<_>>())))
        }
        _ => decline(format!("{:?} has no static shape", v.name)),
    }
}

/// A claimed node as npurt sees it: the op and the metas of its operands, the node's first
/// `inputs.len()` inputs (a Reshape's shape, read at claim time, is not one).
#[derive(Debug, Clone)]
pub struct Mapped {
    pub op: Op,
    pub inputs: Vec<TensorMeta>,
}

/// Values of symbolic dims (`dim_param` names).
pub type Bindings = HashMap<String, usize>;

/// `v` with its symbolic dims replaced by their values; `None` when a dim is unknown and
/// unnamed, or named but not bound.
fn concrete_value(v: &ValueMeta, b: &Bindings) -> Option<ValueMeta> {
    let dims = v.dims.as_ref()?;
    let mut out = Vec::with_capacity(dims.len());
    for (i, &d) in dims.iter().enumerate() {
        out.push(if d >= 0 { d } else { i64::try_from(*b.get(v.symbol(i)?)?).ok()? });
    }
    Some(ValueMeta { dims: Some(out), symbols: Vec::new(), ..v.clone() })
}

/// `node` with every symbolic dim of its operands replaced by its value in `b`.
pub fn concretize(node: &NodeInfo, b: &Bindings) -> Result<NodeInfo, Decline> {
    let map = |vs: &[Option<ValueMeta>]| -> Result<Vec<Option<ValueMeta>>, Decline> {
        vs.iter()
            .map(|v| match v {
                None => Ok(None),
                Some(v) => concrete_value(v, b)
                    .map(Some)
                    .ok_or_else(|| Decline(format!("{:?} has a dim that is not fixed and not bound", v.name))),
            })
            .collect()
    };
    Ok(NodeInfo { inputs: map(&node.inputs)?, outputs: map(&node.outputs)?, ..node.clone() })
}

/// Binds the symbolic dims of `declared` to the dims of `actual` (a tensor ORT feeds),
/// checking its dtype, its rank, its fixed dims and the symbols bound already.
pub fn bind(declared: &ValueMeta, actual: &TensorMeta, b: &mut Bindings) -> Result<(), String> {
    let dims = declared.dims.as_deref().unwrap_or(&[]);
    let want = format!("{:?} is declared {} {dims:?}, got {actual}", declared.name, declared.elem);
    if dtype_of(declared.elem) != Some(actual.dtype) || dims.len() != actual.shape.rank() {
        return Err(want);
    }
    for (i, (&d, &got)) in dims.iter().zip(actual.shape.dims()).enumerate() {
        if d >= 0 {
            if d as usize != got {
                return Err(want);
            }
            continue;
        }
        let Some(sym) = declared.symbol(i) else { return Err(format!("{want}: dim {i} is unnamed")) };
        match b.get(sym) {
            Some(&v) if v != got => return Err(format!("{want}: `{sym}` is {v} elsewhere")),
            Some(_) => {}
            None => {
                b.insert(sym.to_string(), got);
            }
        }
    }
    Ok(())
}

/// Decides whether npurt claims `node`; on success the npurt op and its input metas. A node
/// with symbolic dims is claimed when every unknown dim is named, its outputs' names all
/// appear in its inputs, and it maps with static shapes under two different sets of distinct
/// values for the names (its metas are those of the first).
pub fn map_node(node: &NodeInfo) -> Result<Mapped, Decline> {
    let operands = || node.inputs.iter().chain(&node.outputs).flatten();
    if operands().all(ValueMeta::is_static) {
        return map_static(node);
    }
    let mut names: Vec<String> = Vec::new();
    for (k, v) in node.inputs.iter().flatten().chain(node.outputs.iter().flatten()).enumerate() {
        let is_output = k >= node.inputs.iter().flatten().count();
        let Some(dims) = &v.dims else { return decline(format!("{:?} has no known rank", v.name)) };
        for i in (0..dims.len()).filter(|&i| dims[i] < 0) {
            let Some(sym) = v.symbol(i) else {
                return decline(format!("{:?} has an unknown dim with no name", v.name));
            };
            if !names.iter().any(|n| n == sym) {
                if is_output {
                    return decline(format!("output {:?} has a dim `{sym}` no input names", v.name));
                }
                names.push(sym.to_string());
            }
        }
    }
    let mut first = None;
    for base in [1009usize, 2003] {
        let b: Bindings = names.iter().enumerate().map(|(k, n)| (n.clone(), base + 2 * k)).collect();
        let m = map_static(&concretize(node, &b)?)
            .map_err(|d| Decline(format!("{} (symbolic dims tried as {b:?})", d.0)))?;
        first.get_or_insert(m);
    }
    first.ok_or_else(|| Decline("no probe".into()))
}

/// [`map_node`] for a node whose every operand has static dims.
fn map_static(node: &NodeInfo) -> Result<Mapped, Decline> {
    let kind = claimed_kind(node)?;
    // Optional inputs are trailing for every claimed op: the present ones, in order.
    let present: Vec<&ValueMeta> = node.inputs.iter().map_while(Option::as_ref).collect();
    if present.len() != node.inputs.iter().flatten().count() {
        return decline("an optional input is missing before a present one");
    }
    // A Reshape's second input, its shape, becomes the op's attribute.
    let operands = if kind == OpKind::Reshape { &present[..present.len().min(1)] } else { &present[..] };
    let inputs = operands.iter().map(|v| meta_of(v)).collect::<Result<Vec<_>, _>>()?;
    let outputs: Vec<&ValueMeta> = node.outputs.iter().flatten().collect();
    let op = op_for(kind, node, inputs.first())?;
    let floats_only = kind != OpKind::Cast;
    for (v, m) in operands.iter().zip(&inputs) {
        if floats_only && !FLOATS.contains(&m.dtype) {
            return decline(format!("{:?} is {} (claimed: f32, f16)", v.name, m.dtype));
        }
    }
    let inferred = op.infer(&inputs).map_err(|e| Decline(format!("npurt refuses it: {e}")))?;
    if inferred.len() != outputs.len() {
        return decline(format!("{} output(s), npurt gives {}", outputs.len(), inferred.len()));
    }
    for (v, m) in outputs.iter().zip(&inferred) {
        let declared = meta_of(v)?;
        if declared != *m {
            return decline(format!("ORT declares {:?} as {declared}, npurt infers {m}", v.name));
        }
    }
    Ok(Mapped { op, inputs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(name: &str, elem: i32, dims: &[i64]) -> Option<ValueMeta> {
        Some(ValueMeta {
            name: name.into(),
            elem,
            dims: Some(dims.to_vec()),
            symbols: vec![],
            constant: false,
            data: None,
            handle: std::ptr::null(),
        })
    }

    fn node(op: &str, since: i32, inputs: Vec<Option<ValueMeta>>, out: &[i64]) -> NodeInfo {
        NodeInfo {
            node: std::ptr::null(),
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            since_version: since,
            inputs,
            outputs: vec![value("y", 1, out)],
            attrs: HashMap::new(),
        }
    }

    #[test]
    fn every_claimed_spelling_is_the_op_name_tables() {
        for (onnx, kind, _) in CLAIMED {
            assert_eq!(names::lookup(onnx), Some(kind), "{onnx}");
        }
    }

    #[test]
    fn claims_f32_static_nodes_that_npurt_validates() {
        let n = node("Add", 14, vec![value("a", 1, &[2, 3]), value("b", 1, &[3])], &[2, 3]);
        assert_eq!(map_node(&n).unwrap().op, Op::Add);
        let n = node("MatMul", 13, vec![value("a", 1, &[2, 3]), value("b", 1, &[3, 4])], &[2, 4]);
        assert!(map_node(&n).is_ok());
        let mut n = node("Relu", 14, vec![value("a", 10, &[3])], &[3]);
        n.outputs = vec![value("y", 10, &[3])];
        assert!(map_node(&n).is_ok(), "f16");
    }

    #[test]
    fn declines_what_npurt_computes_differently_or_not_at_all() {
        let cases = [
            // 1-D MatMul operand (ONNX promotes, npurt does not).
            node("MatMul", 13, vec![value("a", 1, &[3]), value("b", 1, &[3, 4])], &[4]),
            // Symbolic dim.
            node("Relu", 14, vec![value("a", 1, &[-1, 3])], &[-1, 3]),
            // Not f32 or f16.
            node("Relu", 14, vec![value("a", 11, &[3])], &[3]),
            node("Relu", 14, vec![value("a", 16, &[3])], &[3]),
            // Softmax before opset 13.
            node("Softmax", 11, vec![value("a", 1, &[2, 3])], &[2, 3]),
            // Not in the table, or not claimed.
            node("Conv", 11, vec![value("a", 1, &[1, 1, 3, 3])], &[1, 1, 3, 3]),
            // A Reshape whose shape is not a constant.
            node("Reshape", 14, vec![value("a", 1, &[6]), value("s", 7, &[2])], &[2, 3]),
            // Not the ONNX spelling.
            node("relu", 14, vec![value("a", 1, &[3])], &[3]),
            // Output shape differs from what npurt infers.
            node("Add", 14, vec![value("a", 1, &[2, 3]), value("b", 1, &[3])], &[3, 2]),
            // LayerNormalization without bias.
            node("LayerNormalization", 17, vec![value("x", 1, &[2, 4]), value("s", 1, &[4])], &[2, 4]),
        ];
        for n in cases {
            assert!(map_node(&n).is_err(), "{n:?}");
        }
    }

    fn sym(name: &str, dims: &[i64], symbols: &[&str]) -> Option<ValueMeta> {
        let mut v = value(name, 1, dims).unwrap();
        v.symbols = symbols.iter().map(|s| s.to_string()).collect();
        Some(v)
    }

    #[test]
    fn named_symbolic_dims_are_claimed_and_bound_per_run() {
        let mut n = node("MatMul", 13, vec![sym("a", &[-1, -1, 3], &["b", "s", ""]), value("w", 1, &[3, 4])], &[]);
        n.outputs = vec![sym("y", &[-1, -1, 4], &["b", "s", ""])];
        assert!(map_node(&n).is_ok());
        // Bound from the tensors ORT feeds, then made static.
        let mut b = Bindings::new();
        let a = n.inputs[0].as_ref().unwrap();
        bind(a, &TensorMeta::new(DType::F32, [2, 5, 3]), &mut b).unwrap();
        let c = concretize(&n, &b).unwrap();
        assert_eq!(c.outputs[0].as_ref().unwrap().dims, Some(vec![2, 5, 4]));
        assert!(map_node(&c).is_ok());
        // A bound symbol must agree, fixed dims must match, dtypes too.
        assert!(bind(a, &TensorMeta::new(DType::F32, [3, 5, 3]), &mut b).is_err());
        assert!(bind(a, &TensorMeta::new(DType::F32, [2, 5, 4]), &mut Bindings::new()).is_err());
        assert!(bind(a, &TensorMeta::new(DType::F16, [2, 5, 3]), &mut Bindings::new()).is_err());
    }

    #[test]
    fn symbolic_dims_npurt_cannot_relate_are_declined() {
        // An output dim no input names (ORT's `unk__0` after a broadcast of two symbols).
        let mut n = node("Add", 14, vec![sym("a", &[-1], &["n"]), sym("b", &[-1], &["m"])], &[]);
        n.outputs = vec![sym("y", &[-1], &["unk__0"])];
        assert!(map_node(&n).is_err());
        // Two symbols that only broadcast if equal or 1.
        n.outputs = vec![sym("y", &[-1], &["n"])];
        assert!(map_node(&n).is_err());
        // A symbol against a fixed dim.
        let mut n = node("Add", 14, vec![sym("a", &[-1], &["n"]), value("b", 1, &[5])], &[]);
        n.outputs = vec![value("y", 1, &[5])];
        assert!(map_node(&n).is_err());
    }

    #[test]
    fn reshape_takes_its_constant_shape_with_onnx_zeros() {
        let shape = |v: &[i64]| {
            Some(ValueMeta { constant: true, data: Some(v.to_vec()), ..value("s", 7, &[v.len() as i64]).unwrap() })
        };
        // ONNX's 0 copies the input's dim (npurt's would be a zero-size dim).
        let n = node("Reshape", 14, vec![value("a", 1, &[2, 3, 4]), shape(&[0, -1])], &[2, 12]);
        let m = map_node(&n).unwrap();
        assert_eq!(m.op, Op::Reshape { shape: vec![2, -1] });
        assert_eq!(m.inputs.len(), 1, "the shape is not an operand");
        let mut z = n.clone();
        z.attrs.insert("allowzero".into(), Attr::Int(1));
        assert!(map_node(&z).is_err());
        let n = node("Reshape", 14, vec![value("a", 1, &[2, 3, 4]), shape(&[4, 0, 2])], &[4, 3, 2]);
        assert_eq!(map_node(&n).unwrap().op, Op::Reshape { shape: vec![4, 3, 2] });
    }

    #[test]
    fn attributes_map_or_decline() {
        let mut n = node("Softmax", 13, vec![value("a", 1, &[2, 3])], &[2, 3]);
        n.attrs.insert("axis".into(), Attr::Int(0));
        assert_eq!(map_node(&n).unwrap().op, Op::Softmax { axis: 0 });
        n.attrs.insert("unknown".into(), Attr::Int(0));
        assert!(map_node(&n).unwrap_err().0.contains("unknown"));
        let mut g = node("Gelu", 20, vec![value("a", 1, &[3])], &[3]);
        g.attrs.insert("approximate".into(), Attr::String("tanh".into()));
        assert_eq!(map_node(&g).unwrap().op, Op::Gelu(GeluApprox::Tanh));
        let mut ln = node(
            "LayerNormalization",
            17,
            vec![value("x", 1, &[2, 4]), value("s", 1, &[4]), value("b", 1, &[4])],
            &[2, 4],
        );
        assert!(map_node(&ln).is_ok());
        ln.attrs.insert("axis".into(), Attr::Int(0));
        assert!(map_node(&ln).is_err());
        let mut c = node("Cast", 19, vec![value("a", 1, &[3])], &[3]);
        c.outputs = vec![value("y", 7, &[3])];
        c.attrs.insert("to".into(), Attr::Int(7));
        assert_eq!(map_node(&c).unwrap().op, Op::Cast { to: DType::I64 });
        c.attrs.insert("to".into(), Attr::Int(9));
        assert!(map_node(&c).is_err(), "bool is not npurt's u8");
    }
}
