//! The CPU kernel table: three implementations of every op of the table.
//!
//! * `reference` — plain loops, f64 accumulation: the ground truth ([`reference`]).
//! * `generic` — portable `ndarray` code, f32 compute ([`generic`]).
//! * `fast` — SIMD paths picked from the detected CPU features, `gemm` for matrix
//!   products, multi-threaded ([`fast`]).

pub mod attention;
pub mod blas;
pub mod common;
pub mod fast;
pub mod gemm_bf16;
pub mod gemm_packed;
pub mod generic;
pub mod reference;

use crate::features::CpuFeatures;
use common::{Ctx, In, KResult, Out};
use runtime::{KernelInfo, KernelQuery, OpKind, Tier, Unit};
use std::sync::OnceLock;

/// The entry point every kernel shares.
pub type KernelFn = fn(&runtime::Op, &[In], &mut [Out], &Ctx) -> KResult;

fn any(_: &KernelQuery<'_>) -> Result<(), String> {
    Ok(())
}

/// The matrix-product ops, which the fast tier runs on the FMA "Cube"-class unit.
fn is_matrix(kind: OpKind) -> bool {
    matches!(kind, OpKind::MatMul | OpKind::Gemm | OpKind::Linear | OpKind::Attention)
}

/// Fast-tier attention materialises one block of scores (`attention::ROWS` query rows)
/// per thread.
fn fast_attention(q: &KernelQuery<'_>) -> Result<(), String> {
    let s = &q.inputs[0].shape;
    let t = &q.inputs[1].shape;
    let rows = s.dims().get(2).copied().unwrap_or(0).min(attention::ROWS);
    let scores = rows.saturating_mul(t.dims().get(2).copied().unwrap_or(0));
    if scores > 1 << 26 {
        return Err(format!("score matrix of {scores} elements per head is too large"));
    }
    Ok(())
}

/// The bf16 Linear: f32 activations, a bf16 weight, AVX-512-BF16 dot products.
fn bf16_linear(q: &KernelQuery<'_>) -> Result<(), String> {
    use runtime::DType;
    if !gemm_bf16::available() {
        return Err("this CPU has no AVX-512-BF16".into());
    }
    let d: Vec<DType> = q.inputs.iter().map(|m| m.dtype).collect();
    match d.as_slice() {
        [DType::F32, DType::BF16] | [DType::F32, DType::BF16, DType::F32] => Ok(()),
        _ => Err("needs f32 x with a bf16 weight (and f32 bias)".into()),
    }
}

fn name(kind: OpKind, tier: Tier, unit: Unit) -> &'static str {
    // Built once per process (the table is a static), so leaking is bounded.
    Box::leak(format!("{}.{}.{}", kind.name().to_ascii_lowercase(), tier.name(), unit.label).into_boxed_str())
}

/// The kernel table and the functions behind it (index = `KernelInfo::id`).
pub struct Table {
    pub infos: Vec<KernelInfo>,
    pub fns: Vec<KernelFn>,
}

pub fn table(f: &CpuFeatures) -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let mut infos = Vec::new();
        let mut fns: Vec<KernelFn> = Vec::new();
        for kind in OpKind::ALL {
            let fast_unit = if is_matrix(kind) { f.matrix_unit() } else { f.vector_unit() };
            let fast_support: runtime::kernel::SupportFn = if kind == OpKind::Attention { fast_attention } else { any };
            let tiers: [(Tier, Unit, KernelFn, runtime::kernel::SupportFn); 3] = [
                (Tier::HighPerformance, fast_unit, fast::run, fast_support),
                (Tier::Generic, f.baseline_unit(), generic::run, any),
                (Tier::Reference, f.scalar_unit(), reference::run, any),
            ];
            if kind == OpKind::Linear {
                // Before the f32 fast kernel: chosen whenever the weight is bf16.
                let unit = f.bf16_unit();
                let kname = Box::leak(format!("linear.fast.{}", unit.label).into_boxed_str());
                infos.push(KernelInfo {
                    name: kname,
                    op: kind,
                    tier: Tier::HighPerformance,
                    unit,
                    supports: bf16_linear,
                    id: fns.len(),
                });
                fns.push(fast::linear_bf16);
            }
            for (tier, unit, func, supports) in tiers {
                infos.push(KernelInfo { name: name(kind, tier, unit), op: kind, tier, unit, supports, id: fns.len() });
                fns.push(func);
            }
        }
        Table { infos, fns }
    })
}
