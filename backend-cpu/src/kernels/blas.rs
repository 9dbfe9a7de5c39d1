//! Dense f32 matrix products for the high-performance tier (the `gemm` crate: BLIS-style
//! packing with AVX-512 / AVX2+FMA / scalar micro-kernels chosen at run time).

/// `c = alpha * op(a) @ op(b) + (if accumulate { c } else { 0 })` for one matrix.
///
/// `a` is `m x k` read with strides `(rsa, csa)`, `b` is `k x n` with `(rsb, csb)`, `c`
/// is row-major `m x n` with row stride `ldc`. npurt's packed GEMM runs the micro-kernel of
/// the path `isa` (the backend's, possibly forced); the `gemm` crate (`NPURT_GEMM=gemm`)
/// picks its own, so a forced path narrower than the CPU's widest always takes the former.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    isa: crate::features::Isa,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    rsa: usize,
    csa: usize,
    b: &[f32],
    rsb: usize,
    csb: usize,
    accumulate: bool,
    c: &mut [f32],
    ldc: usize,
    threads: usize,
) -> Result<(), runtime::KernelError> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let need = |rows: usize, cols: usize, rs: usize, cs: usize| {
        if rows == 0 || cols == 0 { 0 } else { (rows - 1) * rs + (cols - 1) * cs + 1 }
    };
    if a.len() < need(m, k, rsa, csa) || b.len() < need(k, n, rsb, csb) || c.len() < need(m, n, ldc, 1) {
        return Err(runtime::KernelError::Internal(format!("sgemm operands too short for {m}x{k}x{n}")));
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                c[i * ldc..i * ldc + n].fill(0.0);
            }
        }
        return Ok(());
    }
    if use_packed() || isa != crate::features::get().widest {
        let beta = if accumulate { 1.0 } else { 0.0 };
        super::gemm_packed::sgemm_on(isa, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, threads);
        return Ok(());
    }
    let par = if threads > 1 && m * n * k >= 64 * 64 * 64 {
        gemm::Parallelism::Rayon(threads)
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
            accumulate,
            a.as_ptr(),
            csa as isize,
            rsa as isize,
            b.as_ptr(),
            csb as isize,
            rsb as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            par,
        );
    }
    Ok(())
}

/// Which GEMM the fast tier uses: npurt's own packed kernels (default, measured faster,
/// see docs/PERF.md) or the `gemm` crate (`NPURT_GEMM=gemm`).
pub fn use_packed() -> bool {
    static P: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *P.get_or_init(|| std::env::var("NPURT_GEMM").map_or(true, |v| v != "gemm"))
}
