//! The AVX-512 and AVX2 small-m kernels: dot products along the rows of a row-major
//! weight (f32, f16 or bf16 widened to f32), the f32 panels of `gemm_packed`'s prepacked B,
//! and the k-pair panels of `gemm_bf16::PackedWeight` (`vdpbf16ps`).
//!
//! Every kernel computes `M` rows of x against a few weight columns and leaves the sums
//! in a small output array; the caller adds bias and accumulation and writes `c`.

use super::weight::{F16, F32};
use std::arch::x86_64::*;

/// Cache lines read ahead of the weight stream (per stream).
const PREFETCH: usize = 8 * 64;

/// The same for the k-pair bf16 panels ([`bf16_panel512`]): 512 bytes ahead they read a
/// weight from memory 10–15 % slower per byte than the f32 panels, 2 KiB ahead about as
/// fast (Emerald Rapids, two threads, a 9728 × 896 weight from a 1 GiB set, alternated
/// runs: 22.0–24.2 against 22.7–27.8 GB/s; the f32 panels 23–28 GB/s in both). The
/// row-major bf16 weight (the tied output projection, [`rows512`]) did not gain: left at
/// [`PREFETCH`].
const PREFETCH_BF16_PANELS: usize = 32 * 64;

/// How far ahead a kernel of `m` rows of x prefetches a weight stream whose one-row distance
/// is `base` (measured for a decode step at batch 1): from two rows on, at least 1 KiB per
/// row. A k step of eight rows costs eight times the arithmetic of one, so a distance fixed
/// in bytes was reached too late: qwen2-0.5b's batch-8 decode step at 1 KiB per row against
/// the one-row distances (Emerald Rapids, alternated) ran 117–142 → 95–113 ms in f32 and
/// 89–115 → 74–78 ms in bf16; at 512 bytes per row, between the two.
const fn ahead(base: usize, m: usize) -> usize {
    let per_rows = 1024 * m;
    if m > 1 && per_rows > base { per_rows } else { base }
}

/// How far ahead a one-row kernel also prefetches its f32 panel stream into L2
/// ([`f32_panel512`]; [`bf16_panel512`] twice as far, the row-major kernels the same place
/// in the next group of rows). The L1 prefetch keeps a few lines in flight; at one row of x
/// the kernel waits on memory, and a second, L2 prefetch further ahead keeps more in
/// flight. Two threads streaming a weight of about 1 GiB
/// (`gemv::tests::stream_rate_from_memory`, Emerald Rapids, binaries alternated) read the
/// f32 panels at 30–32 GB/s instead of 26–28, the bf16 panels at 28–30 instead of 22–27
/// and the row-major bf16 weight at 23–32 instead of 19–22; qwen2-0.5b's decode step at
/// batch 1 (three alternated rounds, before the bf16 panels') went 70.9 → 66.0 ms in f32
/// and 40.6 → 38.1 ms in bf16 (medians). From two rows on, [`ahead`] already reaches past
/// it and the extra prefetches cost (bf16 at batch 8 lost 10–19 %): only the one-row
/// kernels issue them. The AVX2 kernels have none: on the same host with their path forced
/// (`NPURT_CPU_ISA=avx2`) their 16-column panels and rows already read 28–32 GB/s, and the
/// same prefetches changed nothing in three alternated rounds.
const L2_AHEAD: usize = 4096;

// ------------------------------------------------------------------------------------
// AVX-512
// ------------------------------------------------------------------------------------

/// 16 weight elements from `w` (element offset `idx`), widened to f32.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn load16<const E: u8>(w: *const u8, idx: usize) -> __m512 {
    // SAFETY: the callers pass `idx` with 16 readable elements of type `E` from it.
    unsafe {
        match E {
            F32 => _mm512_loadu_ps(w.cast::<f32>().add(idx)),
            F16 => _mm512_cvtph_ps(_mm256_loadu_si256(w.cast::<u16>().add(idx).cast())),
            _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                w.cast::<u16>().add(idx).cast(),
            )))),
        }
    }
}

/// `out[i][r] = Σ_p x[i][p] · w[r][p]` for `R` rows of a row-major weight of elements `E`
/// (`esize` bytes), `k` elements per row.
///
/// # Safety
/// AVX-512F, AVX2 and FMA must be supported; `w` holds `R` rows of `k` elements; `x`
/// holds `M` rows of `ldx >= k.next_multiple_of(16)` floats, zero past `k`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn rows512<const E: u8, const M: usize, const R: usize>(
    w: *const u8,
    esize: usize,
    k: usize,
    x: *const f32,
    ldx: usize,
    out: &mut [[f32; R]; M],
) {
    let mut acc = [[_mm512_setzero_ps(); R]; M];
    let full = k / 16;
    let mut wv = [_mm512_setzero_ps(); R];
    // SAFETY (pointer arithmetic below): within the extents of this function's contract;
    // prefetches never fault.
    unsafe {
        for b in 0..full {
            let p = b * 16;
            for (r, wv) in wv.iter_mut().enumerate() {
                let row = w.add(r * k * esize);
                _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(p * esize + ahead(PREFETCH, M)).cast());
                if M == 1 {
                    _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(R * k * esize + p * esize).cast());
                }
                *wv = load16::<E>(row, p);
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let xv = _mm512_loadu_ps(x.add(i * ldx + p));
                for r in 0..R {
                    acc[r] = _mm512_fmadd_ps(xv, wv[r], acc[r]);
                }
            }
        }
        let rem = k - full * 16;
        if rem > 0 {
            let p = full * 16;
            let mut buf = [[0u8; 64]; R];
            for (r, buf) in buf.iter_mut().enumerate() {
                std::ptr::copy_nonoverlapping(w.add((r * k + p) * esize), buf.as_mut_ptr(), rem * esize);
                wv[r] = load16::<E>(buf.as_ptr(), 0);
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let xv = _mm512_loadu_ps(x.add(i * ldx + p));
                for r in 0..R {
                    acc[r] = _mm512_fmadd_ps(xv, wv[r], acc[r]);
                }
            }
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        for r in 0..R {
            o[r] = _mm512_reduce_add_ps(a[r]);
        }
    }
}

/// `out[i][j] = Σ_p x[i][p] · B[p][j]` for one column panel (32 columns) of `gemm_packed`'s
/// prepacked B: k in slices of `kc_max` rows, each slice `slice` floats apart, the panel at
/// `panel` floats into each slice with `kc × 32` floats.
///
/// # Safety
/// AVX-512F, AVX2 and FMA must be supported; `b` points at panel 0 of slice 0 of a packed B
/// of `k` rows as just described; `x` holds `M` rows of `ldx >= k` floats.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn f32_panel512<const M: usize>(
    b: *const f32,
    q: usize,
    k: usize,
    kc_max: usize,
    slice: usize,
    x: *const f32,
    ldx: usize,
    out: &mut [[f32; 32]; M],
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; M];
    // SAFETY (pointer arithmetic below): within the extents of this function's contract.
    unsafe {
        let mut p0 = 0;
        while p0 < k {
            let kc = kc_max.min(k - p0);
            let panel = b.add((p0 / kc_max) * slice + q * kc * 32);
            for p in 0..kc {
                _mm_prefetch::<_MM_HINT_T0>(panel.add(p * 32).cast::<i8>().wrapping_add(ahead(PREFETCH, M)));
                _mm_prefetch::<_MM_HINT_T0>(panel.add(p * 32).cast::<i8>().wrapping_add(ahead(PREFETCH, M) + 64));
                if M == 1 {
                    _mm_prefetch::<_MM_HINT_T1>(panel.add(p * 32).cast::<i8>().wrapping_add(L2_AHEAD));
                    _mm_prefetch::<_MM_HINT_T1>(panel.add(p * 32).cast::<i8>().wrapping_add(L2_AHEAD + 64));
                }
                let b0 = _mm512_loadu_ps(panel.add(p * 32));
                let b1 = _mm512_loadu_ps(panel.add(p * 32 + 16));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm512_set1_ps(*x.add(i * ldx + p0 + p));
                    acc[0] = _mm512_fmadd_ps(xv, b0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(xv, b1, acc[1]);
                }
            }
            p0 += kc;
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            _mm512_storeu_ps(o.as_mut_ptr(), a[0]);
            _mm512_storeu_ps(o.as_mut_ptr().add(16), a[1]);
        }
    }
}

/// `out[i][j] = Σ_p xb[i][p] · panel[p][j]` in `vdpbf16ps` pairs over one panel of a
/// `gemm_bf16::PackedWeight` (`kp` rows of 32 words).
///
/// # Safety
/// AVX-512F and AVX-512-BF16 must be supported; `panel` holds `kp * 32` words and `xb`
/// `M` rows of `kp` words at stride `kp`.
#[target_feature(enable = "avx512f,avx512bf16,avx2,fma")]
pub unsafe fn bf16_panel512<const M: usize>(panel: *const u32, kp: usize, xb: *const u32, out: &mut [[f32; 32]; M]) {
    let mut acc = [[_mm512_setzero_ps(); 2]; M];
    // SAFETY (pointer arithmetic below): within the extents of this function's contract.
    unsafe {
        for p in 0..kp {
            _mm_prefetch::<_MM_HINT_T0>(panel.add(p * 32).cast::<i8>().wrapping_add(ahead(PREFETCH_BF16_PANELS, M)));
            _mm_prefetch::<_MM_HINT_T0>(
                panel.add(p * 32).cast::<i8>().wrapping_add(ahead(PREFETCH_BF16_PANELS, M) + 64),
            );
            if M == 1 {
                _mm_prefetch::<_MM_HINT_T1>(panel.add(p * 32).cast::<i8>().wrapping_add(2 * L2_AHEAD));
                _mm_prefetch::<_MM_HINT_T1>(panel.add(p * 32).cast::<i8>().wrapping_add(2 * L2_AHEAD + 64));
            }
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(panel.add(p * 32).cast()));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(panel.add(p * 32 + 16).cast()));
            for (i, acc) in acc.iter_mut().enumerate() {
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*xb.add(i * kp + p) as i32));
                acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
            }
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            _mm512_storeu_ps(o.as_mut_ptr(), a[0]);
            _mm512_storeu_ps(o.as_mut_ptr().add(16), a[1]);
        }
    }
}

/// f32 → bf16 pairs (round to nearest even, as `vcvtne2ps2bf16`), 32 floats at a time;
/// the rest (fewer than 32) is left to the caller.
///
/// # Safety
/// AVX-512F and AVX-512-BF16 must be supported.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn to_pairs512(src: &[f32], dst: &mut [u32]) -> usize {
    let full = (src.len() / 32).min(dst.len() / 16);
    for b in 0..full {
        // SAFETY: `b * 32 + 32 <= src.len()` and `b * 16 + 16 <= dst.len()`.
        unsafe {
            let lo = _mm512_loadu_ps(src.as_ptr().add(b * 32));
            let hi = _mm512_loadu_ps(src.as_ptr().add(b * 32 + 16));
            let v: __m512bh = _mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(dst.as_mut_ptr().add(b * 16).cast(), std::mem::transmute::<__m512bh, __m512i>(v));
        }
    }
    full * 32
}

// ------------------------------------------------------------------------------------
// AVX2 (+ FMA, F16C)
// ------------------------------------------------------------------------------------

/// 8 weight elements from `w` (element offset `idx`), widened to f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const E: u8>(w: *const u8, idx: usize) -> __m256 {
    // SAFETY: the callers pass `idx` with 8 readable elements of type `E` from it.
    unsafe {
        match E {
            F32 => _mm256_loadu_ps(w.cast::<f32>().add(idx)),
            F16 => _mm256_cvtph_ps(_mm_loadu_si128(w.cast::<u16>().add(idx).cast())),
            _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                w.cast::<u16>().add(idx).cast(),
            )))),
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// [`rows512`] on AVX2: 8 lanes.
///
/// # Safety
/// AVX2, FMA and F16C must be supported; `w` holds `R` rows of `k` elements; `x` holds
/// `M` rows of `ldx >= k.next_multiple_of(16)` floats, zero past `k`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows256<const E: u8, const M: usize, const R: usize>(
    w: *const u8,
    esize: usize,
    k: usize,
    x: *const f32,
    ldx: usize,
    out: &mut [[f32; R]; M],
) {
    let mut acc = [[_mm256_setzero_ps(); R]; M];
    let full = k / 8;
    let mut wv = [_mm256_setzero_ps(); R];
    // SAFETY (pointer arithmetic below): within the extents of this function's contract;
    // prefetches never fault.
    unsafe {
        for b in 0..full {
            let p = b * 8;
            for (r, wv) in wv.iter_mut().enumerate() {
                let row = w.add(r * k * esize);
                _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(p * esize + ahead(PREFETCH, M)).cast());
                *wv = load8::<E>(row, p);
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let xv = _mm256_loadu_ps(x.add(i * ldx + p));
                for r in 0..R {
                    acc[r] = _mm256_fmadd_ps(xv, wv[r], acc[r]);
                }
            }
        }
        let rem = k - full * 8;
        if rem > 0 {
            let p = full * 8;
            let mut buf = [[0u8; 32]; R];
            for (r, buf) in buf.iter_mut().enumerate() {
                std::ptr::copy_nonoverlapping(w.add((r * k + p) * esize), buf.as_mut_ptr(), rem * esize);
                wv[r] = load8::<E>(buf.as_ptr(), 0);
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let xv = _mm256_loadu_ps(x.add(i * ldx + p));
                for r in 0..R {
                    acc[r] = _mm256_fmadd_ps(xv, wv[r], acc[r]);
                }
            }
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        for r in 0..R {
            o[r] = hsum256(a[r]);
        }
    }
}

/// `out[i][r] = Σ_p x[i][p] · w[r][p]` for `R` rows of a row-major bf16 weight, on AVX2:
/// 16 weight elements per 32-byte load, split without a widening load into the even
/// elements (shifted into the high half of each 32-bit lane) and the odd ones (masked),
/// against x stored with each 16-element block's even elements first and its odd ones
/// after ([`super::driver`]'s `split_pairs`). With one row of x, the even and odd products
/// keep separate sums, so each row has two FMA chains in flight.
///
/// # Safety
/// AVX2 and FMA must be supported; `w` holds `R` rows of `k` bf16; `x` holds `M` rows of
/// `ldx >= k.next_multiple_of(16)` floats in that split order, zero past `k`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn bf16_rows256<const M: usize, const R: usize>(
    w: *const u8,
    _esize: usize,
    k: usize,
    x: *const f32,
    ldx: usize,
    out: &mut [[f32; R]; M],
) {
    // With one row of x, the odd products go to a second sum.
    let s = usize::from(M == 1);
    let mut acc = [[[_mm256_setzero_ps(); 2]; R]; M];
    let odd = _mm256_set1_epi32(0xFFFF_0000_u32 as i32);
    let mut buf = [[0u8; 32]; R];
    // SAFETY (pointer arithmetic below): within the extents of this function's contract;
    // prefetches never fault.
    unsafe {
        for p in (0..k).step_by(16) {
            let mut wv = [_mm256_setzero_si256(); R];
            if p + 16 <= k {
                // The R rows after the next R (contiguous after these) are fetched in
                // step, R·32 bytes of them per 16 elements of these. A row of bf16 is
                // short (28 lines at k = 896) for the hardware's stream detection: with
                // a prefetch along each row instead, one thread streamed 10 GB/s, with
                // this one 14 to 17 (Zen 3, `gemv::tests::stream_rate`).
                let next = w.wrapping_add(2 * R * k * 2 + p * 2 * R);
                for l in 0..R.div_ceil(2) {
                    _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(l * 64).cast());
                }
                for (r, wv) in wv.iter_mut().enumerate() {
                    *wv = _mm256_loadu_si256(w.add((r * k + p) * 2).cast());
                }
            } else {
                // The last, short block: through a zeroed copy.
                for (r, (wv, buf)) in wv.iter_mut().zip(buf.iter_mut()).enumerate() {
                    std::ptr::copy_nonoverlapping(w.add((r * k + p) * 2), buf.as_mut_ptr(), (k - p) * 2);
                    *wv = _mm256_loadu_si256(buf.as_ptr().cast());
                }
            }
            for r in 0..R {
                let lo = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wv[r]));
                let hi = _mm256_castsi256_ps(_mm256_and_si256(wv[r], odd));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let xe = _mm256_loadu_ps(x.add(i * ldx + p));
                    let xo = _mm256_loadu_ps(x.add(i * ldx + p + 8));
                    acc[r][0] = _mm256_fmadd_ps(lo, xe, acc[r][0]);
                    acc[r][s] = _mm256_fmadd_ps(hi, xo, acc[r][s]);
                }
            }
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        for r in 0..R {
            o[r] = hsum256(_mm256_add_ps(a[r][0], a[r][1]));
        }
    }
}

/// [`f32_panel512`] on AVX2's 16-column panels.
///
/// # Safety
/// AVX2 and FMA must be supported; as [`f32_panel512`] with 16 columns per panel.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn f32_panel256<const M: usize>(
    b: *const f32,
    q: usize,
    k: usize,
    kc_max: usize,
    slice: usize,
    x: *const f32,
    ldx: usize,
    out: &mut [[f32; 16]; M],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; M];
    // SAFETY (pointer arithmetic below): within the extents of this function's contract.
    unsafe {
        let mut p0 = 0;
        while p0 < k {
            let kc = kc_max.min(k - p0);
            let panel = b.add((p0 / kc_max) * slice + q * kc * 16);
            for p in 0..kc {
                _mm_prefetch::<_MM_HINT_T0>(panel.add(p * 16).cast::<i8>().wrapping_add(ahead(PREFETCH, M)));
                let b0 = _mm256_loadu_ps(panel.add(p * 16));
                let b1 = _mm256_loadu_ps(panel.add(p * 16 + 8));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm256_set1_ps(*x.add(i * ldx + p0 + p));
                    acc[0] = _mm256_fmadd_ps(xv, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(xv, b1, acc[1]);
                }
            }
            p0 += kc;
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            _mm256_storeu_ps(o.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(o.as_mut_ptr().add(8), a[1]);
        }
    }
}
