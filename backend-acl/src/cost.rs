//! The modelled device time of a kernel on one SoC: what the graph fusion asks
//! (`runtime::Backend::modelled_cost`) to choose between a fused op and the ops it would
//! replace (docs/ASCEND.md, "The mapping follows the modelled cost").
//!
//! The model is acl-emu's (`acl-emu/src/model.rs`, docs/ASCEND.md "What acl-emu counts,
//! and its modelled clock"), with the same per-SoC figures (`acl_sys::soc`): each aclnn call costs
//! `max(FLOPs / peak of its unit, bytes / HBM bandwidth)` plus the launch of a kernel
//! inside a replayed capture (compiled graphs are captured and replayed by default). A
//! kernel is the sum of the aclnn calls it makes: the 910's Attention composition pays
//! for its scores tensor several times over, where `aclnnFlashAttentionScore` never
//! writes it. `backend-acl/tests/cost_model.rs` checks the figures and the per-call cost
//! against acl-emu's for every SoC it models.

use crate::kernels::Impl;
use acl_sys::soc::secs_to_ps;
use runtime::{DType, Op, TensorMeta};
use std::time::Duration;

/// Launch cost of one kernel inside a replayed capture, picoseconds (acl-emu's
/// `REPLAYED_LAUNCH_PS`: an assumption, see docs/ASCEND.md).
pub const REPLAYED_LAUNCH_PS: u64 = 1_000_000;

/// One SoC's modelled rates. Plain data: `Send + Sync`.
#[derive(Clone, Debug, PartialEq)]
pub struct SocModel {
    /// Cube FLOP/s in FP16 (a MAC is 2 FLOPs).
    pub cube_fp16: f64,
    /// Whether the Cube has an FP32 path (Atlas A2: a quarter of the FP16 rate); the 910
    /// computes FP32 products in FP16.
    pub cube_fp32: bool,
    /// Vector FLOP/s for 2-byte elements (half for wider ones).
    pub vector_fp16: f64,
    /// HBM bandwidth, bytes/s.
    pub hbm: f64,
}

impl SocModel {
    /// The figures of `soc` (the `aclrtGetSocName` string, whole); an unknown SoC gets the
    /// Ascend910A's, as in acl-emu.
    pub fn of(soc: &str) -> SocModel {
        let f = acl_sys::soc::SocFigures::of(soc).unwrap_or(acl_sys::soc::SocFigures::ASCEND_910A);
        SocModel {
            cube_fp16: f.cube_fp16_flops(),
            cube_fp32: f.atlas_a2,
            vector_fp16: f.vector_fp16_flops(),
            hbm: f.hbm,
        }
    }

    /// The modelled time of one aclnn call computing `op`, picoseconds, without its launch:
    /// the Cube for matrix products in their compute dtype (`fp16_compute`: FP32 operands
    /// computed in FP16), the Vector units for the rest at the widest operand's rate.
    pub fn call_ps(&self, op: &Op, inputs: &[TensorMeta], outputs: &[TensorMeta], fp16_compute: bool) -> u64 {
        let flops = op.flops(inputs, outputs) as f64;
        let bytes = op.bytes(inputs, outputs) as f64;
        let peak = if op.is_matrix_product() {
            let dt = inputs.first().map_or(DType::F16, |m| m.dtype);
            if dt == DType::F32 && !fp16_compute && self.cube_fp32 { self.cube_fp16 / 4.0 } else { self.cube_fp16 }
        } else {
            let widest = inputs.iter().chain(outputs).map(|m| m.dtype).max_by_key(|d| d.size()).unwrap_or(DType::F16);
            if widest.size() <= 2 { self.vector_fp16 } else { self.vector_fp16 / 2.0 }
        };
        secs_to_ps((flops / peak).max(bytes / self.hbm))
    }

    /// The modelled time of kernel `imp` running `op` (inputs, outputs), each of its aclnn
    /// calls with a replayed launch; `None` for the host tier, which the model does not see.
    pub(crate) fn kernel(&self, imp: Impl, op: &Op, inputs: &[TensorMeta], outputs: &[TensorMeta]) -> Option<Duration> {
        let fp16 = imp == Impl::AclnnFp16Compute;
        let calls = match imp {
            Impl::Host => return None,
            Impl::AclnnFlash => flash_calls(op, inputs, outputs)?,
            Impl::Aclnn | Impl::AclnnFp16Compute => calls(op, inputs, outputs)?,
        };
        let total = calls
            .iter()
            .map(|c| {
                self.call_ps(&c.op, &c.ins, &c.outs, fp16 && c.op.is_matrix_product())
                    .saturating_add(REPLAYED_LAUNCH_PS)
            })
            .fold(0u64, u64::saturating_add);
        Some(Duration::from_nanos(total / 1000))
    }
}

/// One aclnn call as the model costs it: the op whose FLOPs and bytes it has.
struct CallCost {
    op: Op,
    ins: Vec<TensorMeta>,
    outs: Vec<TensorMeta>,
}

fn call(op: Op, ins: &[&TensorMeta], outs: &[&TensorMeta]) -> CallCost {
    CallCost { op, ins: ins.iter().map(|m| (*m).clone()).collect(), outs: outs.iter().map(|m| (*m).clone()).collect() }
}

/// Reductions, comparisons and fills: acl-emu costs them as a copy of their operands.
fn pass(ins: &[&TensorMeta], outs: &[&TensorMeta]) -> CallCost {
    call(Op::Copy, ins, outs)
}

fn meta(dt: DType, dims: &[usize]) -> TensorMeta {
    TensorMeta::new(dt, dims.to_vec())
}

/// The aclnn calls of the aclnn tier's kernel for `op` (`kernels/aclnn/mod.rs`); one call
/// of the op itself where the kernel makes one (or where the difference is small).
fn calls(op: &Op, ins: &[TensorMeta], outs: &[TensorMeta]) -> Option<Vec<CallCost>> {
    let out = outs.first()?;
    let x = ins.first()?;
    Some(match op {
        Op::Attention { causal, .. } => composed_attention(ins, out, *causal)?,
        Op::BiasGelu(a) => vec![call(Op::Add, &[x, ins.get(1)?], &[out]), call(Op::Gelu(*a), &[out], &[out])],
        Op::AddLayerNorm { eps } => {
            let (g, b) = (ins.get(2)?, ins.get(3)?);
            vec![call(Op::Add, &[x, ins.get(1)?], &[out]), call(Op::LayerNorm { eps: *eps }, &[out, g, b], &[out])]
        }
        // An fp16 weight: x (and the bias) cast to fp16, the product in fp16, cast back.
        Op::Linear if x.dtype == DType::F32 && ins.get(1)?.dtype == DType::F16 => {
            let (x16, o16) = (meta(DType::F16, x.shape.dims()), meta(DType::F16, out.shape.dims()));
            let mut v = vec![call(Op::Cast { to: DType::F16 }, &[x], &[&x16])];
            let mut product: Vec<&TensorMeta> = vec![&x16, &ins[1]];
            let b16 = ins.get(2).map(|b| meta(DType::F16, b.shape.dims()));
            if let (Some(b), Some(b16)) = (ins.get(2), b16.as_ref()) {
                v.push(call(Op::Cast { to: DType::F16 }, &[b], &[b16]));
                product.push(b16);
            }
            v.push(call(Op::Linear, &product, &[&o16]));
            v.push(call(Op::Cast { to: DType::F32 }, &[&o16], &[out]));
            v
        }
        _ => vec![CallCost { op: op.clone(), ins: ins.to_vec(), outs: outs.to_vec() }],
    })
}

/// Attention composed of aclnn operators (`compositions::attention`): `q · kᵀ` into the
/// scores, scaled, the mask added, (causal: the triangle cut and filled), the rows' maxima
/// tested against -inf, the softmax, the product with v, the fully masked rows zeroed.
fn composed_attention(ins: &[TensorMeta], out: &TensorMeta, causal: bool) -> Option<Vec<CallCost>> {
    let (q, k, v) = (ins.first()?, ins.get(1)?, ins.get(2)?);
    let ([b, h, s, _], t) = (dims4(q)?, *dims4(k)?.get(2)?);
    let scores = meta(q.dtype, &[b, h, s, t]);
    let (rows, masked) = (meta(q.dtype, &[b, h, s, 1]), meta(DType::U8, &[b, h, s, 1]));
    let mut c = vec![
        call(Op::MatMul { trans_a: false, trans_b: true }, &[q, k], &[&scores]),
        call(Op::Scale { factor: 1.0 }, &[&scores], &[&scores]),
    ];
    if let Some(m) = ins.get(3) {
        c.push(call(Op::Add, &[&scores, m], &[&scores]));
    }
    if causal {
        let tri = meta(DType::U8, &[s, t]);
        c.push(pass(&[&tri], &[&tri]));
        c.push(pass(&[&scores, &tri], &[&scores]));
    }
    c.push(pass(&[&scores], &[&rows]));
    c.push(pass(&[&rows], &[&masked]));
    c.push(call(Op::Softmax { axis: -1 }, &[&scores], &[&scores]));
    c.push(call(Op::MatMul { trans_a: false, trans_b: false }, &[&scores, v], &[out]));
    c.push(pass(&[out, &masked], &[out]));
    Some(c)
}

/// The fused Atlas A2 kernels (`compositions::flash_attention`; Rope as one call): with
/// a mask, q scaled first, the mask passed as a pse broadcast to `[B, H, S or 1, T]`, and
/// the fully masked rows found from the mask and zeroed.
fn flash_calls(op: &Op, ins: &[TensorMeta], outs: &[TensorMeta]) -> Option<Vec<CallCost>> {
    let out = outs.first()?;
    let Op::Attention { causal, .. } = op else {
        return Some(vec![CallCost { op: op.clone(), ins: ins.to_vec(), outs: outs.to_vec() }]);
    };
    let (q, k, v) = (ins.first()?, ins.get(1)?, ins.get(2)?);
    let ([_, h, _, _], t) = (dims4(q)?, *dims4(k)?.get(2)?);
    let mut c = Vec::new();
    let mut fa_ins = vec![q.clone(), k.clone(), v.clone()];
    let mut tail = Vec::new();
    if let Some(m) = ins.get(3) {
        c.push(call(Op::Scale { factor: 1.0 }, &[q], &[q]));
        let md = m.shape.dims();
        let pad = 4usize.saturating_sub(md.len());
        let m4: Vec<usize> = std::iter::repeat_n(1, pad).chain(md.iter().copied()).collect();
        let (rows, masked) = (meta(m.dtype, &[m4[0], m4[1], m4[2], 1]), meta(DType::U8, &[m4[0], m4[1], m4[2], 1]));
        let pse =
            meta(m.dtype, &[m4[0], if m4[1] == 1 { h } else { m4[1] }, m4[2], if m4[3] == 1 { t } else { m4[3] }]);
        fa_ins.push(pse);
        tail.push(pass(&[m], &[&rows]));
        tail.push(pass(&[&rows], &[&masked]));
        tail.push(pass(&[out, &masked], &[out]));
    }
    if *causal {
        let tri = meta(DType::U8, &[2048, 2048]);
        c.push(pass(&[&tri], &[&tri]));
    }
    c.push(CallCost { op: op.clone(), ins: fa_ins, outs: vec![out.clone()] });
    c.extend(tail);
    Some(c)
}

/// A rank-4 operand's dims.
fn dims4(m: &TensorMeta) -> Option<[usize; 4]> {
    m.shape.dims().try_into().ok()
}
