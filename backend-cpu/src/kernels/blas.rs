//! Dense f32 matrix products for the high-performance tier: the one entry point every
//! kernel calls ([`sgemm`]) with the product described by its operands
//! ([`Sgemm`](super::gemm_packed::Sgemm)). npurt's packed GEMM runs it on the micro-kernel
//! of the path the backend selected; the `gemm` crate (BLIS-style packing with
//! micro-kernels it chooses itself, `NPURT_GEMM=gemm`) may run the plain products of the
//! CPU's widest path.

use super::gemm_packed::{self, BMatrix, Sgemm};

/// Runs `g`: `C = alpha·A·B + beta·C (+ bias on every row)`.
///
/// Operands shorter than the dimensions require, a packed B of another shape or path, or
/// a bias shorter than `n` are an error. npurt's packed GEMM runs the micro-kernel of the
/// path `g.isa` (the backend's, possibly forced); the `gemm` crate (`NPURT_GEMM=gemm`)
/// picks its own, so it runs only plain products (strided B, no bias, `beta` 0 or 1) on the
/// CPU's widest path.
pub fn sgemm(g: Sgemm<'_>) -> Result<(), runtime::KernelError> {
    let (m, n, k) = (g.m, g.n, g.k);
    if m == 0 || n == 0 {
        return Ok(());
    }
    check(&g)?;
    let plain = match g.b {
        BMatrix::Strided(b) => (g.bias.is_none() && (g.beta == 0.0 || g.beta == 1.0)).then_some(b),
        BMatrix::Packed { .. } => None,
    };
    let Some(b) = plain.filter(|_| !use_packed() && g.isa == crate::features::get().widest) else {
        gemm_packed::run(g);
        return Ok(());
    };
    if k == 0 {
        if g.beta == 0.0 {
            for i in 0..m {
                g.c[i * g.ldc..i * g.ldc + n].fill(0.0);
            }
        }
        return Ok(());
    }
    let (a, c, ldc) = (g.a, g.c, g.ldc);
    let par = if g.threads > 1 && m * n * k >= 64 * 64 * 64 {
        gemm::Parallelism::Rayon(g.threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the slice lengths checked above cover every element addressed by the
    // dimensions and strides, `c` is exclusively borrowed and cannot alias `a` or `b`,
    // and `gemm` reads `c` only when `read_dst` is true.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            g.beta != 0.0,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            g.alpha,
            false,
            false,
            false,
            par,
        );
    }
    Ok(())
}

/// The operands of `g` (with `m` and `n` non-zero) are as long as its dimensions need.
fn check(g: &Sgemm<'_>) -> Result<(), runtime::KernelError> {
    let (m, n, k) = (g.m, g.n, g.k);
    let need = |rows: usize, cols: usize, rs: usize, cs: usize| {
        if rows == 0 || cols == 0 { 0 } else { (rows - 1) * rs + (cols - 1) * cs + 1 }
    };
    let b_fits = match g.b {
        BMatrix::Strided(b) => b.data.len() >= need(k, n, b.rs, b.cs),
        BMatrix::Packed { layout, data } => {
            layout.is_for(g.isa) && (layout.k, layout.n) == (k, n) && data.len() >= layout.len()
        }
    };
    let bias_fits = g.bias.is_none_or(|v| v.len() >= n);
    if g.a.data.len() < need(m, k, g.a.rs, g.a.cs) || !b_fits || !bias_fits || g.c.len() < need(m, n, g.ldc, 1) {
        return Err(runtime::KernelError::Internal(format!("sgemm operands too short for {m}x{k}x{n}")));
    }
    Ok(())
}

/// Which GEMM the fast tier uses: npurt's own packed kernels (default, measured faster,
/// see docs/PERF.md) or the `gemm` crate (`NPURT_GEMM=gemm`). A bad value gives the
/// default here; `CpuBackend::new` refuses it ([`packed_from_env`]).
pub fn use_packed() -> bool {
    static P: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *P.get_or_init(|| packed_from_env().unwrap_or(true))
}

/// `NPURT_GEMM`: `packed` (the default when unset) or `gemm`; any other value is an error
/// naming the variable.
pub fn packed_from_env() -> Result<bool, runtime::env::EnvError> {
    Ok(runtime::env::choice_var("NPURT_GEMM", &[("packed", true), ("gemm", false)])?.unwrap_or(true))
}
