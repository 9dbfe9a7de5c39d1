//! The aclnn tier: descriptors over the operands, the two phases of each operator, and
//! the composition of the ops aclnn has no single operator for. By file: [`call`]
//! (descriptors and the two-phase call), [`recorded`] (repeatable executors of frozen
//! plans), the op mappings by family ([`matmul`], [`elementwise`], [`norm`], [`reduce`],
//! [`data`]) and [`compositions`] ([`rope`]: Rope's; [`paged`]: PagedAttention's, [`ifa`]:
//! its fused form on Atlas A2/A3; [`kvcache`]: KvCacheWrite's); this module maps each op onto them ([`compose`]).
//!
//! A [`Call`] owns the descriptors of one op and runs its operators one of two ways:
//! * one-shot ([`run`]: eager launches, and the nodes of frozen plans whose ops cannot
//!   reuse executors): phase 2 right after each phase 1, with the stream's workspace, and
//!   intermediates in the stream's scratch buffer; descriptors are destroyed when the
//!   `Call` drops, after phase 2 returned (they may go before the stream has run);
//! * recording ([`record`]: a frozen plan's node, at its first run): each executor is made
//!   repeatable (`aclSetAclOpExecutorRepeatable`) and kept with the descriptors in a
//!   [`Recorded`], intermediates come from the plan's [`Intermediates`] of the stream
//!   (fixed for the executors' life, shared with the stream's other recorded nodes),
//!   constants get device memory of the record's own, and every tensor that views a
//!   launch operand is noted with its executor and index, so that later runs only patch
//!   the addresses that changed ([`Recorded::patch`]) and call phase 2
//!   ([`Recorded::launch`]).

mod call;
mod compositions;
mod data;
mod decoder;
mod elementwise;
mod ifa;
mod kvcache;
mod matmul;
mod norm;
mod paged;
mod recorded;
mod reduce;
mod rope;

pub(crate) use data::byte_copy;
pub(crate) use recorded::Recorded;

use crate::error::AclBackendError;
use crate::memory::Intermediates;
use crate::stream::StreamRec;
use acl_sys::Api;
use call::{Call, View, align512};
use compositions::{Attention, AttentionScratch, attention, flash_attention, gather};
use data::{cat, expand, inplace_copy, permute, slice};
use elementwise::{add_sub, cast, eq, gelu, mul_div, muls, pow, s_where, unary};
use matmul::{addmm, cube_math, matmul};
use norm::{layer_norm, softmax};
use paged::paged_attention;
use reduce::reduce;
use runtime::{DType, LaunchArgs, Op};

type BResult<T> = std::result::Result<T, AclBackendError>;

/// Whether a frozen plan may record `op`'s executors (make them repeatable): not the
/// ops composed of aclnnInplaceCopy (Reshape, Copy), which CANN excludes from repeatable
/// executors, nor Concat, whose aclnnCat takes its inputs as a tensor list; those stay
/// one-shot, with their phase 1 on every run.
pub(crate) fn repeatable(op: &Op) -> bool {
    !matches!(op, Op::Reshape { .. } | Op::Copy | Op::Concat { .. })
}

/// How [`compose`] maps an op onto aclnn operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    /// The SoC computes FP32 matrix products in FP16 (cubeMathType 1): the 910 family.
    pub is_910: bool,
    /// The fused Atlas A2/A3 operator rather than a composition: Attention as one
    /// `aclnnFlashAttentionScore` (kernel `attention.aclnn-flash.cube`) rather than matrix
    /// products and a softmax, Rope as one `aclnnRotaryPositionEmbedding` (kernel
    /// `rope.aclnn-fused.vector`).
    pub flash: bool,
}

/// Queues `args.op` on the stream as aclnn calls, one-shot.
pub(crate) fn run(api: &Api, rec: &StreamRec, how: Mapping, args: &LaunchArgs) -> BResult<()> {
    let mut c = Call::new(api, rec, args.op.name(), None);
    compose(&mut c, how, args)
}

/// Records `args.op`'s operators as repeatable executors (see the module documentation),
/// without launching them, on `rec`, the stream it will launch on, with its intermediates
/// in that stream's `intermediates` (rewound: this node may reuse what earlier nodes took).
pub(crate) fn record(
    api: &Api,
    rec: &StreamRec,
    how: Mapping,
    args: &LaunchArgs,
    intermediates: &mut Intermediates,
) -> BResult<Recorded> {
    let op = args.op.name();
    if !repeatable(&args.op) {
        return Err(AclBackendError::BadRequest(format!("{op}: no repeatable executors for this op")));
    }
    intermediates.rewind();
    let mut c = Call::new(api, rec, op, Some(intermediates));
    compose(&mut c, how, args)?;
    c.finish().ok_or_else(|| AclBackendError::BadRequest(format!("{op}: nothing recorded")))
}

/// `args.op` as aclnn operators on `c`.
fn compose(c: &mut Call, how: Mapping, args: &LaunchArgs) -> BResult<()> {
    let is_910 = how.is_910;
    let op = args.op.name();
    let n_in = args.inputs.len();
    let ins: Vec<View> = args.inputs.iter().enumerate().map(|(j, a)| View::operand(a, j)).collect();
    let out = View::operand(&args.outputs[0], n_in);
    let x = &ins[0];
    // A contiguous intermediate.
    let scratch = |c: &mut Call, dims: &[usize], dtype: DType| -> BResult<View> {
        let s = c.scratch(dims.iter().product::<usize>() * dtype.size())?;
        Ok(View::contiguous(s, dtype, dims))
    };
    match &args.op {
        Op::MatMul { trans_a, trans_b } => {
            matmul(c, &x.t(*trans_a), &ins[1].t(*trans_b), &out, cube_math(is_910, x.dtype))
        }
        Op::Gemm { trans_a, trans_b, alpha, beta } => {
            let (a, bm) = (x.t(*trans_a), ins[1].t(*trans_b));
            let cube = cube_math(is_910, x.dtype);
            match ins.get(2) {
                Some(bias) => addmm(c, bias, &a, &bm, *beta, *alpha, &out, cube),
                None if *alpha == 1.0 => matmul(c, &a, &bm, &out, cube),
                None => {
                    let tmp = scratch(c, &out.dims, out.dtype)?;
                    matmul(c, &a, &bm, &tmp, cube)?;
                    muls(c, &tmp, *alpha, &out)
                }
            }
        }
        Op::Linear if x.dtype == DType::F32 && ins[1].dtype == DType::F16 => {
            // An fp16 weight (precision f16): x (and the bias) cast to fp16 in the stream's
            // scratch buffer, the product on the Cube in fp16 (the Cube accumulates in
            // f32), the result cast back to f32.
            let k = *x.dims.last().unwrap_or(&0);
            let m = x.dims.iter().product::<usize>() / k.max(1);
            let n = ins[1].dims[0];
            let (xb, ob) = (align512(m * k * 2), align512(m * n * 2));
            let s = c.scratch(xb + ob + align512(n * 2))?;
            let x16 = View::contiguous(s, DType::F16, &[m, k]);
            let o16 = View::contiguous(s + xb as u64, DType::F16, &[m, n]);
            cast(c, &x.reshaped(&[m, k]), DType::F16, &x16)?;
            let w = ins[1].t(true);
            let keep = acl_sys::cube_math::KEEP_DTYPE;
            match ins.get(2) {
                Some(bias) => {
                    let b16 = View::contiguous(s + (xb + ob) as u64, DType::F16, &[n]);
                    cast(c, bias, DType::F16, &b16)?;
                    addmm(c, &b16, &x16, &w, 1.0, 1.0, &o16, keep)?;
                }
                None => matmul(c, &x16, &w, &o16, keep)?,
            }
            cast(c, &o16, DType::F32, &out.reshaped(&[m, n]))
        }
        Op::Linear => {
            let k = *x.dims.last().unwrap_or(&0);
            let m = x.dims.iter().product::<usize>() / k.max(1);
            let n = ins[1].dims[0];
            let a = x.reshaped(&[m, k]);
            let w = ins[1].t(true);
            let o = out.reshaped(&[m, n]);
            let cube = cube_math(is_910, x.dtype);
            match ins.get(2) {
                Some(bias) => addmm(c, bias, &a, &w, 1.0, 1.0, &o, cube),
                None => matmul(c, &a, &w, &o, cube),
            }
        }
        Op::Add | Op::Sub => add_sub(c, matches!(args.op, Op::Sub), x, &ins[1], &out),
        Op::Mul | Op::Div => mul_div(c, matches!(args.op, Op::Div), x, &ins[1], &out),
        Op::Pow => pow(c, x, &ins[1], &out),
        Op::Equal => eq(c, x, &ins[1], &out),
        Op::Where => s_where(c, x, &ins[1], &ins[2], &out),
        Op::Concat { axis } => {
            let ax = runtime::Shape::new(out.dims.clone())
                .axis(*axis)
                .ok_or_else(|| AclBackendError::BadRequest(format!("{op}: axis {axis} out of range")))?;
            cat(c, &ins, ax, &out)
        }
        Op::Slice { starts, ends, axes, steps } => {
            let w = runtime::op::resolve_slice(&x.dims, starts, ends, axes, steps)
                .map_err(|m| AclBackendError::BadRequest(format!("{op}: {m}")))?;
            slice(c, x, &w, &out)
        }
        Op::Expand { .. } => expand(c, x, &out),
        Op::Relu | Op::Tanh | Op::Erf | Op::Exp | Op::Sqrt | Op::Neg | Op::Sigmoid => unary(c, &args.op, x, &out),
        Op::Gelu(a) => gelu(c, x, *a, &out),
        Op::Scale { factor } => muls(c, x, *factor, &out),
        Op::Softmax { axis } => softmax(c, x, *axis as i64, &out),
        Op::LayerNorm { eps } => layer_norm(c, x, &ins[1], &ins[2], *eps, &out),
        Op::Permute { perm } => permute(c, x, perm, &out),
        Op::Reshape { .. } => inplace_copy(c, &out, &x.reshaped(&out.dims)),
        Op::Copy => inplace_copy(c, &out, x),
        Op::Cast { to } => cast(c, x, *to, &out),
        Op::ReduceSum { axes, keepdims } | Op::ReduceMean { axes, keepdims } => {
            let shape = runtime::Shape::new(x.dims.clone());
            let ax = runtime::op::normalise_axes(&shape, axes)
                .ok_or_else(|| AclBackendError::BadRequest(format!("{op}: bad axes {axes:?}")))?;
            let axv: Vec<i64> = ax.iter().map(|&a| a as i64).collect();
            reduce(c, matches!(args.op, Op::ReduceMean { .. }), x, &axv, *keepdims, &out)
        }
        Op::Gather { axis } => gather(c, x, &ins[1], *axis, &out),
        Op::BiasGelu(a) => {
            let tmp = scratch(c, &out.dims, out.dtype)?;
            add_sub(c, false, x, &ins[1], &tmp)?;
            gelu(c, &tmp, *a, &out)
        }
        Op::AddLayerNorm { eps } => {
            // aclnnAddLayerNorm is not available on the 910: Add then LayerNorm.
            let tmp = scratch(c, &out.dims, out.dtype)?;
            add_sub(c, false, x, &ins[1], &tmp)?;
            layer_norm(c, &tmp, &ins[2], &ins[3], *eps, &out)
        }
        Op::Silu => unary(c, &args.op, x, &out),
        Op::RmsNorm { eps } => decoder::rms_norm(c, is_910, x, ins.get(1), *eps, &out),
        Op::AddRmsNorm { eps } => {
            let sum = View::operand(&args.outputs[1], n_in + 1);
            decoder::add_rms_norm(c, is_910, (x, &ins[1], &ins[2]), *eps, (&out, &sum))
        }
        Op::SwiGlu => decoder::swiglu(c, is_910, x, ins.get(1), &out),
        // Not in this backend's table: the graph fusion keeps Linear and BiasGelu here.
        Op::LinearGelu => Err(AclBackendError::BadRequest(format!("{op}: no aclnn mapping"))),
        Op::Rope { interleaved, layout } if how.flash => rope::rope_fused(c, &ins, &out, *interleaved, *layout),
        Op::Rope { interleaved, layout } => rope::rope(c, &ins, &out, *interleaved, *layout),
        Op::Attention { scale, causal, .. } if how.flash => {
            let d = *x.dims.last().unwrap_or(&1);
            let scale = scale.unwrap_or(1.0 / (d.max(1) as f32).sqrt());
            let parts = Attention { q: x, k: &ins[1], v: &ins[2], mask: ins.get(3), scale };
            flash_attention(c, &parts, &out, *causal)
        }
        Op::Attention { scale, causal, .. } => {
            let d = *x.dims.last().unwrap_or(&1);
            let scale = scale.unwrap_or(1.0 / (d.max(1) as f32).sqrt());
            let (b, h, s, t) = (x.dims[0], x.dims[1], x.dims[2], ins[1].dims[2]);
            let bytes = align512(b * h * s * t * x.dtype.size());
            let row_max = align512(b * h * s * x.dtype.size());
            let fixed = 2 * bytes + row_max + align512(b * h * s);
            let base = c.scratch(fixed + if *causal { 512 + align512(s * t) } else { 0 })?;
            let at = |off: usize| base + off as u64;
            let sc = AttentionScratch {
                pair: [
                    View::contiguous(base, x.dtype, &[b, h, s, t]),
                    View::contiguous(base + bytes as u64, x.dtype, &[b, h, s, t]),
                ],
                row_max: View::contiguous(base + 2 * bytes as u64, x.dtype, &[b, h, s, 1]),
                masked: View::contiguous(base + (2 * bytes + row_max) as u64, DType::U8, &[b, h, s, 1]),
                causal: causal.then(|| {
                    (
                        View::contiguous(at(fixed), DType::U8, &[2]),
                        View::contiguous(at(fixed + 512), DType::U8, &[s, t]),
                    )
                }),
            };
            let parts = Attention { q: x, k: &ins[1], v: &ins[2], mask: ins.get(3), scale };
            attention(c, &parts, &sc, &out, cube_math(is_910, x.dtype))
        }
        // One aclnnIncreFlashAttentionV4 where the toolkit exports it (the symbols are
        // optional); the composition otherwise.
        Op::PagedAttention { .. } if how.flash && ifa::exported(c) => {
            ifa::paged_attention_fused(c, &args.op, &ins, &out)
        }
        Op::PagedAttention { .. } => paged_attention(c, &args.op, &ins, &out, cube_math(is_910, x.dtype)),
        Op::KvCacheWrite => kvcache::kv_cache_write(c, how.flash, &ins),
    }
}
