//! The description of one f32 matrix product that every caller fills: its operands,
//! scalars, threads and instruction-set path ([`Sgemm`]).

use super::packed_b::PackedBLayout;
use crate::features::Isa;

/// A matrix read through strides: element `(i, j)` at `data[i * rs + j * cs]`. Strides are
/// in elements and may be any value (`rs = 1, cs = rows` for a column-major or transposed
/// view).
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// The `k×n` right-hand operand: read through strides, or packed once by
/// [`pack_b`](super::pack_b) (a constant weight).
#[derive(Clone, Copy, Debug)]
pub enum BMatrix<'a> {
    Strided(Strided<'a>),
    /// `data` holds at least `layout.len()` floats in `layout`'s order; the layout is
    /// `k×n` and was made for [`Sgemm::isa`].
    Packed {
        layout: &'a PackedBLayout,
        data: &'a [f32],
    },
}

/// `C = alpha·A·B + beta·C (+ bias on every row)`: one f32 matrix product.
///
/// `m`, `n` or `k` may be 0. When `beta == 0`, `C` is not read (it may hold NaN or
/// garbage); when `alpha == 0` or `k == 0`, `A` and `B` are not read.
///
/// # Preconditions (the caller guarantees them)
///
/// When the corresponding dimensions are non-zero:
/// * `a.data.len() >= (m-1)*a.rs + (k-1)*a.cs + 1`, and likewise for a strided `b` (`k×n`);
/// * `c.len() >= (m-1)*ldc + n` and `ldc >= n` (when `m > 1`), so rows of `C` do not overlap;
/// * `bias`, when given, holds at least `n` values;
/// * `isa` runs on this CPU ([`crate::features::CpuFeatures::check`] says so beforehand).
///
/// [`kernels::blas::sgemm`](crate::kernels::blas::sgemm) checks them and returns an error;
/// below it, those on `C`, a packed B, the bias and the path are `assert!`ed in all builds
/// (`C` is written through raw pointers), those on `A` and a strided `B` are
/// `debug_assert`ed (an out-of-range read still panics via slice indexing).
#[derive(Debug)]
pub struct Sgemm<'a> {
    /// The instruction-set path whose micro-kernel runs: the backend's
    /// (`ctx.features.isa`), never detected here.
    pub isa: Isa,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    /// `m×k`.
    pub a: Strided<'a>,
    /// `k×n`.
    pub b: BMatrix<'a>,
    pub beta: f32,
    /// Added to every row of C as the tile is written (no extra pass over C).
    pub bias: Option<&'a [f32]>,
    /// `m×n` row-major: element `(i, j)` at `c[i * ldc + j]`.
    pub c: &'a mut [f32],
    pub ldc: usize,
    /// The most threads to use: `0` or `1` runs on the calling thread without rayon; larger
    /// values run up to that many jobs on the current rayon pool (call it from inside
    /// `pool.install(..)` to pick a pool). Problems with `m·n·k < 64³` always run
    /// single-threaded.
    pub threads: usize,
}
