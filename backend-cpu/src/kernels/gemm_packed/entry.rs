//! The one entry point of the packed GEMM: the checks of an [`Sgemm`] and the dispatch
//! to its path's micro-kernel, with B packed per call or packed once.

use super::driver::{self, BPanels};
use super::layout::{Blocking, MicroKernel, Problem, even_block, min_len};
use super::operands::{BMatrix, Sgemm, Strided};
use super::paths::{kernel_name, supported};
use super::scalar::ScalarKernel;
#[cfg(target_arch = "x86_64")]
use super::x86;
use crate::features::Isa;

/// Problems smaller than this (`m·n·k`) run single-threaded.
const PAR_THRESHOLD: usize = 64 * 64 * 64;

/// Runs `g` (see [`Sgemm`] for what it computes and its preconditions; a broken one
/// panics, never reads or writes out of bounds).
pub(crate) fn run(g: Sgemm<'_>) {
    run_blocked(g, None);
}

/// [`run`] with B packed per call under `blocking` (default: the kernel's own; a packed
/// B keeps the blocking it was packed for).
pub(super) fn run_blocked(g: Sgemm<'_>, blocking: Option<Blocking>) {
    let Sgemm { isa, m, n, k, alpha, a, b, beta, bias, c, ldc, threads } = g;
    if m == 0 || n == 0 {
        return;
    }
    if let BMatrix::Packed { layout, data } = b {
        assert!(layout.is_for(isa), "sgemm: packed B was made for {}, not {isa}", layout.isa());
        assert!((layout.k, layout.n) == (k, n), "sgemm: packed B is {}x{}, not {k}x{n}", layout.k, layout.n);
        assert!(data.len() >= layout.len(), "sgemm: packed B has {} floats, needs {}", data.len(), layout.len());
    }
    assert!(bias.is_none_or(|v| v.len() >= n), "sgemm: bias shorter than n = {n}");
    // C is written through raw pointers: these checks are what make that sound.
    assert!(m == 1 || ldc >= n, "sgemm: ldc ({ldc}) < n ({n})");
    let c_len = min_len(m, n, ldc, 1).expect("sgemm: C extent overflows usize");
    assert!(c.len() >= c_len, "sgemm: c.len() = {} < required {c_len}", c.len());

    if k == 0 || alpha == 0.0 {
        scale_c(m, n, beta, c, ldc);
        if let Some(v) = bias {
            add_rows(m, n, beta, &v[..n], c, ldc);
        }
        return;
    }
    let packed = matches!(b, BMatrix::Packed { .. });
    let a_fits = min_len(m, k, a.rs, a.cs).is_some_and(|l| a.data.len() >= l);
    if packed {
        assert!(a_fits, "sgemm: `a` too short for {m}x{k} with strides ({}, {})", a.rs, a.cs);
    } else {
        debug_assert!(a_fits, "sgemm: `a` too short for {m}x{k} with strides ({}, {})", a.rs, a.cs);
    }
    let (bs, b) = match b {
        BMatrix::Strided(s) => {
            debug_assert!(
                min_len(k, n, s.rs, s.cs).is_some_and(|l| s.data.len() >= l),
                "sgemm: `b` too short for {k}x{n} with strides ({}, {})",
                s.rs,
                s.cs
            );
            (s, Panels::PerCall(blocking))
        }
        BMatrix::Packed { layout, data } => {
            (Strided { data: &[], rs: 0, cs: 0 }, Panels::Packed(layout.kc(), BPanels::Prepacked(data)))
        }
    };
    let p = Problem { m, n, k, alpha, a: a.data, rsa: a.rs, csa: a.cs, b: bs.data, rsb: bs.rs, csb: bs.cs, beta, ldc };
    let work = m.saturating_mul(n).saturating_mul(k);
    let threads = if work < PAR_THRESHOLD { 1 } else { threads.max(1) };
    // Cheap (the features are detected once) and keeps the soundness argument local.
    assert!(supported(isa), "sgemm: kernel {} not supported by this CPU", kernel_name(isa));
    dispatch(isa, &p, b, bias, c, threads);
}

/// `c[m×n] = x[m×k] · wᵀ + beta · c` for a bf16 weight `w` (`[n, k]`)
/// in the bf16 product's k-pair panels (`words`: `[n.div_ceil(32)][k.div_ceil(2)][32]`),
/// on the AVX-512 FMA micro-kernel: each item widens its B panels to f32 as it packs them
/// ([`BPanels::Bf16Pairs`]), so the weight is read at half the bytes and multiplied at the
/// FMA's rate. `x` and `c` are row-major and contiguous. Panics where the CPU has no
/// AVX-512F or an operand is shorter than the shapes say (never reads out of bounds).
pub(crate) fn run_bf16_pairs(
    (m, n, k): (usize, usize, usize),
    x: &[f32],
    words: &[u32],
    beta: f32,
    c: &mut [f32],
    threads: usize,
) {
    const W: usize = driver::WIDEN_NR;
    let kp = k.div_ceil(2);
    let need = |a: usize, b: usize| a.checked_mul(b).expect("sgemm: bf16 operand size overflows usize");
    assert!(x.len() >= need(m, k), "sgemm: x shorter than {m}x{k}");
    assert!(c.len() >= need(m, n), "sgemm: c shorter than {m}x{n}");
    assert!(words.len() >= need(need(n.div_ceil(W), kp), W), "sgemm: bf16 panels shorter than [{n}, {k}]");
    assert!(supported(Isa::Avx512), "sgemm: the bf16 weights widen into the AVX-512 kernel only");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        scale_c(m, n, beta, c, n);
        return;
    }
    let p = Problem { m, n, k, alpha: 1.0, a: x, rsa: k, csa: 1, b: &[], rsb: 0, csb: 0, beta, ldc: n };
    let threads = if m.saturating_mul(n).saturating_mul(k) < PAR_THRESHOLD { 1 } else { threads.max(1) };
    // The AVX-512 kernels' panels are `WIDEN_NR` (32) wide, as the words' are (`drive` checks).
    dispatch(Isa::Avx512, &p, Panels::Bf16Pairs(BPanels::Bf16Pairs { words, kp }), None, c, threads);
}

/// Where a product's B panels come from.
enum Panels<'a> {
    /// Packed per call from the problem's B, under this blocking (default: the kernel's).
    PerCall(Option<Blocking>),
    /// Packed once in slices of this depth, read under the kernel's own blocking.
    Packed(usize, BPanels<'a>),
    /// A bf16 weight's k-pair panels ([`BPanels::Bf16Pairs`]), widened per item under the
    /// kernel's own blocking in k slices of an even depth.
    Bf16Pairs(BPanels<'a>),
}

/// Runs the product on `isa`'s micro-kernel (the 8-row AVX-512 one where `m` suits it).
fn dispatch(isa: Isa, p: &Problem<'_>, b: Panels<'_>, bias: Option<&[f32]>, c: &mut [f32], threads: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `supported(isa)` was just asserted: AVX-512F (with AVX2 and FMA) is
        // available, which is `drive`'s requirement for this kernel; a packed B holds
        // `layout.len()` floats (asserted), which the 8-row kernel reads as the 12-row one does.
        Isa::Avx512 if x86::eight_rows(p.m) => unsafe { drive::<x86::Avx512x8>(p, b, bias, c, threads) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx512 => unsafe { drive::<x86::Avx512>(p, b, bias, c, threads) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `supported(isa)` was just asserted: AVX2 and FMA are available.
        Isa::Avx2Fma => unsafe { drive::<x86::Avx2>(p, b, bias, c, threads) },
        // SAFETY: the scalar kernel has no CPU-feature requirement.
        _ => unsafe { drive::<ScalarKernel>(p, b, bias, c, threads) },
    }
}

/// [`driver::drive`] with B packed per call (under the given blocking, default: the
/// kernel's own) or packed once (under the kernel's own blocking).
///
/// # Safety
/// As [`driver::drive`]'s: the CPU supports `K`'s target features.
unsafe fn drive<K: MicroKernel>(p: &Problem<'_>, b: Panels<'_>, bias: Option<&[f32]>, c: &mut [f32], threads: usize) {
    match b {
        Panels::PerCall(blocking) => {
            let blk = blocking.unwrap_or(K::BLOCKING);
            // SAFETY: forwarded (the CPU supports `K`); B is read from the problem.
            unsafe { driver::drive::<K>(p, blk, even_block(p.k, blk.kc, 1), BPanels::PerCall, bias, c, threads) }
        }
        // SAFETY: forwarded.
        Panels::Packed(kc, b) => unsafe { driver::drive::<K>(p, K::BLOCKING, kc, b, bias, c, threads) },
        Panels::Bf16Pairs(b) => {
            let kc = even_block(p.k, K::BLOCKING.kc, 2);
            // SAFETY: forwarded; the k slices are even, as `Bf16Pairs` needs.
            unsafe { driver::drive::<K>(p, K::BLOCKING, kc, b, bias, c, threads) }
        }
    }
}

/// `C = beta * C` (C set to 0 without being read when `beta == 0`).
fn scale_c(m: usize, n: usize, beta: f32, c: &mut [f32], ldc: usize) {
    if beta == 1.0 {
        return;
    }
    for i in 0..m {
        let row = &mut c[i * ldc..i * ldc + n];
        if beta == 0.0 {
            row.fill(0.0);
        } else {
            row.iter_mut().for_each(|x| *x *= beta);
        }
    }
}

/// Adds `bias` to every row of C (copies it where `beta == 0`: C holds zeros).
fn add_rows(m: usize, n: usize, beta: f32, bias: &[f32], c: &mut [f32], ldc: usize) {
    for i in 0..m {
        let row = &mut c[i * ldc..i * ldc + n];
        if beta == 0.0 {
            row.copy_from_slice(bias);
        } else {
            row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
        }
    }
}
