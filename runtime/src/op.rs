//! The operator table: every op's attributes, validation, shape inference and cost.
//!
//! Validation is pure: it looks at dtypes and shapes only, so it runs before anything is
//! enqueued and every backend sees the same rules.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::size;
use std::fmt;

/// Which formula GELU uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GeluApprox {
    /// `0.5 x (1 + erf(x / sqrt 2))`
    Erf,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`
    Tanh,
}

/// An operator with its attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `a @ b` for 2-D or batched operands (batch dims broadcast); optional transposes of
    /// the last two dims.
    MatMul {
        trans_a: bool,
        trans_b: bool,
    },
    /// `alpha * op(a) @ op(b) + beta * c`, 2-D; `c` (optional third input) broadcasts to
    /// the output.
    Gemm {
        trans_a: bool,
        trans_b: bool,
        alpha: f32,
        beta: f32,
    },
    /// `x @ w^T + bias`: x `[.., K]`, w `[N, K]`, optional bias `[N]`.
    Linear,
    Add,
    Sub,
    Mul,
    /// Division; integer division by zero yields 0.
    Div,
    Relu,
    Gelu(GeluApprox),
    Tanh,
    Erf,
    Exp,
    Sqrt,
    Softmax {
        axis: isize,
    },
    /// Normalises over the last axis: inputs x, gamma `[D]`, beta `[D]`.
    LayerNorm {
        eps: f32,
    },
    /// Output dim `i` is input dim `perm[i]`.
    Permute {
        perm: Vec<usize>,
    },
    /// New shape; one entry may be -1.
    Reshape {
        shape: Vec<isize>,
    },
    /// Takes slices of `data` along `axis` at `indices` (i32/i64). Embedding is
    /// `Gather { axis: 0 }` on a `[vocab, dim]` table.
    Gather {
        axis: usize,
    },
    Cast {
        to: DType,
    },
    ReduceSum {
        axes: Vec<isize>,
        keepdims: bool,
    },
    ReduceMean {
        axes: Vec<isize>,
        keepdims: bool,
    },
    /// `x * factor`.
    Scale {
        factor: f32,
    },
    Copy,
    /// Scaled dot-product attention: q `[B, H, S, D]`, k `[B, H, T, D]`, v `[B, H, T, Dv]`,
    /// optional mask broadcastable to `[B, H, S, T]`: u8 (non-zero keeps) or float
    /// (added to the scores). `scale` defaults to `1/sqrt(D)`.
    Attention {
        scale: Option<f32>,
    },
    /// `gelu(x + bias)`, bias `[N]` on the last axis.
    BiasGelu(GeluApprox),
    /// `layernorm(x + residual)`: inputs x, residual, gamma, beta.
    AddLayerNorm {
        eps: f32,
    },
}

/// The op's identity without attributes; kernels are registered per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    MatMul,
    Gemm,
    Linear,
    Add,
    Sub,
    Mul,
    Div,
    Relu,
    Gelu,
    Tanh,
    Erf,
    Exp,
    Sqrt,
    Softmax,
    LayerNorm,
    Permute,
    Reshape,
    Gather,
    Cast,
    ReduceSum,
    ReduceMean,
    Scale,
    Copy,
    Attention,
    BiasGelu,
    AddLayerNorm,
}

impl OpKind {
    pub const ALL: [OpKind; 26] = [
        OpKind::MatMul,
        OpKind::Gemm,
        OpKind::Linear,
        OpKind::Add,
        OpKind::Sub,
        OpKind::Mul,
        OpKind::Div,
        OpKind::Relu,
        OpKind::Gelu,
        OpKind::Tanh,
        OpKind::Erf,
        OpKind::Exp,
        OpKind::Sqrt,
        OpKind::Softmax,
        OpKind::LayerNorm,
        OpKind::Permute,
        OpKind::Reshape,
        OpKind::Gather,
        OpKind::Cast,
        OpKind::ReduceSum,
        OpKind::ReduceMean,
        OpKind::Scale,
        OpKind::Copy,
        OpKind::Attention,
        OpKind::BiasGelu,
        OpKind::AddLayerNorm,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            OpKind::MatMul => "MatMul",
            OpKind::Gemm => "Gemm",
            OpKind::Linear => "Linear",
            OpKind::Add => "Add",
            OpKind::Sub => "Sub",
            OpKind::Mul => "Mul",
            OpKind::Div => "Div",
            OpKind::Relu => "ReLU",
            OpKind::Gelu => "GELU",
            OpKind::Tanh => "Tanh",
            OpKind::Erf => "Erf",
            OpKind::Exp => "Exp",
            OpKind::Sqrt => "Sqrt",
            OpKind::Softmax => "Softmax",
            OpKind::LayerNorm => "LayerNorm",
            OpKind::Permute => "Permute",
            OpKind::Reshape => "Reshape",
            OpKind::Gather => "Gather",
            OpKind::Cast => "Cast",
            OpKind::ReduceSum => "ReduceSum",
            OpKind::ReduceMean => "ReduceMean",
            OpKind::Scale => "Scale",
            OpKind::Copy => "Copy",
            OpKind::Attention => "Attention",
            OpKind::BiasGelu => "BiasGelu",
            OpKind::AddLayerNorm => "AddLayerNorm",
        }
    }

    /// Looks a kind up by name, case-insensitively; accepts `Transpose` and `Embedding`.
    pub fn parse(s: &str) -> Option<OpKind> {
        let l = s.to_ascii_lowercase();
        match l.as_str() {
            "transpose" => return Some(OpKind::Permute),
            "embedding" => return Some(OpKind::Gather),
            _ => {}
        }
        OpKind::ALL.into_iter().find(|k| k.name().to_ascii_lowercase() == l)
    }

    /// Ops whose inputs are all element-wise maps to the output (no reduction).
    pub const fn is_elementwise(self) -> bool {
        matches!(
            self,
            OpKind::Add
                | OpKind::Sub
                | OpKind::Mul
                | OpKind::Div
                | OpKind::Relu
                | OpKind::Gelu
                | OpKind::Tanh
                | OpKind::Erf
                | OpKind::Exp
                | OpKind::Sqrt
                | OpKind::Scale
                | OpKind::Cast
                | OpKind::Copy
        )
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What validation needs to know about an operand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorMeta {
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorMeta {
        TensorMeta { dtype, shape: shape.into() }
    }
    /// Bytes of the operand (saturating; [`crate::size::bytes`] checks it).
    pub fn bytes(&self) -> usize {
        self.shape.numel().saturating_mul(self.dtype.size())
    }
}

impl fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.dtype, self.shape)
    }
}

/// `(min, max)` number of inputs of each op.
fn arity(kind: OpKind) -> (usize, usize) {
    match kind {
        OpKind::MatMul => (2, 2),
        OpKind::Gemm => (2, 3),
        OpKind::Linear => (2, 3),
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div => (2, 2),
        OpKind::LayerNorm => (3, 3),
        OpKind::Gather => (2, 2),
        OpKind::Attention => (3, 4),
        OpKind::BiasGelu => (2, 2),
        OpKind::AddLayerNorm => (4, 4),
        _ => (1, 1),
    }
}

/// Names of the operands in error messages.
fn operand_name(kind: OpKind, i: usize) -> &'static str {
    let names: &[&str] = match kind {
        OpKind::MatMul => &["a", "b"],
        OpKind::Gemm => &["a", "b", "c"],
        OpKind::Linear => &["x", "weight", "bias"],
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div => &["a", "b"],
        OpKind::LayerNorm => &["x", "gamma", "beta"],
        OpKind::Gather => &["data", "indices"],
        OpKind::Attention => &["q", "k", "v", "mask"],
        OpKind::BiasGelu => &["x", "bias"],
        OpKind::AddLayerNorm => &["x", "residual", "gamma", "beta"],
        _ => &["x"],
    };
    names.get(i).copied().unwrap_or("operand")
}

impl Op {
    pub fn kind(&self) -> OpKind {
        match self {
            Op::MatMul { .. } => OpKind::MatMul,
            Op::Gemm { .. } => OpKind::Gemm,
            Op::Linear => OpKind::Linear,
            Op::Add => OpKind::Add,
            Op::Sub => OpKind::Sub,
            Op::Mul => OpKind::Mul,
            Op::Div => OpKind::Div,
            Op::Relu => OpKind::Relu,
            Op::Gelu(_) => OpKind::Gelu,
            Op::Tanh => OpKind::Tanh,
            Op::Erf => OpKind::Erf,
            Op::Exp => OpKind::Exp,
            Op::Sqrt => OpKind::Sqrt,
            Op::Softmax { .. } => OpKind::Softmax,
            Op::LayerNorm { .. } => OpKind::LayerNorm,
            Op::Permute { .. } => OpKind::Permute,
            Op::Reshape { .. } => OpKind::Reshape,
            Op::Gather { .. } => OpKind::Gather,
            Op::Cast { .. } => OpKind::Cast,
            Op::ReduceSum { .. } => OpKind::ReduceSum,
            Op::ReduceMean { .. } => OpKind::ReduceMean,
            Op::Scale { .. } => OpKind::Scale,
            Op::Copy => OpKind::Copy,
            Op::Attention { .. } => OpKind::Attention,
            Op::BiasGelu(_) => OpKind::BiasGelu,
            Op::AddLayerNorm { .. } => OpKind::AddLayerNorm,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// `Transpose` of two axes of a rank-`rank` tensor.
    pub fn transpose(rank: usize, a: usize, b: usize) -> Op {
        let mut perm: Vec<usize> = (0..rank).collect();
        if a < rank && b < rank {
            perm.swap(a, b);
        }
        Op::Permute { perm }
    }

    /// Number of inputs this op accepts, as `(min, max)`.
    pub fn arity(&self) -> (usize, usize) {
        arity(self.kind())
    }

    /// Validates the inputs and infers the outputs' dtypes and shapes. An operand or an
    /// output whose size overflows (see [`crate::size`]) is an [`Error::Invalid`] naming it.
    pub fn infer(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (kind, op) = (self.kind(), self.name());
        for (i, m) in inputs.iter().enumerate() {
            size::operand_bytes(op, operand_name(kind, i), m.shape.dims(), m.dtype)?;
        }
        let outs = self.infer_shapes(inputs)?;
        for (i, m) in outs.iter().enumerate() {
            if let Err(e) = size::bytes(format_args!("output {i}"), m.shape.dims(), m.dtype) {
                let ins: Vec<String> =
                    inputs.iter().enumerate().map(|(j, t)| format!("{} is {t}", operand_name(kind, j))).collect();
                return Err(Error::invalid(op, format!("{e} ({})", ins.join(", "))));
            }
        }
        Ok(outs)
    }

    fn infer_shapes(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let kind = self.kind();
        let op = kind.name();
        let (lo, hi) = arity(kind);
        if inputs.len() < lo || inputs.len() > hi {
            let want = if lo == hi { format!("{lo}") } else { format!("{lo} to {hi}") };
            return Err(Error::invalid(op, format!("expects {want} inputs, got {}", inputs.len())));
        }
        let name = |i: usize| operand_name(kind, i);
        let need_float = |i: usize| -> Result<()> {
            if inputs[i].dtype.is_float() {
                Ok(())
            } else {
                Err(Error::invalid(op, format!("{} must be f32, f16 or bf16, got {}", name(i), inputs[i])))
            }
        };
        let same_dtype = |i: usize, j: usize| -> Result<()> {
            if inputs[i].dtype == inputs[j].dtype {
                Ok(())
            } else {
                Err(Error::invalid(
                    op,
                    format!("dtypes differ: {} is {}, {} is {}", name(i), inputs[i], name(j), inputs[j]),
                ))
            }
        };
        let out = |dtype: DType, shape: Shape| Ok(vec![TensorMeta { dtype, shape }]);
        let x = &inputs[0];
        match self {
            Op::MatMul { trans_a, trans_b } => {
                need_float(0)?;
                same_dtype(0, 1)?;
                let (a, b) = (&inputs[0].shape, &inputs[1].shape);
                if a.rank() < 2 || b.rank() < 2 {
                    return Err(Error::invalid(op, format!("operands must have rank >= 2: a is {a}, b is {b}")));
                }
                let (m, ka) = mat_dims(a, *trans_a);
                let (kb, n) = mat_dims(b, *trans_b);
                if ka != kb {
                    return Err(Error::invalid(op, format!("inner dimensions differ: a is {a}, b is {b}")));
                }
                let ba = Shape(a.0[..a.rank() - 2].to_vec());
                let bb = Shape(b.0[..b.rank() - 2].to_vec());
                let mut batch = Shape::broadcast(&ba, &bb).ok_or_else(|| {
                    Error::invalid(op, format!("batch dimensions do not broadcast: a is {a}, b is {b}"))
                })?;
                batch.0.extend([m, n]);
                out(x.dtype, batch)
            }
            Op::Gemm { trans_a, trans_b, .. } => {
                need_float(0)?;
                same_dtype(0, 1)?;
                let (a, b) = (&inputs[0].shape, &inputs[1].shape);
                if a.rank() != 2 || b.rank() != 2 {
                    return Err(Error::invalid(op, format!("operands must be 2-D: a is {a}, b is {b}")));
                }
                let (m, ka) = mat_dims(a, *trans_a);
                let (kb, n) = mat_dims(b, *trans_b);
                if ka != kb {
                    return Err(Error::invalid(op, format!("inner dimensions differ: a is {a}, b is {b}")));
                }
                let o = Shape::from([m, n]);
                if inputs.len() == 3 {
                    same_dtype(0, 2)?;
                    let c = &inputs[2].shape;
                    if Shape::broadcast(c, &o).as_ref() != Some(&o) {
                        return Err(Error::invalid(op, format!("c {c} does not broadcast to the output {o}")));
                    }
                }
                out(x.dtype, o)
            }
            Op::Linear => {
                need_float(0)?;
                // Mixed precision: f32 activations with a bf16 weight (f32 accumulation).
                if !(inputs[0].dtype == DType::F32 && inputs[1].dtype == DType::BF16) {
                    same_dtype(0, 1)?;
                }
                let (xs, w) = (&inputs[0].shape, &inputs[1].shape);
                if xs.rank() < 1 || w.rank() != 2 {
                    return Err(Error::invalid(
                        op,
                        format!("x must have rank >= 1 and weight must be 2-D [N, K]: x is {xs}, weight is {w}"),
                    ));
                }
                if xs.last() != w.0[1] {
                    return Err(Error::invalid(op, format!("inner dimensions differ: x is {xs}, weight is {w}")));
                }
                if inputs.len() == 3 {
                    same_dtype(0, 2)?;
                    let b = &inputs[2].shape;
                    if b.0 != [w.0[0]] {
                        return Err(Error::invalid(op, format!("bias must be [{}], got {b}", w.0[0])));
                    }
                }
                let mut o = xs.clone();
                let last = o.rank() - 1;
                o.0[last] = w.0[0];
                out(x.dtype, o)
            }
            Op::Add | Op::Sub | Op::Mul | Op::Div => {
                if inputs[0].dtype == DType::U8 {
                    return Err(Error::invalid(op, format!("u8 operands are masks, not numbers: a is {}", inputs[0])));
                }
                same_dtype(0, 1)?;
                let s = Shape::broadcast(&inputs[0].shape, &inputs[1].shape).ok_or_else(|| {
                    Error::invalid(
                        op,
                        format!("shapes do not broadcast: a is {}, b is {}", inputs[0].shape, inputs[1].shape),
                    )
                })?;
                out(x.dtype, s)
            }
            Op::Relu | Op::Gelu(_) | Op::Tanh | Op::Erf | Op::Exp | Op::Sqrt | Op::Scale { .. } => {
                need_float(0)?;
                if let Op::Scale { factor } = self {
                    if !factor.is_finite() {
                        return Err(Error::invalid(op, format!("factor must be finite, got {factor}")));
                    }
                }
                out(x.dtype, x.shape.clone())
            }
            Op::Softmax { axis } => {
                need_float(0)?;
                if x.shape.axis(*axis).is_none() {
                    return Err(Error::invalid(op, format!("axis {axis} is out of range for x {}", x.shape)));
                }
                out(x.dtype, x.shape.clone())
            }
            Op::LayerNorm { eps } | Op::AddLayerNorm { eps } => {
                let first_param = if kind == OpKind::AddLayerNorm { 2 } else { 1 };
                need_float(0)?;
                for i in 1..inputs.len() {
                    same_dtype(0, i)?;
                }
                if !(eps.is_finite() && *eps >= 0.0) {
                    return Err(Error::invalid(op, format!("eps must be finite and >= 0, got {eps}")));
                }
                if x.shape.rank() < 1 {
                    return Err(Error::invalid(op, format!("x must have rank >= 1, got {}", x.shape)));
                }
                if kind == OpKind::AddLayerNorm && inputs[1].shape != x.shape {
                    return Err(Error::invalid(
                        op,
                        format!("residual must match x: x is {}, residual is {}", x.shape, inputs[1].shape),
                    ));
                }
                let d = x.shape.last();
                for i in first_param..inputs.len() {
                    if inputs[i].shape.0 != [d] {
                        return Err(Error::invalid(
                            op,
                            format!(
                                "{} must be [{d}] (the last axis of x {}), got {}",
                                name(i),
                                x.shape,
                                inputs[i].shape
                            ),
                        ));
                    }
                }
                out(x.dtype, x.shape.clone())
            }
            Op::Permute { perm } => {
                let r = x.shape.rank();
                let mut seen = vec![false; r];
                let valid = perm.len() == r && perm.iter().all(|&p| p < r && !std::mem::replace(&mut seen[p], true));
                if !valid {
                    return Err(Error::invalid(
                        op,
                        format!("perm {perm:?} is not a permutation of the {r} axes of x {}", x.shape),
                    ));
                }
                out(x.dtype, Shape(perm.iter().map(|&p| x.shape.0[p]).collect()))
            }
            Op::Reshape { shape } => {
                let s = resolve_reshape(&x.shape, shape)
                    .ok_or_else(|| Error::invalid(op, format!("cannot reshape x {} to {shape:?}", x.shape)))?;
                out(x.dtype, s)
            }
            Op::Gather { axis } => {
                let idx = &inputs[1];
                if !matches!(idx.dtype, DType::I32 | DType::I64) {
                    return Err(Error::invalid(op, format!("indices must be i32 or i64, got {idx}")));
                }
                if *axis >= x.shape.rank() {
                    return Err(Error::invalid(op, format!("axis {axis} is out of range for data {}", x.shape)));
                }
                let mut s = x.shape.0[..*axis].to_vec();
                s.extend_from_slice(idx.shape.dims());
                s.extend_from_slice(&x.shape.0[axis + 1..]);
                out(x.dtype, Shape(s))
            }
            Op::Cast { to } => out(*to, x.shape.clone()),
            Op::ReduceSum { axes, keepdims } | Op::ReduceMean { axes, keepdims } => {
                need_float(0)?;
                let norm = normalise_axes(&x.shape, axes).ok_or_else(|| {
                    Error::invalid(op, format!("axes {axes:?} are out of range or repeated for x {}", x.shape))
                })?;
                let mut s = Vec::new();
                for (i, &d) in x.shape.0.iter().enumerate() {
                    if norm.contains(&i) {
                        if *keepdims {
                            s.push(1);
                        }
                    } else {
                        s.push(d);
                    }
                }
                out(x.dtype, Shape(s))
            }
            Op::Copy => out(x.dtype, x.shape.clone()),
            Op::Attention { scale } => {
                need_float(0)?;
                same_dtype(0, 1)?;
                same_dtype(0, 2)?;
                let (q, k, v) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
                if q.rank() != 4 || k.rank() != 4 || v.rank() != 4 {
                    return Err(Error::invalid(
                        op,
                        format!("q, k, v must be [B, H, S, D]: q is {q}, k is {k}, v is {v}"),
                    ));
                }
                if q.0[..2] != k.0[..2] || k.0[..3] != v.0[..3] || q.0[3] != k.0[3] {
                    return Err(Error::invalid(op, format!("q, k, v do not agree: q is {q}, k is {k}, v is {v}")));
                }
                if let Some(s) = scale {
                    if !s.is_finite() {
                        return Err(Error::invalid(op, format!("scale must be finite, got {s}")));
                    }
                }
                size::operand_bytes(op, "the scores", &[q.0[0], q.0[1], q.0[2], k.0[2]], x.dtype)?;
                if inputs.len() == 4 {
                    let m = &inputs[3];
                    if m.dtype != DType::U8 && m.dtype != x.dtype {
                        return Err(Error::invalid(op, format!("mask must be u8 or {} like q, got {m}", x.dtype)));
                    }
                    let scores = Shape::from([q.0[0], q.0[1], q.0[2], k.0[2]]);
                    if m.shape.rank() > 4 || Shape::broadcast(&m.shape, &scores).as_ref() != Some(&scores) {
                        return Err(Error::invalid(
                            op,
                            format!("mask {} does not broadcast to the scores {scores}", m.shape),
                        ));
                    }
                }
                out(x.dtype, Shape::from([q.0[0], q.0[1], q.0[2], v.0[3]]))
            }
            Op::BiasGelu(_) => {
                need_float(0)?;
                same_dtype(0, 1)?;
                let b = &inputs[1].shape;
                if x.shape.rank() < 1 || b.0 != [x.shape.last()] {
                    return Err(Error::invalid(
                        op,
                        format!("bias must be [{}] (the last axis of x {}), got {b}", x.shape.last(), x.shape),
                    ));
                }
                out(x.dtype, x.shape.clone())
            }
        }
    }

    /// Floating-point operations of one execution (a multiply-add counts as 2); saturates
    /// at `u64::MAX`.
    pub fn flops(&self, inputs: &[TensorMeta], outputs: &[TensorMeta]) -> u64 {
        let p = |xs: &[u64]| xs.iter().fold(1u64, |a, &x| a.saturating_mul(x));
        let on = outputs.first().map_or(0, |o| o.shape.numel() as u64);
        let inner = |i: usize, trans: bool| -> u64 {
            inputs.get(i).map_or(0, |t| {
                let s = &t.shape;
                if s.rank() < 2 {
                    s.last() as u64
                } else if trans {
                    s.0[s.rank() - 2] as u64
                } else {
                    s.0[s.rank() - 1] as u64
                }
            })
        };
        match self {
            Op::MatMul { trans_a, .. } => p(&[2, on, inner(0, *trans_a)]),
            Op::Gemm { trans_a, .. } => p(&[2, on, inner(0, *trans_a)]).saturating_add(p(&[2, on])),
            Op::Linear => p(&[2, on, inner(0, false)]).saturating_add(on),
            Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Relu | Op::Scale { .. } => on,
            Op::Gelu(_) | Op::BiasGelu(_) | Op::LayerNorm { .. } => p(&[8, on]),
            Op::Tanh | Op::Erf | Op::Exp | Op::Sqrt => p(&[4, on]),
            Op::Softmax { .. } => p(&[5, on]),
            Op::AddLayerNorm { .. } => p(&[9, on]),
            Op::ReduceSum { .. } | Op::ReduceMean { .. } => inputs.first().map_or(0, |t| t.shape.numel() as u64),
            Op::Attention { .. } => {
                let (Some(q), Some(k)) = (inputs.first().map(|t| &t.shape), inputs.get(1).map(|t| &t.shape)) else {
                    return 0;
                };
                if q.rank() != 4 || k.rank() != 4 {
                    return 0;
                }
                let (b, h, s, d, t) = (q.0[0], q.0[1], q.0[2], q.0[3], k.0[2]);
                let dv = outputs.first().map_or(d, |o| o.shape.last());
                let scores = p(&[b as u64, h as u64, s as u64, t as u64]);
                p(&[2, scores, (d as u64).saturating_add(dv as u64)]).saturating_add(p(&[5, scores]))
            }
            Op::Permute { .. } | Op::Reshape { .. } | Op::Gather { .. } | Op::Cast { .. } | Op::Copy => 0,
        }
    }

    /// Bytes read and written by one execution, counting each operand once; saturates at
    /// `u64::MAX`.
    pub fn bytes(&self, inputs: &[TensorMeta], outputs: &[TensorMeta]) -> u64 {
        let sum = |ts: &mut dyn Iterator<Item = &TensorMeta>| ts.fold(0u64, |a, t| a.saturating_add(t.bytes() as u64));
        let read = match self {
            // Gather reads only the selected rows.
            Op::Gather { .. } => sum(&mut inputs.get(1).into_iter().chain(outputs.first())),
            _ => sum(&mut inputs.iter()),
        };
        read.saturating_add(sum(&mut outputs.iter()))
    }
}

/// `(rows, cols)` of the last two dims, swapped when `trans`.
fn mat_dims(s: &Shape, trans: bool) -> (usize, usize) {
    let (r, c) = (s.0[s.rank() - 2], s.0[s.rank() - 1]);
    if trans { (c, r) } else { (r, c) }
}

/// Resolves a reshape target with at most one `-1`.
pub fn resolve_reshape(from: &Shape, to: &[isize]) -> Option<Shape> {
    let n = from.numel();
    let mut unknown = None;
    let mut known = 1usize;
    for (i, &d) in to.iter().enumerate() {
        if d == -1 {
            if unknown.replace(i).is_some() {
                return None;
            }
        } else if d < 0 {
            return None;
        } else {
            known = known.checked_mul(d as usize)?;
        }
    }
    let mut dims: Vec<usize> = to.iter().map(|&d| d.max(0) as usize).collect();
    match unknown {
        Some(i) => {
            if known == 0 || n % known != 0 {
                return None;
            }
            dims[i] = n / known;
        }
        None if known != n => return None,
        None => {}
    }
    Some(Shape(dims))
}

/// Normalises reduction axes (empty means all axes); `None` if out of range or repeated.
pub fn normalise_axes(shape: &Shape, axes: &[isize]) -> Option<Vec<usize>> {
    if axes.is_empty() {
        return Some((0..shape.rank()).collect());
    }
    let mut out = Vec::new();
    for &a in axes {
        let a = shape.axis(a)?;
        if out.contains(&a) {
            return None;
        }
        out.push(a);
    }
    out.sort_unstable();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &[usize]) -> TensorMeta {
        TensorMeta::new(DType::F32, s)
    }

    #[test]
    fn matmul_error_names_operands() {
        let e = Op::MatMul { trans_a: false, trans_b: false }.infer(&[m(&[1024, 1024]), m(&[512, 512])]).unwrap_err();
        assert_eq!(e.to_string(), "MatMul: inner dimensions differ: a is [1024, 1024], b is [512, 512]");
    }

    #[test]
    fn matmul_batched_broadcast() {
        let o = Op::MatMul { trans_a: false, trans_b: true }.infer(&[m(&[2, 1, 5, 3]), m(&[4, 7, 3])]).unwrap();
        assert_eq!(o[0].shape, Shape::from([2, 4, 5, 7]));
    }

    #[test]
    fn reshape_and_gather() {
        assert_eq!(resolve_reshape(&Shape::from([2, 6]), &[3, -1]), Some(Shape::from([3, 4])));
        assert_eq!(resolve_reshape(&Shape::from([2, 6]), &[5, -1]), None);
        let o = Op::Gather { axis: 0 }.infer(&[m(&[10, 4]), TensorMeta::new(DType::I64, [2, 3])]).unwrap();
        assert_eq!(o[0].shape, Shape::from([2, 3, 4]));
    }

    #[test]
    fn flops_of_gemm() {
        let op = Op::MatMul { trans_a: false, trans_b: false };
        let i = [m(&[512, 1024]), m(&[1024, 4096])];
        let o = op.infer(&i).unwrap();
        assert_eq!(op.flops(&i, &o), 2 * 512 * 1024 * 4096);
    }
}

/// Builds an op from its kind and `key=value` attributes (the CLI and model loaders use
/// this). Unknown keys are errors; missing keys take the defaults shown.
///
/// | op | attributes (default) |
/// |---|---|
/// | MatMul | `trans_a` (false), `trans_b` (false) |
/// | Gemm | `trans_a`, `trans_b`, `alpha` (1), `beta` (1) |
/// | GELU, BiasGelu | `approx` = `erf` \| `tanh` (erf) |
/// | Softmax | `axis` (-1) |
/// | LayerNorm, AddLayerNorm | `eps` (1e-5) |
/// | Permute/Transpose | `perm` (comma list; default reverses the axes) |
/// | Reshape | `shape` (comma list, one -1 allowed) |
/// | Gather/Embedding | `axis` (0) |
/// | Cast | `to` (f32) |
/// | ReduceSum, ReduceMean | `axes` (comma list; empty = all), `keepdims` (false) |
/// | Scale | `factor` (1) |
/// | Attention | `scale` (1/sqrt(D)) |
pub fn op_from_attrs(kind: OpKind, attrs: &[(String, String)], rank_hint: usize) -> Result<Op> {
    let op = kind.name();
    let mut used = vec![false; attrs.len()];
    let mut get = |k: &str| -> Option<String> {
        attrs.iter().enumerate().find(|(_, (key, _))| key == k).map(|(i, (_, v))| {
            used[i] = true;
            v.clone()
        })
    };
    fn parse<T: std::str::FromStr>(op: &'static str, k: &str, v: Option<String>, d: T) -> Result<T> {
        match v {
            None => Ok(d),
            Some(s) => s.trim().parse().map_err(|_| Error::invalid(op, format!("attribute {k}={s:?} is malformed"))),
        }
    }
    fn list<T: std::str::FromStr>(op: &'static str, k: &str, v: &str) -> Result<Vec<T>> {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| Error::invalid(op, format!("attribute {k}: {s:?} is not a number"))))
            .collect()
    }
    let approx = |v: Option<String>| -> Result<GeluApprox> {
        match v.as_deref() {
            None | Some("erf") => Ok(GeluApprox::Erf),
            Some("tanh") => Ok(GeluApprox::Tanh),
            Some(o) => Err(Error::invalid(op, format!("approx must be erf or tanh, got {o:?}"))),
        }
    };
    let built = match kind {
        OpKind::MatMul => Op::MatMul {
            trans_a: parse(op, "trans_a", get("trans_a"), false)?,
            trans_b: parse(op, "trans_b", get("trans_b"), false)?,
        },
        OpKind::Gemm => Op::Gemm {
            trans_a: parse(op, "trans_a", get("trans_a"), false)?,
            trans_b: parse(op, "trans_b", get("trans_b"), false)?,
            alpha: parse(op, "alpha", get("alpha"), 1.0)?,
            beta: parse(op, "beta", get("beta"), 1.0)?,
        },
        OpKind::Linear => Op::Linear,
        OpKind::Add => Op::Add,
        OpKind::Sub => Op::Sub,
        OpKind::Mul => Op::Mul,
        OpKind::Div => Op::Div,
        OpKind::Relu => Op::Relu,
        OpKind::Gelu => Op::Gelu(approx(get("approx"))?),
        OpKind::BiasGelu => Op::BiasGelu(approx(get("approx"))?),
        OpKind::Tanh => Op::Tanh,
        OpKind::Erf => Op::Erf,
        OpKind::Exp => Op::Exp,
        OpKind::Sqrt => Op::Sqrt,
        OpKind::Softmax => Op::Softmax { axis: parse(op, "axis", get("axis"), -1)? },
        OpKind::LayerNorm => Op::LayerNorm { eps: parse(op, "eps", get("eps"), 1e-5)? },
        OpKind::AddLayerNorm => Op::AddLayerNorm { eps: parse(op, "eps", get("eps"), 1e-5)? },
        OpKind::Permute => Op::Permute {
            perm: match get("perm") {
                Some(v) => list(op, "perm", &v)?,
                None => (0..rank_hint).rev().collect(),
            },
        },
        OpKind::Reshape => Op::Reshape {
            shape: list(op, "shape", &get("shape").ok_or_else(|| Error::invalid(op, "needs attribute shape=..."))?)?,
        },
        OpKind::Gather => Op::Gather { axis: parse(op, "axis", get("axis"), 0)? },
        OpKind::Cast => {
            let to = get("to").unwrap_or_else(|| "f32".into());
            Op::Cast { to: DType::parse(&to).ok_or_else(|| Error::invalid(op, format!("unknown dtype {to:?}")))? }
        }
        OpKind::ReduceSum | OpKind::ReduceMean => {
            let axes = match get("axes") {
                Some(v) => list(op, "axes", &v)?,
                None => Vec::new(),
            };
            let keepdims = parse(op, "keepdims", get("keepdims"), false)?;
            if kind == OpKind::ReduceSum { Op::ReduceSum { axes, keepdims } } else { Op::ReduceMean { axes, keepdims } }
        }
        OpKind::Scale => Op::Scale { factor: parse(op, "factor", get("factor"), 1.0)? },
        OpKind::Copy => Op::Copy,
        OpKind::Attention => Op::Attention {
            scale: match get("scale") {
                Some(v) => Some(parse(op, "scale", Some(v), 1.0)?),
                None => None,
            },
        },
    };
    if let Some(i) = used.iter().position(|u| !u) {
        return Err(Error::invalid(op, format!("unknown attribute {:?}", attrs[i].0)));
    }
    Ok(built)
}
