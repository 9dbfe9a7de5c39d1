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
//! Where the CPU has AMX and the OS enabled it (`features::amx_bf16`) and the k-pairs are
//! a multiple of 16, the whole product runs on the tile unit instead (`amx.rs`): one task
//! per thread, cut by whole 32-row blocks where they share out evenly, else by ranges of
//! panels (so that both threads work at m = 32); each task packs its rows of x, rounded to
//! bf16, into tile-ready 64-byte aligned blocks and configures its tiles once. Blocks of
//! [`AMX_MR`]×[`NR`] outputs live in four 16×16 f32 accumulator tiles over a slice of at
//! most 128 k-pairs; per 16 k-pairs two tiles of x rows and two of the packed panel (the
//! panel layout is already AMX's pair-interleaved B layout) feed four `tdpbf16ps`,
//! software-pipelined. Per group of 4 panels and slice, every row block passes over the
//! group (its x slice stays in L1), and the first prefetches the panels' next slice into
//! L2. Rows and columns past the output's edge go through a scratch block.
//!
//! Files: `packed.rs` holds the constants and the k-pair layouts, `convert.rs` the
//! rounding of x to bf16 pairs, `x86.rs` the AVX-512-BF16 tile and conversion, `amx.rs` the
//! AMX tiles and tasks, `rate.rs` the micro-kernels' own speed (`bench peak --kernels`);
//! this file the product.

#[cfg(target_arch = "x86_64")]
mod amx;
mod convert;
mod packed;
mod rate;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "x86_64")]
pub(crate) use amx::Tiles;
pub use packed::{AMX_MR, KC, MR, NR, PackedInPlace, PackedWeight};
pub use rate::{Bf16KernelRate, kernel_rate};

use crate::features::CpuFeatures;
use convert::to_pairs;
use packed::AMX_KP;
use rayon::prelude::*;
use runtime::KernelError;

/// True when the AMX path runs for a product with `kp` k-pairs on features `f`.
fn use_amx(f: &CpuFeatures, kp: usize) -> bool {
    f.amx_bf16 && kp.is_multiple_of(AMX_KP) && cfg!(target_arch = "x86_64")
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
    let threads = threads.max(1);
    #[cfg(target_arch = "x86_64")]
    if use_amx(f, kp) {
        gemm_amx(f, m, x, w, c, accumulate, threads);
        return Ok(());
    }
    // x rounded to bf16 pairs, rows padded to an even k.
    let mut xb = vec![0u32; m * kp];
    let convert = |(i, dst): (usize, &mut [u32])| to_pairs(&x[i * k..(i + 1) * k], dst, f.avx512bf16);
    if threads > 1 && m * k >= 1 << 16 {
        xb.par_chunks_mut(kp).enumerate().for_each(convert);
    } else {
        xb.chunks_mut(kp).enumerate().for_each(convert);
    }
    let rows_per = m.div_ceil(threads).div_ceil(MR) * MR;
    let body = |(ci, cc): (usize, &mut [f32])| {
        let i0 = ci * rows_per;
        let rows = cc.len() / n;
        block(rows, &xb[i0 * kp..(i0 + rows) * kp], w, cc, accumulate);
    };
    if threads > 1 && m > MR {
        c[..m * n].par_chunks_mut(rows_per * n).enumerate().for_each(body);
    } else {
        body((0, &mut c[..m * n]));
    }
    Ok(())
}

/// How the AMX product is cut into one task per thread: `(row blocks, panels)` per task
/// along each axis (`rows_per` rows, `panels_per` panels), for `m` rows, `panels` panels.
/// Whole row blocks per thread where they divide evenly or are many (each thread packs
/// only its rows); else every thread takes all rows and a range of panels (small m).
fn amx_split(m: usize, panels: usize, threads: usize, flops: usize) -> (usize, usize) {
    let blocks = m.div_ceil(AMX_MR);
    // Below about 1 MFLOP a second thread costs more than it saves.
    let threads = if flops < 1 << 20 { 1 } else { threads };
    if threads == 1 {
        return (blocks * AMX_MR, panels);
    }
    if blocks.is_multiple_of(threads) || blocks >= 4 * threads || panels < threads {
        (blocks.div_ceil(threads) * AMX_MR, panels)
    } else {
        (blocks * AMX_MR, panels.div_ceil(threads))
    }
}

thread_local! {
    /// Each thread's packed x, kept between calls (no allocation per product).
    static PACKED_X: std::cell::RefCell<Vec<packed::Line>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The AMX product: one task per thread (see [`amx_split`]); each packs its rows of x into
/// tile-ready blocks, configures its tiles once, and runs its blocks over the whole k.
#[cfg(target_arch = "x86_64")]
fn gemm_amx(f: &CpuFeatures, m: usize, x: &[f32], w: &PackedWeight<'_>, c: &mut [f32], acc: bool, threads: usize) {
    let (n, k, kp) = (w.n, w.k, w.kp);
    let panels = n.div_ceil(NR);
    let (rows_per, panels_per) = amx_split(m, panels, threads, 2 * m * n * k);
    let tasks: Vec<(usize, usize)> =
        (0..m.div_ceil(rows_per)).flat_map(|ri| (0..panels.div_ceil(panels_per)).map(move |pj| (ri, pj))).collect();
    let c_ptr = SendPtr(c.as_mut_ptr());
    let run = |&(ri, pj): &(usize, usize)| {
        let (r0, r1) = (ri * rows_per, ((ri + 1) * rows_per).min(m));
        let (p0, p1) = (pj * panels_per, ((pj + 1) * panels_per).min(panels));
        PACKED_X.with_borrow_mut(|lines| {
            let len = amx::packed_len(r1 - r0, kp);
            if lines.len() * 16 < len {
                lines.resize(len.div_ceil(16), packed::Line::default());
            }
            // 64-byte aligned words: the tile loads of x run at full speed.
            let a: &mut [u32] = bytemuck::cast_slice_mut(lines);
            amx::pack_rows(x, k, r0, r1, kp, a, f.avx512bf16);
            // SAFETY: `use_amx` checked that the OS enabled AMX; the tiles live for this
            // task on this thread.
            let _tiles = unsafe { amx::Tiles::configure() };
            // SAFETY: tiles configured just above; `kp % 16 == 0` and `kp > 0` (`use_amx`,
            // `gemm`); `a` holds the task's packed rows; `w.data` the packed weight; `c_ptr`
            // is the `m × n` output `gemm` checked, borrowed mutably for this call, and the
            // tasks' (row range × panel range) blocks are disjoint.
            unsafe { amx::task(kp, n, a, &w.data, c_ptr.get(), (r0, r1), (p0, p1), acc) };
        });
    };
    if tasks.len() > 1 {
        tasks.par_iter().for_each(run);
    } else {
        tasks.iter().for_each(run);
    }
}

/// A raw output pointer shared by tasks that write disjoint parts of it.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: only used by `gemm_amx`, whose tasks write disjoint blocks.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}
impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// One thread's rows on AVX-512-BF16: blocks of k-pairs, then panels, then register tiles.
fn block(m: usize, xb: &[u32], w: &PackedWeight<'_>, c: &mut [f32], accumulate: bool) {
    let (n, kp) = (w.n, w.kp);
    for p0 in (0..kp).step_by(KC) {
        let kc = KC.min(kp - p0);
        let load_c = accumulate || p0 > 0;
        for pi in 0..n.div_ceil(NR) {
            let panel = &w.data[(pi * kp + p0) * NR..(pi * kp + p0 + kc) * NR];
            let cols = NR.min(n - pi * NR);
            for i0 in (0..m).step_by(MR) {
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
    use packed::to_pairs_scalar;

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

    /// Checks `gemm` on features `f` at `shapes`, both thread counts, with and without
    /// accumulation.
    fn check(f: &CpuFeatures, shapes: &[(usize, usize, usize)]) {
        for &(m, n, k) in shapes {
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 37.0).collect();
            let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 89) as f32 - 44.0) / 41.0)).collect();
            let c0: Vec<f32> = (0..m * n).map(|i| (i % 7) as f32 - 3.0).collect();
            let pw = PackedWeight::pack(&w, n, k).unwrap();
            for acc in [false, true] {
                let want = reference(m, n, k, &x, &w, &c0, acc);
                for threads in [1, 2] {
                    let mut c = c0.clone();
                    gemm(f, m, &x, &pw, &mut c, acc, threads).unwrap();
                    for (i, (a, b)) in c.iter().zip(&want).enumerate() {
                        let tol = 1e-4 * (1.0 + b.abs()) * (k as f32).sqrt();
                        let amx = f.amx_bf16;
                        assert!((a - b).abs() <= tol, "{m}x{n}x{k} acc={acc} t={threads} amx={amx} [{i}]: {a} vs {b}");
                    }
                }
            }
        }
    }

    /// Shapes for both paths; the AMX path takes those whose k-pairs are a multiple of 16
    /// (with leftover rows and columns through its scratch block, split by rows or by
    /// panels over two threads), the others run on AVX-512-BF16.
    const SHAPES: [(usize, usize, usize); 13] = [
        (1, 1, 1),
        (13, 33, 7),
        (12, 32, 256),
        (25, 70, 300),
        (7, 16, 2),
        (40, 40, 513),
        (70, 64, 512),
        (64, 80, 288),
        (32, 32, 32),
        (1, 96, 64),
        (33, 100, 96),
        (96, 65, 160),
        (128, 128, 8192),
    ];

    #[test]
    fn matches_f64_on_rounded_operands_at_every_edge() {
        if !available() {
            println!("skipped: this CPU has no AVX-512-BF16 (the bf16 unit is not offered here)");
            return;
        }
        let f = crate::features::get();
        println!("AMX path: {}", if f.amx_bf16 { "on" } else { "not on this CPU" });
        check(f, &SHAPES);
    }

    #[test]
    fn the_avx512_bf16_path_without_amx_matches_too() {
        if !available() {
            println!("skipped: this CPU has no AVX-512-BF16 (the bf16 unit is not offered here)");
            return;
        }
        let f = CpuFeatures { amx_bf16: false, ..crate::features::get().clone() };
        check(&f, &SHAPES);
    }

    #[test]
    fn work_is_split_so_that_both_threads_have_some_at_small_m() {
        let flops = |m: usize, n: usize| 2 * m * n * 768;
        // (rows per task, panels per task) for m rows, n / 32 panels, 2 threads.
        assert_eq!(amx_split(32, 48, 2, flops(32, 1536)), (32, 24));
        assert_eq!(amx_split(128, 96, 2, flops(128, 3072)), (64, 96));
        assert_eq!(amx_split(96, 24, 2, flops(96, 768)), (96, 12));
        assert_eq!(amx_split(512, 32, 2, flops(512, 1024)), (256, 32));
        assert_eq!(amx_split(1, 1, 2, flops(1, 32)), (32, 1));
        assert_eq!(amx_split(128, 96, 1, flops(128, 3072)), (128, 96));
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
