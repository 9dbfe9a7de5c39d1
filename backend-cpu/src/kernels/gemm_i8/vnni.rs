//! The AVX-512-VNNI register tile: up to [`MR`] rows × [`NR`] columns of i32 in 16 zmm,
//! `vpdpbusd` of u8 x (s8 + 128) by the s8 panel, one broadcast of 4 x bytes per row and
//! group of 4 k-bytes.

use super::pack::NR;
use std::arch::x86_64::*;

/// Rows per register tile (2 · MR accumulators, 2 panel loads, 1 broadcast).
pub const MR: usize = 8;

/// `acc[r][j] = Σ_k a[r][k] · panel[j][k]` (u8 × s8, i32) for `rows ≤ MR` rows of `a`
/// (stride `lda` bytes) over `kp` k-bytes; `acc` rows of `NR` i32.
///
/// # Safety
/// AVX-512F, AVX-512BW and AVX-512-VNNI must be supported; `kp % 4 == 0`; `a` holds
/// `rows` rows of `lda ≥ kp` bytes (the last at least `kp`) and `panel` `kp · NR` bytes.
pub unsafe fn tile(rows: usize, kp: usize, a: *const u8, lda: usize, panel: *const u8, acc: &mut [i32; MR * NR]) {
    macro_rules! go {
        ($($r:literal)*) => {
            match rows {
                // SAFETY: forwarded from this function's contract.
                $($r => unsafe { tile_r::<$r>(kp, a, lda, panel, acc) },)*
                _ => {}
            }
        };
    }
    go!(1 2 3 4 5 6 7 8);
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_r<const R: usize>(kp: usize, a: *const u8, lda: usize, panel: *const u8, acc: &mut [i32; MR * NR]) {
    let mut lo = [_mm512_setzero_si512(); R];
    let mut hi = [_mm512_setzero_si512(); R];
    for g in 0..kp / 4 {
        // SAFETY: group `g` of the panel is 128 bytes at `g · 128 < kp · NR`; x's 4 bytes
        // at `r · lda + 4g < rows · lda` (contract); unaligned loads.
        unsafe {
            let b0 = _mm512_loadu_si512(panel.add(g * NR * 4).cast());
            let b1 = _mm512_loadu_si512(panel.add(g * NR * 4 + 64).cast());
            for r in 0..R {
                let x = _mm512_set1_epi32(a.add(r * lda + 4 * g).cast::<i32>().read_unaligned());
                lo[r] = _mm512_dpbusd_epi32(lo[r], x, b0);
                hi[r] = _mm512_dpbusd_epi32(hi[r], x, b1);
            }
        }
    }
    for r in 0..R {
        // SAFETY: row `r < MR` of `acc` holds NR = 32 i32: two stores of 16.
        unsafe {
            _mm512_storeu_si512(acc.as_mut_ptr().add(r * NR).cast(), lo[r]);
            _mm512_storeu_si512(acc.as_mut_ptr().add(r * NR + 16).cast(), hi[r]);
        }
    }
}
