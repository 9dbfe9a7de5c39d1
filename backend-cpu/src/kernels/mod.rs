//! The CPU kernel table: three implementations of every op of the table.
//!
//! * `reference` — plain loops, f64 accumulation: the ground truth, shared with every
//!   backend's host tier ([`runtime::reference`]).
//! * `generic` — portable `ndarray` code, f32 compute ([`generic`]).
//! * `fast` — SIMD paths picked from the detected CPU features, `gemm` for matrix
//!   products, multi-threaded ([`fast`]).
//!
//! Beside the tiers: [`common`] (operands, context), [`simd_math`] (the `exp`/`tanh`/`erf`
//! approximations and row softmax the fast tier and [`attention`] share), [`rope`] (Rope in
//! f32, both tiers), the paged KV cache ([`paged`]: KvCacheWrite and PagedAttention for the
//! generic and fast tiers), and the matrix products [`blas`], [`gemm_packed`] (f32) and
//! [`gemm_bf16`] (bf16), and [`attention_bf16`] (Attention with bf16 q, k, v: both
//! products on AMX or AVX-512-BF16, chosen before the f32 fast kernel).
//! The fast tier's Linear with at most [`gemv::MAX_M`] rows (a decode step) runs
//! [`gemv`]: the weight streamed once for all rows, in any of the layouts above; with
//! more rows, an f16 or bf16 weight the CPU has no unit for runs [`linear_widened`].

pub mod attention;
pub mod attention_bf16;
pub mod blas;
pub mod common;
pub mod fast;
pub mod gemm_bf16;
pub mod gemm_i8;
pub mod gemm_packed;
pub mod gemv;
pub mod generic;
pub mod linear_widened;
pub mod norm;
pub mod paged;
pub mod rope;
pub mod simd_math;

use crate::features::CpuFeatures;
use common::{Ctx, In, KResult, Out};
use runtime::{KernelQuery, KernelTable, OpKind, Tier};
use std::sync::OnceLock;

/// The entry point every kernel shares.
pub type KernelFn = fn(&runtime::Op, &[In], &mut [Out], &Ctx) -> KResult;

fn any(_: &KernelQuery<'_>) -> Result<(), String> {
    Ok(())
}

/// The matrix-product ops, which the fast tier runs on the FMA "Cube"-class unit.
fn is_matrix(kind: OpKind) -> bool {
    matches!(kind, OpKind::MatMul | OpKind::Gemm | OpKind::Linear | OpKind::LinearGelu | OpKind::Attention)
}

/// Fast-tier attention materialises one block of scores (`attention::ROWS` query rows)
/// per thread.
fn fast_attention(q: &KernelQuery<'_>) -> Result<(), String> {
    let runtime::Op::Attention { layout, .. } = q.op else { return Err("not an Attention".into()) };
    let (s, t) = (q.inputs[0].shape.dims(), q.inputs[1].shape.dims());
    if s.len() != 4 || t.len() != 4 {
        return Err("q and k must have 4 dims".into());
    }
    let rows = layout.bhsd(s)[2].min(attention::ROWS);
    let scores = rows.saturating_mul(layout.bhsd(t)[2]);
    if scores > 1 << 26 {
        return Err(format!("score matrix of {scores} elements per head is too large"));
    }
    Ok(())
}

/// The bf16 Linear: f32 activations, a bf16 weight, AVX-512-BF16 dot products.
fn bf16_linear(q: &KernelQuery<'_>) -> Result<(), String> {
    use runtime::DType;
    if !gemm_bf16::available() {
        return Err("this CPU has no AVX-512-BF16 or AMX-BF16".into());
    }
    let d: Vec<DType> = q.inputs.iter().map(|m| m.dtype).collect();
    match d.as_slice() {
        [DType::F32, DType::BF16] | [DType::F32, DType::BF16, DType::F32] => Ok(()),
        _ => Err("needs f32 x with a bf16 weight (and f32 bias)".into()),
    }
}

/// The bf16 Attention: bf16 q, k and v (a u8 or bf16 mask), on AVX-512-BF16 or AMX.
fn bf16_attention(q: &KernelQuery<'_>) -> Result<(), String> {
    use runtime::DType;
    if !gemm_bf16::available() {
        return Err("this CPU has no AVX-512-BF16 or AMX-BF16".into());
    }
    if q.inputs.len() < 3 || q.inputs[..3].iter().any(|m| m.dtype != DType::BF16) {
        return Err("needs bf16 q, k and v".into());
    }
    let runtime::Op::Attention { layout, .. } = q.op else { return Err("not an Attention".into()) };
    let (s, t) = (q.inputs[0].shape.dims(), q.inputs[1].shape.dims());
    if s.len() != 4 || t.len() != 4 {
        return Err("q and k must have 4 dims".into());
    }
    let scores = attention_bf16::BLOCK.saturating_mul(layout.bhsd(t)[2]);
    if scores > 1 << 26 {
        return Err(format!("score block of {scores} elements is too large"));
    }
    Ok(())
}

/// The bf16 Cast: f32 to bf16 or back (the casts around a bf16 Attention), vectorised.
fn bf16_cast(q: &KernelQuery<'_>) -> Result<(), String> {
    use runtime::DType;
    if !gemm_bf16::available() {
        return Err("this CPU has no AVX-512-BF16".into());
    }
    match (q.op, q.inputs.first().map(|m| m.dtype)) {
        (runtime::Op::Cast { to: DType::BF16 }, Some(DType::F32))
        | (runtime::Op::Cast { to: DType::F32 }, Some(DType::BF16)) => Ok(()),
        _ => Err("casts between f32 and bf16 only".into()),
    }
}

/// The reference tier: the core's reference kernels (they need no context).
pub fn reference(op: &runtime::Op, ins: &[In], outs: &mut [Out], _ctx: &Ctx) -> KResult {
    runtime::reference::run(op, ins, outs)
}

/// The bf16 Linear under an ISA forced below AVX-512: declines, saying why.
fn bf16_linear_forced_off(_: &KernelQuery<'_>) -> Result<(), String> {
    if !gemm_bf16::available() {
        return Err("this CPU has no AVX-512-BF16 or AMX-BF16".into());
    }
    Err("the CPU ISA is forced below avx512 (NPURT_CPU_ISA / CpuConfig::isa): AVX-512-BF16 is not used".into())
}

/// The kernel table (`KernelInfo::id` indexes the functions), built once per process
/// and instruction-set path (the units' labels name the path).
pub type Table = KernelTable<KernelFn>;

pub fn table(f: &CpuFeatures) -> &'static Table {
    static T: [OnceLock<Table>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match f.isa {
        crate::features::Isa::Avx512 => &T[0],
        crate::features::Isa::Avx2Fma => &T[1],
        crate::features::Isa::Scalar => &T[2],
    };
    slot.get_or_init(|| {
        let mut t = Table::new();
        for kind in OpKind::ALL {
            let fast_unit = if is_matrix(kind) { f.matrix_unit() } else { f.vector_unit() };
            let fast_support: runtime::kernel::SupportFn = if kind == OpKind::Attention { fast_attention } else { any };
            if kind == OpKind::Linear || kind == OpKind::LinearGelu {
                // Before the f32 fast kernel: chosen whenever the weight is bf16.
                let unit = f.bf16_unit();
                let support: runtime::kernel::SupportFn =
                    if f.isa == crate::features::Isa::Avx512 { bf16_linear } else { bf16_linear_forced_off };
                t.add(kind, Tier::HighPerformance, unit, unit.label, support, fast::linear_bf16);
            }
            if kind == OpKind::Attention {
                // Before the f32 fast kernel: chosen whenever q, k and v are bf16.
                let unit = f.bf16_unit();
                let support: runtime::kernel::SupportFn =
                    if f.isa == crate::features::Isa::Avx512 { bf16_attention } else { bf16_linear_forced_off };
                t.add(kind, Tier::HighPerformance, unit, unit.label, support, attention_bf16::run);
            }
            if kind == OpKind::Cast && f.isa == crate::features::Isa::Avx512 {
                // Before the generic fast Cast: f32 to bf16 and back on AVX-512-BF16.
                t.add(kind, Tier::HighPerformance, fast_unit, "avx512-bf16", bf16_cast, attention_bf16::cast);
            }
            t.add(kind, Tier::HighPerformance, fast_unit, fast_unit.label, fast_support, fast::run);
            let unit = f.baseline_unit();
            t.add(kind, Tier::Generic, unit, unit.label, any, generic::run);
            let unit = f.scalar_unit();
            t.add(kind, Tier::Reference, unit, unit.label, any, reference);
        }
        t
    })
}
