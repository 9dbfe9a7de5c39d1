//! The fast tier's Linear at `m <= MAX_M` rows: picks the weight layout the node holds
//! (prepacked by a compiled graph, or row-major) and runs [`gemv`](super::gemv).

use super::driver::gemv;
use super::weight::{MAX_M, Weight, WeightData};
use crate::kernels::common::*;
use crate::kernels::gemm_bf16::{PackedInPlace, PackedWeight};
use crate::kernels::gemm_packed::PackedBLayout;
use runtime::DType;

/// The `[n, k]` weight bytes as elements of `T` (`None` where short or misaligned: the
/// caller's general path reports that).
fn elems<T: bytemuck::Pod>(bytes: &[u8], n: usize, k: usize) -> Option<&[T]> {
    let len = n.checked_mul(k)?.checked_mul(std::mem::size_of::<T>())?;
    bytemuck::try_cast_slice(bytes.get(..len)?).ok()
}

/// Rows of the Linear's output (the product of x's leading dims), when this path takes it.
fn small_m(ins: &[In]) -> Option<usize> {
    let m = numel(&ins[0].dims[..ins[0].dims.len().checked_sub(1)?]);
    (1..=MAX_M).contains(&m).then_some(m)
}

/// Runs `c = x · wᵀ + bias` on the weight `w`; `round_x`: x rounded to bf16 first (what
/// the bf16 unit multiplies, whatever the weight's layout).
fn run(ins: &[In], outs: &mut [Out], ctx: &Ctx, m: usize, w: &Weight<'_>, round_x: bool) -> KResult {
    let mut x = load_f32(&ins[0])?;
    if round_x {
        x.to_mut().iter_mut().for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
    }
    let bias = match ins.get(2) {
        Some(b) => Some(load_f32(b)?),
        None => None,
    };
    with_f32_out(&mut outs[0], |c| gemv(ctx.features, m, &x, w, bias.as_deref(), c, false, ctx.threads))
}

/// The f32 unit's Linear (f32 weights, prepacked or not; f16 and bf16 weights widened in
/// registers) at `m <= MAX_M`; `None` where it does not apply (more rows, another weight
/// dtype, an operand the general path must report).
pub fn linear_f32(ins: &[In], outs: &mut [Out], ctx: &Ctx) -> Option<KResult> {
    let m = small_m(ins)?;
    let (n, k) = (*ins[1].dims.first()?, *ins[1].dims.get(1)?);
    let bytes = ins[1].bytes;
    let pre = ctx.prepacked.as_ref();
    let packed = pre.and_then(|p| p.0.downcast_ref::<PackedBLayout>());
    // Any other prepacked form (the bf16 panels) is not a row-major weight: not read here.
    if pre.is_some() && packed.is_none() {
        return None;
    }
    let data = match (packed, ins[1].dtype) {
        (Some(l), DType::F32) => WeightData::F32Packed(l, elems(bytes, l.len(), 1)?),
        (Some(_), _) => return None,
        (None, DType::F32) => WeightData::F32(elems(bytes, n, k)?),
        (None, DType::F16) => WeightData::F16(elems(bytes, n, k)?),
        (None, DType::BF16) => WeightData::Bf16(elems(bytes, n, k)?),
        _ => return None,
    };
    Some(run(ins, outs, ctx, m, &Weight { n, k, data }, false))
}

/// The bf16 unit's Linear at `m <= MAX_M`: the k-pair panels where the graph packed the
/// weight (`vdpbf16ps` on x rounded to bf16, as the GEMM computes), the row-major bf16
/// weight read in place otherwise (no per-call packing of the weight; x rounded to bf16
/// too, the products exact in f32 as `vdpbf16ps` makes them);
/// `None` where it does not apply.
pub fn linear_bf16(ins: &[In], outs: &mut [Out], ctx: &Ctx) -> Option<KResult> {
    let m = small_m(ins)?;
    let (n, k) = (*ins[1].dims.first()?, *ins[1].dims.get(1)?);
    let pre = ctx.prepacked.as_ref();
    if let Some(p) = pre.and_then(|p| p.0.downcast_ref::<PackedWeight<'static>>()).filter(|p| p.n == n && p.k == k) {
        return Some(run(ins, outs, ctx, m, &Weight { n, k, data: WeightData::Bf16Packed(p) }, false));
    }
    if pre.and_then(|p| p.0.downcast_ref::<PackedInPlace>()) == Some(&PackedInPlace { n, k }) {
        let view = match PackedWeight::view(ins[1].bytes, n, k) {
            Ok(v) => v,
            Err(e) => return Some(Err(e)),
        };
        return Some(run(ins, outs, ctx, m, &Weight { n, k, data: WeightData::Bf16Packed(&view) }, false));
    }
    if pre.is_some() || ins[1].dtype != DType::BF16 {
        return None;
    }
    let data = WeightData::Bf16(elems(ins[1].bytes, n, k)?);
    Some(run(ins, outs, ctx, m, &Weight { n, k, data }, true))
}
