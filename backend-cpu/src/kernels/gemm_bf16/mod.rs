//! bf16 matrix products on AVX-512-BF16 (`vdpbf16ps`): f32 activations rounded to bf16,
//! bf16 weights, f32 accumulation. The fast tier reports this as its own unit
//! (`avx512-bf16`), separate from the f32 FMA unit.
//!
//! Computes `c[m×n] (+)= x[m×k] · wᵀ` for a Linear layer's weight `w`, row-major
//! `[n, k]` bf16. `vdpbf16ps` multiplies two bf16 pairs along k per 32-bit lane and adds
//! both products to that lane's f32, so both operands are laid out in k-pairs:
//!
//! * `x`'s rows rounded to bf16 are already pairs (one 32-bit word per two k);
//! * `w` is packed ([`PackedWeight`]) into panels of [`NR`] output columns, each k-pair
//!   one 128-byte row of 32 words. A Linear node of a compiled graph packs its constant
//!   weight once at compile time; eager calls pack per call.
//!
//! A tile of [`MR`]×[`NR`] outputs lives in 24 zmm registers over a block of [`KC`]
//! k-pairs: per pair, two panel loads, `MR` broadcasts and `2·MR` `vdpbf16ps`.
//!
//! Where the CPU has AMX and the OS enabled it (`features::amx_bf16`), blocks of
//! [`AMX_MR`]×[`NR`] outputs run on the tile unit instead: four 16×16 f32 accumulator
//! tiles, and per 16 k-pairs two tiles of x rows and two of the packed panel (the panel
//! layout is already AMX's pair-interleaved B layout) feeding four `tdpbf16ps`. Rows and
//! columns left over run on the AVX-512-BF16 tile.
//!
//! Files: `packed.rs` holds the constants and the k-pair layouts, `x86.rs` the
//! AVX-512-BF16 tile and conversion, `amx.rs` the AMX tiles; this file the product.

#[cfg(target_arch = "x86_64")]
mod amx;
mod packed;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use packed::{AMX_MR, KC, MR, NR, PackedInPlace, PackedWeight};

use crate::features::CpuFeatures;
use packed::{AMX_KP, to_pairs_scalar};
use rayon::prelude::*;
use runtime::KernelError;

/// True when the AMX path runs for a product with `kp` k-pairs on features `f`.
fn use_amx(f: &CpuFeatures, kp: usize) -> bool {
    f.amx_bf16 && kp.is_multiple_of(AMX_KP) && KC.is_multiple_of(AMX_KP)
}

/// True when this CPU can run [`gemm`] (AVX-512-BF16 detected; a backend whose path is
/// forced below AVX-512 does not use it: see [`CpuFeatures::avx512bf16`]).
pub fn available() -> bool {
    crate::features::get().avx512bf16
}

/// `c[m×n] = x[m×k] · wᵀ + (if accumulate { c } else { 0 })`, `x` and `c` row-major and
/// contiguous, on the features `f` the backend selected (`ctx.features`): AVX-512-BF16 dot
/// products, or AMX tiles where `f` has them. Rows are split over `threads` (each thread
/// owns its rows of `c`).
pub fn gemm(
    f: &CpuFeatures,
    m: usize,
    x: &[f32],
    w: &PackedWeight<'_>,
    c: &mut [f32],
    accumulate: bool,
    threads: usize,
) -> Result<(), KernelError> {
    let (n, k, kp) = (w.n, w.k, w.kp);
    if x.len() < m * k || c.len() < m * n {
        return Err(KernelError::Internal(format!("bf16 gemm operands too short for {m}x{k}x{n}")));
    }
    if !f.avx512bf16 {
        return Err(KernelError::MissingFeature("AVX-512-BF16"));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if kp == 0 {
        if !accumulate {
            c[..m * n].fill(0.0);
        }
        return Ok(());
    }
    // x rounded to bf16 pairs, rows padded to an even k.
    let mut xb = vec![0u32; m * kp];
    let convert = |(i, dst): (usize, &mut [u32])| to_pairs(&x[i * k..(i + 1) * k], dst, f.avx512bf16);
    let threads = threads.max(1);
    if threads > 1 && m * k >= 1 << 16 {
        xb.par_chunks_mut(kp).enumerate().for_each(convert);
    } else {
        xb.chunks_mut(kp).enumerate().for_each(convert);
    }
    let amx = use_amx(f, kp);
    let align = if amx { AMX_MR } else { MR };
    let rows_per = m.div_ceil(threads).div_ceil(align) * align;
    let body = |(ci, cc): (usize, &mut [f32])| {
        let i0 = ci * rows_per;
        let rows = cc.len() / n;
        block(rows, &xb[i0 * kp..(i0 + rows) * kp], w, cc, accumulate, amx);
    };
    if threads > 1 && m > MR {
        c[..m * n].par_chunks_mut(rows_per * n).enumerate().for_each(body);
    } else {
        body((0, &mut c[..m * n]));
    }
    Ok(())
}

/// One thread's rows: blocks of k-pairs, then panels, then register tiles.
fn block(m: usize, xb: &[u32], w: &PackedWeight<'_>, c: &mut [f32], accumulate: bool, amx: bool) {
    let (n, kp) = (w.n, w.kp);
    #[cfg(target_arch = "x86_64")]
    let _tiles = amx.then(|| {
        // SAFETY: `use_amx` checked that the OS enabled AMX for this process.
        unsafe { amx::Tiles::configure() }
    });
    for p0 in (0..kp).step_by(KC) {
        let kc = KC.min(kp - p0);
        let load_c = accumulate || p0 > 0;
        for pi in 0..n.div_ceil(NR) {
            let panel = &w.data[(pi * kp + p0) * NR..(pi * kp + p0 + kc) * NR];
            let cols = NR.min(n - pi * NR);
            let mut i0 = 0;
            #[cfg(target_arch = "x86_64")]
            if amx && cols == NR {
                while i0 + AMX_MR <= m {
                    let a = &xb[i0 * kp + p0..];
                    let cs = &mut c[i0 * n + pi * NR..];
                    // `kc` is a multiple of 16 (`use_amx`); `a` holds 32 rows of stride `kp`
                    // with `kc` words from `p0`, `panel` `kc * NR` words, and `cs` 32 full
                    // rows of `NR` columns at stride `n` (`i0 + 32 <= m`, `cols == NR`).
                    // SAFETY: tiles configured on this thread above; extents as just stated.
                    unsafe { amx::block(kc, a, kp, panel, cs, n, load_c) };
                    i0 += AMX_MR;
                }
            }
            for i0 in (i0..m).step_by(MR) {
                let rows = MR.min(m - i0);
                let a = &xb[i0 * kp + p0..];
                let cs = &mut c[i0 * n + pi * NR..];
                // `a` holds `rows` rows of `kp` words from `p0` (the last row has at least
                // `kc` left), `panel` holds `kc * NR` words, and `cs` covers `rows` rows of
                // stride `n` with `cols` columns each (the tile never leaves `c`).
                // SAFETY: `gemm` checked that its features have AVX-512-BF16 (with
                // AVX-512F), detected on this CPU; extents above.
                unsafe { x86::tile(rows, kc, a, kp, panel, cs, n, cols, load_c) };
            }
        }
    }
}

/// f32 → bf16 (round to nearest even), two per word; an odd k leaves the last high half 0.
/// `bf16`: the CPU has AVX-512-BF16 (the features detected it).
fn to_pairs(src: &[f32], dst: &mut [u32], bf16: bool) {
    #[cfg(target_arch = "x86_64")]
    if bf16 {
        // SAFETY: AVX-512-BF16 (with AVX-512F) was detected, as `bf16` says.
        unsafe { x86::to_pairs(src, dst) };
        return;
    }
    to_pairs_scalar(src, dst)
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    pub unsafe fn to_pairs(_: &[f32], _: &mut [u32]) {}
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn tile(_: usize, _: usize, _: &[u32], _: usize, _: &[u32], _: &mut [f32], _: usize, _: usize, _: bool) {
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// The same product in f64 from the bf16-rounded operands.
    fn reference(m: usize, n: usize, k: usize, x: &[f32], w: &[bf16], c0: &[f32], acc: bool) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = if acc { c0[i * n + j] as f64 } else { 0.0 };
                for p in 0..k {
                    s += bf16::from_f32(x[i * k + p]).to_f64() * w[j * k + p].to_f64();
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }

    #[test]
    fn matches_f64_on_rounded_operands_at_every_edge() {
        if !available() {
            println!("skipped: this CPU has no AVX-512-BF16 (the bf16 unit is not offered here)");
            return;
        }
        // The last three take the AMX path where the CPU has it (k-pairs a multiple of 16,
        // full 32-row blocks and 32-column panels, with leftover rows and columns).
        let shapes = [(1, 1, 1), (13, 33, 7), (12, 32, 256), (25, 70, 300), (7, 16, 2), (40, 40, 513)];
        let amx_shapes = [(70, 64, 512), (64, 80, 288), (32, 32, 32)];
        println!("AMX path: {}", if crate::features::get().amx_bf16 { "on" } else { "not on this CPU" });
        for &(m, n, k) in shapes.iter().chain(&amx_shapes) {
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 37.0).collect();
            let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 89) as f32 - 44.0) / 41.0)).collect();
            let c0: Vec<f32> = (0..m * n).map(|i| (i % 7) as f32 - 3.0).collect();
            let pw = PackedWeight::pack(&w, n, k).unwrap();
            for acc in [false, true] {
                for threads in [1, 2] {
                    let mut c = c0.clone();
                    gemm(crate::features::get(), m, &x, &pw, &mut c, acc, threads).unwrap();
                    let want = reference(m, n, k, &x, &w, &c0, acc);
                    for (i, (a, b)) in c.iter().zip(&want).enumerate() {
                        let tol = 1e-4 * (1.0 + b.abs()) * (k as f32).sqrt();
                        assert!((a - b).abs() <= tol, "{m}x{n}x{k} acc={acc} t={threads} [{i}]: {a} vs {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn conversion_rounds_to_nearest_even_like_half() {
        let src: Vec<f32> = (0..77).map(|i| (i as f32 * 0.123_456_7 - 4.0) * 1.000_03f32.powi(i)).collect();
        let mut a = vec![0u32; 39];
        let mut b = vec![0u32; 39];
        to_pairs(&src, &mut a, available());
        to_pairs_scalar(&src, &mut b);
        assert_eq!(a, b);
    }
}
