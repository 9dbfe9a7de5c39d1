//! The op table itself: the [`Op`] enum with its attributes, its kinds and names, the
//! operands' names and counts, and [`TensorMeta`].

use crate::dtype::DType;
use crate::shape::Shape;
use std::fmt;

/// Which formula GELU uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GeluApprox {
    /// `0.5 x (1 + erf(x / sqrt 2))`
    Erf,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`
    Tanh,
}

/// How Attention's q, k, v and output hold their batch (B), head (H), token (S or T)
/// and feature (D) axes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AttentionLayout {
    /// `[B, H, S, D]` (aclnn's BNSD): heads before tokens.
    #[default]
    Bnsd,
    /// `[B, S, H, D]` (aclnn's BSND): tokens before heads, as a projection `[B, S, H·D]`
    /// is once reshaped, so that no head split or merge permute is needed around the op.
    Bsnd,
}

impl AttentionLayout {
    /// The layout's name as attributes write it: `bnsd` or `bsnd`.
    pub fn name(self) -> &'static str {
        match self {
            AttentionLayout::Bnsd => "bnsd",
            AttentionLayout::Bsnd => "bsnd",
        }
    }

    /// Parses [`AttentionLayout::name`] (case-insensitive).
    pub fn parse(s: &str) -> Option<AttentionLayout> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bnsd" => Some(AttentionLayout::Bnsd),
            "bsnd" => Some(AttentionLayout::Bsnd),
            _ => None,
        }
    }

    /// `[B, H, S, D]` of an operand of 4 dims held in this layout.
    pub fn bhsd(self, dims: &[usize]) -> [usize; 4] {
        match self {
            AttentionLayout::Bnsd => [dims[0], dims[1], dims[2], dims[3]],
            AttentionLayout::Bsnd => [dims[0], dims[2], dims[1], dims[3]],
        }
    }

    /// The dims this layout holds for `[B, H, S, D]` (the inverse of [`Self::bhsd`]).
    pub fn dims(self, [b, h, s, d]: [usize; 4]) -> [usize; 4] {
        match self {
            AttentionLayout::Bnsd => [b, h, s, d],
            AttentionLayout::Bsnd => [b, s, h, d],
        }
    }

    /// Element strides of the B, H, S and D axes of a dense operand of `[B, H, S, D]`.
    pub fn strides(self, [_, h, s, d]: [usize; 4]) -> [usize; 4] {
        match self {
            AttentionLayout::Bnsd => [h * s * d, s * d, d, 1],
            AttentionLayout::Bsnd => [s * h * d, d, h * d, 1],
        }
    }
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
    /// Division; integers (i32, i64, u8) truncate and a division by zero yields 0.
    Div,
    /// `a ^ b` (ONNX Pow) with broadcasting, floats only, C `pow`'s special values.
    Pow,
    /// `a == b` with broadcasting (ONNX Equal): a u8 1 or 0 (npurt's bool) for operands of
    /// any one dtype; NaN equals nothing, `-0` equals `0`.
    Equal,
    /// `condition ? x : y` element by element with three-way broadcasting (ONNX Where):
    /// a u8 condition (npurt's bool, non-zero is true), x and y of any one dtype.
    Where,
    /// Joins 1 to [`CONCAT_MAX_INPUTS`] operands of one dtype and rank along `axis`
    /// (negative counts from the end), their other dims equal (ONNX Concat).
    Concat {
        axis: isize,
    },
    /// A strided window of x (ONNX Slice with constant starts, ends, axes and steps):
    /// `starts`, `ends` and `steps` per axis of `axes` (empty: the first `starts.len()`
    /// axes; negative axes count from the end), `steps` empty for all 1. Negative
    /// starts and ends count from the end, out-of-range ones clamp, a negative step walks
    /// backwards, a zero step is refused ([`crate::op::resolve_slice`]).
    Slice {
        starts: Vec<i64>,
        ends: Vec<i64>,
        axes: Vec<isize>,
        steps: Vec<i64>,
    },
    /// x broadcast with `shape` both ways (ONNX Expand): the output is their NumPy
    /// broadcast, so a 1 in `shape` keeps x's dim.
    Expand {
        shape: Vec<usize>,
    },
    Relu,
    Gelu(GeluApprox),
    Tanh,
    Erf,
    Exp,
    Sqrt,
    /// `-x` (ONNX Neg): a sign flip, so `-0.0` from `0.0` and NaN stays NaN.
    Neg,
    /// `1 / (1 + e^-x)` (ONNX Sigmoid).
    Sigmoid,
    /// `x * sigmoid(x)` (SiLU, Swish with beta 1).
    Silu,
    Softmax {
        axis: isize,
    },
    /// Normalises over the last axis: inputs x, gamma `[D]`, beta `[D]`.
    LayerNorm {
        eps: f32,
    },
    /// Root-mean-square norm over the last axis (ONNX RMSNormalization with axis -1):
    /// inputs x `[.., D]` and an optional weight `[D]`;
    /// `x / sqrt(mean(x², last axis) + eps) * weight`.
    RmsNorm {
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
    /// (added to the scores). `scale` defaults to `1/sqrt(D)`. With `layout`
    /// [`AttentionLayout::Bsnd`], q, k, v and the output hold tokens before heads
    /// (`[B, S, H, D]`); the mask keeps its `[B, H, S, T]` axes.
    ///
    /// Grouped-query from the shapes: k and v may hold `H_kv` heads with `H % H_kv == 0`;
    /// query head `h` reads kv head `h / (H / H_kv)`. With `causal`, query `i` sees only
    /// keys `j <= i + (T - S)` (aligned bottom-right: `T - S` is the past length); the
    /// keys it does not see are left out of its row (not added as -inf), and a row that
    /// sees none is 0. The mask, when given, still adds.
    Attention {
        scale: Option<f32>,
        layout: AttentionLayout,
        causal: bool,
    },
    /// Rotary position embedding: x 4-D (`[B, H, S, D]` in [`AttentionLayout::Bnsd`],
    /// `[B, S, H, D]` in [`AttentionLayout::Bsnd`]), cos and sin `[P, D/2]` (f32 or x's
    /// dtype), positions `[B, S]` (i32 or i64). Rotate-half (`interleaved` false) pairs
    /// features `i` and `i + D/2`; interleaved pairs `2i` and `2i + 1`; pair `i` of token
    /// `(b, s)` turns by the angle of row `positions[b, s]` of the tables
    /// ([`crate::op::rope_tables`]). A position outside `[0, P)` is an error at run time.
    Rope {
        interleaved: bool,
        layout: AttentionLayout,
    },
    /// `gelu(x + bias)`, bias `[N]` on the last axis.
    BiasGelu(GeluApprox),
    /// `gelu_erf(x · weightᵀ + bias)`: a [`Op::Linear`] with its bias (required) and the
    /// erf GELU applied to each output as it leaves the product, the sum rounded to f32
    /// first as [`Op::BiasGelu`] rounds it. The graph fusion makes it out of
    /// `BiasGelu(Linear(x, w), b)` where the device has a kernel for it.
    LinearGelu,
    /// `layernorm(x + residual)`: inputs x, residual, gamma, beta.
    AddLayerNorm {
        eps: f32,
    },
    /// `rmsnorm(x + residual) * weight`: inputs x, residual (x's shape), weight `[D]`;
    /// two outputs, the normalised sum and the sum `x + residual` itself (the residual
    /// passed on to the next layer).
    AddRmsNorm {
        eps: f32,
    },
    /// `silu(gate) * up`: one input x `[.., 2N]` whose first half is the gate (output
    /// `[.., N]`), or two inputs gate and up of one shape.
    SwiGlu,
    /// Writes `key` and `value` rows `[N, KVH, D]` into a block-paged cache pair
    /// `[NB, BS, KVH, D]` at `slots` `[N]` (i32/i64, slot = block · BS + offset; a negative
    /// slot is padding and skipped). Inputs key_cache, value_cache, key, value, slots;
    /// two outputs, the caches **updated in place**: output 0 is input 0's memory and
    /// output 1 input 1's ([`Op::in_place`]). A slot ≥ NB · BS is an error at run time.
    KvCacheWrite,
    /// One decode query per sequence over a block-paged cache: q `[B, H, D]`, key_cache and
    /// value_cache `[NB, BS, KVH, D]`, block_tables `[B, MB]` i32, context_lens `[B]` i32;
    /// output `[B, H, D]`. Sequence b attends positions `0..context_lens[b]`, position p at
    /// slot `block_tables[b][p / BS] · BS + p % BS`; query head h reads kv head
    /// `h / (H / KVH)`. A zero length gives a zero row; a length above MB · BS or a block
    /// id outside `[0, NB)` is an error at run time. `scale` defaults to 1/sqrt(D).
    PagedAttention {
        scale: Option<f32>,
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
    Pow,
    Equal,
    Where,
    Concat,
    Slice,
    Expand,
    Relu,
    Gelu,
    Tanh,
    Erf,
    Exp,
    Sqrt,
    Neg,
    Sigmoid,
    Silu,
    Softmax,
    LayerNorm,
    RmsNorm,
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
    AddRmsNorm,
    SwiGlu,
    Rope,
    KvCacheWrite,
    PagedAttention,
    LinearGelu,
}

impl OpKind {
    pub const ALL: [OpKind; 42] = [
        OpKind::MatMul,
        OpKind::Gemm,
        OpKind::Linear,
        OpKind::Add,
        OpKind::Sub,
        OpKind::Mul,
        OpKind::Div,
        OpKind::Pow,
        OpKind::Equal,
        OpKind::Where,
        OpKind::Concat,
        OpKind::Slice,
        OpKind::Expand,
        OpKind::Relu,
        OpKind::Gelu,
        OpKind::Tanh,
        OpKind::Erf,
        OpKind::Exp,
        OpKind::Sqrt,
        OpKind::Neg,
        OpKind::Sigmoid,
        OpKind::Silu,
        OpKind::Softmax,
        OpKind::LayerNorm,
        OpKind::RmsNorm,
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
        OpKind::AddRmsNorm,
        OpKind::SwiGlu,
        OpKind::Rope,
        OpKind::KvCacheWrite,
        OpKind::PagedAttention,
        OpKind::LinearGelu,
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
            OpKind::Pow => "Pow",
            OpKind::Equal => "Equal",
            OpKind::Where => "Where",
            OpKind::Concat => "Concat",
            OpKind::Slice => "Slice",
            OpKind::Expand => "Expand",
            OpKind::Relu => "ReLU",
            OpKind::Gelu => "GELU",
            OpKind::Tanh => "Tanh",
            OpKind::Erf => "Erf",
            OpKind::Exp => "Exp",
            OpKind::Sqrt => "Sqrt",
            OpKind::Neg => "Neg",
            OpKind::Sigmoid => "Sigmoid",
            OpKind::Silu => "Silu",
            OpKind::Softmax => "Softmax",
            OpKind::LayerNorm => "LayerNorm",
            OpKind::RmsNorm => "RmsNorm",
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
            OpKind::AddRmsNorm => "AddRmsNorm",
            OpKind::SwiGlu => "SwiGlu",
            OpKind::Rope => "Rope",
            OpKind::KvCacheWrite => "KvCacheWrite",
            OpKind::PagedAttention => "PagedAttention",
            OpKind::LinearGelu => "LinearGelu",
        }
    }

    /// Ops whose inputs are all element-wise maps to the output (no reduction).
    pub const fn is_elementwise(self) -> bool {
        matches!(
            self,
            OpKind::Add
                | OpKind::Sub
                | OpKind::Mul
                | OpKind::Div
                | OpKind::Pow
                | OpKind::Equal
                | OpKind::Where
                | OpKind::Relu
                | OpKind::Gelu
                | OpKind::Tanh
                | OpKind::Erf
                | OpKind::Exp
                | OpKind::Sqrt
                | OpKind::Neg
                | OpKind::Sigmoid
                | OpKind::Silu
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

impl TensorMeta {
    /// This operand as an [`crate::error::Error::Invalid`] names it.
    pub fn operand(&self) -> crate::error::Operand {
        crate::error::Operand { dtype: self.dtype, dims: self.shape.dims().to_vec() }
    }
}

impl fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.dtype, self.shape)
    }
}

/// The most operands one Concat joins (ONNX sets no bound; a longer list is refused with
/// an error naming the count).
pub const CONCAT_MAX_INPUTS: usize = 64;

/// `(min, max)` number of inputs of each op.
pub(super) fn arity(kind: OpKind) -> (usize, usize) {
    match kind {
        OpKind::MatMul => (2, 2),
        OpKind::Gemm => (2, 3),
        OpKind::Linear => (2, 3),
        OpKind::LinearGelu => (3, 3),
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Pow | OpKind::Equal => (2, 2),
        OpKind::Where => (3, 3),
        OpKind::Concat => (1, CONCAT_MAX_INPUTS),
        OpKind::LayerNorm => (3, 3),
        OpKind::Gather => (2, 2),
        OpKind::Attention => (3, 4),
        OpKind::BiasGelu => (2, 2),
        OpKind::AddLayerNorm => (4, 4),
        OpKind::RmsNorm => (1, 2),
        OpKind::AddRmsNorm => (3, 3),
        OpKind::SwiGlu => (1, 2),
        OpKind::Rope => (4, 4),
        OpKind::KvCacheWrite => (5, 5),
        OpKind::PagedAttention => (5, 5),
        _ => (1, 1),
    }
}

/// The in-place `(input, output)` pairs of each op (see [`Op::in_place`]).
pub(super) fn in_place(kind: OpKind) -> &'static [(usize, usize)] {
    match kind {
        OpKind::KvCacheWrite => &[(0, 0), (1, 1)],
        _ => &[],
    }
}

/// Names of the operands in error messages.
pub(super) fn operand_name(kind: OpKind, i: usize) -> &'static str {
    let names: &[&str] = match kind {
        OpKind::MatMul => &["a", "b"],
        OpKind::Gemm => &["a", "b", "c"],
        OpKind::Linear | OpKind::LinearGelu => &["x", "weight", "bias"],
        OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div => &["a", "b"],
        OpKind::Pow => &["x", "y"],
        OpKind::Equal => &["a", "b"],
        OpKind::Where => &["condition", "x", "y"],
        OpKind::Concat => return "input",
        OpKind::LayerNorm => &["x", "gamma", "beta"],
        OpKind::Gather => &["data", "indices"],
        OpKind::Attention => &["q", "k", "v", "mask"],
        OpKind::BiasGelu => &["x", "bias"],
        OpKind::AddLayerNorm => &["x", "residual", "gamma", "beta"],
        OpKind::RmsNorm => &["x", "weight"],
        OpKind::AddRmsNorm => &["x", "residual", "weight"],
        OpKind::SwiGlu => &["x", "up"],
        OpKind::Rope => &["x", "cos", "sin", "positions"],
        OpKind::KvCacheWrite => &["key_cache", "value_cache", "key", "value", "slots"],
        OpKind::PagedAttention => &["q", "key_cache", "value_cache", "block_tables", "context_lens"],
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
            Op::Pow => OpKind::Pow,
            Op::Equal => OpKind::Equal,
            Op::Where => OpKind::Where,
            Op::Concat { .. } => OpKind::Concat,
            Op::Slice { .. } => OpKind::Slice,
            Op::Expand { .. } => OpKind::Expand,
            Op::Relu => OpKind::Relu,
            Op::Gelu(_) => OpKind::Gelu,
            Op::Tanh => OpKind::Tanh,
            Op::Erf => OpKind::Erf,
            Op::Exp => OpKind::Exp,
            Op::Sqrt => OpKind::Sqrt,
            Op::Neg => OpKind::Neg,
            Op::Sigmoid => OpKind::Sigmoid,
            Op::Silu => OpKind::Silu,
            Op::Softmax { .. } => OpKind::Softmax,
            Op::LayerNorm { .. } => OpKind::LayerNorm,
            Op::RmsNorm { .. } => OpKind::RmsNorm,
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
            Op::AddRmsNorm { .. } => OpKind::AddRmsNorm,
            Op::SwiGlu => OpKind::SwiGlu,
            Op::Rope { .. } => OpKind::Rope,
            Op::KvCacheWrite => OpKind::KvCacheWrite,
            Op::PagedAttention { .. } => OpKind::PagedAttention,
            Op::LinearGelu => OpKind::LinearGelu,
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

    /// The outputs that are inputs' memory, updated in place, as `(input, output)` pairs
    /// (empty for every op that writes fresh outputs). Eagerly the caller passes the same
    /// tensor as that input and that output (or disjoint ones: the input is then copied
    /// into the output first); a compiled graph gives the output the input's memory. A
    /// kernel of such an op reads the input's elements through the output (the input
    /// operand's bytes are not passed to host kernels).
    pub fn in_place(&self) -> &'static [(usize, usize)] {
        in_place(self.kind())
    }
}
