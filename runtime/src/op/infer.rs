//! Validation and shape inference of each op.

use super::table::{AttentionLayout, Op, OpKind, TensorMeta, arity, operand_name};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::size;

impl Op {
    /// Validates the inputs and infers the outputs' dtypes and shapes. An operand or an
    /// output whose size overflows (see [`crate::size`]) is an [`Error::Invalid`] naming it.
    pub fn infer(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let (kind, op) = (self.kind(), self.name());
        for (i, m) in inputs.iter().enumerate() {
            size::operand_bytes(op, operand_name(kind, i), m.shape.dims(), m.dtype)?;
        }
        let outs = self.infer_shapes(inputs).map_err(|e| e.with_operands(inputs.iter().map(TensorMeta::operand)))?;
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
        let o = &Operands { op, kind, inputs };
        let x = o.x();
        match self {
            Op::MatMul { trans_a, trans_b } => matmul(o, *trans_a, *trans_b),
            Op::Gemm { trans_a, trans_b, .. } => gemm(o, *trans_a, *trans_b),
            Op::Linear | Op::LinearGelu => linear(o),
            Op::Add | Op::Sub | Op::Mul | Op::Div => binary(o),
            Op::Pow => {
                o.need_float(0)?;
                binary(o)
            }
            Op::Equal => {
                o.same_dtype(0, 1)?;
                let s = Shape::broadcast(&o.inputs[0].shape, &o.inputs[1].shape).ok_or_else(|| {
                    Error::invalid(
                        o.op,
                        format!("shapes do not broadcast: a is {}, b is {}", o.inputs[0].shape, o.inputs[1].shape),
                    )
                })?;
                one(DType::U8, s)
            }
            Op::Where => select(o),
            Op::Concat { axis } => concat(o, *axis),
            Op::Slice { starts, ends, axes, steps } => {
                let w = resolve_slice(x.shape.dims(), starts, ends, axes, steps)
                    .map_err(|m| Error::invalid(o.op, format!("{m} (x is {})", x.shape)))?;
                one(x.dtype, Shape(w.iter().map(|a| a.len).collect()))
            }
            Op::Expand { shape } => {
                let s = Shape::broadcast(&x.shape, &Shape(shape.clone())).ok_or_else(|| {
                    Error::invalid(o.op, format!("x {} does not broadcast with shape {shape:?}", x.shape))
                })?;
                one(x.dtype, s)
            }
            Op::Relu
            | Op::Gelu(_)
            | Op::Tanh
            | Op::Erf
            | Op::Exp
            | Op::Sqrt
            | Op::Neg
            | Op::Sigmoid
            | Op::Silu
            | Op::Scale { .. } => {
                o.need_float(0)?;
                if let Op::Scale { factor } = self
                    && !factor.is_finite()
                {
                    return Err(Error::invalid(o.op, format!("factor must be finite, got {factor}")));
                }
                one(x.dtype, x.shape.clone())
            }
            Op::Softmax { axis } => {
                o.need_float(0)?;
                if x.shape.axis(*axis).is_none() {
                    return Err(Error::invalid(o.op, format!("axis {axis} is out of range for x {}", x.shape)));
                }
                one(x.dtype, x.shape.clone())
            }
            Op::LayerNorm { eps } | Op::AddLayerNorm { eps } => layer_norm(o, *eps),
            Op::Permute { perm } => permute(o, perm),
            Op::Reshape { shape } => {
                let s = resolve_reshape(&x.shape, shape)
                    .ok_or_else(|| Error::invalid(o.op, format!("cannot reshape x {} to {shape:?}", x.shape)))?;
                one(x.dtype, s)
            }
            Op::Gather { axis } => gather(o, *axis),
            Op::Cast { to } => one(*to, x.shape.clone()),
            Op::ReduceSum { axes, keepdims } | Op::ReduceMean { axes, keepdims } => reduce(o, axes, *keepdims),
            Op::Copy => one(x.dtype, x.shape.clone()),
            Op::Attention { scale, layout, .. } => attention(o, *scale, *layout),
            Op::Rope { interleaved: _, layout } => super::rope::infer_rope(o.op, o.inputs, *layout),
            Op::BiasGelu(_) => bias_gelu(o),
            Op::RmsNorm { eps } | Op::AddRmsNorm { eps } => rms_norm(o, *eps),
            Op::SwiGlu => swiglu(o),
            Op::KvCacheWrite => kv_cache_write(o),
            Op::PagedAttention { scale } => paged_attention(o, *scale),
        }
    }
}

/// The inputs of the op being inferred, with the checks every op shares.
struct Operands<'a> {
    op: &'static str,
    kind: OpKind,
    inputs: &'a [TensorMeta],
}

impl Operands<'_> {
    /// The first input.
    fn x(&self) -> &TensorMeta {
        &self.inputs[0]
    }

    fn name(&self, i: usize) -> &'static str {
        operand_name(self.kind, i)
    }

    fn need_float(&self, i: usize) -> Result<()> {
        if self.inputs[i].dtype.is_float() {
            Ok(())
        } else {
            Err(Error::invalid(self.op, format!("{} must be f32, f16 or bf16, got {}", self.name(i), self.inputs[i])))
        }
    }

    fn same_dtype(&self, i: usize, j: usize) -> Result<()> {
        let inputs = self.inputs;
        if inputs[i].dtype == inputs[j].dtype {
            Ok(())
        } else {
            Err(Error::invalid(
                self.op,
                format!("dtypes differ: {} is {}, {} is {}", self.name(i), inputs[i], self.name(j), inputs[j]),
            ))
        }
    }
}

/// The key and value caches `[NB, BS, KVH, D]` at inputs `k` and `k + 1`: float, one
/// dtype and shape. Returns their dims.
fn paged_caches(o: &Operands<'_>, k: usize) -> Result<[usize; 4]> {
    o.need_float(k)?;
    o.same_dtype(k, k + 1)?;
    let (kc, vc) = (&o.inputs[k].shape, &o.inputs[k + 1].shape);
    if kc.rank() != 4 || kc != vc {
        return Err(Error::invalid(
            o.op,
            format!("key_cache and value_cache must be one [NB, BS, KVH, D] shape: they are {kc} and {vc}"),
        ));
    }
    Ok([kc.0[0], kc.0[1], kc.0[2], kc.0[3]])
}

/// Input `i` is a 1-D or 2-D integer operand of these dims and one of `dtypes`.
fn int_operand(o: &Operands<'_>, i: usize, dims: &[usize], dtypes: &[DType]) -> Result<()> {
    let t = &o.inputs[i];
    if !dtypes.contains(&t.dtype) || t.shape.dims() != dims {
        let want: Vec<String> = dtypes.iter().map(|d| d.to_string()).collect();
        return Err(Error::invalid(o.op, format!("{} must be {} {:?}, got {t}", o.name(i), want.join(" or "), dims)));
    }
    Ok(())
}

/// KvCacheWrite: caches `[NB, BS, KVH, D]`, key and value `[N, KVH, D]` of the caches'
/// dtype, slots `[N]` i32/i64; the outputs are the caches (updated in place).
fn kv_cache_write(o: &Operands<'_>) -> Result<Vec<TensorMeta>> {
    let [_, _, kvh, d] = paged_caches(o, 0)?;
    o.same_dtype(0, 2)?;
    o.same_dtype(0, 3)?;
    let (k, v) = (&o.inputs[2].shape, &o.inputs[3].shape);
    if k.rank() != 3 || k != v || k.0[1] != kvh || k.0[2] != d {
        return Err(Error::invalid(
            o.op,
            format!("key and value must both be [N, {kvh}, {d}] (the caches' KVH and D): they are {k} and {v}"),
        ));
    }
    int_operand(o, 4, &[k.0[0]], &[DType::I32, DType::I64])?;
    Ok(vec![o.inputs[0].clone(), o.inputs[1].clone()])
}

/// PagedAttention: q `[B, H, D]`, caches `[NB, BS, KVH, D]` with H a multiple of KVH,
/// block_tables `[B, MB]` i32, context_lens `[B]` i32; the output is q's shape.
fn paged_attention(o: &Operands<'_>, scale: Option<f32>) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.need_float(0)?;
    o.same_dtype(0, 1)?;
    let [_, _, kvh, d] = paged_caches(o, 1)?;
    let q = &x.shape;
    if q.rank() != 3 || q.0[2] != d || kvh == 0 || !q.0[1].is_multiple_of(kvh) {
        return Err(Error::invalid(
            o.op,
            format!("q must be [B, H, {d}] with H a multiple of the caches' {kvh} kv heads, got {q}"),
        ));
    }
    let b = q.0[0];
    let mb = o.inputs[3].shape.dims().get(1).copied().unwrap_or(0);
    int_operand(o, 3, &[b, mb], &[DType::I32])?;
    int_operand(o, 4, &[b], &[DType::I32])?;
    if let Some(s) = scale
        && !s.is_finite()
    {
        return Err(Error::invalid(o.op, format!("scale must be finite, got {s}")));
    }
    one(x.dtype, q.clone())
}

/// One output of `dtype` and `shape`.
fn one(dtype: DType, shape: Shape) -> Result<Vec<TensorMeta>> {
    Ok(vec![TensorMeta { dtype, shape }])
}

/// Batched `a @ b` (each transposed when asked), batch dimensions broadcast.
fn matmul(o: &Operands<'_>, trans_a: bool, trans_b: bool) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.need_float(0)?;
    o.same_dtype(0, 1)?;
    let (a, b) = (&o.inputs[0].shape, &o.inputs[1].shape);
    if a.rank() < 2 || b.rank() < 2 {
        return Err(Error::invalid(o.op, format!("operands must have rank >= 2: a is {a}, b is {b}")));
    }
    let (m, ka) = mat_dims(a, trans_a);
    let (kb, n) = mat_dims(b, trans_b);
    if ka != kb {
        return Err(Error::invalid(o.op, format!("inner dimensions differ: a is {a}, b is {b}")));
    }
    let ba = Shape(a.0[..a.rank() - 2].to_vec());
    let bb = Shape(b.0[..b.rank() - 2].to_vec());
    let mut batch = Shape::broadcast(&ba, &bb)
        .ok_or_else(|| Error::invalid(o.op, format!("batch dimensions do not broadcast: a is {a}, b is {b}")))?;
    batch.0.extend([m, n]);
    one(x.dtype, batch)
}

/// 2-D `alpha · a @ b + beta · c`, `c` broadcast to the output.
fn gemm(o: &Operands<'_>, trans_a: bool, trans_b: bool) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.need_float(0)?;
    o.same_dtype(0, 1)?;
    let (a, b) = (&o.inputs[0].shape, &o.inputs[1].shape);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(Error::invalid(o.op, format!("operands must be 2-D: a is {a}, b is {b}")));
    }
    let (m, ka) = mat_dims(a, trans_a);
    let (kb, n) = mat_dims(b, trans_b);
    if ka != kb {
        return Err(Error::invalid(o.op, format!("inner dimensions differ: a is {a}, b is {b}")));
    }
    let shape = Shape::from([m, n]);
    if o.inputs.len() == 3 {
        o.same_dtype(0, 2)?;
        let c = &o.inputs[2].shape;
        if Shape::broadcast(c, &shape).as_ref() != Some(&shape) {
            return Err(Error::invalid(o.op, format!("c {c} does not broadcast to the output {shape}")));
        }
    }
    one(x.dtype, shape)
}

/// `x @ weightᵀ + bias` with a `[N, K]` weight.
fn linear(o: &Operands<'_>) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.need_float(0)?;
    // Mixed precision: f32 activations with a bf16 or fp16 weight (f32
    // accumulation).
    if !(o.inputs[0].dtype == DType::F32 && matches!(o.inputs[1].dtype, DType::BF16 | DType::F16)) {
        o.same_dtype(0, 1)?;
    }
    let (xs, w) = (&o.inputs[0].shape, &o.inputs[1].shape);
    if xs.rank() < 1 || w.rank() != 2 {
        return Err(Error::invalid(
            o.op,
            format!("x must have rank >= 1 and weight must be 2-D [N, K]: x is {xs}, weight is {w}"),
        ));
    }
    if xs.last() != w.0[1] {
        return Err(Error::invalid(o.op, format!("inner dimensions differ: x is {xs}, weight is {w}")));
    }
    if o.inputs.len() == 3 {
        o.same_dtype(0, 2)?;
        let b = &o.inputs[2].shape;
        if b.0 != [w.0[0]] {
            return Err(Error::invalid(o.op, format!("bias must be [{}], got {b}", w.0[0])));
        }
    }
    let mut shape = xs.clone();
    let last = shape.rank() - 1;
    shape.0[last] = w.0[0];
    one(x.dtype, shape)
}

/// Elementwise with broadcasting.
fn binary(o: &Operands<'_>) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.same_dtype(0, 1)?;
    let s = Shape::broadcast(&o.inputs[0].shape, &o.inputs[1].shape).ok_or_else(|| {
        Error::invalid(o.op, format!("shapes do not broadcast: a is {}, b is {}", o.inputs[0].shape, o.inputs[1].shape))
    })?;
    one(x.dtype, s)
}

/// `condition ? x : y` with the three shapes broadcast together.
fn select(o: &Operands<'_>) -> Result<Vec<TensorMeta>> {
    let (c, x, y) = (&o.inputs[0], &o.inputs[1], &o.inputs[2]);
    if c.dtype != DType::U8 {
        return Err(Error::invalid(o.op, format!("condition must be u8 (bool), got {c}")));
    }
    o.same_dtype(1, 2)?;
    let s = Shape::broadcast(&c.shape, &x.shape).and_then(|s| Shape::broadcast(&s, &y.shape)).ok_or_else(|| {
        Error::invalid(
            o.op,
            format!("shapes do not broadcast: condition is {}, x is {}, y is {}", c.shape, x.shape, y.shape),
        )
    })?;
    one(x.dtype, s)
}

/// Inputs joined along `axis`: one dtype and rank, the other dims equal.
fn concat(o: &Operands<'_>, axis: isize) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    if x.shape.rank() == 0 {
        return Err(Error::invalid(o.op, format!("inputs must have rank >= 1, input 0 is {x}")));
    }
    let ax = x
        .shape
        .axis(axis)
        .ok_or_else(|| Error::invalid(o.op, format!("axis {axis} is out of range for input 0 {}", x.shape)))?;
    let mut dims = x.shape.0.clone();
    for (i, t) in o.inputs.iter().enumerate().skip(1) {
        if t.dtype != x.dtype {
            return Err(Error::invalid(o.op, format!("dtypes differ: input 0 is {x}, input {i} is {t}")));
        }
        let fits = t.shape.rank() == x.shape.rank()
            && t.shape.0.iter().zip(&x.shape.0).enumerate().all(|(d, (a, b))| d == ax || a == b);
        if !fits {
            return Err(Error::invalid(
                o.op,
                format!("input {i} {} does not match input 0 {} outside axis {axis}", t.shape, x.shape),
            ));
        }
        dims[ax] = dims[ax]
            .checked_add(t.shape.0[ax])
            .ok_or_else(|| Error::invalid(o.op, format!("the joined axis {axis} overflows")))?;
    }
    one(x.dtype, Shape(dims))
}

/// LayerNorm and AddLayerNorm (its residual second).
fn layer_norm(o: &Operands<'_>, eps: f32) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    let first_param = if o.kind == OpKind::AddLayerNorm { 2 } else { 1 };
    o.need_float(0)?;
    for i in 1..o.inputs.len() {
        o.same_dtype(0, i)?;
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(o.op, format!("eps must be finite and >= 0, got {eps}")));
    }
    if x.shape.rank() < 1 {
        return Err(Error::invalid(o.op, format!("x must have rank >= 1, got {}", x.shape)));
    }
    if o.kind == OpKind::AddLayerNorm && o.inputs[1].shape != x.shape {
        return Err(Error::invalid(
            o.op,
            format!("residual must match x: x is {}, residual is {}", x.shape, o.inputs[1].shape),
        ));
    }
    let d = x.shape.last();
    for i in first_param..o.inputs.len() {
        if o.inputs[i].shape.0 != [d] {
            return Err(Error::invalid(
                o.op,
                format!("{} must be [{d}] (the last axis of x {}), got {}", o.name(i), x.shape, o.inputs[i].shape),
            ));
        }
    }
    one(x.dtype, x.shape.clone())
}

/// RmsNorm (x, optional weight) and AddRmsNorm (x, residual, weight; two outputs: the
/// normalised sum and the sum).
fn rms_norm(o: &Operands<'_>, eps: f32) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    let add = o.kind == OpKind::AddRmsNorm;
    o.need_float(0)?;
    for i in 1..o.inputs.len() {
        o.same_dtype(0, i)?;
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(o.op, format!("eps must be finite and >= 0, got {eps}")));
    }
    if x.shape.rank() < 1 {
        return Err(Error::invalid(o.op, format!("x must have rank >= 1, got {}", x.shape)));
    }
    if add && o.inputs[1].shape != x.shape {
        return Err(Error::invalid(
            o.op,
            format!("residual must match x: x is {}, residual is {}", x.shape, o.inputs[1].shape),
        ));
    }
    let d = x.shape.last();
    let w = if add { 2 } else { 1 };
    if let Some(m) = o.inputs.get(w)
        && m.shape.0 != [d]
    {
        return Err(Error::invalid(
            o.op,
            format!("{} must be [{d}] (the last axis of x {}), got {}", o.name(w), x.shape, m.shape),
        ));
    }
    let y = TensorMeta { dtype: x.dtype, shape: x.shape.clone() };
    Ok(if add { vec![y.clone(), y] } else { vec![y] })
}

/// SwiGlu: one input `[.., 2N]` (gate first) or gate and up of one shape, to `[.., N]`.
fn swiglu(o: &Operands<'_>) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.need_float(0)?;
    if let Some(up) = o.inputs.get(1) {
        o.same_dtype(0, 1)?;
        if up.shape != x.shape {
            return Err(Error::invalid(
                o.op,
                format!("gate and up must have one shape: x is {}, up is {}", x.shape, up.shape),
            ));
        }
        return one(x.dtype, x.shape.clone());
    }
    if x.shape.rank() < 1 || !x.shape.last().is_multiple_of(2) {
        return Err(Error::invalid(
            o.op,
            format!("x must have rank >= 1 and an even last axis (gate and up halves), got {}", x.shape),
        ));
    }
    let mut s = x.shape.clone();
    let last = s.rank() - 1;
    s.0[last] /= 2;
    one(x.dtype, s)
}

/// An axis permutation.
fn permute(o: &Operands<'_>, perm: &[usize]) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    let r = x.shape.rank();
    let mut seen = vec![false; r];
    let valid = perm.len() == r && perm.iter().all(|&p| p < r && !std::mem::replace(&mut seen[p], true));
    if !valid {
        return Err(Error::invalid(
            o.op,
            format!("perm {perm:?} is not a permutation of the {r} axes of x {}", x.shape),
        ));
    }
    one(x.dtype, Shape(perm.iter().map(|&p| x.shape.0[p]).collect()))
}

/// Rows of `data` along `axis` picked by `indices`.
fn gather(o: &Operands<'_>, axis: usize) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    let idx = &o.inputs[1];
    if !matches!(idx.dtype, DType::I32 | DType::I64) {
        return Err(Error::invalid(o.op, format!("indices must be i32 or i64, got {idx}")));
    }
    if axis >= x.shape.rank() {
        return Err(Error::invalid(o.op, format!("axis {axis} is out of range for data {}", x.shape)));
    }
    let mut s = x.shape.0[..axis].to_vec();
    s.extend_from_slice(idx.shape.dims());
    s.extend_from_slice(&x.shape.0[axis + 1..]);
    one(x.dtype, Shape(s))
}

/// A sum or mean over `axes`.
fn reduce(o: &Operands<'_>, axes: &[isize], keepdims: bool) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.need_float(0)?;
    let norm = normalise_axes(&x.shape, axes)
        .ok_or_else(|| Error::invalid(o.op, format!("axes {axes:?} are out of range or repeated for x {}", x.shape)))?;
    let mut s = Vec::new();
    for (i, &d) in x.shape.0.iter().enumerate() {
        if norm.contains(&i) {
            if keepdims {
                s.push(1);
            }
        } else {
            s.push(d);
        }
    }
    one(x.dtype, Shape(s))
}

/// Scaled dot-product attention in `layout`, with an optional mask.
fn attention(o: &Operands<'_>, scale: Option<f32>, layout: AttentionLayout) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.need_float(0)?;
    o.same_dtype(0, 1)?;
    o.same_dtype(0, 2)?;
    let (q, k, v) = (&o.inputs[0].shape, &o.inputs[1].shape, &o.inputs[2].shape);
    if q.rank() != 4 || k.rank() != 4 || v.rank() != 4 {
        let axes = match layout {
            AttentionLayout::Bnsd => "[B, H, S, D]",
            AttentionLayout::Bsnd => "[B, S, H, D]",
        };
        return Err(Error::invalid(o.op, format!("q, k, v must be {axes}: q is {q}, k is {k}, v is {v}")));
    }
    // Checked as [B, H, S, D] whatever the layout.
    let (q4, k4, v4) = (layout.bhsd(&q.0), layout.bhsd(&k.0), layout.bhsd(&v.0));
    let ([b, h, s, d], t) = (q4, k4[2]);
    // Grouped-query: k and v may hold fewer heads, a divisor of q's.
    let kv_heads_ok = k4[1] != 0 && h % k4[1] == 0 || h == k4[1];
    if q4[0] != k4[0] || !kv_heads_ok || k4[..3] != v4[..3] || d != k4[3] {
        return Err(Error::invalid(
            o.op,
            format!(
                "q, k, v do not agree ({}; k and v may hold fewer heads than q, a divisor of its): q is {}, k is {}, v is {}",
                layout.name(),
                o.inputs[0].shape,
                o.inputs[1].shape,
                o.inputs[2].shape
            ),
        ));
    }
    if let Some(s) = scale
        && !s.is_finite()
    {
        return Err(Error::invalid(o.op, format!("scale must be finite, got {s}")));
    }
    size::operand_bytes(o.op, "the scores", &[b, h, s, t], x.dtype)?;
    if o.inputs.len() == 4 {
        let m = &o.inputs[3];
        // Half-precision q, k and v may take an f32 additive mask, read in f32 (precision
        // bf16 keeps the mask so: f32::MIN rounded to bf16 would become -inf).
        let wide = m.dtype == DType::F32 && matches!(x.dtype, DType::BF16 | DType::F16);
        if m.dtype != DType::U8 && m.dtype != x.dtype && !wide {
            return Err(Error::invalid(
                o.op,
                format!("mask must be u8 or {} like q (or f32 beside half q), got {m}", x.dtype),
            ));
        }
        let scores = Shape::from([b, h, s, t]);
        if m.shape.rank() > 4 || Shape::broadcast(&m.shape, &scores).as_ref() != Some(&scores) {
            return Err(Error::invalid(o.op, format!("mask {} does not broadcast to the scores {scores}", m.shape)));
        }
    }
    one(x.dtype, Shape::from(layout.dims([b, h, s, v4[3]])))
}

/// GELU of `x + bias`.
fn bias_gelu(o: &Operands<'_>) -> Result<Vec<TensorMeta>> {
    let x = o.x();
    o.need_float(0)?;
    o.same_dtype(0, 1)?;
    let b = &o.inputs[1].shape;
    if x.shape.rank() < 1 || b.0 != [x.shape.last()] {
        return Err(Error::invalid(
            o.op,
            format!("bias must be [{}] (the last axis of x {}), got {b}", x.shape.last(), x.shape),
        ));
    }
    one(x.dtype, x.shape.clone())
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
            if known == 0 || !n.is_multiple_of(known) {
                return None;
            }
            dims[i] = n / known;
        }
        None if known != n => return None,
        None => {}
    }
    Some(Shape(dims))
}

/// One axis of a resolved Slice: the first element taken, the step between elements
/// taken (negative walks backwards) and how many are taken. Plain data: `Send` and `Sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceAxis {
    pub start: usize,
    pub step: i64,
    pub len: usize,
}

/// Resolves a Slice against x's `dims` as ONNX Slice-13 does, one [`SliceAxis`] per dim
/// (untouched dims take all): a negative start or end counts from the end, then both
/// clamp to `[0, d]` (step > 0) or `[-1, d - 1]` (step < 0); the length is
/// `ceil((end - start) / step)`, 0 when negative. Errors (as text): lists of different
/// lengths, an axis out of range or repeated, a zero step.
pub fn resolve_slice(
    dims: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: &[isize],
    steps: &[i64],
) -> std::result::Result<Vec<SliceAxis>, String> {
    let n = starts.len();
    if ends.len() != n || (!axes.is_empty() && axes.len() != n) || (!steps.is_empty() && steps.len() != n) {
        return Err(format!(
            "starts, ends, axes and steps differ in length: {n}, {}, {}, {} (axes and steps may be empty)",
            ends.len(),
            axes.len(),
            steps.len()
        ));
    }
    let mut out: Vec<SliceAxis> = dims.iter().map(|&d| SliceAxis { start: 0, step: 1, len: d }).collect();
    let mut seen = vec![false; dims.len()];
    let r = dims.len() as i128;
    for i in 0..n {
        let a = if axes.is_empty() { i as i128 } else { axes[i] as i128 };
        let a = if a < 0 { a + r } else { a };
        if !(0..r).contains(&a) || std::mem::replace(&mut seen[a as usize], true) {
            return Err(format!(
                "axis {} is out of range or repeated",
                if axes.is_empty() { i as isize } else { axes[i] }
            ));
        }
        let step = steps.get(i).copied().unwrap_or(1);
        if step == 0 {
            return Err(format!("step {i} is 0"));
        }
        let d = dims[a as usize] as i128;
        let at = |v: i64| if v < 0 { v as i128 + d } else { v as i128 };
        let (start, len) = if step > 0 {
            let (s, e) = (at(starts[i]).clamp(0, d), at(ends[i]).clamp(0, d));
            (s, ((e - s).max(0) + step as i128 - 1) / step as i128)
        } else {
            let (s, e) = (at(starts[i]).clamp(-1, d - 1), at(ends[i]).clamp(-1, d - 1));
            (s, ((s - e).max(0) - step as i128 - 1) / -(step as i128))
        };
        out[a as usize] = SliceAxis { start: start.max(0) as usize, step, len: len as usize };
    }
    Ok(out)
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
    fn slice_resolves_as_onnx() {
        let lens = |d: &[usize], st: &[i64], en: &[i64], ax: &[isize], sp: &[i64]| {
            resolve_slice(d, st, en, ax, sp).map(|w| w.iter().map(|a| (a.start, a.step, a.len)).collect::<Vec<_>>())
        };
        // Clamping, counting from the end, INT64 bounds, omitted axes.
        assert_eq!(lens(&[10], &[-3], &[i64::MAX], &[], &[]), Ok(vec![(7, 1, 3)]));
        assert_eq!(lens(&[10], &[i64::MIN], &[-8], &[], &[]), Ok(vec![(0, 1, 2)]));
        // Backwards: start clamps to d - 1, end to -1 (before the first element).
        assert_eq!(lens(&[5], &[100], &[i64::MIN], &[0], &[-2]), Ok(vec![(4, -2, 3)]));
        assert_eq!(lens(&[5], &[-6], &[-100], &[0], &[-1]), Ok(vec![(0, -1, 0)]));
        // Negative axes; untouched dims take all; empty windows.
        assert_eq!(lens(&[2, 3], &[5], &[1], &[-1], &[]), Ok(vec![(0, 1, 2), (3, 1, 0)]));
        assert!(lens(&[4], &[0], &[2], &[0], &[0]).unwrap_err().contains("step 0 is 0"));
        assert!(lens(&[4, 4], &[0, 0], &[1, 1], &[0, -2], &[]).unwrap_err().contains("repeated"));
        assert!(lens(&[4], &[0], &[], &[], &[]).unwrap_err().contains("differ in length"));
        let e = Op::Slice { starts: vec![0], ends: vec![1], axes: vec![3], steps: vec![] }.infer(&[m(&[2, 2])]);
        assert!(e.unwrap_err().to_string().starts_with("Slice: axis 3 is out of range"));
    }

    #[test]
    fn reshape_and_gather() {
        assert_eq!(resolve_reshape(&Shape::from([2, 6]), &[3, -1]), Some(Shape::from([3, 4])));
        assert_eq!(resolve_reshape(&Shape::from([2, 6]), &[5, -1]), None);
        let o = Op::Gather { axis: 0 }.infer(&[m(&[10, 4]), TensorMeta::new(DType::I64, [2, 3])]).unwrap();
        assert_eq!(o[0].shape, Shape::from([2, 3, 4]));
    }
}
