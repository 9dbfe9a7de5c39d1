//! Which ONNX nodes npurt computes exactly as ONNX does, and the npurt [`Op`] each becomes.
//!
//! A node maps ([`map_concrete`]) when (1) its op type, in the default ONNX domain, names
//! through npurt's op-name table (`runtime::op::names`, the ONNX spellings) a kind listed in
//! [`CLAIMED`], or is one of the [`RESHAPES`], at an opset whose semantics npurt follows;
//! (2) every attribute is one npurt maps, with a value npurt computes as ONNX does (docs/OPS.md:
//! where npurt offers less, the node stays on ORT); (3) its tensors have dtypes the op claims
//! (f32 or f16 for float arithmetic, i32, i64 and u8 for Add, Sub, Mul and Div, any for the
//! ops that move elements; see `check_dtypes`) and concrete dims; and (4) npurt's own
//! validation ([`Op::infer`], the op table's) accepts the operands. Anything else is a
//! [`Decline`] with the reason, which the session's verbose log shows.
//!
//! `GetCapability` does not map nodes one by one: [`walk`] gives every value of the graph its
//! dims, folds shape subgraphs on the host ([`fold`]), checks the outputs against ORT's
//! declarations, and asks the backend for a kernel (`Runtime::select_kernel`, in
//! `crate::ep::claim`). [`map_node`] is the per-node check with ORT's declared dims alone.

use std::collections::HashMap;

use runtime::graph::HostTensor;
use runtime::op::names;
use runtime::{DType, GeluApprox, Op, OpKind, Shape, TensorMeta};

use base::{Attrs, decline};
pub use base::{BOOL, Decline, dtype_of, operand_dtype};

use crate::graph::{Attr, NodeInfo, ValueMeta};

mod base;
mod data;
mod decoder;
pub mod fold;
mod shape;
pub mod walk;

/// The ONNX ops claimed: the spelling, the npurt kind the op-name table maps it to, and the
/// first opset version with the semantics npurt implements.
pub const CLAIMED: [(&str, OpKind, i32); 32] = [
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
    ("Neg", OpKind::Neg, 6),
    ("Sigmoid", OpKind::Sigmoid, 6),
    // Base and exponent of one float dtype (checked with the operands).
    ("Pow", OpKind::Pow, 7),
    // ONNX's bool output is npurt's u8 (0 or 1, the same bytes).
    ("Equal", OpKind::Equal, 7),
    // Negative indices count from the end from opset 11 on, as npurt's Gather does.
    ("Gather", OpKind::Gather, 11),
    // ONNX's bool condition is npurt's u8; x and y are moved whole.
    ("Where", OpKind::Where, 9),
    // `axis` required from opset 4 on.
    ("Concat", OpKind::Concat, 4),
    // Starts, ends, axes and steps are inputs from opset 10 on (constants or folded values).
    ("Slice", OpKind::Slice, 10),
    // The shape a constant or folded value.
    ("Expand", OpKind::Expand, 8),
    // Negative axes from opset 11 on; the axes an input from 13 (ReduceSum) and 18
    // (ReduceMean) on, a constant or folded value.
    ("ReduceSum", OpKind::ReduceSum, 11),
    ("ReduceMean", OpKind::ReduceMean, 11),
    // New in opset 23; the last axis, f32 statistics.
    ("RMSNormalization", OpKind::RmsNorm, 23),
    // 4-D X with position_ids, the whole head rotated (`decoder::rotary`).
    ("RotaryEmbedding", OpKind::Rope, 23),
    // 4-D, no mask and no past; is_causal with as many queries as keys (`decoder::attention`).
    ("Attention", OpKind::Attention, 23),
];

/// ONNX's `Split`, which npurt's op-name table does not name, runs as one npurt Slice per
/// output from this opset on (the `split` sizes an attribute before 13, an input from 13).
pub const SPLIT_SINCE: i32 = 2;

/// ONNX's `ConstantOfShape` (opset 9 on) that does not fold on the host (a float `value`) runs
/// as npurt's Expand of its `value`, a one-element constant, to the shape, a constant or
/// folded value.
pub const CONSTANT_OF_SHAPE_SINCE: i32 = 9;

/// ONNX ops that npurt's op-name table does not name but that are a reshape of their first
/// input, claimed as npurt's `Reshape` to the shape ORT's operands make: the op and the
/// first opset whose semantics the mapping follows (negative axes from 11 on).
pub const RESHAPES: [(&str, i32); 3] = [("Unsqueeze", 11), ("Squeeze", 11), ("Flatten", 11)];

/// The dtypes claimed for every op but `Cast`. bf16 is not: ORT's CPU EP, the reference,
/// has almost no bf16 kernels.
pub const FLOATS: [DType; 2] = [DType::F32, DType::F16];

/// The claimed entry of `node`'s op: by the op-name table, in the exact ONNX spelling.
fn claimed_kind(node: &NodeInfo) -> Result<OpKind, Decline> {
    if !node.is_onnx() {
        return decline(format!("domain {:?} is not ONNX's", node.domain));
    }
    for (op, since, kind) in
        [("Split", SPLIT_SINCE, OpKind::Slice), ("ConstantOfShape", CONSTANT_OF_SHAPE_SINCE, OpKind::Expand)]
    {
        if node.op_type == op {
            if node.since_version < since {
                return decline(format!("opset {} semantics (npurt follows from opset {since})", node.since_version));
            }
            return Ok(kind);
        }
    }
    if let Some(&(_, since)) = RESHAPES.iter().find(|(n, _)| *n == node.op_type) {
        if node.since_version < since {
            return decline(format!("opset {} semantics (npurt follows from opset {since})", node.since_version));
        }
        return Ok(OpKind::Reshape);
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
        | OpKind::Erf
        | OpKind::Neg
        | OpKind::Sigmoid
        | OpKind::Pow
        | OpKind::Equal
        | OpKind::Where => {
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
                OpKind::Neg => Op::Neg,
                OpKind::Sigmoid => Op::Sigmoid,
                OpKind::Pow => Op::Pow,
                OpKind::Equal => Op::Equal,
                OpKind::Where => Op::Where,
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
        OpKind::LayerNorm => layer_norm(node, &a, first)?,
        OpKind::RmsNorm => rms_norm(&a, first)?,
        OpKind::Rope => decoder::rotary(node, &a, first)?,
        OpKind::Attention => decoder::attention(node, &a, first)?,
        OpKind::Concat => data::concat(&a)?,
        OpKind::Slice => data::slice(node, &a)?,
        OpKind::Expand => data::expand(node, &a)?,
        OpKind::ReduceSum | OpKind::ReduceMean => data::reduce(node, &a, kind)?,
        OpKind::Reshape if node.op_type == "Reshape" => reshape(node, &a, first)?,
        OpKind::Reshape => shape::reshape_like(node, &a, first)?,
        OpKind::Gather => {
            a.only(&["axis"])?;
            let axis = a.int("axis", 0)?;
            let axis = if axis < 0 { axis + rank as i64 } else { axis };
            match usize::try_from(axis) {
                Ok(axis) if axis < rank.max(1) => Op::Gather { axis },
                _ => return decline(format!("attribute `axis` = {} for rank {rank}", a.int("axis", 0)?)),
            }
        }
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
            // `saturate` (float8 targets) and `round_mode` (Cast-24 on: float8e8m0 targets only)
            // change nothing for npurt's targets.
            a.only(&["to", "saturate", "round_mode"])?;
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

/// LayerNormalization as npurt's LayerNorm: the last axis, both scale and bias, and only the
/// `Y` output. `stash_type` 1 (f32 statistics) or 0 (the input's dtype): for an f32 input the
/// same; for an f16 one ONNX's statistics would be f16, but ORT's CPU EP, the reference, computes
/// them in f32 whatever `stash_type` says (bit-identical outputs for 0 and 1), as npurt's
/// wider statistics match within one f16 rounding.
fn layer_norm(node: &NodeInfo, a: &Attrs<'_>, first: Option<&TensorMeta>) -> Result<Op, Decline> {
    a.only(&["axis", "epsilon", "stash_type"])?;
    let rank = first.map_or(0, |m| m.shape.rank());
    let axis = a.int("axis", -1)?;
    if axis != -1 && axis != rank as i64 - 1 {
        return decline(format!("normalises from axis {axis}; npurt normalises the last axis only"));
    }
    match a.int("stash_type", 1)? {
        0 | 1 => {}
        other => return decline(format!("stash_type {other} (npurt's statistics are f32 or wider)")),
    }
    if node.inputs.len() != 3 || node.inputs[2].is_none() {
        return decline("no bias `B`; npurt's LayerNorm needs scale and bias");
    }
    if node.outputs.iter().skip(1).any(Option::is_some) {
        return decline("Mean or InvStdDev output asked for; npurt has none");
    }
    Ok(Op::LayerNorm { eps: a.float("epsilon", 1e-5)? })
}

/// RMSNormalization (opset 23) as npurt's RmsNorm: the last axis only (`axis` -1, or the
/// last by number) and `stash_type` 1, the default: statistics in f32, which npurt's f64
/// ones match within rounding; 0 (statistics in the input's dtype) is declined. The scale
/// must be `[D]`: npurt's validation declines the other shapes ONNX broadcasts.
fn rms_norm(a: &Attrs<'_>, first: Option<&TensorMeta>) -> Result<Op, Decline> {
    a.only(&["axis", "epsilon", "stash_type"])?;
    let rank = first.map_or(0, |m| m.shape.rank());
    let axis = a.int("axis", -1)?;
    if axis != -1 && axis != rank as i64 - 1 {
        return decline(format!("normalises from axis {axis}; npurt normalises the last axis only"));
    }
    match a.int("stash_type", 1)? {
        1 => Ok(Op::RmsNorm { eps: a.float("epsilon", 1e-5)? }),
        other => decline(format!("stash_type {other} (npurt's statistics are f64, not the input's dtype)")),
    }
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
pub fn meta_of(v: &ValueMeta) -> Result<TensorMeta, Decline> {
    let Some(dtype) = operand_dtype(v.elem) else {
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
    /// The operands' metas as the op sees them (after [`Mapped::pre`]).
    pub inputs: Vec<TensorMeta>,
    /// Per operand, the shape it is reshaped to before the op (a 1-D MatMul operand, as
    /// ONNX promotes it); empty when none is.
    pub pre: Vec<Option<Vec<isize>>>,
    /// The shape the op's output is reshaped to (the dims a 1-D MatMul operand added).
    pub post: Option<Vec<isize>>,
    /// One op per further output, on the same operands (a Split's outputs after the first,
    /// `op` making the first); empty for a node of one output.
    pub rest: Vec<Op>,
    /// The op's one operand when it is a constant the node makes rather than one of its
    /// inputs (a ConstantOfShape's `value`, expanded to the shape).
    pub fill: Option<Box<HostTensor>>,
}

impl Mapped {
    /// The names of `node`'s inputs that are the op's operands, in order.
    pub fn operand_names<'a>(&self, node: &'a NodeInfo) -> Vec<&'a str> {
        let n = if self.fill.is_some() { 0 } else { self.inputs.len() };
        node.inputs.iter().flatten().take(n).map(|v| v.name.as_str()).collect()
    }
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
/// checking its dtype, its rank, its fixed dims and the symbols bound already; an unnamed
/// unknown dim takes the tensor's.
pub fn bind(declared: &ValueMeta, actual: &TensorMeta, b: &mut Bindings) -> Result<(), String> {
    let dims = declared.dims.as_deref().unwrap_or(&[]);
    let want = format!("{:?} is declared {} {dims:?}, got {actual}", declared.name, declared.elem);
    if operand_dtype(declared.elem) != Some(actual.dtype) || dims.len() != actual.shape.rank() {
        return Err(want);
    }
    for (i, (&d, &got)) in dims.iter().zip(actual.shape.dims()).enumerate() {
        if d >= 0 {
            if d as usize != got {
                return Err(want);
            }
            continue;
        }
        // An unnamed dim (ORT could not infer it) takes the tensor's: the group is walked
        // again with the dims fed, as when it was claimed with the dims the walk made.
        let Some(sym) = declared.symbol(i) else { continue };
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

/// Whether `node` maps with ORT's declared dims alone (no graph around it); on success the npurt
/// op and its input metas. A node with symbolic dims maps when every unknown dim is named, its outputs' names all
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

/// [`map_node`] for a node whose every operand has static dims: [`map_concrete`], and ORT's
/// declared outputs exactly the inferred ones.
fn map_static(node: &NodeInfo) -> Result<Mapped, Decline> {
    let (m, inferred) = map_concrete(node)?;
    let outputs: Vec<&ValueMeta> = node.outputs.iter().flatten().collect();
    for (v, m) in outputs.iter().zip(&inferred) {
        let declared = meta_of(v)?;
        if declared != *m {
            return decline(format!("ORT declares {:?} as {declared}, npurt infers {m}", v.name));
        }
    }
    Ok(m)
}

/// The dtypes npurt computes as ONNX does for `kind`'s operands.
fn check_dtypes(kind: OpKind, operands: &[&ValueMeta], inputs: &[TensorMeta]) -> Result<(), Decline> {
    let allowed: &[DType] = match kind {
        // Moves or converts bytes: any dtype.
        OpKind::Cast | OpKind::Reshape | OpKind::Copy => return Ok(()),
        OpKind::Equal => &[DType::F32, DType::F16, DType::I32, DType::I64, DType::U8],
        // Integers wrap in their width on every tier as ONNX's (two's complement, u8 mod 256),
        // and Div truncates; npurt's x / 0 = 0 is one answer to ONNX's undefined one.
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div => {
            &[DType::F32, DType::F16, DType::I32, DType::I64, DType::U8]
        }
        // Moves whole elements of any dtype; Where's condition must be ONNX's bool.
        OpKind::Concat | OpKind::Slice | OpKind::Expand => return Ok(()),
        OpKind::Where => {
            return match operands.first() {
                Some(c) if c.elem == BOOL => Ok(()),
                Some(c) => decline(format!("condition {:?} has ONNX element type {}, not bool", c.name, c.elem)),
                None => decline("no condition"),
            };
        }
        _ => &FLOATS,
    };
    for (k, (v, m)) in operands.iter().zip(inputs).enumerate() {
        // Gather moves whole elements of its data, of any dtype, by i32 or i64 indices;
        // Rope's fourth operand is its positions.
        let ok = if kind == OpKind::Gather {
            k == 0 || matches!(m.dtype, DType::I32 | DType::I64)
        } else if kind == OpKind::Rope && k == 3 {
            matches!(m.dtype, DType::I32 | DType::I64)
        } else {
            allowed.contains(&m.dtype)
        };
        if !ok {
            return decline(format!("{:?} is {} (claimed: {allowed:?})", v.name, m.dtype));
        }
    }
    Ok(())
}

/// Maps a node whose operands have static dims and returns, besides the mapping, the
/// output metas npurt infers (ORT's declared ones are not checked here).
pub fn map_concrete(node: &NodeInfo) -> Result<(Mapped, Vec<TensorMeta>), Decline> {
    let kind = claimed_kind(node)?;
    if node.op_type == "ConstantOfShape" {
        let (op, value) = data::constant_of_shape(node, &Attrs { map: &node.attrs })?;
        let scalar = TensorMeta::new(value.dtype, value.shape.clone());
        let out = op.infer(std::slice::from_ref(&scalar)).map_err(|e| Decline(format!("npurt refuses it: {e}")))?;
        let fill = Some(Box::new(value));
        return Ok((Mapped { op, inputs: vec![scalar], pre: Vec::new(), post: None, rest: Vec::new(), fill }, out));
    }
    // Optional inputs are trailing for every claimed op: the present ones, in order.
    let present: Vec<&ValueMeta> = node.inputs.iter().map_while(Option::as_ref).collect();
    if present.len() != node.inputs.iter().flatten().count() {
        return decline("an optional input is missing before a present one");
    }
    // The inputs after the first of a Reshape (its shape, or the axes of an Unsqueeze or
    // Squeeze), a Slice (its bounds), an Expand (its shape), a Split (its sizes) or a
    // reduction (its axes) become the op's attributes.
    let data_only =
        matches!(kind, OpKind::Reshape | OpKind::Slice | OpKind::Expand | OpKind::ReduceSum | OpKind::ReduceMean);
    let operands = if data_only { &present[..present.len().min(1)] } else { &present[..] };
    let inputs = operands.iter().map(|v| meta_of(v)).collect::<Result<Vec<_>, _>>()?;

    let outputs: Vec<&ValueMeta> = node.outputs.iter().flatten().collect();
    let (op, rest) = if node.op_type == "Split" {
        let mut ops = data::split(node, &Attrs { map: &node.attrs }, inputs.first())?;
        let first = ops.remove(0);
        (first, ops)
    } else {
        (op_for(kind, node, inputs.first())?, Vec::new())
    };
    check_dtypes(kind, operands, &inputs)?;
    let (pre, post, shaped) = shape::promote_matmul(&op, &inputs)?;
    let mut inferred = op.infer(&shaped).map_err(|e| {
        let named: Vec<String> = operands.iter().zip(&shaped).map(|(v, m)| format!("{:?} {m}", v.name)).collect();
        Decline(format!("npurt refuses it with operands [{}]: {e}", named.join(", ")))
    })?;
    if let (Some(post), Some(out)) = (&post, inferred.first_mut()) {
        let dims: Vec<usize> = post.iter().map(|&d| d as usize).collect();
        out.shape = Shape::from(dims);
    }
    for o in &rest {
        let more = o.infer(&shaped).map_err(|e| Decline(format!("npurt refuses a further output's {o:?}: {e}")))?;
        inferred.extend(more);
    }
    if inferred.len() != outputs.len() {
        return decline(format!("{} output(s), npurt gives {}", outputs.len(), inferred.len()));
    }
    Ok((Mapped { op, inputs: shaped, pre, post, rest, fill: None }, inferred))
}

#[cfg(test)]
mod tests;
