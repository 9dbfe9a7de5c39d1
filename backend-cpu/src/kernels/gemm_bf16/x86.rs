//! The AVX-512-BF16 code: f32 rows converted to bf16 pairs, and the register tile of
//! `vdpbf16ps` products.

use super::packed::{MR, NR, to_pairs_scalar};
use std::arch::x86_64::*;

/// Converts `src` to bf16 pairs in `dst` (`dst.len() == src.len().div_ceil(2)`).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512-BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn to_pairs(src: &[f32], dst: &mut [u32]) {
    let full = src.len() / 32;
    assert!(dst.len() >= src.len().div_ceil(2), "to_pairs: {} words for {} values", dst.len(), src.len());
    // SAFETY: the CPU has the units (contract); `dst` holds the 16 words of each whole 32
    // values at stride 16 (checked above).
    unsafe { to_pairs_strided(src, dst.as_mut_ptr(), 16) };
    to_pairs_scalar(&src[full * 32..], &mut dst[full * 16..]);
}

/// Converts each whole 32 values of `src` to 16 bf16 pairs at `dst + s * stride` words for
/// the `s`-th of them (the packed x of the AMX path, without a row buffer between); returns
/// how many it converted (`src.len() / 32`).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512-BF16; `dst + s * stride` is valid for writes
/// of 16 words for each `s < src.len() / 32`.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn to_pairs_strided(src: &[f32], dst: *mut u32, stride: usize) -> usize {
    let full = src.len() / 32;
    for b in 0..full {
        // SAFETY: `b * 32 + 32 <= src.len()`; `dst + b * stride` holds 16 words (contract).
        unsafe {
            let lo = _mm512_loadu_ps(src.as_ptr().add(b * 32));
            let hi = _mm512_loadu_ps(src.as_ptr().add(b * 32 + 16));
            let v: __m512bh = _mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(dst.add(b * stride) as *mut _, std::mem::transmute::<__m512bh, __m512i>(v));
        }
    }
    full
}

/// One register tile: `c[rows × cols] (+)= a · panel` over `kc` k-pairs.
///
/// # Safety
/// AVX-512F and AVX-512-BF16 must be supported; `rows <= MR`, `cols <= NR`; `a` holds
/// `rows` rows of stride `lda` words with `kc` words each; `panel` holds `kc * NR`
/// words; `c` holds `rows` rows of stride `ldc` with `cols` columns each.
#[allow(clippy::too_many_arguments)]
pub unsafe fn tile(
    rows: usize,
    kc: usize,
    a: &[u32],
    lda: usize,
    panel: &[u32],
    c: &mut [f32],
    ldc: usize,
    cols: usize,
    load_c: bool,
) {
    debug_assert!(rows <= MR && cols <= NR);
    debug_assert!(a.len() >= (rows - 1) * lda + kc && panel.len() >= kc * NR);
    debug_assert!(c.len() >= (rows - 1) * ldc + cols);
    macro_rules! go {
        ($($r:literal)*) => {
            match rows {
                // SAFETY: forwarded from this function's contract.
                $($r => unsafe { tile_r::<$r>(kc, a.as_ptr(), lda, panel.as_ptr(), c.as_mut_ptr(), ldc, cols, load_c) },)*
                _ => {}
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12);
}

#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_r<const R: usize>(
    kc: usize,
    a: *const u32,
    lda: usize,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    load_c: bool,
) {
    let m0: __mmask16 = if cols >= 16 { 0xffff } else { ((1u32 << cols) - 1) as u16 };
    let m1: __mmask16 = if cols >= 32 {
        0xffff
    } else if cols > 16 {
        ((1u32 << (cols - 16)) - 1) as u16
    } else {
        0
    };
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    // SAFETY (all pointer arithmetic below): the caller guarantees `R` rows of `a` with
    // `kc` words at stride `lda`, `kc * NR` words of `b`, and `R` rows of `c` at stride
    // `ldc` of which the masks touch only the first `cols` columns.
    unsafe {
        if load_c {
            for (r, acc) in acc.iter_mut().enumerate() {
                acc[0] = _mm512_maskz_loadu_ps(m0, c.add(r * ldc));
                acc[1] = _mm512_maskz_loadu_ps(m1, c.add(r * ldc + 16));
            }
        }
        for p in 0..kc {
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR) as *const _));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR + 16) as *const _));
            for (r, acc) in acc.iter_mut().enumerate() {
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r * lda + p) as i32));
                acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(c.add(r * ldc), m0, acc[0]);
            _mm512_mask_storeu_ps(c.add(r * ldc + 16), m1, acc[1]);
        }
    }
}
