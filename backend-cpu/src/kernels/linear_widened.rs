//! The fast tier's Linear with an f16 or bf16 weight past the decode-step rows
//! ([`gemv::MAX_M`](super::gemv::MAX_M)), where the CPU has no unit for that dtype: fp16
//! on any CPU, bf16 without AVX-512-BF16 or AMX (a compiled graph stores its weights in
//! bf16 there when asked to halve the bytes a decode step streams, and its prefill graph,
//! which shares those weights, lands here).
//!
//! The weight is widened to f32 one block of output columns at a time, into a scratch
//! that stays in the thread's L2, and the block's product runs on that thread through the
//! f32 GEMM: the weight is read once, at half the bytes, and never held widened whole
//! (a tied output projection of 136 M elements would otherwise cost half a gigabyte per
//! call). Blocks are spread over the threads; each writes its own columns of the output.

use super::blas;
use super::gemm_packed::{BMatrix, Sgemm, Strided};
use crate::features::Isa;
use half::{bf16, f16};
use rayon::prelude::*;
use runtime::KernelError;

/// Floats of widened weight per block (256 KiB: half of the smallest L2 of the CPUs this
/// runs on, so the GEMM's packing reads it from cache).
const BLOCK_FLOATS: usize = 1 << 16;

/// A row-major `[n, k]` half-precision weight. Send and Sync (a shared slice).
#[derive(Clone, Copy, Debug)]
pub enum HalfWeight<'a> {
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

impl HalfWeight<'_> {
    fn len(&self) -> usize {
        match self {
            HalfWeight::F16(w) => w.len(),
            HalfWeight::Bf16(w) => w.len(),
        }
    }

    /// Elements `[from, from + dst.len())` widened into `dst`.
    fn widen(&self, from: usize, dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        let to = from + dst.len();
        match self {
            HalfWeight::F16(w) => w[from..to].convert_to_f32_slice(dst),
            // A bf16 is the high half of an f32: one shift. half's slice conversion also
            // tests each element for NaN, 0.19 against 0.12 ns per element here (Zen 3),
            // some 35 ms of a qwen2-0.5b prefill.
            HalfWeight::Bf16(w) => {
                dst.iter_mut().zip(&w[from..to]).for_each(|(d, s)| *d = f32::from_bits(u32::from(s.to_bits()) << 16))
            }
        }
    }
}

/// Columns per block for a depth `k` on `threads` threads: a multiple of 16 whose widened
/// rows fit [`BLOCK_FLOATS`], and small enough that every thread gets a block.
fn block_cols(n: usize, k: usize, threads: usize) -> usize {
    let fit = (BLOCK_FLOATS / k.max(1)) / 16 * 16;
    let share = n.div_ceil(threads.max(1)).div_ceil(16) * 16;
    fit.min(share).max(16).min(n)
}

/// `c[m×n] = x[m×k] · wᵀ (+ bias)` with `w` widened block by block (see the module doc);
/// `c` is overwritten. Operands shorter than their dimensions are an error.
pub fn linear(
    isa: Isa,
    x: &[f32],
    w: HalfWeight<'_>,
    bias: Option<&[f32]>,
    (m, n, k): (usize, usize, usize),
    c: &mut [f32],
    threads: usize,
) -> Result<(), KernelError> {
    let short = |what: &str, got: usize, need: Option<usize>| match need {
        Some(need) if got >= need => Ok(()),
        _ => Err(KernelError::Internal(format!("Linear: {what} has {got} elements, [{m}, {n}, {k}] needs more"))),
    };
    short("x", x.len(), m.checked_mul(k))?;
    short("weight", w.len(), n.checked_mul(k))?;
    short("output", c.len(), m.checked_mul(n))?;
    if let Some(b) = bias {
        short("bias", b.len(), Some(n))?;
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let cols = block_cols(n, k, threads);
    let starts: Vec<usize> = (0..n).step_by(cols).collect();
    // One block: its columns of x · wᵀ in a buffer of its own (rows of `width`).
    let block = |scratch: &mut Vec<f32>, j0: usize| -> Result<Vec<f32>, KernelError> {
        let width = cols.min(n - j0);
        scratch.resize(width * k, 0.0);
        w.widen(j0 * k, &mut scratch[..width * k]);
        let mut out = vec![0f32; m * width];
        blas::sgemm(Sgemm {
            isa,
            m,
            n: width,
            k,
            alpha: 1.0,
            a: Strided { data: x, rs: k, cs: 1 },
            // The widened rows are wᵀ's columns: strides (1, k).
            b: BMatrix::Strided(Strided { data: &scratch[..width * k], rs: 1, cs: k }),
            beta: 0.0,
            bias: bias.map(|b| &b[j0..j0 + width]),
            c: &mut out,
            ldc: width,
            threads: 1,
        })?;
        Ok(out)
    };
    let blocks: Vec<Result<Vec<f32>, KernelError>> = if threads > 1 && starts.len() > 1 {
        starts.par_iter().map_init(Vec::new, |s, &j0| block(s, j0)).collect()
    } else {
        let mut s = Vec::new();
        starts.iter().map(|&j0| block(&mut s, j0)).collect()
    };
    for (&j0, out) in starts.iter().zip(blocks) {
        let out = out?;
        let width = cols.min(n - j0);
        for (row, src) in c.chunks_mut(n).zip(out.chunks_exact(width)) {
            row[j0..j0 + width].copy_from_slice(src);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features;

    /// The product in f64 over the widened weight.
    fn expected(x: &[f32], w: &[f32], bias: Option<&[f32]>, m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|p| f64::from(x[i * k + p]) * f64::from(w[j * k + p])).sum();
                c[i * n + j] = (s + bias.map_or(0.0, |b| f64::from(b[j]))) as f32;
            }
        }
        c
    }

    #[test]
    fn blocks_of_widened_columns_make_the_whole_product_on_every_path() {
        let mut rng = npurt_test_support::rng::Rng(7);
        let paths: Vec<Isa> = Isa::ALL.into_iter().filter(|&i| features::get().check(i).is_ok()).collect();
        // Widths that cut into whole blocks, a ragged last block, fewer than 16 columns,
        // and a depth whose block is 16 columns.
        for &(m, n, k) in &[(9, 100, 64), (33, 16 * 9, 896), (12, 7, 40), (20, 70, 5000)] {
            let x = rng.vec(m * k);
            let wb: Vec<bf16> = rng.vec(n * k).into_iter().map(bf16::from_f32).collect();
            let wh: Vec<f16> = wb.iter().map(|v| f16::from_f32(v.to_f32())).collect();
            let wf: Vec<f32> = wb.iter().map(|v| v.to_f32()).collect();
            let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
            for &isa in &paths {
                for threads in [1, 2, 3] {
                    for (w, has_bias) in [(HalfWeight::Bf16(&wb), true), (HalfWeight::F16(&wh), false)] {
                        let b = has_bias.then_some(&bias[..]);
                        let mut c = vec![f32::NAN; m * n];
                        linear(isa, &x, w, b, (m, n, k), &mut c, threads).unwrap();
                        let want = expected(&x, &wf, b, m, n, k);
                        for (i, (g, e)) in c.iter().zip(&want).enumerate() {
                            let tol = 1e-4 * (k as f32).sqrt() * (1.0 + e.abs());
                            assert!(
                                (g - e).abs() <= tol,
                                "{isa:?} {m}x{n}x{k} threads {threads} {w:?}: c[{i}] = {g}, want {e}",
                                w = std::mem::discriminant(&w)
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn short_operands_are_errors() {
        let x = vec![0f32; 10];
        let w = vec![bf16::ZERO; 20];
        let mut c = vec![0f32; 8];
        let isa = features::get().isa;
        assert!(linear(isa, &x, HalfWeight::Bf16(&w), None, (2, 4, 5), &mut c, 1).is_ok());
        assert!(linear(isa, &x, HalfWeight::Bf16(&w), None, (3, 4, 5), &mut c, 1).is_err(), "x too short");
        assert!(linear(isa, &x, HalfWeight::Bf16(&w[..19]), None, (2, 4, 5), &mut c, 1).is_err(), "w too short");
        assert!(linear(isa, &x, HalfWeight::Bf16(&w), Some(&[0.0; 3]), (2, 4, 5), &mut c, 1).is_err(), "bias");
        assert!(linear(isa, &x, HalfWeight::Bf16(&w), None, (usize::MAX, 4, 5), &mut c, 1).is_err(), "overflow");
    }
}
