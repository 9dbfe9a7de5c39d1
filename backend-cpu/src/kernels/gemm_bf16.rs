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

use half::bf16;
use rayon::prelude::*;

/// Output columns per packed panel (two zmm of f32).
pub const NR: usize = 32;
/// Output rows per register tile.
pub const MR: usize = 12;
/// k-pairs per block: a panel block (`KC × NR` words, 16 KiB) and a tile's rows of x
/// (`MR × KC` words, 6 KiB) stay in L1 together.
pub const KC: usize = 128;
/// Output rows per AMX block (two accumulator tiles of 16 rows).
pub const AMX_MR: usize = 32;
/// k-pairs per AMX tile product (a tile row is 64 bytes: 16 words).
const AMX_KP: usize = 16;

/// True when the AMX path runs for a product with `kp` k-pairs.
fn use_amx(kp: usize) -> bool {
    crate::features::get().amx_bf16 && kp % AMX_KP == 0 && KC % AMX_KP == 0
}

/// True when this CPU can run [`gemm`].
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Marks a `[n, k]` weight operand that holds [`PackedWeight`] words instead of the weight
/// (a compiled graph stores it so, once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedInPlace {
    pub n: usize,
    pub k: usize,
}

/// A `[n, k]` bf16 weight in k-pair panels of [`NR`] columns (zero padded).
#[derive(Debug)]
pub struct PackedWeight<'a> {
    pub n: usize,
    pub k: usize,
    /// `k.div_ceil(2)`.
    kp: usize,
    /// `[n.div_ceil(NR)][kp][NR]` words `lo = w[j][2p]`, `hi = w[j][2p + 1]`.
    data: std::borrow::Cow<'a, [u32]>,
}

impl PackedWeight<'_> {
    /// Words the packed `[n, k]` weight occupies.
    pub fn words(n: usize, k: usize) -> usize {
        n.div_ceil(NR) * k.div_ceil(2) * NR
    }

    /// A weight packed earlier (`packed.words()` of [`pack`](Self::pack)) read in place,
    /// e.g. from device memory holding those words (little-endian).
    pub fn view(bytes: &[u8], n: usize, k: usize) -> Result<PackedWeight<'_>, String> {
        let len = Self::words(n, k) * 4;
        let words: &[u32] = bytes
            .get(..len)
            .ok_or_else(|| format!("packed weight of {} bytes for [{n}, {k}] needs {len}", bytes.len()))
            .and_then(|b| bytemuck::try_cast_slice(b).map_err(|e| format!("misaligned packed weight: {e}")))?;
        Ok(PackedWeight { n, k, kp: k.div_ceil(2), data: std::borrow::Cow::Borrowed(words) })
    }

    /// The packed words (what [`view`](Self::view) reads back).
    pub fn words_slice(&self) -> &[u32] {
        &self.data
    }

    pub fn pack(w: &[bf16], n: usize, k: usize) -> Result<PackedWeight<'static>, String> {
        if w.len() < n * k {
            return Err(format!("weight of {} elements for [{n}, {k}]", w.len()));
        }
        let kp = k.div_ceil(2);
        let panels = n.div_ceil(NR);
        let mut data = vec![0u32; panels * kp * NR];
        if kp > 0 {
            data.par_chunks_mut(kp * NR).enumerate().for_each(|(pi, panel)| {
                for jj in 0..NR.min(n - pi * NR) {
                    let row = &w[(pi * NR + jj) * k..(pi * NR + jj + 1) * k];
                    for p in 0..kp {
                        let lo = row[2 * p].to_bits() as u32;
                        let hi = row.get(2 * p + 1).map_or(0, |h| h.to_bits() as u32);
                        panel[p * NR + jj] = lo | (hi << 16);
                    }
                }
            });
        }
        Ok(PackedWeight { n, k, kp, data: std::borrow::Cow::Owned(data) })
    }

    /// Bytes held (for reports).
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// `c[m×n] = x[m×k] · wᵀ + (if accumulate { c } else { 0 })`, `x` and `c` row-major and
/// contiguous. Rows are split over `threads` (each thread owns its rows of `c`).
pub fn gemm(
    m: usize,
    x: &[f32],
    w: &PackedWeight<'_>,
    c: &mut [f32],
    accumulate: bool,
    threads: usize,
) -> Result<(), String> {
    let (n, k, kp) = (w.n, w.k, w.kp);
    if x.len() < m * k || c.len() < m * n {
        return Err(format!("bf16 gemm operands too short for {m}x{k}x{n}"));
    }
    if !available() {
        return Err("bf16 gemm needs AVX-512-BF16, which this CPU lacks".into());
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
    let convert = |(i, dst): (usize, &mut [u32])| to_pairs(&x[i * k..(i + 1) * k], dst);
    let threads = threads.max(1);
    if threads > 1 && m * k >= 1 << 16 {
        xb.par_chunks_mut(kp).enumerate().for_each(convert);
    } else {
        xb.chunks_mut(kp).enumerate().for_each(convert);
    }
    let amx = use_amx(kp);
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
                // SAFETY: `gemm` checked `available()` (AVX-512F, AVX-512-BF16); extents above.
                unsafe { x86::tile(rows, kc, a, kp, panel, cs, n, cols, load_c) };
            }
        }
    }
}

/// f32 → bf16 (round to nearest even), two per word; an odd k leaves the last high half 0.
fn to_pairs(src: &[f32], dst: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: AVX-512F and AVX-512-BF16 were detected just above.
        unsafe { x86::to_pairs(src, dst) };
        return;
    }
    to_pairs_scalar(src, dst)
}

fn to_pairs_scalar(src: &[f32], dst: &mut [u32]) {
    for (p, d) in dst.iter_mut().enumerate() {
        let lo = bf16::from_f32(src[2 * p]).to_bits() as u32;
        let hi = src.get(2 * p + 1).map_or(0, |&h| bf16::from_f32(h).to_bits() as u32);
        *d = lo | (hi << 16);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// Converts `src` to bf16 pairs in `dst` (`dst.len() == src.len().div_ceil(2)`).
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512-BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn to_pairs(src: &[f32], dst: &mut [u32]) {
        let full = src.len() / 32;
        for b in 0..full {
            // SAFETY: `b * 32 + 32 <= src.len()` and `b * 16 + 16 <= dst.len()`.
            unsafe {
                let lo = _mm512_loadu_ps(src.as_ptr().add(b * 32));
                let hi = _mm512_loadu_ps(src.as_ptr().add(b * 32 + 16));
                // The second operand fills the low half: k order is kept.
                let v: __m512bh = _mm512_cvtne2ps_pbh(hi, lo);
                _mm512_storeu_si512(
                    dst.as_mut_ptr().add(b * 16) as *mut _,
                    std::mem::transmute::<__m512bh, __m512i>(v),
                );
            }
        }
        super::to_pairs_scalar(&src[full * 32..], &mut dst[full * 16..]);
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
}

/// The AMX tile path.
#[cfg(target_arch = "x86_64")]
mod amx {
    use super::{AMX_KP, NR};
    use std::arch::asm;

    /// The tile configuration of this thread for as long as it lives: eight tiles of
    /// 16 rows × 64 bytes (0–3 accumulators, 4–5 x rows, 6–7 panel halves).
    pub struct Tiles(());

    #[repr(C, align(64))]
    struct Config([u8; 64]);

    impl Tiles {
        /// # Safety
        /// The OS must have enabled AMX for this process (`features::amx_bf16`).
        pub unsafe fn configure() -> Tiles {
            let mut cfg = Config([0; 64]);
            cfg.0[0] = 1; // palette 1
            for t in 0..8 {
                cfg.0[16 + 2 * t] = 64; // bytes per row (u16, little-endian)
                cfg.0[48 + t] = 16; // rows
            }
            // SAFETY: `cfg` is a valid 64-byte palette-1 configuration, 64-byte aligned;
            // AMX is enabled (the caller's contract).
            unsafe { asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
            Tiles(())
        }
    }

    impl Drop for Tiles {
        fn drop(&mut self) {
            // SAFETY: tiles were configured by `configure` on this thread (a `Tiles` is
            // neither Send nor shared: it lives on the stack of `block`).
            unsafe { asm!("tilerelease", options(nostack, nomem)) };
        }
    }

    /// `c[32 × 32] (+)= a[32 rows × kc pairs] · panel[kc pairs × 32]`.
    ///
    /// # Safety
    /// Tiles configured on this thread ([`Tiles::configure`]); `kc % 16 == 0`; `a` holds
    /// 32 rows of stride `lda` words with `kc` words each; `panel` `kc * NR` words; `c` 32
    /// rows of stride `ldc` with 32 columns each.
    pub unsafe fn block(kc: usize, a: &[u32], lda: usize, panel: &[u32], c: &mut [f32], ldc: usize, load_c: bool) {
        debug_assert!(kc % AMX_KP == 0 && a.len() >= 31 * lda + kc && panel.len() >= kc * NR);
        debug_assert!(c.len() >= 31 * ldc + 32);
        let (sa, sb, sc) = (lda * 4, NR * 4, ldc * 4);
        let c0 = c.as_mut_ptr();
        // SAFETY (every tile load and store below): each touches 16 rows of 64 bytes at
        // the given stride, inside `a`, `panel` or `c` by the contract above.
        unsafe {
            let (c1, c2, c3) = (c0.add(16), c0.add(16 * ldc), c0.add(16 * ldc + 16));
            if load_c {
                asm!(
                    "tileloadd tmm0, [{c0} + {s}*1]",
                    "tileloadd tmm1, [{c1} + {s}*1]",
                    "tileloadd tmm2, [{c2} + {s}*1]",
                    "tileloadd tmm3, [{c3} + {s}*1]",
                    c0 = in(reg) c0, c1 = in(reg) c1, c2 = in(reg) c2, c3 = in(reg) c3, s = in(reg) sc,
                    options(nostack, readonly)
                );
            } else {
                asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
            }
            let (a0, a1, b) = (a.as_ptr(), a.as_ptr().add(16 * lda), panel.as_ptr());
            for p in (0..kc).step_by(AMX_KP) {
                asm!(
                    "tileloadd tmm4, [{a0} + {sa}*1]",
                    "tileloadd tmm5, [{a1} + {sa}*1]",
                    "tileloadd tmm6, [{b0} + {sb}*1]",
                    "tileloadd tmm7, [{b1} + {sb}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a0 = in(reg) a0.add(p), a1 = in(reg) a1.add(p),
                    b0 = in(reg) b.add(p * NR), b1 = in(reg) b.add(p * NR + 16),
                    sa = in(reg) sa, sb = in(reg) sb,
                    options(nostack, readonly)
                );
            }
            asm!(
                "tilestored [{c0} + {s}*1], tmm0",
                "tilestored [{c1} + {s}*1], tmm1",
                "tilestored [{c2} + {s}*1], tmm2",
                "tilestored [{c3} + {s}*1], tmm3",
                c0 = in(reg) c0, c1 = in(reg) c1, c2 = in(reg) c2, c3 = in(reg) c3, s = in(reg) sc,
                options(nostack)
            );
        }
    }
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
                    gemm(m, &x, &pw, &mut c, acc, threads).unwrap();
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
        to_pairs(&src, &mut a);
        to_pairs_scalar(&src, &mut b);
        assert_eq!(a, b);
    }
}
