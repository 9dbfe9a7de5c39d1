//! The AVX2+FMA (6×16) and AVX-512F (12×32, and 8×32 for row counts that 12 does not
//! divide well) micro-kernels.

use super::layout::{Blocking, MicroKernel, Problem, impl_packing, pack_a_panel, pack_b_panel};
use std::arch::x86_64::*;

/// Defines a `#[target_feature]` micro-kernel with `MR` rows and `NV` vectors of `LANES`
/// floats per row; the accumulator array is fully unrolled into registers by LLVM.
macro_rules! simd_kernel {
    ($name:ident, $feat:literal, $vt:ty, $lanes:expr, $mr:expr, $nv:expr,
     $zero:ident, $loadu:ident, $storeu:ident, $set1:ident, $fmadd:ident, $mul:ident) => {
        /// # Safety
        /// CPU supports the target features; `a`: `kc*MR` floats, `b`: `kc*NR` floats
        /// readable; `c`: MR×NR tile at stride `ldc` readable (if `beta != 0`) and writable.
        #[target_feature(enable = $feat)]
        unsafe fn $name(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, alpha: f32, beta: f32) {
            const MR: usize = $mr;
            const NV: usize = $nv;
            const L: usize = $lanes;
            const NR: usize = NV * L;
            for i in 0..MR {
                // SAFETY: prefetch is only a hint; the address is inside the C tile.
                unsafe {
                    _mm_prefetch::<_MM_HINT_T0>(c.add(i * ldc).cast::<i8>());
                    _mm_prefetch::<_MM_HINT_T0>(c.add(i * ldc + NR - 1).cast::<i8>());
                }
            }
            let mut acc: [[$vt; NV]; MR] = [[$zero(); NV]; MR];
            let mut pa = a;
            let mut pb = b;
            for _ in 0..kc {
                let mut bv: [$vt; NV] = [$zero(); NV];
                for (j, v) in bv.iter_mut().enumerate() {
                    // SAFETY: `pb` points at one packed row of NR floats (kc rows in all).
                    *v = unsafe { $loadu(pb.add(j * L)) };
                }
                for (i, row) in acc.iter_mut().enumerate() {
                    // SAFETY: `pa` points at one packed column of MR floats.
                    let ai = $set1(unsafe { *pa.add(i) });
                    for (acc_ij, &bj) in row.iter_mut().zip(bv.iter()) {
                        *acc_ij = $fmadd(ai, bj, *acc_ij);
                    }
                }
                // SAFETY: advancing within (or one past the end of) the packed panels.
                unsafe {
                    pa = pa.add(MR);
                    pb = pb.add(NR);
                }
            }
            let va = $set1(alpha);
            if beta == 0.0 {
                for (i, row) in acc.iter().enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        // SAFETY: (i, j*L..j*L+L) lies in the writable MR×NR tile.
                        unsafe { $storeu(c.add(i * ldc + j * L), $mul(v, va)) };
                    }
                }
            } else {
                let vb = $set1(beta);
                for (i, row) in acc.iter().enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        // SAFETY: (i, j*L..j*L+L) lies in the readable/writable tile.
                        unsafe {
                            let cp = c.add(i * ldc + j * L);
                            $storeu(cp, $fmadd(v, va, $mul($loadu(cp), vb)));
                        }
                    }
                }
            }
        }
    };
}

simd_kernel!(
    kernel_avx2_6x16,
    "avx2,fma",
    __m256,
    8,
    6,
    2,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_mul_ps
);

simd_kernel!(
    kernel_avx512_12x32,
    "avx512f",
    __m512,
    16,
    12,
    2,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_mul_ps
);

simd_kernel!(
    kernel_avx512_8x32,
    "avx512f",
    __m512,
    16,
    8,
    2,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_mul_ps
);

/// AVX2 + FMA, 6×16.
pub(super) struct Avx2;

impl MicroKernel for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;
    const BLOCKING: Blocking = Blocking { mc: 3072, kc: 384, nc: 256 };
    impl_packing!(6, 16);

    unsafe fn run(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, alpha: f32, beta: f32) {
        // SAFETY: forwarded contract (CPU has AVX2+FMA, pointers valid).
        unsafe { kernel_avx2_6x16(kc, a, b, c, ldc, alpha, beta) }
    }
}

/// AVX-512F, 12×32.
pub(super) struct Avx512;

impl MicroKernel for Avx512 {
    const MR: usize = 12;
    const NR: usize = 32;
    const BLOCKING: Blocking = Blocking { mc: 3072, kc: 512, nc: 384 };
    impl_packing!(12, 32);

    unsafe fn run(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, alpha: f32, beta: f32) {
        // SAFETY: forwarded contract (CPU has AVX-512F, pointers valid).
        unsafe { kernel_avx512_12x32(kc, a, b, c, ldc, alpha, beta) }
    }
}

/// AVX-512F, 8×32: the B panels (and so a prepacked B) of [`Avx512`], for products whose
/// row count is a multiple of 8 but not of 12 (32 or 128 tokens), where 12-row tiles
/// would compute empty rows.
pub(super) struct Avx512x8;

impl MicroKernel for Avx512x8 {
    const MR: usize = 8;
    const NR: usize = <Avx512 as MicroKernel>::NR;
    const BLOCKING: Blocking = <Avx512 as MicroKernel>::BLOCKING;
    impl_packing!(8, 32);

    unsafe fn run(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, alpha: f32, beta: f32) {
        // SAFETY: forwarded contract (CPU has AVX-512F, pointers valid).
        unsafe { kernel_avx512_8x32(kc, a, b, c, ldc, alpha, beta) }
    }
}

/// Whether a product of `m` rows runs on [`Avx512x8`] rather than [`Avx512`]: when its
/// 8-row tiles compute over 2 % fewer rows than 12-row ones (m = 32: 32 against 36;
/// m = 512: 512 against 516 is not worth the 12-row tile's fewer B loads per FMA).
pub(super) fn eight_rows(m: usize) -> bool {
    let (r8, r12) = (m.div_ceil(8) * 8, m.div_ceil(12) * 12);
    r8 * 50 < r12 * 49
}
