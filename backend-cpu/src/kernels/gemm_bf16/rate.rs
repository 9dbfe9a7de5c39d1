//! The bf16 micro-kernel's own speed on one thread, apart from the product around it: the
//! AMX block (32 × 32 outputs over the deepest slice of k the product runs whole, as its
//! inner loop runs it: one x block against a group of panels, C loaded and stored per block) or
//! the AVX-512-BF16 register tile, on packed operands that stay in the caches. `npurt bench peak --kernels` prints it as a
//! share of the unit's measured peak.

use super::amx::{GROUP, KC_AMX};
use super::packed::{AMX_MR, KC, MR, NR};
use std::time::{Duration, Instant};

/// One micro-kernel's measured speed (plain data: Send and Sync).
#[derive(Clone, Debug, PartialEq)]
pub struct Bf16KernelRate {
    /// `"amx-bf16 32x32"` or `"avx512-bf16 12x32"`.
    pub kernel: String,
    /// k-pairs per call.
    pub kc: usize,
    /// Outputs of each call.
    pub rows: usize,
    pub cols: usize,
    /// Median GFLOP/s with every operand in L1/L2.
    pub in_cache_gflops: f64,
}

/// The AMX kernel (`amx`) or the AVX-512-BF16 tile timed on this thread: `runs` runs of
/// about `run_time` after a warm-up; `None` where this CPU (or the OS) does not offer it.
pub fn kernel_rate(amx: bool, run_time: Duration, runs: usize) -> Option<Bf16KernelRate> {
    let f = crate::features::get();
    if !(if amx { f.amx_bf16 } else { f.avx512bf16 }) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let (rows, kc, cols) = if amx { (AMX_MR, KC_AMX, GROUP * NR) } else { (MR, KC, NR) };
        // Packed operands of bf16 1/64 (any values do; these keep the sums small), in
        // 64-byte aligned lines as the product packs them.
        let line = super::packed::Line([0x3c80_3c80u32; 16]);
        let (al, bl) = (vec![line; (rows * kc).div_ceil(16)], vec![line; kc * cols / 16]);
        let (a, b): (&[u32], &[u32]) = (bytemuck::cast_slice(&al), bytemuck::cast_slice(&bl));
        let mut cl = vec![super::packed::Line::default(); rows * cols / 16];
        let c: &mut [f32] = bytemuck::cast_slice_mut(&mut cl);
        // SAFETY: `f.amx_bf16`: the OS enabled AMX; the tiles live on this thread until the
        // function returns.
        let _tiles = amx.then(|| unsafe { super::amx::Tiles::configure() });
        let call = |c: &mut [f32]| {
            if amx {
                for g in 0..GROUP {
                    let (bp, cp) = (b[g * kc * NR..].as_ptr(), c[g * NR..].as_mut_ptr());
                    // SAFETY: tiles configured above; `a` holds a packed 32-row block of `kc`
                    // pairs (a multiple of 16), `bp` one panel slice of `kc * NR` words, `cp`
                    // 32 rows of stride `cols` with 32 columns each.
                    unsafe { super::amx::block(kc, a.as_ptr(), bp, &super::amx::Ahead::NONE, cp, cols, true) };
                }
            } else {
                // SAFETY: `f.avx512bf16` (with AVX-512F); `a` holds `MR` rows of `kc` words,
                // `b` `kc * NR` words, `c` `MR` rows of `NR` columns.
                unsafe { super::x86::tile(rows, kc, a, kc, b, c, NR, NR, false) };
            }
        };
        let flops = 2.0 * (rows * cols * kc * 2) as f64;
        let mut timed = |calls: usize| {
            let t = Instant::now();
            for _ in 0..calls {
                call(c);
            }
            t.elapsed()
        };
        let mut calls = 1usize;
        let mut warm = timed(calls);
        while warm < run_time / 8 && calls < 1 << 24 {
            calls *= 2;
            warm = timed(calls);
        }
        let per_run = ((calls as f64 * run_time.as_secs_f64() / warm.as_secs_f64().max(1e-9)) as usize).max(1);
        let figures =
            (0..runs.max(1)).map(|_| flops * per_run as f64 / timed(per_run).as_secs_f64().max(1e-12) / 1e9).collect();
        let name = if amx { "amx-bf16" } else { "avx512-bf16" };
        Some(Bf16KernelRate {
            kernel: format!("{name} {rows}x{NR}"),
            kc,
            rows,
            cols,
            in_cache_gflops: crate::kernels::common::upper_median(figures),
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}
