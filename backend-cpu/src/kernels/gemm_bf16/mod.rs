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
//! Where the CPU's `vdpbf16ps` runs at half its FMA's FLOP rate (Intel's, measured 86
//! against 175 GFLOP/s on one Emerald Rapids thread) and AMX is not used
//! (`CpuFeatures::bf16_on_fma`), the product runs on the f32 FMA kernel instead
//! (`gemm_packed::run_bf16_pairs`): each work item widens its panels of the packed weight
//! to f32 (a shift per half word) as the f32 product packs B, so the weight is still read
//! at half the bytes and x is not rounded to bf16.
//!
//! Where the CPU has AMX and the OS enabled it (`features::amx_bf16`) and the k-pairs are
//! a multiple of 16, the whole product runs on the tile unit instead (`amx.rs`). x is
//! rounded to bf16 and packed once per call into one shared buffer of tile-ready 64-byte
//! aligned blocks: the threads claim pieces of 8 rows until none is left, then wait until
//! every piece is packed (a piece is claimed only by a running task, so the wait ends).
//! Then one task per thread, each reading all of x and a range of the panels, or all of
//! the panels and a range of the rows, whichever makes each thread read less (so both
//! threads work at m = 32 and 128). Blocks of [`AMX_MR`]×[`NR`] outputs live in four
//! 16×16 f32 accumulator tiles over the whole k up to 512 k-pairs (k ≤ 1024; deeper
//! products in equal slices of at most 512); per 16 k-pairs two tiles of x rows and two of
//! the packed panel (the panel layout is already AMX's pair-interleaved B layout) feed four
//! `tdpbf16ps`, software-pipelined. Per group of 4 panels and slice (where k has several
//! slices, every group under one slice before the next), every row block passes over the
//! group and prefetches its share of the next group's or slice's panel data into L2; each
//! block prefetches the output lines of the block after it. A whole block that needs only its
//! sums goes straight between the tiles and the output; the others (at the output's edge,
//! or where earlier output is added, or the bias or GELU applied) are stored to a scratch
//! block in L1 and written to the output from there by the epilogue. A packing task that
//! panics poisons the shared wait: the product returns an error instead of hanging.
//!
//! Files: `packed.rs` holds the constants and the k-pair layouts, `convert.rs` the
//! rounding of x to bf16 pairs, `epilogue.rs` the bias and GELU of the output's way out, `x86.rs` the AVX-512-BF16 tile and conversion, `amx.rs` the
//! AMX tiles and tasks, `rate.rs` the micro-kernels' own speed (`bench peak --kernels`);
//! this file the product.

#[cfg(target_arch = "x86_64")]
mod amx;
mod convert;
mod epilogue;
mod packed;
mod rate;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "x86_64")]
pub(crate) use amx::Tiles;
pub use amx::load_config as load_tile_config;
pub use epilogue::Epilogue;
#[cfg(test)]
use epilogue::TUNE;
use epilogue::finish_row;
use epilogue::tune;
pub use packed::{AMX_MR, KC, MR, NR, PackedInPlace, PackedWeight};
pub use rate::{Bf16KernelRate, kernel_rate};

use crate::features::CpuFeatures;
pub(crate) use convert::to_pairs;
use packed::AMX_KP;
use rayon::prelude::*;
use runtime::KernelError;

/// True when the AMX path runs for a product with `kp` k-pairs on features `f`.
fn use_amx(f: &CpuFeatures, kp: usize) -> bool {
    f.amx_bf16 && kp.is_multiple_of(AMX_KP) && cfg!(target_arch = "x86_64")
}

/// Whether the units `f` asks for are ones this CPU has (`detected`): `CpuFeatures`' fields
/// are public, and one built by hand could claim AMX or AVX-512-BF16 where the CPU (or the
/// OS) does not offer them; their instructions would then fault.
pub(crate) fn check_units(f: &CpuFeatures, detected: &CpuFeatures) -> Result<(), KernelError> {
    if !f.avx512bf16 || !detected.avx512bf16 {
        return Err(KernelError::MissingFeature("AVX-512-BF16"));
    }
    if f.amx_bf16 && !detected.amx_bf16 {
        return Err(KernelError::MissingFeature("AMX-BF16 (enabled by the OS)"));
    }
    Ok(())
}

/// True when this CPU can run [`gemm`] (AVX-512-BF16 detected; a backend whose path is
/// forced below AVX-512 does not use it: see [`CpuFeatures::avx512bf16`]).
pub fn available() -> bool {
    crate::features::get().avx512bf16
}

/// `c[m×n] = x[m×k] · wᵀ + (if accumulate { c } else { 0 })`, `x` and `c` row-major and
/// contiguous, on the features `f` the backend selected (`ctx.features`): AVX-512-BF16 dot
/// products, or AMX tiles where `f` has them. Rows are split over `threads` (each thread
/// owns its rows of `c`). Units `f` claims that this CPU lacks are refused
/// ([`KernelError::MissingFeature`]).
pub fn gemm(
    f: &CpuFeatures,
    m: usize,
    x: &[f32],
    w: &PackedWeight<'_>,
    c: &mut [f32],
    accumulate: bool,
    threads: usize,
) -> Result<(), KernelError> {
    gemm_with(f, m, x, w, c, Epilogue { acc: accumulate, ..Epilogue::default() }, threads)
}

/// [`gemm`] with an [`Epilogue`]: `c = gelu?(x · wᵀ + (acc ? c : 0) + bias)`.
pub fn gemm_with(
    f: &CpuFeatures,
    m: usize,
    x: &[f32],
    w: &PackedWeight<'_>,
    c: &mut [f32],
    ep: Epilogue<'_>,
    threads: usize,
) -> Result<(), KernelError> {
    let (n, k, kp) = (w.n, w.k, w.kp);
    let (xs, cs) = (m.checked_mul(k), m.checked_mul(n));
    if xs.is_none_or(|l| x.len() < l) || cs.is_none_or(|l| c.len() < l) {
        return Err(KernelError::Internal(format!("bf16 gemm operands too short for {m}x{k}x{n}")));
    }
    if let Some(b) = ep.bias
        && b.len() < n
    {
        return Err(KernelError::TooShort { what: "bf16 gemm bias", needed: n, got: b.len() });
    }
    check_units(f, crate::features::get())?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let threads = threads.max(1);
    #[cfg(target_arch = "x86_64")]
    if kp > 0 && use_amx(f, kp) {
        return gemm_amx(f, m, x, w, c, ep, threads);
    }
    if kp == 0 {
        if !ep.acc {
            c[..m * n].fill(0.0);
        }
    } else if f.bf16_on_fma() {
        // The bias is added over the finished rows below, as on the dot-product path: the
        // kernel's own bias would round `(c + sum) + bias` in another order across k slices.
        let beta = if ep.acc { 1.0 } else { 0.0 };
        crate::kernels::gemm_packed::run_bf16_pairs((m, n, k), x, &w.data, beta, c, threads);
    } else {
        gemm_avx512(f, m, x, w, &mut c[..m * n], ep.acc, threads);
    }
    if ep.bias.is_some() || ep.gelu {
        let isa = f.isa;
        let tail = |row: &mut [f32]| finish_row(isa, row, ep.bias, ep.gelu);
        if threads > 1 && m * n >= 1 << 15 {
            c[..m * n].par_chunks_mut(n).for_each(tail);
        } else {
            c[..m * n].chunks_mut(n).for_each(tail);
        }
    }
    Ok(())
}

/// The product on AVX-512-BF16 register tiles (no bias or GELU).
fn gemm_avx512(f: &CpuFeatures, m: usize, x: &[f32], w: &PackedWeight<'_>, c: &mut [f32], acc: bool, threads: usize) {
    let (n, k, kp) = (w.n, w.k, w.kp);
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
        block(rows, &xb[i0 * kp..(i0 + rows) * kp], w, cc, acc);
    };
    if threads > 1 && m > MR {
        c.par_chunks_mut(rows_per * n).enumerate().for_each(body);
    } else {
        body((0, c));
    }
}

/// How the AMX product is cut into one task per thread: `(rows, panels)` per task along
/// each axis, for `m` rows and `panels` panels (x is packed once, shared by the tasks).
/// Every task reads all of x and a range of the panels, or all of the panels and a range of
/// the rows: whichever makes each thread read less (x's rows against w's columns), where
/// that axis has enough for every thread.
fn amx_split(m: usize, panels: usize, threads: usize, flops: usize) -> (usize, usize) {
    let blocks = m.div_ceil(AMX_MR);
    // Below about 1 MFLOP a second thread costs more than it saves.
    let threads = if flops < 1 << 20 { 1 } else { threads };
    if threads == 1 {
        return (blocks * AMX_MR, panels);
    }
    let by_panels = tune(1) == 0 && panels >= threads && (m <= panels * NR || blocks < threads);
    if by_panels { (blocks * AMX_MR, panels.div_ceil(threads)) } else { (blocks.div_ceil(threads) * AMX_MR, panels) }
}

thread_local! {
    /// The calling thread's packed x, kept between calls (no allocation per product).
    static PACKED_X: std::cell::Cell<Vec<packed::Line>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Rows of x per piece of the shared packing (the tasks claim pieces until none is left).
const PACK_ROWS: usize = 8;

/// The AMX product: x packed once into a shared buffer of tile-ready blocks (the tasks
/// claim pieces of rows until every piece is claimed, then wait until every piece is
/// packed), then one task per thread (see [`amx_split`]) that configures its tiles once
/// and runs its blocks. A piece whose packing panics poisons the wait: every task then
/// returns [`KernelError::Internal`] instead of waiting for a piece that never comes.
#[cfg(target_arch = "x86_64")]
fn gemm_amx(
    f: &CpuFeatures,
    m: usize,
    x: &[f32],
    w: &PackedWeight<'_>,
    c: &mut [f32],
    ep: Epilogue<'_>,
    threads: usize,
) -> Result<(), KernelError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (n, k, kp) = (w.n, w.k, w.kp);
    let panels = n.div_ceil(NR);
    let (rows_per, panels_per) = amx_split(m, panels, threads, 2 * m * n * k);
    let tasks: Vec<(usize, usize)> =
        (0..m.div_ceil(rows_per)).flat_map(|ri| (0..panels.div_ceil(panels_per)).map(move |pj| (ri, pj))).collect();
    // Taken out of the thread-local for the call: a thread that waits in `par_iter` may run
    // another product meanwhile.
    let mut lines = PACKED_X.take();
    let len = amx::packed_len(m, kp);
    if lines.len() * 16 < len {
        lines.resize(len.div_ceil(16), packed::Line::default());
    }
    // 64-byte aligned words: the tile loads of x run at full speed.
    let a_ptr = SendPtr(lines.as_mut_ptr().cast::<u32>());
    let padded = m.div_ceil(AMX_MR) * AMX_MR;
    let pieces = if tune(3) != 0 { 0 } else { padded.div_ceil(PACK_ROWS) };
    let (claimed, packed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let poisoned = AtomicBool::new(false);
    let poison = || KernelError::Internal("packing x for the bf16 AMX product panicked".into());
    let c_ptr = SendPtr(c.as_mut_ptr());
    let run = |&(ri, pj): &(usize, usize)| -> Result<(), KernelError> {
        while !poisoned.load(Ordering::Relaxed) {
            let p = claimed.fetch_add(1, Ordering::Relaxed);
            if p >= pieces {
                break;
            }
            let rows = (p * PACK_ROWS, ((p + 1) * PACK_ROWS).min(padded));
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                #[cfg(test)]
                tests::panic_hook(m, p);
                // SAFETY: `a_ptr` holds `packed_len(m, kp)` words (resized above) that no
                // reference covers during the tasks; piece `p` (its rows' places) is claimed
                // by this task alone; `rows.1 <= padded`.
                unsafe { amx::pack_rows(x, m, k, rows, kp, a_ptr.get(), f.avx512bf16) };
            }));
            if done.is_err() {
                poisoned.store(true, Ordering::Release);
                return Err(poison());
            }
            packed.fetch_add(1, Ordering::Release);
        }
        // Every piece is claimed, each by a task that is packing it, or the packing
        // panicked and poisoned the wait: either way the wait ends.
        let mut spins = 0u32;
        while packed.load(Ordering::Acquire) < pieces {
            if poisoned.load(Ordering::Acquire) {
                return Err(poison());
            }
            spins += 1;
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: every piece is packed (acquired above) and no one writes x's words any more.
        let a = unsafe { std::slice::from_raw_parts(a_ptr.get().cast_const(), len) };
        let (r0, r1) = (ri * rows_per, ((ri + 1) * rows_per).min(m));
        let (p0, p1) = (pj * panels_per, ((pj + 1) * panels_per).min(panels));
        // SAFETY: `use_amx` checked that the OS enabled AMX; the tiles live for this task on
        // this thread.
        let _tiles = unsafe { amx::Tiles::configure() };
        // Tiles configured just above; AVX-512F comes with AVX-512-BF16 (`gemm_with`
        // checked it); `kp % 16 == 0` and `kp > 0` (`use_amx`, `gemm_with`); `a` from row
        // `r0` (a whole block) holds the task's packed rows; `w.data` the packed weight;
        // `ep.bias` has `n` values (`gemm_with` checked); `c_ptr` is the `m × n` output
        // `gemm_with` checked, borrowed mutably for this call.
        // SAFETY: `amx::task`'s contract holds as listed; the tasks' blocks are disjoint.
        unsafe { amx::task(kp, n, &a[r0 * kp..], &w.data, c_ptr.get(), (r0, r1), (p0, p1), ep, f.isa) };
        Ok(())
    };
    let r = if tasks.len() > 1 { tasks.par_iter().try_for_each(run) } else { tasks.iter().try_for_each(run) };
    PACKED_X.set(lines);
    r
}

/// A raw pointer shared by tasks that write disjoint parts of what it points to.
struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used by `gemm_amx`, whose tasks write disjoint parts.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
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
    use crate::kernels::simd_math;
    use half::bf16;
    use packed::to_pairs_scalar;

    /// The same product in f64 from the bf16 weight and x rounded to bf16 where `round_x`
    /// (the dot-product and AMX paths; the FMA path widens the weight and keeps x in f32).
    #[allow(clippy::too_many_arguments)]
    fn reference(
        m: usize,
        n: usize,
        k: usize,
        x: &[f32],
        w: &[bf16],
        c0: &[f32],
        acc: bool,
        round_x: bool,
    ) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = if acc { c0[i * n + j] as f64 } else { 0.0 };
                for p in 0..k {
                    let xv = if round_x { bf16::from_f32(x[i * k + p]).to_f64() } else { x[i * k + p] as f64 };
                    s += xv * w[j * k + p].to_f64();
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
                let want = reference(m, n, k, &x, &w, &c0, acc, !f.bf16_on_fma());
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
    const SHAPES: [(usize, usize, usize); 16] = [
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
        (40, 70, 1056),
        (65, 33, 1024),
        // An odd k on the AMX path: the last step of each row is half a pair short.
        (33, 40, 95),
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
        let f = CpuFeatures { amx_bf16: false, bf16_dot_half_rate: false, ..crate::features::get().clone() };
        check(&f, &SHAPES);
    }

    #[test]
    fn the_fma_path_with_the_weight_widened_matches_too() {
        if !available() || crate::features::get().isa != crate::Isa::Avx512 {
            println!("skipped: this CPU has no AVX-512-BF16 (the bf16 products are not offered here)");
            return;
        }
        let f = CpuFeatures { amx_bf16: false, bf16_dot_half_rate: true, ..crate::features::get().clone() };
        assert!(f.bf16_on_fma());
        check(&f, &SHAPES);
    }

    /// The fused epilogue against the unfused pair, bit for bit: the product (with `acc`),
    /// then the bias added and GELU applied as the `BiasGelu` kernel computes them.
    fn check_epilogue(f: &CpuFeatures) {
        for &(m, n, k) in &SHAPES {
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 97.0).collect();
            let w: Vec<bf16> = (0..n * k).map(|i| bf16::from_f32(((i * 53 % 89) as f32 - 44.0) / 141.0)).collect();
            let bias: Vec<f32> = (0..n).map(|j| (j % 5) as f32 * 0.25 - 0.5).collect();
            let c0: Vec<f32> = (0..m * n).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
            let pw = PackedWeight::pack(&w, n, k).unwrap();
            for (acc, gelu, threads) in [(false, true, 1), (false, true, 2), (true, true, 2), (false, false, 2)] {
                let mut want = c0.clone();
                gemm(f, m, &x, &pw, &mut want, acc, threads).unwrap();
                for row in want.chunks_mut(n) {
                    let t: Vec<f32> = row.iter().zip(&bias).map(|(v, b)| v + b).collect();
                    if gelu {
                        // What `fast::gelu_erf_map` computes on the AVX-512 path.
                        assert_eq!(f.isa, crate::Isa::Avx512);
                        row.iter_mut().zip(&t).for_each(|(d, &s)| *d = simd_math::gelu_erf_approx::<true>(s));
                    } else {
                        row.copy_from_slice(&t);
                    }
                }
                let mut got = c0.clone();
                let ep = Epilogue { acc, bias: Some(&bias), gelu };
                gemm_with(f, m, &x, &pw, &mut got, ep, threads).unwrap();
                let amx = f.amx_bf16;
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{m}x{n}x{k} {ep:?} t={threads} amx={amx} [{i}]: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn the_bias_and_gelu_epilogue_matches_the_unfused_pair_bit_for_bit() {
        if !available() {
            println!("skipped: this CPU has no AVX-512-BF16 (the bf16 unit is not offered here)");
            return;
        }
        let f = crate::features::get();
        println!("AMX path: {}", if f.amx_bf16 { "on" } else { "not on this CPU" });
        check_epilogue(f);
        let base = crate::features::without_amx();
        for half_rate in [false, true] {
            check_epilogue(&CpuFeatures { bf16_dot_half_rate: half_rate, ..base.clone() });
        }
    }

    #[test]
    fn a_short_bias_is_an_error() {
        if !available() {
            println!("skipped: this CPU has no AVX-512-BF16 (the bf16 unit is not offered here)");
            return;
        }
        let pw = PackedWeight::pack(&[bf16::ONE; 40 * 32], 40, 32).unwrap();
        let mut c = vec![0f32; 40 * 40];
        let ep = Epilogue { bias: Some(&[0.0; 39]), ..Epilogue::default() };
        let r = gemm_with(crate::features::get(), 40, &[1.0; 40 * 32], &pw, &mut c, ep, 2);
        assert!(matches!(r, Err(KernelError::TooShort { needed: 40, got: 39, .. })), "{r:?}");
    }

    #[test]
    fn units_the_cpu_lacks_are_refused_not_run() {
        let base = crate::features::get().clone();
        let with = |bf16: bool, amx: bool| CpuFeatures { avx512bf16: bf16, amx_bf16: amx, ..base.clone() };
        let missing = |r: Result<(), KernelError>| matches!(r, Err(KernelError::MissingFeature(_)));
        // Detected without AMX: a request for AMX is refused, AVX-512-BF16 alone is not.
        assert!(missing(check_units(&with(true, true), &with(true, false))));
        assert!(check_units(&with(true, false), &with(true, false)).is_ok());
        // Detected without AVX-512-BF16: every request is refused.
        assert!(missing(check_units(&with(true, false), &with(false, false))));
        assert!(missing(check_units(&with(false, false), &with(true, true))));
        assert!(check_units(&with(true, true), &with(true, true)).is_ok());
        // Through `gemm` on this CPU: a hand-built claim of a unit it lacks is an error.
        let claim = with(true, true);
        let pw = PackedWeight::pack(&[half::bf16::ONE; 32 * 32], 32, 32).unwrap();
        let mut c = vec![0f32; 32 * 32];
        let r = gemm(&claim, 32, &[1.0; 32 * 32], &pw, &mut c, false, 1);
        if base.amx_bf16 {
            println!("this CPU has AMX: the refusal through gemm is checked with the units above only");
            r.unwrap();
            assert!(c.iter().all(|&v| v == 32.0));
        } else {
            let shown = format!("{r:?}");
            assert!(missing(r), "{shown}");
        }
    }

    #[test]
    fn work_is_split_so_that_both_threads_have_some_at_small_m() {
        let flops = |m: usize, n: usize| 2 * m * n * 768;
        // (rows per task, panels per task) for m rows, n / 32 panels, 2 threads.
        assert_eq!(amx_split(32, 48, 2, flops(32, 1536)), (32, 24));
        assert_eq!(amx_split(128, 96, 2, flops(128, 3072)), (128, 48));
        assert_eq!(amx_split(96, 24, 2, flops(96, 768)), (96, 12));
        assert_eq!(amx_split(512, 32, 2, flops(512, 1024)), (512, 16));
        // More rows than columns: each thread takes half of the rows and every panel.
        assert_eq!(amx_split(512, 12, 2, flops(512, 384)), (256, 12));
        assert_eq!(amx_split(100, 1, 2, flops(100, 32)), (64, 1));
        assert_eq!(amx_split(1, 1, 2, flops(1, 32)), (32, 1));
        assert_eq!(amx_split(128, 96, 1, flops(128, 3072)), (128, 96));
    }

    /// Prints the AMX micro-kernel's in-cache rate and the product's at the BERT shapes,
    /// per variant of [`TUNE`] (`VARIANTS="slice,rows,write,nopack,noprefetch;..."`, `THREADS`,
    /// `SHAPE`, `COLD=MiB`, `BIAS=1` (see below); `CPU=1`
    /// times by the process's CPU time, for a host whose other load comes and goes).
    #[test]
    #[ignore = "a timing aid: prints GFLOP/s, asserts nothing"]
    fn timing() {
        use std::sync::atomic::Ordering;
        let f = crate::features::get();
        if !f.amx_bf16 {
            println!("skipped: no AMX here");
            return;
        }
        let env = |name: &str| std::env::var(name).ok();
        // CPU time of this process (`CPU=1`: per thread of the product) or of this thread.
        let cpu = |clock| {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid timespec to write.
            unsafe { libc::clock_gettime(clock, &mut ts) };
            ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
        };
        // SAFETY: `f.amx_bf16`: the OS enabled AMX; the tiles live until the block's end.
        let tiles = unsafe { amx::Tiles::configure() };
        for kc in [128usize, 192, 384, 512] {
            let a = vec![packed::Line([0x3c80_3c80u32; 16]); AMX_MR * kc / 16];
            let b = vec![packed::Line([0x3c80_3c80u32; 16]); amx::GROUP * kc * NR / 16];
            let mut cl = vec![packed::Line::default(); AMX_MR * amx::GROUP * NR / 16];
            let (a, b): (&[u32], &[u32]) = (bytemuck::cast_slice(&a), bytemuck::cast_slice(&b));
            let c: &mut [f32] = bytemuck::cast_slice_mut(&mut cl);
            let mut best = f64::MAX;
            for _ in 0..20 {
                let t0 = cpu(libc::CLOCK_THREAD_CPUTIME_ID);
                for _ in 0..50 {
                    for g in 0..amx::GROUP {
                        let (bp, cp) = (b[g * kc * NR..].as_ptr(), c[g * NR..].as_mut_ptr());
                        // SAFETY: tiles configured; `a` one packed block of `kc` pairs, `bp`
                        // a panel slice of `kc * NR` words, `cp` 32 rows of 32 at stride 128.
                        unsafe { amx::block(kc, a.as_ptr(), bp, &amx::Ahead::NONE, cp, amx::GROUP * NR, false) };
                    }
                }
                best = best.min(cpu(libc::CLOCK_THREAD_CPUTIME_ID) - t0);
            }
            let g = 50.0 * (amx::GROUP * 2 * AMX_MR * NR * kc * 2) as f64 / best / 1e9;
            println!("micro-kernel kc={kc}: {g:.0} GF/s by thread CPU time ({:.0} % of 2416)", g / 24.16);
        }
        drop(tiles);
        let shapes = [
            (512, 1024, 1024),
            (512, 1024, 4096),
            (128, 768, 768),
            (128, 768, 3072),
            (128, 3072, 768),
            (32, 384, 384),
            (32, 384, 1536),
            (512, 4096, 1024),
        ];
        let variants: Vec<Vec<usize>> = env("VARIANTS")
            .unwrap_or("0,0;128,0;0,1".into())
            .split(';')
            .map(|v| v.split(',').map(|t| t.parse().unwrap()).collect())
            .collect();
        let threads: usize = env("THREADS").map_or(2, |t| t.parse().unwrap());
        let by_cpu = env("CPU").is_some();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        for (m, k, n) in shapes {
            if env("SHAPE").is_some_and(|o| o != format!("{m}x{k}x{n}")) {
                continue;
            }
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
            let w: Vec<bf16> =
                (0..n * k).map(|i| bf16::from_f32(((i * 104_729) % 1000) as f32 / 1000.0 - 0.5)).collect();
            let pw = PackedWeight::pack(&w, n, k).unwrap();
            // `COLD=MiB`: copies of the weight over that many MiB, one per call in turn, so
            // that the weight comes from memory or the LLC as inside a model.
            let cold: usize = env("COLD").map_or(0, |c| c.parse().unwrap());
            let copies: Vec<PackedWeight<'static>> = (0..(cold << 20).div_ceil(pw.bytes()).max(1))
                .map(|_| match &pw.data {
                    packed::Words::Owned(v) => PackedWeight { n, k, kp: pw.kp, data: packed::Words::Owned(v.clone()) },
                    packed::Words::Borrowed(_) => unreachable!("packed here"),
                })
                .collect();
            let mut turn = 0;
            let mut c = vec![0f32; m * n];
            // `BIAS=1`: with a bias, as a Linear node runs it.
            let bias: Vec<f32> = (0..n).map(|j| j as f32 * 1e-3).collect();
            let ep = Epilogue { bias: env("BIAS").map(|_| &bias[..]), ..Epilogue::default() };
            let mut times = vec![Vec::new(); variants.len()];
            for _round in 0..15 {
                for (v, t) in variants.iter().zip(&mut times) {
                    for (i, t) in TUNE.iter().enumerate() {
                        t.store(v.get(i).copied().unwrap_or(0), Ordering::Relaxed);
                    }
                    pool.install(|| {
                        gemm(f, m, &x, &pw, &mut c, false, threads).unwrap();
                        for _ in 0..10 {
                            turn += 1;
                            let pw = &copies[turn % copies.len()];
                            let (t0, c0) = (std::time::Instant::now(), cpu(libc::CLOCK_PROCESS_CPUTIME_ID));
                            gemm_with(f, m, &x, pw, &mut c, ep, threads).unwrap();
                            let used = (cpu(libc::CLOCK_PROCESS_CPUTIME_ID) - c0) / threads as f64;
                            t.push(if by_cpu { used } else { t0.elapsed().as_secs_f64() });
                        }
                    });
                }
            }
            for (v, t) in variants.iter().zip(&mut times) {
                t.sort_by(f64::total_cmp);
                let g = |s: f64| 2.0 * (m * n * k) as f64 / s / 1e9;
                let pct = |s: f64| 100.0 * g(s) / (2416.0 * threads as f64);
                let (b, q, h) = (t[0], t[t.len() / 4], t[t.len() / 2]);
                println!(
                    "{m}x{k}x{n} t={threads} v={v:?} best {:.0} GF/s ({:.0} %) p25 {:.0} ({:.0} %) median {:.0} ({:.0} %)",
                    g(b),
                    pct(b),
                    g(q),
                    pct(q),
                    g(h),
                    pct(h)
                );
            }
        }
        TUNE.iter().for_each(|t| t.store(0, Ordering::Relaxed));
    }

    /// The row count at which [`panic_hook`] makes the packing of piece 1 panic (0: never).
    /// Only the poison test sets it, to a row count no other test uses.
    static PANIC_AT_M: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// Called by `gemm_amx` before it packs piece `piece` of an `m`-row x.
    pub(super) fn panic_hook(m: usize, piece: usize) {
        if piece == 1 && m == PANIC_AT_M.load(std::sync::atomic::Ordering::Relaxed) {
            panic!("forced panic while packing piece {piece} (test hook)");
        }
    }

    #[test]
    fn a_panic_while_packing_x_is_an_error_not_a_hang() {
        let f = crate::features::get();
        if !f.amx_bf16 {
            println!("skipped: no AMX here (the shared packing runs on the AMX path only)");
            return;
        }
        // 977 rows: 123 pieces of 8, used by no other test.
        let (m, n, k) = (977, 64, 64);
        PANIC_AT_M.store(m, std::sync::atomic::Ordering::Relaxed);
        let pw = PackedWeight::pack(&vec![bf16::ONE; n * k], n, k).unwrap();
        let x = vec![1f32; m * k];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for threads in [1, 2] {
            let mut c = vec![0f32; m * n];
            let r = pool.install(|| gemm(f, m, &x, &pw, &mut c, false, threads));
            assert!(matches!(&r, Err(KernelError::Internal(s)) if s.contains("panicked")), "t={threads}: {r:?}");
        }
        // The next product (another row count) runs as before.
        let mut c = vec![0f32; 64 * n];
        pool.install(|| gemm(f, 64, &x, &pw, &mut c, false, 2)).unwrap();
        assert!(c.iter().all(|&v| v == k as f32));
        PANIC_AT_M.store(0, std::sync::atomic::Ordering::Relaxed);
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
