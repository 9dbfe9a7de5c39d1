//! The portable kernels of the small-m Linear: the same contracts as `x86.rs`, plain
//! loops with f32 sums (any target; the reference the SIMD paths are tested beside).

use super::weight::{F16, F32};
use half::{bf16, f16};

/// Element `idx` of a row-major weight of kind `E`, widened to f32.
///
/// # Safety
/// `w` holds element `idx` of kind `E`.
unsafe fn elem<const E: u8>(w: *const u8, idx: usize) -> f32 {
    // SAFETY: per this function's contract (unaligned reads: the weight bytes may come
    // from any buffer).
    unsafe {
        match E {
            F32 => w.cast::<f32>().add(idx).read_unaligned(),
            F16 => f16::from_bits(w.cast::<u16>().add(idx).read_unaligned()).to_f32(),
            _ => bf16::from_bits(w.cast::<u16>().add(idx).read_unaligned()).to_f32(),
        }
    }
}

/// `out[i][r] = Σ_p x[i][p] · w[r][p]` for `R` rows of `k` elements.
///
/// # Safety
/// `w` holds `R` rows of `k` elements of kind `E` (`esize` bytes each); `x` holds `M`
/// rows of `ldx >= k` floats.
pub unsafe fn rows<const E: u8, const M: usize, const R: usize>(
    w: *const u8,
    esize: usize,
    k: usize,
    x: *const f32,
    ldx: usize,
    out: &mut [[f32; R]; M],
) {
    debug_assert_eq!(esize, if E == F32 { 4 } else { 2 });
    *out = [[0.0; R]; M];
    for p in 0..k {
        for r in 0..R {
            // SAFETY: `r < R`, `p < k`; `i < M`, `p < ldx`: within the contract.
            unsafe {
                let v = elem::<E>(w, r * k + p);
                for (i, o) in out.iter_mut().enumerate() {
                    o[r] += *x.add(i * ldx + p) * v;
                }
            }
        }
    }
}

/// One panel of `NR` columns of `gemm_packed`'s prepacked B (see `x86::f32_panel512`).
///
/// # Safety
/// `b` points at panel 0 of slice 0 of a packed B of `k` rows, slices of `kc_max` rows
/// `slice` floats apart, the panel `q` at `q * kc * NR` floats into each; `x` holds `M`
/// rows of `ldx >= k` floats.
#[allow(clippy::too_many_arguments)]
pub unsafe fn f32_panel<const M: usize, const NR: usize>(
    b: *const f32,
    q: usize,
    k: usize,
    kc_max: usize,
    slice: usize,
    x: *const f32,
    ldx: usize,
    out: &mut [[f32; NR]; M],
) {
    *out = [[0.0; NR]; M];
    let mut p0 = 0;
    while p0 < k {
        let kc = kc_max.min(k - p0);
        // SAFETY: within the contract (panel `q` of slice `p0 / kc_max`, rows of x).
        unsafe {
            let panel = b.add((p0 / kc_max) * slice + q * kc * NR);
            for p in 0..kc {
                let brow = std::slice::from_raw_parts(panel.add(p * NR), NR);
                for (i, o) in out.iter_mut().enumerate() {
                    let xv = *x.add(i * ldx + p0 + p);
                    for (o, &bv) in o.iter_mut().zip(brow) {
                        *o += xv * bv;
                    }
                }
            }
        }
        p0 += kc;
    }
}

/// One panel of `gemm_bf16::PackedWeight` (`kp` rows of 32 pair words) against `M` rows
/// of x as bf16 pairs: the products of `vdpbf16ps` (exact in f32), summed in f32.
///
/// # Safety
/// `panel` holds `kp * 32` words and `xb` `M` rows of `kp` words.
pub unsafe fn bf16_panel<const M: usize>(panel: *const u32, kp: usize, xb: *const u32, out: &mut [[f32; 32]; M]) {
    let half = |w: u32, hi: bool| bf16::from_bits(if hi { (w >> 16) as u16 } else { w as u16 }).to_f32();
    *out = [[0.0; 32]; M];
    for p in 0..kp {
        // SAFETY: `p < kp`, `i < M`: within the contract.
        unsafe {
            let row = std::slice::from_raw_parts(panel.add(p * 32), 32);
            for (i, o) in out.iter_mut().enumerate() {
                let a = *xb.add(i * kp + p);
                let (a0, a1) = (half(a, false), half(a, true));
                for (o, &w) in o.iter_mut().zip(row) {
                    *o += a0 * half(w, false) + a1 * half(w, true);
                }
            }
        }
    }
}

/// f32 → bf16 pairs (round to nearest even), an odd length leaving the last high half 0.
pub fn to_pairs(src: &[f32], dst: &mut [u32]) {
    for (p, d) in dst.iter_mut().enumerate() {
        let lo = src.get(2 * p).map_or(0, |&v| bf16::from_f32(v).to_bits() as u32);
        let hi = src.get(2 * p + 1).map_or(0, |&v| bf16::from_f32(v).to_bits() as u32);
        *d = lo | (hi << 16);
    }
}
