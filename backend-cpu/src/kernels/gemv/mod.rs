//! The small-m Linear: `c[m×n] = x[m×k] · wᵀ (+ bias) (+ c)` for `m ≤` [`MAX_M`] rows, the
//! shape of a decode step at batch 1..8. Its cost is reading the weight once, so the
//! kernels stream each weight byte exactly once for all `m` rows, split the output columns
//! over the threads (each thread streams its own part of the weight) and prefetch ahead.
//!
//! The weight is read in the layout the Linear already holds ([`WeightData`]):
//!
//! * row-major `[n, k]` f32, f16 or bf16 (an eager call, a weight the graph could not
//!   relayout, such as an embedding table tied to the output projection): dot products
//!   along each weight row, f16/bf16 widened to f32 in registers (the f32 products the
//!   fast tier computes for these weights; the bf16 unit's Linear rounds x to bf16 first,
//!   as its GEMM does), `R` rows at a time;
//! * f32 prepacked by a compiled graph ([`PackedBLayout`]: k slices of panels of `NR`
//!   columns): each panel streamed once, `m` broadcasts per k;
//! * bf16 prepacked ([`PackedWeight`]: panels of 32 columns of k-pair words): each panel
//!   streamed once, `x` rounded to bf16 pairs and multiplied with `vdpbf16ps`, exactly the
//!   arithmetic of [`gemm_bf16::gemm`](super::gemm_bf16::gemm).
//!
//! Paths: AVX-512 (`x86.rs`: F, FMA; the bf16 panels with AVX-512-BF16), AVX2 + FMA (+ F16C,
//! without which the row-major weights take the scalar path), and a portable scalar one
//! (`scalar.rs`), chosen from the features the backend selected (a forced ISA included).
//! The bf16 panels have no AVX2 form: the bf16 Linear is offered only with AVX-512-BF16,
//! and other CPUs read them through the scalar path.

mod driver;
mod linear;
mod scalar;
#[cfg(test)]
mod tests;
mod weight;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use driver::gemv;
pub use linear::{linear_bf16, linear_f32};
pub use weight::{MAX_M, Weight, WeightData};
